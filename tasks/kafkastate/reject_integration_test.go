package kafkastate

import (
	"context"
	cryptorand "crypto/rand"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
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

// kept is one row of kafka_state.rejected.
type kept struct {
	Key, Value []byte
	Error      string
	At         time.Time
}

// place is a record's partition and offset.
type place struct {
	Partition int32
	Offset    int64
}

// rejected returns e's topic's rows of kafka_state.rejected by place.
func (e *env) rejected(t testing.TB) map[place]kept {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	rows, err := e.conn(t).Query(ctx, `SELECT kafka_partition, kafka_offset, record_key, record_value, error, rejected_at
FROM kafka_state.rejected WHERE topic = $1`, e.topic)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[place]kept{}
	for rows.Next() {
		var p place
		var k kept
		if err := rows.Scan(&p.Partition, &p.Offset, &k.Key, &k.Value, &k.Error, &k.At); err != nil {
			t.Fatal(err)
		}
		out[p] = k
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// rejectConfig is e's Config with ON_BAD_RECORD=reject.
func (e *env) rejectConfig() Config {
	cfg := e.config()
	cfg.OnBadRecord = OnBadRecordReject
	return cfg
}

// runLogged runs cfg with a logger writing into the returned buffer.
func (e *env) runLogged(t testing.TB, cfg Config, h hooks) (*Result, string, error) {
	t.Helper()
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	res, err := Materialize(testCtx(t, 3*time.Minute), cfg, Env{Dir: kestra.Dir{Path: t.TempDir()}, Log: log, hooks: h})
	return res, buf.String(), err
}

// TestRejectWhichRecords: each record rule found while reading refuses the
// batch by default (nothing written) and, with ON_BAD_RECORD=reject, puts
// the record into kafka_state.rejected (its key and value bytes as read,
// the rule it broke) while the batch's good records apply, logged at WARN
// without the value; the rules PostgreSQL enforces as it writes (a key too
// long for the index) and a key that moved partitions stay refusals.
func TestRejectWhichRecords(t *testing.T) {
	const secret = "SECRET-VALUE-BYTES"
	long := []byte(testenv.RandomHex(6000)) // incompressible enough for the btree limit
	tests := []struct {
		name    string
		bad     rec
		want    error
		refused bool // a refusal in reject mode too
	}{
		// (A null key needs a topic that is not compacted: compacted
		// topics refuse keyless records.)
		{"null key", rec{Partition: 0, Key: nil, Value: []byte(`{"s":"` + secret + `"}`)}, ErrNullKey, false},
		{"key not utf-8", rec{Partition: 0, Key: []byte("k\xff"), Value: []byte(`{"s":"` + secret + `"}`)}, ErrKeyNotUTF8, false},
		{"key with nul", rec{Partition: 0, Key: []byte("k\x00"), Value: []byte(`{"s":"` + secret + `"}`)}, ErrKeyNUL, false},
		{"tombstone with a key not utf-8", rec{Partition: 0, Key: []byte("k\xfe")}, ErrKeyNotUTF8, false},
		{"value not utf-8", rec{Partition: 0, Key: []byte("k"), Value: []byte("\"" + secret + "\xff\"")}, ErrValueNotUTF8, false},
		{"value not json", rec{Partition: 0, Key: []byte("k"), Value: []byte("{" + secret)}, ErrValueNotJSON, false},
		{"empty value", rec{Partition: 0, Key: []byte("k"), Value: []byte{}}, ErrValueNotJSON, false},
		{"nul escape", rec{Partition: 0, Key: []byte("k"), Value: []byte(`"` + secret + `\u0000"`)}, ErrValueNotJSON, false},
		{"NaN", rec{Partition: 0, Key: []byte("k"), Value: []byte(`{"s":"` + secret + `","n":NaN}`)}, ErrNonFinite, false},
		{"key too long", rec{Partition: 0, Key: long, Value: []byte(`1`)}, ErrKeyTooLong, true},
		{"key moved partitions", rec{Partition: 1, Key: []byte("k"), Value: []byte(`2`)}, ErrKeyMovedPartitions, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			policy := "compact"
			if tt.bad.Key == nil {
				policy = "delete"
			}
			createTopic(t, e.adm, e.topic, 2, map[string]*string{"cleanup.policy": &policy})
			offs := produce(t, e.kcl, e.topic, kv(0, "k", `{"v":1}`), tt.bad, kv(0, "other", `{"v":2}`))
			before := e.snapshot(t)
			_, err := e.run(t, e.config(), hooks{})
			assertRefused(t, err, tt.want, fmt.Sprintf("partition %d offset %d", tt.bad.Partition, offs[1]))
			if s := e.snapshot(t); s != before {
				t.Fatalf("a refused run changed the tables:\n%s", s)
			}

			res, logged, err := e.runLogged(t, e.rejectConfig(), hooks{})
			if tt.refused {
				assertRefused(t, err, tt.want)
				if s := e.snapshot(t); s != before {
					t.Fatalf("a refused run changed the tables:\n%s", s)
				}
				if n := len(e.rejected(t)); n != 0 {
					t.Errorf("a refused run kept %d records aside", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("reject mode: %v", err)
			}
			if res.Rejected != 1 || res.Consumed != 2 || res.Outputs()["rejected"] != int64(1) {
				t.Errorf("rejected %d, consumed %d, outputs %v; want 1 and 2", res.Rejected, res.Consumed, res.Outputs())
			}
			got := e.rejected(t)
			k, ok := got[place{tt.bad.Partition, offs[1]}]
			if len(got) != 1 || !ok {
				t.Fatalf("kafka_state.rejected holds %v, want the record at partition %d offset %d", got, tt.bad.Partition, offs[1])
			}
			if string(k.Key) != string(tt.bad.Key) || (k.Key == nil) != (tt.bad.Key == nil) ||
				string(k.Value) != string(tt.bad.Value) || (k.Value == nil) != (tt.bad.Value == nil) {
				t.Errorf("kept key %q value %q, the record has key %q value %q", k.Key, k.Value, tt.bad.Key, tt.bad.Value)
			}
			if !strings.HasPrefix(k.Error, tt.want.Error()) {
				t.Errorf("kept error %q, want it to start with %q", k.Error, tt.want)
			}
			recs := e.records(t)
			if len(recs) != 2 || recs["k"].Offset != offs[0] || recs["other"].Offset != offs[2] {
				t.Errorf("records %s, want k at offset %d and other at %d", describeStored(recs), offs[0], offs[2])
			}
			if next, _, _ := e.positions(t); next["0"] != offs[2]+1 {
				t.Errorf("positions %v, want partition 0 at %d", next, offs[2]+1)
			}
			wantLog := fmt.Sprintf("partition %d offset %d", tt.bad.Partition, offs[1])
			if !strings.Contains(logged, "level=WARN") || !strings.Contains(logged, wantLog) || !strings.Contains(logged, tt.want.Error()) {
				t.Errorf("no WARN line naming %q and %q:\n%s", wantLog, tt.want, logged)
			}
			if strings.Contains(logged, secret) {
				t.Errorf("the log shows the value's bytes:\n%s", logged)
			}
			// verify reports it.
			v, err := Verify(testCtx(t, time.Minute), e.pg, e.topic)
			if err != nil || v.Rejected != 1 || v.Outputs()["rejected"] != int64(1) {
				t.Errorf("verify: %v, rejected %v", err, v)
			}
		})
	}
}

// TestRejectKeepsTheKeysValue: a poison record between two good values of
// its key leaves the later good value; as the last record of its key, in
// the same batch or in a batch of its own, it leaves the key's earlier
// value exactly as it was (payload, partition, offset); a tombstone after
// it still deletes the key.
func TestRejectKeepsTheKeysValue(t *testing.T) {
	e := newTopicEnv(t, 1)
	cfg := e.rejectConfig()
	offs := produce(t, e.kcl, e.topic,
		kv(0, "between", `{"v":1}`), kv(0, "between", `{bad`), kv(0, "between", `{"v":3}`),
		kv(0, "last", `{"v":1}`), kv(0, "last", `NaN`))
	res, err := e.run(t, cfg, hooks{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rejected != 2 || res.Consumed != 3 {
		t.Errorf("rejected %d consumed %d, want 2 and 3", res.Rejected, res.Consumed)
	}
	recs := e.records(t)
	if r := recs["between"]; r.Offset != offs[2] || !sameJSON(r.Payload, ptr(`{"v":3}`)) {
		t.Errorf("between = %s, want the later good value at offset %d", describeStored(map[string]stored{"between": r}), offs[2])
	}
	if r := recs["last"]; r.Offset != offs[3] || !sameJSON(r.Payload, ptr(`{"v":1}`)) {
		t.Errorf("last = %s, want its earlier value at offset %d", describeStored(map[string]stored{"last": r}), offs[3])
	}

	// A batch of poison records alone: the stored rows stay as they were.
	before := e.snapshot(t)
	more := produce(t, e.kcl, e.topic, kv(0, "between", `[1,`), rec{Partition: 0, Key: []byte("last")}, kv(0, "last", "\xff"))
	res, err = e.run(t, cfg, hooks{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rejected != 2 || res.Consumed != 1 || res.Tombstones != 1 {
		t.Errorf("rejected %d consumed %d tombstones %d, want 2, 1, 1", res.Rejected, res.Consumed, res.Tombstones)
	}
	recs = e.records(t)
	if r := recs["between"]; r.Offset != offs[2] {
		t.Errorf("between moved to offset %d after a batch that only rejected it", r.Offset)
	}
	if r := recs["last"]; !r.Deleted || r.Offset != more[1] {
		t.Errorf("last = %s, want the tombstone at offset %d (the value after it rejected)", describeStored(map[string]stored{"last": r}), more[1])
	}
	if e.snapshot(t) == before {
		t.Error("the tombstone did not apply")
	}
	if got := e.rejected(t); len(got) != 4 {
		t.Errorf("kafka_state.rejected holds %v, want 4 records", slices.Collect(maps.Keys(got)))
	}
	if next, _, _ := e.positions(t); next["0"] != more[2]+1 {
		t.Errorf("positions %v, want %d", next, more[2]+1)
	}
	if _, err := Verify(testCtx(t, time.Minute), e.pg, e.topic); err != nil {
		t.Error(err)
	}
}

func ptr(s string) *string { return &s }

// TestRejectReplaysOnce: a batch stopped after it wrote its rejected rows
// and before its COMMIT leaves none of them; the re-run writes each once.
// A rebuild (the topic's records and positions deleted, the topic read
// again) finds them kept and adds no row, and each keeps its first
// rejected_at.
func TestRejectReplaysOnce(t *testing.T) {
	e := newTopicEnv(t, 2)
	produce(t, e.kcl, e.topic, kv(0, "a", `1`), kv(0, "a", `x`), kv(1, "b", `y`), kv(1, "b", `2`))
	ctx, cancel := context.WithCancel(testCtx(t, time.Minute))
	_, err := Materialize(ctx, e.rejectConfig(), Env{Dir: kestra.Dir{Path: t.TempDir()}, hooks: hooks{beforeCommit: cancel}})
	testenv.WantHinted(t, err, Hint, outcome.Transient, ErrStopped)
	if n := len(e.rejected(t)); n != 0 {
		t.Fatalf("a stopped batch kept %d records aside", n)
	}
	res, err := e.run(t, e.rejectConfig(), hooks{})
	if err != nil || res.Rejected != 2 {
		t.Fatalf("re-run: %v, %+v", err, res)
	}
	first := e.rejected(t)
	if len(first) != 2 {
		t.Fatalf("kafka_state.rejected holds %v, want 2 rows", first)
	}
	e.exec(t, `DELETE FROM kafka_state.records WHERE topic = $1`, e.topic)
	e.exec(t, `DELETE FROM kafka_state.positions WHERE topic = $1`, e.topic)
	if _, err := e.run(t, e.rejectConfig(), hooks{}); err != nil {
		t.Fatal(err)
	}
	again := e.rejected(t)
	if len(again) != 2 {
		t.Fatalf("after a rebuild kafka_state.rejected holds %d rows, want 2", len(again))
	}
	for p, k := range first {
		if !again[p].At.Equal(k.At) {
			t.Errorf("%v: rejected_at moved from %s to %s", p, k.At, again[p].At)
		}
	}
	if n := len(e.records(t)); n != 2 {
		t.Errorf("%d keys after the rebuild, want 2", n)
	}

	// The topic deleted and created again, then rebuilt: another bad
	// record at a place the old topic's held replaces its row.
	deleteTopic(t, e)
	createTopic(t, e.adm, e.topic, 2, nil)
	offs := produce(t, newProducer(t, e.brokers), e.topic, kv(0, "a", `1`), kv(0, "a", `NaN`)) // a client that knew the old topic id refuses
	_, err = e.run(t, e.rejectConfig(), hooks{})
	assertRefused(t, err, ErrIDsChanged)
	e.exec(t, `DELETE FROM kafka_state.records WHERE topic = $1`, e.topic)
	e.exec(t, `DELETE FROM kafka_state.positions WHERE topic = $1`, e.topic)
	if _, err := e.run(t, e.rejectConfig(), hooks{}); err != nil {
		t.Fatal(err)
	}
	now := e.rejected(t)
	if k := now[place{0, offs[1]}]; string(k.Value) != "NaN" || !strings.HasPrefix(k.Error, ErrNonFinite.Error()) || !k.At.After(first[place{0, offs[1]}].At) {
		t.Errorf("the new topic's bad record at offset %d: kept %q (%s, at %s), want NaN, a new row", offs[1], k.Value, k.Error, k.At)
	}
	if len(now) != 2 {
		t.Errorf("kafka_state.rejected holds %d rows, want 2 (the old topic's at partition 1 stays)", len(now))
	}
}

// TestRejectNeedsItsTable: a database set up by the seed's DDL (or an
// older changesink) has no kafka_state.rejected: a reject-mode run is a
// configuration error naming setup, before anything is written, while a
// refuse-mode run is unchanged; setup adds the table, idempotently.
func TestRejectNeedsItsTable(t *testing.T) {
	e := newTopicEnv(t, 1)
	e.exec(t, `DROP TABLE kafka_state.rejected`)
	produce(t, e.kcl, e.topic, kv(0, "a", `1`), kv(0, "a", `{`))
	before := e.snapshot(t)
	_, err := e.run(t, e.rejectConfig(), hooks{})
	testenv.WantHinted(t, err, Hint, outcome.Config, ErrNoRejectedTable, e.topic, "kafka_state.rejected", "setup")
	if s := e.snapshot(t); s != before {
		t.Fatalf("the refused run changed the tables:\n%s", s)
	}
	_, err = e.run(t, e.config(), hooks{})
	assertRefused(t, err, ErrValueNotJSON)
	if v, err := Verify(testCtx(t, time.Minute), e.pg, e.topic); err != nil || v.Rejected != 0 {
		t.Errorf("verify without the table: %v, %+v", err, v)
	}
	for range 2 {
		if _, err := Setup(testCtx(t, time.Minute), e.pg); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := e.run(t, e.rejectConfig(), hooks{}); err != nil || res.Rejected != 1 || res.Consumed != 1 {
		t.Fatalf("after setup: %v, %+v", err, res)
	}
}

// poisonHeader marks the records a test produced to be rejected, so the
// reference is computed from the topic without the code under test.
const poisonHeader = "poison"

// poisonRecord returns a record of key k that ON_BAD_RECORD=reject keeps
// aside, one of several kinds by n.
func poisonRecord(topic string, k, n int) *kgo.Record {
	r := &kgo.Record{Topic: topic, Partition: int32(k % 3), Key: fmt.Appendf(nil, "key-%04d", k),
		Headers: []kgo.RecordHeader{{Key: poisonHeader, Value: []byte("1")}}}
	switch n % 4 {
	case 0:
		r.Value = fmt.Appendf(nil, `{"k":%d,"truncated":`, k)
	case 1:
		r.Value = []byte(`{"n":NaN}`)
	case 2:
		r.Key = fmt.Appendf(nil, "key-%04d\xff", k)
		r.Value = []byte(`{"bad":"key"}`)
	default:
		r.Value = []byte("\xfe\xff")
	}
	return r
}

// TestRejectKilledUnderProducer: drains in reject mode, killed (SIGKILL)
// at random moments while a producer writes good and poison records to
// the topic, keep every committed batch and nothing else: after each kill
// verify passes, no position goes back, and every rejected row is below
// its partition's position; once the producer stops, one more drain
// leaves kafka_state.records equal to the topic's latest good value per
// key and kafka_state.rejected holding every poison record of the topic
// exactly once, with its bytes. The same with two shards run (and killed)
// side by side.
func TestRejectKilledUnderProducer(t *testing.T) {
	t.Run("whole topic", func(t *testing.T) { killRejectDrains(t, "") })
	t.Run("two shards", func(t *testing.T) { killRejectDrains(t, "0/2", "1/2") })
}

// killRejectDrains is TestRejectKilledUnderProducer with one drain per
// shard given ("" for the whole topic).
func killRejectDrains(t *testing.T, shards ...string) {
	e := newTopicEnv(t, 3)
	ctx, stop := context.WithCancel(testCtx(t, 5*time.Minute))
	defer stop()
	rng := rand.New(rand.NewPCG(3, 4))
	var backlog []*kgo.Record
	for i := range 60000 {
		k := rng.IntN(3000)
		if rng.IntN(50) == 0 {
			backlog = append(backlog, poisonRecord(e.topic, k, i))
			continue
		}
		backlog = append(backlog, &kgo.Record{Topic: e.topic, Partition: int32(k % 3), Key: fmt.Appendf(nil, "key-%04d", k),
			Value: fmt.Appendf(nil, `{"k":%d,"backlog":%d}`, k, i)})
	}
	if err := e.kcl.ProduceSync(ctx, backlog...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for seq := 0; ctx.Err() == nil; seq++ {
			batch := make([]*kgo.Record, 0, 200)
			for i := range 200 {
				k := rng.IntN(3000)
				if rng.IntN(30) == 0 {
					batch = append(batch, poisonRecord(e.topic, k, seq+i))
					continue
				}
				r := &kgo.Record{Topic: e.topic, Partition: int32(k % 3), Key: fmt.Appendf(nil, "key-%04d", k)}
				if rng.IntN(10) > 0 {
					r.Value = fmt.Appendf(nil, `{"k":%d,"seq":%d}`, k, seq)
				}
				batch = append(batch, r)
			}
			if err := e.kcl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
				if ctx.Err() == nil {
					t.Errorf("produce: %v", err)
				}
				return
			}
			time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
		}
	}()
	kills := 0
	last := map[string]int64{}
	killAt := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	for i := range 8 {
		var children []*testenv.Process
		for _, sh := range shards {
			cfg := e.drainConfig(700, 60)
			cfg.OnBadRecord, cfg.Shard = OnBadRecordReject, sh
			children = append(children, testenv.Start(t, materializer(context.Background(), t, cfg)))
		}
		e.waitForCommit(t, last, time.Minute)
		for _, child := range children {
			time.Sleep(time.Duration(killAt.IntN(600)/len(children)) * time.Millisecond)
			if r := child.Kill(t); r.Signal == syscall.SIGKILL {
				kills++
			} else if r.Code != 0 {
				t.Fatalf("run %d: exit %d before the kill:\n%s", i, r.Code, r.Output())
			}
		}
		if _, err := Verify(testCtx(t, time.Minute), e.pg, e.topic); err != nil {
			t.Fatalf("after kill %d: %v", i, err)
		}
		next, _, _ := e.positions(t)
		for p, o := range next {
			if o < last[p] {
				t.Fatalf("after kill %d partition %s went back from %d to %d", i, p, last[p], o)
			}
		}
		// In one snapshot: a killed run's COMMIT may still land.
		var ahead int
		if err := e.conn(t).QueryRow(testCtx(t, time.Minute), `SELECT count(*) FROM kafka_state.rejected x
LEFT JOIN kafka_state.positions p ON p.topic = x.topic
WHERE x.topic = $1 AND (p.topic IS NULL OR (p.next_offsets ->> x.kafka_partition::text)::bigint <= x.kafka_offset)`, e.topic).Scan(&ahead); err != nil {
			t.Fatal(err)
		}
		if ahead > 0 {
			t.Fatalf("after kill %d, %d rejected records are at or past their partition's position", i, ahead)
		}
		last = next
	}
	stop()
	wg.Wait()
	if kills < 4*len(shards) {
		t.Errorf("%d of %d runs were killed mid-drain; want half or more", kills, 8*len(shards))
	}
	for _, sh := range shards {
		cfg := e.drainConfig(MaxMaxRecords, 120)
		cfg.OnBadRecord, cfg.Shard = OnBadRecordReject, sh
		if res, err := e.run(t, cfg, hooks{}); err != nil || res.LagTotal != 0 {
			t.Fatalf("last drain of %q: %v, %+v", sh, err, res)
		}
	}
	if next, _, _ := e.positions(t); !maps.Equal(next, e.endOffsets(t)) {
		t.Errorf("positions %v, want the end offsets %v", next, e.endOffsets(t))
	}
	// The reference, from the topic: the latest good record per key, and
	// every poison record.
	want, poison := map[string]stored{}, map[place]kept{}
	readTopic(t, e, time.Minute, func(r *kgo.Record) {
		if len(r.Headers) > 0 && r.Headers[0].Key == poisonHeader {
			poison[place{r.Partition, r.Offset}] = kept{Key: r.Key, Value: r.Value}
			return
		}
		s := stored{Deleted: r.Value == nil, Partition: r.Partition, Offset: r.Offset}
		if r.Value != nil {
			v := string(r.Value)
			s.Payload = &v
		}
		want[string(r.Key)] = s
	})
	sameState(t, e.records(t), want)
	got := e.rejected(t)
	if len(got) != len(poison) {
		t.Errorf("kafka_state.rejected holds %d rows, the topic has %d poison records", len(got), len(poison))
	}
	for p, w := range poison {
		g, ok := got[p]
		if !ok || string(g.Key) != string(w.Key) || string(g.Value) != string(w.Value) {
			t.Errorf("poison record at %v: kept %v (%q, %q), want %q, %q", p, ok, g.Key, g.Value, w.Key, w.Value)
		}
	}
	v, err := Verify(testCtx(t, time.Minute), e.pg, e.topic)
	if err != nil || v.Rejected != int64(len(poison)) {
		t.Errorf("verify: %v, rejected %v, want %d", err, v, len(poison))
	}
	t.Logf("%d runs killed mid-drain, %d keys stored, %d records rejected", kills, len(want), len(poison))
}

// TestRejectBoundsTheHeldBytes: a batch holds its rejected records until
// it writes them, so past maxRejectedBytes it takes no more records; the
// next batch goes on, and nothing is lost. Each 600 kB poison record is a
// fetch response of its own (partitionMaxBytes is 1 MiB), so a bound of
// 1 MB ends the batch after the second.
func TestRejectBoundsTheHeldBytes(t *testing.T) {
	e := newTopicEnv(t, 1)
	big := make([]byte, 600<<10) // random: the producer's compression cannot shrink it
	var offs []int64
	for i := range 4 {
		cryptorand.Read(big)
		big[0] = 0xff
		offs = append(offs, produce(t, e.kcl, e.topic, rec{Partition: 0, Key: fmt.Append(nil, "k", i), Value: big})...)
	}
	offs = append(offs, produce(t, e.kcl, e.topic, kv(0, "good", `1`))...)
	res, err := e.run(t, e.rejectConfig(), hooks{maxRejectedBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rejected != 2 || res.Consumed != 0 || res.NextOffsets[0] != offs[2] {
		t.Errorf("first batch: rejected %d, consumed %d, next %v; want 2, 0, %d", res.Rejected, res.Consumed, res.NextOffsets, offs[2])
	}
	res, err = e.run(t, e.rejectConfig(), hooks{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rejected != 2 || res.Consumed != 1 || res.NextOffsets[0] != offs[4]+1 {
		t.Errorf("second batch: rejected %d, consumed %d, next %v; want 2, 1, %d", res.Rejected, res.Consumed, res.NextOffsets, offs[4]+1)
	}
	if got := e.rejected(t); len(got) != 4 || len(got[place{0, offs[3]}].Value) != len(big) {
		t.Errorf("kafka_state.rejected holds %d rows, want the 4 poison records whole", len(got))
	}
}
