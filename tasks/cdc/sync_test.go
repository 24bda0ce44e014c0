package cdc

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/internal/testhook"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// syncEnv is a sync test's source database, with its slot and
// publication, and its ClickHouse database.
type syncEnv struct {
	t      testing.TB
	admin  string
	dsn    string
	slot   string
	pub    string
	chURL  string
	chDB   string
	ch     *env // the ClickHouse side's helpers (query)
	tables []string
}

func newSyncEnv(t testing.TB) *syncEnv {
	t.Helper()
	return newSyncEnvAt(t, testenv.Lookup(t, "CHANGESINK_TEST_PG")["CHANGESINK_TEST_PG"])
}

// newSyncEnvAt is newSyncEnv on the PostgreSQL server admin reaches.
func newSyncEnvAt(t testing.TB, admin string) *syncEnv {
	t.Helper()
	name := testenv.UniqueName(t, "sync_")
	e := &syncEnv{t: t, admin: admin, slot: name, pub: name}
	e.dsn = testenv.CreateDatabase(t, admin, name, "")
	t.Cleanup(e.dropSlot) // before the database: a slot keeps it
	e.chURL = testenv.ClickHouseURL(t)
	e.chDB, _ = testenv.CreateClickHouseDatabase(t, e.chURL, "cdc_sync_")
	e.ch = &env{t: t, url: e.chURL, conn: testenv.OpenClickHouse(t, e.chURL), db: e.chDB}
	return e
}

// exec runs statements on the source, each in its own transaction.
func (e *syncEnv) exec(stmts ...string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			e.t.Fatalf("%s: %v", s, err)
		}
	}
}

// rows returns sql's rows on the source, tab-joined, NULL as \N.
func (e *syncEnv) rows(sql string) []string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close(ctx)
	rs, err := conn.Query(ctx, sql)
	if err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var cells []string
		for _, raw := range rs.RawValues() {
			if raw == nil {
				cells = append(cells, `\N`)
			} else {
				cells = append(cells, string(raw))
			}
		}
		out = append(out, strings.Join(cells, "\t"))
	}
	if err := rs.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

func (e *syncEnv) dropSlot() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, e.admin)
	if err != nil {
		e.t.Errorf("drop slot %s: %v", e.slot, err)
		return
	}
	defer conn.Close(ctx)
	for {
		_, err := conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, e.slot)
		if err == nil {
			_, err = conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, e.slot)
		}
		if err == nil || ctx.Err() != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// config is the run's SyncConfig: every table into the test's ClickHouse
// database.
func (e *syncEnv) config() (SyncConfig, Env) {
	e.t.Helper()
	set, err := mapping.ParseSet("sync.yaml", []byte("defaults: {target: {database: "+e.chDB+"}}\ntables:\n"+e.tablesYAML()))
	if err != nil {
		e.t.Fatal(err)
	}
	return SyncConfig{Postgres: Postgres{DSN: e.dsn}, Slot: e.slot, Publication: e.pub, Mappings: set,
			ClickHouse: target.ClickHouse{URL: e.chURL, Timeout: time.Minute}},
		Env{hooks: testhook.Hooks{LockTiming: testLockTiming}}
}

func (e *syncEnv) tablesYAML() string {
	var b strings.Builder
	for _, t := range e.tables {
		schema, name, _ := strings.Cut(t, ".")
		fmt.Fprintf(&b, "  - source: {database: %s, schema: %s, table: %s}\n", e.slot, schema, name)
	}
	return b.String()
}

// same compares a source query with a ClickHouse query of the live view,
// row by row.
func (e *syncEnv) same(pgSQL, chSQL string) {
	e.t.Helper()
	want := e.rows(pgSQL)
	got := e.ch.query(chSQL)
	for i := range got {
		got[i] = strings.ReplaceAll(got[i], "NULL", `\N`)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		e.t.Errorf("ClickHouse\n%s\nPostgreSQL\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSyncEndToEnd: setup loads the table from the new slot's snapshot,
// sync applies inserts, updates (one leaving a TOASTed column unchanged,
// one changing the key, one to NULL) and deletes, and a second sync finds
// nothing new; after each, the live view equals the source row by row.
func TestSyncEndToEnd(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.items"}
	e.exec(`CREATE TABLE items (id bigint PRIMARY KEY, qty int NOT NULL, price numeric(12,2), name text, note text)`,
		`ALTER TABLE items ALTER COLUMN note SET STORAGE EXTERNAL`,
		`INSERT INTO items SELECT i, i*10, i*1.5, 'item '||i, NULL FROM generate_series(1, 5) i`,
		`UPDATE items SET note = (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 200) g) WHERE id = 3`)
	cfg, env := e.config()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := SetupSync(ctx, cfg, env)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Created || res.Loaded != 5 {
		t.Fatalf("setup: %+v", res)
	}
	// Decimals compared in cents: 26.9 prints 1.50 as 1.5, 18.16 as 1.50.
	const pgSQL = `SELECT id::text, qty::text, (price * 100)::bigint::text, name, md5(note) FROM items ORDER BY items.id`
	chSQL := `SELECT id, qty, toString(toInt64(price * 100)), name, lower(hex(MD5(note))) FROM ` + e.chDB + `.items_live ORDER BY id`
	e.same(pgSQL, chSQL)

	e.exec(`INSERT INTO items VALUES (6, 60, 9.99, 'six', NULL), (7, 70, NULL, 'seven', 'x')`,
		`UPDATE items SET qty = 31 WHERE id = 3`, // note unchanged: a TOASTed value not sent
		`UPDATE items SET id = 20 WHERE id = 2`,
		`UPDATE items SET price = NULL, name = NULL WHERE id = 4`,
		`DELETE FROM items WHERE id = 5`)
	sres, err := Sync(ctx, cfg, env)
	if err != nil {
		t.Fatal(err)
	}
	if sres.Transactions != 5 || sres.Why != "caught up" || len(sres.Tables) != 1 {
		t.Errorf("sync: %+v", sres)
	}
	t.Log(sres.Summary())
	e.same(pgSQL, chSQL)

	again, err := Sync(ctx, cfg, env)
	if err != nil {
		t.Fatal(err)
	}
	if again.Transactions != 0 || again.Why != "caught up" {
		t.Errorf("a sync with nothing new: %+v", again)
	}
	e.same(pgSQL, chSQL)
}

// TestSyncKeyChangeKeepsToast: an update that changes the key sends the
// new row without its unchanged TOASTed values; they are the old key's,
// from the same transaction, the flush, or the target.
func TestSyncKeyChangeKeepsToast(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.acc"}
	e.exec(`CREATE TABLE acc (id bigint PRIMARY KEY, v bigint NOT NULL, blob text)`,
		`ALTER TABLE acc ALTER COLUMN blob SET STORAGE EXTERNAL`,
		`INSERT INTO acc SELECT i, i, repeat(md5(i::text), 100) FROM generate_series(1, 4) i`)
	cfg, env := e.config()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	e.exec(`UPDATE acc SET id = 10 WHERE id = 1`, // from the target
		`UPDATE acc SET v = 20 WHERE id = 2`, `UPDATE acc SET id = 20 WHERE id = 2`, // from the flush, itself unchanged
		`BEGIN; UPDATE acc SET v = 30 WHERE id = 3; UPDATE acc SET id = 30 WHERE id = 3; COMMIT`) // from the transaction
	if _, err := Sync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	e.same(`SELECT id::text, v::text, md5(blob) FROM acc ORDER BY acc.id`,
		`SELECT id, v, lower(hex(MD5(blob))) FROM `+e.chDB+`.acc_live ORDER BY id`)
}

// setUpSync makes the source table (stmts: its CREATE and first rows),
// runs SetupSync for it alone and returns its env, the settings and a
// context of three minutes.
func setUpSync(t *testing.T, table string, stmts ...string) (*syncEnv, SyncConfig, Env, context.Context) {
	t.Helper()
	e := newSyncEnv(t)
	e.tables = []string{table}
	e.exec(stmts...)
	cfg, env := e.config()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	return e, cfg, env, ctx
}
