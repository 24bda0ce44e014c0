package cdc

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/pgvalue"
	"github.com/changesink/changesink/tasks/cdc/slot"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// The initial load copies every published table from one exported
// snapshot into its target, as fast as COPY reads it: each table is cut
// into chunks of pages (ctid ranges, loadChunkRows rows each by the
// catalog's estimate), which LoadWorkers connections read at once, every
// one under the same snapshot (SET TRANSACTION SNAPSHOT), with COPY …
// TO STDOUT. Each worker decodes its rows through the stream's decoders
// (the values are the types' output text, as pgoutput sends them) and
// writes them in blocks of at most LoadBlockRows rows or loadBlockBytes
// bytes of COPY text, each one fenced insert (one part, all or nothing),
// every row live at the snapshot's point: whatever the stream brings
// after the point is newer. Memory is bounded by the workers' blocks, not
// by the tables' sizes.

const (
	// loadChunkRows is how many rows a chunk holds by pg_class.reltuples.
	loadChunkRows = 100_000
	// loadDefaultChunkPages cuts a table the catalog has no estimate of.
	loadDefaultChunkPages = 1_000
	// LoadBlockRows and loadBlockBytes bound a worker's block (one insert).
	LoadBlockRows  = 25_000
	loadBlockBytes = 4 << 20
	// loadProgressEvery is how often the load logs its progress.
	loadProgressEvery = 10 * time.Second
)

// loadTable is one table of the load: its plan and its counts.
type loadTable struct {
	t *syncTable
	// sql reads the table's rows in the source's column order, the
	// chunk's range appended.
	sql string
	// whole: not a plain table: one chunk, no ctid range (a partitioned
	// table is published as its partitions: ErrPublicationViaRoot).
	whole    bool
	estimate int64  // pg_class.reltuples (0 when unknown)
	pages    uint32 // the table's pages when planned
	filenode uint64 // its storage (pg_relation_filenode)
	step     uint32 // pages per chunk
	chunks   int
	earlier  int // chunks done by earlier runs of the load

	rows atomic.Int64 // rows copied by this run
}

// loadChunk is a range of a table's pages: [lo, hi), hi 0 to the end
// (rows on pages added after the plan are read by the last chunk).
type loadChunk struct {
	lt     *loadTable
	n      int
	lo, hi uint32
	// since > 0: a delta, the tuples of a chunk read before under a
	// snapshot of xmin since that it may not have seen (loadresume.go).
	since uint64
}

// pages names the chunk's range for messages.
func (c loadChunk) pages() string {
	if c.lt.whole {
		return "whole table"
	}
	if c.hi == 0 {
		return fmt.Sprintf("pages %d..end", c.lo)
	}
	return fmt.Sprintf("pages %d..%d", c.lo, c.hi-1)
}

// query is the chunk's COPY statement.
func (c loadChunk) query() string {
	q := c.lt.sql + " WHERE true"
	if !c.lt.whole {
		q += fmt.Sprintf(" AND ctid >= '(%d,0)'::tid", c.lo)
		if c.hi > 0 {
			q += fmt.Sprintf(" AND ctid < '(%d,0)'::tid", c.hi)
		}
	}
	if c.since > 0 {
		// A tuple whose xmin precedes the earlier snapshot's xmin was
		// committed before it, so that read saw it; every other one is
		// read again (frozen ones too: their xmin is gone).
		q += fmt.Sprintf(" AND (age(xmin) <= age('%d'::xid) OR age(xmin) = 2147483647)", c.since&0xFFFFFFFF)
	}
	return "COPY (" + q + ") TO STDOUT"
}

// loadTables loads the tables which from l's snapshot, versioned
// at its point: planned (the chunks earlier runs did left out), copied in
// chunks by the workers, each chunk recorded in the load ledger once
// inserted, then each target counted.
func (r *syncRun) loadTables(ctx context.Context, l *loadRun, which []*syncTable) error {
	tables, chunks, err := r.planLoad(ctx, which, l.done)
	if err != nil {
		return err
	}
	if l.xmin, err = snapshotXmin(ctx, r, l); err != nil {
		return err
	}
	p := newLoadProgress(tables, len(chunks), r.cfg.LoadWorkers)
	r.log.Info(fmt.Sprintf("cdc: loading %d tables (about %d rows) in %d chunks with %d workers from snapshot %s at %s",
		len(tables), p.estimate, len(chunks), p.workers, l.snap.Name, slot.LSN(l.point)))
	stop := p.every(ctx, r.log, loadProgressEvery)
	err = r.copyChunks(ctx, l, chunks, p)
	stop()
	if err != nil {
		return err
	}
	for _, lt := range tables {
		if err := r.checkLoaded(ctx, lt, l.point); err != nil {
			return err
		}
	}
	r.log.Info(p.line("cdc: loaded"))
	r.loaded = p.stats()
	return nil
}

// copyChunks hands the chunks to the workers; the first error stops all.
func (r *syncRun) copyChunks(ctx context.Context, l *loadRun, chunks []loadChunk, p *loadProgress) error {
	g, gctx := errgroup.WithContext(ctx)
	queue := make(chan loadChunk)
	g.Go(func() error {
		defer close(queue)
		for _, c := range chunks {
			select {
			case queue <- c:
			case <-gctx.Done():
				return nil
			}
		}
		return nil
	})
	for range min(p.workers, max(len(chunks), 1)) {
		g.Go(func() error { return r.loadWorker(gctx, l, queue, p) })
	}
	return g.Wait()
}

// loadWorker reads chunks from queue under the snapshot, on a connection
// of its own with the settings the values are read under.
func (r *syncRun) loadWorker(ctx context.Context, l *loadRun, queue <-chan loadChunk, p *loadProgress) error {
	cfg := r.cfg.source.Copy()
	maps.Copy(cfg.RuntimeParams, pgvalue.Settings())
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return sourceErr(fmt.Errorf("connect to the source: %w", err))
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	tx, err := l.snap.Begin(ctx, conn)
	if err != nil {
		return sourceErr(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	blocks := map[*loadTable]*loadBlock{}
	for c := range queue {
		b := blocks[c.lt]
		if b == nil {
			b = newLoadBlock(c.lt.t, cmp.Or(r.env.hooks.LoadBlockRows, LoadBlockRows))
			blocks[c.lt] = b
		}
		if err := r.copyChunk(ctx, tx, c, b, l, p); err != nil {
			return err
		}
	}
	return nil
}

// planLoad cuts every table of which into chunks, from the catalog's
// estimate of its rows and its size in pages, leaving out the chunks done
// (by earlier runs of the load) of a table whose storage is the same.
func (r *syncRun) planLoad(ctx context.Context, which []*syncTable, done []target.LoadRow) ([]*loadTable, []loadChunk, error) {
	var tables []*loadTable
	var chunks []loadChunk
	for _, t := range which {
		lt, err := r.planTable(ctx, t)
		if err != nil {
			return nil, nil, err
		}
		var prev []target.LoadRow
		rewritten := false
		for _, d := range done {
			if d.Kind == target.LoadChunk && d.Table == t.name() {
				if d.Filenode == lt.filenode {
					prev = append(prev, d)
				} else {
					rewritten = true
				}
			}
		}
		if rewritten && len(prev) == 0 {
			r.log.Warn(fmt.Sprintf("cdc: table %s was rewritten since the load's last run (its storage changed): loading all of it again", t.name()))
		}
		if len(prev) > 0 && !lt.whole {
			lt.step = prev[0].Step
			lt.chunks = max(1, int((int64(lt.pages)+int64(lt.step)-1)/int64(lt.step)))
		}
		tables = append(tables, lt)
		for n := range lt.chunks {
			c := loadChunk{lt: lt, n: n, lo: uint32(n) * lt.step}
			if n < lt.chunks-1 {
				c.hi = c.lo + lt.step
			}
			if d, ok := covered(prev, c.lo, c.hi); ok {
				c.since = d.Xmin
				lt.earlier++
			}
			chunks = append(chunks, c)
		}
	}
	return tables, chunks, nil
}

// covered returns the latest of the chunks done that read the pages
// [lo, hi) (hi 0: to the end), if one did.
func covered(done []target.LoadRow, lo, hi uint32) (target.LoadRow, bool) {
	var best target.LoadRow
	ok := false
	for _, d := range done {
		if d.Lo <= lo && (d.Hi == 0 || (hi != 0 && hi <= d.Hi)) && (!ok || d.Point > best.Point) {
			best, ok = d, true
		}
	}
	return best, ok
}

// planTable reads one table's kind, estimate and size, and makes its
// decoders.
func (r *syncRun) planTable(ctx context.Context, t *syncTable) (*loadTable, error) {
	cols := make([]string, len(t.src.cols))
	rel := &slot.Relation{ID: t.src.oid, Namespace: t.src.schema, Name: t.src.name, Identity: t.src.identity}
	for i, col := range t.src.cols {
		cols[i] = pgx.Identifier{col.Name}.Sanitize()
		rel.Columns = append(rel.Columns, slot.Column{Name: col.Name, TypeOID: col.TypeOID, TypeMod: col.TypeMod, Key: col.Key})
	}
	if err := t.decoders(rel); err != nil {
		return nil, err
	}
	for j := range t.m.Cols {
		if !t.m.Cols[j].Type.Nullable && !t.has(j) {
			return nil, outcome.Refused.Mark(fmt.Errorf("table %s: %w: the source has no column %q, which is not Nullable in the target",
				t.name(), change.ErrSchemaChange, t.m.Cols[j].Name))
		}
	}
	lt := &loadTable{t: t, sql: "SELECT " + strings.Join(cols, ", ") + " FROM ONLY " + pgx.Identifier{t.src.schema, t.src.name}.Sanitize()}
	var kind string
	var tuples float64
	var size, block, filenode int64
	err := r.conn.QueryRow(ctx, `SELECT c.relkind::text, c.reltuples::float8, pg_catalog.pg_relation_size(c.oid), current_setting('block_size')::int8,
       coalesce(pg_catalog.pg_relation_filenode(c.oid)::int8, 0)
  FROM pg_catalog.pg_class c WHERE c.oid = $1`, int64(t.src.oid)).Scan(&kind, &tuples, &size, &block, &filenode)
	if err != nil {
		return nil, sourceErr(fmt.Errorf("table %s: read its size: %w", t.name(), err))
	}
	lt.whole = kind != "r"
	lt.estimate = int64(max(tuples, 0))
	lt.pages, lt.filenode = uint32(size/block), uint64(filenode)
	lt.step, lt.chunks = chunkPlan(lt.pages, lt.estimate, cmp.Or(r.env.hooks.LoadChunkRows, loadChunkRows))
	if lt.whole {
		lt.chunks = 1
	}
	return lt, nil
}

// chunkPlan cuts pages holding about tuples rows into chunks of about
// rows rows: the pages per chunk and how many chunks (at least one, the
// last open-ended).
func chunkPlan(pages uint32, tuples int64, rows int) (step uint32, chunks int) {
	step = loadDefaultChunkPages
	if tuples > 0 && pages > 0 {
		perPage := float64(tuples) / float64(pages)
		step = uint32(max(1, min(float64(1<<30), float64(rows)/perPage)))
	}
	chunks = int((int64(pages) + int64(step) - 1) / int64(step))
	return step, max(chunks, 1)
}

// checkLoaded counts the target's winning rows at the load's point: every
// row copied, unless the target held newer versions already (then it
// says how many of the load's rows won).
func (r *syncRun) checkLoaded(ctx context.Context, lt *loadTable, point uint64) error {
	t := lt.t
	c, err := t.run.Tbl.CountLoad(ctx, point)
	if err != nil {
		return err
	}
	rows := lt.rows.Load()
	t.res.Events, t.res.Keys, t.res.Pending, t.res.Verified = rows, rows, int64(c.At), int64(c.At)
	name := mapping.Qualified(t.m.Target.Database, t.m.Target.Table)
	if lt.earlier > 0 {
		// Rows of the earlier chunks are at an earlier point, and a row
		// moved between chunks may be in both: the count proves nothing.
		r.log.Info(fmt.Sprintf("cdc: loaded %s into %s: %d rows in %d chunks (%d of them the changes since an earlier run read them), %d live at %s",
			t.name(), name, rows, lt.chunks, lt.earlier, c.At, slot.LSN(point)))
		return nil
	}
	if c.Newer == 0 && int64(c.At) != rows {
		return outcome.Refused.Mark(fmt.Errorf("%w: table %s: %d rows copied, but %s holds %d live rows at %s",
			change.ErrVerify, t.name(), rows, name, c.At, slot.LSN(point)))
	}
	r.log.Info(fmt.Sprintf("cdc: loaded %s into %s: %d rows in %d chunks, %d live at %s (%d newer kept), counted",
		t.name(), name, rows, lt.chunks, c.At, slot.LSN(point), c.Newer))
	return nil
}

// snapshotXmin reads the xmin of l's snapshot: a chunk read under it saw
// every tuple whose xmin precedes it.
func snapshotXmin(ctx context.Context, r *syncRun, l *loadRun) (uint64, error) {
	tx, err := l.snap.Begin(ctx, r.conn)
	if err != nil {
		return 0, sourceErr(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var x int64
	if err := tx.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::int8`).Scan(&x); err != nil {
		return 0, sourceErr(fmt.Errorf("read the xmin of snapshot %s: %w", l.snap.Name, err))
	}
	return uint64(x), nil
}
