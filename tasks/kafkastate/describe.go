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
		e := topicErr(topic, ErrTopicUnavailable, "the broker has no such topic; kafka_state.positions could not be read "+
			"to tell a misspelt TOPIC from a deleted one; nothing was read or written")
		e.Cause = err
		return k.Mark(e)
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
		return outcome.Config.Mark(topicErr(topic, ErrTopicUnavailable,
			"the broker has no such topic, and no batch ever read it: kafka_state.positions holds no read positions for it; "+
				"nothing was read or written"))
	}
	if err != nil {
		return cannotTell(err)
	}
	if clusterID != "" && savedFor != clusterID {
		return outcome.Config.Mark(topicErr(topic, ErrTopicUnavailable, fmt.Sprintf("the broker (cluster %q) has no such topic; "+
			"kafka_state.positions holds read positions for it from cluster %q: KAFKA_PROPERTIES names another cluster; "+
			"nothing was read or written", clusterID, savedFor)))
	}
	e := topicErr(topic, ErrTopicUnavailable, fmt.Sprintf("kafka_state.positions holds read positions for it (saved at %s): "+
		"the topic was deleted after a batch read it; nothing was read or written", saved.UTC().Format(time.RFC3339)))
	e.Cause = kerr.UnknownTopicOrPartition
	return outcome.Refused.Mark(e)
}

// recheckTopic is the seed's end-of-batch describe_topics: same topic id
// and same partitions, from a fresh uncached metadata request.
func recheckTopic(ctx context.Context, cl *kgo.Client, topic string, before topicMeta) error {
	now, err := describeTopic(ctx, cl, topic)
	if errors.Is(err, ErrTopicUnavailable) || errors.Is(err, ErrNoIDs) {
		// Not wrapped: the topic changed, whatever the describe says.
		return outcome.Refused.Mark(topicErr(topic, ErrTopicChanged, err.Error()))
	}
	if err != nil {
		return err
	}
	if now.topicID != before.topicID {
		return outcome.Refused.Mark(topicErr(topic, ErrTopicChanged,
			fmt.Sprintf("topic id %s became %s: deleted and recreated", before.topicIDText(), now.topicIDText())))
	}
	if !slices.Equal(now.partitions, before.partitions) {
		return outcome.Refused.Mark(topicErr(topic, ErrTopicChanged,
			fmt.Sprintf("partitions went from %d to %d", len(before.partitions), len(now.partitions))))
	}
	return nil
}
