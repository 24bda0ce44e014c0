package kafkastate

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
)

// seedDDL returns the SQL of the seed flow's create_state_tables task.
func seedDDL(t *testing.T) string {
	t.Helper()
	dir := testenv.Seeds(t)
	return testenv.SeedTask(t, dir, "kafka-compacted-postgres-state.yaml", "create_state_tables", "sql")
}

// TestDDLIsTheSeeds: Setup's statements are the seed's create_state_tables
// SQL, statement for statement (whitespace aside).
func TestDDLIsTheSeeds(t *testing.T) {
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	var want []string
	for _, stmt := range strings.Split(seedDDL(t), ";") {
		if strings.TrimSpace(stmt) != "" {
			want = append(want, norm(stmt))
		}
	}
	if len(want) != len(ddl) {
		t.Fatalf("seed has %d statements, Setup %d", len(want), len(ddl))
	}
	for i := range ddl {
		if norm(ddl[i]) != want[i] {
			t.Errorf("statement %d:\n got %s\nwant %s", i, norm(ddl[i]), want[i])
		}
	}
}

// TestSetupOnSeedDatabase: a database the seed flow set up and wrote keeps
// working: Setup changes nothing in it and materialize continues from the
// seed's rows; Setup run twice is a no-op.
func TestSetupOnSeedDatabase(t *testing.T) {
	e := newBareEnv(t)
	e.exec(t, seedDDL(t)) // the seed's Queries task, as one multi-statement string
	createTopic(t, e.adm, e.topic, 1, nil)
	produce(t, e.kcl, e.topic, kv(0, "a", `1`), kv(0, "b", `2`))
	cluster, topicID := e.ids(t)
	e.exec(t, `INSERT INTO kafka_state.positions (topic, cluster_id, topic_id, next_offsets) VALUES ($1, $2, $3, '{"0": 1}')`, e.topic, cluster, topicID)
	e.exec(t, `INSERT INTO kafka_state.records VALUES ($1, 'a', '1', false, 0, 0)`, e.topic)
	before := e.snapshot(t)
	ctx := testCtx(t, time.Minute)
	for i := 0; i < 2; i++ {
		if _, err := Setup(ctx, e.pg); err != nil {
			t.Fatalf("Setup %d: %v", i, err)
		}
	}
	if after := e.snapshot(t); after != before {
		t.Fatalf("Setup changed the seed's rows")
	}
	res := e.mustRun(t)
	if res.Consumed != 1 || res.LiveKeys != 2 {
		t.Errorf("materialize after the seed: %+v, want consumed 1, live_keys 2", res)
	}
}

// TestSetupCommitUnanswered: the connection is lost once setup's COMMIT
// reached the server (which commits it). Setup fails transient, saying the
// schema may have been created (it said only "unexpected EOF", as if nothing
// was), and a re-run succeeds.
func TestSetupCommitUnanswered(t *testing.T) {
	e := newBareEnv(t)
	commitQuery := []byte("Q\x00\x00\x00\x0bcommit\x00")
	dsn := e.pgThroughProxy(t, testenv.ProxyOptions{Conn: func(_ *testenv.Proxy, client, server net.Conn) {
		defer client.Close()
		defer server.Close()
		go func() { _, _ = io.Copy(client, server); client.Close() }()
		buf := make([]byte, 64<<10)
		for {
			n, err := client.Read(buf)
			if _, werr := server.Write(buf[:n]); werr != nil || err != nil {
				return
			}
			if bytes.Contains(buf[:n], commitQuery) {
				return // the answer never reaches setup
			}
		}
	}})
	_, err := Setup(testCtx(t, time.Minute), Postgres{DSN: dsn})
	testenv.CheckHinted(t, err, Hint, outcome.Transient, ErrSetupInDoubt, "commit schema kafka_state", "may have been created or not", "re-run")
	if _, err := Setup(testCtx(t, time.Minute), e.pg); err != nil {
		t.Fatalf("re-run: %v", err)
	}
}

// TestSetupConcurrent: changesink setups racing each other and the seed's
// own DDL (which takes no lock) on a fresh database all succeed.
func TestSetupConcurrent(t *testing.T) {
	vars := testenv.Lookup(t, "CHANGESINK_TEST_PG")
	seed := seedDDL(t)
	for round := 0; round < 3; round++ {
		dsn := testenv.CreateDatabase(t, vars["CHANGESINK_TEST_PG"], testenv.UniqueName(t, "ks_"), "")
		ctx := testCtx(t, time.Minute)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		start := make(chan struct{})
		for i := 0; i < 6; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := Setup(ctx, Postgres{DSN: dsn})
				errs <- err
			}()
		}
		for i := 0; i < 2; i++ {
			wg.Add(1)
			go func() { // the seed's task; its own failures are the seed's race, not ours
				defer wg.Done()
				conn, err := pgx.Connect(ctx, dsn)
				if err != nil {
					return
				}
				defer conn.Close(ctx)
				<-start
				_, _ = conn.Exec(ctx, seed)
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("round %d: concurrent Setup failed: %v", round, err)
			}
		}
	}
}

// TestVerify: the seed's check_saved_positions and Fail task: a consistent
// topic passes; a record at or past its partition's saved next offset, a
// record whose partition has no saved offset, and records without a
// positions row are refused, naming topic, key, partition and offset.
func TestVerify(t *testing.T) {
	e := newTopicEnv(t, 2)
	produce(t, e.kcl, e.topic, kv(0, "a", `1`), kv(0, "b", `1`), kv(1, "c", `1`))
	e.mustRun(t)
	ctx := testCtx(t, time.Minute)
	res, err := Verify(ctx, e.pg, e.topic)
	if err != nil {
		t.Fatalf("Verify on a consistent topic: %v", err)
	}
	if out := res.Outputs(); out["valid"] != true || out["topic"] != e.topic || !res.HasPositions {
		t.Errorf("outputs = %v, HasPositions = %v", out, res.HasPositions)
	}
	// A topic never materialized passes, as the seed's check does, but says
	// it has no positions so that the command can warn (a misspelt TOPIC).
	res, err = Verify(ctx, e.pg, "no-rows-topic")
	if err != nil {
		t.Errorf("Verify on a topic without rows: %v", err)
	} else if res.HasPositions {
		t.Errorf("Verify on a topic without rows: HasPositions = true")
	}

	e.exec(t, `UPDATE kafka_state.records SET kafka_offset = 2 WHERE topic = $1 AND record_key = 'b'`, e.topic)
	_, err = Verify(ctx, e.pg, e.topic)
	assertRefused(t, err, ErrAheadOfPositions, e.topic, `key "b"`, "partition 0 offset 2", "saved next offset 2", "(1 such records)")
	var ahead *AheadError
	if !errors.As(err, &ahead) || ahead.Key != "b" || ahead.Partition != 0 || ahead.Offset != 2 || ahead.Next != 2 {
		t.Errorf("AheadError = %+v", ahead)
	}
	e.exec(t, `UPDATE kafka_state.records SET kafka_offset = 1 WHERE topic = $1 AND record_key = 'b'`, e.topic)

	e.exec(t, `UPDATE kafka_state.positions SET next_offsets = next_offsets - '1' WHERE topic = $1`, e.topic)
	_, err = Verify(ctx, e.pg, e.topic)
	assertRefused(t, err, ErrAheadOfPositions, `key "c"`, "partition 1 offset 0", "no saved position")

	e.exec(t, `DELETE FROM kafka_state.positions WHERE topic = $1`, e.topic)
	_, err = Verify(ctx, e.pg, e.topic)
	assertRefused(t, err, ErrAheadOfPositions, "partition 0 offset 0", "no saved position", "(3 such records)")
}

// TestVerifyMalformedPositions: verify over a positions row whose
// next offset is not an integer failed with PostgreSQL's cast error as an
// internal error (exit 4) naming no topic; materialize refuses the same row
// with ErrBadPositions. verify must refuse it the same way.
func TestVerifyMalformedPositions(t *testing.T) {
	e := newTopicEnv(t, 1)
	produce(t, e.kcl, e.topic, kv(0, "a", `{"v":1}`))
	e.mustRun(t)
	// A null offset, a next_offsets that is not an object (the cast in the
	// seed's query sees NULL, or no entry) and a key that is not a
	// partition number passed verify (valid=true, or "no saved position")
	// where materialize refuses the same row as malformed.
	for _, bad := range []string{`{"0": "abc"}`, `{"0": 1e30}`, `{"0": 1.5}`, `{"0": null}`, `["0"]`, `null`, `"0"`, `{"0": 1, "x": 5}`, `{"0": 1, "-1": 5}`} {
		e.exec(t, `UPDATE kafka_state.positions SET next_offsets = $1::jsonb WHERE topic = $2`, bad, e.topic)
		_, err := Verify(testCtx(t, time.Minute), e.pg, e.topic)
		assertRefused(t, err, ErrBadPositions, e.topic, "kafka_state.positions")
	}
}
