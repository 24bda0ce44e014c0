package target

import (
	"context"
	"fmt"
	"time"

	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/changesink/changesink/internal/outcome"
)

// object is a table or view of the target database as system.tables and
// system.columns show it.
type object struct {
	name string // qualified
	tableInfo
	found bool          // false: no such table or view
	cols  []tableColumn // in table order; none when not found
}

// inspect reads the target database's table (or view) named table: its
// row in system.tables and, when it exists, its columns.
func (t *Server) inspect(ctx context.Context, table string) (object, error) {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	db := t.M.Target.Database
	obj := object{name: mapping.Qualified(db, table)}
	var err error
	if obj.tableInfo, obj.found, err = t.describe(ctx, db, table); err != nil || !obj.found {
		return obj, err
	}
	obj.cols, err = t.columns(ctx, db, table)
	return obj, err
}

// tableInfo is a table's row in system.tables (tableSQL).
type tableInfo struct {
	engine, engineFull, sortingKey string
}

// describe reads db.table's engine from system.tables; found is false when
// no such table or view exists.
func (t *Server) describe(ctx context.Context, db, table string) (info tableInfo, found bool, err error) {
	err = t.systemTables(ctx, "read the engine of "+mapping.Qualified(db, table), func() error {
		info, found = tableInfo{}, false
		rows, err := t.conn.Query(ctx, tableSQL, db, table)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := rows.Scan(&info.engine, &info.engineFull, &info.sortingKey); err != nil {
				return err
			}
			found = true
		}
		return rows.Err()
	})
	if err != nil {
		return tableInfo{}, false, err
	}
	return info, found, nil
}

// systemTables runs read, a query of system.tables in the target database,
// and returns its error, classified and prefixed with what. ClickHouse
// 18.16 builds every row of system.tables for the database, whatever the
// WHERE clause, so the query fails (UNKNOWN_TABLE naming another table,
// FILE_DOESNT_EXIST or "File not found" for another table's metadata file)
// when another table of the database is renamed or dropped meanwhile: a
// lock taken or given back by a run of this target or of another one in
// the same database. Measured: 1 read in 20 under back-to-back lock DDL.
// Such a failure is read again, up to 20 times; when it persists it is
// transient, not the "run setup first" of a missing table.
func (t *Server) systemTables(ctx context.Context, what string, read func() error) error {
	const tries = 20
	var err error
	for try := 1; try <= tries; try++ {
		if err = read(); err == nil {
			return nil
		}
		if !ddlRace(err) || ctx.Err() != nil {
			return classify(fmt.Errorf("%s: %w", what, err))
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(try) * 10 * time.Millisecond):
		}
	}
	return outcome.Transient.Mark(fmt.Errorf("%s: %w (%w: database %s, %d times in a row)", what, err, ErrTablesRace, t.M.Target.Database, tries))
}

// ddlRace reports a system.tables read that failed on another table's
// concurrent RENAME or DROP (systemTables).
func ddlRace(err error) bool {
	switch chCode(err) {
	case chUnknownTable, chFileDoesntExist, chPocoException:
		return true
	}
	return false
}

// tableColumn is a column's name and ClickHouse type from system.columns.
type tableColumn struct{ name, typ string }

// TargetColumns reads the target table's columns but its version and
// deleted columns, in table order: name and ClickHouse type each; found
// is false when the table does not exist.
func (t *Server) TargetColumns(ctx context.Context) (cols [][2]string, found bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	got, err := t.columns(cctx, t.M.Target.Database, t.M.Target.Table)
	if err != nil || len(got) == 0 {
		return nil, false, err
	}
	for _, c := range got {
		if c.name != t.M.Target.VersionColumn && c.name != t.M.Target.DeletedColumn {
			cols = append(cols, [2]string{c.name, c.typ})
		}
	}
	return cols, true, nil
}

// columns reads db.table's columns, in table order (columnsSQL).
func (t *Server) columns(ctx context.Context, db, table string) ([]tableColumn, error) {
	name := mapping.Qualified(db, table)
	rows, err := t.conn.Query(ctx, columnsSQL, db, table)
	if err != nil {
		return nil, classify(fmt.Errorf("read the columns of %s: %w", name, err))
	}
	defer rows.Close()
	var cols []tableColumn
	for rows.Next() {
		var c tableColumn
		if err := rows.Scan(&c.name, &c.typ); err != nil {
			return nil, classify(fmt.Errorf("read the columns of %s: %w", name, err))
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, classify(fmt.Errorf("read the columns of %s: %w", name, err))
	}
	return cols, nil
}
