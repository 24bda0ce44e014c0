package slot

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/jackc/pgx/v5/pgconn"
)

// wantRefusal checks that err wraps sentinel, has the class, and says
// each of the facts.
func wantRefusal(t *testing.T, err, sentinel error, class outcome.Kind, facts ...string) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("got %v, want %v", err, sentinel)
	}
	if got := outcome.Classify(err); got != class {
		t.Errorf("%v: class %s, want %s", err, got, class)
	}
	for _, f := range facts {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("%q does not name %q", err, f)
		}
	}
	if len(err.Error()) > 200 {
		t.Errorf("message of %d characters: %q", len(err.Error()), err)
	}
	if Hint(err) == "" {
		t.Errorf("%v: no hint", err)
	}
}

// TestEnsureRefuses: what Ensure refuses on the shared server, each with
// its sentinel, class and facts: slots that are not a pgoutput slot of this
// database or that another process streams from, tables without a usable
// replica identity (also a partition's), missing tables, publications that
// leave out operations or tables or filter rows, bad names.
func TestEnsureRefuses(t *testing.T) {
	src := newSource(t)
	other := testenv.CreateDatabase(t, src.admin, testenv.UniqueName(t, "slot_other_"), "")
	src.exec(
		"CREATE TABLE good (id int PRIMARY KEY)",
		"CREATE TABLE good2 (id int PRIMARY KEY)",
		"CREATE TABLE nothing (id int PRIMARY KEY)", "ALTER TABLE nothing REPLICA IDENTITY NOTHING",
		"CREATE TABLE nokey (id int)",
		"CREATE TABLE dropped_ix (id int NOT NULL)", "CREATE UNIQUE INDEX dropped_ix_id ON dropped_ix (id)",
		"ALTER TABLE dropped_ix REPLICA IDENTITY USING INDEX dropped_ix_id", "DROP INDEX dropped_ix_id",
		"CREATE TABLE parted (id int, at date) PARTITION BY RANGE (at)",
		"CREATE TABLE parted_2026 PARTITION OF parted FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')",
	)
	good := []Table{{"public", "good"}}
	cases := []struct {
		name     string
		prepare  func(slot, pub string) []string // SQL to run first
		setup    func(s *Setup)
		sentinel error
		class    outcome.Kind
		facts    func(slot, pub string) []string
	}{
		{
			name: "slot of another plugin",
			prepare: func(slot, _ string) []string {
				return []string{"SELECT pg_create_logical_replication_slot('" + slot + "', 'test_decoding')"}
			},
			sentinel: ErrSlotPlugin, class: outcome.Refused,
			facts: func(slot, _ string) []string { return []string{slot, "test_decoding"} },
		},
		{
			name: "physical slot",
			prepare: func(slot, _ string) []string {
				return []string{"SELECT pg_create_physical_replication_slot('" + slot + "')"}
			},
			sentinel: ErrSlotPlugin, class: outcome.Refused,
			facts: func(slot, _ string) []string { return []string{slot, "physical"} },
		},
		{
			name: "slot of another database",
			prepare: func(slot, _ string) []string {
				execDSN(t, other, "SELECT pg_create_logical_replication_slot('"+slot+"', 'pgoutput')")
				return nil
			},
			sentinel: ErrSlotDatabase, class: outcome.Refused,
			facts: func(slot, _ string) []string { return []string{slot, "slot_other_"} },
		},
		{
			name: "slot without its publication",
			prepare: func(slot, _ string) []string {
				return []string{"SELECT pg_create_logical_replication_slot('" + slot + "', 'pgoutput')"}
			},
			sentinel: ErrSlotWithoutPublication, class: outcome.Refused,
			facts: func(slot, pub string) []string { return []string{slot, pub} },
		},
		{
			name:     "replica identity nothing",
			setup:    func(s *Setup) { s.Tables = []Table{{"public", "nothing"}} },
			sentinel: ErrReplicaIdentity, class: outcome.Refused,
			facts: func(string, string) []string { return []string{"public.nothing", "NOTHING"} },
		},
		{
			name:     "no primary key",
			setup:    func(s *Setup) { s.Tables = []Table{{"public", "good"}, {"public", "nokey"}} },
			sentinel: ErrReplicaIdentity, class: outcome.Refused,
			facts: func(string, string) []string { return []string{"public.nokey", "without a primary key"} },
		},
		{
			name:     "identity index dropped",
			setup:    func(s *Setup) { s.Tables = []Table{{"public", "dropped_ix"}} },
			sentinel: ErrReplicaIdentity, class: outcome.Refused,
			facts: func(string, string) []string { return []string{"public.dropped_ix", "dropped index"} },
		},
		{
			name:     "partition without a key",
			setup:    func(s *Setup) { s.Tables = []Table{{"public", "parted"}} },
			sentinel: ErrReplicaIdentity, class: outcome.Refused,
			facts: func(string, string) []string { return []string{"public.parted_2026"} },
		},
		{
			name:     "missing table",
			setup:    func(s *Setup) { s.Tables = []Table{{"public", "good"}, {"public", "absent"}} },
			sentinel: ErrNoTable, class: outcome.Config,
			facts: func(string, string) []string { return []string{"public.absent"} },
		},
		{
			name: "publication without deletes",
			prepare: func(_, pub string) []string {
				return []string{"CREATE PUBLICATION " + pub + " FOR TABLE good WITH (publish = 'insert, update, truncate')"}
			},
			sentinel: ErrPublicationActions, class: outcome.Refused,
			facts: func(_, pub string) []string { return []string{pub} },
		},
		{
			name:     "publication for all tables where a list was asked",
			prepare:  func(_, pub string) []string { return []string{"CREATE PUBLICATION " + pub + " FOR ALL TABLES"} },
			sentinel: ErrPublicationTables, class: outcome.Refused,
			facts: func(_, pub string) []string { return []string{pub, "FOR ALL TABLES"} },
		},
		{
			name:     "publication of a list where all tables were asked",
			prepare:  func(_, pub string) []string { return []string{"CREATE PUBLICATION " + pub + " FOR TABLE good"} },
			setup:    func(s *Setup) { s.Tables, s.AllTables = nil, true },
			sentinel: ErrPublicationTables, class: outcome.Refused,
			facts: func(_, pub string) []string { return []string{pub, "table list"} },
		},
		{
			name: "row filter",
			prepare: func(_, pub string) []string {
				return []string{"CREATE PUBLICATION " + pub + " FOR TABLE good WHERE (id > 0)"}
			},
			sentinel: ErrPublicationFilter, class: outcome.Refused,
			facts: func(_, pub string) []string { return []string{pub, "public.good"} },
		},
		{
			name:     "slot name",
			setup:    func(s *Setup) { s.Slot = "Orders-Slot" },
			sentinel: ErrConfig, class: outcome.Config,
			facts: func(string, string) []string { return []string{"Orders-Slot"} },
		},
		{
			name:     "publication name",
			setup:    func(s *Setup) { s.Publication = "a,b" },
			sentinel: ErrConfig, class: outcome.Config,
			facts: func(string, string) []string { return []string{"a,b"} },
		},
		{
			name:     "tables and all tables",
			setup:    func(s *Setup) { s.AllTables = true },
			sentinel: ErrConfig, class: outcome.Config,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := &source{t: t, admin: src.admin, dsn: src.dsn, pg: src.pg}
			slot := slotName(t)
			pub := slot + "_pub"
			src.dropSlotAtEnd(slot)
			if c.prepare != nil {
				src.exec(c.prepare(slot, pub)...)
			}
			s := Setup{Slot: slot, Publication: pub, Tables: good}
			if c.setup != nil {
				c.setup(&s)
			}
			_, err := Ensure(testCtx(t, time.Minute), src.pg, s)
			var facts []string
			if c.facts != nil {
				facts = c.facts(slot, pub)
			}
			wantRefusal(t, err, c.sentinel, c.class, facts...)
			if src.query("SELECT count(*) FROM pg_replication_slots WHERE slot_name = '"+slot+"'") == "0" &&
				src.query("SELECT count(*) FROM pg_replication_slots WHERE database = current_database()") != "0" {
				t.Errorf("a refused setup created a slot")
			}
		})
	}
}

// TestEnsureAddsTables: a table the setting names and the publication
// lacks is added to it (a table joining a running pipeline), with the
// slot kept; a second Ensure adds nothing.
func TestEnsureAddsTables(t *testing.T) {
	src := newSource(t)
	src.exec("CREATE TABLE a (id int PRIMARY KEY)", "CREATE TABLE b (id int PRIMARY KEY)")
	slot := slotName(t)
	pub := slot + "_pub"
	first := src.setup(slot, pub, "a")
	two := Setup{Slot: slot, Publication: pub, Tables: []Table{{"public", "a"}, {"public", "b"}}}
	res, err := Ensure(testCtx(t, time.Minute), src.pg, two)
	if err != nil {
		t.Fatal(err)
	}
	if res.SlotCreated || res.PublicationCreated || fmt.Sprint(res.TablesAdded) != "[public.b]" || len(res.Tables) != 2 ||
		res.Health.Confirmed != first.ConsistentPoint {
		t.Errorf("Ensure with b: %+v", res)
	}
	if got := src.query("SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_publication_tables WHERE pubname = '" + pub + "'"); got != "a,b" {
		t.Errorf("published: %s", got)
	}
	again, err := Ensure(testCtx(t, time.Minute), src.pg, two)
	if err != nil || len(again.TablesAdded) != 0 {
		t.Errorf("second Ensure: %+v, %v", again, err)
	}
}

// TestEnsureRefusesActiveSlot: a slot another process streams from is
// refused (transient) naming that process's pid, after ActiveWait; once
// that stream ends, the same setup passes; a second Ensure creates
// nothing.
func TestEnsureRefusesActiveSlot(t *testing.T) {
	src := newSource(t)
	src.exec("CREATE TABLE a (id int PRIMARY KEY)")
	slot := slotName(t)
	pub := slot + "_pub"
	first := src.setup(slot, pub, "a")
	if !first.SlotCreated || !first.PublicationCreated || first.Snapshot != nil {
		t.Errorf("first Ensure: slot created %v, publication created %v, snapshot %v (none asked)",
			first.SlotCreated, first.PublicationCreated, first.Snapshot)
	}
	st := src.start(slot, pub)
	pid := src.query("SELECT active_pid FROM pg_replication_slots WHERE slot_name = '" + slot + "'")
	setup := Setup{Slot: slot, Publication: pub, Tables: []Table{{"public", "a"}}, ActiveWait: 500 * time.Millisecond}
	began := time.Now()
	_, err := Ensure(testCtx(t, time.Minute), src.pg, setup)
	wantRefusal(t, err, ErrSlotActive, outcome.Transient, slot, "pid "+pid)
	if waited := time.Since(began); waited < setup.ActiveWait {
		t.Errorf("refused after %s, before ActiveWait %s", waited, setup.ActiveWait)
	}
	var slotErr *SlotError
	if !errors.As(err, &slotErr) || fmt.Sprint(slotErr.PID) != pid {
		t.Errorf("%v: SlotError pid %v, want %s", err, slotErr, pid)
	}
	_, err = Start(testCtx(t, time.Minute), src.pg, StreamConfig{Slot: slot, Publications: []string{pub}})
	wantRefusal(t, err, ErrSlotActive, outcome.Transient, slot, pid)

	st.Close()
	again, err := Ensure(testCtx(t, time.Minute), src.pg, Setup{Slot: slot, Publication: pub, Tables: []Table{{"public", "a"}},
		ActiveWait: 10 * time.Second, ExportSnapshot: true})
	if err != nil {
		t.Fatalf("Ensure after the stream ended: %v", err)
	}
	if again.SlotCreated || again.PublicationCreated || again.Snapshot != nil {
		t.Errorf("second Ensure: slot created %v, publication created %v, snapshot %v", again.SlotCreated,
			again.PublicationCreated, again.Snapshot)
	}
	if h := again.Health; h.Plugin != "pgoutput" || h.SlotType != "logical" || !h.InDatabase || h.Active || h.Temporary ||
		h.WALStatus != "reserved" || h.Confirmed != first.ConsistentPoint || h.Current < h.Confirmed ||
		h.LagBytes != int64(h.Current-h.Confirmed) || h.RetainedBytes != int64(h.Current-h.Restart) || h.SafeWALSize != -1 {
		t.Errorf("health %+v (consistent point %s)", h, first.ConsistentPoint)
	}
	if len(again.Tables) != 1 || again.Tables[0].String() != "public.a" || again.Tables[0].Identity != IdentityDefault {
		t.Errorf("published tables %+v", again.Tables)
	}
}

// TestStartRefuses: Start refuses a missing slot and a missing
// publication (configuration), before streaming anything.
func TestStartRefuses(t *testing.T) {
	src := newSource(t)
	src.exec("CREATE TABLE a (id int PRIMARY KEY)")
	slot := slotName(t)
	pub := slot + "_pub"
	src.setup(slot, pub, "a")
	ctx := testCtx(t, time.Minute)
	_, err := Start(ctx, src.pg, StreamConfig{Slot: slot + "_x", Publications: []string{pub}})
	wantRefusal(t, err, ErrSlotMissing, outcome.Config, slot+"_x")
	_, err = Start(ctx, src.pg, StreamConfig{Slot: slot, Publications: []string{pub, "absent_pub"}})
	wantRefusal(t, err, ErrPublicationMissing, outcome.Config, "absent_pub")
	_, err = Start(ctx, src.pg, StreamConfig{Slot: slot})
	wantRefusal(t, err, ErrConfig, outcome.Config, slot)
}

// TestEnsureAllTables: FOR ALL TABLES when asked, publishing every table,
// each with its identity.
func TestEnsureAllTables(t *testing.T) {
	src := newSource(t)
	src.exec("CREATE TABLE x (id int PRIMARY KEY)", "CREATE TABLE y (id int, v text)", "ALTER TABLE y REPLICA IDENTITY FULL")
	slot := slotName(t)
	pub := slot + "_pub"
	src.dropSlotAtEnd(slot)
	res, err := Ensure(testCtx(t, time.Minute), src.pg, Setup{Slot: slot, Publication: pub, AllTables: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := src.query("SELECT puballtables::text FROM pg_publication WHERE pubname = '" + pub + "'"); got != "true" {
		t.Errorf("puballtables %s", got)
	}
	if len(res.Tables) != 2 || res.Tables[0].String() != "public.x" || res.Tables[0].Identity != IdentityDefault ||
		res.Tables[1].String() != "public.y" || res.Tables[1].Identity != IdentityFull {
		t.Errorf("published tables %+v", res.Tables)
	}
}

// TestServerRefusals: on clusters of the test's own, what the shared server
// cannot show: a slot invalidated by max_slot_wal_keep_size (Ensure and
// Start refuse it, naming its positions), no slot left to create one, no
// WAL sender left, wal_level replica, a role without REPLICATION.
func TestServerRefusals(t *testing.T) {
	t.Run("lost slot", func(t *testing.T) {
		c := privateCluster(t, "wal_level = logical", "max_slot_wal_keep_size = 1MB")
		c.exec("CREATE TABLE a (id int PRIMARY KEY)")
		res := c.setup("lost", "lost_pub", "a")
		c.exec("INSERT INTO a SELECT generate_series(1, 50000)", "SELECT pg_switch_wal()",
			"INSERT INTO a SELECT generate_series(50001, 100000)", "SELECT pg_switch_wal()", "CHECKPOINT")
		if h := c.health("lost"); h.WALStatus != "lost" || h.SafeWALSize != -1 {
			t.Fatalf("after 2 MB of WAL past a 1 MB max_slot_wal_keep_size: %+v", h)
		}
		_, err := Ensure(testCtx(t, time.Minute), c.pg, Setup{Slot: "lost", Publication: "lost_pub", Tables: []Table{{"public", "a"}}})
		wantRefusal(t, err, ErrSlotLost, outcome.Refused, "lost", res.ConsistentPoint.String())
		_, err = Start(testCtx(t, time.Minute), c.pg, StreamConfig{Slot: "lost", Publications: []string{"lost_pub"}})
		wantRefusal(t, err, ErrSlotLost, outcome.Refused, "lost")
	})
	t.Run("no slot left", func(t *testing.T) {
		c := privateCluster(t, "wal_level = logical", "max_replication_slots = 1")
		c.exec("CREATE TABLE a (id int PRIMARY KEY)", "SELECT pg_create_logical_replication_slot('other', 'pgoutput')")
		_, err := Ensure(testCtx(t, time.Minute), c.pg, Setup{Slot: "mine", Publication: "pub", Tables: []Table{{"public", "a"}}})
		wantRefusal(t, err, ErrNoSlotRoom, outcome.Config, "mine", "1 of 1")
	})
	t.Run("no WAL sender left", func(t *testing.T) {
		c := privateCluster(t, "wal_level = logical", "max_wal_senders = 1")
		c.exec("CREATE TABLE a (id int PRIMARY KEY)")
		c.setup("first", "pub", "a")
		var st *Stream
		for deadline := time.Now().Add(30 * time.Second); st == nil; { // the setup's own walsender may still be exiting
			var err error
			st, err = Start(testCtx(t, time.Minute), c.pg, StreamConfig{Slot: "first", Publications: []string{"pub"}})
			if err != nil && (!errors.Is(err, ErrNoSenderRoom) || time.Now().After(deadline)) {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		defer st.Close()
		_, err := Ensure(testCtx(t, time.Minute), c.pg, Setup{Slot: "second", Publication: "pub", Tables: []Table{{"public", "a"}}})
		wantRefusal(t, err, ErrNoSenderRoom, outcome.Transient, "second", "1 of 1")
	})
	t.Run("wal_level replica", func(t *testing.T) {
		c := privateCluster(t, "wal_level = replica")
		c.exec("CREATE TABLE a (id int PRIMARY KEY)")
		_, err := Ensure(testCtx(t, time.Minute), c.pg, Setup{Slot: "s", Publication: "pub", Tables: []Table{{"public", "a"}}})
		wantRefusal(t, err, ErrWALLevel, outcome.Config, "replica")
	})
	t.Run("role without replication", func(t *testing.T) {
		c := privateCluster(t, "wal_level = logical")
		c.exec("CREATE TABLE a (id int PRIMARY KEY)", "CREATE ROLE plain LOGIN", "ALTER TABLE a OWNER TO plain")
		pg, err := pgconn.ParseConfig(testenv.WithUser(t, c.admin, "plain"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = Ensure(testCtx(t, time.Minute), pg, Setup{Slot: "s", Publication: "pub", Tables: []Table{{"public", "a"}}})
		wantRefusal(t, err, ErrNoReplication, outcome.Config, "plain")
		c.exec("ALTER ROLE plain REPLICATION", "GRANT CREATE ON DATABASE postgres TO plain")
		c.dropSlotAtEnd("s")
		if _, err := Ensure(testCtx(t, time.Minute), pg, Setup{Slot: "s", Publication: "pub", Tables: []Table{{"public", "a"}}}); err != nil {
			t.Fatalf("with REPLICATION, as the table's owner: %v", err)
		}
		c.exec("ALTER ROLE plain NOREPLICATION")
		_, err = Start(testCtx(t, time.Minute), pg, StreamConfig{Slot: "s", Publications: []string{"pub"}})
		wantRefusal(t, err, ErrNoReplication, outcome.Config, "plain")
	})
}
