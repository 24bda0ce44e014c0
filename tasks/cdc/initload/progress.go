package initload

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// progress counts what the load copied, for its log lines and its
// outputs.
type progress struct {
	start    time.Time
	estimate int64 // the tables' rows by pg_class.reltuples
	total    int   // chunks
	workers  int
	n, b, c  atomic.Int64 // rows, bytes, chunks done
}

func newProgress(tables []*Table, chunks, workers int) *progress {
	p := &progress{start: time.Now(), total: chunks, workers: workers}
	for _, t := range tables {
		p.estimate += t.estimate
	}
	return p
}

func (p *progress) rows(t *Table, n int64) {
	t.rows.Add(n)
	p.n.Add(n)
}

func (p *progress) chunk(bytes int64) {
	p.b.Add(bytes)
	p.c.Add(1)
}

// line says how far the load is: rows of the estimate, bytes, chunks,
// rate and, from the estimate, the time left.
func (p *progress) line(prefix string) string {
	s := p.stats()
	msg := fmt.Sprintf("%s %d rows", prefix, s.Rows)
	if p.estimate > 0 {
		msg += fmt.Sprintf(" of about %d (%d%%)", p.estimate, min(100, s.Rows*100/p.estimate))
	}
	msg += fmt.Sprintf(", %.1f MB, %d of %d chunks, %.0f rows/s, %s", float64(s.Bytes)/1e6, s.Chunks, p.total, s.RowsPerSecond,
		s.Duration.Round(time.Second))
	if left := p.estimate - s.Rows; s.RowsPerSecond > 0 && left > 0 && s.Chunks < int64(p.total) {
		msg += fmt.Sprintf(", about %s left", time.Duration(float64(left)/s.RowsPerSecond*float64(time.Second)).Round(time.Second))
	}
	return msg
}

// every logs a progress line every period until the returned func is called.
func (p *progress) every(ctx context.Context, log *slog.Logger, period time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				log.Info(p.line("cdc: load:"))
			}
		}
	}()
	return func() { cancel(); <-done }
}

// Stats is what a load copied: rows, bytes of COPY text and chunks, by how
// many workers, in how long.
type Stats struct {
	Rows, Bytes, Chunks int64
	Workers             int
	Duration            time.Duration
	RowsPerSecond       float64
}

func (p *progress) stats() Stats {
	s := Stats{Rows: p.n.Load(), Bytes: p.b.Load(), Chunks: p.c.Load(), Workers: p.workers, Duration: time.Since(p.start)}
	if secs := s.Duration.Seconds(); secs > 0 {
		s.RowsPerSecond = float64(s.Rows) / secs
	}
	return s
}
