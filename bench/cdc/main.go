// Command benchcdc is the benchmark behind .ci/bench-cdc (the README's
// Benchmarks). In one run it generates a Debezium batch of the seed's
// orders table (by default 100,000 events over 50,000 keys, repeated
// updates, 10% deletes) as Kestra writes it (text Ion, and binary Ion), the
// JSON lines IonToJson would make of it, and the final rows as TSV; then it
// times, each against a fresh table in one ClickHouse database:
//
//   - changesink cdc apply on the text and on the binary file, from the Ion
//     file to verified rows (its decode timer is the decoding time);
//   - the seed's pipeline from the JSON lines (the IonToJson step is left
//     out, which favours the seed): its three Python scripts, with
//     clickhouse-client doing the two reads and the insert;
//   - ion-go's bare Reader walking each file (every value read, nothing
//     checked): the decoding limit;
//   - a raw clickhouse-client INSERT of the final rows: the insert limit.
//
// It prints events/s for each and the ratios, checks that every table
// ends with the same rows, and exits non-zero only when a contender fails.
//
// With -cluster it measures the cost of replication instead (cluster.go).
//
// With -steady it then measures the cost growth (steady.go): batches of
// the same shape, updating existing keys, applied to tables already holding
// the given numbers of rows, against the physical references measured the
// same way.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/amazon-ion/ion-go/ion"

	"github.com/changesink/changesink/bench/internal/benchrun"
	"github.com/changesink/changesink/internal/iongen"
	"github.com/changesink/changesink/internal/ionwalk"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-cdc:", err)
		os.Exit(1)
	}
}

type config struct {
	bin, dir, seeds, python, chURL string
	client                         []string
	events, keys                   int
	deletes                        float64
	reps                           int
	skipSeed                       bool
	steady                         []int64
	batches                        int
}

func run() error {
	var c config
	flag.StringVar(&c.bin, "bin", "", "the changesink binary")
	flag.StringVar(&c.dir, "dir", ".scratch/bench/cdc", "work directory")
	flag.IntVar(&c.events, "events", 100_000, "events in the batch")
	flag.IntVar(&c.keys, "keys", 50_000, "distinct keys")
	flag.Float64Var(&c.deletes, "deletes", 0.10, "share of delete events")
	flag.IntVar(&c.reps, "reps", 1, "repetitions of each timing (the best is reported)")
	flag.BoolVar(&c.skipSeed, "skip-seed", false, "do not run the seed pipeline")
	steady := flag.String("steady", "", "steady-state mode: rows already in the target, as a list (10M,50M); empty: off")
	flag.IntVar(&c.batches, "batches", 3, "steady-state batches per table size")
	steadyOnly := flag.Bool("steady-only", false, "skip the empty-table comparison with the seed")
	clusterMode := flag.Bool("cluster", false, "the cost of replication instead (cluster.go): one server against the test cluster")
	flag.Parse()
	for _, f := range strings.FieldsFunc(*steady, func(r rune) bool { return r == ',' }) {
		n, err := parseCount(f)
		if err != nil {
			return fmt.Errorf("-steady: %w", err)
		}
		c.steady = append(c.steady, n)
	}
	c.chURL = os.Getenv("CHANGESINK_TEST_CLICKHOUSE")
	c.client = strings.Fields(os.Getenv("CHANGESINK_TEST_CLICKHOUSE_CLIENT"))
	c.python = os.Getenv("CHANGESINK_TEST_PYTHON")
	c.seeds = os.Getenv("CHANGESINK_TEST_SEEDS")
	if c.seeds == "" {
		c.seeds = "parity/seeds"
	}
	if c.bin == "" || c.chURL == "" || len(c.client) == 0 || c.python == "" {
		return errors.New("needs -bin and CHANGESINK_TEST_CLICKHOUSE, CHANGESINK_TEST_CLICKHOUSE_CLIENT, CHANGESINK_TEST_PYTHON (source .ci/env)")
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return err
	}
	dir, err := filepath.Abs(c.dir)
	if err != nil {
		return err
	}
	c.dir = dir

	fmt.Printf("bench-cdc: %d events, %d keys, %.0f%% deletes; %d CPUs (GOMAXPROCS %d); best of %d; load %s\n",
		c.events, c.keys, 100*c.deletes, runtime.NumCPU(), runtime.GOMAXPROCS(0), c.reps, benchrun.LoadAvg())
	if *clusterMode {
		cl, r1, r2 := os.Getenv("CHANGESINK_TEST_CLICKHOUSE_CLUSTER"), os.Getenv("CHANGESINK_TEST_CLICKHOUSE_R1"), os.Getenv("CHANGESINK_TEST_CLICKHOUSE_R2")
		if cl == "" || r1 == "" || r2 == "" {
			return errors.New("-cluster needs CHANGESINK_TEST_CLICKHOUSE_CLUSTER, _R1 and _R2 (.ci/clickhouse-cluster; source .ci/env)")
		}
		return c.clusterCost(cl, r1, r2)
	}
	if *steadyOnly {
		return c.steadyState()
	}
	if err := c.emptyTable(); err != nil {
		return err
	}
	if len(c.steady) > 0 {
		return c.steadyState()
	}
	return nil
}

// emptyTable is the comparison with the seed: one batch into fresh tables.
func (c config) emptyTable() error {
	start := time.Now()
	files, err := generate(c)
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	fmt.Printf("generated in %s: text Ion %s, binary Ion %s, JSON lines %s, final rows %d\n", time.Since(start).Round(time.Millisecond),
		size(files.text), size(files.binary), size(files.jsonl), files.finalRows)

	db := fmt.Sprintf("bench_cdc_%d", os.Getpid())
	if _, err := c.ch("CREATE DATABASE "+db, nil); err != nil {
		return err
	}
	defer c.ch("DROP DATABASE IF EXISTS "+db, nil)

	var results []result
	add := func(r result) {
		results = append(results, r)
		fmt.Printf("  %-44s %8.3f s %10.0f events/s  %s\n", r.name, r.seconds, float64(c.events)/r.seconds, r.note)
	}

	// changesink, from the Ion file to verified rows; then with one
	// decoding worker, for the decoding time per core.
	var decodeText, decodeBinary, decodeText1, decodeBinary1 float64
	for _, form := range []struct {
		name, file string
		workers    int
		decode     *float64
	}{{"text", files.text, 0, &decodeText}, {"binary", files.binary, 0, &decodeBinary},
		{"text", files.text, 1, &decodeText1}, {"binary", files.binary, 1, &decodeBinary1}} {
		best, err := c.fastest(func(rep int) (result, error) {
			return c.changesink(db, fmt.Sprintf("cs_%s_w%d_%d", form.name, form.workers, rep), form.file, form.workers)
		})
		if err != nil {
			return fmt.Errorf("changesink (%s): %w", form.name, err)
		}
		*form.decode = best.timers["decode"]
		best.name = "changesink cdc apply (" + form.name + " Ion)"
		if form.workers == 1 {
			best.name = "  the same, one decoding worker (" + form.name + ")"
		}
		add(best)
	}

	// The seed's pipeline.
	var seed result
	if !c.skipSeed {
		seed, err = c.fastest(func(rep int) (result, error) {
			return c.seed(db, fmt.Sprintf("seed_%d", rep), files.jsonl)
		})
		if err != nil {
			return fmt.Errorf("seed pipeline: %w", err)
		}
		seed.name = "seed pipeline (3 scripts + clickhouse-client)"
		add(seed)
	}

	// The decoding limit: ion-go's bare reader.
	walkText, walkBinary := 1e9, 1e9
	for range max(c.reps, 3) {
		if s, err := walk(files.text); err != nil {
			return err
		} else {
			walkText = min(walkText, s)
		}
		if s, err := walk(files.binary); err != nil {
			return err
		} else {
			walkBinary = min(walkBinary, s)
		}
	}
	add(result{name: "changesink decode+validate (text), its timer", seconds: decodeText, note: "one worker per CPU"})
	add(result{name: "  the same, one worker", seconds: decodeText1})
	add(result{name: "ion-go bare Reader walk (text)", seconds: walkText, note: "one goroutine"})
	add(result{name: "changesink decode+validate (binary), its timer", seconds: decodeBinary, note: "one worker per CPU"})
	add(result{name: "  the same, one worker", seconds: decodeBinary1})
	add(result{name: "ion-go bare Reader walk (binary)", seconds: walkBinary, note: "one goroutine"})

	// The insert limit.
	raw, err := c.fastest(func(rep int) (result, error) {
		return c.rawInsert(db, fmt.Sprintf("raw_%d", rep), files.tsv)
	})
	if err != nil {
		return fmt.Errorf("raw insert: %w", err)
	}
	raw.name = "raw clickhouse-client INSERT of the final rows"
	add(raw)

	// Every table must hold the same rows.
	sums := map[string][]string{}
	tables, err := c.ch("SELECT name FROM system.tables WHERE database = '"+db+"' ORDER BY name", nil)
	if err != nil {
		return err
	}
	for _, t := range strings.Fields(tables) {
		if strings.HasSuffix(t, "_live") || strings.HasSuffix(t, "_ledger") {
			continue // the live views, changesink's ledgers
		}
		// Each key's winning row, a delete marker too: FINAL, and the
		// newest marker of each key FINAL leaves out (a changesink target on
		// 23.2+ is ReplacingMergeTree(_cdc_lsn, _cdc_deleted), whose FINAL
		// hides the markers; the seed's and the raw tables are not).
		name := db + "." + t
		sum, err := c.ch("SELECT count(), sum(cityHash64(id, customer_id, amount_cents, status, _cdc_lsn, _cdc_deleted)) FROM ("+
			"SELECT * FROM "+name+" FINAL UNION ALL SELECT * FROM "+name+" WHERE _cdc_deleted = 1 AND id NOT IN (SELECT id FROM "+name+
			" FINAL) ORDER BY _cdc_lsn DESC LIMIT 1 BY id)", nil)
		if err != nil {
			return err
		}
		sums[strings.TrimSpace(sum)] = append(sums[strings.TrimSpace(sum)], t)
	}
	if len(sums) != 1 {
		return fmt.Errorf("the tables differ: %v", sums)
	}
	for s, ts := range sums {
		fmt.Printf("all %d tables hold the same %s rows (count, hash)\n", len(ts), strings.Replace(s, "\t", ", ", 1))
	}

	cs := results[0]
	fmt.Println("ratios:")
	if !c.skipSeed {
		fmt.Printf("  changesink (text) vs seed pipeline:             %5.1fx   (target >= 10x)\n", seed.seconds/cs.seconds)
		fmt.Printf("  changesink (binary) vs seed pipeline:           %5.1fx   (target >= 10x)\n", seed.seconds/results[1].seconds)
	}
	fmt.Printf("  decoding per core (text) vs bare ion-go walk:   %5.1fx   (target >= 5x; one worker against one goroutine)\n", walkText/decodeText1)
	fmt.Printf("  decoding per core (binary) vs bare ion-go walk: %5.1fx   (target >= 5x)\n", walkBinary/decodeBinary1)
	fmt.Printf("  decoding, one worker per CPU (text, binary):    %5.1fx, %.1fx the walk\n", walkText/decodeText, walkBinary/decodeBinary)
	fmt.Printf("  changesink (text) vs raw insert:                %5.2f    (the insert limit; changesink also decodes, reads and verifies)\n", raw.seconds/cs.seconds)
	fmt.Printf("  peak RSS of changesink: text %s, binary %s\n", cs.rss, results[1].rss)
	return nil
}

// parseCount reads 50000000, 50M or 10k.
func parseCount(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "M"):
		mult, s = 1_000_000, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "k"):
		mult, s = 1_000, strings.TrimSuffix(s, "k")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a row count such as 10M", s)
	}
	return n * mult, nil
}

// fastest times c.reps runs (run is given the rep's number, for its table
// names) and returns the fastest.
func (c config) fastest(run func(rep int) (result, error)) (result, error) {
	best := result{seconds: 1e9}
	for rep := range c.reps {
		r, err := run(rep)
		if err != nil {
			return result{}, err
		}
		if r.seconds < best.seconds {
			best = r
		}
	}
	return best, nil
}

type result struct {
	name    string
	seconds float64
	note    string
	rss     string
	timers  map[string]float64 // changesink's step timers (decode, read_current, insert, verify)
}

type files struct {
	text, binary, jsonl, tsv string
	keys                     string // the batch's distinct keys, one a line
	finalRows                int
}

func size(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return "?"
	}
	return fmt.Sprintf("%.1f MB", float64(st.Size())/1e6)
}

var statuses = []string{"new", "paid", "shipped", "cancelled", "refunded", "en préparation", "返品", "on hold"}

// generate writes the batch in every form and the final rows.
func generate(c config) (files, error) {
	return generateBatch(c, batchSpec{dir: c.dir, keyID: func(k int64) int64 { return k + 1 }, lsnBase: 30_000_000, firstOp: "CREATE", seed: 42})
}

// batchSpec shapes a generated batch: c.events events over c.keys keys.
type batchSpec struct {
	dir string
	// keyID maps the key index 0..keys-1 to its id.
	keyID func(k int64) int64
	// lsnBase is the first event's LSN; the LSNs grow by 17.
	lsnBase int64
	// firstOp is the operation of each key's first event (CREATE, or
	// UPDATE for keys the target holds).
	firstOp string
	seed    uint64
	// binaryOnly leaves out the text Ion and the JSON lines.
	binaryOnly bool
}

// generateBatch writes the batch spec describes and its final rows.
func generateBatch(c config, spec batchSpec) (files, error) {
	f := files{
		text: filepath.Join(spec.dir, "changes.ion"), binary: filepath.Join(spec.dir, "changes.binary.ion"),
		jsonl: filepath.Join(spec.dir, "changes.jsonl"), tsv: filepath.Join(spec.dir, "final.tsv"),
		keys: filepath.Join(spec.dir, "keys.tsv"),
	}
	if spec.binaryOnly {
		f.text, f.jsonl = os.DevNull, os.DevNull
	}
	type final struct {
		customer, amount int64
		status           string
		lsn              int64
		deleted          bool
	}
	latest := map[int64]final{}
	rng := rand.New(rand.NewPCG(spec.seed, 7))
	outs := []*os.File{}
	open := func(p string) (*bufio.Writer, error) {
		fh, err := os.Create(p)
		if err != nil {
			return nil, err
		}
		outs = append(outs, fh)
		return bufio.NewWriterSize(fh, 1<<20), nil
	}
	tw, err := open(f.text)
	if err != nil {
		return f, err
	}
	bw, err := open(f.binary)
	if err != nil {
		return f, err
	}
	jw, err := open(f.jsonl)
	if err != nil {
		return f, err
	}
	text, bin := iongen.NewWriter(tw, false), iongen.NewWriter(bw, true)
	var line []byte
	for i := range c.events {
		k := int64(i)
		if i >= c.keys {
			k = rng.Int64N(int64(c.keys))
		}
		id := spec.keyID(k)
		lsn := spec.lsnBase + int64(17*i)
		// Every key is created first; the deletes fall among the later
		// events, so that they are the asked share of all events.
		deleted := i >= c.keys && rng.Float64() < c.deletes*float64(c.events)/float64(max(c.events-c.keys, 1))
		op := "UPDATE"
		switch {
		case deleted:
			op = "DELETE"
		case i < c.keys:
			op = spec.firstOp
		}
		var row iongen.Struct
		fin := final{lsn: lsn, deleted: deleted}
		if deleted { // REPLICA IDENTITY DEFAULT: the key, nulls elsewhere
			row = iongen.Struct{{"id", id}, {"customer_id", nil}, {"amount_cents", nil}, {"status", nil}}
		} else {
			fin.customer, fin.amount, fin.status = rng.Int64N(100_000), rng.Int64N(1_000_000)-1000, statuses[rng.IntN(len(statuses))]
			row = iongen.Struct{{"id", id}, {"customer_id", fin.customer}, {"amount_cents", fin.amount}, {"status", fin.status}}
		}
		latest[id] = fin
		src := iongen.Source("shop", "public", "orders", lsn, int64(900+i/3), "false")
		ev := iongen.Event(row, deleted, iongen.Metadata(op, src))
		if err := bin.Write(ev); err != nil {
			return f, err
		}
		if spec.binaryOnly {
			continue
		}
		if err := text.Write(ev); err != nil {
			return f, err
		}
		line = appendJSON(line[:0], ev)
		line = append(line, '\n')
		if _, err := jw.Write(line); err != nil {
			return f, err
		}
	}
	for i, w := range []*bufio.Writer{tw, bw, jw} {
		if err := w.Flush(); err != nil {
			return f, err
		}
		if err := outs[i].Close(); err != nil {
			return f, err
		}
	}
	ids := make([]int64, 0, len(latest))
	for id := range latest {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var tsv, keys bytes.Buffer
	for _, id := range ids {
		r := latest[id]
		del := 0
		if r.deleted {
			del = 1
		}
		fmt.Fprintf(&tsv, "%d\t%d\t%d\t%s\t%d\t%d\n", id, r.customer, r.amount, r.status, r.lsn, del)
		fmt.Fprintf(&keys, "%d\n", id)
	}
	f.finalRows = len(ids)
	if err := os.WriteFile(f.keys, keys.Bytes(), 0o644); err != nil {
		return f, err
	}
	return f, os.WriteFile(f.tsv, tsv.Bytes(), 0o644)
}

// appendJSON renders an event as IonToJson does: structs as objects in
// field order, timestamps as ISO strings.
func appendJSON(dst []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...)
	case bool:
		return strconv.AppendBool(dst, x)
	case int:
		return strconv.AppendInt(dst, int64(x), 10)
	case int64:
		return strconv.AppendInt(dst, x, 10)
	case string:
		b, _ := json.Marshal(x)
		return append(dst, b...)
	case iongen.Timestamp:
		return strconv.AppendQuote(dst, x.Time.UTC().Format("2006-01-02T15:04:05.000Z"))
	case iongen.Struct:
		dst = append(dst, '{')
		for i, fld := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendQuote(dst, fld.Name)
			dst = append(dst, ':')
			dst = appendJSON(dst, fld.Value)
		}
		return append(dst, '}')
	}
	panic(fmt.Sprintf("appendJSON: %T", v))
}

// ch runs a query with clickhouse-client; stdin may feed an INSERT. A
// query too long for the command line goes to stdin instead.
func (c config) ch(query string, stdin io.Reader, settings ...string) (string, error) {
	args := append(append([]string{}, c.client[1:]...), settings...)
	if len(query) > 100_000 { // too long for argv: clickhouse-client reads it from stdin
		stdin = strings.NewReader(query)
	} else {
		args = append(args, "--query", query)
	}
	cmd := exec.Command(c.client[0], args...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("clickhouse-client %.80s: %v: %s", query, err, errb.String())
	}
	return out.String(), nil
}

// mapping writes the shipped orders mapping aimed at db.table.
func (c config) mapping(dir, db, table string) (string, error) {
	raw, err := os.ReadFile("flows/orders.mapping.yaml")
	if err != nil {
		return "", err
	}
	m := strings.Replace(string(raw), "database: default", "database: "+db, 1)
	m = strings.Replace(m, "table: orders_cdc", "table: "+table, 1)
	m = strings.Replace(m, "live_view: orders_live", "live_view: "+table+"_live", 1)
	p := filepath.Join(dir, "orders.mapping.yaml")
	return p, os.WriteFile(p, []byte(m), 0o644)
}

var timerMetric = regexp.MustCompile(`"name":"([a-z_]+)","type":"timer","value":([0-9.e-]+)`)

// changesink runs setup (untimed), then times apply on the batch file with
// the given decoding workers (0: GOMAXPROCS).
func (c config) changesink(db, table, batch string, workers int) (result, error) {
	dir, err := os.MkdirTemp(c.dir, "cs-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	mapping, err := c.mapping(dir, db, table)
	if err != nil {
		return result{}, err
	}
	env := append(os.Environ(), "WORKING_DIR="+dir, "CDC_MAPPING="+mapping, "CLICKHOUSE_URL="+c.chURL, "CDC_BATCH_FILE="+batch,
		"CDC_WORKERS="+strconv.Itoa(workers))
	if out, err := execIn(dir, env, nil, c.bin, "cdc", "setup"); err != nil {
		return result{}, fmt.Errorf("setup: %v\n%s", err, out)
	}
	return c.apply(dir, env)
}

// apply times one cdc apply in dir with env.
func (c config) apply(dir string, env []string) (result, error) {
	proc, err := benchrun.Run(context.Background(), dir, env, c.bin, "cdc", "apply")
	out, secs := proc.Output, proc.Elapsed.Seconds()
	if err != nil {
		return result{}, fmt.Errorf("apply: %w", err)
	}
	if !bytes.Contains(out, []byte(`"verified":`)) {
		return result{}, fmt.Errorf("apply printed no outputs:\n%s", out)
	}
	timers := map[string]float64{}
	for _, m := range timerMetric.FindAllSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(string(m[2]), 64)
		timers[string(m[1])] = v
	}
	if _, ok := timers["decode"]; !ok {
		return result{}, fmt.Errorf("no decode timer in:\n%s", out)
	}
	rss := "?"
	if proc.MaxRSSKiB > 0 {
		rss = fmt.Sprintf("%.0f MB", float64(proc.MaxRSSKiB)/1024)
	}
	outputs := regexp.MustCompile(`::\{"outputs":(\{[^}]*\})\}::`).FindSubmatch(out)
	note := ""
	if outputs != nil {
		note = string(outputs[1])
	}
	return result{seconds: secs, note: "peak RSS " + rss + " " + note, rss: rss, timers: timers}, nil
}

func execIn(dir string, env []string, stdin io.Reader, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env, cmd.Stdin = dir, env, stdin
	return cmd.CombinedOutput()
}

var outputsLine = regexp.MustCompile(`(?m)^::(\{.*\})::$`)

// seed times the seed's pipeline from the JSON lines: prepare_batch,
// read_current, select_changes, insert_changes, read_back, verify_batch.
func (c config) seed(db, table, jsonl string) (result, error) {
	dir, err := os.MkdirTemp(c.dir, "seed-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	flow, err := os.ReadFile(filepath.Join(c.seeds, "postgres-clickhouse-cdc.yaml"))
	if err != nil {
		return result{}, err
	}
	ddl := regexp.MustCompile(`(?s)(CREATE TABLE IF NOT EXISTS default\.orders_cdc.*?ORDER BY id);`).FindSubmatch(flow)
	if ddl == nil {
		return result{}, errors.New("no CREATE TABLE in the seed flow")
	}
	if _, err := c.ch(strings.Replace(string(ddl[1]), "default.orders_cdc", db+"."+table, 1), nil); err != nil {
		return result{}, err
	}
	scripts := map[string]string{}
	for _, s := range []string{"prepare", "select", "verify"} {
		raw, err := os.ReadFile(filepath.Join(c.seeds, "reference", "cdc_"+map[string]string{"prepare": "prepare_batch", "select": "select_changes", "verify": "verify_batch"}[s]+".py"))
		if err != nil {
			return result{}, err
		}
		p := filepath.Join(dir, s+".py")
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(raw), "{{ vars.postgres_database }}", "shop")), 0o644); err != nil {
			return result{}, err
		}
		scripts[s] = p
	}
	// prepare_batch reads changes.jsonl in its working directory (Kestra's inputFiles).
	if err := os.Link(jsonl, filepath.Join(dir, "changes.jsonl")); err != nil {
		data, rerr := os.ReadFile(jsonl)
		if rerr != nil {
			return result{}, rerr
		}
		if err := os.WriteFile(filepath.Join(dir, "changes.jsonl"), data, 0o644); err != nil {
			return result{}, err
		}
	}
	python := func(script string) ([]byte, error) {
		out, err := execIn(dir, os.Environ(), nil, c.python, scripts[script])
		if err != nil {
			return nil, fmt.Errorf("%s.py: %v\n%s", script, err, out)
		}
		return out, nil
	}
	readQuery := func(ids string) string {
		return "SELECT id, customer_id, amount_cents, status, toString(_cdc_lsn) AS _cdc_lsn, _cdc_deleted FROM " + db + "." + table +
			" FINAL WHERE id IN (" + ids + ") FORMAT JSONEachRow"
	}
	// The JDBC reads return numbers as numbers, as IonToJson writes them.
	readSettings := []string{"--max_query_size=1000000000", "--max_ast_elements=100000000", "--max_expanded_ast_elements=100000000", "--output_format_json_quote_64bit_integers=0"}

	start := time.Now()
	out, err := python("prepare")
	if err != nil {
		return result{}, err
	}
	var prep struct {
		Outputs struct {
			IDs string `json:"ids_sql"`
		} `json:"outputs"`
	}
	if m := outputsLine.FindSubmatch(out); m == nil || json.Unmarshal(m[1], &prep) != nil {
		return result{}, fmt.Errorf("prepare printed no outputs: %.300s", out)
	}
	current, err := c.ch(readQuery(prep.Outputs.IDs), nil, readSettings...)
	if err != nil {
		return result{}, err
	}
	if err := os.WriteFile(filepath.Join(dir, "current.jsonl"), []byte(current), 0o644); err != nil {
		return result{}, err
	}
	out, err = python("select")
	if err != nil {
		return result{}, err
	}
	pending, err := os.Open(filepath.Join(dir, "pending.jsonl"))
	if err != nil {
		return result{}, err
	}
	_, err = c.ch("INSERT INTO "+db+"."+table+" (id, customer_id, amount_cents, status, _cdc_lsn, _cdc_deleted) FORMAT JSONEachRow", pending)
	pending.Close()
	if err != nil {
		return result{}, err
	}
	actual, err := c.ch(readQuery(prep.Outputs.IDs), nil, readSettings...)
	if err != nil {
		return result{}, err
	}
	if err := os.WriteFile(filepath.Join(dir, "actual.jsonl"), []byte(actual), 0o644); err != nil {
		return result{}, err
	}
	vout, err := python("verify")
	if err != nil {
		return result{}, err
	}
	secs := time.Since(start).Seconds()
	sel := ""
	if m := outputsLine.FindSubmatch(out); m != nil {
		sel = string(m[1])
	}
	return result{seconds: secs, note: strings.TrimSpace(string(vout)) + " " + sel}, nil
}

// rawInsert times clickhouse-client inserting the final rows as TSV.
func (c config) rawInsert(db, table, tsv string) (result, error) {
	if _, err := c.ch("CREATE TABLE "+db+"."+table+" (id Int64, customer_id Int64, amount_cents Int64, status String, _cdc_lsn UInt64, _cdc_deleted UInt8) "+
		"ENGINE = ReplacingMergeTree(_cdc_lsn) ORDER BY id", nil); err != nil {
		return result{}, err
	}
	f, err := os.Open(tsv)
	if err != nil {
		return result{}, err
	}
	defer f.Close()
	start := time.Now()
	if _, err := c.ch("INSERT INTO "+db+"."+table+" FORMAT TSV", f); err != nil {
		return result{}, err
	}
	return result{seconds: time.Since(start).Seconds(), note: "process start included"}, nil
}

// walk is the decoding limit: ion-go's Reader visiting every value of the
// file once (scalars read, containers entered), on one goroutine.
func walk(path string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	start := time.Now()
	r := ion.NewReader(bufio.NewReaderSize(f, 1<<20))
	n, err := ionwalk.Walk(r)
	if err != nil {
		return 0, err
	}
	secs := time.Since(start).Seconds()
	if n == 0 {
		return 0, errors.New("walk read nothing")
	}
	return secs, nil
}
