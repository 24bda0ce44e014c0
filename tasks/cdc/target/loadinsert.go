package target

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// InsertLoad writes a block of an initial load: cols[i] holds mapped
// column i's values (every column as long), each row live at version. It
// is Insert's fenced INSERT … SELECT (fence.go), the version and the
// delete marker written as constants: one part, all rows or none. Rows
// already in the target at a newer version keep it (ReplacingMergeTree
// keeps the highest); a block written again (a chunk read again after a
// cut) collapses under FINAL.
func (t *Table) InsertLoad(ctx context.Context, cols [][]change.Value, version uint64, f Fence) error {
	m := t.M
	what := "insert into " + mapping.Qualified(m.Target.Database, m.Target.Table)
	types := make([]string, len(m.Cols))
	for i := range m.Cols {
		types[i] = t.cols[i].typ
	}
	tbl, names, err := rowsOf(types...)
	if err != nil {
		return fmt.Errorf("%s: build the rows table: %w", what, err)
	}
	block := tbl.Block()
	for i := range m.Cols {
		if _, err := block.Columns[i].Append(t.cols[i].codec.slice(cols[i])); err != nil {
			return fmt.Errorf("%s: column %q: %w", what, m.Cols[i].Name, err)
		}
	}
	names = append(names, "toUInt64("+strconv.FormatUint(version, 10)+")", "toUInt8(0)")
	return t.insertRows(ctx, tbl, insertSQL(m)+" SELECT "+strings.Join(names, ", ")+" FROM "+rowsTable, f, what)
}

// LoadCount counts the target's winning rows (FINAL) against an initial
// load at point: live rows at point, and rows newer than it (live or
// delete markers), which won over the load's.
type LoadCount struct {
	At, Newer uint64
}

// CountLoad reads LoadCount: the check of a table loaded at point.
func (t *Table) CountLoad(ctx context.Context, point uint64) (LoadCount, error) {
	m := t.M
	v, d := mapping.QuoteIdent(m.Target.VersionColumn), mapping.QuoteIdent(m.Target.DeletedColumn)
	p := strconv.FormatUint(point, 10)
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	var c LoadCount
	err := t.conn.QueryRow(cctx, "SELECT countIf("+v+" = "+p+" AND "+d+" = 0), countIf("+v+" > "+p+") FROM "+
		mapping.Qualified(m.Target.Database, m.Target.Table)+" FINAL").Scan(&c.At, &c.Newer)
	if err != nil {
		return c, classify(fmt.Errorf("count the rows of %s: %w", mapping.Qualified(m.Target.Database, m.Target.Table), err))
	}
	return c, nil
}
