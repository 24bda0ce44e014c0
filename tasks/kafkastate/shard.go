package kafkastate

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/changesink/changesink/internal/outcome"
)

// claim is a shard's claim of its partitions in kafka_state.shards, once
// per run, in a transaction of its own before the first batch: another
// shard claiming one of them is refused (ErrShardOverlap), so two shard
// layouts never share a topic unnoticed. Claims are serialised by an
// advisory lock of their own; they stay after the run (a later run of
// another layout is refused too), until released by hand.
func (b *batch) claim(ctx context.Context) error {
	r := b.r
	if r.shard.Whole() || r.claimed {
		return nil
	}
	conn, err := r.connection(ctx)
	if err != nil {
		return err
	}
	tx, err := begin(ctx, conn)
	if err != nil {
		return err
	}
	defer rollback(ctx, tx)
	if err := execSQL(ctx, tx, "set statement_timeout", sqlStatementTimeout); err != nil {
		return err
	}
	if err := execSQL(ctx, tx, "lock the shard claims", sqlClaimLock, r.topic); err != nil {
		return err
	}
	var (
		p     int32
		other string
	)
	err = queryRow(ctx, tx, "read kafka_state.shards", sqlOtherClaim, []any{r.topic, b.parts, r.shard.String()}, &p, &other)
	if err == nil {
		return outcome.Refused.Mark(&OverlapError{Topic: r.topic, Partition: p, Shard: r.shard.String(), Other: other})
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if err := execSQL(ctx, tx, "claim the shard's partitions in kafka_state.shards", sqlClaim, r.topic, b.parts, r.shard.String()); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, pgTimeout)
	defer cancel()
	if err := tx.Commit(cctx); err != nil {
		return pgErr(ctx, err, "commit the shard's claim")
	}
	r.claimed = true
	b.ph.mark("claim")
	return nil
}

// shardsTable reports whether kafka_state.shards exists (asked once per run).
func (r *run) shardsTable(ctx context.Context, db execer) (bool, error) {
	if !r.shardsKnown {
		if err := queryRow(ctx, db, "look for kafka_state.shards", sqlHasShards, nil, &r.shards); err != nil {
			return false, err
		}
		r.shardsKnown = true
	}
	return r.shards, nil
}

// OverlapError says that a partition of this run's shard is claimed by
// another shard. It unwraps to ErrShardOverlap.
type OverlapError struct {
	Topic     string
	Partition int32
	// Shard is this run's, Other the one that claims the partition.
	Shard, Other string
}

func (e *OverlapError) Error() string {
	return fmt.Sprintf("topic %q partition %d: %s: shard %s claims it, this run is shard %s; nothing was changed",
		e.Topic, e.Partition, ErrShardOverlap, e.Other, e.Shard)
}

func (e *OverlapError) Unwrap() error { return ErrShardOverlap }
