package parity

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/changesink/changesink/internal/testenv"
)

const seedKafkaFlow = "kafka-compacted-postgres-state.yaml"

// kafkaOutputKeys are the seed's outputs (Kestra.outputs(report)).
var kafkaOutputKeys = []string{"topic", "consumed", "tombstones", "next_offsets", "live_keys"}

// kafkaParity is one scenario's run: one topic, database A for the seed,
// database B for changesink.
type kafkaParity struct {
	name     string
	sc       *kafkaScenario
	brokers  string
	python   string
	seeds    string
	bin      string
	checkSQL string
	topic    *kafkaTopic
	a, b     *pgDatabase
	// allowed collects every difference a batch so far has named; the final
	// comparison accepts those.
	allowed map[string]bool
	// outcomeDiverged is set by a batch whose outcome differs by design.
	outcomeDiverged bool
}

// TestKafkaStateParity runs every testdata/kafka scenario through the seed
// script and changesink and compares what each leaves behind.
func TestKafkaStateParity(t *testing.T) {
	env := testenv.Lookup(t, "CHANGESINK_TEST_KAFKA", "CHANGESINK_TEST_PG", "CHANGESINK_TEST_PYTHON")
	seeds := testenv.Seeds(t)
	bin := ""
	if !seedOnly() {
		bin = changesinkBinary(t)
	}
	ddl := testenv.SeedTask(t, seeds, seedKafkaFlow, "create_state_tables", "sql")
	check := testenv.SeedTask(t, seeds, seedKafkaFlow, "check_saved_positions", "sql")
	scenarios := loadKafkaScenarios(t)
	for _, name := range slices.Sorted(maps.Keys(scenarios)) {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			p := &kafkaParity{name: name, sc: scenarios[name], brokers: env["CHANGESINK_TEST_KAFKA"], python: env["CHANGESINK_TEST_PYTHON"],
				seeds: seeds, bin: bin, checkSQL: check, allowed: map[string]bool{}}
			base := "parity_" + strings.ReplaceAll(name, "-", "_") + "_" + testenv.RandomHex(4)
			p.topic = createTopic(t, p.brokers, base, p.sc.Partitions, p.sc.Configs)
			p.a = createDatabase(t, env["CHANGESINK_TEST_PG"], base+"_seed")
			p.b = createDatabase(t, env["CHANGESINK_TEST_PG"], base+"_cs")
			p.a.exec(t, ddl)
			if seedOnly() {
				p.runSeedOnly(t)
				return
			}
			if res := runProc(t, time.Minute, t.TempDir(), baseEnv(p.b.env), nil, bin, "kafka-state", "setup"); res.Code != 0 {
				t.Fatalf("changesink kafka-state setup: %s", res)
			}
			p.run(t)
			t.Logf("scenario %s: %s", name, time.Since(start).Round(time.Millisecond))
		})
	}
}

func (p *kafkaParity) run(t *testing.T) {
	p.steps(t, func(i, batch int, b *kafkaBatch) {
		if !p.batch(t, batch, b) {
			t.Fatalf("step %d (batch %d) diverged; later batches would only repeat it", i+1, batch)
		}
	})
	if p.outcomeDiverged {
		t.Logf("final state not compared: the last batch's outcome differs by design")
		return
	}
	// Final state, whatever the last batch compared.
	sa, sb := snapshotKafkaState(t, p.a, p.topic.name), snapshotKafkaState(t, p.b, p.topic.name)
	observed := map[string]bool{}
	for _, d := range p.compareState(t, sa, sb, observed) {
		t.Errorf("final state: %s", d)
	}
	for d := range observed {
		if !p.allowed[d] {
			t.Errorf("final state shows difference %q, which no batch names", d)
		}
	}
}

// topicStep carries out st when it acts on the topic (produce, a
// transaction, waiting for compaction, DeleteRecords, a pause) and reports
// whether it did; a batch step is left to the caller.
func (p *kafkaParity) topicStep(t *testing.T, st kafkaStep) bool {
	switch {
	case st.Produce != nil:
		p.topic.produce(t, expandAll(t, st.Produce))
	case st.Transaction != nil:
		p.topic.produceTxn(t, expandAll(t, st.Transaction.Records), st.Transaction.End == "commit")
	case st.Compact != nil:
		p.topic.waitCompacted(t, st.Compact.Remaining)
	case st.DeleteRecords != nil:
		p.topic.deleteRecords(t, int32(st.DeleteRecords.Partition), st.DeleteRecords.Before)
	case st.PauseMS > 0:
		time.Sleep(time.Duration(st.PauseMS) * time.Millisecond)
	default:
		return false
	}
	return true
}

// runSeedOnly runs the scenario's batches through the seed alone and checks
// them against the scenario's expect and want (CHANGESINK_PARITY_SEED_ONLY=1).
func (p *kafkaParity) runSeedOnly(t *testing.T) {
	p.steps(t, func(_, batch int, b *kafkaBatch) {
		env := merge(map[string]string{
			"TOPIC": p.batchTopic(b), "MAX_RECORDS": strconv.Itoa(b.MaxRecords), "POLL_SECONDS": strconv.Itoa(b.PollSeconds),
			"KAFKA_PROPERTIES": `{"bootstrap.servers":"` + p.brokers + `"}`,
		}, p.a.env)
		var release func()
		if b.HoldLock {
			release = holdTopicLock(t, p.a, p.topic.name)
		}
		before := snapshotKafkaState(t, p.a, p.topic.name)
		seed := runProc(t, time.Duration(b.PollSeconds)*time.Second+2*time.Minute, t.TempDir(), baseEnv(env), nil, p.python,
			filepath.Join(p.seeds, "reference", "kafka_state_materialize.py"))
		if release != nil {
			release()
		}
		after := snapshotKafkaState(t, p.a, p.topic.name)
		t.Logf("batch %d: seed exit %d in %s, outputs %s, error %s", batch, seed.Code, seed.Elapsed.Round(time.Millisecond),
			canonical(seed.Outputs), lastLine(seed.Stderr))
		switch {
		case b.Expect == "ok" && seed.Code != 0:
			t.Errorf("batch %d: seed failed, scenario expects ok: %s", batch, seed)
		case b.Expect != "ok" && seed.Code == 0:
			t.Errorf("batch %d: seed succeeded, scenario expects %s", batch, b.Expect)
		case b.Expect != "ok" && after.Raw != before.Raw:
			t.Errorf("batch %d: the seed's failed run changed the database", batch)
		case b.Expect == "ok":
			for _, d := range subset(seed.Outputs, b.Want) {
				t.Errorf("batch %d: seed outputs differ from want: %s", batch, d)
			}
		}
	})
	t.Logf("final state (seed):\n%s", snapshotKafkaState(t, p.a, p.topic.name))
}

// steps carries out the scenario's steps in order: a step on the topic
// itself (topicStep), a batch step through batch, with the step's index and
// the batch's number (from 1).
func (p *kafkaParity) steps(t *testing.T, batch func(i, n int, b *kafkaBatch)) {
	n := 0
	for i, st := range p.sc.Steps {
		switch {
		case p.topicStep(t, st):
		case st.Batch != nil:
			n++
			batch(i, n, st.Batch)
		}
	}
}

// batchTopic is the TOPIC a batch runs with.
func (p *kafkaParity) batchTopic(b *kafkaBatch) string {
	if b.MissingTopic {
		return p.topic.name + "-missing"
	}
	return p.topic.name
}

// seedOnly reports whether CHANGESINK_PARITY_SEED_ONLY=1 asks to run only
// the seed side, checked against the scenarios' expect and want (for
// writing scenarios, or before changesink's commands exist).
func seedOnly() bool { return os.Getenv("CHANGESINK_PARITY_SEED_ONLY") == "1" }

func expandAll(t *testing.T, recs []kafkaRecord) []producedRecord {
	t.Helper()
	var out []producedRecord
	for _, r := range recs {
		rs, err := r.expand()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rs...)
	}
	return out
}

// batch runs batch n of both implementations and compares; it reports
// whether they agreed.
func (p *kafkaParity) batch(t *testing.T, n int, b *kafkaBatch) bool {
	t.Helper()
	for _, d := range b.Differs {
		p.allowed[d] = true
	}
	common := map[string]string{
		"TOPIC":            p.batchTopic(b),
		"MAX_RECORDS":      strconv.Itoa(b.MaxRecords),
		"POLL_SECONDS":     strconv.Itoa(b.PollSeconds),
		"KAFKA_PROPERTIES": `{"bootstrap.servers":"` + p.brokers + `"}`,
	}
	// The seed writes database A and changesink database B, except in a
	// swapped batch: then each continues from positions the other wrote.
	seedDB, csDB := p.a, p.b
	if b.Swap {
		seedDB, csDB = p.b, p.a
	}
	dirS, dirC := t.TempDir(), t.TempDir()
	envS, envC := merge(common, seedDB.env), merge(common, csDB.env, map[string]string{"WORKING_DIR": dirC})
	beforeS, beforeC := snapshotKafkaState(t, seedDB, p.topic.name), snapshotKafkaState(t, csDB, p.topic.name)
	var release []func()
	if b.HoldLock {
		release = append(release, holdTopicLock(t, p.a, p.topic.name), holdTopicLock(t, p.b, p.topic.name))
	}
	timeout := time.Duration(b.PollSeconds)*time.Second + 2*time.Minute
	seed := runProc(t, timeout, dirS, baseEnv(envS), nil, p.python, filepath.Join(p.seeds, "reference", "kafka_state_materialize.py"))
	cs := runProc(t, timeout, dirC, baseEnv(envC), nil, p.bin, "kafka-state", "materialize")
	for _, r := range release {
		r()
	}
	afterS, afterC := snapshotKafkaState(t, seedDB, p.topic.name), snapshotKafkaState(t, csDB, p.topic.name)
	t.Logf("batch %d: seed (database %s) exit %d in %s, changesink (database %s) exit %d in %s", n, seedDB.name, seed.Code,
		seed.Elapsed.Round(time.Millisecond), csDB.name, cs.Code, cs.Elapsed.Round(time.Millisecond))

	ok := true
	fail := func(format string, args ...any) {
		t.Errorf("batch %d: "+format, append([]any{n}, args...)...)
		ok = false
	}
	if b.Expect != "ok" && len(b.Differs) == 1 && outcomeDifferences[b.Differs[0]] {
		// The seed fails, changesink succeeds (see differences_test.go).
		switch {
		case seed.Code == 0:
			fail("the seed succeeded; difference %q no longer occurs", b.Differs[0])
		case !strings.Contains(seed.Stderr, "RecursionError"):
			fail("the seed failed, but not with RecursionError: %s", lastLine(seed.Stderr))
		case cs.Code != 0:
			fail("changesink failed too; difference %q no longer occurs (then expect %s without it)\n%s", b.Differs[0], b.Expect, cs)
		case afterS.Raw != beforeS.Raw:
			fail("the seed's failed run changed database %s", seedDB.name)
		default:
			t.Logf("batch %d: difference %s: the seed failed (%s), changesink stored it", n, b.Differs[0], lastLine(seed.Stderr))
		}
		p.outcomeDiverged = true
		return ok
	}
	if b.Expect != "ok" {
		if seed.Code == 0 {
			t.Fatalf("batch %d: the seed succeeded where the scenario expects %s; fix the scenario\nseed: %s", n, b.Expect, seed)
		}
		if afterS.Raw != beforeS.Raw {
			fail("the seed's failed run changed database %s:\nbefore %s\nafter  %s", seedDB.name, beforeS.Raw, afterS.Raw)
		}
		want := map[string]int{"refused": 1, "config": 2, "transient": 3}[b.Expect]
		if cs.Code != want || cs.Outputs["error_class"] != b.Expect {
			fail("changesink: exit %d, error_class %v; want exit %d, %s (seed failed too: %s)\nchangesink: %s",
				cs.Code, cs.Outputs["error_class"], want, b.Expect, lastLine(seed.Stderr), cs)
		}
		if afterC.Raw != beforeC.Raw {
			fail("changesink's failed run changed database %s:\nbefore %s\nafter  %s", csDB.name, beforeC.Raw, afterC.Raw)
		}
		// The seed writes batch-report.json only after PostgreSQL commits.
		if _, found := readFileOr(filepath.Join(dirC, "batch-report.json")); found {
			fail("changesink's failed run left a batch-report.json")
		}
		msg, _ := cs.Outputs["error"].(string)
		for _, m := range b.ErrorMentions {
			m = strings.ReplaceAll(m, "{topic}", p.topic.name)
			if !strings.Contains(strings.ToLower(msg), strings.ToLower(m)) {
				fail("changesink's error does not mention %q: %s", m, msg)
			}
		}
		if len(b.Differs) > 0 {
			fail("a failed batch can only name one outcome difference")
		}
		t.Logf("batch %d refused by both; seed: %s; changesink: %s", n, lastLine(seed.Stderr), msg)
		return ok
	}
	if seed.Code != 0 {
		t.Fatalf("batch %d: the seed failed where the scenario expects ok; fix the scenario\nseed: %s", n, seed)
	}
	if cs.Code != 0 {
		fail("the seed succeeded but changesink failed\nseed outputs: %s\nchangesink: %s", canonical(seed.Outputs), cs)
		return false
	}
	for _, d := range subset(seed.Outputs, b.Want) {
		t.Fatalf("batch %d: the seed's outputs differ from the scenario's want (fix the scenario): %s", n, d)
	}
	observed := map[string]bool{}
	for _, d := range p.compareOutputs(t, "outputs", seed.Outputs, cs.Outputs, b.AnyOrder, observed) {
		fail("%s", d)
	}
	repA, okA := readFileOr(filepath.Join(dirS, "batch-report.json"))
	repB, okB := readFileOr(filepath.Join(dirC, "batch-report.json"))
	switch {
	case !okA || !okB:
		fail("batch-report.json: seed %s, changesink %s", repA, repB)
	default:
		ja, errA := decodeJSON([]byte(repA))
		jb, errB := decodeJSON([]byte(repB))
		ma, _ := ja.(map[string]any)
		mb, _ := jb.(map[string]any)
		if errA != nil || errB != nil || ma == nil || mb == nil {
			fail("batch-report.json not a JSON object: seed %v %s, changesink %v %s", errA, repA, errB, repB)
		} else {
			for _, d := range p.compareOutputs(t, "batch-report.json", ma, mb, b.AnyOrder, observed) {
				fail("%s", d)
			}
		}
	}
	if !b.AnyOrder {
		for _, d := range p.compareState(t, afterS, afterC, observed) {
			fail("%s", d)
		}
	}
	for _, d := range b.Differs {
		if !observed[d] {
			fail("the scenario names difference %q, but it did not occur (changesink now matches the seed here? then remove it from the scenario and the README table)", d)
		}
	}
	for d := range observed {
		if !slices.Contains(b.Differs, d) {
			fail("difference %q occurred but the scenario does not name it for this batch", d)
		}
	}
	// The seed flow's check_saved_positions and changesink's verify, on both.
	for _, db := range []*pgDatabase{p.a, p.b} {
		if !seedPositionsValid(t, db, p.checkSQL, p.topic.name) {
			fail("the seed flow's check_saved_positions says database %s is inconsistent", db.name)
		}
		if v := runProc(t, time.Minute, t.TempDir(), baseEnv(merge(db.env, map[string]string{"TOPIC": p.topic.name})), nil, p.bin, "kafka-state", "verify"); v.Code != 0 {
			fail("changesink kafka-state verify on database %s: %s", db.name, v)
		}
	}
	return ok
}

// compareOutputs compares the seed's outputs keys, accepting the
// differences allowed so far; it records those it sees in observed.
func (p *kafkaParity) compareOutputs(t *testing.T, what string, seed, cs map[string]any, anyOrder bool, observed map[string]bool) []string {
	t.Helper()
	var diffs []string
	keys := kafkaOutputKeys
	if anyOrder {
		keys = []string{"topic", "consumed"}
	}
	for _, k := range keys {
		sv, sok := seed[k]
		cv, cok := cs[k]
		if !sok || !cok {
			diffs = append(diffs, fmt.Sprintf("%s %s: seed has %v, changesink has %v", what, k, sok, cok))
			continue
		}
		if k == "next_offsets" {
			so, errS := toOffsets(sv)
			co, errC := toOffsets(cv)
			if errS != nil || errC != nil {
				diffs = append(diffs, fmt.Sprintf("%s next_offsets: seed %s (%v), changesink %s (%v)", what, canonical(sv), errS, canonical(cv), errC))
				continue
			}
			for _, d := range p.reconcileOffsets(t, so, co, observed) {
				diffs = append(diffs, what+" next_offsets: "+d)
			}
			continue
		}
		if !jsonEqual(sv, cv) {
			diffs = append(diffs, fmt.Sprintf("%s %s: seed %s, changesink %s", what, k, canonical(sv), canonical(cv)))
		}
	}
	return diffs
}

// compareState compares the tables, accepting the checked differences and
// recording those it sees in observed.
func (p *kafkaParity) compareState(t *testing.T, a, b kafkaState, observed map[string]bool) []string {
	t.Helper()
	var diffs []string
	if a.HasPositions != b.HasPositions || a.ClusterID != b.ClusterID || a.TopicID != b.TopicID {
		diffs = append(diffs, fmt.Sprintf("positions row: seed (present %v, cluster %q, topic id %q), changesink (present %v, cluster %q, topic id %q)",
			a.HasPositions, a.ClusterID, a.TopicID, b.HasPositions, b.ClusterID, b.TopicID))
	}
	if a.HasPositions && b.HasPositions {
		for _, d := range p.reconcileOffsets(t, a.NextOffsets, b.NextOffsets, observed) {
			diffs = append(diffs, "positions.next_offsets: "+d)
		}
	}
	return append(diffs, compareRecords(a.Records, b.Records, observed)...)
}

// compareRecords compares records rows (key, payload, deleted, partition,
// offset). Payloads that differ only in how numbers are written, and are
// equal once every number is read as a float64, are the exact_json_numbers
// difference.
func compareRecords(a, b []string, observed map[string]bool) []string {
	if slices.Equal(a, b) {
		return nil
	}
	if len(a) == len(b) {
		var bad []string
		numbers := false
		for i := range a {
			if a[i] == b[i] {
				continue
			}
			if sameUpToFloat64(a[i], b[i]) {
				numbers = true
				continue
			}
			bad = append(bad, a[i], b[i])
		}
		if len(bad) == 0 {
			if numbers {
				observed["exact_json_numbers"] = true
			}
			return nil
		}
	}
	return []string{"records differ:\n" + lineDiff(a, b)}
}

// sameUpToFloat64 reports whether two records rows differ only in their
// payloads, and those are equal when every JSON number is read as a float64.
func sameUpToFloat64(rowA, rowB string) bool {
	var ra, rb []any
	if json.Unmarshal([]byte(rowA), &ra) != nil || json.Unmarshal([]byte(rowB), &rb) != nil || len(ra) != 5 || len(rb) != 5 {
		return false
	}
	pa, okA := ra[1].(string)
	pb, okB := rb[1].(string)
	if !okA || !okB || !reflect.DeepEqual(append(ra[:1:1], ra[2:]...), append(rb[:1:1], rb[2:]...)) {
		return false
	}
	var va, vb any
	if json.Unmarshal([]byte(pa), &va) != nil || json.Unmarshal([]byte(pb), &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// reconcileOffsets compares next offsets per partition. changesink may be
// ahead only past records no read_committed consumer can see
// (next_offsets_past_marker); anything else is a difference.
func (p *kafkaParity) reconcileOffsets(t *testing.T, seed, cs map[string]int64, observed map[string]bool) []string {
	t.Helper()
	var diffs []string
	for _, k := range slices.Sorted(maps.Keys(mergeKeys(seed, cs))) {
		so, sok := seed[k]
		co, cok := cs[k]
		switch {
		case !sok || !cok:
			diffs = append(diffs, fmt.Sprintf("partition %s: seed has %v, changesink has %v", k, sok, cok))
		case so == co:
		case co < so:
			diffs = append(diffs, fmt.Sprintf("partition %s: changesink %d is behind the seed's %d", k, co, so))
		default:
			part, err := strconv.Atoi(k)
			if err != nil {
				diffs = append(diffs, fmt.Sprintf("partition key %q is not a number", k))
				continue
			}
			if vis := p.topic.readOffsets(t, int32(part), so, co, kgo.ReadCommitted(), 3*time.Second); len(vis) > 0 {
				diffs = append(diffs, fmt.Sprintf("partition %s: changesink %d is past the seed's %d and skips visible records at offsets %v", k, co, so, vis))
				continue
			}
			observed["next_offsets_past_marker"] = true
		}
	}
	return diffs
}

func toOffsets(v any) (map[string]int64, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("not an object")
	}
	out := map[string]int64{}
	for k, x := range m {
		n, ok := x.(json.Number)
		if !ok {
			return nil, fmt.Errorf("partition %s: %v is not a number", k, x)
		}
		i, err := n.Int64()
		if err != nil {
			return nil, fmt.Errorf("partition %s: %w", k, err)
		}
		out[k] = i
	}
	return out, nil
}

func mergeKeys[V any](ms ...map[string]V) map[string]bool {
	out := map[string]bool{}
	for _, m := range ms {
		for k := range m {
			out[k] = true
		}
	}
	return out
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// lineDiff shows lines only in a (-, the seed) and only in b (+, changesink).
func lineDiff(a, b []string) string {
	inB := map[string]int{}
	for _, l := range b {
		inB[l]++
	}
	inA := map[string]int{}
	for _, l := range a {
		inA[l]++
	}
	var sb strings.Builder
	for _, l := range a {
		if inB[l] == 0 {
			fmt.Fprintf(&sb, "  - seed       %s\n", l)
		} else {
			inB[l]--
		}
	}
	for _, l := range b {
		if inA[l] == 0 {
			fmt.Fprintf(&sb, "  + changesink %s\n", l)
		} else {
			inA[l]--
		}
	}
	if sb.Len() == 0 {
		return "  (same lines, different order)\n"
	}
	return sb.String()
}

// lastLine is the last non-empty line of s (a Python traceback's error).
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestKafkaStateSchemaParity checks that `changesink kafka-state setup`
// creates what the seed's create_state_tables creates (and its own
// kafka_state.shards and kafka_state.rejected beside it), and that it
// accepts a database the seed's DDL made (no migration).
func TestKafkaStateSchemaParity(t *testing.T) {
	env := testenv.Lookup(t, "CHANGESINK_TEST_PG")
	seeds := testenv.Seeds(t)
	bin := changesinkBinary(t)
	ddl := testenv.SeedTask(t, seeds, seedKafkaFlow, "create_state_tables", "sql")
	base := "parity_schema_" + testenv.RandomHex(4)
	a := createDatabase(t, env["CHANGESINK_TEST_PG"], base+"_seed")
	b := createDatabase(t, env["CHANGESINK_TEST_PG"], base+"_cs")
	c := createDatabase(t, env["CHANGESINK_TEST_PG"], base+"_both")
	a.exec(t, ddl)
	c.exec(t, ddl)
	for _, db := range []*pgDatabase{b, b, c} { // twice on b: idempotent
		if res := runProc(t, time.Minute, t.TempDir(), baseEnv(db.env), nil, bin, "kafka-state", "setup"); res.Code != 0 {
			t.Fatalf("changesink kafka-state setup on %s: %s", db.name, res)
		}
	}
	// kafka_state.shards (shard claims) and kafka_state.rejected (ON_BAD_RECORD=reject)
	// are changesink's own tables, beside the seed's.
	const columns = `SELECT table_name, column_name, data_type, is_nullable, coalesce(column_default, '')
		FROM information_schema.columns WHERE table_schema = 'kafka_state' AND table_name NOT IN ('shards', 'rejected')
		ORDER BY table_name, ordinal_position`
	const checks = `SELECT conrelid::regclass::text, contype, pg_get_constraintdef(oid)
		FROM pg_constraint WHERE connamespace = 'kafka_state'::regnamespace
		AND conrelid::regclass::text NOT IN ('kafka_state.shards', 'kafka_state.rejected') ORDER BY 1, 2, 3`
	for _, q := range []string{columns, checks} {
		sa := a.queryLines(t, q)
		for _, db := range []*pgDatabase{b, c} {
			if got := db.queryLines(t, q); !slices.Equal(sa, got) {
				t.Errorf("%s differs from the seed's DDL:\n%s", db.name, lineDiff(sa, got))
			}
		}
	}
	if os.Getenv("CHANGESINK_TEST_VERBOSE") != "" {
		t.Logf("seed schema:\n%s", strings.Join(a.queryLines(t, columns), "\n"))
	}
}
