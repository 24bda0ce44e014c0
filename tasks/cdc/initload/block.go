package initload

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
)

// block gathers a worker's rows of one table, column by column, until it
// is full.
type block struct {
	t     *Table
	cols  [][]change.Value // mapped column j's values
	zero  []change.Value   // a mapped column the source lacks: its value
	row   []change.Value   // the row being decoded (for a refusal's key)
	got   []bool
	rows  int
	bytes int64
	limit int // rows
}

func newBlock(t *Table, limit int) *block {
	b := &block{t: t, limit: limit, cols: make([][]change.Value, len(t.M.Cols)), zero: make([]change.Value, len(t.M.Cols)),
		row: make([]change.Value, len(t.M.Cols)), got: make([]bool, len(t.M.Cols))}
	for j := range t.M.Cols {
		if t.M.Cols[j].Type.Nullable {
			b.zero[j] = change.Value{Null: true}
		} else {
			b.zero[j] = change.Zero(t.M.Cols[j].Type)
		}
	}
	return b
}

// add decodes one row of COPY's text into the block.
func (b *block) add(fields [][]byte, point uint64) error {
	t := b.t
	if len(fields) != len(t.Decoders) {
		return fmt.Errorf("internal error: table %s: a COPY row of %d fields for %d columns", t.Qualified(), len(fields), len(t.Decoders))
	}
	copy(b.row, b.zero)
	clear(b.got)
	for i, f := range fields {
		j := t.At[i]
		if j < 0 {
			continue
		}
		// COPY's text is the type's output text, as pgoutput sends it: a
		// text value ('t'), or NULL ('n'), to pgvalue.Decoder.Value.
		kind := byte('t')
		if f == nil {
			kind = 'n'
		}
		v, err := t.Decoders[i].Value(kind, f)
		if err != nil {
			return b.refuse(point, t.M.Cols[j].Name, err)
		}
		b.row[j], b.got[j] = v, true
		b.bytes += int64(len(f))
	}
	for j, v := range b.row {
		b.cols[j] = append(b.cols[j], v)
	}
	b.rows++
	return nil
}

// refuse locates a value's refusal: the table, the key where it is known,
// the load's point and the column.
func (b *block) refuse(point uint64, column string, err error) error {
	m := b.t.M
	e := &change.RecordError{Offset: -1, LSN: point, Column: column, Err: err, Streamed: true}
	known := true
	for _, i := range m.KeyIdx {
		known = known && b.got[i]
	}
	if known {
		e.Key = change.RenderKey(m, b.row)
	}
	return outcome.Refused.Mark(fmt.Errorf("table %s: %w", b.t.Qualified(), e))
}

func (b *block) full() bool { return b.rows >= b.limit || b.bytes >= blockBytes }

func (b *block) reset() {
	for j := range b.cols {
		clear(b.cols[j])
		b.cols[j] = b.cols[j][:0]
	}
	b.rows, b.bytes = 0, 0
}

// copyChunk copies one chunk under tx: COPY's rows decoded into blocks,
// each block handed to the table's Insert as soon as it is full, the last
// one at the chunk's end, then the chunk to its Record.
func copyChunk(ctx context.Context, tx pgx.Tx, c chunk, b *block, point, xmin uint64, p *progress) error {
	t := c.t
	var failed error // a row's or a block's error: not the source's
	ct := &copyText{row: func(fields [][]byte) error {
		if err := b.add(fields, point); err != nil {
			failed = err
			return err
		}
		if b.full() {
			failed = writeBlock(ctx, b, p)
		}
		return failed
	}}
	_, err := tx.Conn().PgConn().CopyTo(ctx, ct, c.query())
	if failed != nil {
		return failed
	}
	if err == nil {
		err = ct.Close()
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == pgerrcode.UndefinedColumn || pe.Code == pgerrcode.UndefinedTable) {
		return outcome.Transient.Mark(fmt.Errorf("table %s: copy %s: %w (a column or the table is gone): %w", t.Qualified(), c.pages(),
			change.ErrChangedDuringLoad, err))
	}
	if err != nil {
		return sourceErr(fmt.Errorf("table %s: copy %s: %w", t.Qualified(), c.pages(), err))
	}
	if err := sameStorage(ctx, tx, t); err != nil {
		return err
	}
	if b.rows > 0 {
		if err := writeBlock(ctx, b, p); err != nil {
			return err
		}
	}
	p.chunk(ct.Bytes)
	return t.Record(ctx, Chunk{N: c.n, Step: t.step, Lo: c.lo, Hi: c.hi, Filenode: t.filenode, Point: point, Xmin: xmin,
		Delta: c.since > 0, Rows: uint64(ct.Rows), Bytes: uint64(ct.Bytes)})
}

// writeBlock hands the block to its table's Insert and empties it.
func writeBlock(ctx context.Context, b *block, p *progress) error {
	if err := b.t.Insert(ctx, b.cols); err != nil {
		return err
	}
	p.rows(b.t, int64(b.rows))
	b.reset()
	return nil
}

// sameStorage refuses a chunk read from a table rewritten after the
// load's snapshot: ALTER TABLE rewrites are not MVCC-safe, and a snapshot
// older than the rewrite reads the new storage as empty. The chunk's COPY
// holds the table's lock (no rewrite can come until the load's
// transaction ends), so the storage the catalog had at the snapshot
// (pg_class, read under it) and the one the COPY read (the relation cache:
// now) being the same proves the COPY read the snapshot's rows.
func sameStorage(ctx context.Context, tx pgx.Tx, t *Table) error {
	var same bool
	err := tx.QueryRow(ctx, `SELECT c.relfilenode IS NOT DISTINCT FROM COALESCE(pg_catalog.pg_relation_filenode(c.oid), 0)
  FROM pg_catalog.pg_class c WHERE c.oid = $1`, int64(t.OID)).Scan(&same)
	if err != nil {
		return sourceErr(fmt.Errorf("table %s: read its storage: %w", t.Qualified(), err))
	}
	if !same {
		return outcome.Transient.Mark(fmt.Errorf("table %s: %w (rewritten after the load's snapshot: ALTER TABLE or VACUUM FULL)",
			t.Qualified(), change.ErrChangedDuringLoad))
	}
	return nil
}
