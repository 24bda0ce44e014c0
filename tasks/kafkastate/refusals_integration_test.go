package kafkastate

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/changesink/changesink/internal/kafkatest"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
)

// refusalCase prepares a topic and the database, then expects the next run
// to be refused with want, naming parts, and changing no table.
type refusalCase struct {
	name    string
	prepare func(t *testing.T, e *env) (Config, hooks)
	want    error
	parts   func(e *env) []string
}

// TestStateRefusals: every refusal of the seed about the stored state or the
// topic, each against the real broker and database after a first successful
// batch, leaves both tables exactly as they were.
func TestStateRefusals(t *testing.T) {
	cases := []refusalCase{
		{
			// Deleted after the first batch read it: its positions are saved
			// (a misspelt TOPIC is a configuration error: TestTopicNeverRead).
			name: "topic deleted",
			prepare: func(t *testing.T, e *env) (Config, hooks) {
				deleteTopic(t, e)
				return e.config(), hooks{}
			},
			want: ErrTopicUnavailable,
			parts: func(e *env) []string {
				return []string{fmt.Sprintf("topic %q", e.topic), "UNKNOWN_TOPIC_OR_PARTITION", "holds read positions for it (saved at 20",
					"deleted after a batch read it", "rebuild into an empty destination", "nothing was read or written"}
			},
		},
		{
			name: "cluster id changed",
			prepare: func(t *testing.T, e *env) (Config, hooks) {
				e.exec(t, `UPDATE kafka_state.positions SET cluster_id = 'another-cluster' WHERE topic = $1`, e.topic)
				return e.config(), hooks{}
			},
			want: ErrIDsChanged,
			parts: func(e *env) []string {
				return []string{e.topic, "another-cluster", "Rebuild into an empty destination"}
			},
		},
		{
			name: "topic id changed",
			prepare: func(t *testing.T, e *env) (Config, hooks) {
				e.exec(t, `UPDATE kafka_state.positions SET topic_id = 'AQEBAQEBAQEBAQEBAQEBAQ' WHERE topic = $1`, e.topic)
				return e.config(), hooks{}
			},
			want:  ErrIDsChanged,
			parts: func(e *env) []string { return []string{e.topic, "AQEBAQEBAQEBAQEBAQEBAQ"} },
		},
		{
			name: "saved partition set differs",
			prepare: func(t *testing.T, e *env) (Config, hooks) {
				e.exec(t, `UPDATE kafka_state.positions SET next_offsets = '{"0": 1}' WHERE topic = $1`, e.topic)
				return e.config(), hooks{}
			},
			want:  ErrPartitionsChanged,
			parts: func(e *env) []string { return []string{e.topic, "saved partitions [0], topic has [0 1]"} },
		},
		{
			name: "topic repartitioned between runs",
			prepare: func(t *testing.T, e *env) (Config, hooks) {
				repartition(t, e, 3)
				return e.config(), hooks{}
			},
			want:  ErrPartitionsChanged,
			parts: func(e *env) []string { return []string{e.topic, "topic has [0 1 2]"} },
		},
		{
			name: "values without positions",
			prepare: func(t *testing.T, e *env) (Config, hooks) {
				e.exec(t, `DELETE FROM kafka_state.positions WHERE topic = $1`, e.topic)
				return e.config(), hooks{}
			},
			want:  ErrValuesWithoutPositions,
			parts: func(e *env) []string { return []string{e.topic, "together from one backup"} },
		},
		{
			name: "saved offset below the log start offset",
			prepare: func(t *testing.T, e *env) (Config, hooks) {
				produce(t, e.kcl, e.topic, kv(0, "x", `1`), kv(0, "y", `2`), kv(0, "z", `3`))
				setTopicConfig(t, e, "cleanup.policy", "compact,delete") // DeleteRecords needs "delete"
				deleteRecordsBefore(t, e, 0, 3)                          // log start of partition 0 moves to 3; saved is 1
				return e.config(), hooks{}
			},
			want:  ErrOffsetOutOfRange,
			parts: func(e *env) []string { return []string{e.topic, "partition 0", "saved offset 1", "[3, 4]"} },
		},
		{
			name: "saved offset above the end",
			prepare: func(t *testing.T, e *env) (Config, hooks) {
				e.exec(t, `UPDATE kafka_state.positions SET next_offsets = '{"0": 1, "1": 99}' WHERE topic = $1`, e.topic)
				return e.config(), hooks{}
			},
			want: ErrOffsetPastEnd,
			parts: func(e *env) []string {
				return []string{e.topic, "partition 1", "saved offset 99", "[0, 1]", "past the log end"}
			},
		},
		{
			name: "positions not integers",
			prepare: func(t *testing.T, e *env) (Config, hooks) {
				e.exec(t, `UPDATE kafka_state.positions SET next_offsets = '{"0": "x", "1": 1}' WHERE topic = $1`, e.topic)
				return e.config(), hooks{}
			},
			want:  ErrBadPositions,
			parts: func(e *env) []string { return []string{e.topic, `next_offsets["0"]`} },
		},
		{
			// The same ErrBadPositions (and remedy) as verify gives
			// (TestVerifyMalformedPositions), not ErrPartitionsChanged.
			name: "positions keyed by something else than a partition",
			prepare: func(t *testing.T, e *env) (Config, hooks) {
				e.exec(t, `UPDATE kafka_state.positions SET next_offsets = '{"0": 1, "1": 1, "x": 5}' WHERE topic = $1`, e.topic)
				return e.config(), hooks{}
			},
			want:  ErrBadPositions,
			parts: func(e *env) []string { return []string{e.topic, `next_offsets key "x" is not a partition number`} },
		},
		{
			name: "key moved partitions within the batch",
			prepare: func(t *testing.T, e *env) (Config, hooks) {
				produce(t, e.kcl, e.topic, kv(0, "k", `1`), kv(1, "k", `2`))
				return e.config(), hooks{}
			},
			want: ErrKeyMovedPartitions,
			parts: func(e *env) []string {
				return []string{e.topic, `key "k"`, "partition 1 offset 1", "in this batch at partition 0 offset 1"}
			},
		},
		{
			name: "key moved partitions against a stored row",
			prepare: func(t *testing.T, e *env) (Config, hooks) {
				produce(t, e.kcl, e.topic, kv(1, "a", `2`)) // "a" is stored at partition 0 offset 0
				return e.config(), hooks{}
			},
			want: ErrKeyMovedPartitions,
			parts: func(e *env) []string {
				return []string{e.topic, `key "a"`, "partition 1 offset 1", "stored in kafka_state.records at partition 0 offset 0"}
			},
		},
		{
			name: "topic deleted during the batch",
			prepare: func(t *testing.T, e *env) (Config, hooks) {
				produce(t, e.kcl, e.topic, kv(0, "c", `1`))
				return e.config(), hooks{beforeRecheck: func(ctx context.Context) error { deleteTopic(t, e); return nil }}
			},
			want: ErrTopicChanged,
			parts: func(e *env) []string {
				return []string{e.topic, "topic metadata is unavailable", "nothing was committed"}
			},
		},
		{
			name: "topic recreated during the batch",
			prepare: func(t *testing.T, e *env) (Config, hooks) {
				produce(t, e.kcl, e.topic, kv(0, "c", `1`))
				return e.config(), hooks{beforeRecheck: func(ctx context.Context) error {
					deleteTopic(t, e)
					createTopic(t, e.adm, e.topic, 2, nil)
					return nil
				}}
			},
			want:  ErrTopicChanged,
			parts: func(e *env) []string { return []string{e.topic, "deleted and recreated"} },
		},
		{
			name: "topic repartitioned during the batch",
			prepare: func(t *testing.T, e *env) (Config, hooks) {
				produce(t, e.kcl, e.topic, kv(0, "c", `1`))
				return e.config(), hooks{beforeRecheck: func(ctx context.Context) error { repartition(t, e, 3); return nil }}
			},
			want:  ErrTopicChanged,
			parts: func(e *env) []string { return []string{e.topic, "partitions went from 2 to 3"} },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newTopicEnv(t, 2)
			produce(t, e.kcl, e.topic, kv(0, "a", `{"n":1}`), tomb(1, "b"))
			e.mustRun(t)
			cfg, h := tc.prepare(t, e)
			before := e.snapshot(t)
			_, err := e.run(t, cfg, h)
			assertRefused(t, err, tc.want, tc.parts(e)...)
			if after := e.snapshot(t); after != before {
				t.Errorf("a refused run changed the tables:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// TestTopicNeverRead: a TOPIC the broker does not know and no batch ever
// read (no positions saved for it: misspelt, or not created yet) is a
// configuration error, not the seed's refusal, and changes nothing; the
// same name for a topic that was read and then deleted is refused (the
// "topic deleted" case of TestStateRefusals).
func TestTopicNeverRead(t *testing.T) {
	e := newTopicEnv(t, 1)
	produce(t, e.kcl, e.topic, kv(0, "a", `{"n":1}`))
	e.mustRun(t)
	before := e.snapshot(t)
	c := e.config()
	c.Topic = e.topic + "_misspelt"
	_, err := e.run(t, c, hooks{})
	testenv.WantHinted(t, err, Hint, outcome.Config, ErrTopicUnavailable)
	testenv.CheckHinted(t, err, Hint, outcome.Config, ErrTopicUnavailable, fmt.Sprintf("topic %q", c.Topic), "the broker has no such topic",
		"holds no read positions for it", "Check TOPIC, that the topic exists", "nothing was read or written")
	if after := e.snapshot(t); after != before {
		t.Errorf("the run changed the tables:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	// Before setup there is no positions table: no batch read it either.
	bare := newBareEnv(t)
	_, err = bare.run(t, bare.config(), hooks{})
	testenv.CheckHinted(t, err, Hint, outcome.Config, ErrTopicUnavailable, fmt.Sprintf("topic %q", bare.topic), "holds no read positions for it")
	// A stop (SIGTERM) during the lookup is the run's stop, not the refusal.
	cc, err := e.config().Postgres.connConfig()
	if err != nil {
		t.Fatal(err)
	}
	stopped, stop := context.WithCancel(context.Background())
	stop()
	if err := unknownTopic(stopped, cc, c.Topic, ""); !errors.Is(err, context.Canceled) {
		t.Errorf("stopped during the lookup: %v, want context.Canceled", err)
	}
	// PostgreSQL cannot be asked: a misspelt TOPIC cannot be told from a
	// deleted topic (a refusal), so the run says both and takes the
	// PostgreSQL failure's class: transient for a server that is down,
	// configuration for a wrong password.
	down := c
	down.Postgres.DSN = testenv.WithHost(t, c.Postgres.DSN, testenv.ClosedAddr(t))
	_, err = e.run(t, down, hooks{})
	testenv.CheckHinted(t, err, Hint, outcome.Transient, ErrTopicUnavailable, fmt.Sprintf("topic %q", c.Topic), "the broker has no such topic",
		"kafka_state.positions could not be read to tell a misspelt TOPIC from a deleted one",
		"connection refused", "nothing was read or written", "Check TOPIC")
	wrongPassword := c
	wrongPassword.Postgres.DSN = testenv.WithPassword(t, c.Postgres.DSN, "not-the-password")
	_, err = e.run(t, wrongPassword, hooks{})
	testenv.CheckHinted(t, err, Hint, outcome.Config, ErrTopicUnavailable, fmt.Sprintf("topic %q", c.Topic),
		"kafka_state.positions could not be read to tell a misspelt TOPIC", "password authentication failed")
	if strings.Contains(err.Error(), "not-the-password") {
		t.Errorf("the message shows the password: %v", err)
	}
}

// TestTopicOfAnotherCluster: a topic the broker does not know whose
// positions were saved from another cluster is a configuration error
// (KAFKA_PROPERTIES names the wrong cluster), not "the topic was deleted",
// whose remedy, a rebuild, would throw the state away.
func TestTopicOfAnotherCluster(t *testing.T) {
	e := newTopicEnv(t, 1)
	produce(t, e.kcl, e.topic, kv(0, "a", `{"n":1}`))
	e.mustRun(t)
	e.exec(t, `UPDATE kafka_state.positions SET cluster_id = 'another-cluster' WHERE topic = $1`, e.topic)
	deleteTopic(t, e)
	before := e.snapshot(t)
	_, err := e.run(t, e.config(), hooks{})
	testenv.WantHinted(t, err, Hint, outcome.Config, ErrTopicUnavailable)
	testenv.CheckHinted(t, err, Hint, outcome.Config, ErrTopicUnavailable, fmt.Sprintf("topic %q", e.topic), `from cluster "another-cluster"`,
		"KAFKA_PROPERTIES names another cluster", "nothing was read or written")
	if after := e.snapshot(t); after != before {
		t.Errorf("the run changed the tables:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestLockHeld: while another session holds the seed's topic lock, a batch
// waits LockWait, then fails as transient (a retry succeeds once the holder
// ends), naming the lock and the holding backend, and changes nothing; a lock
// released while the batch waits lets it proceed.
func TestLockHeld(t *testing.T) {
	e := newTopicEnv(t, 2)
	produce(t, e.kcl, e.topic, kv(0, "a", `{"n":1}`), tomb(1, "b"))
	e.mustRun(t)
	produce(t, e.kcl, e.topic, kv(1, "c", `{"n":2}`))

	release := holdSeedLock(t, e)
	before := e.snapshot(t)
	_, err := e.run(t, e.config(), hooks{})
	testenv.WantHinted(t, err, Hint, outcome.Transient, ErrLocked)
	testenv.CheckHinted(t, err, Hint, outcome.Transient, ErrLocked,
		e.topic, "kestra-kafka-state:"+e.topic, "held by PostgreSQL backend pid", "pg_terminate_backend(", "nothing was changed")
	if after := e.snapshot(t); after != before {
		t.Errorf("a run that did not get the lock changed the tables:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	release()

	// Released while the next batch waits: it proceeds.
	release = holdSeedLock(t, e)
	go func() { time.Sleep(LockWait / 4); release() }()
	res, err := e.run(t, e.config(), hooks{})
	if err != nil {
		t.Fatalf("a batch that got the lock while waiting failed: %v", err)
	}
	if res.Consumed != 1 {
		t.Errorf("consumed %d, want 1", res.Consumed)
	}
}

// TestBoundsOutOfRange: bounds outside the seed's ranges are configuration
// errors (exit 2) naming the variable and range, raised before any I/O, so
// nothing changes.
func TestBoundsOutOfRange(t *testing.T) {
	e := newTopicEnv(t, 1)
	produce(t, e.kcl, e.topic, kv(0, "a", `1`))
	before := e.snapshot(t)
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"max records 0", func(c *Config) { c.MaxRecords = 0 }, "MAX_RECORDS must be 1..100000, got 0"},
		{"max records 100001", func(c *Config) { c.MaxRecords = 100001 }, "MAX_RECORDS must be 1..100000, got 100001"},
		{"poll seconds 0", func(c *Config) { c.PollSeconds = 0 }, "POLL_SECONDS must be 1..60, got 0"},
		{"poll seconds 61", func(c *Config) { c.PollSeconds = 61 }, "POLL_SECONDS must be 1..60, got 61"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := e.config()
			tc.change(&cfg)
			_, err := e.run(t, cfg, hooks{})
			testenv.WantHinted(t, err, Hint, outcome.Config, nil, tc.want)
		})
	}
	if after := e.snapshot(t); after != before {
		t.Errorf("tables changed:\n%s\n%s", before, after)
	}
}

// recordCase is one bad record: what to produce after the good one, and the
// rule it breaks.
type recordCase struct {
	name   string
	key    []byte
	value  []byte
	want   error
	detail string
}

// TestRecordRefusals: every per-record rule of the seed, on the real broker:
// the batch is refused with an error naming the topic, partition, offset
// and key, and both tables stay exactly as the previous batch left them
// (the good record produced before the bad one is not applied either).
func TestRecordRefusals(t *testing.T) {
	cases := []recordCase{
		{"key not utf-8", []byte("k\xff"), []byte(`{}`), ErrKeyNotUTF8, "invalid byte at 1"},
		{"key with a nul byte", []byte("k\x00"), []byte(`{}`), ErrKeyNUL, "nul byte at 1"},
		{"value not utf-8", []byte("k"), []byte("{\"a\":\"\xff\"}"), ErrValueNotUTF8, "invalid byte at 6"},
		{"value not json", []byte("k"), []byte(`hello`), ErrValueNotJSON, "unexpected 'h' at byte 0"},
		{"empty value", []byte("k"), []byte{}, ErrValueNotJSON, "empty value"},
		{"utf-8 BOM", []byte("k"), []byte("\xef\xbb\xbf{}"), ErrValueNotJSON, "byte order mark"},
		{"NaN", []byte("k"), []byte(`{"a":NaN}`), ErrNonFinite, "NaN at byte 5"},
		{"Infinity", []byte("k"), []byte(`[Infinity]`), ErrNonFinite, "Infinity at byte 1"},
		{"-Infinity", []byte("k"), []byte(`-Infinity`), ErrNonFinite, "-Infinity at byte 0"},
		{"1e400", []byte("k"), []byte(`{"a":1e400}`), ErrNonFinite, "overflows a float64"},
		{"nul escape", []byte("k"), []byte(`"\u0000"`), ErrValueNotJSON, `\u0000`},
		{"unpaired surrogate", []byte("k"), []byte(`"\ud800"`), ErrValueNotJSON, "surrogate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newTopicEnv(t, 2)
			produce(t, e.kcl, e.topic, kv(1, "a", `1`))
			e.mustRun(t)
			before := e.snapshot(t)
			offs := produce(t, e.kcl, e.topic, kv(1, "good", `2`), rec{Partition: 1, Key: tc.key, Value: tc.value})
			_, err := e.run(t, e.config(), hooks{})
			assertRefused(t, err, tc.want, fmt.Sprintf("topic %q", e.topic), "partition 1", fmt.Sprintf("offset %d", offs[1]),
				"key "+quoteKey(tc.key), tc.detail, "rolled back")
			var re *RecordError
			if !errors.As(err, &re) || re.Partition != 1 || re.Offset != offs[1] {
				t.Errorf("error is not a *RecordError for partition 1 offset %d: %#v", offs[1], err)
			}
			if after := e.snapshot(t); after != before {
				t.Errorf("tables changed:\n%s\n%s", before, after)
			}
		})
	}
}

// TestNullKeyRefused: a keyless record (possible only on a non-compacted
// topic; compacted topics reject them) is refused naming where it is.
func TestNullKeyRefused(t *testing.T) {
	e := newEnv(t)
	createTopic(t, e.adm, e.topic, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("delete")})
	offs := produce(t, e.kcl, e.topic, kv(0, "a", `1`), rec{Partition: 0, Key: nil, Value: []byte(`{}`)})
	_, err := e.run(t, e.config(), hooks{})
	assertRefused(t, err, ErrNullKey, fmt.Sprintf("topic %q partition 0 offset %d", e.topic, offs[1]), "keyless")
	if got := e.snapshot(t); got != "--\n--\n" {
		t.Errorf("tables changed:\n%s", got)
	}
}

// holdSeedLock takes the seed's topic lock in another session, as the seed
// flow's script does, until release (or the test's end).
func holdSeedLock(t *testing.T, e *env) (release func()) {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	conn := e.conn(t)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = tx.Rollback(context.Background()) }) }
	t.Cleanup(release)
	var ok bool
	if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))`, "kestra-kafka-state:"+e.topic).Scan(&ok); err != nil || !ok {
		t.Fatalf("take the seed's lock: %v %v", ok, err)
	}
	return release
}

func repartition(t testing.TB, e *env, n int) {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	resp, err := e.adm.UpdatePartitions(ctx, n, e.topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("repartition %s to %d: %v", e.topic, n, err)
	}
	testenv.WaitForLeaders(t, e.adm, e.topic, n)
}

func deleteTopic(t testing.TB, e *env) {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	if _, err := e.adm.DeleteTopic(ctx, e.topic); err != nil {
		t.Fatalf("delete topic: %v", err)
	}
	for {
		m, err := e.adm.Metadata(ctx, e.topic)
		if err == nil && errors.Is(m.Topics[e.topic].Err, kerr.UnknownTopicOrPartition) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("topic %s still exists", e.topic)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func setTopicConfig(t testing.TB, e *env, name, value string) {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	resp, err := e.adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: name, Value: kadm.StringPtr(value)}}, e.topic)
	if err == nil {
		for _, r := range resp {
			if r.Err != nil {
				err = r.Err
			}
		}
	}
	if err != nil {
		t.Fatalf("alter topic config %s: %v", name, err)
	}
}

func deleteRecordsBefore(t testing.TB, e *env, partition int32, offset int64) {
	t.Helper()
	if err := kafkatest.DeleteRecords(testCtx(t, time.Minute), e.adm, e.topic, partition, offset); err != nil {
		t.Fatal(err)
	}
}

// TestRecordsDeletedDuringTheBatch: DeleteRecords (or retention) moves the
// log start offset past the batch's position while it reads a partition, so
// the broker answers the next fetch with OFFSET_OUT_OF_RANGE. The refusal
// said "saved offset 96106 is outside the retained log [-1, -1]": neither
// the saved offset (the fetch's position mid-batch) nor bounds the broker
// gave, so kafka_state.positions contradicted it. It says what happened at
// which fetch offset, and nothing changes.
func TestRecordsDeletedDuringTheBatch(t *testing.T) {
	e := newEnv(t)
	createTopic(t, e.adm, e.topic, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact,delete")})
	produce(t, e.kcl, e.topic, kv(0, "a", `1`))
	e.mustRun(t)
	// About 20 MB, uncompressed: the batch takes some 20 fetches of 1 MB.
	// Compressed (the client's default), a few fetches held it all, and a
	// COPY slow to start on a loaded machine found every record fetched
	// before the deletion, so no fetch met it.
	produceMany(t, newProducer(t, e.brokers, kgo.ProducerBatchCompression(kgo.NoCompression())), e.topic, 1, 100000)
	end := e.endOffsets(t)["0"]
	before := e.snapshot(t)
	_, err := e.run(t, e.config(), hooks{duringCopy: func(context.Context) { deleteRecordsBefore(t, e, 0, end-10) }})
	assertRefused(t, err, ErrOffsetOutOfRange, e.topic, "partition 0", "OFFSET_OUT_OF_RANGE", "while this batch read it", "saved offset 1", "Rebuild")
	if err != nil && strings.Contains(err.Error(), "-1") {
		t.Errorf("the refusal gives bounds the broker did not: %v", err)
	}
	if after := e.snapshot(t); after != before {
		t.Fatal("a refused run changed the tables")
	}
}

// TestKeyTooLongForIndex: a key whose index entry exceeds what a
// PostgreSQL btree holds (kafka_state.records' primary key: about 2700
// bytes after compression) failed the merge as an internal error (exit 4)
// naming neither the record nor what to do. It must be a refusal naming
// the topic, partition, offset and key, with nothing committed. A long but
// compressible key (which PostgreSQL stores) still goes through.
func TestKeyTooLongForIndex(t *testing.T) {
	e := newTopicEnv(t, 2)
	raw := make([]byte, 7500)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	long := base64.StdEncoding.EncodeToString(raw) // 10,000 bytes that do not compress
	produce(t, e.kcl, e.topic, kv(0, strings.Repeat("k", 10000), `{"v":0}`), kv(1, "a", `{"v":1}`))
	e.mustRun(t)
	before := e.snapshot(t)
	produce(t, e.kcl, e.topic, kv(1, "b", `{"v":2}`), kv(1, long, `{"v":3}`))
	for _, h := range []hooks{{}, {onConflict: true}} {
		_, err := e.run(t, e.config(), h)
		assertRefused(t, err, ErrKeyTooLong, e.topic, "partition 1 offset 2", long[:50], "10000 bytes")
		if after := e.snapshot(t); after != before {
			t.Fatalf("a refused run changed the tables")
		}
	}
}

// TestValueTooLargeForJSONB: a value that is valid JSON (so the validator
// passes it) but that PostgreSQL's jsonb cannot hold: here an array of 30
// million zeros (60 MB; jsonb's in-memory form of it passes the 1 GB
// allocation limit, SQLSTATE XX000 "invalid memory alloc request size"; a
// string over 256 MB is 54000 "string too long to represent as jsonb
// string"). The COPY failed as an internal error (exit 4, "please report
// it") naming no record, and every retry failed the same way. It is a
// refusal naming the record, and nothing changes.
func TestValueTooLargeForJSONB(t *testing.T) {
	e := newTopicEnv(t, 2)
	produce(t, e.kcl, e.topic, kv(0, "a", `{"v":1}`))
	e.mustRun(t)
	before := e.snapshot(t)
	big := make([]byte, 0, 60_000_002)
	big = append(big, '[')
	for i := range 30_000_000 {
		if i > 0 {
			big = append(big, ',')
		}
		big = append(big, '0')
	}
	big = append(big, ']')
	if err := validateValue(big); err != nil {
		t.Fatalf("the test value must pass the validator: %v", err)
	}
	producer := newProducer(t, e.brokers, kgo.ProducerBatchMaxBytes(64<<20), kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	produce(t, producer, e.topic, kv(1, "b", `{"v":2}`), rec{Partition: 1, Key: []byte("huge"), Value: big}, kv(1, "c", `{"v":3}`))
	_, err := e.run(t, e.config(), hooks{})
	assertRefused(t, err, ErrValueTooLarge, e.topic, "partition 1 offset 1", `key "huge"`, "60000001 bytes")
	if after := e.snapshot(t); after != before {
		t.Fatalf("a refused run changed the tables")
	}
}
