package main

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/kafkastate"
)

// TestKafkaForgetsPositionsOfAnotherBroker: with --state-dsn, the demo
// deletes the topic's saved positions and records when they name another
// cluster (a rebuilt local broker, its database kept), or were last caught
// up longer ago than the topic's delete.retention.ms allows, so the next
// batch is not refused; recent positions from this broker, and other
// topics, are kept.
func TestKafkaForgetsPositionsOfAnotherBroker(t *testing.T) {
	brokers := testenv.Lookup(t, "CHANGESINK_TEST_KAFKA")["CHANGESINK_TEST_KAFKA"]
	dsn, _ := testDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := kafkastate.Setup(ctx, kafkastate.Postgres{DSN: dsn}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	topic := "demo_forget_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	seed := func(topic, cluster string) {
		t.Helper()
		if _, err := conn.Exec(ctx, `INSERT INTO kafka_state.positions (topic, cluster_id, topic_id, next_offsets) VALUES ($1, $2, 'AAAAAAAAAAAAAAAAAAAAAA', '{"0": 1}')`, topic, cluster); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO kafka_state.records VALUES ($1, 'k', '{}', false, 0, 0)`, topic); err != nil {
			t.Fatal(err)
		}
	}
	seed(topic, "another-cluster")
	seed("other_topic", "another-cluster")
	cmd := kafkaCmd{Bootstrap: brokers, Topic: topic, Partitions: 1, Customers: 3, StateDSN: dsn}
	if err := cmd.Run(ctx); err != nil {
		t.Fatalf("demo kafka: %v", err)
	}
	count := func(table, topic string) int {
		t.Helper()
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM kafka_state."+table+" WHERE topic = $1", topic).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if p, r := count("positions", topic), count("records", topic); p != 0 || r != 0 {
		t.Errorf("topic %s after the demo: %d positions rows, %d records, want none", topic, p, r)
	}
	if p, r := count("positions", "other_topic"), count("records", "other_topic"); p != 1 || r != 1 {
		t.Errorf("another topic after the demo: %d positions rows, %d records, want 1 and 1 kept", p, r)
	}

	// Positions this broker wrote are kept: materialize, then run the demo again.
	cfg := kafkastate.Config{Topic: topic, MaxRecords: 1000, PollSeconds: 10,
		KafkaProperties: `{"bootstrap.servers":"` + brokers + `"}`, Postgres: kafkastate.Postgres{DSN: dsn}}
	if _, err := kafkastate.Materialize(ctx, cfg, kafkastate.Env{Dir: kestra.Dir{Path: t.TempDir()}}); err != nil {
		t.Fatalf("materialize: %v", err)
	}
	if err := cmd.Run(ctx); err != nil {
		t.Fatalf("demo kafka again: %v", err)
	}
	if p, r := count("positions", topic), count("records", topic); p != 1 || r == 0 {
		t.Errorf("after a materialize from this broker and another demo round: %d positions rows, %d records, want them kept", p, r)
	}

	// Positions last caught up two days ago (the demo last ran then; the
	// topic keeps tombstones the broker's default day): the round the demo
	// writes would be refused as "tombstones may have been removed", so they
	// go too, and the next batch rebuilds.
	if _, err := kafkastate.Materialize(ctx, cfg, kafkastate.Env{Dir: kestra.Dir{Path: t.TempDir()}}); err != nil {
		t.Fatalf("materialize: %v", err)
	}
	if _, err := conn.Exec(ctx, `UPDATE kafka_state.positions SET updated_at = now() - interval '2 days' WHERE topic = $1`, topic); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Run(ctx); err != nil {
		t.Fatalf("demo kafka after two days: %v", err)
	}
	if p, r := count("positions", topic), count("records", topic); p != 0 || r != 0 {
		t.Errorf("topic %s after the demo, two days on: %d positions rows, %d records, want none", topic, p, r)
	}
	if _, err := kafkastate.Materialize(ctx, cfg, kafkastate.Env{Dir: kestra.Dir{Path: t.TempDir()}}); err != nil {
		t.Fatalf("materialize after the demo forgot stale positions: %v", err)
	}

	// Positions of an earlier topic of this name on this cluster (deleted
	// and created again: another topic id) go too, and the line says why.
	if _, err := conn.Exec(ctx, `UPDATE kafka_state.positions SET topic_id = 'AAAAAAAAAAAAAAAAAAAAAA' WHERE topic = $1`, topic); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.stdout = &out
	if err := cmd.Run(ctx); err != nil {
		t.Fatalf("demo kafka after the topic id changed: %v", err)
	}
	if p, r := count("positions", topic), count("records", topic); p != 0 || r != 0 {
		t.Errorf("topic %s after the demo, another topic id: %d positions rows, %d records, want none", topic, p, r)
	}
	if want := "kafka: the saved positions of " + topic + " were from an earlier topic of that name (deleted and created again: topic id "; !strings.Contains(out.String(), want) {
		t.Errorf("the demo's output does not say %q:\n%s", want, out.String())
	}
}
