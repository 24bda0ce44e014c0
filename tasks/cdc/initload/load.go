package initload

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/pgvalue"
)

// A load copies tables from one exported snapshot, as fast as COPY reads
// them: each table is cut into chunks of pages (ctid ranges, ChunkRows
// rows each by the catalog's estimate), which Workers connections read at
// once, every one under the same snapshot (SET TRANSACTION SNAPSHOT), with
// COPY … TO STDOUT. Each worker decodes its rows through the table's
// decoders (the values are the types' output text, as pgoutput sends them)
// and hands them over in blocks of at most BlockRows rows or blockBytes
// bytes of COPY text (Table.Insert), then each finished chunk
// (Table.Record). Memory is bounded by the workers' blocks, not by the
// tables' sizes.

const (
	// DefaultChunkRows is how many rows a chunk holds by pg_class.reltuples.
	DefaultChunkRows = 100_000
	// defaultChunkPages cuts a table the catalog has no estimate of.
	defaultChunkPages = 1_000
	// DefaultBlockRows and blockBytes bound a worker's block (one insert).
	DefaultBlockRows = 25_000
	blockBytes       = 4 << 20
	// progressEvery is how often the load logs its progress.
	progressEvery = 10 * time.Second
)

// Snapshot is the exported snapshot a load reads under: every worker
// begins its transaction with it (a new slot's, tasks/cdc/slot.Snapshot).
type Snapshot interface {
	Begin(ctx context.Context, conn *pgx.Conn) (pgx.Tx, error)
}

// Config is how to read: the source, the snapshot and how many workers.
type Config struct {
	// Source is how each worker connects to the source; the load adds the
	// settings the values are read under (pgvalue.Settings).
	Source *pgx.ConnConfig
	// Conn is a connection to the source, under those settings, for the
	// tables' sizes and the snapshot's xmin.
	Conn *pgx.Conn
	// Snapshot is what every chunk is read under; SnapshotName names it
	// in messages, and Point is where it is consistent: the load's rows
	// are the source's at Point (the caller versions them there).
	Snapshot     Snapshot
	SnapshotName string
	Point        uint64
	// Workers is how many connections read chunks at once, each with a
	// block of rows in memory.
	Workers int
	// ChunkRows and BlockRows size the chunks and the blocks; 0:
	// DefaultChunkRows, DefaultBlockRows.
	ChunkRows, BlockRows int
	// Log receives the progress; nil discards it.
	Log *slog.Logger
}

// Table is one table to load: the source table, the columns to read and
// how each is decoded into its target's mapped columns, what earlier runs
// of the load did, and where the rows go.
type Table struct {
	// Schema, Name and OID are the source table.
	Schema, Name string
	OID          uint32
	// Columns are the columns read, in the source's order; Decoders[i]
	// reads Columns[i] into mapped column At[i] of M (At[i] < 0: the
	// column is not mapped). A mapped column no decoder fills holds NULL,
	// or its type's zero when not Nullable.
	Columns  []string
	M        *mapping.Mapping
	Decoders []*pgvalue.Decoder
	At       []int
	// Done are the chunks of the table earlier runs of the load finished
	// (read at their Point, under a snapshot of their Xmin): those of the
	// table's present storage are read again only for the tuples written
	// since (a delta); after a rewrite (VACUUM FULL, CLUSTER) every chunk
	// is read again.
	Done []Chunk
	// Insert writes a block of rows (cols[j]: mapped column j's values;
	// reused once it returns); Record records a chunk whose blocks are all
	// inserted; Loaded checks the target once every chunk is in. Each is
	// called from the workers, at once for different chunks (Loaded
	// alone, after the copy).
	Insert func(ctx context.Context, cols [][]change.Value) error
	Record func(ctx context.Context, c Chunk) error
	Loaded func(ctx context.Context) error

	// The plan: a SELECT of Columns (the chunk's range appended); whole:
	// not a plain table, one chunk with no ctid range.
	sql      string
	whole    bool
	estimate int64  // pg_class.reltuples (0 when unknown)
	pages    uint32 // the table's pages when planned
	filenode uint64 // its storage (pg_relation_filenode)
	step     uint32 // pages per chunk
	chunks   int
	earlier  int // chunks done by earlier runs of the load

	rows atomic.Int64 // rows copied by this run
}

// Qualified is the table's schema.name, for messages.
func (t *Table) Qualified() string { return t.Schema + "." + t.Name }

// Rows is how many rows this run copied.
func (t *Table) Rows() int64 { return t.rows.Load() }

// Chunks is how many chunks the table was cut into.
func (t *Table) Chunks() int { return t.chunks }

// Earlier is how many of the table's chunks earlier runs had read (read
// again now as deltas).
func (t *Table) Earlier() int { return t.earlier }

// Chunk is a range of a table's pages, as a load plans, reads and records
// it.
type Chunk struct {
	// N is its number in the table's plan, Step the plan's pages per
	// chunk; it holds pages [Lo, Hi), Hi 0 to the end (rows on pages added
	// after the plan are read by the last chunk).
	N        int
	Step     uint32
	Lo, Hi   uint32
	Filenode uint64 // the table's storage when planned
	// Point and Xmin are the snapshot it was read under: its consistent
	// point and its xmin.
	Point, Xmin uint64
	// Delta: the tuples of a chunk an earlier run read that it may not
	// have seen (written after its snapshot's xmin).
	Delta bool
	// Rows and Bytes are what COPY sent.
	Rows, Bytes uint64
}

// chunk is a Chunk to read: since > 0 makes it a delta, the tuples of a
// chunk read before under a snapshot of xmin since that it may not have
// seen.
type chunk struct {
	t      *Table
	n      int
	lo, hi uint32
	since  uint64
}

// pages names the chunk's range for messages.
func (c chunk) pages() string {
	if c.t.whole {
		return "whole table"
	}
	if c.hi == 0 {
		return fmt.Sprintf("pages %d..end", c.lo)
	}
	return fmt.Sprintf("pages %d..%d", c.lo, c.hi-1)
}

// query is the chunk's COPY statement.
func (c chunk) query() string {
	q := c.t.sql + " WHERE true"
	if !c.t.whole {
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

// Load copies tables from cfg's snapshot: each planned (the chunks
// earlier runs did read again as deltas), copied in chunks by the
// workers, each block handed to its table's Insert and each chunk, once
// inserted, to its Record; then each table's Loaded. The first error stops
// every worker.
func Load(ctx context.Context, cfg Config, tables []*Table) (Stats, error) {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	chunks, err := plan(ctx, cfg, log, tables)
	if err != nil {
		return Stats{}, err
	}
	xmin, err := snapshotXmin(ctx, cfg)
	if err != nil {
		return Stats{}, err
	}
	p := newProgress(tables, len(chunks), cfg.Workers)
	log.Info(fmt.Sprintf("cdc: loading %d tables (about %d rows) in %d chunks with %d workers from snapshot %s at %s",
		len(tables), p.estimate, len(chunks), p.workers, cfg.SnapshotName, pglogrepl.LSN(cfg.Point)))
	stop := p.every(ctx, log, progressEvery)
	err = copyChunks(ctx, cfg, xmin, chunks, p)
	stop()
	if err != nil {
		return Stats{}, err
	}
	for _, t := range tables {
		if t.Loaded == nil {
			continue
		}
		if err := t.Loaded(ctx); err != nil {
			return Stats{}, err
		}
	}
	log.Info(p.line("cdc: loaded"))
	return p.stats(), nil
}

// copyChunks hands the chunks to the workers; the first error stops all.
func copyChunks(ctx context.Context, cfg Config, xmin uint64, chunks []chunk, p *progress) error {
	g, gctx := errgroup.WithContext(ctx)
	queue := make(chan chunk)
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
		g.Go(func() error { return worker(gctx, cfg, xmin, queue, p) })
	}
	return g.Wait()
}

// worker reads chunks from queue under the snapshot, on a connection of
// its own with the settings the values are read under.
func worker(ctx context.Context, cfg Config, xmin uint64, queue <-chan chunk, p *progress) error {
	src := cfg.Source.Copy()
	maps.Copy(src.RuntimeParams, pgvalue.Settings())
	conn, err := pgx.ConnectConfig(ctx, src)
	if err != nil {
		return sourceErr(fmt.Errorf("connect to the source: %w", err))
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	tx, err := cfg.Snapshot.Begin(ctx, conn)
	if err != nil {
		return sourceErr(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	blocks := map[*Table]*block{}
	for c := range queue {
		b := blocks[c.t]
		if b == nil {
			b = newBlock(c.t, cmp.Or(cfg.BlockRows, DefaultBlockRows))
			blocks[c.t] = b
		}
		if err := copyChunk(ctx, tx, c, b, cfg.Point, xmin, p); err != nil {
			return err
		}
	}
	return nil
}

// plan cuts every table into chunks, from the catalog's estimate of its
// rows and its size in pages, reading the chunks done (by earlier runs of
// the load) of a table whose storage is the same as deltas.
func plan(ctx context.Context, cfg Config, log *slog.Logger, tables []*Table) ([]chunk, error) {
	var chunks []chunk
	for _, t := range tables {
		if err := planTable(ctx, cfg, t); err != nil {
			return nil, err
		}
		var prev []Chunk
		rewritten := false
		for _, d := range t.Done {
			if d.Filenode == t.filenode {
				prev = append(prev, d)
			} else {
				rewritten = true
			}
		}
		if rewritten && len(prev) == 0 {
			log.Warn(fmt.Sprintf("cdc: table %s was rewritten since the load's last run (its storage changed): loading all of it again", t.Qualified()))
		}
		if len(prev) > 0 && !t.whole {
			t.step = prev[0].Step
			t.chunks = max(1, int((int64(t.pages)+int64(t.step)-1)/int64(t.step)))
		}
		for n := range t.chunks {
			c := chunk{t: t, n: n, lo: uint32(n) * t.step}
			if n < t.chunks-1 {
				c.hi = c.lo + t.step
			}
			if d, ok := covered(prev, c.lo, c.hi); ok {
				c.since = d.Xmin
				t.earlier++
			}
			chunks = append(chunks, c)
		}
	}
	return chunks, nil
}

// covered returns the latest of the chunks done that read the pages
// [lo, hi) (hi 0: to the end), if one did.
func covered(done []Chunk, lo, hi uint32) (Chunk, bool) {
	var best Chunk
	ok := false
	for _, d := range done {
		if d.Lo <= lo && (d.Hi == 0 || (hi != 0 && hi <= d.Hi)) && (!ok || d.Point > best.Point) {
			best, ok = d, true
		}
	}
	return best, ok
}

// planTable reads one table's kind, estimate and size.
func planTable(ctx context.Context, cfg Config, t *Table) error {
	cols := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		cols[i] = pgx.Identifier{c}.Sanitize()
	}
	t.sql = "SELECT " + strings.Join(cols, ", ") + " FROM ONLY " + pgx.Identifier{t.Schema, t.Name}.Sanitize()
	var kind string
	var tuples float64
	var size, block, filenode int64
	err := cfg.Conn.QueryRow(ctx, `SELECT c.relkind::text, c.reltuples::float8, pg_catalog.pg_relation_size(c.oid), current_setting('block_size')::int8,
       coalesce(pg_catalog.pg_relation_filenode(c.oid)::int8, 0)
  FROM pg_catalog.pg_class c WHERE c.oid = $1`, int64(t.OID)).Scan(&kind, &tuples, &size, &block, &filenode)
	if err != nil {
		return sourceErr(fmt.Errorf("table %s: read its size: %w", t.Qualified(), err))
	}
	t.whole = kind != "r"
	t.estimate = int64(max(tuples, 0))
	t.pages, t.filenode = uint32(size/block), uint64(filenode)
	t.step, t.chunks = chunkPlan(t.pages, t.estimate, cmp.Or(cfg.ChunkRows, DefaultChunkRows))
	if t.whole {
		t.chunks = 1
	}
	return nil
}

// chunkPlan cuts pages holding about tuples rows into chunks of about
// rows rows: the pages per chunk and how many chunks (at least one, the
// last open-ended).
func chunkPlan(pages uint32, tuples int64, rows int) (step uint32, chunks int) {
	step = defaultChunkPages
	if tuples > 0 && pages > 0 {
		perPage := float64(tuples) / float64(pages)
		step = uint32(max(1, min(float64(1<<30), float64(rows)/perPage)))
	}
	chunks = int((int64(pages) + int64(step) - 1) / int64(step))
	return step, max(chunks, 1)
}

// snapshotXmin reads the xmin of cfg's snapshot: a chunk read under it
// saw every tuple whose xmin precedes it.
func snapshotXmin(ctx context.Context, cfg Config) (uint64, error) {
	tx, err := cfg.Snapshot.Begin(ctx, cfg.Conn)
	if err != nil {
		return 0, sourceErr(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var x int64
	if err := tx.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::int8`).Scan(&x); err != nil {
		return 0, sourceErr(fmt.Errorf("read the xmin of snapshot %s: %w", cfg.SnapshotName, err))
	}
	return uint64(x), nil
}

// sourceErr classes an error of the source's connections: outcome knows
// PostgreSQL's transient failures; a refused login is configuration.
func sourceErr(err error) error {
	if outcome.Classify(err) == outcome.Transient {
		return err
	}
	return outcome.Config.Mark(fmt.Errorf("%w: %w", change.ErrConfig, err))
}
