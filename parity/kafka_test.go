package parity

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/changesink/changesink/internal/kafkatest"
	"github.com/changesink/changesink/internal/testenv"
)

// kafkaTopic is a topic one scenario owns, on the broker at brokers.
type kafkaTopic struct {
	brokers    string
	name       string
	partitions int
	adm        *kadm.Client
}

func newKafkaClient(t *testing.T, brokers string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(brokers, ",")...)}, opts...)...)
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	return cl
}

// createTopic creates the scenario's topic and deletes it in t.Cleanup.
func createTopic(t *testing.T, brokers, name string, partitions int, configs map[string]string) *kafkaTopic {
	t.Helper()
	cl := newKafkaClient(t, brokers)
	// Cleanups run last first: the topic is deleted while the client is open.
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	cfg := map[string]*string{}
	for k, v := range configs {
		cfg[k] = &v
	}
	testenv.CreateTopic(t, adm, name, int32(partitions), cfg)
	return &kafkaTopic{brokers: brokers, name: name, partitions: partitions, adm: adm}
}

func (tp *kafkaTopic) records(recs []producedRecord) []*kgo.Record {
	out := make([]*kgo.Record, 0, len(recs))
	for _, r := range recs {
		out = append(out, &kgo.Record{Topic: tp.name, Partition: r.Partition, Key: r.Key, Value: r.Value})
	}
	return out
}

// produce writes recs in order, synchronously, without a transaction.
func (tp *kafkaTopic) produce(t *testing.T, recs []producedRecord) {
	t.Helper()
	cl := newKafkaClient(t, tp.brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MaxBufferedRecords(100000))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, tp.records(recs)...).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", tp.name, err)
	}
}

// produceTxn writes recs in one transaction, commits or aborts it and waits
// until its markers are in the log.
func (tp *kafkaTopic) produceTxn(t *testing.T, recs []producedRecord, commit bool) {
	t.Helper()
	cl := newKafkaClient(t, tp.brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionalID("parity-txn_"+testenv.RandomHex(4)), kgo.TransactionTimeout(30*time.Second))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatalf("begin transaction: %v", err)
	}
	krs := tp.records(recs)
	if err := cl.ProduceSync(ctx, krs...).FirstErr(); err != nil {
		t.Fatalf("produce in transaction to %s: %v", tp.name, err)
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatalf("end transaction (commit=%v): %v", commit, err)
	}
	// Both tools must see the transaction's markers, not race the broker writing them.
	if err := kafkatest.WaitStable(ctx, tp.adm, tp.name, kafkatest.Past(krs)); err != nil {
		t.Fatal(err)
	}
}

// deleteRecords moves partition's log start offset to before.
func (tp *kafkaTopic) deleteRecords(t *testing.T, partition int32, before int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafkatest.DeleteRecords(ctx, tp.adm, tp.name, partition, before); err != nil {
		t.Fatal(err)
	}
}

// watermarks returns each partition's log start and end offsets.
func (tp *kafkaTopic) watermarks(t *testing.T) (starts, ends map[int32]int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lo, err := tp.adm.ListStartOffsets(ctx, tp.name)
	if err == nil {
		err = lo.Error()
	}
	if err != nil {
		t.Fatalf("list start offsets: %v", err)
	}
	hi, err := tp.adm.ListEndOffsets(ctx, tp.name)
	if err == nil {
		err = hi.Error()
	}
	if err != nil {
		t.Fatalf("list end offsets: %v", err)
	}
	starts, ends = map[int32]int64{}, map[int32]int64{}
	lo.Each(func(o kadm.ListedOffset) { starts[o.Partition] = o.Offset })
	hi.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	return starts, ends
}

// readOffsets returns the offsets of the records a consumer sees in
// partition from offset from up to (not including) to, with the given
// isolation level. It reads until it sees an offset at or past to, or until
// quiet passes with nothing new (a read_committed fetch returns nothing for
// aborted records and transaction markers).
func (tp *kafkaTopic) readOffsets(t *testing.T, partition int32, from, to int64, level kgo.IsolationLevel, quiet time.Duration) []int64 {
	t.Helper()
	if from >= to {
		return nil
	}
	cl := newKafkaClient(t, tp.brokers, kgo.FetchIsolationLevel(level),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{tp.name: {partition: kgo.NewOffset().At(from)}}),
		kgo.FetchMaxWait(200*time.Millisecond))
	defer cl.Close()
	var got []int64
	for {
		ctx, cancel := context.WithTimeout(context.Background(), quiet)
		fetches := cl.PollFetches(ctx)
		cancel()
		if ctx.Err() != nil && fetches.NumRecords() == 0 {
			return got
		}
		for _, fe := range fetches.Errors() {
			if !errors.Is(fe.Err, context.DeadlineExceeded) && !errors.Is(fe.Err, context.Canceled) {
				t.Fatalf("read %s/%d from %d: %v", tp.name, partition, from, fe.Err)
			}
		}
		done := false
		fetches.EachRecord(func(r *kgo.Record) {
			if done || r.Offset >= to {
				done = true
				return
			}
			got = append(got, r.Offset)
			done = r.Offset == to-1
		})
		if done {
			return got
		}
	}
}

// waitCompacted waits until each listed partition holds exactly the given
// number of records (read uncommitted, from its log start to its end).
func (tp *kafkaTopic) waitCompacted(t *testing.T, remaining map[int]int) {
	t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for {
		starts, ends := tp.watermarks(t)
		var pending []string
		for p, want := range remaining {
			got := len(tp.readOffsets(t, int32(p), starts[int32(p)], ends[int32(p)], kgo.ReadUncommitted(), 2*time.Second))
			if got != want {
				pending = append(pending, fmt.Sprintf("partition %d holds %d records, want %d", p, got, want))
			}
		}
		if len(pending) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic %s not compacted after 120 s: %s (is the broker's log.cleaner.backoff.ms short?)", tp.name, strings.Join(pending, "; "))
		}
		time.Sleep(time.Second)
	}
}
