package kafkastate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
)

// syncBuffer is a bytes.Buffer a logger and a test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// latest reads e's topic from its start to its high watermark (a direct
// consumer, read_committed, no group) and returns what kafka_state.records
// must hold once every record is materialized: per key, its last record's
// value (payload text as Kafka has it), partition and offset.
func latest(t testing.TB, e *env) map[string]stored {
	t.Helper()
	out := map[string]stored{}
	readTopic(t, e, time.Minute, func(r *kgo.Record) {
		s := stored{Deleted: r.Value == nil, Partition: r.Partition, Offset: r.Offset}
		if r.Value != nil {
			v := string(r.Value)
			s.Payload = &v
		}
		out[string(r.Key)] = s
	})
	return out
}

// readTopic reads e's topic from its start to its end offsets with a
// direct consumer (read_committed, no group), calling each for every
// record, in order within a partition.
func readTopic(t testing.TB, e *env, timeout time.Duration, each func(*kgo.Record)) {
	t.Helper()
	ctx := testCtx(t, timeout)
	end := e.endOffsets(t)
	offsets := map[int32]kgo.Offset{}
	for p := range end {
		n, _ := strconv.Atoi(p)
		offsets[int32(n)] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{e.topic: offsets}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]int64{}
	for {
		done := true
		for p, o := range end {
			if s, ok := seen[p]; o > 0 && (!ok || s < o-1) {
				done = false
			}
		}
		if done {
			return
		}
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read the topic: %v (seen %v, end %v)", ctx.Err(), seen, end)
		}
		fs.EachRecord(func(r *kgo.Record) {
			seen[strconv.Itoa(int(r.Partition))] = r.Offset
			each(r)
		})
	}
}

// sameState compares kafka_state.records (got) with the topic's latest
// values (want) row by row: the same keys, each with the same deleted flag,
// partition, offset and JSON value (compared as JSON: jsonb reformats it).
func sameState(t testing.TB, got, want map[string]stored) {
	t.Helper()
	bad := 0
	if len(got) != len(want) {
		t.Errorf("stored %d keys, the topic has %d", len(got), len(want))
	}
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("key %q: missing, the topic's latest is at partition %d offset %d", k, w.Partition, w.Offset)
		case g.Deleted != w.Deleted || g.Partition != w.Partition || g.Offset != w.Offset || !sameJSON(g.Payload, w.Payload):
			t.Errorf("key %q = %s, the topic's latest is %s", k, describeStored(map[string]stored{k: g}), describeStored(map[string]stored{k: w}))
		default:
			continue
		}
		if bad++; bad == 10 {
			t.Fatalf("and more")
		}
	}
}

func sameJSON(a, b *string) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var x, y any
	if json.Unmarshal([]byte(*a), &x) != nil || json.Unmarshal([]byte(*b), &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// drainConfig is e's Config for a drain of small batches.
func (e *env) drainConfig(maxRecords, drainSeconds int) Config {
	cfg := e.config()
	cfg.MaxRecords = maxRecords
	cfg.DrainSeconds = drainSeconds
	return cfg
}

// TestDrainCatchesUp: one run in drain mode commits batch after batch of
// MAX_RECORDS until every partition is read to its end, logging its
// progress (records, rate, lag left) as it goes, and reports the totals,
// the seed's report of the whole run and a lag of 0.
func TestDrainCatchesUp(t *testing.T) {
	e := newTopicEnv(t, 3)
	produceMany(t, e.kcl, e.topic, 3, 12000)
	var logs syncBuffer
	dir := t.TempDir()
	res, err := Materialize(testCtx(t, 3*time.Minute), e.drainConfig(1000, 120),
		Env{Dir: kestra.Dir{Path: dir}, Log: slog.New(slog.NewTextHandler(&logs, nil)), hooks: hooks{progressEvery: time.Nanosecond}})
	if err != nil {
		t.Fatalf("Materialize: %v\n%s", err, logs.String())
	}
	if res.Consumed != 12000 || res.Batches < 12 || res.Batches > 13 || res.LagTotal != 0 {
		t.Errorf("result = %+v; want 12000 records in 12 or 13 batches, lag 0", res)
	}
	wantLag := Offsets{0: 0, 1: 0, 2: 0}
	if !maps.Equal(res.Lag, wantLag) {
		t.Errorf("lag = %v, want %v", res.Lag, wantLag)
	}
	next, _, _ := e.positions(t)
	if end := e.endOffsets(t); !maps.Equal(next, end) {
		t.Errorf("positions %v, want the end offsets %v", next, end)
	}
	sameState(t, e.records(t), latest(t, e))
	if res.LiveKeys != int64(len(e.records(t))-countDeleted(e.records(t))) {
		t.Errorf("live_keys = %d", res.LiveKeys)
	}
	progress := strings.Count(logs.String(), "batches committed")
	if progress < 5 || !strings.Contains(logs.String(), "records/s); lag left ") {
		t.Errorf("%d progress lines, want one per batch but the last (progressEvery is 1 ns):\n%s", progress, logs.String())
	}
	var report map[string]any
	if err := json.Unmarshal(testenv.ReadFile(t, filepath.Join(dir, ReportFile)), &report); err != nil {
		t.Fatal(err)
	}
	if report["consumed"] != float64(12000) || report["live_keys"] != float64(res.LiveKeys) {
		t.Errorf("report = %v, want the run's totals", report)
	}
	out := res.Outputs()
	if out["batches"] != res.Batches || out["lag_total"] != int64(0) || !strings.Contains(res.Summary(), "batches (") {
		t.Errorf("outputs %v, summary %q", out, res.Summary())
	}
}

func countDeleted(m map[string]stored) int {
	n := 0
	for _, s := range m {
		if s.Deleted {
			n++
		}
	}
	return n
}

// TestDrainStopsAtItsTime: a drain whose time ends before the topic's end
// stops after the batch that passes it, with the lag it leaves in its
// outputs; the next run resumes and catches up.
func TestDrainStopsAtItsTime(t *testing.T) {
	e := newTopicEnv(t, 2)
	produceMany(t, e.kcl, e.topic, 2, 40000)
	start := time.Now()
	res, err := e.run(t, e.drainConfig(100, 1), hooks{})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("a 1 s drain took %s", took)
	}
	if res.Batches < 2 || res.Consumed >= 40000 || res.LagTotal != 40000-res.Consumed {
		t.Errorf("result = %+v; want several batches, not the whole topic, lag = the rest", res)
	}
	rest, err := e.run(t, e.drainConfig(MaxMaxRecords, 60), hooks{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Consumed+rest.Consumed != 40000 || rest.LagTotal != 0 {
		t.Errorf("re-run = %+v after %d records; want the rest, lag 0", rest, res.Consumed)
	}
	sameState(t, e.records(t), latest(t, e))
}

// TestDrainRefusalKeepsEarlierBatches: a refused record ends a drain; the
// batches before the one that met it stay committed, the error says how
// many, and the refused batch commits nothing.
func TestDrainRefusalKeepsEarlierBatches(t *testing.T) {
	e := newTopicEnv(t, 1)
	recs := make([]rec, 0, 2501)
	for i := range 2500 {
		recs = append(recs, kv(0, fmt.Sprintf("k%04d", i), fmt.Sprintf(`{"i":%d}`, i)))
	}
	recs = append(recs, kv(0, "bad", `{"i":`))
	produce(t, e.kcl, e.topic, recs...)
	_, err := e.run(t, e.drainConfig(1000, 60), hooks{})
	assertRefused(t, err, ErrValueNotJSON, "offset 2500", `key "bad"`, "after 2 committed batches of this run (2000 records; they stay committed")
	if next, _, _ := e.positions(t); next["0"] != 2000 {
		t.Errorf("positions %v, want 2000: the batches before the refused one", next)
	}
	if n := len(e.records(t)); n != 2000 {
		t.Errorf("%d records stored, want 2000", n)
	}
}

// TestDrainStoppedBetweenBatches: a stop during a drain ends it before the
// batch in flight commits: transient, and the committed batches stay.
func TestDrainStoppedBetweenBatches(t *testing.T) {
	e := newTopicEnv(t, 1)
	produceMany(t, e.kcl, e.topic, 1, 5000)
	ctx, cancel := context.WithCancel(testCtx(t, time.Minute))
	commits := 0
	_, err := Materialize(ctx, e.drainConfig(1000, 60), Env{Dir: kestra.Dir{Path: t.TempDir()}, hooks: hooks{beforeCommit: func() {
		if commits++; commits == 3 {
			cancel()
		}
	}}})
	testenv.WantHinted(t, err, Hint, outcome.Transient, nil, "after 2 committed batches of this run (2000 records",
		"was stopped", "before its commit")
	if next, _, _ := e.positions(t); next["0"] != 2000 {
		t.Errorf("positions %v, want 2000", next)
	}
	if _, err := e.run(t, e.drainConfig(1000, 60), hooks{}); err != nil {
		t.Fatal(err)
	}
	sameState(t, e.records(t), latest(t, e))
}

// TestDrainKilledUnderProducer: drains killed with SIGKILL at random
// moments while a producer writes to the topic (updates, new keys,
// tombstones) keep every committed batch and nothing else: after each kill
// every stored record is below its durable position (verify) and no
// position went back, and once the producer stops one more drain leaves
// kafka_state.records equal, row by row, to the topic's latest value per
// key. The same with two shards run (and killed) side by side.
func TestDrainKilledUnderProducer(t *testing.T) {
	t.Run("whole topic", func(t *testing.T) { killDrains(t, "") })
	t.Run("two shards", func(t *testing.T) { killDrains(t, "0/2", "1/2") })
}

// killDrains is TestDrainKilledUnderProducer with one drain per shard
// given ("" for the whole topic).
func killDrains(t *testing.T, shards ...string) {
	e := newTopicEnv(t, 3)
	ctx, stop := context.WithCancel(testCtx(t, 5*time.Minute))
	defer stop()
	var wg sync.WaitGroup
	wg.Add(1)
	produced := 0
	// A backlog first, so that the drains have work when they are killed.
	rng := rand.New(rand.NewPCG(1, 2))
	var backlog []*kgo.Record
	for i := range 120000 {
		k := rng.IntN(3000)
		backlog = append(backlog, &kgo.Record{Topic: e.topic, Partition: int32(k % 3), Key: fmt.Appendf(nil, "key-%04d", k),
			Value: fmt.Appendf(nil, `{"k":%d,"backlog":%d}`, k, i)})
	}
	if err := e.kcl.ProduceSync(ctx, backlog...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer wg.Done()
		for seq := 0; ctx.Err() == nil; seq++ {
			batch := make([]*kgo.Record, 0, 200)
			for range 200 {
				k := rng.IntN(3000)
				r := &kgo.Record{Topic: e.topic, Partition: int32(k % 3), Key: fmt.Appendf(nil, "key-%04d", k)}
				if rng.IntN(10) > 0 {
					r.Value = fmt.Appendf(nil, `{"k":%d,"seq":%d,"pad":"%s"}`, k, seq, strings.Repeat("p", rng.IntN(200)))
				}
				batch = append(batch, r)
			}
			if err := e.kcl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
				if ctx.Err() == nil {
					t.Errorf("produce: %v", err)
				}
				return
			}
			produced += len(batch)
			time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
		}
	}()
	kills := 0
	last, moved := map[string]int64{}, map[int]bool{}
	killAt := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	for i := range 8 {
		var children []*testenv.Process
		for _, s := range shards {
			cfg := e.drainConfig(700, 60)
			cfg.Shard = s
			children = append(children, testenv.Start(t, materializer(context.Background(), t, cfg)))
		}
		// Killed once this round's drains have committed a batch (however
		// slow a loaded machine starts them), at a random moment after it.
		e.waitForCommit(t, last, time.Minute)
		for _, child := range children {
			time.Sleep(time.Duration(killAt.IntN(600)/len(children)) * time.Millisecond)
			r := child.Kill(t)
			if r.Signal == syscall.SIGKILL {
				kills++
			} else if r.Code != 0 {
				t.Fatalf("run %d: exit %d before the kill:\n%s", i, r.Code, r.Output())
			}
		}
		if _, err := Verify(testCtx(t, time.Minute), e.pg, e.topic); err != nil {
			t.Fatalf("after kill %d: %v", i, err)
		}
		// Every batch committed before the kill is kept: positions never
		// go back, and they moved on in most runs.
		next, _, _ := e.positions(t)
		for p, o := range next {
			if o < last[p] {
				t.Fatalf("after kill %d partition %s went back from %d to %d", i, p, last[p], o)
			}
			if o > last[p] {
				moved[i] = true
			}
		}
		last = next
	}
	stop()
	wg.Wait()
	if kills < 4*len(shards) || len(moved) < 4 {
		t.Errorf("%d of %d runs were killed mid-drain, %d rounds committed batches before the kills; want half or more of each",
			kills, 8*len(shards), len(moved))
	}
	for _, s := range shards {
		cfg := e.drainConfig(MaxMaxRecords, 120)
		cfg.Shard = s
		res, err := e.run(t, cfg, hooks{})
		if err != nil {
			t.Fatal(err)
		}
		if res.LagTotal != 0 {
			t.Errorf("lag %d after the last drain of %q", res.LagTotal, s)
		}
	}
	next, _, _ := e.positions(t)
	if end := e.endOffsets(t); !maps.Equal(next, end) {
		t.Errorf("positions %v, want the end offsets %v", next, end)
	}
	sameState(t, e.records(t), latest(t, e))
	t.Logf("%d records produced, %d runs killed mid-drain, %d keys stored", produced, kills, len(e.records(t)))
}

// waitForCommit waits, up to limit, until a partition's position is past
// where last has it: a drain running now committed a batch.
func (e *env) waitForCommit(t *testing.T, last map[string]int64, limit time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		next, _, _ := e.positions(t)
		for p, o := range next {
			if o > last[p] {
				return
			}
		}
	}
	t.Fatalf("no drain committed a batch within %s", limit)
}
