package slotsync

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/pgvalue"
	"github.com/changesink/changesink/tasks/cdc/slot"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// checkEnv is a source with one table setup would take as it is (good),
// and a config that publishes it into the test's ClickHouse database.
func checkEnv(t *testing.T) (*syncEnv, Config, Env, context.Context) {
	e := newSyncEnv(t)
	e.tables = []string{"public.good"}
	e.exec(`CREATE TABLE good (id int PRIMARY KEY, v text)`, `INSERT INTO good VALUES (1, 'a')`)
	cfg, env := e.config()
	cfg.Tables = e.tables
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return e, cfg, env, ctx
}

// nothingCreated fails the test when the publication, the slot or a
// target of e exists (other is a test's table of another engine).
func (e *syncEnv) nothingCreated() {
	e.t.Helper()
	e.noSlot()
	if got := e.rows(`SELECT count(*)::text FROM pg_publication WHERE pubname = '` + e.pub + `'`); got[0] != "0" {
		e.t.Errorf("publication %s was made", e.pub)
	}
	if got := e.ch.query(`SELECT count() FROM system.tables WHERE database = '` + e.chDB + `' AND name != 'other'`); strings.Join(got, "") != "0" {
		e.t.Errorf("%s tables were made in ClickHouse", strings.Join(got, ""))
	}
}

// wantProblems checks a check's outcome: ErrPreflight (configuration)
// wrapping each of want, n problems in all; none when want is empty.
func wantProblems(t *testing.T, res *CheckResult, err error, n int, want ...error) {
	t.Helper()
	if res == nil {
		t.Fatalf("no result: %v", err)
	}
	for _, p := range res.Problems {
		t.Logf("problem, %s: %v", p.Area, p.Err)
	}
	if len(want) == 0 {
		if err != nil || len(res.Problems) > 0 {
			t.Fatalf("check: %v, want no problem", err)
		}
		return
	}
	if !errors.Is(err, change.ErrPreflight) || outcome.Classify(err) != outcome.Config {
		t.Errorf("check: %v (%s), want ErrPreflight, configuration", err, outcome.Classify(err))
	}
	if len(res.Problems) != n {
		t.Errorf("%d problems, want %d", len(res.Problems), n)
	}
	for _, w := range want {
		if !errors.Is(err, w) {
			t.Errorf("no problem is %v", w)
		}
	}
}

// TestCheckOneProblemAtATime: cdc check on a source and target setup
// would take finds nothing and creates nothing; each problem planted
// alone is the one problem it reports, with nothing created.
func TestCheckOneProblemAtATime(t *testing.T) {
	e, cfg, env, ctx := checkEnv(t)
	res, err := Check(ctx, cfg, env)
	wantProblems(t, res, err, 0)
	if len(res.Tables) != 1 || res.Tables[0] != "public.good" || res.SourceVersion == "" || res.TargetVersion == "" {
		t.Errorf("result %+v", res)
	}
	e.nothingCreated()

	e.exec(`CREATE TABLE nokey (id int, v text)`, `CREATE TABLE geo (id int PRIMARY KEY, p point)`,
		`CREATE TABLE other (id int PRIMARY KEY)`, `CREATE SCHEMA s2`, `CREATE TABLE s2.good (id int PRIMARY KEY)`,
		`CREATE TABLE meta (id int PRIMARY KEY, _cdc_lsn bigint)`)
	e.ch.exec(`CREATE TABLE ` + e.chDB + `.other (x String, y UInt8) ENGINE = MergeTree ORDER BY x`)
	u, err := url.Parse(cfg.ClickHouse.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/no_such_db_" + e.slot
	missingDB := u.String()
	for _, tc := range []struct {
		name   string
		tables []string
		yaml   string // the mapping file ("": the env's)
		source []string
		url    string // CLICKHOUSE_URL ("": the env's)
		want   error
		says   string
	}{
		{name: "a target of another engine", tables: []string{"public.good", "public.other"}, want: change.ErrTargetMismatch,
			says: "is a MergeTree, not a ReplacingMergeTree"},
		{name: "DDL not allowed", url: cfg.ClickHouse.URL + "?allow_ddl=0", want: target.ErrNotAllowed, says: "allow_ddl"},
		{name: "the URL's database missing", url: missingDB, want: change.ErrNoDatabase, says: "no_such_db_" + e.slot},
		{name: "missing table", tables: []string{"public.good", "public.ghost"}, want: slot.ErrNoTable, says: "public.ghost"},
		{name: "no key", tables: []string{"public.good", "public.nokey"}, want: slot.ErrReplicaIdentity, says: "public.nokey"},
		{name: "unmappable column", tables: []string{"public.good", "public.geo"}, want: pgvalue.ErrUnsupportedType, says: `"p"`},
		{name: "missing database", yaml: "defaults: {target: {database: no_such_db_" + e.slot + "}}\n", want: change.ErrNoDatabase,
			says: "no_such_db_" + e.slot},
		{name: "a column named like the version column", tables: []string{"public.good", "public.meta"}, want: mapping.ErrMetaColumnName,
			says: `table public.meta: column "_cdc_lsn"`},
		{name: "two tables onto one target", tables: []string{"public.good", "s2.good"}, want: mapping.ErrTargetsShareName, says: "good"},
		{name: "publication without deletes", source: []string{`CREATE PUBLICATION ` + e.pub + ` FOR TABLE good WITH (publish = 'insert, update')`},
			want: slot.ErrPublicationActions, says: e.pub},
		{name: "publication with a row filter", source: []string{`CREATE PUBLICATION ` + e.pub + ` FOR TABLE good WHERE (id > 0)`},
			want: slot.ErrPublicationFilter, says: "public.good"},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			c := cfg
			if tc.tables != nil {
				c.Tables = tc.tables
			}
			if tc.url != "" {
				c.ClickHouse.URL = tc.url
			}
			if tc.yaml != "" {
				set, err := mapping.ParseSet("sync.yaml", []byte(tc.yaml))
				if err != nil {
					t.Fatal(err)
				}
				c.Mappings = set
			}
			e.exec(tc.source...)
			t.Cleanup(func() { e.exec(`DROP PUBLICATION IF EXISTS ` + e.pub) })
			res, err := Check(ctx, c, env)
			wantProblems(t, res, err, 1, tc.want)
			if err != nil && !strings.Contains(err.Error(), tc.says) {
				t.Errorf("the problem does not say %q: %v", tc.says, err)
			}
			if tc.source == nil {
				e.nothingCreated()
			}
		})
	}

	// A column list is no problem, but a note naming the columns.
	e.exec(`CREATE PUBLICATION ` + e.pub + ` FOR TABLE good (id)`)
	res, err = Check(ctx, cfg, env)
	wantProblems(t, res, err, 0)
	if notes := strings.Join(noteTexts(res), "\n"); !strings.Contains(notes, "publishes only columns id of table public.good") {
		t.Errorf("no note names the column list: %s", notes)
	}
	e.exec(`DROP PUBLICATION ` + e.pub)

	// A partitioned table is published by its leaf partitions: the check
	// maps those, and a role that may replicate and read the tables but
	// owns none of them passes once the owner has published them.
	e.exec(`CREATE TABLE parted (id int, at date, PRIMARY KEY (id, at)) PARTITION BY RANGE (at)`,
		`CREATE TABLE parted_2025 PARTITION OF parted FOR VALUES FROM ('2025-01-01') TO ('2026-01-01')`,
		`CREATE PUBLICATION `+e.pub+` FOR TABLE good, parted`)
	role := e.slot + "_reader"
	testenv.CreateRole(t, e.admin, role, "reader-pw")
	t.Cleanup(func() { testenv.ExecPostgres(t, e.dsn, `DROP OWNED BY `+role) }) // before the role is dropped
	e.exec(`ALTER ROLE `+role+` REPLICATION`, `GRANT SELECT ON good, parted, parted_2025 TO `+role)
	reader := cfg
	reader.Postgres.DSN = testenv.WithPassword(t, testenv.WithUser(t, e.dsn, role), "reader-pw")
	reader.Tables = []string{"public.good", "public.parted"}
	res, err = Check(ctx, reader, env)
	wantProblems(t, res, err, 0)
	if got := strings.Join(res.Tables, ","); got != "public.good,public.parted_2025" {
		t.Errorf("tables %s, want public.good,public.parted_2025 (a partitioned table by its leaves)", got)
	}
	// A table named twice is one table.
	reader.Tables = []string{"public.good", "public.parted", "public.good"}
	res, err = Check(ctx, reader, env)
	wantProblems(t, res, err, 0)

	// The reader's own table, which setup would add to a publication the
	// reader does not own; a table in a schema the reader may not use.
	e.exec(`CREATE TABLE mine (id int PRIMARY KEY)`, `ALTER TABLE mine OWNER TO `+role,
		`CREATE SCHEMA closed`, `CREATE TABLE closed.t (id int PRIMARY KEY)`, `GRANT SELECT ON closed.t TO `+role)
	reader.Tables = []string{"public.good", "public.parted", "public.mine", "closed.t"}
	res, err = Check(ctx, reader, env)
	wantProblems(t, res, err, 3, slot.ErrPublicationNotOwned, slot.ErrNoSelect, slot.ErrNotOwner)
	if err != nil && (!strings.Contains(err.Error(), "public.mine: role does not own the publication") || !strings.Contains(err.Error(), "closed.t")) {
		t.Errorf("the problems do not name public.mine and closed.t: %v", err)
	}
}

// TestCheckEveryProblemAtOnce: a role without REPLICATION that may not
// read, own or publish the tables, a table that does not exist, one
// without a key, a column no mapping is generated for and a target
// database that does not exist are all reported by one check, each with
// its fix, and nothing is created; a slot nobody reads is a note naming
// it. Setup, given the same, refuses with every problem before it creates
// anything.
func TestCheckEveryProblemAtOnce(t *testing.T) {
	e, cfg, env, ctx := checkEnv(t)
	e.exec(`CREATE TABLE nokey (id int, v text)`, `CREATE TABLE geo (id int PRIMARY KEY, p point)`)
	stale := e.slot + "_stale"
	e.exec(`SELECT pg_create_logical_replication_slot('` + stale + `', 'pgoutput')`)
	t.Cleanup(func() { testenv.DropSlot(t, e.admin, stale) })

	set, err := mapping.ParseSet("sync.yaml", []byte("defaults: {target: {database: no_such_db_"+e.slot+"}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Mappings = set
	cfg.Tables = []string{"public.good", "public.nokey", "public.geo", "public.ghost"}
	role := e.slot + "_plain"
	testenv.CreateRole(t, e.admin, role, "plain-pw")
	plain := cfg
	plain.Postgres.DSN = testenv.WithPassword(t, testenv.WithUser(t, e.dsn, role), "plain-pw")
	res, err := Check(ctx, plain, env)
	// One each, but three tables unreadable and three not owned: every
	// problem at once, not the first.
	wantProblems(t, res, err, 12, slot.ErrNoReplication, slot.ErrNoTable, slot.ErrReplicaIdentity, slot.ErrNoSelect,
		slot.ErrNotOwner, slot.ErrNoCreate, change.ErrNoDatabase, pgvalue.ErrUnsupportedType)
	if res == nil {
		return
	}
	count := map[error]int{}
	for _, p := range res.Problems {
		for _, s := range []error{slot.ErrNoSelect, slot.ErrNotOwner} {
			if errors.Is(p.Err, s) {
				count[s]++
			}
		}
	}
	if count[slot.ErrNoSelect] != 3 || count[slot.ErrNotOwner] != 3 {
		t.Errorf("tables without SELECT %d, not owned %d; want 3 and 3", count[slot.ErrNoSelect], count[slot.ErrNotOwner])
	}
	if !strings.Contains(strings.Join(noteTexts(res), "\n"), "slot "+stale+" (database "+e.slot+") is not read by anyone") {
		t.Errorf("no note names the slot nobody reads, %s: %v", stale, noteTexts(res))
	}
	e.nothingCreated()

	_, err = SetupSync(ctx, plain, env)
	if !errors.Is(err, change.ErrPreflight) || !errors.Is(err, slot.ErrNoReplication) || !errors.Is(err, change.ErrNoDatabase) {
		t.Errorf("setup: %v, want every problem (ErrPreflight)", err)
	}
	e.nothingCreated()
}

func noteTexts(res *CheckResult) []string {
	var out []string
	for _, n := range res.Notes {
		out = append(out, n.Text)
	}
	return out
}

// TestCheckServersAway: with PostgreSQL and ClickHouse both unreachable,
// the check (and setup's first step) fails transient, as one server away
// does, naming both: a retry may find neither problem.
func TestCheckServersAway(t *testing.T) {
	pg, ch := testenv.ClosedAddr(t), testenv.ClosedAddr(t)
	cfg := Config{Postgres: Postgres{DSN: "postgres://u:p@" + pg + "/db?sslmode=disable&connect_timeout=5"}, Tables: []string{"public.t"},
		ClickHouse: target.ClickHouse{URL: "clickhouse://" + ch + "/default", Timeout: 5 * time.Second}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Check(ctx, cfg, Env{})
	if res == nil || len(res.Problems) != 2 || !errors.Is(err, change.ErrPreflight) || outcome.Classify(err) != outcome.Transient {
		t.Fatalf("check with both servers away: %v (%s), %+v; want ErrPreflight, transient, 2 problems", err, outcome.Classify(err), res)
	}
	for _, addr := range []string{pg, ch} {
		if !strings.Contains(err.Error(), addr) {
			t.Errorf("the check does not name %s: %v", addr, err)
		}
	}
	_, err = SetupSync(ctx, cfg, Env{})
	if !errors.Is(err, change.ErrPreflight) || outcome.Classify(err) != outcome.Transient {
		t.Errorf("setup with both servers away: %v (%s), want ErrPreflight, transient", err, outcome.Classify(err))
	}
}
