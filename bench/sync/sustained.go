package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5"

	"github.com/changesink/changesink/bench/internal/benchrun"
)

// The sustained mode (-sustained DURATION): a writer commits -rate changes
// a second to the source, in transactions of -tx changes, for DURATION,
// while cdc setup and cdc sync run as the shipped flow runs them
// (flows/postgres-clickhouse-sync.yaml): one execution per -period (the
// flow's schedule, every minute), one at a time, a late one queued (the
// flow's concurrency: limit 1, QUEUE), each sync with the flow's time
// budget (-budget, its max_duration, 45 s). Meanwhile
//
//   - every second, the slot's retained WAL (pg_current_wal_lsn() −
//     restart_lsn) and lag (pg_current_wal_lsn() − confirmed_flush_lsn)
//     from pg_replication_slots, and how old the oldest committed
//     transaction not yet visible is;
//   - every -poll (250 ms), the customers live view's max(id): each
//     transaction inserts the next customers, ids rising with the
//     transaction, so the first poll that sees a transaction's last id
//     is when it became visible to a reader of the live view. Its
//     commit-to-visible lag is that poll's start minus the moment the
//     writer's commit returned (an over-estimate by at most the poll
//     interval).
//
// After DURATION the writer stops and the executions go on until one
// started after the last commit caught up; then the live views must hold
// the source's row counts.

// commit is one source transaction of the writer.
type commit struct {
	at      time.Time
	lastID  int64 // its last customer's id
	changes int64
	visible time.Duration // commit to visible; -1 until seen
}

// sample is one second of the sampler.
type sample struct {
	at               time.Time
	written          int64
	retained, lag    int64 // bytes; -1 when the slot was not found
	oldestUnseen     time.Duration
	running          bool
	commitsSeen, all int
}

// execution is one of the flow's executions: cdc setup, then cdc sync.
type execution struct {
	Start         float64  `json:"start_seconds"`
	SetupSeconds  float64  `json:"setup_seconds"`
	SyncSeconds   float64  `json:"sync_seconds"`
	Changes       int64    `json:"changes"`
	Transactions  int64    `json:"transactions"`
	Ended         string   `json:"ended"`
	BehindSeconds *float64 `json:"behind_seconds,omitempty"`
	LagBytes      int64    `json:"lag_bytes"`
	RetainedBytes int64    `json:"retained_wal_bytes"`
}

// sustained is the shared state of one sustained run.
type sustained struct {
	start time.Time

	mu          sync.Mutex
	commits     []commit
	seen        int // commits[:seen] are visible
	written     counts
	running     bool
	late        time.Duration // how far the writer fell behind its schedule, at most
	writerDone  time.Time
	walWritten  int64 // by the whole server while the writer ran
	samples     []sample
	executions  []execution
	pollErrors  int
	maxRetained int64
}

func (b *bench) runSustained(ctx context.Context) error {
	fmt.Printf("bench-sync: sustained: %d changes/s in transactions of %d for %s; the flow's executions every %s, each sync with CDC_MAX_DURATION=%s; %d CPUs; load %s\n",
		b.rate, b.tx, b.sustainedFor, b.period, b.budget, runtime.NumCPU(), benchrun.LoadAvg())
	if err := b.prepare(ctx); err != nil {
		return err
	}
	view, err := b.liveView("customers")
	if err != nil {
		return err
	}
	chdb, err := b.openClickHouse()
	if err != nil {
		return err
	}
	defer chdb.Close()
	s := &sustained{start: time.Now()}
	bg, stopBg := context.WithCancel(ctx)
	var wg sync.WaitGroup
	writeErr := make(chan error, 1)
	wg.Add(3)
	go func() { defer wg.Done(); s.poll(bg, chdb, view, b.poll) }()
	go func() { defer wg.Done(); s.sampleSlot(bg, b.dsn, b.chDB(0)) }()
	go func() { defer wg.Done(); writeErr <- s.write(bg, b.dsn, b.rate, b.tx, b.sustainedFor) }()
	err = b.schedule(ctx, s, writeErr)
	stopBg()
	wg.Wait()
	if err != nil {
		return err
	}
	if err := b.checkLiveViews(ctx); err != nil {
		return err
	}
	return b.reportSustained(s)
}

// schedule runs the flow's executions, one per period from the start, a
// late one right after the one before (QUEUE), until the writer has
// stopped and an execution started after its last commit caught up.
func (b *bench) schedule(ctx context.Context, s *sustained, writeErr <-chan error) error {
	writing := true
	for i := 0; ; i++ {
		if err := waitTick(ctx, s.start.Add(time.Duration(i)*b.period), &writing, writeErr); err != nil {
			return err
		}
		s.mu.Lock()
		after := !s.writerDone.IsZero()
		s.mu.Unlock()
		e, err := b.execute(ctx, s)
		if err != nil {
			return err
		}
		if after && e.Ended == "caught up" {
			return s.waitVisible(ctx, 10*time.Second)
		}
		if after && time.Since(s.writerDone) > 3*b.period+b.budget {
			return fmt.Errorf("the flow's executions did not catch up within %s of the writer's end", 3*b.period+b.budget)
		}
	}
}

// waitTick waits until tick, taking the writer's end (or error) meanwhile.
func waitTick(ctx context.Context, tick time.Time, writing *bool, writeErr <-chan error) error {
	for {
		var end <-chan error
		if *writing {
			end = writeErr
		}
		select {
		case err := <-end:
			if err != nil {
				return fmt.Errorf("the writer: %w", err)
			}
			*writing = false
			continue
		default:
		}
		if !time.Now().Before(tick) {
			return nil
		}
		t := time.NewTimer(time.Until(tick))
		select {
		case err := <-end:
			t.Stop()
			if err != nil {
				return fmt.Errorf("the writer: %w", err)
			}
			*writing = false
		case <-t.C:
			return nil
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// execute runs one execution of the flow: cdc setup (a check, after the
// first), then cdc sync with the flow's budget.
func (b *bench) execute(ctx context.Context, s *sustained) (execution, error) {
	e := execution{Start: time.Since(s.start).Seconds()}
	s.setRunning(true)
	defer s.setRunning(false)
	dir := b.runDir(0)
	p, err := benchrun.Run(ctx, dir, b.syncEnv(0), b.bin, "cdc", "setup")
	if err != nil {
		return e, fmt.Errorf("cdc setup: %w", err)
	}
	e.SetupSeconds = p.Elapsed.Seconds()
	env := append(b.syncEnv(0), "CDC_MAX_DURATION="+b.budget.String())
	p, err = benchrun.Run(ctx, dir, env, b.bin, "cdc", "sync")
	if err != nil {
		return e, fmt.Errorf("cdc sync: %w", err)
	}
	e.SyncSeconds = p.Elapsed.Seconds()
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("sync-%02d.out", len(s.executions)+1)), p.Output, 0o644); err != nil {
		return e, err
	}
	o, err := parseSustainedOutputs(p.Output)
	if err != nil {
		return e, err
	}
	e.Changes, e.Transactions, e.Ended, e.BehindSeconds, e.LagBytes, e.RetainedBytes = o.Changes, o.Transactions, o.Ended, o.BehindSeconds, o.LagBytes, o.RetainedBytes
	s.mu.Lock()
	s.executions = append(s.executions, e)
	n := len(s.executions)
	s.mu.Unlock()
	behind := "-"
	if e.BehindSeconds != nil {
		behind = fmt.Sprintf("%.1f s", *e.BehindSeconds)
	}
	fmt.Printf("  execution %2d at %5.1f s: setup %.2f s, sync %5.2f s: %7d changes in %5d transactions, %s; behind %s, slot lag %.1f MB, retained %.1f MB; load %s\n",
		n, e.Start, e.SetupSeconds, e.SyncSeconds, e.Changes, e.Transactions, e.Ended, behind, mb(e.LagBytes), mb(e.RetainedBytes), benchrun.LoadAvg())
	return e, nil
}

func (s *sustained) setRunning(on bool) {
	s.mu.Lock()
	s.running = on
	s.mu.Unlock()
}

// waitVisible waits until the poller has seen every commit.
func (s *sustained) waitVisible(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		s.mu.Lock()
		seen, all := s.seen, len(s.commits)
		s.mu.Unlock()
		if seen == all {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sync caught up, but the customers live view shows %d of %d transactions after %s", seen, all, limit)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// liveView finds the live view of a source table among the targets cdc
// setup made.
func (b *bench) liveView(table string) (string, error) {
	out, err := b.ch(fmt.Sprintf("SELECT name FROM system.tables WHERE database = '%s' AND engine = 'View'", b.chDB(0)))
	if err != nil {
		return "", err
	}
	for _, name := range strings.Fields(out) {
		if name == table+"_live" || strings.HasSuffix(name, "_"+table+"_live") {
			return b.chDB(0) + "." + name, nil
		}
	}
	return "", fmt.Errorf("cdc setup made no live view of %s in %s (views: %s)", table, b.chDB(0), out)
}

func (b *bench) openClickHouse() (*sql.DB, error) {
	opts, err := clickhouse.ParseDSN(chURL(b.chURL, b.chDB(0)))
	if err != nil {
		return nil, fmt.Errorf("the ClickHouse URL: %w", err)
	}
	return clickhouse.OpenDB(opts), nil
}

// checkLiveViews compares each live view's row count with its source
// table's.
func (b *bench) checkLiveViews(ctx context.Context) error {
	source, err := rowCounts(ctx, b.dsn)
	if err != nil {
		return err
	}
	for _, t := range tables {
		view, err := b.liveView(t.name)
		if err != nil {
			return err
		}
		n, err := b.chCount(view)
		if err != nil {
			return err
		}
		if n != source[t.name] {
			return fmt.Errorf("%s holds %d rows, the source table %s %d", view, n, t.name, source[t.name])
		}
	}
	fmt.Printf("live views = source: customers %d, orders %d, order_lines %d rows\n", source["customers"], source["orders"], source["order_lines"])
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func mb(bytes int64) float64 { return float64(bytes) / 1e6 }

// pgConnect connects to dsn (a helper for the goroutines, which close it).
func pgConnect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return pgx.Connect(cctx, dsn)
}
