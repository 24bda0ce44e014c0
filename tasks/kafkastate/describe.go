package kafkastate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/changesink/changesink/internal/outcome"
)

// describe is step 1: the topic's metadata, fresh, and on the run's first
// batch its retention (a topic that is not compacted is logged).
func (b *batch) describe(ctx context.Context) error {
	r := b.r
	meta, err := describeTopic(ctx, r.cl, r.topic)
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return unknownTopic(ctx, r.cc, r.topic, meta.clusterID)
	}
	if err != nil {
		return err
	}
	b.meta = meta
	if b.parts = r.shard.of(meta.partitions); len(b.parts) == 0 {
		return outcome.Config.Mark(fmt.Errorf("%s %s: topic %q (%d partitions): %w", EnvShard, r.shard, r.topic, len(meta.partitions), ErrEmptyShard))
	}
	if !r.retOK {
		if r.ret, err = describeRetention(ctx, r.cl, r.topic); err != nil {
			return err
		}
		r.retOK = true
		if !r.ret.compact {
			r.log.Warn(fmt.Sprintf("kafka-state: topic %s is not compacted (cleanup.policy=%s): retention deletes records without tombstones, "+
				"so kafka_state.records keeps every key ever read; the seed flow expects a compacted topic", r.topic, r.ret.policy))
		}
	}
	b.ph.mark("metadata")
	return nil
}

// recheck is step 6: the topic must still be the one the batch started
// with.
func (b *batch) recheck(ctx context.Context) error {
	if h := b.r.env.hooks.beforeRecheck; h != nil {
		if err := h(ctx); err != nil {
			return err
		}
	}
	if err := recheckTopic(ctx, b.r.cl, b.r.topic, b.meta); err != nil {
		return err
	}
	b.ph.mark("recheck")
	return nil
}

// unknownTopic tells a TOPIC that names no topic a batch ever read (a typo,
// or a topic not created yet) or that batches read on another cluster than
// the broker's (KAFKA_PROPERTIES names the wrong one): configuration, from a
// topic deleted after batches read it (its positions are saved for this
// cluster: refused, as the seed refuses every unknown topic). It reads the
// positions row without the lock, before anything is written (no table, as
// before setup: no positions). When it cannot be read, which of the two it
// is cannot be told: the PostgreSQL failure's class (transient, or
// configuration for a wrong PG_DSN or password), with both facts.
func unknownTopic(ctx context.Context, cc *pgx.ConnConfig, topic, clusterID string) error {
	cannotTell := func(err error) error {
		if ctx.Err() != nil {
			return ctx.Err() // the stop is what ended the lookup
		}
		k := outcome.Classify(err)
		if k != outcome.Config {
			k = outcome.Transient
		}
		return k.Mark(fmt.Errorf("topic %q: %w: the broker has no such topic, and kafka_state.positions could not be read to tell "+
			"a misspelt TOPIC (no batch read it) from a topic deleted after a batch read it: %w; nothing was read or written",
			topic, ErrTopicUnavailable, err))
	}
	conn, err := connect(ctx, cc)
	if err != nil {
		return cannotTell(err)
	}
	defer closeConn(conn)
	var (
		saved    time.Time
		savedFor string
	)
	err = queryRow(ctx, conn, "read kafka_state.positions", sqlSavedTopic, []any{topic}, &saved, &savedFor)
	if state, _ := sqlstateOf(err); errors.Is(err, pgx.ErrNoRows) || state == stateNoSetup {
		return outcome.Config.Mark(fmt.Errorf("topic %q: %w: the broker has no such topic, and kafka_state.positions holds no read positions for it "+
			"(no batch ever read it); nothing was read or written", topic, ErrTopicUnavailable))
	}
	if err != nil {
		return cannotTell(err)
	}
	if clusterID != "" && savedFor != clusterID {
		return outcome.Config.Mark(fmt.Errorf("topic %q: %w: the broker (cluster %q) has no such topic, and kafka_state.positions "+
			"holds read positions for it from cluster %q: KAFKA_PROPERTIES names another cluster than the one this database was read from; "+
			"nothing was read or written", topic, ErrTopicUnavailable, clusterID, savedFor))
	}
	return outcome.Refused.Mark(fmt.Errorf("topic %q: %w: %w; kafka_state.positions holds read positions for it (saved at %s): the topic was deleted after a batch read it; "+
		"nothing was read or written",
		topic, ErrTopicUnavailable, kerr.UnknownTopicOrPartition, saved.UTC().Format(time.RFC3339)))
}

// recheckTopic is the seed's end-of-batch describe_topics: same topic id
// and same partitions, from a fresh uncached metadata request.
func recheckTopic(ctx context.Context, cl *kgo.Client, topic string, before topicMeta) error {
	now, err := describeTopic(ctx, cl, topic)
	if errors.Is(err, ErrTopicUnavailable) || errors.Is(err, ErrNoIDs) {
		return outcome.Refused.Mark(fmt.Errorf("topic %q: %w: %v; no state was committed", topic, ErrTopicChanged, err))
	}
	if err != nil {
		return err
	}
	if now.topicID != before.topicID {
		return outcome.Refused.Mark(fmt.Errorf("topic %q: %w: topic id %s became %s (deleted and recreated); no state was committed",
			topic, ErrTopicChanged, before.topicIDText(), now.topicIDText()))
	}
	if !slices.Equal(now.partitions, before.partitions) {
		return outcome.Refused.Mark(fmt.Errorf("topic %q: %w: partitions went from %d to %d; no state was committed",
			topic, ErrTopicChanged, len(before.partitions), len(now.partitions)))
	}
	return nil
}
