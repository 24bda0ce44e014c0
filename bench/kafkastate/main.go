// Command benchkafkastate is the benchmark behind .ci/bench-kafka-state. In
// one run, on the same broker and PostgreSQL server, it produces N records
// (about 200 bytes of JSON each, unique keys) over 6 partitions of a fresh
// topic once, then times:
//
//   - the seed script (parity/seeds/reference/kafka_state_materialize.py, run
//     with CHANGESINK_TEST_PYTHON) into database A;
//   - the changesink binary (kafka-state materialize) into database B, with
//     its peak RSS;
//   - a raw COPY of the same N rows (pgx CopyFrom, binary) into a plain table
//     with the columns of kafka_state.records and no constraint (the limit),
//     and into a table shaped like kafka_state.records, primary key included
//     (the reference the target is set against: a COPY that maintains the
//     same primary key index kafka_state.records does).
//
// and prints records/s for each and the ratios; with -steady, then the
// steady-state mode of steady.go. Every run is one batch of
// MAX_RECORDS=N; wall times include process start-up, connecting and the
// commit. A CHECKPOINT before each timed run keeps one run's dirty buffers
// and WAL from being paid by the next. It reads the env vars of .ci/env and cleans up its topic and
// databases.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/changesink/changesink/bench/internal/benchrun"
	"github.com/changesink/changesink/internal/kafkatest"
	"github.com/changesink/changesink/tasks/kafkastate"
)

func main() {
	bin := flag.String("bin", "", "the changesink binary to time")
	n := flag.Int("records", 100000, "records to produce and materialize (1..100000)")
	partitions := flag.Int("partitions", 6, "partitions of the benchmark topic")
	skipSeed := flag.Bool("skip-seed", false, "do not time the seed script")
	steady := flag.String("steady", "", "steady-state mode after the main run: comma-separated counts of keys already stored (e.g. 1000000,10000000)")
	batches := flag.Int("batches", 3, "steady-state mode: timed batches per table size")
	verbose := flag.Bool("v", false, "print changesink's output (set CHANGESINK_LOG_LEVEL=DEBUG for its phase timings)")
	scale := flag.Int("scale", 0, "scale mode instead of the main run: a topic of this many records caught up by one drain and by shards (scale.go)")
	scaleShards := flag.String("scale-shards", "1,2,4", "scale mode: the shard counts to run, comma-separated")
	pngPath := flag.String("png", "", "scale mode: write the lag over each run into this PNG")
	flag.Parse()
	sizes, err := parseSizes(*steady)
	if err == nil && (*batches < 1 || *batches > 20) {
		err = errors.New("-batches must be 1..20")
	}
	switch {
	case err != nil:
	case *scale > 0:
		err = scaleMain(*bin, *scale, int32(*partitions), *scaleShards, *pngPath, *verbose)
	default:
		err = run(*bin, *n, int32(*partitions), *skipSeed, sizes, *batches, *verbose)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-kafka-state:", err)
		os.Exit(1)
	}
}

type env struct {
	brokers, adminPG, python, seeds string
	// verbose prints the timed processes' output.
	verbose bool
}

func getenv(names ...string) (map[string]string, error) {
	out := map[string]string{}
	for _, n := range names {
		v := os.Getenv(n)
		if v == "" {
			return nil, fmt.Errorf("%s is not set; source .ci/env after .ci/services", n)
		}
		out[n] = v
	}
	return out, nil
}

func run(bin string, n int, partitions int32, skipSeed bool, steady []int, batches int, verbose bool) error {
	if bin == "" {
		return errors.New("-bin is required")
	}
	if n < 1 || n > 100000 {
		return errors.New("-records must be 1..100000 (the seed's MAX_RECORDS range)")
	}
	names := []string{"CHANGESINK_TEST_KAFKA", "CHANGESINK_TEST_PG"}
	if !skipSeed {
		names = append(names, "CHANGESINK_TEST_PYTHON", "CHANGESINK_TEST_SEEDS")
	}
	vars, err := getenv(names...)
	if err != nil {
		return err
	}
	e := env{brokers: vars["CHANGESINK_TEST_KAFKA"], adminPG: vars["CHANGESINK_TEST_PG"], python: vars["CHANGESINK_TEST_PYTHON"], seeds: vars["CHANGESINK_TEST_SEEDS"],
		verbose: verbose}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute+time.Duration(len(steady))*45*time.Minute)
	defer cancel()
	suffix := fmt.Sprintf("%d", time.Now().UnixNano()%1e9)
	topic := "bench_kafka_state_" + suffix

	kcl, _, closeTopic, err := openTopic(ctx, e.brokers, topic, partitions)
	if err != nil {
		return err
	}
	defer closeTopic()

	rows := makeRows(topic, n, partitions)
	start := time.Now()
	if err := produce(ctx, kcl, rows); err != nil {
		return err
	}
	var bytes int
	for _, r := range rows {
		bytes += len(r.value)
	}
	fmt.Printf("produced %d records (%.0f bytes of JSON on average) over %d partitions of %s in %s\n",
		n, float64(bytes)/float64(n), partitions, topic, time.Since(start).Round(time.Millisecond))

	dbs := map[string]string{}
	for _, name := range []string{"seed", "changesink", "copy"} {
		dsn, drop, err := createDatabase(ctx, e.adminPG, "bench_"+name+"_"+suffix)
		if err != nil {
			return err
		}
		defer drop()
		dbs[name] = dsn
	}
	props := fmt.Sprintf(`{"bootstrap.servers":%q}`, e.brokers)

	type result struct {
		name     string
		records  int64
		elapsed  time.Duration
		maxRSSKB int64
	}
	var results []result

	// Raw COPY of the same rows.
	if err := benchrun.ExecSQL(ctx, e.adminPG, "CHECKPOINT"); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	plain, withPK, err := rawCopy(ctx, dbs["copy"], rows)
	if err != nil {
		return fmt.Errorf("raw COPY: %w", err)
	}
	results = append(results, result{"raw COPY, plain table (no constraints)", int64(n), plain, 0}, result{"raw COPY, table shaped like records (PK)", int64(n), withPK, 0})

	// changesink.
	setup := exec.CommandContext(ctx, bin, "kafka-state", "setup")
	setup.Env = batchEnv(topic, n, 60, props, dbs["changesink"])
	if out, err := setup.CombinedOutput(); err != nil {
		return fmt.Errorf("changesink setup: %v\n%s", err, out)
	}
	if err := benchrun.ExecSQL(ctx, e.adminPG, "CHECKPOINT"); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	r, rss, err := e.timeProcess(ctx, bin, []string{"kafka-state", "materialize"}, batchEnv(topic, n, 60, props, dbs["changesink"]))
	if err != nil {
		return fmt.Errorf("changesink: %w", err)
	}
	results = append(results, result{"changesink kafka-state materialize", r.consumed, r.elapsed, rss})
	csRSS := rss
	if r.consumed != int64(n) {
		return fmt.Errorf("changesink consumed %d of %d records", r.consumed, n)
	}

	// The seed script.
	if !skipSeed {
		ddl, err := seedDDL(filepath.Join(e.seeds, "kafka-compacted-postgres-state.yaml"))
		if err != nil {
			return err
		}
		if err := benchrun.ExecSQL(ctx, dbs["seed"], ddl); err != nil {
			return fmt.Errorf("seed DDL: %w", err)
		}
		if err := benchrun.ExecSQL(ctx, e.adminPG, "CHECKPOINT"); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		script := filepath.Join(e.seeds, "reference", "kafka_state_materialize.py")
		r, rss, err := e.timeProcess(ctx, e.python, []string{script}, batchEnv(topic, n, 60, props, dbs["seed"]))
		if err != nil {
			return fmt.Errorf("seed script: %w", err)
		}
		results = append(results, result{"seed (Python, confluent-kafka, psycopg)", r.consumed, r.elapsed, rss})
	}

	fmt.Println()
	fmt.Printf("%-42s %9s %10s %12s %12s\n", "run", "records", "seconds", "records/s", "peak RSS")
	rate := map[string]float64{}
	for _, r := range results {
		rs := float64(r.records) / r.elapsed.Seconds()
		rate[r.name] = rs
		mem := "-"
		if r.maxRSSKB > 0 {
			mem = fmt.Sprintf("%.1f MB", float64(r.maxRSSKB)/1024)
		}
		fmt.Printf("%-42s %9d %10.2f %12.0f %12s\n", r.name, r.records, r.elapsed.Seconds(), rs, mem)
	}
	cs := rate["changesink kafka-state materialize"]
	fmt.Println()
	fmt.Printf("changesink / raw COPY into a records-shaped table:   %.2f   (target >= 0.50; the reference COPY maintains the primary key kafka_state.records has)\n", cs/rate["raw COPY, table shaped like records (PK)"])
	fmt.Printf("changesink / raw COPY into a plain table:            %.2f   (no index to maintain: a bound below the target's reference)\n", cs/rate["raw COPY, plain table (no constraints)"])
	if !skipSeed {
		fmt.Printf("changesink / seed:                                   %.1fx  (target >= 15x)\n", cs/rate["seed (Python, confluent-kafka, psycopg)"])
	}
	fmt.Printf("changesink peak RSS:                                 %.1f MB (target < 100 MB)\n", float64(csRSS)/1024)
	if len(steady) > 0 {
		return runSteady(ctx, e, bin, steady, n, batches, partitions)
	}
	return nil
}

type row struct {
	topic     string
	key       string
	value     []byte
	partition int32
	offset    int64
}

// makeRows builds n records of about 200 bytes of JSON with unique keys,
// spread round-robin over the partitions.
func makeRows(topic string, n int, partitions int32) []row {
	rows := make([]row, n)
	for i := range rows {
		rows[i] = row{topic: topic, key: fmt.Sprintf("customer-%07d", i), value: benchValue(uint64(i)), partition: int32(i) % partitions}
	}
	return rows
}

// benchValue is the JSON value of record idx, about 200 bytes, in the main
// run and the steady-state mode alike (sqlPreload writes the same in SQL).
func benchValue(idx uint64) []byte {
	return fmt.Appendf(nil, `{"id":%d,"name":"Customer %07d","email":"customer%07d@example.com","tier":"gold","balance":%d.%02d,"active":true,"tags":["a","b","c"],"city":"Lisbon","pad":"%s"}`,
		idx, idx, idx, idx*37%100000, idx%100, strings.Repeat("x", 40))
}

func produce(ctx context.Context, cl *kgo.Client, rows []row) error {
	recs := make([]*kgo.Record, len(rows))
	for i := range rows {
		recs[i] = &kgo.Record{Topic: rows[i].topic, Partition: rows[i].partition, Key: []byte(rows[i].key), Value: rows[i].value}
	}
	for i := 0; i < len(recs); i += 10000 {
		if err := cl.ProduceSync(ctx, recs[i:min(i+10000, len(recs))]...).FirstErr(); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	for i, r := range recs {
		rows[i].offset = r.Offset
	}
	return nil
}

// openTopic connects a producing client (partitions chosen by the records)
// to the brokers and creates topic, compacted, with the given partitions,
// waiting for their leaders; closeTopic deletes the topic and closes the
// client.
func openTopic(ctx context.Context, brokers, topic string, partitions int32) (*kgo.Client, *kadm.Client, func(), error) {
	kcl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		return nil, nil, nil, err
	}
	adm := kadm.NewClient(kcl)
	if _, err := adm.CreateTopic(ctx, partitions, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, topic); err != nil {
		kcl.Close()
		return nil, nil, nil, fmt.Errorf("create topic: %w", err)
	}
	closeTopic := func() {
		_, _ = adm.DeleteTopic(context.Background(), topic)
		kcl.Close()
	}
	if err := kafkatest.WaitLeaders(ctx, adm, topic, int(partitions)); err != nil {
		closeTopic()
		return nil, nil, nil, err
	}
	return kcl, adm, closeTopic, nil
}

// createDatabase creates database name through adminDSN and returns
// adminDSN pointed at it, and the function that drops it.
func createDatabase(ctx context.Context, adminDSN, name string) (string, func(), error) {
	dsn, err := benchrun.WithDatabase(adminDSN, name)
	if err != nil {
		return "", nil, err
	}
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return "", nil, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, err
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if c, err := pgx.Connect(ctx, adminDSN); err == nil {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
			c.Close(ctx)
		}
	}
	return dsn, drop, nil
}

// seedDDL extracts the create_state_tables SQL from the seed flow without a
// YAML dependency: the block scalar after "sql: |" of that task.
func seedDDL(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := string(raw)
	i := strings.Index(s, "id: create_state_tables")
	if i < 0 {
		return "", errors.New("seed flow has no create_state_tables")
	}
	s = s[i:]
	j := strings.Index(s, "sql: |\n")
	if j < 0 {
		return "", errors.New("create_state_tables has no sql block")
	}
	var b strings.Builder
	for _, line := range strings.Split(s[j+len("sql: |\n"):], "\n") {
		if strings.TrimSpace(line) != "" && !strings.HasPrefix(line, "      ") {
			break
		}
		b.WriteString(strings.TrimPrefix(line, "      ") + "\n")
	}
	return b.String(), nil
}

func batchEnv(topic string, n, poll int, props, dsn string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "KAFKA_") && !strings.HasPrefix(kv, kafkastate.EnvTopic+"=") {
			out = append(out, kv)
		}
	}
	return append(out, kafkastate.EnvTopic+"="+topic, fmt.Sprintf("%s=%d", kafkastate.EnvMaxRecords, n),
		fmt.Sprintf("%s=%d", kafkastate.EnvPollSeconds, poll), kafkastate.EnvKafkaProperties+"="+props, kafkastate.EnvPGDSN+"="+dsn)
}

type batch struct {
	consumed int64
	elapsed  time.Duration
}

// timeProcess runs one batch in a fresh working directory and returns its
// consumed count (from batch-report.json), wall time and peak RSS in KiB.
func (e env) timeProcess(ctx context.Context, name string, args, env []string) (batch, int64, error) {
	b, rss, _, err := e.timeProcessOutput(ctx, name, args, env)
	return b, rss, err
}

func execCommand(ctx context.Context, name string, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	return cmd
}

// timeProcessOutput is timeProcess that also returns the process's output.
func (e env) timeProcessOutput(ctx context.Context, name string, args, env []string) (batch, int64, []byte, error) {
	dir, err := os.MkdirTemp("", "bench-kafka-state-*")
	if err != nil {
		return batch{}, 0, nil, err
	}
	defer os.RemoveAll(dir)
	proc, err := benchrun.Run(ctx, dir, append(env, "WORKING_DIR="+dir), name, args...)
	out, elapsed, rss := proc.Output, proc.Elapsed, proc.MaxRSSKiB
	if err != nil {
		return batch{}, 0, out, err
	}
	if e.verbose {
		fmt.Printf("--- %s %s (cpu user %s, system %s)\n%s", filepath.Base(name), strings.Join(args, " "),
			proc.State.UserTime().Round(time.Millisecond), proc.State.SystemTime().Round(time.Millisecond), out)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "batch-report.json"))
	if err != nil {
		return batch{}, 0, out, fmt.Errorf("no batch-report.json: %v\n%s", err, out)
	}
	var report struct {
		Consumed int64 `json:"consumed"`
	}
	if err := json.Unmarshal(raw, &report); err != nil {
		return batch{}, 0, out, err
	}
	return batch{consumed: report.Consumed, elapsed: elapsed}, rss, out, nil
}

// rawCopy times COPY of the rows, in one transaction each, into a plain
// table with the columns of kafka_state.records and no constraint, then into
// a table with the records' primary key.
func rawCopy(ctx context.Context, dsn string, rows []row) (plain, withPK time.Duration, err error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(ctx)
	ddl := `CREATE TABLE copy_plain (topic text, record_key text, payload jsonb, deleted boolean, kafka_partition integer, kafka_offset bigint);
CREATE TABLE copy_pk (topic text NOT NULL, record_key text NOT NULL, payload jsonb, deleted boolean NOT NULL,
  kafka_partition integer NOT NULL, kafka_offset bigint NOT NULL CHECK (kafka_offset >= 0),
  PRIMARY KEY (topic, record_key), CHECK (deleted = (payload IS NULL)))`
	if _, err := conn.Exec(ctx, ddl); err != nil {
		return 0, 0, err
	}
	if plain, err = copyInto(ctx, conn, "copy_plain", rows); err != nil {
		return 0, 0, err
	}
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		return 0, 0, err
	}
	if withPK, err = copyInto(ctx, conn, "copy_pk", rows); err != nil {
		return 0, 0, err
	}
	return plain, withPK, nil
}

// copyInto times a binary COPY of rows into table (a name, optionally
// schema-qualified, with the columns of kafka_state.records) in one
// transaction, commit included.
func copyInto(ctx context.Context, conn *pgx.Conn, table string, rows []row) (time.Duration, error) {
	cols := []string{"topic", "record_key", "payload", "deleted", "kafka_partition", "kafka_offset"}
	start := time.Now()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx)
	n, err := tx.CopyFrom(ctx, pgx.Identifier(strings.Split(table, ".")), cols, pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
		r := &rows[i]
		return []any{r.topic, r.key, r.value, false, r.partition, r.offset}, nil
	}))
	if err != nil {
		return 0, err
	}
	if int(n) != len(rows) {
		return 0, fmt.Errorf("copied %d of %d rows", n, len(rows))
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}
