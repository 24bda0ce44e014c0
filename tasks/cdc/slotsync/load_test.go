package slotsync

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/slot"
)

// loadTablesSQL makes the load tests' tables: wide, with values COPY's
// text format escapes (tabs, newlines, backslashes, a text \N), NULLs and
// empty strings, over many pages; small, never analyzed (no estimate);
// and empty.
var loadTablesSQL = []string{
	`CREATE TABLE wide (id bigint PRIMARY KEY, n int NOT NULL, amount numeric(12,2), name text, ts timestamp, doc jsonb, flag boolean)`,
	`INSERT INTO wide SELECT i, i % 1000, i * 1.25, CASE i % 7 WHEN 0 THEN E'tab\there' WHEN 1 THEN E'line\nbreak\r' WHEN 2 THEN E'back\\slash' WHEN 3 THEN '\N'
	   WHEN 4 THEN '' WHEN 5 THEN NULL ELSE 'ünïcødé ' || i END, timestamp '2024-01-01' + i * interval '1 minute 1.5 second',
	   jsonb_build_object('i', i, 's', E'a\tb"c'), i % 3 = 0 FROM generate_series(1, 20000) i`,
	`ANALYZE wide`,
	`CREATE TABLE small (id int PRIMARY KEY, v text)`,
	`INSERT INTO small SELECT i, 'v' || i FROM generate_series(1, 50) i`,
	`CREATE TABLE empty (id int PRIMARY KEY, v text)`,
}

const (
	widePG  = `SELECT id::text, n::text, (amount * 100)::bigint::text, md5(coalesce(name, 'NULL')), to_char(ts, 'YYYY-MM-DD HH24:MI:SS.US'), md5(doc::text), flag::text FROM wide ORDER BY wide.id`
	smallPG = `SELECT id::text, v FROM small ORDER BY small.id`
)

func (e *syncEnv) wideCH() string {
	return `SELECT id, n, toString(toInt64(amount * 100)), lower(hex(MD5(ifNull(name, 'NULL')))), toString(ts), lower(hex(MD5(doc))), if(isNull(flag), 'NULL', if(flag, 'true', 'false')) FROM ` + e.chDB + `.wide_live ORDER BY id`
}

// TestSyncLoadParallel: setup loads three tables in many chunks (blocks
// smaller than chunks) with three workers from the slot's snapshot, every
// value as the source holds it; sync then applies what changed after it.
//
//changesink:per-server
func TestSyncLoadParallel(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.empty", "public.small", "public.wide"}
	e.exec(loadTablesSQL...)
	cfg, env := e.config()
	cfg.LoadWorkers = 3
	env.Hooks.LoadChunkRows, env.Hooks.LoadBlockRows = 1500, 400
	var logs testenv.LockedBuffer
	env.Log = slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := SetupSync(ctx, cfg, env)
	if err != nil {
		t.Fatal(err)
	}
	if res.Loaded != 20050 || res.Load.Rows != 20050 || res.Load.Chunks < 10 || res.Load.Workers != 3 || res.Load.Bytes == 0 {
		t.Errorf("setup: %+v", res)
	}
	load, _ := res.Outputs()["load"].(map[string]any)
	if load["rows"] != int64(20050) || load["chunks"] != res.Load.Chunks || load["workers"] != 3 || res.Outputs()["continued"] != false {
		t.Errorf("setup outputs: %v", res.Outputs())
	}
	e.same(widePG, e.wideCH())
	e.same(smallPG, `SELECT id, v FROM `+e.chDB+`.small_live ORDER BY id`)
	if got := e.ch.query(`SELECT count() FROM ` + e.chDB + `.empty_live`); strings.Join(got, "") != "0" {
		t.Errorf("empty: %v", got)
	}
	out := logs.String()
	for _, want := range []string{"loading 3 tables (about 20000 rows)", "with 3 workers", "cdc: loaded 20050 rows of about 20000 (100%)",
		"cdc: loaded public.wide into " + e.chDB + ".wide: 20000 rows in "} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}

	e.exec(`UPDATE wide SET name = 'changed', n = -1 WHERE id % 997 = 0`, `DELETE FROM wide WHERE id % 1001 = 0`,
		`INSERT INTO wide (id, n) VALUES (30000, 3)`, `UPDATE small SET v = NULL WHERE id < 5`)
	if _, err := Sync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	e.same(widePG, e.wideCH())
	e.same(`SELECT id::text, coalesce(v, 'nil') FROM small ORDER BY small.id`, `SELECT id, ifNull(v, 'nil') FROM `+e.chDB+`.small_live ORDER BY id`)
}

// TestSyncRefusesPartitionsViaRoot: a publication that publishes a
// partitioned table via its root is refused by setup and by sync, before
// anything is written: PostgreSQL does not publish a TRUNCATE (nor an
// ATTACH or DETACH) of one partition through the root, so the target
// would keep rows the source no longer has.
func TestSyncRefusesPartitionsViaRoot(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.parted"}
	e.exec(`CREATE TABLE parted (id int, at date, v text, PRIMARY KEY (id, at)) PARTITION BY RANGE (at)`,
		`CREATE TABLE parted_2025 PARTITION OF parted FOR VALUES FROM ('2025-01-01') TO ('2026-01-01')`,
		`INSERT INTO parted SELECT i, date '2025-06-01' + (i % 100), 'v' || i FROM generate_series(1, 300) i`,
		`CREATE PUBLICATION `+e.pub+` FOR TABLE parted WITH (publish_via_partition_root = true)`)
	cfg, env := e.config()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, err := SetupSync(ctx, cfg, env)
	wantRefused(t, err, outcome.Refused, 1, slot.ErrPublicationViaRoot, "publish_via_partition_root = false")
	if got := e.rows(`SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = '` + e.slot + `'`); strings.Join(got, "") != "0" {
		t.Errorf("a refused setup left a slot: %v", got)
	}
	e.exec(`ALTER PUBLICATION ` + e.pub + ` SET (publish_via_partition_root = false)`)
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	e.exec(`ALTER PUBLICATION ` + e.pub + ` SET (publish_via_partition_root = true)`)
	_, err = Sync(ctx, cfg, env)
	wantRefused(t, err, outcome.Refused, 1, slot.ErrPublicationViaRoot, "publish_via_partition_root = false")
}
