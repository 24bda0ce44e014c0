package parity

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amazon-ion/ion-go/ion"
	"gopkg.in/yaml.v3"

	"github.com/changesink/changesink/internal/testenv"
)

const (
	seedCDCFlow = "postgres-clickhouse-cdc.yaml"
	// ordersMapping is the shipped mapping for the seed's orders table.
	ordersMapping = "../flows/orders.mapping.yaml"
	// shippedCDCFlow carries the same mapping inline (vars.orders_mapping).
	shippedCDCFlow = "../flows/postgres-clickhouse-cdc.yaml"
)

// cdcOutputKeys are the values both report: the seed's prepare_batch
// (events, keys), select_changes (pending, skipped, deletes) and the count
// verify_batch prints; changesink's outputs of the same names.
var cdcOutputKeys = []string{"events", "keys", "pending", "skipped", "deletes", "verified"}

// cdcParity is one scenario's run: ClickHouse database A for the seed
// pipeline, B for changesink on text Ion (target made by changesink cdc
// setup), C for changesink on binary Ion (target made by the seed's DDL,
// then changesink cdc setup over it).
type cdcParity struct {
	name    string
	sc      *cdcScenario
	python  string
	bin     string
	ch      chClient
	chURL   string
	scripts map[string]string // prepare.py, select.py, verify.py: the seed's, rendered
	conv    string            // testdata/ion_to_jsonl.py, absolute
	a, b, c string            // database names
	mapA    string            // mapping files for A (swapped batches), B and C
	mapB    string
	mapC    string
	// diverged is set by a batch whose outcome differs by design
	// (cdcLastBatch): the final rows are then not compared.
	diverged bool
}

// TestCDCParity runs every testdata/cdc scenario through the seed pipeline
// and changesink (text and binary Ion) and compares what each leaves behind.
func TestCDCParity(t *testing.T) {
	env := testenv.Lookup(t, "CHANGESINK_TEST_CLICKHOUSE", "CHANGESINK_TEST_CLICKHOUSE_CLIENT", "CHANGESINK_TEST_PYTHON")
	seeds := testenv.Seeds(t)
	bin := ""
	var mapping []byte
	if !seedOnly() {
		bin = changesinkBinary(t)
		mapping = shippedOrdersMapping(t)
	}
	ddl := testenv.SeedTask(t, seeds, seedCDCFlow, "create_target", "sql")
	conv, err := filepath.Abs(filepath.Join("testdata", "ion_to_jsonl.py"))
	if err != nil {
		t.Fatal(err)
	}
	scripts := map[string]string{
		"prepare.py": seedScript(t, seeds, "cdc_prepare_batch.py"),
		"select.py":  seedScript(t, seeds, "cdc_select_changes.py"),
		"verify.py":  seedScript(t, seeds, "cdc_verify_batch.py"),
	}
	ch := chClient{argv: strings.Fields(env["CHANGESINK_TEST_CLICKHOUSE_CLIENT"])}
	scenarios := loadCDCScenarios(t)
	for _, name := range slices.Sorted(maps.Keys(scenarios)) {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			p := &cdcParity{name: name, sc: scenarios[name], python: env["CHANGESINK_TEST_PYTHON"], bin: bin, ch: ch,
				chURL: env["CHANGESINK_TEST_CLICKHOUSE"], scripts: scripts, conv: conv}
			for db, prefix := range map[*string]string{&p.a: "parity_seed_", &p.b: "parity_text_", &p.c: "parity_bin_"} {
				*db, _ = testenv.CreateClickHouseDatabase(t, p.chURL, prefix)
			}
			// A and C get the seed's DDL (C then also changesink's setup: a
			// target the seed flow made keeps working); B only changesink's
			// setup, but on a server where setup makes the target
			// ReplacingMergeTree(_cdc_lsn, _cdc_deleted) (23.2+), whose FINAL
			// hides the delete markers the seed's own reads need (a swapped
			// batch runs the seed on B), B gets the seed's DDL too: parity
			// then compares the two on the seed's schema, and tasks/cdc tests
			// the is_deleted engine (docs/clickhouse.md).
			seedDDL := []string{p.a, p.c}
			if isDeletedServer(t, ch) {
				seedDDL = append(seedDDL, p.b)
			}
			for _, db := range seedDDL {
				if _, err := ch.run(strings.ReplaceAll(ddl, "default.", db+"."), nil, true); err != nil {
					t.Fatalf("seed DDL: %v", err)
				}
			}
			if seedOnly() {
				p.runSeedOnly(t)
				return
			}
			dir := t.TempDir()
			for db, path := range map[string]*string{p.a: &p.mapA, p.b: &p.mapB, p.c: &p.mapC} {
				m := testenv.RetargetMapping(t, mapping, db)
				*path = writeFile(t, dir, db+".mapping.yaml", m)
				if db == p.a {
					continue // the seed's database: only a swapped batch's apply uses it
				}
				if res := runProc(t, time.Minute, dir, baseEnv(p.csEnv(*path, "")), nil, bin, "cdc", "setup"); res.Code != 0 {
					t.Fatalf("changesink cdc setup for %s: %s", db, res)
				}
			}
			p.compareSchema(t)
			p.run(t)
			t.Logf("scenario %s: %s", name, time.Since(start).Round(time.Millisecond))
		})
	}
}

// shippedOrdersMapping returns the orders mapping as shipped:
// flows/orders.mapping.yaml, or else the shipped flow's vars.orders_mapping
// (the file the flow hands changesink).
func shippedOrdersMapping(t *testing.T) []byte {
	t.Helper()
	if raw, err := os.ReadFile(ordersMapping); err == nil {
		return raw
	}
	raw, err := os.ReadFile(shippedCDCFlow)
	if err != nil {
		t.Fatalf("no orders mapping: %s and %s are absent (has the cdc command landed?)", ordersMapping, shippedCDCFlow)
	}
	var flow struct {
		Variables map[string]any `yaml:"variables"`
	}
	if err := yaml.Unmarshal(raw, &flow); err != nil {
		t.Fatalf("%s: %v", shippedCDCFlow, err)
	}
	m, ok := flow.Variables["orders_mapping"].(string)
	if !ok || m == "" {
		t.Fatalf("no orders mapping: %s is absent and %s has no variables.orders_mapping", ordersMapping, shippedCDCFlow)
	}
	return []byte(m)
}

func (p *cdcParity) csEnv(mapping, batchFile string) map[string]string {
	env := map[string]string{
		"CDC_MAPPING":         mapping,
		"CLICKHOUSE_URL":      p.chURL,
		"CLICKHOUSE_USERNAME": "default",
		"CLICKHOUSE_PASSWORD": "",
	}
	if batchFile != "" {
		env["CDC_BATCH_FILE"] = batchFile
	}
	return env
}

// compareSchema checks that changesink's setup made the table the seed's
// DDL makes (columns, types, engine) and the live view.
func (p *cdcParity) compareSchema(t *testing.T) {
	t.Helper()
	q := func(db string) []string {
		cols := p.ch.must(t, "SELECT table, name, type FROM system.columns WHERE database = '"+db+
			"' AND table IN ('orders_cdc', 'orders_live') ORDER BY table, name FORMAT TSV")
		// changesink's ledger (orders_cdc_ledger) is its bookkeeping, not
		// part of the read model: the README's differences table names it.
		eng := p.ch.must(t, "SELECT name, engine, replaceAll(engine_full, '"+db+".', '<db>.') FROM system.tables WHERE database = '"+db+
			"' AND name != 'orders_cdc_ledger' ORDER BY name FORMAT TSV")
		return append(splitLines(cols), splitLines(eng)...)
	}
	sa := q(p.a)
	for _, db := range []string{p.b, p.c} {
		if got := q(db); !slices.Equal(sa, got) {
			t.Errorf("changesink cdc setup made a different schema in %s than the seed's DDL:\n%s", db, lineDiff(sa, got))
		}
	}
}

func (p *cdcParity) run(t *testing.T) {
	for i, b := range p.sc.Batches {
		if !p.batch(t, i, b) {
			t.Fatalf("batch %d diverged; later batches would only repeat it", i+1)
		}
	}
	if p.diverged {
		t.Logf("final rows not compared: the outcome of a batch differs by design")
		return
	}
	ra, _ := orderRows(t, p.ch, p.a)
	for _, db := range []string{p.b, p.c} {
		if rb, _ := orderRows(t, p.ch, db); !slices.Equal(ra, rb) {
			t.Errorf("final rows of %s differ from the seed's:\n%s", db, lineDiff(ra, rb))
		}
	}
	live := func(db string) []string {
		return splitLines(p.ch.must(t, "SELECT * FROM "+db+".orders_live ORDER BY id FORMAT JSONEachRow"))
	}
	la := live(p.a)
	for _, db := range []string{p.b, p.c} {
		if lb := live(db); !slices.Equal(la, lb) {
			t.Errorf("orders_live of %s differs from the seed's:\n%s", db, lineDiff(la, lb))
		}
	}
}

// seedCDCRun is how the seed pipeline ended for one batch.
type seedCDCRun struct {
	ok       bool
	failedAt string // task id of the failed task
	failure  string // its last stderr line
	outputs  map[string]any
	expected string
	pending  string
}

var verifiedLine = regexp.MustCompile(`Verified (\d+) keys`)

// runSeed runs the seed flow's tasks for one batch, as the flow runs them.
func (p *cdcParity) runSeed(t *testing.T, n int, db string, text []byte) seedCDCRun {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, dir, "changes.ion", text)
	env := baseEnv(nil)
	if res := runProc(t, time.Minute, dir, env, nil, p.python, p.conv, "changes.ion", "changes.jsonl"); res.Code != 0 {
		t.Fatalf("batch %d: IonToJson stand-in failed (a scenario the seed flow cannot even decode?): %s", n, res)
	}
	for name, body := range p.scripts {
		writeFile(t, dir, name, []byte(body))
	}
	run := seedCDCRun{outputs: map[string]any{}}
	fail := func(task string, res procResult) seedCDCRun {
		run.failedAt, run.failure = task, lastLine(res.Stderr)
		return run
	}
	prep := runProc(t, time.Minute, dir, env, nil, p.python, "prepare.py")
	if prep.Code != 0 {
		return fail("prepare_batch", prep)
	}
	for k, v := range prep.Outputs {
		run.outputs[k] = v
	}
	ids, _ := prep.Outputs["ids_sql"].(string)
	read := func(name string) {
		out, err := p.ch.run("SELECT id, customer_id, amount_cents, status, toString(_cdc_lsn) AS _cdc_lsn, _cdc_deleted FROM "+
			db+".orders_cdc FINAL WHERE id IN ("+ids+") FORMAT JSONEachRow", nil, false)
		if err != nil {
			t.Fatalf("batch %d: seed %s: %v", n, name, err)
		}
		writeFile(t, dir, name, []byte(out))
	}
	read("current.jsonl")
	// select_changes reads expected.jsonl and current.jsonl.
	sel := runProc(t, time.Minute, dir, env, nil, p.python, "select.py")
	if sel.Code != 0 {
		return fail("select_changes", sel)
	}
	for k, v := range sel.Outputs {
		run.outputs[k] = v
	}
	run.expected, _ = readFileOr(filepath.Join(dir, "expected.jsonl"))
	run.pending, _ = readFileOr(filepath.Join(dir, "pending.jsonl"))
	if pending, _ := strconv.Atoi(fmt.Sprint(sel.Outputs["pending"])); pending > 0 {
		if _, err := p.ch.run("INSERT INTO "+db+".orders_cdc (id, customer_id, amount_cents, status, _cdc_lsn, _cdc_deleted) FORMAT JSONEachRow",
			[]byte(run.pending), false); err != nil {
			t.Fatalf("batch %d: seed insert_changes: %v", n, err)
		}
	}
	read("actual.jsonl")
	ver := runProc(t, time.Minute, dir, env, nil, p.python, "verify.py")
	if ver.Code != 0 {
		return fail("verify_batch", ver)
	}
	m := verifiedLine.FindStringSubmatch(ver.Stdout)
	if m == nil {
		t.Fatalf("batch %d: verify_batch printed no count: %s", n, ver)
	}
	run.outputs["verified"] = json.Number(m[1])
	run.ok = true
	return run
}

// batch runs batch i (0-based) through all three and compares.
func (p *cdcParity) batch(t *testing.T, i int, b cdcBatch) bool {
	t.Helper()
	n := i + 1
	text, binary, err := encodeBatch(b, i)
	if err != nil {
		t.Fatal(err)
	}
	rowsBefore := map[string][]string{}
	countBefore := map[string]string{}
	for _, db := range []string{p.a, p.b, p.c} {
		rowsBefore[db], countBefore[db] = orderRows(t, p.ch, db)
	}
	// The seed writes A and changesink (text) B, except in a swapped batch,
	// where each continues on the rows the other wrote.
	seedDB, textDB, textMap := p.a, p.b, p.mapB
	if b.Swap {
		seedDB, textDB, textMap = p.b, p.a, p.mapA
	}
	seed := p.runSeed(t, n, seedDB, text)
	// Text: the file under the default name in the working directory (no
	// CDC_BATCH_FILE); binary: named by CDC_BATCH_FILE.
	dirB, dirC := t.TempDir(), t.TempDir()
	writeFile(t, dirB, "changes.ion", text)
	binFile := writeFile(t, dirC, "batch.bin.ion", binary)
	csB := runProc(t, 2*time.Minute, dirB, baseEnv(merge(p.csEnv(textMap, ""), map[string]string{"WORKING_DIR": dirB})), nil, p.bin, "cdc", "apply")
	csC := runProc(t, 2*time.Minute, dirC, baseEnv(merge(p.csEnv(p.mapC, binFile), map[string]string{"WORKING_DIR": dirC})), nil, p.bin, "cdc", "apply")
	t.Logf("batch %d: seed %s, changesink text exit %d in %s, binary exit %d in %s", n, seedSummary(seed),
		csB.Code, csB.Elapsed.Round(time.Millisecond), csC.Code, csC.Elapsed.Round(time.Millisecond))

	ok := true
	fail := func(format string, args ...any) {
		t.Errorf("batch %d: "+format, append([]any{n}, args...)...)
		ok = false
	}
	runs := []struct {
		what string
		db   string
		dir  string
		res  procResult
	}{{"changesink (text Ion)", textDB, dirB, csB}, {"changesink (binary Ion)", p.c, dirC, csC}}

	if len(b.Differs) == 1 {
		return p.outcomeDifference(t, n, b, seed, seedDB, runs2(textDB, dirB, csB, p.c, dirC, csC), rowsBefore, countBefore, text) && ok
	}
	if b.Expect != "ok" {
		if seed.ok {
			t.Fatalf("batch %d: the seed pipeline succeeded where the scenario expects %s; fix the scenario", n, b.Expect)
		}
		want := map[string]int{"refused": 1, "config": 2}[b.Expect]
		for _, r := range runs {
			if r.res.Code != want || r.res.Outputs["error_class"] != b.Expect {
				fail("%s: exit %d, error_class %v; want exit %d, %s (the seed failed in %s: %s)\n%s",
					r.what, r.res.Code, r.res.Outputs["error_class"], want, b.Expect, seed.failedAt, seed.failure, r.res)
				continue
			}
			msg, _ := r.res.Outputs["error"].(string)
			for _, m := range b.ErrorMentions {
				if !strings.Contains(strings.ToLower(msg), strings.ToLower(m)) {
					fail("%s: the error does not mention %q: %s", r.what, m, msg)
				}
			}
		}
		for _, db := range []string{p.a, p.b, p.c} {
			rows, count := orderRows(t, p.ch, db)
			if count != countBefore[db] || !slices.Equal(rows, rowsBefore[db]) {
				fail("the failed batch wrote to %s: %s physical rows before, %s after:\n%s", db, countBefore[db], count, lineDiff(rowsBefore[db], rows))
			}
		}
		msg, _ := csB.Outputs["error"].(string)
		t.Logf("batch %d refused by all; seed (%s): %s; changesink: %s", n, seed.failedAt, seed.failure, msg)
		return ok
	}
	if !seed.ok {
		t.Fatalf("batch %d: the seed pipeline failed in %s where the scenario expects ok; fix the scenario: %s", n, seed.failedAt, seed.failure)
	}
	for _, d := range subset(seed.outputs, b.Want) {
		t.Fatalf("batch %d: the seed's outputs differ from the scenario's want (fix the scenario): %s", n, d)
	}
	ra, _ := orderRows(t, p.ch, seedDB)
	for _, r := range runs {
		if r.res.Code != 0 {
			fail("the seed succeeded but %s failed\nseed outputs: %s\n%s", r.what, canonical(seed.outputs), r.res)
			continue
		}
		for _, k := range cdcOutputKeys {
			if !jsonEqual(seed.outputs[k], r.res.Outputs[k]) {
				fail("%s: output %s = %s, the seed's %s", r.what, k, canonical(r.res.Outputs[k]), canonical(seed.outputs[k]))
			}
		}
		for name, want := range map[string]string{"expected.jsonl": seed.expected, "pending.jsonl": seed.pending} {
			got, found := readFileOr(filepath.Join(r.dir, name))
			if !found || got != want {
				fail("%s: %s differs from the seed's:\n%s", r.what, name, lineDiff(splitLines(want), splitLines(got)))
				if found && got != want && slices.Equal(splitLines(want), splitLines(got)) {
					fail("%s: %s: same lines, different bytes: seed %q, changesink %q", r.what, name, want, got)
				}
			}
		}
		if rb, _ := orderRows(t, p.ch, r.db); !slices.Equal(ra, rb) {
			fail("%s: rows differ from the seed's:\n%s", r.what, lineDiff(ra, rb))
		}
	}
	return ok
}

// csRun is one changesink run of a batch: its form, database, working
// directory and result.
type csRun struct {
	what string
	db   string
	dir  string
	res  procResult
}

func runs2(textDB, dirB string, csB procResult, binDB, dirC string, csC procResult) []csRun {
	return []csRun{{"changesink (text Ion)", textDB, dirB, csB}, {"changesink (binary Ion)", binDB, dirC, csC}}
}

// outcomeDifference checks a batch that names a cdc difference within the
// difference's bounds (differences_test.go).
func (p *cdcParity) outcomeDifference(t *testing.T, n int, b cdcBatch, seed seedCDCRun, seedDB string, runs []csRun,
	rowsBefore map[string][]string, countBefore map[string]string, text []byte) bool {
	t.Helper()
	d := b.Differs[0]
	ok := true
	fail := func(format string, args ...any) {
		t.Errorf("batch %d (difference %s): "+format, append([]any{n, d}, args...)...)
		ok = false
	}
	unchanged := func(db string) bool {
		rows, count := orderRows(t, p.ch, db)
		return count == countBefore[db] && slices.Equal(rows, rowsBefore[db])
	}
	refused := func(mention string) {
		for _, r := range runs {
			msg, _ := r.res.Outputs["error"].(string)
			if r.res.Code != 1 || r.res.Outputs["error_class"] != "refused" || !strings.Contains(msg, mention) {
				fail("%s: exit %d, error %q; want a refusal saying %q", r.what, r.res.Code, msg, mention)
			}
			if !unchanged(r.db) {
				fail("%s: the refused batch changed %s", r.what, r.db)
			}
		}
	}
	switch d {
	case "older_batch_refused":
		if !seed.ok || fmt.Sprint(seed.outputs["pending"]) != "0" || fmt.Sprint(seed.outputs["skipped"]) == "0" {
			fail("the seed did not skip the whole batch (%s): the difference no longer occurs", seedSummary(seed))
		}
		for _, sub := range subset(seed.outputs, b.Want) {
			t.Fatalf("batch %d: the seed's outputs differ from the scenario's want (fix the scenario): %s", n, sub)
		}
		refused("versions went backwards")
		if !unchanged(seedDB) {
			fail("the seed's skip changed %s", seedDB)
		}
	case "contradiction_refused":
		if !seed.ok {
			fail("the seed failed (%s): the difference no longer occurs", seedSummary(seed))
		}
		refused("event contradicts itself")
		p.diverged = true
	case "truncate_applied":
		if seed.ok || seed.failedAt != "prepare_batch" || !strings.Contains(seed.failure, "'id'") {
			fail("the seed did not fail on the missing id (%s)", seedSummary(seed))
		}
		if !unchanged(seedDB) {
			fail("the seed's failed run changed %s", seedDB)
		}
		// The seed's database is as every database was before the batch.
		liveBefore := strings.TrimSpace(p.ch.must(t, "SELECT count() FROM "+seedDB+".orders_live FORMAT TSV"))
		lsn := b.Events[len(b.Events)-1].LSN.Value
		for _, r := range runs {
			if r.res.Code != 0 {
				fail("%s failed: %s", r.what, r.res)
				continue
			}
			got := strings.TrimSpace(p.ch.must(t, "SELECT countIf(_cdc_lsn = "+lsn+" AND _cdc_deleted = 1), countIf(_cdc_deleted = 0) FROM "+
				r.db+".orders_cdc FINAL FORMAT TSV"))
			if got != liveBefore+"\t0" {
				fail("%s: (markers at the TRUNCATE's LSN %s, live rows) = %q, want (%s, 0): every key live before it deleted at it", r.what, lsn, got, liveBefore)
			}
		}
		p.diverged = true
	case "unchanged_toast_filled":
		// The seed fails, changesink fills the unchanged values.
		switch rows, _ := orderRows(t, p.ch, seedDB); {
		case seed.ok:
			fail("the seed succeeded; the difference no longer occurs")
		case !strings.Contains(seed.failure, "incomplete TOAST value"):
			fail("the seed failed, but not on a TOAST value: %s", seed.failure)
		case !slices.Equal(rows, rowsBefore[seedDB]):
			fail("the seed's failed batch changed database %s", seedDB)
		}
		for _, r := range runs {
			if r.res.Code != 0 {
				fail("%s failed too; the difference no longer occurs (then expect %s without it)\n%s", r.what, b.Expect, r.res)
				continue
			}
			want, err := toastFilledRows(rowsBefore[r.db], text)
			if err != nil {
				t.Fatalf("batch %d: %v", n, err)
			}
			if got, _ := orderRows(t, p.ch, r.db); !sameJSONRows(got, want) {
				fail("%s: rows are not the rows before with the batch applied, placeholders filled:\n%s", r.what, lineDiff(want, got))
			}
		}
		p.diverged = true
	}
	t.Logf("batch %d: difference %s within its bounds: seed %s", n, d, seedSummary(seed))
	return ok
}

// runSeedOnly runs the batches through the seed pipeline alone and checks
// them against the scenario's expect and want (CHANGESINK_PARITY_SEED_ONLY=1).
func (p *cdcParity) runSeedOnly(t *testing.T) {
	for i, b := range p.sc.Batches {
		text, _, err := encodeBatch(b, i)
		if err != nil {
			t.Fatal(err)
		}
		before, count := orderRows(t, p.ch, p.a)
		seed := p.runSeed(t, i+1, p.a, text)
		after, countAfter := orderRows(t, p.ch, p.a)
		t.Logf("batch %d: seed %s", i+1, seedSummary(seed))
		switch {
		case b.Expect == "ok" && !seed.ok:
			t.Errorf("batch %d: the seed failed, the scenario expects ok", i+1)
		case b.Expect != "ok" && seed.ok:
			t.Errorf("batch %d: the seed succeeded, the scenario expects %s", i+1, b.Expect)
		case b.Expect != "ok" && (count != countAfter || !slices.Equal(before, after)):
			t.Errorf("batch %d: the seed's failed batch wrote rows", i+1)
		case b.Expect == "ok":
			for _, d := range subset(seed.outputs, b.Want) {
				t.Errorf("batch %d: the seed's outputs differ from want: %s", i+1, d)
			}
		}
	}
	rows, _ := orderRows(t, p.ch, p.a)
	t.Logf("final rows (seed):\n  %s", strings.Join(rows, "\n  "))
}

func seedSummary(s seedCDCRun) string {
	if s.ok {
		return "ok " + canonical(s.outputs)
	}
	return "failed in " + s.failedAt + ": " + s.failure
}

// toastFilledRows is the bound of unchanged_toast_filled: the FINAL rows
// before a batch (orderRows' lines) with the batch's events (text Ion)
// applied in order, the latest LSN of a key winning, and each
// __debezium_unavailable_value replaced by the key's previous value.
func toastFilledRows(before []string, text []byte) ([]string, error) {
	rows := map[string]map[string]any{}
	for _, line := range before {
		r, err := jsonRow(line)
		if err != nil {
			return nil, err
		}
		rows[fmt.Sprint(r["id"])] = r
	}
	dec := ion.NewDecoder(ion.NewReaderBytes(text))
	for {
		v, err := dec.Decode()
		if err == ion.ErrNoInput {
			break
		}
		if err != nil {
			return nil, err
		}
		ev, _ := v.(map[string]any)
		meta, _ := ev["metadata"].(map[string]any)
		src, _ := meta["source"].(map[string]any)
		lsn, id := fmt.Sprint(src["lsn"]), fmt.Sprint(ev["id"])
		prev := rows[id]
		if prev != nil {
			if pl, _ := strconv.ParseUint(fmt.Sprint(prev["_cdc_lsn"]), 10, 64); pl >= mustUint(lsn) {
				continue
			}
		}
		next := map[string]any{"id": json.Number(id), "_cdc_lsn": json.Number(lsn), "_cdc_deleted": json.Number("0")}
		if del, _ := ev["deleted"].(bool); del {
			next["customer_id"], next["amount_cents"], next["status"], next["_cdc_deleted"] = json.Number("0"), json.Number("0"), "", json.Number("1")
		} else {
			for _, c := range []string{"customer_id", "amount_cents", "status"} {
				val := ev[c]
				if s, ok := val.(*string); ok {
					val = *s
				}
				if val == "__debezium_unavailable_value" {
					if prev == nil || fmt.Sprint(prev["_cdc_deleted"]) != "0" {
						return nil, fmt.Errorf("key %s: a placeholder without a previous row", id)
					}
					val = prev[c]
				} else if n, ok := val.(int); ok {
					val = json.Number(strconv.Itoa(n))
				} else if n, ok := val.(int64); ok {
					val = json.Number(strconv.FormatInt(n, 10))
				}
				next[c] = val
			}
		}
		rows[id] = next
	}
	var out []string
	for _, r := range rows {
		b, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		out = append(out, string(b))
	}
	slices.SortFunc(out, func(a, b string) int {
		ra, _ := jsonRow(a)
		rb, _ := jsonRow(b)
		return int(mustUint(fmt.Sprint(ra["id"]))) - int(mustUint(fmt.Sprint(rb["id"])))
	})
	return out, nil
}

func mustUint(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

func jsonRow(line string) (map[string]any, error) {
	dec := json.NewDecoder(strings.NewReader(line))
	dec.UseNumber()
	var r map[string]any
	return r, dec.Decode(&r)
}

// sameJSONRows compares JSON lines as values (key order and number
// spelling aside).
func sameJSONRows(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, err1 := jsonRow(a[i])
		y, err2 := jsonRow(b[i])
		if err1 != nil || err2 != nil || fmt.Sprint(x) != fmt.Sprint(y) {
			return false
		}
	}
	return true
}
