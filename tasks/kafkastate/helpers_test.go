package kafkastate

// Helpers for the integration tests: real Kafka broker and real PostgreSQL,
// from the env vars .ci/env exports. Every test gets its own topic and its
// own PostgreSQL database (the seed's table names are fixed in schema
// kafka_state, so a database per test keeps tests apart).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/changesink/changesink/internal/kafkatest"
	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
)

func testCtx(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// env is one test's services: a broker, a fresh database with schema
// kafka_state, and a topic name.
type env struct {
	brokers string
	adminPG string
	pg      Postgres
	topic   string
	adm     *kadm.Client
	kcl     *kgo.Client
}

// newEnv creates a fresh database (set up with Setup) and admin/producer
// clients; the topic is created by createTopic.
func newEnv(t *testing.T) *env {
	t.Helper()
	e := newBareEnv(t)
	if _, err := Setup(testCtx(t, time.Minute), e.pg); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	return e
}

// newTopicEnv is newEnv with its topic created over partitions partitions
// (compacted, without fast cleaning): the start of most tests.
func newTopicEnv(t *testing.T, partitions int32) *env {
	t.Helper()
	e := newEnv(t)
	createTopic(t, e.adm, e.topic, partitions, nil)
	return e
}

// newBareEnv is newEnv without Setup: the database is empty.
func newBareEnv(t *testing.T) *env {
	t.Helper()
	return newBareEnvOn(t, "CHANGESINK_TEST_PG")
}

// newBareEnvOn is newBareEnv on the PostgreSQL server the env var pgVar
// names (an admin DSN, as CHANGESINK_TEST_PG).
func newBareEnvOn(t *testing.T, pgVar string) *env {
	t.Helper()
	vars := testenv.Lookup(t, "CHANGESINK_TEST_KAFKA", pgVar)
	e := &env{brokers: vars["CHANGESINK_TEST_KAFKA"], adminPG: vars[pgVar], topic: testenv.UniqueName(t, "ks_")}
	e.pg = Postgres{DSN: testenv.CreateDatabase(t, e.adminPG, testenv.UniqueName(t, "ks_"), "")}
	e.kcl = newProducer(t, e.brokers)
	e.adm = newAdmin(e.kcl)
	return e
}

func newAdmin(cl *kgo.Client) *kadm.Client { return kadm.NewClient(cl) }

func newProducer(t testing.TB, brokers string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(brokers),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// compacted are the topic configs of a compacted topic whose cleaner runs
// within seconds on the test broker.
func compacted() map[string]*string {
	return map[string]*string{
		"cleanup.policy":            kadm.StringPtr("compact"),
		"segment.ms":                kadm.StringPtr("100"),
		"min.cleanable.dirty.ratio": kadm.StringPtr("0.01"),
		"min.compaction.lag.ms":     kadm.StringPtr("0"),
		"delete.retention.ms":       kadm.StringPtr("100"),
	}
}

// createTopic creates name with the given partitions and configs (nil =
// compacted without fast cleaning), waits until every partition has a
// leader, and deletes it when the test ends.
func createTopic(t testing.TB, adm *kadm.Client, name string, partitions int32, configs map[string]*string) {
	t.Helper()
	if configs == nil {
		configs = map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}
	}
	testenv.CreateTopic(t, adm, name, partitions, configs)
}

// rec is a test record. A nil Value is a tombstone; a nil Key is a null key.
type rec struct {
	Partition int32
	Key       []byte
	Value     []byte
}

func kv(p int32, key, value string) rec {
	return rec{Partition: p, Key: []byte(key), Value: []byte(value)}
}
func tomb(p int32, key string) rec { return rec{Partition: p, Key: []byte(key)} }

// produce writes records synchronously, in order, and returns their offsets.
func produce(t testing.TB, cl *kgo.Client, topic string, recs ...rec) []int64 {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	krs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		krs[i] = &kgo.Record{Topic: topic, Partition: r.Partition, Key: r.Key, Value: r.Value}
	}
	res := cl.ProduceSync(ctx, krs...)
	if err := res.FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
	out := make([]int64, len(krs))
	for i, r := range krs {
		out[i] = r.Offset
	}
	return out
}

// produceTx writes records in one transaction, commits or aborts it, waits
// until the transaction's markers are in the log and returns the records'
// offsets. The broker writes the markers after EndTransaction returns, so
// without the wait a batch run at once could stop at the last stable offset
// below them; and a record produced by another client meanwhile may land
// before a marker: tests take offsets from here, never count them.
func produceTx(t testing.TB, brokers, topic string, commit bool, recs ...rec) []int64 {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	cl := newProducer(t, brokers, kgo.TransactionalID("tx-"+testenv.RandomHex(6)))
	krs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		krs[i] = &kgo.Record{Topic: topic, Partition: r.Partition, Key: r.Key, Value: r.Value}
	}
	if err := kafkatest.Transact(ctx, cl, krs, commit); err != nil {
		t.Fatal(err)
	}
	offsets := make([]int64, len(recs))
	for i, r := range krs {
		offsets[i] = r.Offset
	}
	return offsets
}

// config returns a materialize Config for e's topic.
func (e *env) config() Config {
	return Config{
		Topic:           e.topic,
		MaxRecords:      MaxMaxRecords,
		PollSeconds:     10,
		KafkaProperties: fmt.Sprintf(`{"bootstrap.servers":%q}`, e.brokers),
		Postgres:        e.pg,
	}
}

// run materializes one batch with cfg into a fresh working directory.
func (e *env) run(t testing.TB, cfg Config, h hooks) (*Result, error) {
	t.Helper()
	ctx := testCtx(t, 3*time.Minute)
	return Materialize(ctx, cfg, Env{Dir: kestra.Dir{Path: t.TempDir()}, hooks: h})
}

// mustRun materializes one batch and fails the test on error.
func (e *env) mustRun(t testing.TB) *Result {
	t.Helper()
	res, err := e.run(t, e.config(), hooks{})
	if err != nil {
		t.Fatalf("Materialize: %v", err)
	}
	return res
}

// stored is one row of kafka_state.records.
type stored struct {
	Payload   *string // jsonb text, nil when deleted
	Deleted   bool
	Partition int32
	Offset    int64
}

// pgAddr is the host and port of e's PostgreSQL (CHANGESINK_TEST_PG's).
func (e *env) pgAddr(t testing.TB) string {
	t.Helper()
	cc, err := pgx.ParseConfig(e.pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
}

// pgThroughProxy starts a proxy in front of e's PostgreSQL (opts.Conn
// carries each connection) and returns e's DSN pointing at it.
func (e *env) pgThroughProxy(t testing.TB, opts testenv.ProxyOptions) string {
	t.Helper()
	p := testenv.StartProxy(t, e.pgAddr(t), opts)
	return testenv.WithHost(t, e.pg.DSN, p.Addr())
}

func (e *env) conn(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	cc, err := e.pg.connConfig()
	if err != nil {
		t.Fatal(err)
	}
	cc.RuntimeParams["application_name"] = "changesink test"
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// records returns the topic's stored rows by key.
func (e *env) records(t testing.TB) map[string]stored {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	rows, err := e.conn(t).Query(ctx, `SELECT record_key, payload::text, deleted, kafka_partition, kafka_offset FROM kafka_state.records WHERE topic = $1`, e.topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]stored{}
	for rows.Next() {
		var k string
		var s stored
		if err := rows.Scan(&k, &s.Payload, &s.Deleted, &s.Partition, &s.Offset); err != nil {
			t.Fatal(err)
		}
		out[k] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// positions returns the saved positions row (nil map when there is none).
func (e *env) positions(t testing.TB) (next map[string]int64, clusterID, topicID string) {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	var raw []byte
	err := e.conn(t).QueryRow(ctx, `SELECT next_offsets, cluster_id, topic_id FROM kafka_state.positions WHERE topic = $1`, e.topic).Scan(&raw, &clusterID, &topicID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, "", ""
	}
	if err != nil {
		t.Fatal(err)
	}
	next, err = parsePositions(raw)
	if err != nil {
		t.Fatal(err)
	}
	return next, clusterID, topicID
}

// snapshot renders both tables (all topics, without updated_at) so a test
// can assert that a refused run changed nothing.
func (e *env) snapshot(t testing.TB) string {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	var b strings.Builder
	for _, q := range []string{
		`SELECT topic, cluster_id, topic_id, next_offsets::text FROM kafka_state.positions ORDER BY topic`,
		`SELECT topic, record_key, coalesce(payload::text, 'NULL'), deleted::text, kafka_partition::text, kafka_offset::text FROM kafka_state.records ORDER BY topic, record_key`,
	} {
		rows, err := e.conn(t).Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(&b, vals...)
		}
		rows.Close()
		b.WriteString("--\n")
	}
	return b.String()
}

// exec runs SQL in e's database.
func (e *env) exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	if _, err := e.conn(t).Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// committedNothingThenConverges checks that a failed run left e's tables as
// the snapshot before showed them, and that the next run commits the
// consumed records the failed one did not.
func (e *env) committedNothingThenConverges(t testing.TB, before string, consumed int64) {
	t.Helper()
	if after := e.snapshot(t); after != before {
		t.Fatalf("the failed run changed the tables:\n%s\nwas\n%s", after, before)
	}
	if res := e.mustRun(t); res.Consumed != consumed {
		t.Errorf("re-run consumed %d, want %d", res.Consumed, consumed)
	}
}

// setDatabase sets a parameter on e's database (ALTER DATABASE … SET,
// setting "name = value"), for the sessions that connect after it.
func (e *env) setDatabase(t testing.TB, setting string) {
	t.Helper()
	cc, err := pgx.ParseConfig(e.pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	e.exec(t, `ALTER DATABASE `+pgx.Identifier{cc.Database}.Sanitize()+` SET `+setting)
}

// topicMeta returns the broker's cluster id and the topic id in seed form.
func (e *env) ids(t testing.TB) (clusterID, topicID string) {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	m, err := e.adm.Metadata(ctx, e.topic)
	if err != nil {
		t.Fatal(err)
	}
	return m.Cluster, TopicIDText(m.Topics[e.topic].ID)
}

// assertRefused checks that err is a refusal wrapping want and that its
// message names every part in parts.
func assertRefused(t testing.TB, err error, want error, parts ...string) {
	t.Helper()
	testenv.WantHinted(t, err, Hint, outcome.Refused, want)
	testenv.CheckHinted(t, err, Hint, outcome.Refused, want, parts...) // a missing part: the caller goes on to check the tables
}

// endOffsets returns the high watermark of every partition.
func (e *env) endOffsets(t testing.TB) map[string]int64 {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	offs, err := e.adm.ListEndOffsets(ctx, e.topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	offs.Each(func(o kadm.ListedOffset) { out[fmt.Sprint(o.Partition)] = o.Offset })
	return out
}

// noGroups asserts that no consumer group exists on the broker whose name
// could come from a changesink run (there are none at all).
func noGroups(t testing.TB, adm *kadm.Client) {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	groups, err := adm.ListGroups(ctx)
	if err != nil && !errors.Is(err, kerr.CoordinatorNotAvailable) {
		t.Fatal(err)
	}
	names := groups.Groups()
	slices.Sort(names)
	for _, g := range names {
		if strings.Contains(g, "ks_") || strings.Contains(g, "changesink") || strings.Contains(g, "kestra-state") {
			t.Errorf("a consumer group exists: %s", g)
		}
	}
}
