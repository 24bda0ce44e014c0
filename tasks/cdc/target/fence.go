package target

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/ext"
	"github.com/ClickHouse/clickhouse-go/v2/lib/column"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// A lock can be broken (a holder frozen past LockTiming.Stale), and a
// holder checks it between its writes, but a check and the write after it
// are two statements: a holder stopped between them would write beside
// the run that broke its lock. So every write under the lock is fenced:
// one INSERT … SELECT whose SELECT reads the lock table and yields rows
// only while the lock holds this holder's row (the rows of an insert
// travel as an external table; the ledger row as literals). A broken lock
// makes the write fail (the table is gone: UNKNOWN_TABLE) or write nothing
// (another holder's lock), in the server, within the statement. A holder
// checks its lock after each write: the lock never comes back to a holder
// that lost it, so a check that passes after the write proves the write
// was made under the lock, and a failed one that nothing was.

// Fence makes writes conditional on holder holding the lock table lock.
type Fence struct {
	lock, holder string
	cluster      bool
}

// Fence is the fence of l's writes.
func (l *Lock) Fence() Fence { return Fence{lock: l.Name, holder: l.ID, cluster: l.cl != nil} }

// cond is the fence's condition: on one server, true while the lock table
// holds the holder's row; on a cluster, clusterHeldSQL.
func (f Fence) cond() string {
	if f.cluster {
		return clusterHeldSQL(f.lock, f.holder)
	}
	return "(SELECT count() FROM " + f.lock + " WHERE holder = " + quoteString(f.holder) + ") > 0"
}

// ctx is the context of a fenced write: on a cluster, a plain read of the
// lock's rows (plainRead says why).
func (f Fence) ctx(ctx context.Context) context.Context {
	if f.cluster {
		return plainRead(ctx)
	}
	return ctx
}

// writeRow writes one row into table, fenced by f: its values (vals, in
// the order of cols, whose ClickHouse types are types) are literals of an
// INSERT … SELECT from the lock table. A zero f writes it unfenced (a
// sync of no tables holds no lock). Errors are the caller's to wrap; a
// lock found gone is ErrTargetLocked, naming what.
func (s *Server) writeRow(ctx context.Context, table string, cols, types []string, vals []any, f Fence, what string) error {
	lits := make([]string, len(cols))
	for i := range cols {
		lits[i] = "to" + types[i] + "(?)"
	}
	from := ""
	if f.lock != "" {
		from = " FROM system.one WHERE " + f.cond()
	}
	cctx, cancel := context.WithTimeout(f.ctx(ctx), s.timeout)
	defer cancel()
	err := s.conn.Exec(cctx, "INSERT INTO "+table+" ("+strings.Join(cols, ", ")+") SELECT "+strings.Join(lits, ", ")+from, vals...)
	if s.lockGone(ctx, f, err) {
		return outcome.Transient.Mark(fmt.Errorf("%w: the lock %s is gone (broken by another run?): %s was not written", change.ErrTargetLocked, f.lock, what))
	}
	return err
}

// lockGone reports whether err, a fenced write's, is the lock's table
// gone: an UNKNOWN_TABLE after which the lock table does not exist (the
// message alone does not tell: 26.9 names similar tables in it, "Maybe
// you meant …").
func (s *Server) lockGone(ctx context.Context, f Fence, err error) bool {
	if err == nil || f.lock == "" || chCode(err) != chUnknownTable {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var exists uint8
	if qerr := s.conn.QueryRow(cctx, "EXISTS TABLE "+f.lock).Scan(&exists); qerr != nil {
		return false
	}
	return exists == 0
}

// rowsTable is the external table an insert's rows travel in.
const rowsTable = "_changesink_rows"

// rowsOf is the external table of an insert's rows, its columns c0, c1, …
// of the types given: over HTTP its structure travels as text the server
// parses, where a mapped name may need quoting; the INSERT … SELECT takes
// them by position (names).
func rowsOf(types ...string) (tbl *ext.Table, names []string, err error) {
	defs := make([]func(*ext.Table) error, len(types))
	names = make([]string, len(types))
	for i, typ := range types {
		names[i] = "c" + strconv.Itoa(i)
		defs[i] = ext.Column(names[i], column.Type(typ))
	}
	tbl, err = ext.NewTable(rowsTable, defs...)
	return tbl, names, err
}

// insertRows runs insert (INSERT INTO … SELECT … FROM rowsTable) with tbl
// as the external table, fenced by f (a zero f: unfenced), retried while
// a cluster's previous quorum insert is not complete. A lock found gone
// is ErrTargetLocked (transient), naming what; other errors are
// classified, naming what.
func (s *Server) insertRows(ctx context.Context, tbl *ext.Table, insert string, f Fence, what string) error {
	if f.lock != "" {
		insert += " WHERE " + f.cond()
	}
	err := s.retryQuorum(ctx, func() error {
		cctx, cancel := context.WithTimeout(f.ctx(ctx), s.timeout)
		defer cancel()
		return s.conn.Exec(clickhouse.Context(cctx, clickhouse.WithExternalTable(tbl)), insert)
	}, nil)
	if s.lockGone(ctx, f, err) {
		return outcome.Transient.Mark(fmt.Errorf("%w: the lock %s is gone (broken by another run?): %s wrote nothing", change.ErrTargetLocked, f.lock, what))
	}
	if err != nil {
		return classify(fmt.Errorf("%s: %w", what, err))
	}
	return nil
}

// Insert writes rows, fenced by f (see above), as one INSERT … SELECT from
// an external table holding them in one block, one columnar append per
// column: ClickHouse reads that block whole and writes it into a table
// without PARTITION BY (as setup makes it) as one part, renamed into place
// when complete, so a run cut during the insert leaves either none of the
// batch's rows or all of them (1.5 million rows of 300 MB were one part on
// 18.16). A retry after a cut writes the same (key, version) rows again;
// FINAL collapses them. A lock found gone is ErrTargetLocked (transient);
// a lock another run holds makes it write nothing, which the holder's next
// lock check tells.
func (t *Table) Insert(ctx context.Context, rows []*change.Row, f Fence) error {
	m := t.M
	what := "insert into " + mapping.Qualified(m.Target.Database, m.Target.Table)
	types := make([]string, 0, len(m.Cols)+2)
	for i := range m.Cols {
		types = append(types, t.cols[i].typ)
	}
	tbl, names, err := rowsOf(append(types, "UInt64", "UInt8")...)
	if err != nil {
		return fmt.Errorf("%s: build the rows table: %w", what, err)
	}
	block := tbl.Block()
	vals := make([]change.Value, len(rows))
	for i := range m.Cols {
		for r := range rows {
			vals[r] = rows[r].Vals[i]
		}
		if _, err := block.Columns[i].Append(t.cols[i].codec.slice(vals)); err != nil {
			return fmt.Errorf("%s: column %q: %w", what, m.Cols[i].Name, err)
		}
	}
	lsns := make([]uint64, len(rows))
	dels := make([]uint8, len(rows))
	for r := range rows {
		lsns[r] = rows[r].Version
		if rows[r].Deleted {
			dels[r] = 1
		}
	}
	if _, err := block.Columns[len(m.Cols)].Append(lsns); err != nil {
		return fmt.Errorf("%s: column %q: %w", what, m.Target.VersionColumn, err)
	}
	if _, err := block.Columns[len(m.Cols)+1].Append(dels); err != nil {
		return fmt.Errorf("%s: column %q: %w", what, m.Target.DeletedColumn, err)
	}
	return t.insertRows(ctx, tbl, insertSQL(m)+" SELECT "+strings.Join(names, ", ")+" FROM "+rowsTable, f, what)
}
