package target

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// A ledgerTable is one of the ledgers changesink keeps in ClickHouse: the
// per-target ledger (ledger.go), the sync ledger (syncledger.go) and the
// load ledger (loadledger.go). Each is an append-only MergeTree table
// whose rows are written under a fence (fence.go) and read by the runs
// that follow; what a row says is its ledger's, in the file of its row
// type. What they share is here: the table (made when missing, its
// columns checked, the columns a later changesink added added), the
// fenced append of one row and the read of rows.
//
// To add a column: put it last in the ledger's columns and name it in
// added (a ledger made by an earlier changesink gets it by ALTER TABLE,
// its older rows reading the type's default), then give it a field in the
// row type, a value in the row's append and a destination in its reads.
type ledgerTable struct {
	s         *Server
	db, table string
	// what names the ledger in messages ("ledger", "sync ledger", "load
	// ledger"): "the <what> <db>.<table>".
	what string
	// cols are the columns and their ClickHouse types, in table order.
	cols [][2]string
	// added are the columns of cols that a ledger made by an earlier
	// changesink may lack: check adds them.
	added []string
	// stamp is the column the server fills when a row is written (DEFAULT
	// now()); appends leave it out.
	stamp string
	// orderBy is the MergeTree's sorting key.
	orderBy string
	// onCluster: the table is made as the target's own objects are, ON
	// CLUSTER and Replicated when the target is on a cluster (Server.ddl).
	onCluster bool
	// keepDropped: a write that finds the table gone (UNKNOWN_TABLE) is
	// left unclassified, for the caller to say what that means (the
	// per-target ledger: apply makes it itself, so a re-run records the
	// batch), not classify's "run changesink cdc setup first".
	keepDropped bool
}

// name is the ledger's qualified name.
func (l *ledgerTable) name() string { return mapping.Qualified(l.db, l.table) }

// createSQL makes the ledger when it is missing.
func (l *ledgerTable) createSQL() string {
	var b strings.Builder
	b.WriteString("CREATE TABLE IF NOT EXISTS " + l.name() + " (\n")
	for i, c := range l.cols {
		b.WriteString("  " + c[0] + " " + c[1])
		if c[0] == l.stamp {
			b.WriteString(" DEFAULT now()")
		}
		if i < len(l.cols)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString(") ENGINE = MergeTree ORDER BY " + l.orderBy)
	return b.String()
}

// columnList lists the ledger's columns in table order, with or without
// the stamp.
func (l *ledgerTable) columnList(withStamp bool) string {
	names := make([]string, 0, len(l.cols))
	for _, c := range l.cols {
		if c[0] != l.stamp || withStamp {
			names = append(names, c[0])
		}
	}
	return strings.Join(names, ", ")
}

// ensure makes the ledger when it is missing and checks it (check).
func (l *ledgerTable) ensure(ctx context.Context) error {
	sql := l.createSQL()
	if l.onCluster {
		sql = l.s.ddl(sql)
	}
	if err := l.s.exec(ctx, sql); err != nil {
		return err
	}
	return l.check(ctx)
}

// check adds the columns of added that the ledger lacks, then refuses a
// ledger whose columns are not cols (ErrTargetMismatch, a configuration
// error).
func (l *ledgerTable) check(ctx context.Context) error {
	got, err := l.columnTypes(ctx)
	if err != nil {
		return err
	}
	if len(got) > 0 {
		altered := false
		for _, c := range l.cols {
			if _, ok := got[c[0]]; ok || !slices.Contains(l.added, c[0]) {
				continue
			}
			// A ledger of an earlier changesink: its rows keep the type's
			// default.
			if err := l.s.exec(ctx, "ALTER TABLE "+l.name()+" ADD COLUMN "+c[0]+" "+c[1]); err != nil {
				return err
			}
			altered = true
		}
		if altered {
			if got, err = l.columnTypes(ctx); err != nil {
				return err
			}
		}
	}
	for _, c := range l.cols {
		if got[c[0]] != c[1] {
			return outcome.Config.Mark(fmt.Errorf("%w: the %s %s has no column %s %s (it has %q)",
				change.ErrTargetMismatch, l.what, l.name(), c[0], c[1], got[c[0]]))
		}
	}
	return nil
}

// columnTypes reads the ledger's columns and their types; none when it
// does not exist.
func (l *ledgerTable) columnTypes(ctx context.Context) (map[string]string, error) {
	cols, err := l.s.columns(ctx, l.db, l.table)
	if err != nil {
		return nil, err
	}
	got := map[string]string{}
	for _, c := range cols {
		got[c.name] = c.typ
	}
	return got, nil
}

// append writes one row, fenced by f (fence.go): vals are its values in
// the order of the columns but the stamp; what names the row when the
// lock is found gone (ErrTargetLocked, returned as it is).
func (l *ledgerTable) append(ctx context.Context, vals []any, f Fence, what string) error {
	cols := make([]string, 0, len(l.cols))
	types := make([]string, 0, len(l.cols))
	for _, c := range l.cols {
		if c[0] != l.stamp {
			cols, types = append(cols, c[0]), append(types, c[1])
		}
	}
	if len(vals) != len(cols) {
		return fmt.Errorf("write the %s %s: %d values for %d columns", l.what, l.name(), len(vals), len(cols))
	}
	err := l.s.writeRow(ctx, l.name(), cols, types, vals, f, what)
	if err == nil || errors.Is(err, change.ErrTargetLocked) {
		return err
	}
	err = fmt.Errorf("write the %s %s: %w", l.what, l.name(), err)
	if l.keepDropped && chCode(err) == chUnknownTable {
		return err
	}
	return classify(err)
}

// read runs SELECT sel FROM the ledger, then tail (its clauses; args
// their parameters), scanning each row into dests and then calling row.
// A failed query or scan is classified, naming the ledger; row's error is
// returned as it is.
func (l *ledgerTable) read(ctx context.Context, sel, tail string, args []any, dests []any, row func() error) error {
	rows, err := l.s.conn.Query(ctx, "SELECT "+sel+" FROM "+l.name()+" "+tail, args...)
	if err != nil {
		return l.readErr(err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(dests...); err != nil {
			return l.readErr(err)
		}
		if err := row(); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return l.readErr(err)
	}
	return nil
}

// readErr is a failed read of the ledger, classified.
func (l *ledgerTable) readErr(err error) error {
	return classify(fmt.Errorf("read the %s %s: %w", l.what, l.name(), err))
}

// boolByte is b as a UInt8 column holds it.
func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}
