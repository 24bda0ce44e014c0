package kafkastate

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/testenv"
)

// TestTombstonesAndRevival: a tombstone sets deleted = true and payload
// NULL (also for a key never seen before) and removes the key from
// current_values and live_keys; a later value revives it.
func TestTombstonesAndRevival(t *testing.T) {
	e := newTopicEnv(t, 1)
	produce(t, e.kcl, e.topic, kv(0, "a", `{"v":1}`), kv(0, "b", `{"v":1}`))
	if res := e.mustRun(t); res.LiveKeys != 2 {
		t.Fatalf("live_keys = %d, want 2", res.LiveKeys)
	}
	produce(t, e.kcl, e.topic, tomb(0, "a"), tomb(0, "never-seen"))
	res := e.mustRun(t)
	if res.Consumed != 2 || res.Tombstones != 2 || res.LiveKeys != 1 {
		t.Errorf("after tombstones: %+v, want consumed 2, tombstones 2, live_keys 1", res)
	}
	v1, v2 := `{"v": 1}`, `{"v": 2}`
	assertRecords(t, e.records(t), map[string]stored{
		"a":          {Deleted: true, Partition: 0, Offset: 2},
		"b":          {Payload: &v1, Partition: 0, Offset: 1},
		"never-seen": {Deleted: true, Partition: 0, Offset: 3},
	})
	if n := e.liveValues(t); !maps.Equal(n, map[string]string{"b": v1}) {
		t.Errorf("current_values = %v, want only b", n)
	}
	produce(t, e.kcl, e.topic, kv(0, "a", `{"v":2}`))
	res = e.mustRun(t)
	if res.LiveKeys != 2 || res.Tombstones != 0 {
		t.Errorf("after revival: %+v, want live_keys 2", res)
	}
	if n := e.liveValues(t); !maps.Equal(n, map[string]string{"a": v2, "b": v1}) {
		t.Errorf("current_values = %v, want a revived", n)
	}
}

func (e *env) liveValues(t *testing.T) map[string]string {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	rows, err := e.conn(t).Query(ctx, `SELECT record_key, payload::text FROM kafka_state.current_values WHERE topic = $1`, e.topic)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		out[k] = v
	}
	return out
}

// TestOnlyHigherOffsetsReplace: within a batch the highest offset of a key
// wins (also when it is a tombstone), and a stored row is replaced only by
// a higher offset: a row stored with an offset above the batch's (as after a
// restore of records newer than the positions) is kept.
func TestOnlyHigherOffsetsReplace(t *testing.T) {
	e := newTopicEnv(t, 1)
	produce(t, e.kcl, e.topic,
		kv(0, "a", `1`), kv(0, "a", `2`), kv(0, "a", `3`), // a ends at 3
		kv(0, "b", `1`), tomb(0, "b"), // b ends deleted
		kv(0, "kept", `"batch"`))
	cluster, topicID := e.ids(t)
	e.exec(t, `INSERT INTO kafka_state.positions (topic, cluster_id, topic_id, next_offsets) VALUES ($1, $2, $3, '{"0": 0}')`,
		e.topic, cluster, topicID)
	e.exec(t, `INSERT INTO kafka_state.records VALUES ($1, 'kept', '"stored"', false, 0, 1000)`, e.topic)
	res := e.mustRun(t)
	if res.Consumed != 6 {
		t.Errorf("consumed %d, want 6", res.Consumed)
	}
	three, storedV := `3`, `"stored"`
	assertRecords(t, e.records(t), map[string]stored{
		"a":    {Payload: &three, Partition: 0, Offset: 2},
		"b":    {Deleted: true, Partition: 0, Offset: 4},
		"kept": {Payload: &storedV, Partition: 0, Offset: 1000},
	})
}

// TestSeedFormTopicIDs: topic ids are stored in the seed's text form
// (librdkafka's rd_kafka_Uuid_base64str: standard base64, no padding, 22
// characters), not kadm's padded form nor Java's URL-safe form; positions
// written in that form by the seed are accepted (the run continues from
// them), and the ones changesink writes are the same string.
func TestSeedFormTopicIDs(t *testing.T) {
	e := newTopicEnv(t, 2)
	ctx := testCtx(t, time.Minute)
	m, err := e.adm.Metadata(ctx, e.topic)
	if err != nil {
		t.Fatal(err)
	}
	id := m.Topics[e.topic].ID
	seedForm := base64.StdEncoding.EncodeToString(id[:])[:22] // EVP_EncodeBlock output cut to 22 characters
	if TopicIDText(id) != seedForm || len(seedForm) != 22 {
		t.Fatalf("TopicIDText = %q, want the seed's %q", TopicIDText(id), seedForm)
	}
	if kadmForm := id.String(); kadmForm != seedForm+"==" {
		t.Errorf("kadm's form %q, expected the seed's form padded", kadmForm)
	}
	if zeroTopicID != "AAAAAAAAAAAAAAAAAAAAAA" {
		t.Fatalf("all-zero id = %q, want the seed's AAAAAAAAAAAAAAAAAAAAAA", zeroTopicID)
	}

	// Positions as the seed writes them after reading offset 0 of partition
	// 0 (cluster id from list_topics, topic id from str(Uuid)).
	offs := produce(t, e.kcl, e.topic, kv(0, "seen-by-seed", `1`), kv(0, "a", `2`), kv(1, "b", `3`))
	e.exec(t, `INSERT INTO kafka_state.positions (topic, cluster_id, topic_id, next_offsets) VALUES ($1, $2, $3, $4)`,
		e.topic, m.Cluster, seedForm, fmt.Sprintf(`{"0": %d, "1": 0}`, offs[0]+1))
	e.exec(t, `INSERT INTO kafka_state.records VALUES ($1, 'seen-by-seed', '1', false, 0, $2)`, e.topic, offs[0])
	res := e.mustRun(t)
	if res.Consumed != 2 {
		t.Errorf("consumed %d, want 2 (continuing from the seed's positions)", res.Consumed)
	}
	_, _, stored := e.positions(t)
	if stored != seedForm {
		t.Errorf("stored topic id %q, want the seed's form %q", stored, seedForm)
	}
}

// TestNoIDsRefused: a broker that does not expose topic ids (metadata below
// v10, like Kafka before 2.8) is refused. The real broker is reached through
// a proxy that caps the Metadata version it advertises at 9.
func TestNoIDsRefused(t *testing.T) {
	e := newTopicEnv(t, 1)
	produce(t, e.kcl, e.topic, kv(0, "a", `1`))
	p := startProxy(t, e.brokers, proxyOpts{capMetadata: 9})
	defer p.Close()
	cfg := e.config()
	cfg.KafkaProperties = fmt.Sprintf(`{"bootstrap.servers":%q}`, p.Addr())
	_, err := e.run(t, cfg, hooks{})
	assertRefused(t, err, ErrNoIDs, e.topic, "AAAAAAAAAAAAAAAAAAAAAA", "Kafka 2.8")
	if s := e.snapshot(t); s != "--\n--\n" {
		t.Errorf("tables changed: %s", s)
	}
}

// eachMergeStatement runs test once with each merge statement, as subtests
// named after them: PostgreSQL 15's MERGE, then the INSERT ... ON CONFLICT
// used before 15 (hooks.onConflict).
func eachMergeStatement(t *testing.T, test func(t *testing.T, h hooks)) {
	for _, onConflict := range []bool{false, true} {
		t.Run(map[bool]string{false: "MERGE", true: "ON CONFLICT"}[onConflict], func(t *testing.T) {
			test(t, hooks{onConflict: onConflict})
		})
	}
}

// TestMergeStatements: both merge statements (PostgreSQL 15's MERGE, and
// the INSERT ... ON CONFLICT used before 15), each with and without the
// per-key dedupe, give the same tables: the highest offset per key, only
// where higher than the stored row.
func TestMergeStatements(t *testing.T) {
	eachMergeStatement(t, func(t *testing.T, h hooks) {
		e := newTopicEnv(t, 2)
		cluster, topicID := e.ids(t)
		e.exec(t, `INSERT INTO kafka_state.positions (topic, cluster_id, topic_id, next_offsets) VALUES ($1, $2, $3, '{"0": 0, "1": 0}')`,
			e.topic, cluster, topicID)
		e.exec(t, `INSERT INTO kafka_state.records VALUES ($1, 'kept', '"stored"', false, 1, 1000)`, e.topic)
		// Batch 1: every key once (no dedupe).
		produce(t, e.kcl, e.topic, kv(0, "a", `1`), kv(1, "b", `1`), kv(1, "kept", `"batch"`))
		if _, err := e.run(t, e.config(), h); err != nil {
			t.Fatal(err)
		}
		// Batch 2: keys repeated (dedupe), a tombstone and a revival.
		produce(t, e.kcl, e.topic, kv(0, "a", `2`), kv(0, "a", `3`), tomb(1, "b"), kv(0, "c", `1`), tomb(0, "c"), kv(0, "c", `2`))
		res, err := e.run(t, e.config(), h)
		if err != nil {
			t.Fatal(err)
		}
		three, two, storedV := `3`, `2`, `"stored"`
		assertRecords(t, e.records(t), map[string]stored{
			"a":    {Payload: &three, Partition: 0, Offset: 2},
			"b":    {Deleted: true, Partition: 1, Offset: 2},
			"c":    {Payload: &two, Partition: 0, Offset: 5},
			"kept": {Payload: &storedV, Partition: 1, Offset: 1000},
		})
		if res.Consumed != 6 || res.Tombstones != 2 || res.LiveKeys != 3 {
			t.Errorf("result %+v", res)
		}
	})
}

// seedEnv is the environment of a run of the seed's script for e (its env
// contract), without the parent's PG*/KAFKA* variables.
func (e *env) seedEnv(cfg Config, workDir string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "KAFKA_") || strings.HasPrefix(kv, EnvTopic+"=") {
			continue
		}
		out = append(out, kv)
	}
	return append(out,
		EnvTopic+"="+cfg.Topic,
		fmt.Sprintf("%s=%d", EnvMaxRecords, cfg.MaxRecords),
		fmt.Sprintf("%s=%d", EnvPollSeconds, cfg.PollSeconds),
		EnvKafkaProperties+"="+cfg.KafkaProperties,
		EnvPGDSN+"="+cfg.Postgres.DSN,
		EnvPGUser+"="+cfg.Postgres.User,
		EnvPGPassword+"="+cfg.Postgres.Password,
		kestra.EnvWorkingDir+"="+workDir,
	)
}

// runSeed runs the seed's script (parity/seeds/reference) for one batch of e's
// topic into e's database and returns its report.
func runSeed(t *testing.T, e *env, maxRecords int) map[string]any {
	t.Helper()
	vars := testenv.Lookup(t, "CHANGESINK_TEST_PYTHON")
	dir := t.TempDir()
	ctx := testCtx(t, 2*time.Minute)
	cmd := exec.CommandContext(ctx, vars["CHANGESINK_TEST_PYTHON"], filepath.Join(testenv.Seeds(t), "reference", "kafka_state_materialize.py"))
	cfg := e.config()
	cfg.MaxRecords = maxRecords
	cfg.PollSeconds = 5
	cmd.Env = e.seedEnv(cfg, dir)
	cmd.Dir = dir
	res, err := testenv.Run(cmd)
	if err != nil || res.Code != 0 {
		t.Fatalf("seed script: exit %d, %v\n%s", res.Code, err, res.Output())
	}
	raw, err := os.ReadFile(filepath.Join(dir, ReportFile))
	if err != nil {
		t.Fatalf("seed report: %v\n%s", err, res.Output())
	}
	var report map[string]any
	if err := json.Unmarshal(raw, &report); err != nil {
		t.Fatal(err)
	}
	return report
}

// TestSeedAndChangesinkTakeTurns runs the seed's own script and changesink
// alternately on one topic and one database: each continues from the
// positions the other wrote (same lock, same tables, same id forms), and the
// final tables hold every key's latest value.
func TestSeedAndChangesinkTakeTurns(t *testing.T) {
	e := newTopicEnv(t, 2)
	produce(t, e.kcl, e.topic, kv(0, "a", `{"v":1}`), kv(1, "b", `{"v":1}`), kv(0, "c", `{"v":1}`), kv(1, "d", `{"v":1}`))
	if r := runSeed(t, e, 2); r["consumed"] != 2.0 {
		t.Fatalf("seed batch 1: %v", r)
	}
	_, seedCluster, seedTopicID := e.positions(t)
	res := e.mustRun(t)
	if res.Consumed != 2 {
		t.Errorf("changesink after the seed consumed %d, want 2", res.Consumed)
	}
	if _, c, id := e.positions(t); c != seedCluster || id != seedTopicID {
		t.Errorf("changesink wrote ids %q %q, the seed %q %q", c, id, seedCluster, seedTopicID)
	}
	produceTx(t, e.brokers, e.topic, true, kv(0, "a", `{"v":2}`), tomb(1, "b"))
	produce(t, e.kcl, e.topic, kv(1, "e", `{"v":1}`))
	if r := runSeed(t, e, 100); r["consumed"] != 3.0 || r["tombstones"] != 1.0 {
		t.Fatalf("seed after changesink: %v", r)
	}
	seedNext, _, _ := e.positions(t)
	t.Logf("after a transaction, the seed stored next offsets %v; the partitions end at %v", seedNext, e.endOffsets(t))
	produce(t, e.kcl, e.topic, kv(0, "c", `{"v":2}`))
	if res := e.mustRun(t); res.Consumed != 1 || res.LiveKeys != 4 {
		t.Errorf("changesink after the seed: %+v", res)
	}
	v1, v2 := `{"v": 1}`, `{"v": 2}`
	got := e.records(t)
	for k, want := range map[string]*string{"a": &v2, "b": nil, "c": &v2, "d": &v1, "e": &v1} {
		g, ok := got[k]
		if !ok || (want == nil) != g.Deleted || (want != nil && (g.Payload == nil || *g.Payload != *want)) {
			t.Errorf("key %s = %s", k, describeStored(map[string]stored{k: g}))
		}
	}
	if _, err := Verify(testCtx(t, time.Minute), e.pg, e.topic); err != nil {
		t.Errorf("verify: %v", err)
	}
}

// TestMovedKeyBothStatements: the seed's moved-key rule with either merge
// statement. With MERGE a key stored at another partition is found by the
// merge itself (its first clause fails the statement, then the moved-key
// query names the key); a key read from two partitions of one batch is found
// before the merge. Each is refused naming the key, both occurrences and
// that nothing was committed, and changes nothing, also when the moved key
// is repeated in the batch (the dedupe source) or among many others.
func TestMovedKeyBothStatements(t *testing.T) {
	eachMergeStatement(t, func(t *testing.T, h hooks) {
		e := newTopicEnv(t, 3)
		var first []rec
		for i := range 300 {
			first = append(first, kv(int32(i%3), fmt.Sprintf("k%03d", i), `1`))
		}
		produce(t, e.kcl, e.topic, first...) // k000 at partition 0 offset 0, k001 at 1, ...
		e.mustRun(t)
		for _, tc := range []struct {
			name  string
			recs  []rec
			parts []string
		}{
			{"stored at another partition, among many", append(append([]rec{}, first[1:150]...), kv(1, "k000", `2`)),
				[]string{`key "k000"`, "stored in kafka_state.records at partition 0 offset 0", "read at partition 1 offset"}},
			{"stored at another partition, repeated in the batch", []rec{kv(2, "k001", `2`), kv(2, "k001", `3`), kv(0, "new", `1`)},
				[]string{`key "k001"`, "stored in kafka_state.records at partition 1 offset 0", "read at partition 2 offset"}},
			{"two partitions of this batch", []rec{kv(0, "fresh", `1`), kv(2, "fresh", `2`)},
				[]string{`key "fresh"`, "in this batch at partition 0"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				// Each case starts from the state after the first batch: the
				// records produced here stay in the topic, so the positions
				// are put back at its end first.
				e.exec(t, `UPDATE kafka_state.positions SET next_offsets = $2::jsonb WHERE topic = $1`, e.topic, endJSON(e.endOffsets(t)))
				at := e.snapshot(t)
				produce(t, e.kcl, e.topic, tc.recs...)
				_, err := e.run(t, e.config(), h)
				assertRefused(t, err, ErrKeyMovedPartitions, append(tc.parts, "nothing was committed")...)
				if after := e.snapshot(t); after != at {
					t.Errorf("a refused run changed the tables:\n%s\n%s", at, after)
				}
			})
		}
	})
}

// endJSON renders end offsets as next_offsets.
func endJSON(end map[string]int64) string {
	raw, _ := json.Marshal(end)
	return string(raw)
}

// TestMergePlanLooksKeysUp: under sqlPlanner the merge (both statements)
// and the moved-key query look each staged key up in the primary key index,
// also when kafka_state.records grew far past its statistics (analyzed with
// one row, then 20,000 more): without the settings the merge read the whole
// table into a hash join, and with only hash joins off such a table was
// scanned once per staged key. The plans are read with EXPLAIN on the real
// server, inside a transaction that is rolled back.
func TestMergePlanLooksKeysUp(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t, 2*time.Minute)
	conn := e.conn(t)
	if _, err := conn.Exec(ctx, `INSERT INTO kafka_state.records VALUES ('t', 'k', '1', false, 0, 0)`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `ANALYZE kafka_state.records`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO kafka_state.records SELECT 't', 'k' || i, '1', false, 0, 0 FROM generate_series(1, 20000) i`); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	for _, q := range []string{sqlTempBuffers, sqlCreateStaging,
		`INSERT INTO pg_temp.` + stagingTable + ` SELECT 'k' || (i * 7), '2', 0, 1 FROM generate_series(1, 20000) i`,
		sqlStatisticsTarget, sqlAnalyzeStaging, sqlPlanner} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for name, q := range map[string]string{
		"MERGE":              mergeSQL(true, false, true),
		"MERGE, dedupe":      mergeSQL(true, true, true),
		"ON CONFLICT":        mergeSQL(false, false, true),
		"ON CONFLICT dedupe": mergeSQL(false, true, true),
		"moved-key query":    sqlMovedKey,
	} {
		rows, err := tx.Query(ctx, "EXPLAIN "+q, "t")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plan strings.Builder
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan.WriteString(line + "\n")
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p := plan.String()
		for _, bad := range []string{"Seq Scan on records", "Hash Join", "Merge Join", "Materialize"} {
			if strings.Contains(p, bad) {
				t.Errorf("%s: %s in the plan:\n%s", name, bad, p)
			}
		}
		if name != "ON CONFLICT" && name != "ON CONFLICT dedupe" && !strings.Contains(p, "Index Scan using records_pkey on records r") {
			t.Errorf("%s does not look keys up in records_pkey:\n%s", name, p)
		}
	}
}
