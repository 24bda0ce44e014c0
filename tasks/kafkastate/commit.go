package kafkastate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
)

// commit is step 7: the positions the batch reached; for the run's last
// batch the live keys and the report's content (before COMMIT, so a full
// disk fails the run with nothing of it committed); then COMMIT.
func (b *batch) commit(ctx context.Context) error {
	r, topic := b.r, b.r.topic
	next := make(Offsets, len(b.states))
	for p, st := range b.states {
		next[p] = max(st.next, b.starts[p])
	}
	nextJSON, err := next.MarshalJSON()
	if err != nil {
		return err
	}
	if err := b.writePositions(ctx, next, string(nextJSON)); err != nil {
		return err
	}
	b.next, b.last = next, r.isLast(b)
	b.live = -1
	if b.last {
		// The seed's live_keys, counted in the run's last transaction (it
		// reads every row of the topic: once per run, not per batch).
		if err := queryRow(ctx, b.tx, "count live keys", sqlLiveKeys, []any{topic}, &b.live); err != nil {
			return err
		}
	}
	doubt := inDoubt{topic: topic, clusterID: b.meta.clusterID, topicID: b.meta.topicIDText(), next: string(nextJSON), wait: r.env.hooks.inDoubtWaitOverride}
	if err := queryRow(ctx, b.tx, "read the transaction id", sqlTxID, nil, &doubt.xid, &doubt.pid, &doubt.start); err != nil {
		return err
	}
	if b.last {
		if err := r.result(b).stageReport(r.report); err != nil {
			return outcome.Transient.Mark(fmt.Errorf("topic %q: %w in %s, nothing was committed: %w", topic, ErrReportNotWritten, kestra.EnvWorkingDir, err))
		}
	}
	if h := r.env.hooks.beforeCommit; h != nil {
		h()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := b.send(ctx, doubt); err != nil {
		return err
	}
	b.ph.mark("positions+commit")
	b.adviseCatchUp()
	return nil
}

// writePositions writes the next offsets the batch reached. The whole
// topic's batch upserts the row as the seed does (updated_at moves when
// every partition was read to its end). A shard's merges its partitions'
// entries into the row (a first row gets the other partitions at their log
// start), leaves updated_at, and records caught_up_at of its partitions
// when it read all of them to their end.
func (b *batch) writePositions(ctx context.Context, next Offsets, nextJSON string) error {
	topic, meta := b.r.topic, b.meta
	if b.r.shard.Whole() {
		return execSQL(ctx, b.tx, "write kafka_state.positions", sqlWritePositions,
			topic, meta.clusterID, meta.topicIDText(), nextJSON, b.caughtUp)
	}
	all := make(Offsets, len(meta.partitions))
	for _, p := range meta.partitions {
		all[p] = b.marks[p].logStart
	}
	maps.Copy(all, next)
	allJSON, err := all.MarshalJSON()
	if err != nil {
		return err
	}
	if err := execSQL(ctx, b.tx, "write kafka_state.positions", sqlWriteShardPositions,
		topic, meta.clusterID, meta.topicIDText(), string(allJSON), nextJSON); err != nil {
		return err
	}
	if !b.caughtUp {
		return nil
	}
	return execSQL(ctx, b.tx, "write kafka_state.shards.caught_up_at", sqlShardCaughtUp, topic, b.parts)
}

// send sends COMMIT. Once it is sent its outcome is PostgreSQL's: a stop (a
// signal) must not turn a commit into a reported failure, so it waits for
// the answer (pgx would otherwise drop the connection and report the
// cancellation while the server commits), and sends no cancel request if
// the answer is lost (cancelGate); a lost answer is looked up (doubt).
func (b *batch) send(ctx context.Context, doubt inDoubt) error {
	r := b.r
	commitTimeout := pgTimeout
	if r.env.hooks.commitTimeout > 0 {
		commitTimeout = r.env.hooks.commitTimeout
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	b.commitSent = true
	r.gate.shut.Store(true)
	err := b.tx.Commit(cctx)
	if cctx.Err() != nil {
		doubt.unanswered = commitTimeout
	}
	if ctx.Err() != nil {
		doubt.stoppedBy = outcome.StopCause(ctx)
	}
	cancel()
	var pe *pgconn.PgError
	warned := r.gate.commitWarnings()
	if err != nil && !errors.As(err, &pe) {
		// No answer from the server: COMMIT may have been applied. Ask.
		if err = doubt.resolve(ctx, r.cc, err, warned, r.log); err != nil {
			return err
		}
		warned = nil // resolve's WARN line names them
	}
	if err != nil {
		return pgErr(ctx, err, "commit")
	}
	if len(warned) > 0 {
		r.log.Warn(fmt.Sprintf("kafka-state: topic %s: the batch is committed, and PostgreSQL warned as it committed: %s; %s",
			r.topic, strings.Join(warned, "; "), syncRepEnded))
	}
	r.gate.reopen()
	return nil
}

// adviseCatchUp says, after a batch that MAX_RECORDS or POLL_SECONDS cut
// before some partition's end, how long the topic may stay behind.
func (b *batch) adviseCatchUp() {
	if b.caughtUp || !b.r.ret.compact {
		return
	}
	since, anchor := "this first batch's start", "kafka_state.positions.updated_at"
	if b.saved != nil {
		since = b.rule.updatedAt.UTC().Format(time.RFC3339)
	}
	if !b.r.shard.Whole() {
		anchor = "kafka_state.shards.caught_up_at of shard " + b.r.shard.String()
	}
	b.r.log.Info(fmt.Sprintf("kafka-state: topic %s: MAX_RECORDS or POLL_SECONDS ended the batch before every partition's end, so "+
		"%s stays at %s: read the topic to its end within delete.retention.ms=%d of it, or batches will be refused (tombstones)",
		b.r.topic, anchor, since, b.r.ret.deleteRetentionMs))
}
