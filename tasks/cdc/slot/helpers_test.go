package slot

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/testenv"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// source is a database of a test's own on the test PostgreSQL.
type source struct {
	t     testing.TB
	admin string // the server's admin DSN
	dsn   string // the test database's
	pg    *pgconn.Config
}

// newSource creates a database for t (dropped when it ends, after its
// slots).
func newSource(t testing.TB) *source {
	t.Helper()
	admin := testenv.Lookup(t, "CHANGESINK_TEST_PG")["CHANGESINK_TEST_PG"]
	name := testenv.UniqueName(t, "slot_")
	dsn := testenv.CreateDatabase(t, admin, name, "")
	pg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return &source{t: t, admin: admin, dsn: dsn, pg: pg}
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// exec runs each statement in its own transaction (autocommit).
func (s *source) exec(stmts ...string) {
	s.t.Helper()
	execDSN(s.t, s.dsn, stmts...)
}

func execDSN(t testing.TB, dsn string, stmts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	for _, sql := range stmts {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// query returns the first column of the first row of sql.
func (s *source) query(sql string) string {
	s.t.Helper()
	return queryDSN(s.t, s.dsn, sql)
}

func queryDSN(t testing.TB, dsn, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var out *string
	if err := conn.QueryRow(ctx, sql).Scan(&out); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	if out == nil {
		return "NULL"
	}
	return *out
}

// slotName is a slot name unique to t.
func slotName(t testing.TB) string { return testenv.UniqueName(t, "cs_") }

// dropSlotAtEnd drops the slot when the test ends (before its database),
// ending whatever streams from it first.
func (s *source) dropSlotAtEnd(slot string) {
	s.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, s.admin)
		if err != nil {
			s.t.Errorf("drop slot %s: %v", slot, err)
			return
		}
		defer conn.Close(ctx)
		for {
			_, err := conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
				WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot)
			if err == nil {
				_, err = conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
			}
			if err == nil {
				return
			}
			if ctx.Err() != nil {
				s.t.Errorf("drop slot %s: %v", slot, err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// setup runs Ensure for tables (FOR TABLE) with a new slot and
// publication, dropped when the test ends.
func (s *source) setup(slot, pub string, tables ...string) *SetupResult {
	s.t.Helper()
	var list []Table
	for _, name := range tables {
		tb, err := ParseTable(name)
		if err != nil {
			s.t.Fatal(err)
		}
		list = append(list, tb)
	}
	s.dropSlotAtEnd(slot)
	res, err := Ensure(testCtx(s.t, 2*time.Minute), s.pg, Setup{Slot: slot, Publication: pub, Tables: list})
	if err != nil {
		s.t.Fatalf("Ensure: %v", err)
	}
	return res
}

// start starts streaming slot (publication pub, with messages).
func (s *source) start(slot string, pubs ...string) *Stream {
	s.t.Helper()
	st, err := Start(testCtx(s.t, time.Minute), s.pg, StreamConfig{Slot: slot, Publications: pubs, Messages: true,
		IdleTimeout: 2 * time.Second, ActiveWait: 10 * time.Second})
	if err != nil {
		s.t.Fatalf("Start: %v", err)
	}
	s.t.Cleanup(st.Close)
	return st
}

// transcript reads events until commits transactions have committed (and
// the non-transactional messages before them), rendering each as a line;
// it fails the test if they do not arrive within a minute.
func transcript(t testing.TB, st *Stream, commits int) []string {
	t.Helper()
	var out []string
	for _, tx := range readTxs(t, st, commits) {
		out = append(out, tx.lines...)
	}
	return out
}

// txRead is one transaction as read: its events rendered (a
// non-transactional message before it included), its Begin and Commit.
type txRead struct {
	lines  []string
	begin  Begin
	commit Commit
}

// readTxs reads n whole transactions, within a minute.
func readTxs(t testing.TB, st *Stream, n int) []txRead {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	var out []txRead
	var cur txRead
	for len(out) < n {
		ev, err := st.Next(ctx)
		if err != nil {
			t.Fatalf("Next after %d transactions (%q): %v", len(out), tail(cur.lines), err)
		}
		if ev.Kind == KindKeepalive || ev.Kind == KindIdle {
			continue
		}
		cur.lines = append(cur.lines, render(ev))
		switch ev.Kind {
		case KindBegin:
			cur.begin = ev.Tx
		case KindCommit:
			cur.commit = ev.Commit
			out = append(out, cur)
			cur = txRead{}
		}
	}
	return out
}

func tail(lines []string) []string {
	if len(lines) > 3 {
		return lines[len(lines)-3:]
	}
	return lines
}

// render writes an event as one line, values exactly (kind:text, long
// values by their length).
func render(ev *Event) string {
	switch ev.Kind {
	case KindBegin, KindCommit:
		return ev.Kind.String()
	case KindInsert:
		return "insert " + ev.Relation.QualifiedName() + " " + renderTuple(ev.New)
	case KindUpdate:
		s := "update " + ev.Relation.QualifiedName()
		if ev.OldKind != 0 {
			s += " " + string(ev.OldKind) + renderTuple(ev.Old)
		}
		return s + " " + renderTuple(ev.New)
	case KindDelete:
		return "delete " + ev.Relation.QualifiedName() + " " + string(ev.OldKind) + renderTuple(ev.Old)
	case KindTruncate:
		var names []string
		for _, r := range ev.Truncated {
			names = append(names, r.QualifiedName())
		}
		return fmt.Sprintf("truncate %s options %d", strings.Join(names, " "), ev.TruncateOptions)
	case KindRelation:
		return "relation " + renderRelation(ev.Relation) + renderSchema(&ev.Schema)
	case KindType:
		return "type " + ev.Type.Namespace + "." + ev.Type.Name
	case KindOrigin:
		return "origin " + ev.Origin.Name + " " + ev.Origin.LSN.String()
	case KindMessage:
		tx := "non-transactional"
		if ev.Message.Transactional {
			tx = "transactional"
		}
		return fmt.Sprintf("message %s %s %q", tx, ev.Message.Prefix, ev.Message.Content)
	}
	return ev.Kind.String()
}

func renderTuple(t Tuple) string {
	parts := make([]string, len(t.Values))
	for i, v := range t.Values {
		switch {
		case v.Kind == ValueNull || v.Kind == ValueUnchanged:
			parts[i] = string(v.Kind)
		case len(v.Data) > 40:
			parts[i] = fmt.Sprintf("%c:<%d bytes>", v.Kind, len(v.Data))
		default:
			parts[i] = string(v.Kind) + ":" + string(v.Data)
		}
	}
	return "(" + strings.Join(parts, " ") + ")"
}

func renderRelation(r *Relation) string {
	cols := make([]string, len(r.Columns))
	for i, c := range r.Columns {
		cols[i] = fmt.Sprintf("%s %d", c.Name, c.TypeOID)
		if c.TypeOID >= 16384 { // a type of the test's own: its OID differs from run to run
			cols[i] = c.Name + " user"
		}
		if c.TypeMod >= 0 {
			cols[i] += fmt.Sprintf("(%d)", c.TypeMod)
		}
		if c.Key {
			cols[i] += " key"
		}
	}
	return fmt.Sprintf("%s [%s] identity %c", r.QualifiedName(), strings.Join(cols, ", "), r.Identity)
}

func renderSchema(c *SchemaChange) string {
	if c.Prev == nil {
		return ""
	}
	var parts []string
	for _, a := range c.Added {
		parts = append(parts, "+"+a.Name)
	}
	for _, d := range c.Dropped {
		parts = append(parts, "-"+d.Name)
	}
	for _, r := range c.Retyped {
		parts = append(parts, fmt.Sprintf("~%s %d->%d", r.Name, r.From.TypeOID, r.To.TypeOID))
	}
	if c.KeyChanged {
		parts = append(parts, "key")
	}
	if c.IdentityChanged {
		parts = append(parts, "identity")
	}
	if c.Renamed {
		parts = append(parts, "renamed")
	}
	if c.Reordered {
		parts = append(parts, "reordered")
	}
	for _, r := range c.RenamedCandidates {
		parts = append(parts, "rename?"+r.From+"->"+r.To)
	}
	if len(parts) == 0 {
		return " (unchanged)"
	}
	return " (" + strings.Join(parts, " ") + ")"
}
