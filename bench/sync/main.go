// Command benchsync is the benchmark behind .ci/bench-sync: how fast
// `changesink cdc sync` takes a replication slot's changes into verified
// ClickHouse rows, against the references measured in the same run.
//
// It creates a source database of its own (customers, orders and order
// lines, one publication), and, before any change, one ClickHouse database,
// slot and `cdc setup` per repetition. Then it writes the changes
// (inserts, updates and deletes in transactions of -tx changes) and, -reps
// times, in alternating order:
//
//   - pg_recvlogical --start -o proto_version=1 -o publication_names=… -E
//     <end> -f /dev/null on a copy of the repetition's slot made before its
//     sync: the server decodes the same WAL with pgoutput, the protocol
//     sync reads, and the bytes are thrown away. The limit of any consumer
//     of the slot.
//   - changesink cdc sync on the repetition's slot until caught up: every
//     change decoded, applied to its table's target, read back, recorded in
//     the sync ledger and the slot confirmed.
//   - a raw clickhouse-client INSERT of the rows that sync wrote (exported
//     from its targets, untimed) into copies of the target tables: the
//     insert limit.
//
// With -debezium, once: Debezium's embedded engine (harness/debezium-bench)
// streams the same changes from another copy of the first slot, counting
// the records and converting none: the capture alone of Kestra's trigger.
//
// It checks every sync applied every change and that the live views hold
// the source's row counts, prints changes/s of each and the ratios of the
// medians, writes them to -results (JSON), and drops every slot and
// database it made (a run that died is swept by the next one).
//
// With -sustained DURATION it measures something else, sync as the
// shipped flow runs it under a steady writer: the lag from a source
// commit to the live view and the WAL the slot retains (sustained.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/changesink/changesink/bench/internal/benchrun"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-sync:", err)
		os.Exit(1)
	}
}

type config struct {
	admin, chURL string
	client       []string
	bin, dir     string
	compare      string // another changesink binary, run as a second sync each repetition
	changes, tx  int
	reps, flush  int
	debezium     string // the classpath of harness/debezium-bench; "" skips it
	java         string
	results      string
	rawHTTP      string // host:port of ClickHouse's HTTP interface for the raw insert; "": clickhouse-client
	// The sustained mode (sustained.go); sustainedFor 0: the catch-up runs.
	sustainedFor, period, budget, poll time.Duration
	rate                               int
}

func run() error {
	var c config
	flag.IntVar(&c.changes, "changes", 300_000, "changes to write (rounded up to a whole transaction)")
	flag.IntVar(&c.tx, "tx", 1_000, "changes per source transaction")
	flag.IntVar(&c.reps, "reps", 3, "repetitions of pg_recvlogical, sync and the raw insert (medians compared)")
	flag.IntVar(&c.flush, "flush", 0, "CDC_FLUSH_CHANGES of the sync runs (0: its default)")
	flag.StringVar(&c.bin, "bin", "", "the changesink binary")
	flag.StringVar(&c.compare, "compare", "", "another changesink binary (a build before a change): also timed each repetition, on slots of its own")
	flag.StringVar(&c.dir, "dir", ".scratch/bench/sync", "working directory of the runs")
	flag.StringVar(&c.debezium, "debezium", "", "classpath of harness/debezium-bench (empty: no Debezium run)")
	flag.StringVar(&c.java, "java", "java", "the java of the Debezium run")
	flag.StringVar(&c.results, "results", ".scratch/bench/sync-results.json", "write the numbers here (JSON; -dir is emptied at the start of a run)")
	flag.StringVar(&c.rawHTTP, "raw-http", "", "host:port of ClickHouse's HTTP interface: the raw insert (and the export before it) with curl, not clickhouse-client")
	flag.DurationVar(&c.sustainedFor, "sustained", 0, "the sustained mode: write -rate changes/s for this long while the flow's executions run (.ci/bench-sync: 5m when given alone)")
	flag.IntVar(&c.rate, "rate", 5_000, "sustained: changes a second the writer commits")
	flag.DurationVar(&c.period, "period", time.Minute, "sustained: the schedule of the flow's executions (the flow's: every minute)")
	flag.DurationVar(&c.budget, "budget", 45*time.Second, "sustained: CDC_MAX_DURATION of each sync (the flow's max_duration)")
	flag.DurationVar(&c.poll, "poll", 250*time.Millisecond, "sustained: how often the live view is read for the commit-to-visible lag")
	flag.Parse()
	if c.sustainedFor > 0 {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		c.reps = 1
		if !set["tx"] {
			c.tx = 100
		}
		if !set["results"] {
			c.results = ".scratch/bench/sync-sustained.json"
		}
		if c.rate < 1 || c.period <= 0 || c.budget <= 0 || c.poll <= 0 || filepath.Ext(c.results) != ".json" {
			return errors.New("-rate, -period, -budget and -poll must be positive, -results a .json file")
		}
	}
	c.admin, c.chURL = os.Getenv("CHANGESINK_TEST_PG"), os.Getenv("CHANGESINK_TEST_CLICKHOUSE")
	c.client = strings.Fields(os.Getenv("CHANGESINK_TEST_CLICKHOUSE_CLIENT"))
	if c.admin == "" || c.chURL == "" || len(c.client) == 0 || c.bin == "" {
		return errors.New("needs -bin and CHANGESINK_TEST_PG, CHANGESINK_TEST_CLICKHOUSE, CHANGESINK_TEST_CLICKHOUSE_CLIENT (source .ci/env)")
	}
	if c.reps < 1 || c.changes < 1 || c.tx < 10 {
		return errors.New("-reps and -changes must be at least 1, -tx at least 10")
	}
	recv, err := findRecvlogical()
	if err != nil {
		return err
	}
	if c.dir, err = filepath.Abs(c.dir); err != nil {
		return err
	}
	if err := os.RemoveAll(c.dir); err != nil {
		return err
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return err
	}
	unlock, err := lock("/tmp/changesink-bench-sync.lock")
	if err != nil {
		return err
	}
	defer unlock()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, max(time.Hour, c.sustainedFor+30*time.Minute))
	defer cancel()
	if err := sweep(ctx, c.admin, c.ch); err != nil {
		return fmt.Errorf("sweeping a previous run's slots and databases: %w", err)
	}
	b := &bench{config: c, recv: recv, name: fmt.Sprintf("bench_sync_%d", os.Getpid())}
	b.res.LoadBefore = benchrun.LoadAvg()
	defer b.cleanup()
	if c.sustainedFor > 0 {
		return b.runSustained(ctx)
	}
	return b.run(ctx)
}

// bench is one run: its names and what it measured.
type bench struct {
	config
	recv    string
	name    string // of the source database, the publication and the prefix of the slots and ClickHouse databases
	dsn     string
	end     string
	written counts
	source  map[string]int64
	res     results
}

func (b *bench) run(ctx context.Context) error {
	fmt.Printf("bench-sync: about %d changes over %d tables in transactions of %d; %d CPUs; %d reps; load %s\n",
		b.changes, len(tables), b.tx, runtime.NumCPU(), b.reps, benchrun.LoadAvg())
	if err := b.prepare(ctx); err != nil {
		return err
	}
	start := time.Now()
	var err error
	if b.written, b.end, err = write(ctx, b.dsn, b.changes, b.tx); err != nil {
		return err
	}
	w := b.written
	fmt.Printf("wrote %d changes (%d inserts, %d updates, %d deletes) in %d transactions in %s; the WAL to decode ends at %s\n",
		w.total(), w.inserts, w.updates, w.deletes, w.transactions, time.Since(start).Round(time.Millisecond), b.end)
	if b.source, err = rowCounts(ctx, b.dsn); err != nil {
		return err
	}
	for rep := range b.reps {
		if err := b.copySlot(ctx, rep, b.recvSlot(rep)); err != nil {
			return err
		}
		if rep == 0 && b.debezium != "" {
			if err := b.copySlot(ctx, rep, b.name+"_dbz"); err != nil {
				return err
			}
		}
		steps := []func(context.Context, int) error{b.pgRecvlogical, b.sync}
		if b.compare != "" {
			steps = append(steps, b.syncCompare)
		}
		if rep%2 == 1 {
			slices.Reverse(steps)
		}
		for _, step := range append(steps, b.rawInsert) {
			if err := step(ctx, rep); err != nil {
				return err
			}
		}
	}
	if b.debezium != "" {
		if err := b.runDebezium(ctx); err != nil {
			return err
		}
	}
	return b.report()
}

// prepare makes the source database, its tables and publication, and,
// before any change, each repetition's ClickHouse database, slot and
// setup.
func (b *bench) prepare(ctx context.Context) error {
	if err := benchrun.ExecSQL(ctx, b.admin, "CREATE DATABASE "+b.name); err != nil {
		return err
	}
	var err error
	if b.dsn, err = benchrun.WithDatabase(b.admin, b.name); err != nil {
		return err
	}
	if err := createSource(ctx, b.dsn, b.name); err != nil {
		return err
	}
	for rep := range b.slots() {
		if err := b.setup(ctx, rep); err != nil {
			return err
		}
	}
	return nil
}

// copySlot copies the slot of sync run rep, still where setup left it
// (before every change), for a reference to drain: the server's slots are
// few (max_replication_slots), so the references take copies when they
// need them rather than a base slot of their own.
func (b *bench) copySlot(ctx context.Context, rep int, name string) error {
	return benchrun.ExecSQL(ctx, b.dsn, fmt.Sprintf("SELECT pg_copy_logical_replication_slot('%s', '%s')", b.chDB(rep), name))
}

// setup runs cdc setup for a repetition: its ClickHouse database, its
// slot (created by setup), its targets.
func (b *bench) setup(ctx context.Context, rep int) error {
	db := b.chDB(rep)
	if _, err := b.ch("CREATE DATABASE " + db); err != nil {
		return err
	}
	dir := b.runDir(rep)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var m strings.Builder
	fmt.Fprintf(&m, "defaults: {target: {database: %s}}\ntables:\n", db)
	for _, t := range tables {
		fmt.Fprintf(&m, "  - source: {database: %s, schema: public, table: %s}\n", b.name, t.name)
	}
	if err := os.WriteFile(filepath.Join(dir, "mapping.yaml"), []byte(m.String()), 0o644); err != nil {
		return err
	}
	p, err := benchrun.Run(ctx, dir, b.syncEnv(rep), b.bin, "cdc", "setup")
	if err != nil {
		return fmt.Errorf("cdc setup: %w", err)
	}
	if !strings.Contains(string(p.Output), `"created":true`) {
		return fmt.Errorf("cdc setup did not create the slot:\n%s", p.Output)
	}
	return nil
}

// slots is how many slots (and ClickHouse databases) the syncs use: one
// per repetition, two with -compare (the compared binary's are reps..).
func (b *bench) slots() int {
	if b.compare != "" {
		return 2 * b.reps
	}
	return b.reps
}

func (b *bench) recvSlot(rep int) string { return fmt.Sprintf("%s_recv%d", b.name, rep) }
func (b *bench) chDB(rep int) string     { return fmt.Sprintf("%s_r%d", b.name, rep) }
func (b *bench) runDir(rep int) string   { return filepath.Join(b.dir, fmt.Sprintf("r%d", rep)) }

// syncEnv is the environment of cdc setup and cdc sync for a repetition.
func (b *bench) syncEnv(rep int) []string {
	env := append(os.Environ(), "CDC_POSTGRES_DSN="+b.dsn, "CDC_SLOT="+b.chDB(rep), "CDC_PUBLICATION="+b.name,
		"CDC_MAPPING=mapping.yaml", "CLICKHOUSE_URL="+chURL(b.chURL, b.chDB(rep)), "CDC_MAX_DURATION=30m", "WORKING_DIR="+b.runDir(rep))
	if b.flush > 0 {
		env = append(env, fmt.Sprintf("CDC_FLUSH_CHANGES=%d", b.flush))
	}
	return env
}

// chURL is base aimed at database db.
func chURL(base, db string) string {
	u, err := url.Parse(base)
	if err != nil {
		return base
	}
	u.Path = "/" + db
	return u.String()
}

// cleanup drops the run's slots (ending what still streams from them),
// its source database and its ClickHouse databases.
func (b *bench) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for range 50 {
		err := benchrun.ExecSQL(ctx, b.admin, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
			WHERE slot_name LIKE '`+b.name+`\_%' AND active_pid IS NOT NULL`,
			`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE '`+b.name+`\_%'`)
		if err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := benchrun.ExecSQL(ctx, b.admin, "DROP DATABASE IF EXISTS "+b.name+" WITH (FORCE)"); err != nil {
		fmt.Fprintln(os.Stderr, "bench-sync: cleanup:", err)
	}
	for rep := range b.slots() {
		if _, err := b.ch("DROP DATABASE IF EXISTS " + b.chDB(rep)); err != nil {
			fmt.Fprintln(os.Stderr, "bench-sync: cleanup:", err)
		}
	}
}

// lock takes an exclusive lock on path (runs from every checkout share
// the servers and the sweep), waiting up to 10 minutes.
func lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("another bench-sync holds %s for 10 minutes", path)
		}
		time.Sleep(time.Second)
	}
}
