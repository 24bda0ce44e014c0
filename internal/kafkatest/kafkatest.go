// Package kafkatest holds what changesink's Kafka integration tests and the
// demo producer need from a real broker: many records of a realistic size
// produced at once (ProduceMany), a transaction
// written and waited for until it is complete in the log, and DeleteRecords
// that outlasts a topic config change still on its way to the log.
//
// Why: a transactional producer's EndTransaction returns once the transaction
// coordinator has decided, but the broker writes the COMMIT or ABORT markers
// into the partitions after that. Until they are there, the partition's last
// stable offset (what a read_committed consumer may read up to) stays at the
// transaction's first record, so a batch run at once stops short, and a record
// produced meanwhile by another client lands before the marker.
package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// WaitLeaders waits until every one of topic's partitions has a leader
// that answers ListOffsets: a topic just created is not yet known to every
// request (DescribeConfigs may answer UNKNOWN_TOPIC_OR_PARTITION). It polls
// every 100 ms until ctx ends.
func WaitLeaders(ctx context.Context, adm *kadm.Client, topic string, partitions int) error {
	for {
		offs, err := adm.ListEndOffsets(ctx, topic)
		if err == nil && offs.Error() == nil && len(offs[topic]) == partitions {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topic %s has no leaders for its %d partitions: %v (%w)", topic, partitions, err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitStable waits until, for every partition p in past, topic's last stable
// offset is at least past[p], that is, until no transaction is open below
// past[p] (pass the last offset a transaction wrote to p, plus one). It polls
// ListOffsets (read_committed) every 10 ms until ctx ends.
//
// Errors: the ListOffsets error, or ctx's error wrapped with the partitions
// still below their offsets.
func WaitStable(ctx context.Context, adm *kadm.Client, topic string, past map[int32]int64) error {
	for {
		lso, err := adm.ListCommittedOffsets(ctx, topic)
		if err != nil {
			return fmt.Errorf("list last stable offsets of %s: %w", topic, err)
		}
		behind := map[int32]int64{}
		for p, want := range past {
			if o, ok := lso.Lookup(topic, p); !ok || o.Err != nil || o.Offset < want {
				behind[p] = o.Offset
			}
		}
		if len(behind) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topic %s: last stable offsets %v still below %v: %w", topic, behind, past, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Past returns, per partition, one past the highest offset among recs (as
// filled in by a produce call), the argument WaitStable expects.
func Past(recs []*kgo.Record) map[int32]int64 {
	past := map[int32]int64{}
	for _, r := range recs {
		past[r.Partition] = max(past[r.Partition], r.Offset+1)
	}
	return past
}

// DeleteRecords moves partition's log start offset to before (DeleteRecords).
// A topic config change (such as adding "delete" to cleanup.policy, which
// DeleteRecords needs) reaches the partition's log after AlterConfigs
// returns, so POLICY_VIOLATION is retried every 50 ms until ctx ends.
func DeleteRecords(ctx context.Context, adm *kadm.Client, topic string, partition int32, before int64) error {
	o := kadm.Offsets{}
	o.Add(kadm.Offset{Topic: topic, Partition: partition, At: before, LeaderEpoch: -1})
	for {
		resp, err := adm.DeleteRecords(ctx, o)
		if err == nil {
			err = resp.Error()
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, kerr.PolicyViolation) {
			return fmt.Errorf("delete records of %s/%d before %d: %w", topic, partition, before, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("delete records of %s/%d before %d: %w (still %v)", topic, partition, before, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Transact writes recs (at least one, all of one topic) through cl (a client
// with a TransactionalID) in one transaction, commits it (commit) or aborts
// it, and waits until its markers are in the log (WaitStable), so that what
// comes next, a batch run or another client's record, sees the transaction
// complete. The records' offsets are filled in. A failed produce aborts the
// transaction.
func Transact(ctx context.Context, cl *kgo.Client, recs []*kgo.Record, commit bool) error {
	if len(recs) == 0 {
		return errors.New("transact: no records (a transaction of none leaves no marker to wait for)")
	}
	if err := cl.BeginTransaction(); err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		_ = cl.EndTransaction(ctx, kgo.TryAbort)
		return fmt.Errorf("produce in transaction: %w", err)
	}
	end := kgo.TryAbort
	if commit {
		end = kgo.TryCommit
	}
	if err := cl.EndTransaction(ctx, end); err != nil {
		return fmt.Errorf("end transaction: %w", err)
	}
	return WaitStable(ctx, kadm.NewClient(cl), recs[0].Topic, Past(recs))
}

// ProduceMany writes n records of about 200 bytes of JSON over the topic's
// partitions (the client must use kgo.ManualPartitioner): keys
// customer-0000000 up to n/2 are written twice, so later values replace
// earlier ones, and every 50th record is a tombstone. It produces in
// batches of 5,000 and returns the first error.
func ProduceMany(ctx context.Context, cl *kgo.Client, topic string, partitions int32, n int) error {
	pad := strings.Repeat("x", 120)
	batch := make([]*kgo.Record, 0, 5000)
	for i := 0; i < n; i++ {
		k := i % (n/2 + 1)
		r := &kgo.Record{Topic: topic, Partition: int32(k) % partitions, Key: fmt.Appendf(nil, "customer-%07d", k)}
		if i%50 != 49 {
			r.Value = fmt.Appendf(nil, `{"id":%d,"seq":%d,"name":"Customer %d","active":true,"pad":"%s"}`, k, i, k, pad)
		}
		batch = append(batch, r)
		if len(batch) == cap(batch) || i == n-1 {
			if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
				return fmt.Errorf("produce %d records to %s: %w", len(batch), topic, err)
			}
			batch = batch[:0]
		}
	}
	return nil
}
