package kafkastate

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sync/errgroup"
)

// Fetch sizing. A response holds at most fetchMaxBytes (a batch larger than
// partitionMaxBytes is still returned whole when its partition comes first,
// KIP-74; partitions rotate so each comes first in turn). The records sent on
// to COPY point into their response, so the responses in flight and queued
// (materialize's channel holds two partitions' records) are most of the live
// heap: with 4 MiB responses and four queued, a 100,000-record batch peaked
// at 65-81 MB RSS (once 103 MB on a loaded machine), with 2 MiB and two at
// 54-75 MB, no slower here.
const (
	fetchMaxBytes     = 2 << 20
	partitionMaxBytes = 1 << 20
	maxFetchWait      = 500 * time.Millisecond
)

// row is one validated record on its way to the staging table.
type row struct {
	key       string
	value     []byte // nil: a tombstone
	partition int32
	offset    int64
}

// partState is one partition's read position during the batch.
type partState struct {
	partition int32
	// start is the batch's start offset (the saved next offset).
	start int64
	// next is the next offset to fetch: past returned records, aborted
	// transactions, transaction markers and compacted batch tails (the
	// Java client's position, which franz-go computes).
	next int64
	// done: end of partition (next >= last stable offset) or the budget ran
	// out while reading it.
	done bool
	// end is the last stable offset of the latest answer (atEnd).
	end int64
	// hwm is the high watermark of the latest answer (the lag's end).
	hwm int64
	// keys holds a hash of every key read from the partition in this batch,
	// to tell whether the batch holds a key twice (see repeatsKeys).
	keys []uint64
	// longestKey is the longest key read from the partition in this batch,
	// at offset longestKeyAt: the record named when PostgreSQL refuses a
	// key too long for its index (see keyTooLong).
	longestKey   string
	longestKeyAt int64
}

// atEnd reports that the partition was read to its end (next >= the last
// stable offset of the latest answer); not when the budget or the deadline
// cut it.
func (p *partState) atEnd() bool { return p.next >= p.end }

// fetcher reads every partition from its position with raw Fetch requests
// (read_committed, by topic id) to each leader, decodes each partition with
// kgo.ProcessFetchPartition, validates the records and sends them to out.
// No consumer group is involved.
type fetcher struct {
	cl       *kgo.Client
	topic    string
	topicID  [16]byte
	deadline time.Time
	budget   atomic.Int64 // records left in the batch (MAX_RECORDS)
	dec      kgo.Decompressor
	out      chan<- []row
	seed     maphash.Seed

	consumed, tombstones atomic.Int64

	// reject: ON_BAD_RECORD=reject; a record that breaks a record rule is
	// kept in rejected (under mu) instead of refusing the batch, until their
	// bytes pass maxRejected (maxRejectedBytes).
	reject      bool
	maxRejected int

	mu            sync.Mutex
	err           error // the first error, set before out is closed
	rejected      []rejectedRow
	rejectedBytes int
}

// rejectedRow is a record ON_BAD_RECORD=reject keeps aside: its place, its
// key and value (copied out of the fetch response; nil when null) and the
// refusal it would have been.
type rejectedRow struct {
	partition  int32
	offset     int64
	key, value []byte
	err        *RecordError
}

// maxRejectedBytes bounds the key and value bytes of the rejected records
// one batch holds until it writes them (keepRejected, after the COPY):
// past it the batch takes no more records, and the next batch goes on.
const maxRejectedBytes = 64 << 20

// keep notes a record rejected by err (a *RecordError), its bytes copied
// out of the fetch response; past maxRejectedBytes it ends the batch's
// budget.
func (f *fetcher) keep(r *kgo.Record, err error) {
	var re *RecordError
	if !errors.As(err, &re) {
		return
	}
	key := bytes.Clone(r.Key)
	re.Key = key
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rejected = append(f.rejected, rejectedRow{partition: r.Partition, offset: r.Offset, key: key, value: bytes.Clone(r.Value), err: re})
	if f.rejectedBytes += len(r.Key) + len(r.Value); f.rejectedBytes > f.maxRejected {
		f.budget.Store(0)
	}
}

// Rejected returns the records kept aside, once the fetch has ended.
func (f *fetcher) Rejected() []rejectedRow {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rejected
}

// Err returns the error that ended the fetch, once out is closed.
func (f *fetcher) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// run fetches all leaders concurrently and returns when every partition is
// done, the budget is spent or the deadline has passed, once every worker
// has returned. It returns the first error (also kept for Err); the first
// error cancels the other workers. It closes out after recording the error.
func (f *fetcher) run(ctx context.Context, byLeader map[int32][]*partState) (err error) {
	defer func() {
		f.mu.Lock()
		f.err = err
		f.mu.Unlock()
		close(f.out)
	}()
	g, gctx := errgroup.WithContext(ctx)
	for leader, parts := range byLeader {
		g.Go(func() error { return f.leader(gctx, leader, parts) })
	}
	return g.Wait()
}

// leader loops over Fetch requests to one broker for the partitions it leads.
func (f *fetcher) leader(ctx context.Context, leader int32, parts []*partState) error {
	for round := 0; ; round++ {
		var active []*partState
		for i := range parts {
			// Rotate the order so that every partition is first in turn.
			if p := parts[(i+round)%len(parts)]; !p.done {
				active = append(active, p)
			}
		}
		left := time.Until(f.deadline)
		if len(active) == 0 || f.budget.Load() <= 0 || left <= 0 {
			return nil
		}
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis = int32(min(maxFetchWait, left).Milliseconds())
		req.MinBytes = 1
		req.MaxBytes = fetchMaxBytes
		req.IsolationLevel = 1 // read_committed
		req.SessionID = 0
		req.SessionEpoch = -1 // no fetch session: a full request every time
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = f.topic
		rt.TopicID = f.topicID
		for _, p := range active {
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition = p.partition
			rp.FetchOffset = p.next
			rp.PartitionMaxBytes = partitionMaxBytes
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = []kmsg.FetchRequestTopic{rt}

		rctx, cancel := context.WithTimeout(ctx, time.Duration(req.MaxWaitMillis)*time.Millisecond+kafkaTimeout)
		resp, err := req.RequestWith(rctx, f.cl.Broker(int(leader)))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return kafkaRequestErr(fetchRequest, err, f.topic, "broker "+strconv.Itoa(int(leader)))
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			op := "kafka fetch from broker " + strconv.Itoa(int(leader))
			return kafkaCodeErr(fetchRequest, TopicError{Topic: f.topic, Partition: -1, Offset: -1, Op: op}, err, nil)
		}
		for ti := range resp.Topics {
			for pi := range resp.Topics[ti].Partitions {
				if err := f.partition(ctx, &resp.Topics[ti].Partitions[pi], active); err != nil {
					return err
				}
			}
		}
	}
}

// partition decodes one partition of a fetch response, takes records within
// the budget, validates them, sends them on and advances the position.
func (f *fetcher) partition(ctx context.Context, rp *kmsg.FetchResponseTopicPartition, active []*partState) error {
	var st *partState
	for _, p := range active {
		if p.partition == rp.Partition {
			st = p
		}
	}
	if st == nil {
		return fmt.Errorf("kafka fetch of topic %q: the broker answered for partition %d, which was not asked", f.topic, rp.Partition)
	}
	fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
		Offset:         st.next,
		IsolationLevel: kgo.ReadCommitted(),
		Topic:          f.topic,
		Partition:      rp.Partition,
	}, rp, f.dec, nil)
	if fp.Err != nil {
		var code *kerr.Error
		if errors.As(fp.Err, &code) {
			oor := &OffsetError{Topic: f.topic, Partition: rp.Partition, Saved: st.start, LogStart: -1, End: -1, Fetched: true, FetchOffset: st.next}
			return kafkaCodeErr(fetchRequest, TopicError{Topic: f.topic, Partition: rp.Partition, Offset: -1, Op: "kafka fetch"}, fp.Err, oor)
		}
		return &TopicError{Topic: f.topic, Partition: rp.Partition, Offset: st.next, Op: "kafka fetch", Err: fp.Err}
	}
	recs := fp.Records
	take := f.reserve(len(recs))
	if take < len(recs) {
		// The budget ran out inside this response: resume right after the
		// last record taken.
		if take > 0 {
			next = recs[take-1].Offset + 1
		} else {
			next = st.next
		}
		st.done = true
	}
	if take > 0 {
		rows := make([]row, 0, take)
		tomb := 0
		for _, r := range recs[:take] {
			if err := checkRecord(f.topic, r.Partition, r.Offset, r.Key, r.Value, r.Value == nil); err != nil {
				if !f.reject {
					return err
				}
				f.keep(r, err)
				continue
			}
			rows = append(rows, row{key: string(r.Key), value: r.Value, partition: r.Partition, offset: r.Offset})
			if len(r.Key) > len(st.longestKey) {
				st.longestKey, st.longestKeyAt = string(r.Key), r.Offset
			}
			st.keys = append(st.keys, maphash.Bytes(f.seed, r.Key))
			if r.Value == nil {
				tomb++
			}
		}
		if len(rows) > 0 {
			select {
			case f.out <- rows:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		f.consumed.Add(int64(len(rows)))
		f.tombstones.Add(int64(tomb))
	}
	if next > st.next {
		st.next = next
	}
	end := fp.LastStableOffset
	if end < 0 {
		end = fp.HighWatermark
	}
	st.end = end
	st.hwm = max(st.hwm, fp.HighWatermark)
	if st.next >= end {
		st.done = true // end of partition
	}
	return nil
}

// repeatsKeys reports whether some partition yielded a key more than once
// in this batch (or two keys whose hashes collide, which only costs the
// merge a sort). A key read from two partitions is refused by the
// moved-key check before the merge, so partitions need no cross-check.
func repeatsKeys(states map[int32]*partState) bool {
	for _, st := range states {
		slices.Sort(st.keys)
		for i := 1; i < len(st.keys); i++ {
			if st.keys[i] == st.keys[i-1] {
				return true
			}
		}
	}
	return false
}

// keysInTwoPartitions reports whether two partitions yielded the same key
// hash in this batch: a key that moved partitions within the batch (or two
// keys whose hashes collide, which only costs the moved-key query).
func keysInTwoPartitions(states map[int32]*partState) bool {
	type tagged struct {
		hash      uint64
		partition int32
	}
	var all []tagged
	for _, st := range states {
		for _, h := range st.keys {
			all = append(all, tagged{h, st.partition})
		}
	}
	slices.SortFunc(all, func(a, b tagged) int { return cmp.Compare(a.hash, b.hash) })
	for i := 1; i < len(all); i++ {
		if all[i].hash == all[i-1].hash && all[i].partition != all[i-1].partition {
			return true
		}
	}
	return false
}

// reserve takes up to n records from the budget and returns how many.
func (f *fetcher) reserve(n int) int {
	for {
		left := f.budget.Load()
		if left <= 0 || n == 0 {
			return 0
		}
		take := min(int64(n), left)
		if f.budget.CompareAndSwap(left, left-take) {
			return int(take)
		}
	}
}
