package cdc

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/target"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// sequencesDir holds the batch sequences of issue 28 and their siblings:
// one folder per case, batch1.ion, batch2.ion, ... in the trigger's text
// Ion form, and expect.yaml (sequenceCase) saying how the sequence must
// end, written from the source's truth.
const sequencesDir = "testdata/sequences"

// knownFailures runs the sequences marked known_failure too (none is
// today: a case that fails with the code of its day is committed so).
var knownFailures = flag.Bool("known-failures", false, "run the batch sequences that fail today (known_failure) too")

// sequenceCase is a case's expect.yaml.
type sequenceCase struct {
	Case   string `yaml:"case"`
	Source string `yaml:"source"` // what the source did: the truth the expectation follows
	// Mapping is a mapping file in the case's folder; empty: the folder's
	// mapping.yaml, else the shipped flows/orders.mapping.yaml. Its target
	// database is replaced by the test's own.
	Mapping string `yaml:"mapping"`
	// Server and NotServer restrict the case to ClickHouse versions that
	// begin (or do not begin) with them ("18.").
	Server    string `yaml:"server"`
	NotServer string `yaml:"not_server"`
	// Steps are the batches applied, in order (batch numbers); empty: every
	// batchN.ion once, in order.
	Steps []int `yaml:"steps"`
	// Warns are warnings the run must log, each holding every one of says,
	// at its step or a later one (a CREATE of a live key that ends its
	// batch is known to end its transaction only at the next batch).
	Warns []struct {
		Step int      `yaml:"step"`
		Says []string `yaml:"says"`
	} `yaml:"warns"`
	// Refused is the step that must be refused (outcome.Refused, wrapping
	// the sentinel named Error, its message or hint saying every one of
	// Says), leaving the target and its ledger as they were; no later step
	// runs.
	Refused *struct {
		Step  int      `yaml:"step"`
		Error string   `yaml:"error"`
		Says  []string `yaml:"says"`
	} `yaml:"refused"`
	// Rows are the live view's rows at the end, in key order, each column
	// as ClickHouse's toString shows it.
	Rows []map[string]string `yaml:"rows"`
	// KnownFailure says why the case fails with today's code: the case is
	// skipped with that reason (-known-failures runs it).
	KnownFailure string `yaml:"known_failure"`
}

// sequenceSentinels are the refusals a case may name.
var sequenceSentinels = map[string]error{
	"ErrWentBackwards": ErrWentBackwards, "ErrKeyChange": ErrKeyChange, "ErrToast": ErrToast,
	"ErrTargetConflict": ErrTargetConflict, "ErrConflict": ErrConflict, "ErrBadValue": ErrBadValue,
	"ErrContradiction": ErrContradiction, "ErrVerify": ErrVerify, "ErrTargetMismatch": ErrTargetMismatch,
	"ErrUnplaced": change.ErrUnplaced, "ErrToastAfterDelete": change.ErrToastAfterDelete,
}

// TestSequences applies each case of testdata/sequences with Setup and
// Apply, batch by batch, against the real ClickHouse, and compares how it
// ends (the live view's rows, a refusal and what it left, the warnings)
// with the case's expect.yaml. After every step the ledger holds one row
// per sequence number.
//
//changesink:per-server
func TestSequences(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(sequencesDir, "*", "expect.yaml"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no cases in %s (%v)", sequencesDir, err)
	}
	for _, p := range dirs {
		dir := filepath.Dir(p)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			t.Parallel()
			runSequence(t, dir, readSequenceCase(t, p))
		})
	}
}

func readSequenceCase(t *testing.T, path string) sequenceCase {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c sequenceCase
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if c.Case == "" || c.Source == "" {
		t.Fatalf("%s: a case needs case and source", path)
	}
	if c.Refused != nil && sequenceSentinels[c.Refused.Error] == nil {
		t.Fatalf("%s: refused.error %q is not a sentinel sequenceSentinels knows", path, c.Refused.Error)
	}
	return c
}

func runSequence(t *testing.T, dir string, c sequenceCase) {
	if c.KnownFailure != "" && !*knownFailures {
		t.Skip("known failure: " + c.KnownFailure)
	}
	mp := ordersMapping
	if _, err := os.Stat(filepath.Join(dir, "mapping.yaml")); err == nil {
		mp = filepath.Join(dir, "mapping.yaml")
	}
	if c.Mapping != "" {
		mp = filepath.Join(dir, c.Mapping)
	}
	url := testenv.ClickHouseURL(t)
	db, _ := testenv.CreateClickHouseDatabase(t, url, "cdc_seq_")
	m := loadMapping(t, mp)
	m.Target.Database, m.Target.CreateDatabase = db, false
	conn := testenv.OpenClickHouse(t, url)
	ctx := context.Background()
	cfg := Config{Mapping: m, ClickHouse: target.ClickHouse{URL: url, Timeout: time.Minute}}
	set, err := Setup(ctx, cfg, Env{Dir: kestra.Dir{Path: t.TempDir()}})
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	switch {
	case c.Server != "" && !strings.HasPrefix(set.ServerVersion, c.Server):
		t.Skipf("for ClickHouse %s*, not %s", c.Server, set.ServerVersion)
	case c.NotServer != "" && strings.HasPrefix(set.ServerVersion, c.NotServer):
		t.Skipf("not for ClickHouse %s* (%s)", c.NotServer, set.ServerVersion)
	}
	steps := c.Steps
	if len(steps) == 0 {
		for n := 1; ; n++ {
			if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("batch%d.ion", n))); err != nil {
				break
			}
			steps = append(steps, n)
		}
	}
	q := sequenceQuery{t: t, conn: conn, m: m}
	logged := make([]string, len(steps)+1) // by step
	for i, n := range steps {
		step := i + 1
		var logBuf bytes.Buffer
		cfg.BatchFile = filepath.Join(dir, fmt.Sprintf("batch%d.ion", n))
		env := Env{Dir: kestra.Dir{Path: t.TempDir()}, Log: slog.New(slog.NewTextHandler(&logBuf, nil))}
		before := q.stored()
		_, err := Apply(ctx, cfg, env)
		logged[step] = logBuf.String()
		if c.Refused != nil && c.Refused.Step == step {
			checkError(t, err, outcome.Refused, sequenceSentinels[c.Refused.Error], c.Refused.Says...)
			if after := q.stored(); after != before {
				t.Errorf("step %d (batch %d) was refused but changed the target or its ledger:\n%s\nwas\n%s", step, n, after, before)
			}
			if left, _ := os.ReadDir(env.Dir.Path); len(left) > 0 {
				t.Errorf("step %d (batch %d) was refused but left output files", step, n)
			}
			break
		}
		if err != nil {
			t.Fatalf("step %d (batch %d): %v\nhint: %s", step, n, err, Hint(err))
		}
		q.oneRowPerSequence(step)
	}
	for _, w := range c.Warns {
		from := strings.Join(logged[min(w.Step, len(logged)):], "")
		for _, s := range w.Says {
			if !strings.Contains(from, s) {
				t.Errorf("no warning saying %q from step %d on; the log from there:\n%s", s, w.Step, from)
			}
		}
	}
	if c.Refused != nil && c.Refused.Step > len(steps) {
		t.Fatalf("refused.step %d is past the last step %d", c.Refused.Step, len(steps))
	}
	if got, want := q.live(), wantRows(m, c.Rows); got != want {
		t.Errorf("the live view ends as\n%s\nwant (the source's truth)\n%s", got, want)
	}
}

// sequenceQuery reads the case's target with SQL.
type sequenceQuery struct {
	t    *testing.T
	conn driver.Conn
	m    *mapping.Mapping
}

// rows runs sql and returns its rows, each column as fmt prints it,
// tab-joined.
func (q sequenceQuery) rows(sql string) []string {
	q.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := q.conn.Query(ctx, sql)
	if err != nil {
		q.t.Fatalf("%s: %v", sql, err)
	}
	defer res.Close()
	var out []string
	for res.Next() {
		dest := make([]any, len(res.ColumnTypes()))
		for i, c := range res.ColumnTypes() {
			dest[i] = newOf(c.ScanType())
		}
		if err := res.Scan(dest...); err != nil {
			q.t.Fatal(err)
		}
		parts := make([]string, len(dest))
		for i, d := range dest {
			parts[i] = fmt.Sprint(deref(d))
		}
		out = append(out, strings.Join(parts, "\t"))
	}
	if err := res.Err(); err != nil {
		q.t.Fatal(err)
	}
	return out
}

// stored is every physical row of the target and of its ledger but the
// time it was written: what a refused batch must leave as it was.
func (q sequenceQuery) stored() string {
	q.t.Helper()
	db := q.m.Target.Database
	tbl := q.rows("SELECT * FROM " + mapping.Qualified(db, q.m.Target.Table) + " ORDER BY tuple(*)")
	led := q.rows("SELECT seq, kind, digest, holder, high_version, open_keys FROM " + mapping.Qualified(db, mapping.LedgerName(q.m)) + " ORDER BY seq, digest")
	return "table:\n" + strings.Join(tbl, "\n") + "\nledger:\n" + strings.Join(led, "\n")
}

// oneRowPerSequence fails the test when the ledger holds two rows of one
// sequence number.
func (q sequenceQuery) oneRowPerSequence(step int) {
	q.t.Helper()
	dup := q.rows("SELECT seq, count() FROM " + mapping.Qualified(q.m.Target.Database, mapping.LedgerName(q.m)) + " GROUP BY seq HAVING count() > 1 ORDER BY seq")
	if len(dup) > 0 {
		q.t.Errorf("after step %d the ledger holds two rows of one sequence number (seq, rows): %v", step, dup)
	}
}

// live is the live view's rows in key order, each column as toString
// shows it, one line each: "col=value col=value".
func (q sequenceQuery) live() string {
	q.t.Helper()
	cols := make([]string, len(q.m.Cols))
	for i := range q.m.Cols {
		cols[i] = "toString(" + mapping.QuoteIdent(q.m.Cols[i].Name) + ")"
	}
	rows := q.rows("SELECT " + strings.Join(cols, ", ") + " FROM " + mapping.Qualified(q.m.Target.Database, q.m.Target.LiveView) +
		" ORDER BY " + keyList(q.m))
	var b strings.Builder
	for _, r := range rows {
		vals := strings.Split(r, "\t")
		for i, v := range vals {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%s=%q", q.m.Cols[i].Name, v)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// wantRows renders a case's rows as live renders the view's.
func wantRows(m *mapping.Mapping, rows []map[string]string) string {
	var b strings.Builder
	for _, r := range rows {
		for i := range m.Cols {
			if i > 0 {
				b.WriteByte(' ')
			}
			v, ok := r[m.Cols[i].Name]
			if !ok {
				v = "<missing in expect.yaml>"
			}
			fmt.Fprintf(&b, "%s=%q", m.Cols[i].Name, v)
		}
		for _, k := range slices.Sorted(maps.Keys(r)) {
			if !slices.ContainsFunc(m.Cols, func(c mapping.Col) bool { return c.Name == k }) {
				fmt.Fprintf(&b, " <%s: not a mapped column>", k)
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}
