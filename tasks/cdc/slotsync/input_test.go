package slotsync

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/pgvalue"
	"github.com/changesink/changesink/tasks/cdc/slot"
)

// The bad input of cdc sync and its setup: tables it cannot follow, types
// it cannot map, a publication or a slot gone between runs, a slot whose
// WAL the server removed. Each is refused with its sentinel, class and
// hint; nothing wrong is written; where the hint's remedy can be followed
// in a test, following it converges.

// TestSyncSetupRefusesATableWithoutIdentity: a table without a primary
// key, under the default replica identity, cannot say which row an update
// or delete changes: the setup refuses it (exit 1), naming it, and creates
// neither the slot nor a target.
func TestSyncSetupRefusesATableWithoutIdentity(t *testing.T) {
	e := newSyncEnv(t)
	e.tables = []string{"public.nokey"}
	e.exec(`CREATE TABLE nokey (id bigint, v text)`, `INSERT INTO nokey VALUES (1, 'a')`)
	cfg, env := e.config()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, err := SetupSync(ctx, cfg, env)
	wantRefused(t, err, outcome.Refused, 1, slot.ErrReplicaIdentity, "Give the table a primary key", "REPLICA IDENTITY FULL")
	wantError(t, err, outcome.Refused, nil, "public.nokey")
	e.noSlot()
}

// TestSyncPublicationDropped: the publication dropped between runs; the
// run is refused as configuration (exit 2; the hint: run the setup, and
// if the publication was made again after the slot, a new slot); the
// setup refuses (exit 1) to make a
// publication for a slot that cannot decode before it; dropping the slot
// and running the setup again converges.
func TestSyncPublicationDropped(t *testing.T) {
	e, cfg, env := accEnv(t, sharedPG(t))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e.exec(`UPDATE acc SET v = 0 WHERE id = 1`, `DROP PUBLICATION `+e.pub, `DELETE FROM acc WHERE id = 2`)
	_, err := Sync(ctx, cfg, env)
	wantRefused(t, err, outcome.Config, 2, slot.ErrPublicationMissing, "Run the setup", "drop the slot")
	_, err = SetupSync(ctx, cfg, env)
	wantRefused(t, err, outcome.Refused, 1, slot.ErrSlotWithoutPublication, "Drop the slot", "run the setup again")
	e.resetup(ctx, cfg, env)
}

// TestSyncSlotDropped: the slot dropped by hand between runs; the run is
// refused as configuration (exit 2: run the setup), and the setup makes a
// new slot and loads the tables again: rows the source changed or deleted
// while no slot kept the changes are right.
func TestSyncSlotDropped(t *testing.T) {
	e, cfg, env := accEnv(t, sharedPG(t))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e.dropSlot()
	e.exec(`UPDATE acc SET v = 0 WHERE id <= 5`, `DELETE FROM acc WHERE id BETWEEN 6 AND 9`)
	_, err := Sync(ctx, cfg, env)
	wantRefused(t, err, outcome.Config, 2, slot.ErrSlotMissing, "Run the setup", "rebuild the targets from a new snapshot")
	if _, err := SetupSync(ctx, cfg, env); err != nil {
		t.Fatal(err)
	}
	e.sameAcc()
	e.exec(`UPDATE acc SET v = 1 WHERE id <= 5`)
	e.catchUp(ctx, cfg, env)
	e.sameAcc()
}

// TestSyncSlotLost: a slot whose WAL the server removed (a cluster of the
// test's own with max_slot_wal_keep_size = 1MB, 2 MB written past it) is
// refused (exit 1, wal_status lost); the hint's remedy (drop the slot, run
// the setup again) converges, the changes lost with the WAL included.
func TestSyncSlotLost(t *testing.T) {
	pg := testenv.PrivatePostgres(t, "wal_level = logical", "max_slot_wal_keep_size = 1MB")
	e, cfg, env := accEnv(t, pg.Admin)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e.exec(`DELETE FROM acc WHERE id <= 10`, `UPDATE acc SET tag = repeat('w', 100) WHERE id > 500`, "SELECT pg_switch_wal()",
		`UPDATE acc SET tag = repeat('x', 100) WHERE id > 500`, "SELECT pg_switch_wal()",
		`UPDATE acc SET tag = repeat('y', 100) WHERE id > 500`, "SELECT pg_switch_wal()", "CHECKPOINT")
	if got := e.rows(`SELECT wal_status FROM pg_replication_slots WHERE slot_name = '` + e.slot + `'`); got[0] != "lost" {
		t.Fatalf("wal_status %v after 3 MB past a 1 MB max_slot_wal_keep_size", got)
	}
	_, err := Sync(ctx, cfg, env)
	wantRefused(t, err, outcome.Refused, 1, slot.ErrSlotLost, "Drop the slot", "run the setup again", "max_slot_wal_keep_size")
	e.resetup(ctx, cfg, env)
}

// noSlot fails the test when the slot exists: a setup refused before its
// load drops the slot it made.
func (e *syncEnv) noSlot() {
	e.t.Helper()
	if got := e.rows(`SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = '` + e.slot + `'`); got[0] != "0" {
		e.t.Errorf("slot %s is left after a refused setup", e.slot)
	}
}

// TestSyncAddedColumnAsTheMappingSays: a column the source adds, which the
// mapping's entry names, is added to the target as the entry says (not as
// it would be generated), so that the next run's mapping matches the
// target; an entry that is not Nullable for a column that allows NULL is
// refused before anything is read, saying what to write.
//
//changesink:per-server
func TestSyncAddedColumnAsTheMappingSays(t *testing.T) {
	e, cfg, env, ctx := setUpSync(t, "public.grow", `CREATE TABLE grow (id int PRIMARY KEY, v text)`, `INSERT INTO grow VALUES (1, 'a')`)
	withN := func(typ string) *mapping.Set {
		set, err := mapping.ParseSet("sync.yaml", []byte("defaults: {target: {database: "+e.chDB+"}}\ntables:\n"+
			"  - source: {schema: public, table: grow}\n    columns:\n      - {name: n, type: "+typ+"}\n"))
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	e.exec(`INSERT INTO grow VALUES (2, 'b')`, `ALTER TABLE grow ADD COLUMN n int`, `INSERT INTO grow VALUES (3, 'c', 30)`)
	cfg.Mappings = withN("Int64")
	_, err := Sync(ctx, cfg, env)
	wantError(t, err, outcome.Config, pgvalue.ErrNullable, "public.grow", `column "n"`, "map it as Nullable(Int64)")
	if got := e.liveIDs2("grow"); got != "1" {
		t.Errorf("live ids %q after the refusal, want 1: nothing read", got)
	}
	cfg.Mappings = withN("Nullable(Int64)") // generated, it would be Nullable(Int32)
	e.catchUp(ctx, cfg, env)
	e.exec(`INSERT INTO grow VALUES (4, 'd', 40)`)
	e.catchUp(ctx, cfg, env)
	e.same(`SELECT id::text, v, coalesce(n::text, '\N') FROM grow ORDER BY id`, `SELECT id, v, ifNull(toString(n), '\\N') FROM `+e.chDB+`.grow_live ORDER BY id`)
	if got := e.ch.query(`SELECT type FROM system.columns WHERE database = '` + e.chDB + `' AND table = 'grow' AND name = 'n'`); strings.Join(got, "") != "Nullable(Int64)" {
		t.Errorf("the target's column n is %v, want Nullable(Int64), as the mapping says", got)
	}
}
