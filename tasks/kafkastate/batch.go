package kafkastate

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// batch is one transaction of a run: what its steps find and decide, in
// the order they run.
type batch struct {
	r  *run
	ph phases

	// describe: the topic's metadata at the start, and the partitions the
	// batch reads (a shard's, or all).
	meta  topicMeta
	parts []int32
	// begin: the transaction.
	tx pgx.Tx
	// readPositions: the saved next offsets (nil on a first run) and the
	// tombstone rule's anchor.
	saved Offsets
	rule  tombstoneRule
	// anchors: per partition, the tombstone rule's anchor; clock:
	// PostgreSQL's clock when it was read.
	anchors map[int32]anchor
	clock   time.Time
	// plan: each partition's state, its start offset, and which had unread
	// records at the start.
	states map[int32]*partState
	starts Offsets
	lagged map[int32]bool
	marks  map[int32]watermarks
	// fetchAndCopy: what was read; caughtUp when every partition was read to
	// its end.
	consumed, tombstones int64
	caughtUp             bool
	// rejected: the records ON_BAD_RECORD=reject kept aside (keepRejected
	// writes them), in no particular order.
	rejected []rejectedRow
	// advanced: some partition's next offset moved.
	advanced bool
	// commit: the next offsets written, whether this is the run's last
	// batch (then the live keys are counted: else -1), whether COMMIT was
	// sent.
	next       Offsets
	last       bool
	live       int64
	commitSent bool
}

// lagLeft is the high watermark less the next offset, summed over the
// partitions, as the batch's reads last saw them.
func (b *batch) lagLeft() int64 {
	var n int64
	for _, st := range b.states {
		n += max(st.hwm-st.next, 0)
	}
	return n
}

// batch runs one batch, steps 1-7 of Materialize, in one PostgreSQL
// transaction. An error before COMMIT was sent committed nothing, and says
// so (stoppedBeforeCommit, retryBeforeCommit).
func (r *run) batch(ctx context.Context) (_ *batch, err error) {
	b := &batch{r: r, ph: phases{last: time.Now()}}
	defer func() { r.log.Debug("kafka-state: phases " + b.ph.String()) }()
	defer func() {
		if !b.commitSent {
			err = retryBeforeCommit(r.topic, stoppedBeforeCommit(ctx, r.topic, err))
		}
	}()
	if err := b.describe(ctx); err != nil {
		return nil, err
	}
	if err := b.requireRejected(ctx); err != nil {
		return nil, err
	}
	if err := b.claim(ctx); err != nil {
		return nil, err
	}
	if err := b.begin(ctx); err != nil {
		return nil, err
	}
	defer b.rollback(ctx)
	if err := b.readPositions(ctx); err != nil {
		return nil, err
	}
	if err := b.plan(ctx); err != nil {
		return nil, err
	}
	if err := b.fetchAndCopy(ctx); err != nil {
		return nil, err
	}
	if err := b.keepRejected(ctx); err != nil {
		return nil, err
	}
	if err := b.merge(ctx); err != nil {
		return nil, err
	}
	if err := b.recheck(ctx); err != nil {
		return nil, err
	}
	if err := b.commit(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// rollback ends the batch's transaction unless it committed.
func (b *batch) rollback(ctx context.Context) { rollback(ctx, b.tx) }

// rollback ends tx unless it committed (a no-op then), also after a stop.
func rollback(ctx context.Context, tx pgx.Tx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = tx.Rollback(rctx)
}
