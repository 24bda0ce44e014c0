package cdc

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/pgvalue"
)

// The refusals of cdc sync whose remedy is the hints table's (Hint): each
// with its sentinel, its class and the hint the CLI prints beside it. The
// other tests of cdc sync are slotsync's.

// TestSyncSetupTableWithoutKey: a table without a primary key under
// REPLICA IDENTITY FULL is published, but its target needs a key: the
// setup asks for one in the mapping (configuration, exit 2), naming the
// mapping entry, and drops the slot it made; with the key given the table
// is loaded and streamed.
func TestSyncSetupTableWithoutKey(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.nokey"}
	e.exec(`CREATE TABLE nokey (id bigint NOT NULL, v text)`, `ALTER TABLE nokey REPLICA IDENTITY FULL`, `INSERT INTO nokey VALUES (1, 'a')`)
	cfg, env := e.config()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, err := SetupSync(ctx, cfg, env)
	wantRefused(t, err, outcome.Config, 2, mapping.ErrNoKey, "Add a primary key to the table, or give its mapping entry key:")
	wantError(t, err, outcome.Config, nil, "sync.yaml:3:5", "public.nokey has no primary key", "key is required")
	e.noSlot()
	set, err := mapping.ParseSet("sync.yaml", []byte("defaults: {target: {database: "+e.chDB+"}}\ntables:\n"+
		"  - source: {schema: public, table: nokey}\n    key: [id]\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Mappings = set
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	e.exec(`UPDATE nokey SET v = 'b'`, `INSERT INTO nokey VALUES (2, 'c')`)
	e.catchUp(ctx, cfg, env)
	e.same(`SELECT id::text, v FROM nokey ORDER BY id`, `SELECT id, v FROM `+e.chDB+`.nokey_live ORDER BY id`)
}

// TestSyncUnmappableColumn: a column of a type no mapping is generated
// for (point) is refused at setup (configuration, exit 2; the hint: map it
// as String), the slot it made dropped; with the column mapped as String
// the setup loads the table and sync streams it. A column of
// that type added between runs holds that table at the change (exit 1,
// naming the table, the column and the mapping to give it), its earlier
// transactions applied; with the column mapped as String, a run with
// CDC_RESYNC for the table loads it again and releases it, and sync
// streams it on.
func TestSyncUnmappableColumn(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.geo"}
	e.exec(`CREATE TABLE geo (id int PRIMARY KEY, p point)`, `INSERT INTO geo VALUES (1, '(1,2)')`)
	cfg, env := e.config()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, err := SetupSync(ctx, cfg, env)
	wantRefused(t, err, outcome.Config, 2, pgvalue.ErrUnsupportedType, "as String")
	wantError(t, err, outcome.Config, nil, "public.geo", `"p"`)
	withP := func(table string) *mapping.Set {
		set, err := mapping.ParseSet("sync.yaml", []byte("defaults: {target: {database: "+e.chDB+"}}\ntables:\n"+
			"  - source: {schema: public, table: "+table+"}\n    columns:\n      - {name: p, type: Nullable(String)}\n"))
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	e.noSlot()
	cfg.Mappings = withP("geo")
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	e.exec(`INSERT INTO geo VALUES (2, '(-1.5,2e-3)'), (3, NULL)`)
	e.catchUp(ctx, cfg, env)
	e.same(`SELECT id::text, coalesce(p::text, '\N') FROM geo ORDER BY id`, `SELECT id, ifNull(p, '\\N') FROM `+e.chDB+`.geo_live ORDER BY id`)

	e.tables = []string{"public.geo2"}
	e.exec(`CREATE TABLE geo2 (id int PRIMARY KEY, v text)`, `INSERT INTO geo2 VALUES (1, 'a')`)
	second := *e
	second.slot = e.slot + "_2"
	t.Cleanup(second.dropSlot)
	cfg, env = e.config()
	cfg.Slot, cfg.Publication = second.slot, second.slot
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	e.exec(`INSERT INTO geo2 VALUES (2, 'b')`, `ALTER TABLE geo2 ADD COLUMN p point`, `INSERT INTO geo2 VALUES (3, 'c', '(3,4)')`)
	_, err = Sync(ctx, cfg, env)
	wantRefused(t, err, outcome.Refused, outcome.Refused.ExitCode(), change.ErrHeld, "CDC_RESYNC=<schema.table>")
	wantError(t, err, outcome.Refused, nil, "public.geo2", `"p"`, "no generated mapping for the column's type", "Nullable(String)")
	if got := e.liveIDs2("geo2"); got != "1,2" {
		t.Errorf("live ids %q after the hold, want 1,2 (the insert before the change)", got)
	}
	cfg.Mappings = withP("geo2")
	cfg.Resync = []string{"public.geo2"}
	if _, err := Sync(ctx, cfg, env); err != nil {
		t.Fatalf("the resync with the column mapped: %v", err)
	}
	cfg.Resync = nil
	e.exec(`INSERT INTO geo2 VALUES (4, 'd', '(5,6)')`)
	e.catchUp(ctx, cfg, env)
	e.same(`SELECT id::text, v, coalesce(p::text, '\N') FROM geo2 ORDER BY id`, `SELECT id, v, ifNull(p, '\\N') FROM `+e.chDB+`.geo2_live ORDER BY id`)
}

// TestSyncFollowsARetypedColumn: a column retyped between runs (int to
// bigint: PostgreSQL rewrites the table, which the stream does not show)
// is followed: the table is loaded again from a new snapshot into a
// target of the new ClickHouse type, swapped in; the live view equals the
// source, the new value that only Int64 holds among it.
//
//changesink:per-server
func TestSyncFollowsARetypedColumn(t *testing.T) {
	e, cfg, env, ctx := setUpSync(t, "public.r", `CREATE TABLE r (id int PRIMARY KEY, n int)`, `INSERT INTO r VALUES (1, 1)`)
	e.exec(`INSERT INTO r VALUES (2, 2)`, `ALTER TABLE r ALTER COLUMN n TYPE bigint`, `INSERT INTO r VALUES (3, 3000000000)`)
	res, err := Sync(ctx, cfg, env)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Resynced) != 1 || res.Resynced[0].Table != "public.r" || !strings.Contains(res.Resynced[0].Why, "rewritten") {
		t.Errorf("resynced %+v, want public.r, rewritten", res.Resynced)
	}
	e.same(`SELECT id::text, n::text FROM r ORDER BY r.id`, `SELECT id, n FROM `+e.chDB+`.r_live ORDER BY id`)
	if got := e.ch.query(`SELECT type FROM system.columns WHERE database = '` + e.chDB + `' AND table = 'r' AND name = 'n'`); strings.Join(got, "") != "Nullable(Int64)" {
		t.Errorf("the target's column n is %v, want Nullable(Int64)", got)
	}
}

// TestSyncExactValues: the values the trigger changes (issue 23) arrive
// exactly: an explicit NULL in a column with a DEFAULT stays NULL; numeric
// NaN, float NaN, ±Infinity and -0, date and timestamp ±infinity are held
// (generated mappings: String for an unconstrained numeric, a date and a
// timestamp on 18.16; Float64 for a double). A value the mapping cannot
// hold (±infinity in a Date column a mapping entry asks for) is refused,
// naming table, column and the value's kind, after the transactions
// before it; the slot keeps it.
//
//changesink:per-server
func TestSyncExactValues(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.v"}
	e.exec(`CREATE TABLE v (id int PRIMARY KEY, note text DEFAULT 'dflt', n numeric, f double precision, d date, ts timestamp, d2 date)`,
		`INSERT INTO v (id, note, n, f, d, ts) VALUES (1, NULL, 'NaN', 'NaN', 'infinity', '-infinity'), (2, DEFAULT, 1.50, '-0', '2024-02-29', '2024-02-29 12:00:00.123456')`)
	set, err := mapping.ParseSet("sync.yaml", []byte("defaults: {target: {database: "+e.chDB+"}}\ntables:\n"+
		"  - source: {database: "+e.slot+", schema: public, table: v}\n    columns:\n      - {name: d2, type: Nullable(Date)}\n"+
		// String on every server (generated: on 18.16 only), for the exact text of NaN and infinity.
		"      - {name: n, type: Nullable(String), source_type: numeric}\n      - {name: d, type: Nullable(String), source_type: date}\n"+
		"      - {name: ts, type: Nullable(String), source_type: timestamp}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, env := e.config()
	cfg.Mappings = set
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	e.exec(`INSERT INTO v (id, note, n, f, d, ts) VALUES (3, NULL, '-1e-20', 'Infinity', '-infinity', 'infinity'), (4, 'x', 0, '-Infinity', '0044-03-15 BC', '1969-12-31 23:59:59.5')`,
		`UPDATE v SET note = NULL WHERE id = 2`)
	if _, err := Sync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	const chFloat = `multiIf(isNaN(f), 'NaN', isInfinite(f) AND f > 0, 'Infinity', isInfinite(f), '-Infinity', toString(f))`
	// An unconstrained numeric held as String is in its canonical text
	// (trailing zeros trimmed), as the trigger path writes it.
	e.same(`SELECT id::text, coalesce(note, '\N'), trim_scale(n)::text, f::text, d::text, to_char(ts, 'YYYY-MM-DD HH24:MI:SS.US') FROM v WHERE ts IS NOT NULL AND ts::text NOT LIKE '%infinity' ORDER BY v.id`,
		`SELECT id, ifNull(note, '\\N'), n, `+chFloat+`, d, ts FROM `+e.chDB+`.v_live WHERE ts NOT LIKE '%infinity' ORDER BY id`)
	e.same(`SELECT id::text, ts::text FROM v WHERE ts::text LIKE '%infinity' ORDER BY v.id`,
		`SELECT id, ts FROM `+e.chDB+`.v_live WHERE ts LIKE '%infinity' ORDER BY id`)

	e.exec(`INSERT INTO v (id) VALUES (5)`, `INSERT INTO v (id, d2) VALUES (6, 'infinity')`, `INSERT INTO v (id) VALUES (7)`)
	_, err = Sync(ctx, cfg, env)
	wantError(t, err, outcome.Refused, pgvalue.ErrSpecialValue, "public.v", "d2")
	if !strings.Contains(Hint(err), "NaN and infinity") {
		t.Errorf("hint %q", Hint(err))
	}
	if got := e.ch.query(`SELECT id FROM ` + e.chDB + `.v_live WHERE id >= 5 ORDER BY id`); strings.Join(got, ",") != "5" {
		t.Errorf("live rows from 5: %v, want 5 (the transaction before the refused one)", got)
	}
}

// TestSyncSetupCreatesTheDatabase: a mapping whose defaults ask setup to
// create the target database (target.create_database) gets it: setup
// makes it before the load ledger it reads first (it failed with "Run
// changesink cdc setup first" while running setup), loads the table, and
// sync streams into it.
func TestSyncSetupCreatesTheDatabase(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.q"}
	e.exec(`CREATE TABLE q (id int PRIMARY KEY, v text)`, `INSERT INTO q VALUES (1, 'a')`)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := e.ch.conn.Exec(ctx, "DROP DATABASE "+e.chDB); err != nil { // made again by setup, dropped at the end
		t.Fatal(err)
	}
	cfg, env := e.config()
	set, err := mapping.ParseSet("sync.yaml", []byte("defaults: {target: {database: "+e.chDB+", create_database: true}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Mappings, cfg.Tables = set, e.tables
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatalf("setup with create_database: %v", err)
	}
	e.exec(`INSERT INTO q VALUES (2, 'b')`, `UPDATE q SET v = 'c' WHERE id = 1`)
	e.catchUp(ctx, cfg, env)
	e.same(`SELECT id::text, v FROM q ORDER BY id`, `SELECT id, v FROM `+e.chDB+`.q_live ORDER BY id`)
}

// TestSyncSetupWithoutTheDatabase: a target database the ClickHouse server
// lacks is refused by cdc setup before it creates anything on the source:
// no publication, no slot (configuration, the hint to create it).
func TestSyncSetupWithoutTheDatabase(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.q"}
	e.exec(`CREATE TABLE q (id int PRIMARY KEY)`)
	cfg, env := e.config()
	set, err := mapping.ParseSet("sync.yaml", []byte("defaults: {target: {database: no_such_db_"+e.slot+"}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Mappings, cfg.Tables = set, e.tables
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = SetupSync(ctx, cfg, env)
	wantRefused(t, err, outcome.Config, 2, change.ErrNoDatabase, "Create the database")
	wantError(t, err, outcome.Config, nil, "no_such_db_"+e.slot, "no publication, no slot")
	e.noSlot()
	if got := e.rows(`SELECT count(*)::text FROM pg_publication WHERE pubname = '` + e.pub + `'`); strings.Join(got, "") != "0" {
		t.Errorf("a publication was made: %v", got)
	}
}
