package target

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/changesink/changesink/internal/outcome"
)

// Table is the target table as CheckSchema found it: the connection and,
// for each mapped column (in mapping order), how it is stored.
type Table struct {
	*Server
	cols []storedColumn
	// shown: per mapped column, the last Date (days) or DateTime (Unix
	// seconds) the server shows in it, 0 for no limit (LastShown).
	shown []uint64
	// isDeleted: the engine is ReplacingMergeTree(version, deleted), whose
	// FINAL hides the delete markers changesink's own reads need
	// (deleted.go).
	isDeleted bool
}

// storedColumn is a mapped column as the target table stores it.
type storedColumn struct {
	// typ is the stored type in ClickHouse's spelling (a Bool column made
	// on a server before 21.12 is UInt8).
	typ string
	// codec moves values between the canonical form and clickhouse-go.
	codec codec
}

// CheckSupported returns ErrUnsupportedServer, a configuration error, for
// a mapping the server cannot store.
func (t *Server) CheckSupported() error {
	for i := range t.M.Cols {
		c := &t.M.Cols[i]
		if c.Type.Kind == mapping.KindDateTime64 && !t.Caps.DateTime64 {
			return outcome.Config.Mark(fmt.Errorf("%w: column %q is %s, but ClickHouse %s has no DateTime64 (20.1 or newer has)",
				change.ErrUnsupportedServer, c.Name, c.Type, t.Version))
		}
		if c.Type.Kind == mapping.KindDecimal && c.Type.Prec > 38 && !t.Caps.Decimal256 {
			return outcome.Config.Mark(fmt.Errorf("%w: column %q is %s, but ClickHouse %s has no Decimal of more than 38 digits (21.6 or newer has)",
				change.ErrUnsupportedServer, c.Name, c.Type, t.Version))
		}
	}
	return nil
}

// CheckSchema compares the target table with the mapping: a
// ReplacingMergeTree holding every mapped column with its type, the UInt64
// version and the UInt8 delete marker. It returns the table as stored: each
// column's stored type and codec (a Bool column may be stored as UInt8).
func (t *Server) CheckSchema(ctx context.Context) (*Table, error) {
	if err := t.ensureCluster(ctx); err != nil {
		return nil, err
	}
	m := t.M
	obj, err := t.inspect(ctx, m.Target.Table)
	if err != nil {
		return nil, err
	}
	name, cols := obj.name, obj.cols
	engine, engineFull, sortingKey := obj.engine, obj.engineFull, obj.sortingKey
	if !obj.found {
		return nil, outcome.Config.Mark(fmt.Errorf("%w: table %s does not exist; run changesink cdc setup first", change.ErrTargetMismatch, name))
	}
	del, err := t.checkKind(name, engine, engineFull)
	if err != nil {
		return nil, err
	}
	if got, want := normKey(sortingKey), normKey(strings.Join(m.Key, ",")); got != want {
		return nil, outcome.Config.Mark(fmt.Errorf("%w: %s is ordered by (%s), the mapping's key is %s", change.ErrTargetMismatch, name, sortingKey, m.KeyNames()))
	}
	types := make(map[string]string, len(cols))
	for _, c := range cols {
		types[c.name] = c.typ
	}
	mismatch := func(col, want, got string) error {
		if got == "" {
			return outcome.Config.Mark(fmt.Errorf("%w: %s has no column %q (%s)", change.ErrTargetMismatch, name, col, want))
		}
		return outcome.Config.Mark(fmt.Errorf("%w: column %s.%q is %s, the mapping says %s", change.ErrTargetMismatch, name, col, got, want))
	}
	tbl := &Table{Server: t, cols: make([]storedColumn, len(m.Cols)), isDeleted: del != ""}
	for i := range m.Cols {
		c := &m.Cols[i]
		got := types[c.Name]
		if !c.Type.SameType(got) {
			return nil, mismatch(c.Name, c.Type.DDL(t.Caps), got)
		}
		asUInt8 := c.Type.Kind == mapping.KindBool && strings.Contains(got, "UInt8")
		cd, err := codecFor(c, asUInt8)
		if err != nil {
			return nil, err
		}
		tbl.cols[i] = storedColumn{typ: c.Type.DDL(mapping.ServerCaps{BoolType: !asUInt8}), codec: cd}
	}
	if got := types[m.Target.VersionColumn]; got != "UInt64" {
		return nil, mismatch(m.Target.VersionColumn, "UInt64", got)
	}
	if got := types[m.Target.DeletedColumn]; got != "UInt8" {
		return nil, mismatch(m.Target.DeletedColumn, "UInt8", got)
	}
	if err := tbl.lastShown(ctx); err != nil {
		return nil, err
	}
	return tbl, nil
}

// checkKind refuses a target table name of engine engine (engineFull:
// with its arguments) that is not a ReplacingMergeTree (Replicated on a
// cluster) versioned by the mapping's version column, dropping rows
// marked in its delete column if any; it returns that column ("": none).
func (t *Server) checkKind(name, engine, engineFull string) (string, error) {
	m := t.M
	if engine != "ReplacingMergeTree" && engine != "ReplicatedReplacingMergeTree" {
		return "", outcome.Config.Mark(fmt.Errorf("%w: %s is a %s, not a ReplacingMergeTree", change.ErrTargetMismatch, name, engine))
	}
	if err := t.checkReplicated(name, engine); err != nil {
		return "", err
	}
	v, del := replacingArgs(engineFull)
	if v != m.Target.VersionColumn {
		return "", outcome.Config.Mark(fmt.Errorf("%w: %s is versioned by %q, the mapping's version column is %q", change.ErrTargetMismatch, name, v, m.Target.VersionColumn))
	}
	if del != "" && del != m.Target.DeletedColumn {
		return "", outcome.Config.Mark(fmt.Errorf("%w: %s drops the rows marked in %q, the mapping's delete column is %q", change.ErrTargetMismatch, name, del, m.Target.DeletedColumn))
	}
	return del, nil
}

// CheckKind is what cdc check asks of a target that stands, read only:
// checkKind (its columns and key are the stream's to follow, or a
// resync's); nil when it does not stand.
func (t *Server) CheckKind(ctx context.Context) error {
	obj, err := t.inspect(ctx, t.M.Target.Table)
	if err != nil || !obj.found {
		return err
	}
	_, err = t.checkKind(obj.name, obj.engine, obj.engineFull)
	return err
}

// checkView checks that the live view is a view showing the mapped
// columns, in order: CREATE VIEW IF NOT EXISTS keeps an existing object, so
// a view made before a column was added (or a table of that name) would
// otherwise pass as "in place" without it.
func (t *Server) checkView(ctx context.Context) error {
	obj, err := t.inspect(ctx, t.M.Target.LiveView)
	if err != nil {
		return err
	}
	return t.checkViewObject(obj)
}

// checkViewObject is checkView of the live view as inspect found it.
func (t *Server) checkViewObject(obj object) error {
	m := t.M
	name, engine, cols := obj.name, obj.engine, obj.cols
	got := make([]string, len(cols))
	for i, c := range cols {
		got[i] = c.name
	}
	want := make([]string, len(m.Cols))
	for i := range m.Cols {
		want[i] = m.Cols[i].Name
	}
	if engine != "View" {
		return outcome.Config.Mark(fmt.Errorf("%w: %s is a %s", change.ErrViewMismatch, name, engine))
	}
	if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
		return outcome.Config.Mark(fmt.Errorf("%w: %s shows the columns (%s), the mapping has (%s)",
			change.ErrViewMismatch, name, strings.Join(got, ", "), strings.Join(want, ", ")))
	}
	return nil
}

// EnsureView makes the live view when no table or view has its name, and
// checks it (checkView); made says it was missing.
func (t *Server) EnsureView(ctx context.Context) (made bool, err error) {
	obj, err := t.inspect(ctx, t.M.Target.LiveView)
	switch {
	case err != nil:
		return false, err
	case obj.found:
		return false, t.checkViewObject(obj)
	}
	if err := t.exec(ctx, t.ddl(createViewSQL(t.M))); err != nil {
		return false, err
	}
	return true, t.checkView(ctx)
}

// normKey normalises a sorting key for comparison: no spaces, quotes or
// parentheses.
func normKey(s string) string {
	return strings.NewReplacer(" ", "", "`", "", "\"", "", "(", "", ")", "").Replace(s)
}

// Setup creates (if absent) the target database when the mapping asks, the
// ReplacingMergeTree table (an existing one is checked against the mapping
// before the view is made over it), the live view and the ledger, checks
// them, and returns the statements it ran, in order.
func (t *Server) Setup(ctx context.Context) ([]string, error) {
	if err := t.ensureCluster(ctx); err != nil {
		return nil, err
	}
	if err := t.pingReplicas(ctx); err != nil {
		return nil, err
	}
	m := t.M
	var stmts []string
	if m.Target.CreateDatabase {
		stmts = append(stmts, t.ddl(createDatabaseSQL(m)))
	}
	if err := t.checkOrphanLedger(ctx); err != nil {
		return nil, err
	}
	table := t.ddl(createTableSQL(m, t.Caps))
	stmts = append(stmts, table, t.ddl(createViewSQL(m)), t.ddl(createLedgerSQL(m)))
	stmts = append(stmts, t.clusterSetupSQL()...)
	for _, s := range stmts {
		if err := t.exec(ctx, s); err != nil {
			if chCode(err) == chUnknownDatabase {
				// Not "run cdc setup first": this is setup.
				return nil, outcome.Config.Mark(fmt.Errorf("%w: %s: create it (CREATE DATABASE %s), or set "+
					"target.create_database: true in the mapping so that setup creates it", change.ErrNoDatabase,
					mapping.QuoteIdent(m.Target.Database), mapping.QuoteIdent(m.Target.Database)))
			}
			return nil, err
		}
		// An existing table is checked before the view is created over it:
		// a missing column would otherwise fail the view with ClickHouse's
		// "Unknown identifier" instead of ErrTargetMismatch naming it.
		if s == table {
			if _, err := t.CheckSchema(ctx); err != nil {
				return nil, err
			}
		}
	}
	if err := t.checkView(ctx); err != nil {
		return nil, err
	}
	if err := t.checkLedger(ctx); err != nil {
		return nil, err
	}
	if err := t.checkReplicas(ctx); err != nil {
		return nil, err
	}
	return stmts, nil
}

// lastShown sets t.shown on a server that shows less than it stores
// (Caps.DateDays, Caps.DateTimeSeconds: 18.16). The last DateTime shown
// depends on the column's time zone (18.16.1: 2106-02-06 23:59:59 UTC in
// UTC, 2106-02-05 23:59:59 UTC in America/Los_Angeles, 2106-02-06
// 14:59:59 UTC in Asia/Tokyo), so it is asked per zone: the last second
// of the range's last four days whose year the server shows as 2106.
func (t *Table) lastShown(ctx context.Context) error {
	if t.Caps.DateDays == 0 && t.Caps.DateTimeSeconds == 0 {
		return nil
	}
	const span = 4 * 86400
	t.shown = make([]uint64, len(t.M.Cols))
	zones := map[string]uint64{}
	for i, c := range t.M.Cols {
		switch c.Type.Kind {
		case mapping.KindDate:
			t.shown[i] = t.Caps.DateDays
		case mapping.KindDateTime:
			zone := c.Type.Zone()
			last, ok := zones[zone]
			if !ok {
				conv := "toDateTime(s)"
				if zone != "" {
					conv = "toDateTime(s, " + quoteString(zone) + ")"
				}
				cctx, cancel := context.WithTimeout(ctx, t.timeout)
				err := t.conn.QueryRow(cctx, "SELECT toUInt64(max(s)) FROM (SELECT toUInt32(4294967295 - number) AS s FROM system.numbers LIMIT "+
					strconv.Itoa(span)+") WHERE toYear("+conv+") >= 2106").Scan(&last)
				cancel()
				if err != nil {
					return classify(fmt.Errorf("read the last DateTime the server shows in zone %q: %w", zone, err))
				}
				last = max(last, 4294967295-span)
				zones[zone] = last
			}
			t.shown[i] = last
		}
	}
	return nil
}

// LastShown is, per mapped column, the last Date (days since 1970-01-01)
// or DateTime (Unix seconds) the server shows in it; nil or 0: no limit.
func (t *Table) LastShown() []uint64 { return t.shown }
