package kafkastate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/changesink/changesink/internal/outcome"
)

// fetchAndCopy is step 4: the fetch of every partition, each record
// validated and streamed into the staging table by one COPY as it arrives;
// then the tombstone rule on the reads' end.
func (b *batch) fetchAndCopy(ctx context.Context) error {
	r, topic := b.r, b.r.topic
	if err := execSQL(ctx, b.tx, "create the staging table", sqlCreateStaging); err != nil {
		return err
	}
	rows := make(chan []row, 2)
	f := &fetcher{
		cl:       r.cl,
		topic:    topic,
		topicID:  b.meta.topicID,
		deadline: r.fetchDeadline(),
		dec:      kgo.DefaultDecompressor(),
		out:      rows,
		seed:     maphash.MakeSeed(),
		reject:   r.reject,
	}
	f.maxRejected = cmp.Or(r.env.hooks.maxRejectedBytes, maxRejectedBytes)
	f.budget.Store(int64(r.cfg.MaxRecords))
	byLeader := map[int32][]*partState{}
	for _, p := range b.parts {
		l := b.meta.leaders[p]
		byLeader[l] = append(byLeader[l], b.states[p])
	}
	fctx, cancelFetch := context.WithCancel(ctx)
	defer cancelFetch()
	fetchDone := make(chan error, 1)
	go func() { fetchDone <- f.run(fctx, byLeader) }()
	src := &rowSource{ch: rows, fetchErr: f.Err, hook: r.env.hooks.duringCopy, ctx: ctx}
	cctx, cancelCopy := context.WithTimeout(ctx, time.Duration(r.cfg.PollSeconds)*time.Second+pgTimeout)
	copied, copyErr := b.tx.CopyFrom(cctx, pgx.Identifier{stagingTable}, stagingColumns, src)
	cancelCopy()
	cancelFetch()
	fetchErr := <-fetchDone
	if fetchErr != nil && !errors.Is(fetchErr, context.Canceled) {
		return fetchErr
	}
	if copyErr != nil {
		if err := src.tooLarge(topic, copyErr); err != nil {
			return err
		}
		return pgErr(ctx, copyErr, "copy the batch into the staging table")
	}
	if fetchErr != nil { // cancelled from outside
		return fetchErr
	}
	b.consumed, b.tombstones = f.consumed.Load(), f.tombstones.Load()
	b.rejected = f.Rejected()
	b.ph.mark("fetch+copy")
	if copied != b.consumed {
		return fmt.Errorf("copy the batch into the staging table: %d rows copied, %d records read", copied, b.consumed)
	}
	return b.checkReads()
}

// checkReads applies the tombstone rule to the batch's reads, now ended,
// and notes whether every partition was read to its end.
func (b *batch) checkReads() error {
	var advanced []partRange
	b.caughtUp = true
	for _, p := range b.parts {
		st := b.states[p]
		if st.next > b.starts[p] {
			advanced = append(advanced, partRange{partition: p, from: b.starts[p], end: st.end, reached: st.next})
			b.advanced = true
		}
		b.caughtUp = b.caughtUp && st.atEnd()
	}
	if h := b.r.env.hooks.afterFetch; h != nil {
		h()
	}
	if err := b.rule.afterRead(advanced, b.lagged); err != nil {
		return outcome.Refused.Mark(err)
	}
	return nil
}

// rowSource feeds COPY from the fetcher's channel; COPY ends when the
// fetcher closes it, and fails with the fetcher's error if it has one. It
// notes where each large value went (see largeValue), so that a value
// PostgreSQL cannot store as jsonb is refused naming its record.
type rowSource struct {
	ctx      context.Context
	ch       <-chan []row
	cur      []row
	i        int
	vals     [4]any
	fetchErr func() error
	hook     func(context.Context)
	rows     int
	large    []largeRow
}

// largeValue is the value size from which rowSource notes a row. jsonb
// refuses only far larger values (a string over 256 MB; a container whose
// jsonb form passes 256 MB, or whose parse passes PostgreSQL's 1 GB
// allocation limit: an array of 30 million zeros, 60 MB, does), so the
// notes stay few.
const largeValue = 1 << 20

// largeRow is a noted row: its COPY line (1-based) and its record.
type largeRow struct {
	line      int
	partition int32
	offset    int64
	key       []byte // at most maxQuotedKey bytes (what a message shows)
	keyLen    int
	size      int
}

// copyLine matches the COPY's line in a PostgreSQL error's context.
var copyLine = regexp.MustCompile(`^COPY ` + stagingTable + `, line ([0-9]+), column payload`)

// valueTooLarge reports a COPY error that says a value cannot be held by
// jsonb: program_limit_exceeded (54000: "string too long to represent as
// jsonb string", "total size of jsonb ... exceeds the maximum"), or an
// allocation past PostgreSQL's 1 GB limit while parsing it (XX000 "invalid
// memory alloc request size"), and the COPY line it happened on.
func valueTooLarge(err error) (pe *pgconn.PgError, line int, ok bool) {
	state, pe := sqlstateOf(err)
	if state != stateLimitExceeded && (state != stateInternal || !strings.HasPrefix(pe.Message, "invalid memory alloc request size")) {
		return nil, 0, false
	}
	m := copyLine.FindStringSubmatch(pe.Where)
	if m == nil {
		return nil, 0, false
	}
	line, err = strconv.Atoi(m[1])
	return pe, line, err == nil
}

// tooLarge returns the refusal for a COPY error that says a noted value
// is too large for jsonb (ErrValueTooLarge, naming the record), or nil.
func (s *rowSource) tooLarge(topic string, copyErr error) error {
	pe, line, ok := valueTooLarge(copyErr)
	if !ok {
		return nil
	}
	for _, r := range s.large {
		if r.line != line {
			continue
		}
		detail := fmt.Sprintf("%d bytes; PostgreSQL: %s", r.size, pe.Message)
		if r.keyLen > len(r.key) {
			detail += fmt.Sprintf("; the key is %d bytes long", r.keyLen)
		}
		return outcome.Refused.Mark(&RecordError{Topic: topic, Partition: r.partition, Offset: r.offset, Key: r.key, Err: ErrValueTooLarge, Detail: detail})
	}
	return nil
}

func (s *rowSource) Next() bool {
	if s.hook != nil && s.rows == 1 {
		s.hook(s.ctx)
		s.hook = nil
	}
	for s.i >= len(s.cur) {
		batch, ok := <-s.ch
		if !ok {
			return false
		}
		s.cur, s.i = batch, 0
	}
	s.i++
	s.rows++
	if r := &s.cur[s.i-1]; len(r.value) >= largeValue {
		key := []byte(r.key[:min(len(r.key), maxQuotedKey)])
		s.large = append(s.large, largeRow{line: s.rows, partition: r.partition, offset: r.offset, key: key, keyLen: len(r.key), size: len(r.value)})
	}
	return true
}

func (s *rowSource) Values() ([]any, error) {
	r := &s.cur[s.i-1]
	s.vals[0] = r.key
	if r.value == nil {
		s.vals[1] = nil
	} else {
		s.vals[1] = r.value
	}
	s.vals[2] = r.partition
	s.vals[3] = r.offset
	return s.vals[:], nil
}

func (s *rowSource) Err() error { return s.fetchErr() }

// phases measures the steps of a run for the debug log.
type phases struct {
	last  time.Time
	names []string
	took  []time.Duration
}

func (p *phases) mark(name string) {
	now := time.Now()
	p.names = append(p.names, name)
	p.took = append(p.took, now.Sub(p.last))
	p.last = now
}

func (p *phases) String() string {
	var b strings.Builder
	for i, n := range p.names {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", n, p.took[i].Round(time.Millisecond))
	}
	return b.String()
}
