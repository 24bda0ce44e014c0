package kafkastate

import (
	"bytes"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/changesink/changesink/internal/kestra"
)

// oneDay is Kafka's default delete.retention.ms.
const oneDay = "86400000"

// fastCleaning are the configs under which the cleaner removes a tombstone
// before a lagging batch reads it: a compacted topic whose segments roll
// after 1.5 s and whose cleaner runs as soon as anything is dirty;
// delete.retention.ms is given by the test.
func fastCleaning(deleteRetentionMs string) map[string]*string {
	return map[string]*string{
		"cleanup.policy":            kadm.StringPtr("compact"),
		"segment.ms":                kadm.StringPtr("1500"),
		"min.cleanable.dirty.ratio": kadm.StringPtr("0.001"),
		"min.compaction.lag.ms":     kadm.StringPtr("0"),
		"delete.retention.ms":       kadm.StringPtr(deleteRetentionMs),
	}
}

// TestTombstoneCompactedAwayWhileLagging is the data loss the tombstone
// rule prevents, on the real broker: a key is materialized, its tombstone
// is produced, and the cleaner removes the tombstone (delete.retention.ms=0)
// before the next batch reads it. Before the fix that batch succeeded and left the key live for ever
// (and verify said valid); now it is refused before reading, naming the
// partition, the unread range, the time since the positions were last
// caught up and delete.retention.ms, and changes nothing. The remedy the
// message gives, a rebuild into an empty destination, then converges.
func TestTombstoneCompactedAwayWhileLagging(t *testing.T) {
	e := newEnv(t)
	// A day at first, so the first batch's own reads are covered; then 0,
	// so the tombstone can go as soon as the cleaner has passed twice.
	createTopic(t, e.adm, e.topic, 1, fastCleaning(oneDay))
	produce(t, e.kcl, e.topic, kv(0, "a", `{"v":1}`))
	e.mustRun(t)
	setRetention(t, e, "0")
	offs := produce(t, e.kcl, e.topic, tomb(0, "a"), kv(0, "filler", `0`))
	waitRemoved(t, e, 0, offs[0])
	before, beforeAt := e.snapshot(t), e.updatedAt(t)

	res, err := e.run(t, e.config(), hooks{})
	if err == nil {
		if r, ok := e.records(t)["a"]; ok && !r.Deleted {
			t.Fatalf("data loss: the batch succeeded (%+v) and key \"a\" is still live at offset %d, although its tombstone "+
				"(offset %d) was produced; the cleaner removed the tombstone before the batch read it", res, r.Offset, offs[0])
		}
		t.Fatalf("the batch succeeded (%+v); want a refusal (the tombstone at offset %d was removed before it was read)", res, offs[0])
	}
	assertRefused(t, err, ErrTombstonesMayBeLost, "topic "+strconv.Quote(e.topic), "partition 0",
		"saved offset 1", "delete.retention.ms=0", "Rebuild into an empty destination", "raise the topic's delete.retention.ms")
	t.Logf("refused: %v", err)
	if after := e.snapshot(t); after != before {
		t.Errorf("a refused run changed the tables:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if at := e.updatedAt(t); !at.Equal(beforeAt) {
		t.Errorf("a refused run moved positions.updated_at from %s to %s", beforeAt, at)
	}

	// The remedy: rebuild into an empty destination. The rebuild's own
	// reads need time too, so the topic gets a day again first.
	setRetention(t, e, oneDay)
	e.exec(t, `DELETE FROM kafka_state.records WHERE topic = $1`, e.topic)
	e.exec(t, `DELETE FROM kafka_state.positions WHERE topic = $1`, e.topic)
	e.mustRun(t)
	if r, ok := e.records(t)["a"]; ok && !r.Deleted {
		t.Errorf("after the rebuild key \"a\" is live at offset %d; want it absent (its value and tombstone are compacted away)", r.Offset)
	}
}

// TestTombstoneRuleAnchor: positions.updated_at moves only when a batch
// read every partition to its end, so a catch-up cut by MAX_RECORDS is
// measured from the batch that last caught up (here the first), not from
// the previous batch; a topic whose saved offsets are its end is safe
// whatever delete.retention.ms, and a batch with nothing new refreshes
// updated_at.
func TestTombstoneRuleAnchor(t *testing.T) {
	e := newTopicEnv(t, 2) // delete.retention.ms: the broker's default, a day
	produce(t, e.kcl, e.topic, kv(0, "a", `1`), kv(0, "b", `1`), kv(0, "c", `1`), kv(1, "d", `1`))
	cfg := e.config()
	cfg.MaxRecords = 1
	if _, err := e.run(t, cfg, hooks{}); err != nil { // the first batch, cut
		t.Fatal(err)
	}
	first := e.updatedAt(t)
	if _, err := e.run(t, cfg, hooks{}); err != nil { // cut again
		t.Fatal(err)
	}
	if at := e.updatedAt(t); !at.Equal(first) {
		t.Fatalf("a batch cut by MAX_RECORDS moved updated_at from %s to %s", first, at)
	}
	next, _, _ := e.positions(t)

	// The previous batch was moments ago, but the last catch-up (none: the
	// first batch) is older than delete.retention.ms=0 allows.
	setRetention(t, e, "0")
	before := e.snapshot(t)
	_, err := e.run(t, cfg, hooks{})
	// Partition 1, never read (no live value from it), is a first read and
	// not named.
	assertRefused(t, err, ErrTombstonesMayBeLost, "partition 0 (unread from saved offset "+strconv.FormatInt(next["0"], 10)+" to 3): ",
		"have passed since kafka_state.positions.updated_at", "the start of the last batch that read every partition to its end")
	var te *TombstoneError
	if !errors.As(err, &te) || te.AfterRead {
		t.Errorf("want a refusal before reading, got %#v", err)
	}
	if after := e.snapshot(t); after != before {
		t.Errorf("a refused run changed the tables:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// A batch that reads every partition to its end moves updated_at.
	setRetention(t, e, oneDay)
	if res := e.mustRun(t); res.Consumed == 0 {
		t.Fatalf("the catch-up read nothing: %+v", res)
	}
	caughtUp := e.updatedAt(t)
	if !caughtUp.After(first) {
		t.Errorf("a batch read to the end left updated_at at %s (first batch %s)", caughtUp, first)
	}
	// Caught up: nothing can be lost, whatever the time; the batch (nothing
	// new) refreshes updated_at.
	setRetention(t, e, "0")
	if res := e.mustRun(t); res.Consumed != 0 {
		t.Errorf("consumed %d, want 0", res.Consumed)
	}
	if at := e.updatedAt(t); !at.After(caughtUp) {
		t.Errorf("a batch with nothing new left updated_at at %s", at)
	}
}

// TestTombstoneRulePolicies: the reads of one batch must also end within
// delete.retention.ms (Kafka's rule for a scan from the start), on a first
// run too; a topic whose cleanup.policy has no compact keeps tombstones
// until retention deletes their segment, so the rule does not apply to it.
func TestTombstoneRulePolicies(t *testing.T) {
	for _, tc := range []struct {
		policy  string
		refused bool
	}{
		{"compact", true},
		{"compact,delete", true},
		{"delete", false},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			e := newEnv(t)
			createTopic(t, e.adm, e.topic, 1, map[string]*string{
				"cleanup.policy": kadm.StringPtr(tc.policy), "delete.retention.ms": kadm.StringPtr("0")})
			produce(t, e.kcl, e.topic, kv(0, "a", `1`))
			var logged bytes.Buffer
			_, err := Materialize(testCtx(t, time.Minute), e.config(), Env{Dir: kestra.Dir{Path: t.TempDir()}, Log: slog.New(slog.NewTextHandler(&logged, nil))})
			if warned := strings.Contains(logged.String(), "is not compacted (cleanup.policy="+tc.policy+")"); warned == tc.refused {
				t.Errorf("warned that the topic is not compacted: %v, want %v; log:\n%s", warned, !tc.refused, logged.String())
			}
			if !tc.refused {
				if err != nil {
					t.Fatal(err)
				}
				produce(t, e.kcl, e.topic, tomb(0, "a"))
				if res := e.mustRun(t); res.Tombstones != 1 {
					t.Errorf("second batch %+v, want the tombstone", res)
				}
				return
			}
			assertRefused(t, err, ErrTombstonesMayBeLost, "partition 0 (read from saved offset 0 to 1)", "since the start of this batch",
				"a single batch's reads took longer than delete.retention.ms allows")
			if got := e.snapshot(t); got != "--\n--\n" {
				t.Errorf("tables changed:\n%s", got)
			}
		})
	}
}

// TestTombstoneRuleReadsEndTooLate: the check before reading passes, but
// the batch's reads end more than the allowed time after updated_at (a slow
// batch): refused after reading, before anything is written.
func TestTombstoneRuleReadsEndTooLate(t *testing.T) {
	e := newEnv(t)
	createTopic(t, e.adm, e.topic, 1, map[string]*string{
		"cleanup.policy": kadm.StringPtr("compact"), "delete.retention.ms": kadm.StringPtr("10000")})
	produce(t, e.kcl, e.topic, kv(0, "a", `1`))
	e.mustRun(t)
	produce(t, e.kcl, e.topic, tomb(0, "a"))
	before := e.snapshot(t)
	_, err := e.run(t, e.config(), hooks{afterFetch: func() { time.Sleep(10 * time.Second) }})
	assertRefused(t, err, ErrTombstonesMayBeLost, "partition 0 (read from saved offset 1 to 2)",
		"had passed by the end of this batch's reads", "delete.retention.ms=10000 (less a margin of 1s)")
	if after := e.snapshot(t); after != before {
		t.Errorf("a refused run changed the tables:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// setRetention sets the topic's delete.retention.ms and waits until the
// broker's DescribeConfigs (what materialize reads) reports it.
func setRetention(t *testing.T, e *env, ms string) {
	t.Helper()
	setTopicConfig(t, e, "delete.retention.ms", ms)
	want, _ := strconv.ParseInt(ms, 10, 64)
	ctx := testCtx(t, time.Minute)
	cl := newProducer(t, e.brokers)
	for {
		r, err := describeRetention(ctx, cl, e.topic)
		if err == nil && r.deleteRetentionMs == want {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("delete.retention.ms of %s is not %s after a minute: %+v %v", e.topic, ms, r, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// updatedAt returns the topic's positions.updated_at.
func (e *env) updatedAt(t testing.TB) time.Time {
	t.Helper()
	var at time.Time
	if err := e.conn(t).QueryRow(testCtx(t, time.Minute), `SELECT updated_at FROM kafka_state.positions WHERE topic = $1`, e.topic).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}

// waitRemoved produces a filler record to partition p every 300 ms (each
// rolls the segment once segment.ms has passed, so the cleaner has dirty
// segments to clean) until the log no longer holds a record at offset.
func waitRemoved(t *testing.T, e *env, p int32, offset int64) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(2 * time.Minute)
	for i := 0; ; i++ {
		if _, ok := logRecords(t, e, p)[offset]; !ok {
			t.Logf("partition %d offset %d removed by the cleaner after %s", p, offset, time.Since(start).Round(100*time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cleaner did not remove partition %d offset %d within 2 minutes", p, offset)
		}
		produce(t, e.kcl, e.topic, kv(p, "filler-"+strconv.Itoa(i%3), strconv.Itoa(i)))
		time.Sleep(300 * time.Millisecond)
	}
}

// logRecords reads partition p from its log start to its high watermark
// with raw fetches (read_uncommitted) and returns the records present, by
// offset: what the cleaner has left.
func logRecords(t *testing.T, e *env, p int32) map[int64]*kgo.Record {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	m, err := e.adm.Metadata(ctx, e.topic)
	if err != nil {
		t.Fatal(err)
	}
	td := m.Topics[e.topic]
	out := map[int64]*kgo.Record{}
	next := int64(0)
	for {
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis, req.MinBytes, req.MaxBytes, req.SessionEpoch = 100, 1, 8<<20, -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = e.topic, td.ID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, next, 8<<20
		rt.Partitions = []kmsg.FetchRequestTopicPartition{rp}
		req.Topics = []kmsg.FetchRequestTopic{rt}
		resp, err := req.RequestWith(ctx, e.kcl.Broker(int(td.Partitions[p].Leader)))
		if err != nil {
			t.Fatal(err)
		}
		part := &resp.Topics[0].Partitions[0]
		if part.ErrorCode == 1 { // OFFSET_OUT_OF_RANGE: start at the log start
			next = part.LogStartOffset
			continue
		}
		fp, n := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: next, IsolationLevel: kgo.ReadUncommitted(),
			Topic: e.topic, Partition: p}, part, kgo.DefaultDecompressor(), nil)
		if fp.Err != nil {
			t.Fatal(fp.Err)
		}
		for _, r := range fp.Records {
			out[r.Offset] = r
		}
		if n <= next || n >= fp.HighWatermark {
			return out
		}
		next = n
	}
}

// TestTombstoneRuleFutureUpdatedAt: positions whose updated_at is ahead of
// PostgreSQL's clock (restored from a server whose clock ran ahead, or
// edited) switched the rule off until that time: a lagging batch committed
// however long ago the last catch-up really was. It is refused, naming the future
// time.
func TestTombstoneRuleFutureUpdatedAt(t *testing.T) {
	e := newTopicEnv(t, 1)
	produce(t, e.kcl, e.topic, kv(0, "a", `1`))
	e.mustRun(t)
	e.exec(t, `UPDATE kafka_state.positions SET updated_at = now() + interval '30 days' WHERE topic = $1`, e.topic)
	setRetention(t, e, "60000") // allows 54 s: the reads pass, only updated_at decides
	produce(t, e.kcl, e.topic, kv(0, "b", `2`))
	before := e.snapshot(t)
	_, err := e.run(t, e.config(), hooks{})
	assertRefused(t, err, ErrTombstonesMayBeLost, "partition 0 (unread from saved offset 1 to 2)", "ahead of PostgreSQL's clock")
	if after := e.snapshot(t); after != before {
		t.Errorf("a refused run changed the tables:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
