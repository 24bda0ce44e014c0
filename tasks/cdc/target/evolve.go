package target

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// The changes cdc sync makes to a target when its source table changes
// (docs/cdc-sync.md, schema changes): columns added (with the value that
// the rows written before them read), made Nullable or wider, renamed; the
// live view made again over them; and a target built anew beside the old
// one (a resync that changes its shape) and swapped in. Each returns the
// table as CheckSchema then finds it.

// ErrDefaultNotExact is returned when ClickHouse reads a column default back as another
// value than the one given (a type whose literal the driver does not
// render exactly): the column is not added, and the caller loads the
// table again instead.
var ErrDefaultNotExact = errors.New("the server reads the column's default back as another value")

// AddColumns adds the mapping's columns the table lacks (columns the
// source added), each after the mapped column before it. A column named in
// defaults gets that value as its DEFAULT: what every row written before
// it reads, as PostgreSQL's rows older than a column added with a constant
// default read that constant (its missing value). The default's literal is
// clickhouse-go's rendering of the value, which is first read back through
// the column's codec: one the server reads as another value is
// ErrDefaultNotExact, and nothing is added. Then the live view is made
// again (RemakeView).
func (t *Server) AddColumns(ctx context.Context, defaults map[string]change.Value) (*Table, error) {
	m := t.M
	obj, err := t.inspect(ctx, m.Target.Table)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, c := range obj.cols {
		have[c.name] = true
	}
	type add struct {
		sql string
		def any
	}
	var adds []add
	for i := range m.Cols {
		c := &m.Cols[i]
		if have[c.Name] {
			continue
		}
		a := add{sql: "ALTER TABLE " + obj.name + " ADD COLUMN " + mapping.QuoteIdent(c.Name) + " " + c.Type.DDL(t.Caps)}
		if v, ok := defaults[c.Name]; ok && !v.Null {
			if a.def, err = t.exactLiteral(ctx, c, v); err != nil {
				return nil, fmt.Errorf("column %q: %w", c.Name, err)
			}
			a.sql += " DEFAULT ?"
		}
		if i > 0 {
			a.sql += " AFTER " + mapping.QuoteIdent(m.Cols[i-1].Name)
		}
		adds = append(adds, a)
	}
	for _, a := range adds {
		if err := t.execArgs(ctx, a.sql, a.def); err != nil {
			return nil, err
		}
	}
	return t.RemakeView(ctx)
}

// exactLiteral returns the Go value clickhouse-go renders as c's literal
// for v, once the server has read that literal back as v exactly.
func (t *Server) exactLiteral(ctx context.Context, c *mapping.Col, v change.Value) (any, error) {
	cd, err := codecFor(c, false)
	if err != nil {
		return nil, err
	}
	lit := firstOf(cd.slice([]change.Value{v}))
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	dest := cd.dest()
	if err := t.conn.QueryRow(cctx, "SELECT CAST(? AS "+c.Type.DDL(t.Caps)+")", lit).Scan(dest); err != nil {
		err = classify(fmt.Errorf("read back the default of column %q: %w", c.Name, err))
		if outcome.Classify(err) == outcome.Transient {
			return nil, err
		}
		// A server that cannot cast or scan the literal (18.16: a bool, a
		// UUID) cannot hold it as a default either: a resync.
		return nil, fmt.Errorf("%w (%s: %v)", ErrDefaultNotExact, c.Type.DDL(t.Caps), err)
	}
	got, err := cd.value(dest)
	if err != nil || !got.Equal(v) {
		return nil, fmt.Errorf("%w (%s)", ErrDefaultNotExact, c.Type.DDL(t.Caps))
	}
	return lit, nil
}

// firstOf is the first element of a codec's typed slice, dereferenced (a
// Nullable column's slice holds pointers).
func firstOf(slice any) any {
	v := reflect.ValueOf(slice).Index(0)
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	return v.Interface()
}

// ModifyColumns gives the named columns the mapping's type (a column the
// source dropped made Nullable; a column widened, Int32 to Int64).
// ClickHouse rewrites the column's data; a key column cannot be changed
// (the caller loads the table again instead). The live view is the
// caller's to make again (RemakeView, AddColumns).
func (t *Server) ModifyColumns(ctx context.Context, names []string) error {
	m := t.M
	for _, n := range names {
		i, ok := m.ByName[n]
		if !ok {
			return fmt.Errorf("modify column %q of %s: not in the mapping", n, mapping.Qualified(m.Target.Database, m.Target.Table))
		}
		sql := "ALTER TABLE " + mapping.Qualified(m.Target.Database, m.Target.Table) + " MODIFY COLUMN " + mapping.QuoteIdent(n) + " " +
			m.Cols[i].Type.DDL(t.Caps)
		if err := t.exec(ctx, sql); err != nil {
			return err
		}
	}
	return nil
}

// RenameColumn renames the target's column from to to, on a server that
// can (Caps.RenameColumn). The live view is the caller's to make again
// (RemakeView, AddColumns): until then it names the old column.
func (t *Server) RenameColumn(ctx context.Context, from, to string) error {
	m := t.M
	if !t.Caps.RenameColumn {
		return outcome.Config.Mark(fmt.Errorf("%w: rename a column: ClickHouse %s cannot (RENAME COLUMN came in 20.4)", change.ErrUnsupportedServer, t.Version))
	}
	return t.exec(ctx, "ALTER TABLE "+mapping.Qualified(m.Target.Database, m.Target.Table)+" RENAME COLUMN "+mapping.QuoteIdent(from)+
		" TO "+mapping.QuoteIdent(to))
}

// RemakeView makes the live view again over the mapping's columns and
// checks the table. The view is missing for the moment between its DROP
// and its CREATE (18.16 has no CREATE OR REPLACE VIEW): a reader then gets
// UNKNOWN_TABLE, never a wrong row.
func (t *Server) RemakeView(ctx context.Context) (*Table, error) {
	m := t.M
	if err := t.exec(ctx, t.ddl("DROP TABLE IF EXISTS "+mapping.Qualified(m.Target.Database, m.Target.LiveView))); err != nil {
		return nil, err
	}
	if err := t.exec(ctx, t.ddl(createViewSQL(m))); err != nil {
		return nil, err
	}
	return t.CheckSchema(ctx)
}

// besideSuffix is what names a target built beside another: the target's
// name, this, and the load generation building it.
const besideSuffix = "__rs"

// BesideName is the name of the table a resync of the target table builds
// beside it, for the load generation gen.
func BesideName(table, gen string) string { return table + besideSuffix + gen }

// Beside makes (when missing) the table BesideName(m's table, gen), of the
// mapping's columns, where a resync that changes the target's shape loads
// the source table, and returns it: a Server of the mapping renamed to it,
// and the table as CheckSchema finds it. A table a killed run of the same
// generation made is kept, with the chunks it loaded.
func (t *Server) Beside(ctx context.Context, gen string) (*Server, *Table, error) {
	m := *t.M
	m.Target.Table = BesideName(t.M.Target.Table, gen)
	srv := t.With(&m)
	if err := srv.exec(ctx, createTableSQL(&m, t.Caps)); err != nil {
		return nil, nil, err
	}
	tbl, err := srv.CheckSchema(ctx)
	return srv, tbl, err
}

// SwapIn puts the table beside (Beside) in the target's place: EXCHANGE
// TABLES where the server has it, else one RENAME TABLE of both (the target
// to beside's name, beside to the target's); then drops the old table
// (now named beside) and makes the live view again over the new one. A
// run killed between leaves beside (DropBeside sweeps it): the target is
// then the old or the new table, whole.
func (t *Server) SwapIn(ctx context.Context, beside string) (*Table, error) {
	m := t.M
	cur, next := mapping.Qualified(m.Target.Database, m.Target.Table), mapping.Qualified(m.Target.Database, beside)
	err := errors.New("no EXCHANGE")
	if t.Caps.Exchange {
		err = t.exec(ctx, "EXCHANGE TABLES "+cur+" AND "+next)
	}
	if err != nil {
		// No EXCHANGE (18.16), or a database that is not Atomic.
		tmp := mapping.Qualified(m.Target.Database, beside+"_old")
		if err := t.exec(ctx, "RENAME TABLE "+cur+" TO "+tmp+", "+next+" TO "+cur); err != nil {
			return nil, err
		}
		if err := t.exec(ctx, "RENAME TABLE "+tmp+" TO "+next); err != nil {
			return nil, err
		}
	}
	if err := t.exec(ctx, "DROP TABLE IF EXISTS "+next); err != nil {
		return nil, err
	}
	return t.RemakeView(ctx)
}

// DropBesides drops the tables a resync of the target built beside it
// and did not swap in (a run killed during the load or the swap), but the
// one of generation keep ("": none).
func (t *Server) DropBesides(ctx context.Context, keep string) ([]string, error) {
	m := t.M
	prefix := m.Target.Table + besideSuffix
	var names []string
	err := t.systemTables(ctx, "list the tables of "+m.Target.Database, func() error {
		names = names[:0]
		rows, err := t.conn.Query(ctx, "SELECT name FROM system.tables WHERE database = ? AND startsWith(name, ?)", m.Target.Database, prefix)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				return err
			}
			names = append(names, n)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	var dropped []string
	for _, n := range names {
		if keep != "" && strings.TrimSuffix(n, "_old") == BesideName(m.Target.Table, keep) {
			continue
		}
		if err := t.exec(ctx, "DROP TABLE IF EXISTS "+mapping.Qualified(m.Target.Database, n)); err != nil {
			return dropped, err
		}
		dropped = append(dropped, n)
	}
	return dropped, nil
}

// execArgs runs one statement with arguments clickhouse-go binds (a nil
// arg: none), with the call timeout.
func (t *Server) execArgs(ctx context.Context, sql string, arg any) error {
	if arg == nil {
		return t.exec(ctx, sql)
	}
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	if err := t.conn.Exec(cctx, sql, arg); err != nil {
		return classify(fmt.Errorf("ClickHouse: %s: %w", firstLine(sql), err))
	}
	return nil
}

// Standing is a target table as it stands: its columns but the version
// and the delete marker, in order, each with its ClickHouse type, and its
// sorting key's columns; Found is false when there is no such table.
type Standing struct {
	Cols  [][2]string
	Key   []string
	Found bool
}

// Standing reads the mapping's target table as it stands.
func (t *Server) Standing(ctx context.Context) (Standing, error) {
	obj, err := t.inspect(ctx, t.M.Target.Table)
	if err != nil || !obj.found {
		return Standing{}, err
	}
	st := Standing{Found: true}
	for _, c := range obj.cols {
		if c.name != t.M.Target.VersionColumn && c.name != t.M.Target.DeletedColumn {
			st.Cols = append(st.Cols, [2]string{c.name, c.typ})
		}
	}
	for _, k := range strings.Split(normKey(obj.sortingKey), ",") {
		if k != "" {
			st.Key = append(st.Key, k)
		}
	}
	return st, nil
}

// SyncView makes the live view when no table or view has its name, and
// makes it again when it is a view of other columns than the mapping's,
// in the mapping's order (the columns cdc sync follows: setup and sync
// make the same one); a table or another object of its name is refused
// (checkViewObject). remade says it was missing or made again.
func (t *Server) SyncView(ctx context.Context) (remade bool, err error) {
	obj, err := t.inspect(ctx, t.M.Target.LiveView)
	switch {
	case err != nil:
		return false, err
	case !obj.found:
		if err := t.exec(ctx, t.ddl(createViewSQL(t.M))); err != nil {
			return false, err
		}
		return true, t.checkView(ctx)
	case obj.engine != "View":
		return false, t.checkViewObject(obj)
	case t.checkViewObject(obj) == nil:
		return false, nil
	}
	_, err = t.RemakeView(ctx)
	return true, err
}

// CreateDatabases makes the databases of ms whose mapping asks setup to
// (target.create_database), before anything else is made in them (the
// load ledger, which cdc setup reads before it makes the targets).
func (t *Server) CreateDatabases(ctx context.Context, ms []*mapping.Mapping) error {
	made := map[string]bool{}
	for _, m := range ms {
		if !m.Target.CreateDatabase || made[m.Target.Database] {
			continue
		}
		made[m.Target.Database] = true
		if err := t.exec(ctx, t.ddl(createDatabaseSQL(m))); err != nil {
			return err
		}
	}
	return nil
}

// CheckWritable refuses a user whose settings forbid what setup and sync
// do (CREATE, ALTER, INSERT): readonly other than 0, or allow_ddl 0
// (ErrNotAllowed, configuration).
func (t *Server) CheckWritable(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	var readonly, ddl string
	if err := t.conn.QueryRow(cctx, "SELECT anyIf(value, name = 'readonly'), anyIf(value, name = 'allow_ddl') FROM system.settings "+
		"WHERE name IN ('readonly', 'allow_ddl')").Scan(&readonly, &ddl); err != nil {
		return classify(fmt.Errorf("read the user's readonly and allow_ddl settings: %w", err))
	}
	switch {
	case readonly != "0":
		return outcome.Config.Mark(fmt.Errorf("%w: the user's readonly setting is %s: setup creates tables and sync inserts and alters them", ErrNotAllowed, readonly))
	case ddl == "0" || ddl == "false":
		return outcome.Config.Mark(fmt.Errorf("%w: the user's allow_ddl setting is 0: setup creates tables and sync alters them", ErrNotAllowed))
	}
	return nil
}

// MissingDatabases returns the databases of dbs the server does not have.
func (t *Server) MissingDatabases(ctx context.Context, dbs []string) ([]string, error) {
	cctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	have := map[string]bool{}
	rows, err := t.conn.Query(cctx, "SELECT name FROM system.databases")
	if err != nil {
		return nil, classify(fmt.Errorf("list the databases: %w", err))
	}
	defer rows.Close()
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, classify(fmt.Errorf("list the databases: %w", err))
		}
		have[n] = true
	}
	if err := rows.Err(); err != nil {
		return nil, classify(fmt.Errorf("list the databases: %w", err))
	}
	var missing []string
	for _, db := range dbs {
		if !have[db] {
			missing = append(missing, db)
		}
	}
	return missing, nil
}
