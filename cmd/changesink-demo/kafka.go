package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/changesink/changesink/internal/kafkatest"
	"github.com/changesink/changesink/tasks/kafkastate"
)

type kafkaCmd struct {
	Bootstrap  string `env:"DEMO_KAFKA_BOOTSTRAP" default:"127.0.0.1:19092" help:"Kafka bootstrap servers, comma separated (PLAINTEXT)."`
	Topic      string `env:"DEMO_TOPIC" default:"customers" help:"Compacted topic to create (if absent) and write to."`
	Partitions int32  `env:"DEMO_PARTITIONS" default:"3" help:"Partition count when the topic is created."`
	Customers  int    `env:"DEMO_CUSTOMERS" default:"20" help:"Number of distinct keys (customer-1..customer-N)."`
	StateDSN   string `name:"state-dsn" env:"DEMO_STATE_DSN" help:"PostgreSQL that kafka-state materializes the topic into: when its saved positions for the topic name another cluster or topic id (the local broker was rebuilt, its database kept), or were last caught up longer ago than the topic's delete.retention.ms allows (the demo last ran days ago), delete the topic's rows there, as the runbook says, so the demo starts over instead of being refused."`
	// stdout receives the progress lines (os.Stdout when nil; tests).
	stdout io.Writer
}

// printf writes one progress line.
func (c *kafkaCmd) printf(format string, args ...any) {
	out := c.stdout
	if out == nil {
		out = os.Stdout
	}
	fmt.Fprintf(out, format, args...)
}

// Run writes one demo round to the topic:
//   - one JSON value per key (customer-1..N),
//   - a second, newer value for every third key (the later offset must win),
//   - tombstones (null values) for customer-2 and customer-5,
//   - one aborted transaction of three records for keys that exist nowhere else
//     (read_committed consumers must never see them),
//   - one committed transaction of two records (the transaction markers it leaves
//     must not stall a batch).
//
// Every round writes the same keys, so re-running converges to the same live keys.
func (c *kafkaCmd) Run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	seeds := strings.Split(c.Bootstrap, ",")
	admin, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	compact := "compact"
	resp, err := adm.CreateTopic(ctx, c.Partitions, 1, map[string]*string{"cleanup.policy": &compact}, c.Topic)
	switch {
	case err == nil && resp.Err == nil:
		c.printf("kafka: created compacted topic %s with %d partitions\n", c.Topic, c.Partitions)
		// Until its leaders answer, DescribeConfigs (forgetOtherCluster)
		// may not know it.
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := kafkatest.WaitLeaders(wctx, adm, c.Topic, int(c.Partitions))
		cancel()
		if err != nil {
			return err
		}
	case errors.Is(err, kerr.TopicAlreadyExists) || errors.Is(resp.Err, kerr.TopicAlreadyExists):
		c.printf("kafka: topic %s exists\n", c.Topic)
	case err != nil:
		return fmt.Errorf("create topic %s: %w", c.Topic, err)
	default:
		return fmt.Errorf("create topic %s: %w", c.Topic, resp.Err)
	}

	if c.StateDSN != "" {
		if err := c.forgetOtherCluster(ctx, adm); err != nil {
			return err
		}
	}

	round := time.Now().UTC().Format(time.RFC3339)
	var plain []*kgo.Record
	for i := 1; i <= c.Customers; i++ {
		plain = append(plain, customer(c.Topic, i, "bronze", round))
	}
	for i := 3; i <= c.Customers; i += 3 {
		plain = append(plain, customer(c.Topic, i, "gold", round))
	}
	tombstones := 0
	for _, i := range []int{2, 5} {
		if i <= c.Customers {
			plain = append(plain, &kgo.Record{Topic: c.Topic, Key: []byte(fmt.Sprintf("customer-%d", i))})
			tombstones++
		}
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		return fmt.Errorf("kafka producer: %w", err)
	}
	defer producer.Close()
	if err := producer.ProduceSync(ctx, plain...).FirstErr(); err != nil {
		return fmt.Errorf("produce to %s: %w", c.Topic, err)
	}

	// Transactions: one aborted (never visible under read_committed), one committed.
	txn, err := kgo.NewClient(kgo.SeedBrokers(seeds...),
		kgo.TransactionalID("changesink-demo-"+c.Topic),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		return fmt.Errorf("kafka transactional producer: %w", err)
	}
	defer txn.Close()
	aborted := []*kgo.Record{
		{Topic: c.Topic, Key: []byte("aborted-1"), Value: []byte(`{"never":"visible"}`)},
		{Topic: c.Topic, Key: []byte("aborted-2"), Value: []byte(`{"never":"visible"}`)},
		{Topic: c.Topic, Key: []byte("customer-1"), Value: []byte(`{"never":"visible"}`)},
	}
	// Transact waits for each transaction's markers, which the broker writes
	// after EndTransaction returns, so that a batch run right after this sees
	// the whole round.
	if err := kafkatest.Transact(ctx, txn, aborted, false); err != nil {
		return err
	}
	committed := []*kgo.Record{customer(c.Topic, 1, "platinum", round), customer(c.Topic, 4, "platinum", round)}
	if err := kafkatest.Transact(ctx, txn, committed, true); err != nil {
		return err
	}
	c.printf("kafka: wrote %d records to %s (%d keys, %d tombstones), 2 committed in a transaction, %d in an aborted one\n",
		len(plain)+len(committed), c.Topic, c.Customers, tombstones, len(aborted))
	return nil
}

func customer(topic string, i int, tier, round string) *kgo.Record {
	value := fmt.Sprintf(`{"id":%d,"name":"Customer %d","tier":%q,"round":%q}`, i, i, tier, round)
	return &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("customer-%d", i)), Value: []byte(value)}
}

// forgetOtherCluster deletes the topic's rows from kafka_state.positions and
// kafka_state.records in c.StateDSN when the saved positions carry another
// cluster id or topic id than the broker's (the refusal "cluster or topic id
// changed"), or were last caught up longer ago than the topic's
// delete.retention.ms allows (the refusal "tombstones may have been removed
// before they were read" the round written next would meet): the remedy of
// both, applied for the demo only.
func (c *kafkaCmd) forgetOtherCluster(ctx context.Context, adm *kadm.Client) error {
	window, err := tombstoneWindow(ctx, adm, c.Topic)
	if err != nil {
		return err
	}
	md, err := adm.Metadata(ctx, c.Topic)
	if err != nil {
		return fmt.Errorf("kafka metadata of %s: %w", c.Topic, err)
	}
	td, ok := md.Topics[c.Topic]
	if !ok {
		return fmt.Errorf("kafka metadata of %s: the broker did not list the topic", c.Topic)
	}
	if td.Err != nil {
		return fmt.Errorf("kafka metadata of %s: %w", c.Topic, td.Err)
	}
	conn, err := pgx.Connect(ctx, c.StateDSN)
	if err != nil {
		return fmt.Errorf("connect to the kafka-state database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass('kafka_state.positions') IS NOT NULL AND to_regclass('kafka_state.records') IS NOT NULL").Scan(&exists); err != nil {
		return fmt.Errorf("look for the kafka_state schema: %w", err)
	}
	if !exists {
		return nil
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		// The per-topic advisory lock every materialize run takes (the seed's key).
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", kafkastate.TopicLockKey(c.Topic)); err != nil {
			return err
		}
		var otherCluster, otherTopic bool
		var age float64 // seconds since updated_at, by PostgreSQL's clock
		err := tx.QueryRow(ctx, "SELECT cluster_id <> $2, topic_id <> $3, extract(epoch FROM clock_timestamp() - updated_at) FROM kafka_state.positions WHERE topic = $1",
			c.Topic, md.Cluster, kafkastate.TopicIDText(td.ID)).Scan(&otherCluster, &otherTopic, &age)
		other := otherCluster || otherTopic
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		stale := window >= 0 && time.Duration(age*float64(time.Second)) > window
		if !other && !stale {
			return nil
		}
		if _, err := tx.Exec(ctx, "DELETE FROM kafka_state.positions WHERE topic = $1", c.Topic); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, "DELETE FROM kafka_state.records WHERE topic = $1", c.Topic)
		if err != nil {
			return err
		}
		why := fmt.Sprintf("were from another broker (cluster %s now)", md.Cluster)
		if !otherCluster && otherTopic {
			why = fmt.Sprintf("were from an earlier topic of that name (deleted and created again: topic id %s now)", kafkastate.TopicIDText(td.ID))
		}
		if !other {
			why = fmt.Sprintf("were last caught up %s ago, longer than the topic's delete.retention.ms allows (%s)",
				time.Duration(age*float64(time.Second)).Round(time.Second), window.Round(time.Second))
		}
		c.printf("kafka: the saved positions of %s %s; deleted them and the topic's %d rows, so the next batch rebuilds from offset 0\n",
			c.Topic, why, tag.RowsAffected())
		return nil
	})
	if err != nil {
		return fmt.Errorf("forget the saved positions of %s: %w", c.Topic, err)
	}
	return nil
}

// tombstoneWindow returns kafkastate.TombstoneWindow of the topic's
// delete.retention.ms, or -1 when its cleanup.policy has no compact (the
// rule does not apply).
func tombstoneWindow(ctx context.Context, adm *kadm.Client, topic string) (time.Duration, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("kafka describe configs of %s: %w", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return 0, fmt.Errorf("kafka describe configs of %s: %w", topic, err)
	}
	var policy, retention string
	for _, cfg := range rc.Configs {
		switch cfg.Key {
		case "cleanup.policy":
			policy = cfg.MaybeValue()
		case "delete.retention.ms":
			retention = cfg.MaybeValue()
		}
	}
	if !strings.Contains(policy, "compact") {
		return -1, nil
	}
	ms, err := strconv.ParseInt(retention, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("topic %s: delete.retention.ms %q is not an integer", topic, retention)
	}
	return kafkastate.TombstoneWindow(ms), nil
}
