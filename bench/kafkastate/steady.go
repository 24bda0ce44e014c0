package main

// The steady-state mode, which asks whether a batch costs more as the table
// it merges into grows: batches of -records records into a
// kafka_state.records table that already holds N keys of the topic, half of
// each batch updating stored keys spread over the whole key space and half
// adding new keys, against the same batches into an empty table,
// with the physical reference measured the same way (raw COPY of as many new
// rows into the same table, committed).

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/changesink/changesink/bench/internal/benchrun"
	"github.com/changesink/changesink/tasks/kafkastate"
)

// keyScramble spreads consecutive key indexes over the whole key space in
// btree order (multiplication by an odd constant is a bijection mod 2^32),
// so neither the stored keys nor a batch's keys arrive in index order. The
// SQL of preload computes the same keys.
const keyScramble = 2654435761

func steadyKey(idx uint64) string {
	return fmt.Sprintf("customer-%010d", idx*keyScramble%(1<<32))
}

// sqlPreload fills kafka_state.records with keys 0..$2-1 of topic $1 as
// steadyKey and benchValue make them, partition idx % $3, offset 0.
const sqlPreload = `INSERT INTO kafka_state.records (topic, record_key, payload, deleted, kafka_partition, kafka_offset)
SELECT $1, 'customer-' || lpad(((i * 2654435761) % 4294967296)::text, 10, '0'),
  format('{"id":%s,"name":"Customer %s","email":"customer%s@example.com","tier":"gold","balance":%s.%s,"active":true,"tags":["a","b","c"],"city":"Lisbon","pad":"%s"}',
    i, lpad(i::text, 7, '0'), lpad(i::text, 7, '0'), i * 37 % 100000, lpad((i % 100)::text, 2, '0'), repeat('x', 40))::jsonb,
  false, (i % $3)::int, 0
FROM generate_series(0::bigint, $2::bigint - 1) AS i`

// steadyRun is one timed batch.
type steadyRun struct {
	changesink, copy time.Duration
	rssKB            int64
	phases           string
}

// steadySize is the result of one table size.
type steadySize struct {
	keys int
	runs []steadyRun
}

func (s steadySize) mean(f func(steadyRun) time.Duration) time.Duration {
	var sum time.Duration
	for _, r := range s.runs {
		sum += f(r)
	}
	return sum / time.Duration(len(s.runs))
}

// runSteady runs the steady-state mode for every size (0 = the empty-table
// base, always run first) with batches batches of n records each.
func runSteady(ctx context.Context, e env, bin string, sizes []int, n, batches int, partitions int32) error {
	fmt.Printf("\nsteady state: batches of %d records (half updates of stored keys, half new keys; all new into the empty table), %d batches per size, %d partitions; load average %s\n",
		n, batches, partitions, benchrun.LoadAvg())
	var results []steadySize
	for _, keys := range append([]int{0}, sizes...) {
		r, err := steadyOne(ctx, e, bin, keys, n, batches, partitions)
		if err != nil {
			return fmt.Errorf("steady state with %d keys: %w", keys, err)
		}
		results = append(results, r)
	}
	base := results[0]
	csBase, copyBase := base.mean(func(r steadyRun) time.Duration { return r.changesink }), base.mean(func(r steadyRun) time.Duration { return r.copy })
	fmt.Printf("\nsteady state summary (means over %d batches; load average now %s)\n", batches, benchrun.LoadAvg())
	fmt.Printf("%-12s %14s %10s %14s %10s %16s %10s\n", "stored keys", "changesink s", "vs empty", "raw COPY s", "vs empty", "changesink/COPY", "peak RSS")
	for _, r := range results {
		cs, cp := r.mean(func(r steadyRun) time.Duration { return r.changesink }), r.mean(func(r steadyRun) time.Duration { return r.copy })
		var rss int64
		for _, run := range r.runs {
			rss = max(rss, run.rssKB)
		}
		fmt.Printf("%-12d %14.2f %9.2fx %14.2f %9.2fx %16.2f %7.1f MB\n", r.keys, cs.Seconds(), cs.Seconds()/csBase.Seconds(),
			cp.Seconds(), cp.Seconds()/copyBase.Seconds(), float64(n)/cs.Seconds()/(float64(n)/cp.Seconds()), float64(rss)/1024)
	}
	fmt.Println("(changesink/COPY is throughput, as in the targets above: changesink records/s over raw COPY rows/s into the same table)")
	return nil
}

// steadyOne prepares a database holding keys stored keys and a topic with
// batches rounds of n records, then times each round: changesink's batch,
// then a raw COPY of n new rows into the same table (deleted again, untimed).
func steadyOne(ctx context.Context, e env, bin string, keys, n, batches int, partitions int32) (steadySize, error) {
	out := steadySize{keys: keys}
	suffix := fmt.Sprintf("%d_%d", keys, time.Now().UnixNano()%1e9)
	topic := "bench_kafka_state_steady_" + suffix
	kcl, adm, closeTopic, err := openTopic(ctx, e.brokers, topic, partitions)
	if err != nil {
		return out, err
	}
	defer closeTopic()
	dsn, drop, err := createDatabase(ctx, e.adminPG, "bench_steady_"+suffix)
	if err != nil {
		return out, err
	}
	defer drop()
	props := fmt.Sprintf(`{"bootstrap.servers":%q}`, e.brokers)
	setup := execCommand(ctx, bin, batchEnv(topic, n, 60, props, dsn), "kafka-state", "setup")
	if o, err := setup.CombinedOutput(); err != nil {
		return out, fmt.Errorf("changesink setup: %v\n%s", err, o)
	}

	// One record per partition first, so every record of the rounds has an
	// offset above the stored rows' 0 and its update applies.
	var prefix []row
	for p := range partitions {
		prefix = append(prefix, row{topic: topic, key: fmt.Sprintf("prefix-%d", p), value: []byte(`{}`), partition: p})
	}
	if err := produce(ctx, kcl, prefix); err != nil {
		return out, err
	}
	start := time.Now()
	for b := range batches {
		if err := produce(ctx, kcl, steadyRows(topic, keys, n, b, partitions)); err != nil {
			return out, err
		}
	}
	fmt.Printf("\n[%d stored keys] produced %d rounds of %d records to %s in %s\n", keys, batches, n, topic, time.Since(start).Round(time.Millisecond))

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return out, err
	}
	defer conn.Close(context.Background())
	if keys > 0 {
		start := time.Now()
		if err := preload(ctx, conn, topic, keys, partitions); err != nil {
			return out, fmt.Errorf("preload: %w", err)
		}
		var size string
		if err := conn.QueryRow(ctx, `SELECT pg_size_pretty(pg_total_relation_size('kafka_state.records'))`).Scan(&size); err != nil {
			return out, err
		}
		fmt.Printf("[%d stored keys] loaded server-side (generate_series; primary key built after; VACUUM ANALYZE) in %s: kafka_state.records is %s\n",
			keys, time.Since(start).Round(time.Second), size)
	}
	if err := savePositions(ctx, conn, adm, topic, partitions); err != nil {
		return out, err
	}

	copyBase := uint64(keys) + uint64(batches*n) // raw COPY keys: beyond every changesink key
	for b := range batches {
		var run steadyRun
		// The physical reference: n new rows into the same table, committed.
		if keys == 0 {
			if _, err := conn.Exec(ctx, `TRUNCATE kafka_state.records`); err != nil {
				return out, err
			}
		}
		if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
			return out, err
		}
		copyRows := make([]row, n)
		for j := range copyRows {
			idx := copyBase + uint64(b*n+j)
			copyRows[j] = row{topic: topic, key: steadyKey(idx), value: benchValue(idx), partition: int32(idx % uint64(partitions))}
		}
		if run.copy, err = copyInto(ctx, conn, "kafka_state.records", copyRows); err != nil {
			return out, fmt.Errorf("raw COPY: %w", err)
		}
		// Take the reference rows out again (untimed), so every batch meets
		// the same table.
		if keys == 0 {
			_, err = conn.Exec(ctx, `TRUNCATE kafka_state.records`)
		} else {
			_, err = conn.Exec(ctx, `DELETE FROM kafka_state.records WHERE topic = $1 AND kafka_offset = 0 AND record_key = ANY($2)`, topic, keysOf(copyRows))
			if err == nil {
				_, err = conn.Exec(ctx, `VACUUM kafka_state.records`)
			}
		}
		if err != nil {
			return out, err
		}
		if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
			return out, err
		}
		env := append(batchEnv(topic, n, 60, props, dsn), "CHANGESINK_LOG_LEVEL=DEBUG")
		res, rss, output, err := e.timeProcessOutput(ctx, bin, []string{"kafka-state", "materialize"}, env)
		if err != nil {
			return out, fmt.Errorf("changesink batch %d: %w", b+1, err)
		}
		if res.consumed != int64(n) {
			return out, fmt.Errorf("changesink batch %d consumed %d of %d records", b+1, res.consumed, n)
		}
		run.changesink, run.rssKB, run.phases = res.elapsed, rss, phasesLine(output)
		out.runs = append(out.runs, run)
		fmt.Printf("[%d stored keys] batch %d: changesink %.2f s (%.0f records/s, %.1f MB), raw COPY %.2f s (%.0f rows/s): changesink/COPY %.2f\n    %s\n",
			keys, b+1, run.changesink.Seconds(), float64(n)/run.changesink.Seconds(), float64(rss)/1024,
			run.copy.Seconds(), float64(n)/run.copy.Seconds(), run.copy.Seconds()/run.changesink.Seconds(), run.phases)
	}
	return out, nil
}

// steadyRows is round b of n records: with keys stored, the first half
// updates stored keys spread over all of them (each stored key at most once
// over all rounds while they last), the second half adds new keys; with
// none stored, every key is new. A key's partition is its index modulo the
// partitions, as preload stores it.
func steadyRows(topic string, keys, n, b int, partitions int32) []row {
	rows := make([]row, n)
	updates := 0
	if keys > 0 {
		updates = n / 2
	}
	stride := coprimeStride(uint64(keys))
	for j := range rows {
		var idx uint64
		if j < updates {
			idx = uint64(b*updates+j) % uint64(keys) * stride % uint64(keys)
		} else {
			idx = uint64(keys) + uint64(b*(n-updates)+j-updates)
		}
		rows[j] = row{topic: topic, key: steadyKey(idx), value: benchValue(idx), partition: int32(idx % uint64(partitions))}
	}
	return rows
}

// coprimeStride returns a multiplier coprime to n, so i*stride mod n visits
// every index below n once.
func coprimeStride(n uint64) uint64 {
	if n < 2 {
		return 1
	}
	s := uint64(keyScramble) % n
	for gcd(s, n) != 1 {
		s++
	}
	return s
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// preload loads keys rows server-side: the primary key is dropped for the
// load and built after it, then the table is vacuumed and analyzed, as a
// table autovacuum keeps would be.
func preload(ctx context.Context, conn *pgx.Conn, topic string, keys int, partitions int32) error {
	for _, q := range []string{
		`SET maintenance_work_mem = '512MB'`,
		`ALTER TABLE kafka_state.records DROP CONSTRAINT records_pkey`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return err
		}
	}
	if _, err := conn.Exec(ctx, sqlPreload, topic, keys, partitions); err != nil {
		return err
	}
	for _, q := range []string{
		`ALTER TABLE kafka_state.records ADD CONSTRAINT records_pkey PRIMARY KEY (topic, record_key)`,
		`VACUUM (ANALYZE) kafka_state.records`,
		`RESET maintenance_work_mem`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// savePositions writes the topic's positions row as a batch that read the
// prefix records would have: next offset 1 on every partition.
func savePositions(ctx context.Context, conn *pgx.Conn, adm *kadm.Client, topic string, partitions int32) error {
	m, err := adm.Metadata(ctx, topic)
	if err != nil {
		return err
	}
	next := kafkastate.Offsets{}
	for p := range partitions {
		next[p] = 1
	}
	raw, _ := next.MarshalJSON()
	_, err = conn.Exec(ctx, `INSERT INTO kafka_state.positions (topic, cluster_id, topic_id, next_offsets) VALUES ($1, $2, $3, $4::jsonb)`,
		topic, m.Cluster, kafkastate.TopicIDText(m.Topics[topic].ID), string(raw))
	return err
}

func keysOf(rows []row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.key
	}
	return out
}

// phasesLine returns the text of changesink's debug line with the phase
// timings.
func phasesLine(output []byte) string {
	for _, line := range strings.Split(string(output), "\n") {
		if i := strings.Index(line, "kafka-state: phases "); i >= 0 {
			return strings.TrimSpace(line[i:])
		}
	}
	return "(no phases line)"
}

// parseSizes reads -steady: a comma-separated list of stored key counts.
func parseSizes(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(f), &n); err != nil || n < 1 || n > math.MaxInt32 {
			return nil, fmt.Errorf("-steady: %q is not a key count (1..%d)", f, math.MaxInt32)
		}
		out = append(out, n)
	}
	sort.Ints(out)
	return out, nil
}
