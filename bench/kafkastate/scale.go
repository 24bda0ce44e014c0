package main

// The scale mode (-scale N): a topic of N records caught up from empty by
// one drain (DRAIN_SECONDS, whole topic) and by 1, 2 and 4 shards
// (SHARD i/n, one process each, at once) against one PostgreSQL, each into
// a fresh database, beside a raw COPY of the same N rows into a
// records-shaped table measured in the same run; the lag of every run,
// sampled while it drains, drawn into a PNG (lagplot.go).

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/changesink/changesink/bench/internal/benchrun"
	"github.com/changesink/changesink/tasks/kafkastate"
)

// scaleRow is record i of the scale topic: a key of its own, scrambled
// (stride coprime with n) so that neither the topic nor COPY delivers keys
// in index order, a value of about 200 bytes, round-robin partitions, and
// the offset it gets when one producer writes the records in order.
func scaleRow(topic string, i, n uint64, stride uint64, partitions int32) row {
	k := i * stride % n
	return row{topic: topic, key: fmt.Sprintf("customer-%09d", k), value: benchValue(k),
		partition: int32(i % uint64(partitions)), offset: int64(i / uint64(partitions))}
}

// scaleRun is one way of catching the topic up: a drain of the whole topic
// (shards 0) or n shards at once.
type scaleRun struct {
	name     string
	shards   int
	consumed int64
	batches  int64
	elapsed  time.Duration
	maxRSS   int64
	// lag samples: seconds since the start, records not yet committed.
	lag []lagPoint
}

type lagPoint struct {
	at  float64
	lag int64
}

// scaleMain checks the scale mode's settings and environment and runs it.
func scaleMain(bin string, n int, partitions int32, shards, pngPath string, verbose bool) error {
	if bin == "" {
		return fmt.Errorf("-bin is required")
	}
	counts, err := parseCounts(shards)
	if err != nil {
		return err
	}
	vars, err := getenv("CHANGESINK_TEST_KAFKA", "CHANGESINK_TEST_PG")
	if err != nil {
		return err
	}
	e := env{brokers: vars["CHANGESINK_TEST_KAFKA"], adminPG: vars["CHANGESINK_TEST_PG"], verbose: verbose}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Hour)
	defer cancel()
	return runScale(ctx, e, bin, n, partitions, counts, pngPath)
}

func runScale(ctx context.Context, e env, bin string, n int, partitions int32, shardCounts []int, pngPath string) error {
	suffix := fmt.Sprintf("%d", time.Now().UnixNano()%1e9)
	topic := "bench_kafka_state_scale_" + suffix
	kcl, _, closeTopic, err := openTopic(ctx, e.brokers, topic, partitions)
	if err != nil {
		return err
	}
	defer closeTopic()
	fmt.Printf("load average at the start: %s\n", benchrun.LoadAvg())
	stride := coprimeStride(uint64(n))
	start := time.Now()
	if err := produceScale(ctx, kcl, topic, n, stride, partitions); err != nil {
		return err
	}
	fmt.Printf("produced %d records (~200 bytes of JSON, unique scrambled keys) over %d partitions of %s in %s (%.0f records/s)\n",
		n, partitions, topic, time.Since(start).Round(time.Millisecond), float64(n)/time.Since(start).Seconds())

	copyTook, err := scaleCopy(ctx, e, suffix, topic, n, stride, partitions)
	if err != nil {
		return err
	}
	copyRate := float64(n) / copyTook.Seconds()
	fmt.Printf("raw COPY of the %d rows into a records-shaped table (primary key), one transaction: %.1f s, %.0f rows/s\n",
		n, copyTook.Seconds(), copyRate)

	runs := []*scaleRun{{name: "one drain (whole topic)"}}
	for _, s := range shardCounts {
		runs = append(runs, &scaleRun{name: fmt.Sprintf("%d shard(s) at once", s), shards: s})
	}
	for _, r := range runs {
		if err := e.scaleOne(ctx, bin, topic, suffix, n, r); err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		fmt.Printf("%-26s %9d records in %6.1f s: %8.0f records/s, %.2f x raw COPY; %d batches; peak RSS %.1f MB (load %s)\n",
			r.name, r.consumed, r.elapsed.Seconds(), float64(r.consumed)/r.elapsed.Seconds(),
			float64(r.consumed)/r.elapsed.Seconds()/copyRate, r.batches, float64(r.maxRSS)/1024, benchrun.LoadAvg())
	}
	if pngPath != "" {
		if err := writeLagPlot(pngPath, fmt.Sprintf("kafka-state: lag while %d records are caught up (%d partitions)", n, partitions), runs); err != nil {
			return err
		}
		fmt.Printf("lag over each run: %s\n", pngPath)
	}
	return nil
}

// produceScale writes the n records of the scale topic, in order per
// partition (one producer, idempotent), so that record i lands at offset
// i/partitions of partition i%partitions.
func produceScale(ctx context.Context, cl *kgo.Client, topic string, n int, stride uint64, partitions int32) error {
	var (
		mu       sync.Mutex
		firstErr error
	)
	for i := range uint64(n) {
		r := scaleRow(topic, i, uint64(n), stride, partitions)
		cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: r.partition, Key: []byte(r.key), Value: r.value}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				firstErr = cmpErr(firstErr, err)
				mu.Unlock()
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	return firstErr
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// scaleCopy times a binary COPY of the n rows, generated as the topic's
// records are, into a records-shaped table (primary key and checks of
// kafka_state.records) in one transaction, commit included, in a database
// of its own (dropped after).
func scaleCopy(ctx context.Context, e env, suffix, topic string, n int, stride uint64, partitions int32) (time.Duration, error) {
	dsn, drop, err := createDatabase(ctx, e.adminPG, "bench_scale_copy_"+suffix)
	if err != nil {
		return 0, err
	}
	defer drop()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE copy_pk (topic text NOT NULL, record_key text NOT NULL, payload jsonb, deleted boolean NOT NULL,
  kafka_partition integer NOT NULL, kafka_offset bigint NOT NULL CHECK (kafka_offset >= 0),
  PRIMARY KEY (topic, record_key), CHECK (deleted = (payload IS NULL)))`); err != nil {
		return 0, err
	}
	if err := benchrun.ExecSQL(ctx, e.adminPG, "CHECKPOINT"); err != nil {
		return 0, err
	}
	start := time.Now()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx)
	i := uint64(0)
	copied, err := tx.CopyFrom(ctx, pgx.Identifier{"copy_pk"}, []string{"topic", "record_key", "payload", "deleted", "kafka_partition", "kafka_offset"},
		pgx.CopyFromFunc(func() ([]any, error) {
			if i == uint64(n) {
				return nil, nil
			}
			r := scaleRow(topic, i, uint64(n), stride, partitions)
			i++
			return []any{r.topic, r.key, r.value, false, r.partition, r.offset}, nil
		}))
	if err != nil {
		return 0, err
	}
	if copied != int64(n) {
		return 0, fmt.Errorf("copied %d of %d rows", copied, n)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// scaleOne catches the topic up into a fresh database as r says (one
// drain, or r.shards processes at once, each SHARD i/n), sampling the lag
// every 250 ms, and checks that every record was consumed and none is
// left.
func (e env) scaleOne(ctx context.Context, bin, topic, suffix string, n int, r *scaleRun) error {
	dsn, drop, err := createDatabase(ctx, e.adminPG, fmt.Sprintf("bench_scale_%d_%s", r.shards, suffix))
	if err != nil {
		return err
	}
	defer drop()
	props := fmt.Sprintf(`{"bootstrap.servers":%q}`, e.brokers)
	envFor := func(shard string) []string {
		env := append(batchEnv(topic, kafkastate.MaxMaxRecords, 10, props, dsn), kafkastate.EnvDrainSeconds+"=3600")
		if shard != "" {
			env = append(env, kafkastate.EnvShard+"="+shard)
		}
		return env
	}
	setup := execCommand(ctx, bin, envFor(""), "kafka-state", "setup")
	if out, err := setup.CombinedOutput(); err != nil {
		return fmt.Errorf("setup: %v\n%s", err, out)
	}
	if err := benchrun.ExecSQL(ctx, e.adminPG, "CHECKPOINT"); err != nil {
		return err
	}
	shards := []string{""}
	if r.shards > 0 {
		shards = nil
		for i := range r.shards {
			shards = append(shards, fmt.Sprintf("%d/%d", i, r.shards))
		}
	}
	sctx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan []lagPoint, 1)
	start := time.Now()
	go func() { sampled <- sampleLag(sctx, dsn, topic, int64(n), start) }()
	procs := make([]benchrun.Process, len(shards))
	errs := make([]error, len(shards))
	var wg sync.WaitGroup
	for i, s := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dir, err := os.MkdirTemp("", "bench-kafka-state-scale-*")
			if err != nil {
				errs[i] = err
				return
			}
			defer os.RemoveAll(dir)
			procs[i], errs[i] = benchrun.Run(ctx, dir, append(envFor(s), "WORKING_DIR="+dir), bin, "kafka-state", "materialize")
		}()
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	stopSampling()
	r.lag = <-sampled
	for i, p := range procs {
		if errs[i] != nil {
			return errs[i]
		}
		out, err := outputsOf(p.Output)
		if err != nil {
			return err
		}
		if out.LagTotal != 0 {
			return fmt.Errorf("shard %q ended with lag %d", shards[i], out.LagTotal)
		}
		r.consumed += out.Consumed
		r.batches += out.Batches
		r.maxRSS = max(r.maxRSS, p.MaxRSSKiB)
		if e.verbose {
			fmt.Printf("--- shard %q\n%s", shards[i], p.Output)
		}
	}
	r.lag = append(r.lag, lagPoint{at: r.elapsed.Seconds(), lag: 0})
	if r.consumed != int64(n) {
		return fmt.Errorf("consumed %d of %d records", r.consumed, n)
	}
	return nil
}

// runOutputs are the outputs of a materialize the benchmark reads.
type runOutputs struct {
	Consumed int64 `json:"consumed"`
	Batches  int64 `json:"batches"`
	LagTotal int64 `json:"lag_total"`
}

// outputsOf reads the ::{"outputs":...}:: line of a run's output.
func outputsOf(output []byte) (runOutputs, error) {
	for _, line := range strings.Split(string(output), "\n") {
		if rest, ok := strings.CutPrefix(line, `::{"outputs":`); ok {
			var o runOutputs
			if err := json.Unmarshal([]byte(strings.TrimSuffix(rest, "}::")), &o); err != nil {
				return o, fmt.Errorf("outputs line %q: %w", line, err)
			}
			return o, nil
		}
	}
	return runOutputs{}, fmt.Errorf("no outputs line in:\n%s", output)
}

// sampleLag reads, every 250 ms until ctx ends, how many of the n records
// are not committed yet: n less the sum of the committed next offsets
// (kafka_state.positions; no row yet: all of them).
func sampleLag(ctx context.Context, dsn, topic string, n int64, start time.Time) []lagPoint {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil
	}
	defer conn.Close(context.Background())
	var out []lagPoint
	for {
		var done int64
		err := conn.QueryRow(ctx, `SELECT coalesce((SELECT sum(value::bigint) FROM kafka_state.positions, jsonb_each_text(next_offsets) WHERE topic = $1), 0)`, topic).Scan(&done)
		if err == nil {
			out = append(out, lagPoint{at: time.Since(start).Seconds(), lag: n - done})
		}
		select {
		case <-ctx.Done():
			return out
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// parseCounts reads -scale-shards: comma-separated shard counts, 1..64.
func parseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		var c int
		if _, err := fmt.Sscanf(strings.TrimSpace(f), "%d", &c); err != nil || c < 1 || c > 64 {
			return nil, fmt.Errorf("-scale-shards: %q is not a shard count 1..64", f)
		}
		out = append(out, c)
	}
	return slices.Compact(out), nil
}
