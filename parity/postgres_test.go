package parity

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/changesink/changesink/internal/testenv"
)

// pgDatabase is a database one scenario owns.
type pgDatabase struct {
	name string
	// dsn is for the test's own connections (credentials included).
	dsn string
	// env is what the seed flow passes the materializer: PG_DSN without
	// credentials, PGUSER and PGPASSWORD separately (its secrets).
	env map[string]string
}

// createDatabase creates database name from the server at admin
// (CHANGESINK_TEST_PG) and drops it in t.Cleanup.
func createDatabase(t *testing.T, admin, name string) *pgDatabase {
	t.Helper()
	dsn := testenv.CreateDatabase(t, admin, name, "")
	full, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	bare := *full
	bare.User = nil
	password, _ := full.User.Password()
	return &pgDatabase{
		name: name,
		dsn:  dsn,
		env:  map[string]string{"PG_DSN": bare.String(), "PGUSER": full.User.Username(), "PGPASSWORD": password},
	}
}

func (db *pgDatabase) connect(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db.dsn)
	if err != nil {
		t.Fatalf("connect to %s: %v", db.name, err)
	}
	return conn
}

// exec runs sql (several statements allowed: no arguments means the simple
// protocol) in db.
func (db *pgDatabase) exec(t *testing.T, sql string) {
	t.Helper()
	conn := db.connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v\n%s", db.name, err, sql)
	}
}

// queryLines runs sql and renders each row as one JSON array line.
func (db *pgDatabase) queryLines(t *testing.T, sql string, args ...any) []string {
	t.Helper()
	conn := db.connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		t.Fatalf("%s: %v\n%s", db.name, err, sql)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatalf("%s: %v", db.name, err)
		}
		b, err := json.Marshal(vals)
		if err != nil {
			t.Fatalf("%s: %v", db.name, err)
		}
		out = append(out, string(b))
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v\n%s", db.name, err, sql)
	}
	return out
}

// kafkaState is what a materializer leaves in PostgreSQL.
type kafkaState struct {
	// Records rows: topic, record_key, payload as jsonb text, deleted,
	// kafka_partition, kafka_offset; ordered by key bytes.
	Records []string
	// Positions maps partition → next offset, plus the ids.
	ClusterID, TopicID string
	NextOffsets        map[string]int64
	HasPositions       bool
	// Raw is every column of both tables (updated_at too), to prove a
	// refused batch changed nothing.
	Raw string
}

func snapshotKafkaState(t *testing.T, db *pgDatabase, topic string) kafkaState {
	t.Helper()
	var st kafkaState
	st.Records = db.queryLines(t, `SELECT record_key, payload::text, deleted, kafka_partition, kafka_offset
		FROM kafka_state.records WHERE topic = $1 ORDER BY record_key COLLATE "C"`, topic)
	pos := db.queryLines(t, `SELECT cluster_id, topic_id, next_offsets::text FROM kafka_state.positions WHERE topic = $1`, topic)
	if len(pos) == 1 {
		var row []string
		if err := json.Unmarshal([]byte(pos[0]), &row); err != nil {
			t.Fatal(err)
		}
		st.HasPositions = true
		st.ClusterID, st.TopicID = row[0], row[1]
		if err := json.Unmarshal([]byte(row[2]), &st.NextOffsets); err != nil {
			t.Fatalf("%s: next_offsets %s: %v", db.name, row[2], err)
		}
	}
	raw := db.queryLines(t, `SELECT to_jsonb(r)::text FROM kafka_state.records r ORDER BY topic, record_key COLLATE "C"`)
	raw = append(raw, db.queryLines(t, `SELECT to_jsonb(p)::text FROM kafka_state.positions p ORDER BY topic`)...)
	st.Raw = strings.Join(raw, "\n")
	return st
}

// holdTopicLock takes the seed's per-topic advisory transaction lock in db
// from a side connection and keeps it until the returned func is called.
func holdTopicLock(t *testing.T, db *pgDatabase, topic string) func() {
	t.Helper()
	conn := db.connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	tx, err := conn.Begin(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", "kestra-kafka-state:"+topic); err != nil {
		cancel()
		t.Fatalf("hold lock: %v", err)
	}
	return func() {
		_ = tx.Rollback(ctx)
		_ = conn.Close(ctx)
		cancel()
	}
}

// seedPositionsValid runs the seed flow's check_saved_positions query.
func seedPositionsValid(t *testing.T, db *pgDatabase, sql, topic string) bool {
	t.Helper()
	conn := db.connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer conn.Close(ctx)
	var valid bool
	if err := conn.QueryRow(ctx, strings.ReplaceAll(sql, ":topic", "$1"), topic).Scan(&valid); err != nil {
		t.Fatalf("check_saved_positions: %v", err)
	}
	return valid
}

func (st kafkaState) String() string {
	return fmt.Sprintf("positions %v cluster %q topic id %q next %v\nrecords:\n  %s", st.HasPositions, st.ClusterID, st.TopicID,
		st.NextOffsets, strings.Join(st.Records, "\n  "))
}
