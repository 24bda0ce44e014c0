package target

import (
	"context"
	"fmt"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/ext"
	"github.com/ClickHouse/clickhouse-go/v2/lib/column"

	"github.com/changesink/changesink/internal/outcome"
)

// keysTableFor builds the external table holding the keys of rows.
func (t *Table) keysTableFor(rows []*change.Row) (*ext.Table, error) {
	m := t.M
	cols := make([]func(*ext.Table) error, len(m.KeyIdx))
	for n, i := range m.KeyIdx {
		cols[n] = ext.Column(keysColumn(n), column.Type(t.cols[i].typ))
	}
	tbl, err := ext.NewTable(keysTable, cols...)
	if err != nil {
		return nil, fmt.Errorf("build the keys table: %w", err)
	}
	vals := make([]change.Value, len(rows))
	for n, i := range m.KeyIdx {
		for r := range rows {
			vals[r] = rows[r].Vals[i]
		}
		if _, err := tbl.Block().Columns[n].Append(t.cols[i].codec.slice(vals)); err != nil {
			return nil, fmt.Errorf("fill the keys table column %q: %w", m.Cols[i].Name, err)
		}
	}
	return tbl, nil
}

// Read returns the winning version (FINAL) of each key of rows, by key
// bytes; keys travel in an external table, never in the SQL text.
func (t *Table) Read(ctx context.Context, rows []*change.Row) (map[string]*change.Row, error) {
	return t.query(ctx, rows, readSQL(t.M), false)
}

// versions is read without the payload: each key's winning version and
// delete marker only (vals nil).
func (t *Table) versions(ctx context.Context, rows []*change.Row) (map[string]*change.Row, error) {
	return t.query(ctx, rows, versionsSQL(t.M), true)
}

// Current reads the target's winning version of each key of rows, as the
// seed's read_current: the versions first, then the payloads of the keys
// the target holds at the batch's own LSN (the only ones selectPending
// compares). A key whose version moved between the two reads keeps what
// the second read found.
func (t *Table) Current(ctx context.Context, rows []*change.Row) (map[string]*change.Row, error) {
	cur, err := t.versions(ctx, rows)
	if err != nil {
		return nil, err
	}
	var same []*change.Row
	for _, r := range rows {
		if c := cur[r.Key]; c != nil && c.Version == r.Version {
			same = append(same, r)
			delete(cur, r.Key)
		}
	}
	if len(same) == 0 {
		return cur, nil
	}
	full, err := t.Read(ctx, same)
	if err != nil {
		return nil, err
	}
	for k, r := range full {
		cur[k] = r
	}
	return cur, nil
}

// scan runs a read of rows' keys: every mapped column, the version and
// the delete marker, or (keysOnly) the key columns, the version and the
// delete marker.
func (t *Table) scan(ctx context.Context, rows []*change.Row, sql string, keysOnly bool) (map[string]*change.Row, error) {
	m := t.M
	out := make(map[string]*change.Row, len(rows))
	if len(rows) == 0 {
		return out, nil
	}
	tbl, err := t.keysTableFor(rows)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	cctx = clickhouse.Context(cctx, clickhouse.WithExternalTable(tbl))
	res, err := t.conn.Query(cctx, sql)
	if err != nil {
		return nil, classify(fmt.Errorf("read %s: %w", mapping.Qualified(m.Target.Database, m.Target.Table), err))
	}
	defer res.Close()
	cols := m.KeyIdx
	if !keysOnly {
		cols = make([]int, len(m.Cols))
		for i := range cols {
			cols[i] = i
		}
	}
	dests := make([]any, 0, len(cols)+2)
	for _, i := range cols {
		dests = append(dests, t.cols[i].codec.dest())
	}
	var lsn uint64
	var deleted uint8
	dests = append(dests, &lsn, &deleted)
	vals := make([]change.Value, len(m.Cols))
	var keyBuf []byte
	for res.Next() {
		if err := res.Scan(dests...); err != nil {
			return nil, classify(fmt.Errorf("read %s: %w", mapping.Qualified(m.Target.Database, m.Target.Table), err))
		}
		if !keysOnly {
			vals = make([]change.Value, len(m.Cols))
		}
		bad, badErr := -1, error(nil)
		for n, i := range cols {
			v, err := t.cols[i].codec.value(dests[n])
			if err != nil {
				if bad < 0 || m.Cols[i].IsKey {
					bad, badErr = i, err
				}
				continue
			}
			vals[i] = v
		}
		if bad >= 0 {
			return nil, t.unreadable(bad, vals, lsn, badErr)
		}
		if deleted > 1 {
			return nil, outcome.Refused.Mark(fmt.Errorf("%w: %s holds %d in %q at key %s", change.ErrTargetRowUnreadable,
				mapping.Qualified(m.Target.Database, m.Target.Table), deleted, m.Target.DeletedColumn, change.RenderKey(m, vals)))
		}
		keyBuf = change.EncodeKey(keyBuf[:0], m, vals)
		r := &change.Row{Key: string(keyBuf), Version: lsn, Deleted: deleted != 0}
		if !keysOnly {
			r.Vals = vals
		}
		if prev, dup := out[r.Key]; dup && prev.Version >= r.Version {
			continue // a table ordered by more than the key; the highest version wins
		}
		out[r.Key] = r
	}
	if err := res.Err(); err != nil {
		return nil, classify(fmt.Errorf("read %s: %w", mapping.Qualified(m.Target.Database, m.Target.Table), err))
	}
	return out, nil
}

// unreadable refuses a target row holding a value in column i that the
// mapping's type cannot hold (a Bool stored as UInt8 holding 2): a writer
// other than changesink changed the target. It names the row by its key,
// unless a key column is the one at fault, and by its version when known.
func (t *Table) unreadable(i int, vals []change.Value, version uint64, err error) error {
	m := t.M
	at := ""
	if !m.Cols[i].IsKey {
		at = " at key " + change.RenderKey(m, vals)
	}
	switch {
	case version != 0 && at != "":
		at += fmt.Sprintf(", version %d", version)
	case version != 0:
		at = fmt.Sprintf(" at version %d", version)
	}
	return outcome.Refused.Mark(fmt.Errorf("%w: %s holds a value its column %q cannot hold%s (%w)",
		change.ErrTargetRowUnreadable, mapping.Qualified(m.Target.Database, m.Target.Table), m.Cols[i].Name, at, err))
}

// HighestVersion returns the highest version the target holds, of any
// row (0 when it holds none).
func (t *Table) HighestVersion(ctx context.Context) (uint64, error) {
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	name := mapping.Qualified(t.M.Target.Database, t.M.Target.Table)
	var high uint64
	if err := t.conn.QueryRow(cctx, "SELECT max("+mapping.QuoteIdent(t.M.Target.VersionColumn)+") FROM "+name).Scan(&high); err != nil {
		return 0, classify(fmt.Errorf("read the highest version of %s: %w", name, err))
	}
	return high, nil
}

// Truncated returns a delete marker, at the TRUNCATE tr, for every key the
// target holds live at an older version and inBatch does not report (the
// batch's own keys were deleted by the TRUNCATE as it merged).
func (t *Table) Truncated(ctx context.Context, tr *change.Row, inBatch func(key string) bool) ([]*change.Row, error) {
	m := t.M
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	name := mapping.Qualified(m.Target.Database, m.Target.Table)
	res, err := t.conn.Query(cctx, truncatedSQL(m), tr.Version)
	if err != nil {
		return nil, classify(fmt.Errorf("read the live keys of %s older than the TRUNCATE: %w", name, err))
	}
	defer res.Close()
	dests := make([]any, 0, len(m.KeyIdx))
	for _, i := range m.KeyIdx {
		dests = append(dests, t.cols[i].codec.dest())
	}
	var out []*change.Row
	var keyBuf []byte
	for res.Next() {
		if err := res.Scan(dests...); err != nil {
			return nil, classify(fmt.Errorf("read %s: %w", name, err))
		}
		vals := make([]change.Value, len(m.Cols))
		for n, i := range m.KeyIdx {
			v, err := t.cols[i].codec.value(dests[n])
			if err != nil {
				return nil, t.unreadable(i, vals, 0, err)
			}
			vals[i] = v
		}
		keyBuf = change.EncodeKey(keyBuf[:0], m, vals)
		if inBatch(string(keyBuf)) {
			continue
		}
		for i := range m.Cols {
			if !m.Cols[i].IsKey {
				vals[i] = change.Zero(m.Cols[i].Type)
			}
		}
		out = append(out, &change.Row{Key: string(keyBuf), Version: tr.Version, Deleted: true, Vals: vals, Record: tr.Record, Meta: tr.Meta})
	}
	if err := res.Err(); err != nil {
		return nil, classify(fmt.Errorf("read %s: %w", name, err))
	}
	return out, nil
}
