package kafkastate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
)

// shardConfig is e's Config for shard (SHARD), draining.
func (e *env) shardConfig(shard string) Config {
	cfg := e.drainConfig(2000, 120)
	cfg.Shard = shard
	return cfg
}

// runShards runs the shards at once and returns their results and errors,
// in the order given.
func (e *env) runShards(t *testing.T, h hooks, shards ...string) ([]*Result, []error) {
	t.Helper()
	res, errs := make([]*Result, len(shards)), make([]error, len(shards))
	var wg sync.WaitGroup
	for i, s := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = Materialize(testCtx(t, 3*time.Minute), e.shardConfig(s), Env{Dir: kestra.Dir{Path: t.TempDir()}, hooks: h})
		}()
	}
	wg.Wait()
	return res, errs
}

// TestShardsReadTheTopicTogether: two shards of a topic, run at once, leave
// what one whole-topic run leaves: every key's latest value, the positions
// row in the seed's layout (every partition), verify valid. Each reports
// only its partitions (next offsets, lag) and its shard. A whole-topic run
// afterwards sees every shard's positions and finds nothing new.
func TestShardsReadTheTopicTogether(t *testing.T) {
	e := newTopicEnv(t, 4)
	produceMany(t, e.kcl, e.topic, 4, 20000)
	res, errs := e.runShards(t, hooks{}, "0/2", "1/2")
	for i, err := range errs {
		if err != nil {
			t.Fatalf("shard %d/2: %v", i, err)
		}
	}
	for i, want := range [][]int32{{0, 2}, {1, 3}} {
		r := res[i]
		if got := slices.Sorted(maps.Keys(r.NextOffsets)); !slices.Equal(got, want) || r.Shard != fmt.Sprintf("%d/2", i) || r.LagTotal != 0 ||
			!slices.Equal(slices.Sorted(maps.Keys(r.Lag)), want) || r.Outputs()["shard"] != r.Shard {
			t.Errorf("shard %d/2: %+v; want partitions %v, lag 0", i, r, want)
		}
	}
	if n := res[0].Consumed + res[1].Consumed; n != 20000 {
		t.Errorf("the shards consumed %d records, want 20000", n)
	}
	sameState(t, e.records(t), latest(t, e))
	next, _, _ := e.positions(t)
	if end := e.endOffsets(t); !maps.Equal(next, end) {
		t.Errorf("positions %v, want every partition at its end %v", next, end)
	}
	if _, err := Verify(testCtx(t, time.Minute), e.pg, e.topic); err != nil {
		t.Errorf("verify: %v", err)
	}
	if whole := e.mustRun(t); whole.Consumed != 0 || whole.LagTotal != 0 {
		t.Errorf("a whole-topic run after the shards: %+v; want nothing new", whole)
	}
	// More records, read by the whole topic and then by the shards: the
	// two take turns on one positions row.
	produce(t, e.kcl, e.topic, kv(0, "customer-0000000", `{"after":1}`), kv(3, "new-3", `{"after":3}`))
	if whole := e.mustRun(t); whole.Consumed != 2 {
		t.Errorf("whole-topic run consumed %d, want 2", whole.Consumed)
	}
	produce(t, e.kcl, e.topic, kv(1, "new-1", `{"after":4}`))
	res, errs = e.runShards(t, hooks{}, "0/2", "1/2")
	if errors.Join(errs...) != nil || res[0].Consumed != 0 || res[1].Consumed != 1 {
		t.Errorf("shards after the whole topic: %v %v", res, errs)
	}
	sameState(t, e.records(t), latest(t, e))
}

// TestShardsOverlapRefused: a shard whose partition another shard claims
// is refused, naming the partition and both shards, and changes nothing;
// so is the second of two overlapping shards started at once. Released
// claims (the runbook's UPDATE) let another layout take over.
func TestShardsOverlapRefused(t *testing.T) {
	e := newTopicEnv(t, 4)
	produce(t, e.kcl, e.topic, kv(0, "a", `1`), kv(1, "b", `1`), kv(2, "c", `1`), kv(3, "d", `1`))
	if _, err := e.run(t, e.shardConfig("0/2"), hooks{}); err != nil {
		t.Fatal(err)
	}
	before := e.snapshot(t)
	_, err := e.run(t, e.shardConfig("0/4"), hooks{})
	assertRefused(t, err, ErrShardOverlap, e.topic, "partition 0", "shard 0/2 claims it, this run is shard 0/4", "UPDATE kafka_state.shards SET shard = NULL")
	_, err = e.run(t, e.shardConfig("2/4"), hooks{})
	assertRefused(t, err, ErrShardOverlap, "partition 2", "shard 0/2 claims it")
	if after := e.snapshot(t); after != before {
		t.Errorf("a refused shard changed the tables:\n%s\nwas\n%s", after, before)
	}
	// A shard of the same layout is welcome.
	if _, err := e.run(t, e.shardConfig("1/2"), hooks{}); err != nil {
		t.Fatal(err)
	}

	// Two layouts started at once: the claims are taken one at a time, so
	// exactly one of them is refused.
	f := newTopicEnv(t, 4)
	produce(t, f.kcl, f.topic, kv(0, "a", `1`), kv(2, "c", `1`))
	_, errs := f.runShards(t, hooks{}, "0/2", "0/4")
	refused := 0
	for _, err := range errs {
		switch {
		case errors.Is(err, ErrShardOverlap):
			refused++
		case err != nil:
			t.Errorf("0/2 and 0/4 at once: %v", err)
		}
	}
	if refused != 1 {
		t.Errorf("0/2 and 0/4 at once: %v, %v; want exactly one refused as overlapping", errs[0], errs[1])
	}

	// The old layout's claims released, the new one runs, and the old one
	// is refused in turn.
	e.exec(t, `UPDATE kafka_state.shards SET shard = NULL WHERE topic = $1`, e.topic)
	for _, s := range []string{"0/4", "1/4", "2/4", "3/4"} {
		if _, err := e.run(t, e.shardConfig(s), hooks{}); err != nil {
			t.Fatalf("shard %s after the release: %v", s, err)
		}
	}
	_, err = e.run(t, e.shardConfig("1/2"), hooks{})
	assertRefused(t, err, ErrShardOverlap, "partition 1", "shard 1/4 claims it")
	sameState(t, e.records(t), latest(t, e))
}

// TestShardRacesWholeTopic: a shard run and a whole-topic run of the same
// topic at once take turns (shards hold the topic lock in shared mode,
// whole-topic runs and the seed's script exclusively): the second waits
// for the first's commit, each commits its batch, and the state is the
// topic's. Two runs of one shard take turns too (its partitions' locks).
func TestShardRacesWholeTopic(t *testing.T) {
	e := newTopicEnv(t, 2)
	for _, first := range []string{"", "0/2", "1/2"} {
		produce(t, e.kcl, e.topic, kv(0, "p0-"+first, `{"v":0}`), kv(1, "p1-"+first, `{"v":1}`))
		second := map[string]string{"": "1/2", "0/2": "", "1/2": "1/2"}[first]
		holding := make(chan struct{})
		hold := hooks{beforeCommit: func() { close(holding); time.Sleep(1500 * time.Millisecond) }}
		var (
			wg       sync.WaitGroup
			firstErr error
		)
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := e.shardConfig(first)
			_, firstErr = Materialize(testCtx(t, time.Minute), cfg, Env{Dir: kestra.Dir{Path: t.TempDir()}, hooks: hold})
		}()
		<-holding
		start := time.Now()
		res, err := Materialize(testCtx(t, time.Minute), e.shardConfig(second), Env{Dir: kestra.Dir{Path: t.TempDir()}})
		waited := time.Since(start)
		wg.Wait()
		if firstErr != nil || err != nil {
			t.Fatalf("%q then %q: %v, %v", first, second, firstErr, err)
		}
		if waited < time.Second {
			t.Errorf("%q ran while %q held its locks (took %s)", second, first, waited)
		}
		if res.LagTotal != 0 {
			t.Errorf("%q after %q: lag %d", second, first, res.LagTotal)
		}
	}
	if _, err := e.run(t, e.config(), hooks{}); err != nil {
		t.Fatal(err)
	}
	sameState(t, e.records(t), latest(t, e))
}

// TestShardHeldTooLong: a shard whose partition another run of it holds
// past LockWait fails as a held lock (transient), naming the partition's
// lock and its holder.
func TestShardHeldTooLong(t *testing.T) {
	e := newTopicEnv(t, 2)
	produce(t, e.kcl, e.topic, kv(0, "a", `1`))
	if _, err := e.run(t, e.shardConfig("0/2"), hooks{}); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, time.Minute)
	tx, err := e.conn(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, PartitionLockKey(e.topic, 0)); err != nil {
		t.Fatal(err)
	}
	_, err = e.run(t, e.shardConfig("0/2"), hooks{})
	testenv.WantHinted(t, err, Hint, outcome.Transient, ErrLocked, "hashtextextended('kestra-kafka-state:"+e.topic+":0', 0)",
		`application "changesink test"`)
	if _, err := e.run(t, e.shardConfig("1/2"), hooks{}); err != nil {
		t.Errorf("the other shard: %v", err)
	}
}

// TestShardRefusals: every seed refusal holds for a shard: the topic
// recreated, partitions added, a saved offset outside its partition's log;
// and a shard is refused only for its own partitions.
func TestShardRefusals(t *testing.T) {
	setup := func(t *testing.T) *env {
		e := newTopicEnv(t, 4)
		produce(t, e.kcl, e.topic, kv(0, "a", `1`), kv(1, "b", `1`), kv(2, "c", `1`), kv(3, "d", `1`))
		if _, errs := e.runShards(t, hooks{}, "0/2", "1/2"); errors.Join(errs...) != nil {
			t.Fatal(errs)
		}
		return e
	}
	t.Run("topic recreated", func(t *testing.T) {
		e := setup(t)
		deleteTopic(t, e)
		createTopic(t, e.adm, e.topic, 4, nil)
		before := e.snapshot(t)
		_, err := e.run(t, e.shardConfig("1/2"), hooks{})
		assertRefused(t, err, ErrIDsChanged, e.topic, "Rebuild into an empty destination")
		if e.snapshot(t) != before {
			t.Error("the refused shard changed the tables")
		}
	})
	t.Run("partitions added", func(t *testing.T) {
		e := setup(t)
		repartition(t, e, 6)
		_, err := e.run(t, e.shardConfig("0/2"), hooks{})
		assertRefused(t, err, ErrPartitionsChanged, "saved partitions [0 1 2 3], topic has [0 1 2 3 4 5]")
	})
	t.Run("offset outside the log", func(t *testing.T) {
		e := setup(t)
		e.exec(t, `UPDATE kafka_state.positions SET next_offsets = jsonb_set(next_offsets, '{2}', '99') WHERE topic = $1`, e.topic)
		_, err := e.run(t, e.shardConfig("0/2"), hooks{})
		assertRefused(t, err, ErrOffsetOutOfRange, "partition 2", "saved offset 99")
		// Partition 2 is not shard 1/2's.
		produce(t, e.kcl, e.topic, kv(1, "b", `2`))
		if res, err := e.run(t, e.shardConfig("1/2"), hooks{}); err != nil || res.Consumed != 1 {
			t.Errorf("shard 1/2: %+v, %v; want 1 record", res, err)
		}
	})
}

// TestShardTombstoneRule: the tombstone rule holds per shard. A shard whose
// partitions were last read to their end longer ago than
// delete.retention.ms allows is refused, naming when
// (kafka_state.shards.caught_up_at); the other shard, read recently, is
// not, however old the topic's positions.updated_at; a partition a shard
// never read (saved offset 0, written by another shard's first batch) is a
// scan from the start, not refused.
func TestShardTombstoneRule(t *testing.T) {
	e := newEnv(t)
	createTopic(t, e.adm, e.topic, 2, fastCleaning("3000"))
	produce(t, e.kcl, e.topic, kv(0, "a", `1`))
	if _, err := e.run(t, e.shardConfig("0/2"), hooks{}); err != nil {
		t.Fatal(err)
	}
	// Shard 1/2 never ran; partition 1 gets records 4 s later.
	time.Sleep(4 * time.Second)
	produce(t, e.kcl, e.topic, kv(1, "b", `1`))
	if res, err := e.run(t, e.shardConfig("1/2"), hooks{}); err != nil || res.Consumed != 1 {
		t.Fatalf("shard 1/2, first read of partition 1 (from 0): %+v, %v", res, err)
	}
	// Shard 0/2 now lags past the window: refused.
	produce(t, e.kcl, e.topic, kv(0, "a", `2`))
	_, err := e.run(t, e.shardConfig("0/2"), hooks{})
	assertRefused(t, err, ErrTombstonesMayBeLost, "partition 0 (unread from saved offset 1 to 2)", "since kafka_state.shards.caught_up_at")
	// Shard 1/2 read to its end just now: records after it are fine, though
	// updated_at (the first batch's start) is older than the window.
	produce(t, e.kcl, e.topic, kv(1, "b", `2`))
	if res, err := e.run(t, e.shardConfig("1/2"), hooks{}); err != nil || res.Consumed != 1 {
		t.Errorf("shard 1/2, caught up just before: %+v, %v", res, err)
	}
	// The whole topic is refused too (partition 0 lags).
	_, err = e.run(t, e.config(), hooks{})
	assertRefused(t, err, ErrTombstonesMayBeLost, "partition 0")
}

// TestShardFirstReadAfterRecordsDeleted: a partition no batch ever read
// is not at risk from expired tombstones, whatever its log start offset:
// records deleted from its start (DeleteRecords, or retention under
// compact,delete) before another shard's first batch saved it at its log
// start, that shard's (or the whole topic's) first read of it long after is
// a scan from there, not refused, and stores what the partition holds.
func TestShardFirstReadAfterRecordsDeleted(t *testing.T) {
	for _, second := range []string{"1/2", ""} {
		name := "shard " + second
		if second == "" {
			name = "whole topic"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			configs := fastCleaning("3000")
			configs["cleanup.policy"] = kadm.StringPtr("compact,delete") // DeleteRecords needs "delete"
			configs["retention.ms"] = kadm.StringPtr(oneDay)
			createTopic(t, e.adm, e.topic, 2, configs)
			produce(t, e.kcl, e.topic, kv(0, "a", `1`))
			for i := range 10 {
				produce(t, e.kcl, e.topic, kv(1, fmt.Sprintf("b%d", i), `1`))
			}
			deleteRecordsBefore(t, e, 1, 5)
			if _, err := e.run(t, e.shardConfig("0/2"), hooks{}); err != nil {
				t.Fatal(err)
			}
			if next, _, _ := e.positions(t); next["1"] != 5 {
				t.Fatalf("partition 1 saved at %d, want its log start 5", next["1"])
			}
			time.Sleep(4 * time.Second) // past delete.retention.ms less the margin
			cfg := e.config()
			if second != "" {
				cfg = e.shardConfig(second)
			}
			if res, err := e.run(t, cfg, hooks{}); err != nil || res.Consumed != 5 {
				t.Fatalf("first read of partition 1, from its log start 5: %+v, %v", res, err)
			}
			if got := e.records(t); len(got) != 6 {
				t.Errorf("stored %d keys, want a and b5…b9: %v", len(got), got)
			}
		})
	}
}

// TestShardConfig: SHARD is i/n, and a shard must own a partition.
func TestShardConfig(t *testing.T) {
	for _, s := range []string{"1", "0/0", "2/2", "-1/2", "a/2", "01/2", "0/2000", "0/2/3", " 0/2"} {
		if _, err := ParseShard(s); outcome.Classify(err) != outcome.Config {
			t.Errorf("ParseShard(%q) = %v, want a configuration error", s, err)
		}
	}
	for s, want := range map[string]Shard{"": {}, "0/1": {0, 1}, "3/4": {3, 4}} {
		if got, err := ParseShard(s); err != nil || got != want || got.String() != s {
			t.Errorf("ParseShard(%q) = %v, %v", s, got, err)
		}
	}
	e := newTopicEnv(t, 2)
	_, err := e.run(t, e.shardConfig("3/4"), hooks{})
	testenv.WantHinted(t, err, Hint, outcome.Config, ErrEmptyShard, "SHARD 3/4: topic", "(2 partitions)")
}
