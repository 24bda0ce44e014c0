package cdc

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/slot"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// loadBlock gathers a worker's rows of one table, column by column, until
// a block is full.
type loadBlock struct {
	t     *syncTable
	cols  [][]change.Value // mapped column j's values
	zero  []change.Value   // a mapped column the source lacks: its value
	row   []change.Value   // the row being decoded (for a refusal's key)
	got   []bool
	rows  int
	bytes int64
	limit int // rows
}

func newLoadBlock(t *syncTable, limit int) *loadBlock {
	b := &loadBlock{t: t, limit: limit, cols: make([][]change.Value, len(t.m.Cols)), zero: make([]change.Value, len(t.m.Cols)),
		row: make([]change.Value, len(t.m.Cols)), got: make([]bool, len(t.m.Cols))}
	for j := range t.m.Cols {
		if t.m.Cols[j].Type.Nullable {
			b.zero[j] = change.Value{Null: true}
		} else {
			b.zero[j] = change.Zero(t.m.Cols[j].Type)
		}
	}
	return b
}

// add decodes one row of COPY's text into the block.
func (b *loadBlock) add(fields [][]byte, point uint64) error {
	t := b.t
	if len(fields) != len(t.decs) {
		return fmt.Errorf("internal error: table %s: a COPY row of %d fields for %d columns", t.name(), len(fields), len(t.decs))
	}
	copy(b.row, b.zero)
	clear(b.got)
	for i, f := range fields {
		j := t.at[i]
		if j < 0 {
			continue
		}
		kind := byte(slot.ValueText)
		if f == nil {
			kind = slot.ValueNull
		}
		v, err := t.decs[i].Value(kind, f)
		if err != nil {
			return t.refuse(b.row, b.got, point, t.m.Cols[j].Name, err)
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

func (b *loadBlock) full() bool { return b.rows >= b.limit || b.bytes >= loadBlockBytes }

func (b *loadBlock) reset() {
	for j := range b.cols {
		clear(b.cols[j])
		b.cols[j] = b.cols[j][:0]
	}
	b.rows, b.bytes = 0, 0
}

// copyChunk copies one chunk under tx: COPY's rows decoded into blocks,
// each block inserted (fenced by the table's lock, checked after) as soon
// as it is full, the last one at the chunk's end.
func (r *syncRun) copyChunk(ctx context.Context, tx pgx.Tx, c loadChunk, b *loadBlock, l *loadRun, p *loadProgress) error {
	t, point := c.lt.t, l.point
	var failed error // a row's or a block's error: not the source's
	ct := &copyText{row: func(fields [][]byte) error {
		if err := b.add(fields, point); err != nil {
			failed = err
			return err
		}
		if b.full() {
			failed = r.writeBlock(ctx, c.lt, b, point, p)
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
	if err != nil {
		return sourceErr(fmt.Errorf("table %s: copy %s: %w", t.name(), c.pages(), err))
	}
	if b.rows > 0 {
		if err := r.writeBlock(ctx, c.lt, b, point, p); err != nil {
			return err
		}
	}
	p.chunk(ct.Bytes)
	return r.appendLoad(ctx, target.LoadRow{Slot: r.cfg.Slot, Gen: l.gen, Kind: target.LoadChunk, Table: t.name(), Chunk: uint32(c.n),
		Step: c.lt.step, Lo: c.lo, Hi: c.hi, Filenode: c.lt.filenode, Point: point, Xmin: l.xmin, Delta: c.since > 0, Rows: uint64(ct.Rows), Bytes: uint64(ct.Bytes),
		Holder: r.holderID(), Relid: uint64(t.src.oid)})
}

// writeBlock inserts the block, fenced, and checks the lock after it.
func (r *syncRun) writeBlock(ctx context.Context, lt *loadTable, b *loadBlock, point uint64, p *loadProgress) error {
	t := lt.t
	if err := t.run.Tbl.InsertLoad(ctx, b.cols, point, t.run.Lock.Fence()); err != nil {
		return fmt.Errorf("table %s: %w", t.name(), err)
	}
	if err := t.run.Lock.Check(ctx); err != nil {
		return err
	}
	p.rows(lt, int64(b.rows))
	b.reset()
	return nil
}
