package cdc

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/amazon-ion/ion-go/ion"
	"github.com/google/uuid"
	"github.com/shopspring/decimal"
	"gopkg.in/yaml.v3"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
)

// TestRealDebeziumBatches applies every scenario that real Debezium and
// Kestra's FileSerde wrote (harness/debezium: the copies committed under
// testdata/debezium, and the fresh capture in $CHANGESINK_TEST_DEBEZIUM when
// .ci/debezium made one) through cdc setup and cdc apply of each batch in
// order, binary and text each into its own database, then compares the live
// view with rows.jsonl, the source table's final rows, value by value. The
// oracle is independent of changesink's codecs: it reads the PostgreSQL type
// of each column from the mapping's comment (the harness writes it), parses
// rows.jsonl (PostgreSQL's row_to_json) by that type, and scans the live view
// with clickhouse-go's own Go types.
//
//changesink:per-server
func TestRealDebeziumBatches(t *testing.T) {
	testenv.ClickHouseURL(t)
	sets := map[string]string{"testdata": "testdata/debezium"}
	if dir := os.Getenv("CHANGESINK_TEST_DEBEZIUM"); dir != "" {
		sets["fresh"] = dir
	}
	for _, set := range []string{"testdata", "fresh"} {
		root, ok := sets[set]
		if !ok {
			continue
		}
		t.Run(set, func(t *testing.T) {
			scenarios, _ := filepath.Glob(filepath.Join(root, "*", "manifest.json"))
			if len(scenarios) == 0 {
				testenv.Missing(t, "no Debezium capture in "+root, "run .ci/debezium; .ci/run does")
			}
			for _, mf := range scenarios {
				dir := filepath.Dir(mf)
				name := filepath.Base(dir)
				for _, form := range []string{"binary", "text"} {
					t.Run(name+"/"+form, func(t *testing.T) {
						sc := loadRealScenario(t, dir, form)
						runRealScenario(t, sc)
					})
				}
			}
		})
	}
}

// batchKeeps holds, per scenario, source rows a change the trigger does not
// pass removed: the batches never say so, and the read model keeps them as
// the batches left them (rows.jsonl syntax, one object per row). Each is
// written down in the README ("What the trigger loses").
var batchKeeps = map[string]struct {
	why  string
	rows []string
}{
	"truncate": {
		why:  "the seed's trigger settings drop a TRUNCATE (Debezium's default skipped.operations=t): rows 1 and 2 (snapshot) and 3 (inserted just before it) stay live",
		rows: []string{`{"id":1,"v":"one"}`, `{"id":2,"v":"two"}`, `{"id":3,"v":"three"}`},
	},
}

// batchSays holds, per scenario, rows whose source value never reached the
// batch: the value the batch carries instead (rows.jsonl syntax), which is
// what a read model built from the batch holds. Each is written down in the
// README ("What the trigger loses").
var batchSays = map[string]struct {
	why  string
	rows map[string]map[string]string // key → column → rows.jsonl value
}{
	"defaults": {
		why: "an explicit NULL in a column with a DEFAULT arrives as the default (Kafka Connect's Struct.get returns a field's schema default for null)",
		rows: map[string]map[string]string{
			"1": {"note": `"dflt"`, "qty": `7`, "flag": `true`},
			"2": {"note": `"dflt"`, "qty": `7`, "flag": `true`},
			"4": {"note": `"dflt"`, "qty": `7`, "flag": `true`},
		},
	},
	"types_edge": {
		why: "timestamp 'infinity' arrives as 1969-12-31T23:59:30.424192Z (9223372036825200000 µs times 1000 overflows a long in the trigger), numeric 'NaN' arrives absent (NULL)",
		rows: map[string]map[string]string{
			"1":  {"num": `null`},
			"11": {"num": `null`},
			"4":  {"at": `"1969-12-31T23:59:30.424192"`},
			"14": {"at": `"1969-12-31T23:59:30.424192"`},
		},
	},
}

// noBatch lists the scenarios whose trigger evaluations all fail, so that
// no batch reaches changesink.
var noBatch = map[string]string{
	"infinity": "a timestamptz of -infinity fails the trigger's conversion (DateTimeParseException), every evaluation again",
}

// expectRefused lists batches a scenario's run must refuse, by scenario,
// form and batch file: the words the refusal must hold.
var expectRefused = map[string]map[string]string{}

// expectSetupRefused lists scenarios whose mapping cdc setup refuses on
// this server: the words the refusal must hold.
var expectSetupRefused = map[string]string{}

// realScenario is one scenario of a capture in one form.
type realScenario struct {
	name, dir, form string
	mappingPath     string
	batches         []string
	pgTypes         []string // per mapped column, from the mapping's comments
	rows            []map[string]json.RawMessage
}

func loadRealScenario(t *testing.T, dir, form string) *realScenario {
	t.Helper()
	sc := &realScenario{name: filepath.Base(dir), dir: dir, form: form, mappingPath: filepath.Join(dir, "mapping.yaml")}
	sc.batches, _ = filepath.Glob(filepath.Join(dir, "changes-*."+form+".ion"))
	slices.Sort(sc.batches)
	sc.pgTypes = mappingPGTypes(t, sc.mappingPath)
	for i, line := range bytes.Split(bytes.TrimSpace(testenv.ReadFile(t, filepath.Join(dir, "rows.jsonl"))), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var r map[string]json.RawMessage
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("rows.jsonl line %d: %v", i+1, err)
		}
		sc.rows = append(sc.rows, r)
	}
	return sc
}

// mappingPGTypes reads the PostgreSQL type the harness writes as each
// column's comment ("bigint PRIMARY KEY", "text DEFAULT 'dflt'"), without
// its constraints.
func mappingPGTypes(t *testing.T, path string) []string {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(testenv.ReadFile(t, path), &doc); err != nil {
		t.Fatal(err)
	}
	top := doc.Content[0]
	var out []string
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value != "columns" {
			continue
		}
		for _, c := range top.Content[i+1].Content {
			pg := strings.TrimSpace(strings.TrimPrefix(c.LineComment, "#"))
			for _, cut := range []string{" PRIMARY KEY", " NOT NULL", " DEFAULT "} {
				if j := strings.Index(pg, cut); j >= 0 {
					pg = pg[:j]
				}
			}
			if pg == "" {
				t.Fatalf("%s: column at line %d has no PostgreSQL type comment", path, c.Line)
			}
			out = append(out, pg)
		}
	}
	return out
}

// runRealScenario sets the scenario's target up in a database of its own,
// applies its batches in order and compares the live view with rows.jsonl.
func runRealScenario(t *testing.T, sc *realScenario) {
	t.Helper()
	e := newEnv(t, sc.mappingPath)
	if len(sc.pgTypes) != len(e.m.Cols) {
		t.Fatalf("%d type comments for %d columns", len(sc.pgTypes), len(e.m.Cols))
	}
	if want, ok := expectSetupRefused[sc.name]; ok {
		_, err := testSetup(context.Background(), e.config(""))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Setup: %v; want a refusal mentioning %q", err, want)
		}
		t.Logf("setup refused as expected: %v", err)
		return
	}
	e.setup()
	for _, f := range sc.batches {
		res, err := testApply(context.Background(), e.config(f))
		want, refuse := expectRefused[sc.name][filepath.Base(f)]
		switch {
		case refuse && err == nil:
			t.Fatalf("%s applied (%v); want a refusal mentioning %q", filepath.Base(f), res.Outputs(), want)
		case refuse && !strings.Contains(err.Error(), want):
			t.Fatalf("%s: %v; want a refusal mentioning %q", filepath.Base(f), err, want)
		case refuse:
			t.Logf("%s refused as expected: %v", filepath.Base(f), err)
			return
		case err != nil:
			t.Fatalf("%s: %v", filepath.Base(f), err)
		default:
			t.Logf("%s: %v", filepath.Base(f), res.Outputs())
		}
	}
	got := e.liveRows(t, sc.pgTypes)
	if why, ok := noBatch[sc.name]; ok {
		if len(sc.batches) != 0 || len(got) != 0 {
			t.Fatalf("%d batches and %d live rows; the scenario's trigger writes no batch (%s)", len(sc.batches), len(got), why)
		}
		t.Logf("no batch, an empty live view, %d source rows: %s", len(sc.rows), why)
		return
	}
	if len(sc.batches) == 0 {
		t.Fatalf("no %s batch in %s", sc.form, sc.dir)
	}
	want := sc.expectedRows(t, e.m)
	if keeps, ok := batchKeeps[sc.name]; ok {
		t.Logf("%d rows the source lost and the batches kept: %s", len(keeps.rows), keeps.why)
	}
	compareRows(t, e.m, want, got)
}

// liveRows reads the live view, ordered by key, each value as a canonical
// string of its clickhouse-go Go type.
func (e *env) liveRows(t *testing.T, pgTypes []string) [][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rows, err := e.conn.Query(ctx, "SELECT "+columnList(e.m)+" FROM "+mapping.Qualified(e.db, e.m.Target.LiveView)+
		" ORDER BY "+keyList(e.m))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols := rows.ColumnTypes()
	var out [][]string
	for rows.Next() {
		dest := make([]any, len(cols))
		for i, c := range cols {
			dest[i] = reflect.New(c.ScanType()).Interface()
		}
		if err := rows.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		r := make([]string, len(dest))
		for i, d := range dest {
			r[i] = canonCH(e.m.Cols[i].Type, pgTypes[i], reflect.ValueOf(d).Elem())
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// canonCH renders a value scanned from ClickHouse: the same strings
// canonPG makes of rows.jsonl. A String column holding a PostgreSQL
// timestamp, timestamptz, date or numeric (source_type) must hold it in the
// one text form README's type table gives.
func canonCH(t mapping.Type, pg string, rv reflect.Value) string {
	for rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return "NULL"
		}
		rv = rv.Elem()
	}
	switch x := rv.Interface().(type) {
	case string:
		switch {
		case pg == "timestamp" || pg == "timestamptz":
			tm, err := time.ParseInLocation("2006-01-02 15:04:05.000000", x, time.UTC)
			if err != nil || len(x) != len("2006-01-02 15:04:05.000000") {
				return "bad timestamp text " + strconv.Quote(x)
			}
			return "time:" + tm.Format(time.RFC3339Nano)
		case pg == "date":
			if _, err := time.Parse("2006-01-02", x); err != nil {
				return "bad date text " + strconv.Quote(x)
			}
			return "date:" + x
		case pg == "numeric":
			r, ok := new(big.Rat).SetString(x)
			if !ok || strings.ContainsAny(x, "eE") {
				return "bad numeric text " + strconv.Quote(x)
			}
			return "dec:" + r.RatString()
		}
		return "str:" + strconv.Quote(x)
	case int8, int16, int32, int64, uint8, uint16, uint32, uint64:
		return fmt.Sprintf("int:%d", x)
	case bool:
		if x {
			return "int:1"
		}
		return "int:0"
	case float32:
		if math.IsNaN(float64(x)) {
			return "f32:NaN"
		}
		return fmt.Sprintf("f32:%08x", math.Float32bits(x))
	case float64:
		if math.IsNaN(x) {
			return "f64:NaN"
		}
		return fmt.Sprintf("f64:%016x", math.Float64bits(x))
	case decimal.Decimal:
		return "dec:" + x.Rat().RatString()
	case time.Time:
		if t.Kind == mapping.KindDate {
			return "date:" + x.UTC().Format("2006-01-02")
		}
		return "time:" + x.UTC().Format(time.RFC3339Nano)
	case uuid.UUID:
		return "uuid:" + x.String()
	}
	return fmt.Sprintf("?%s:%v", rv.Type(), rv.Interface())
}

// expectedRows renders rows.jsonl, with the batch's values where the
// source's never reached it (batchSays), as the live view must hold them.
func (sc *realScenario) expectedRows(t *testing.T, m *mapping.Mapping) [][]string {
	t.Helper()
	says := batchSays[sc.name]
	var out [][]string
	rows := sc.rows
	for n, line := range batchKeeps[sc.name].rows {
		var r map[string]json.RawMessage
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("batchKeeps[%q] row %d: %v", sc.name, n+1, err)
		}
		rows = append(rows, r)
	}
	if len(rows) > len(sc.rows) { // in the live view's order: by key
		k := m.Cols[m.KeyIdx[0]].Name
		slices.SortStableFunc(rows, func(a, b map[string]json.RawMessage) int {
			x, okx := new(big.Int).SetString(string(a[k]), 10)
			y, oky := new(big.Int).SetString(string(b[k]), 10)
			if okx && oky {
				return x.Cmp(y)
			}
			return strings.Compare(string(a[k]), string(b[k]))
		})
	}
	for n, src := range rows {
		r := make([]string, len(m.Cols))
		key := src[m.Cols[m.KeyIdx[0]].Name]
		for i := range m.Cols {
			c := &m.Cols[i]
			raw, ok := src[c.Name]
			if !ok {
				t.Fatalf("rows.jsonl row %d has no column %q", n+1, c.Name)
			}
			if v, ok := says.rows[string(key)][c.Name]; ok {
				raw = json.RawMessage(v)
			}
			s, err := canonPG(sc.pgTypes[i], c.Type, raw)
			if err != nil {
				t.Fatalf("rows.jsonl row %d column %q (%s): %v", n+1, c.Name, sc.pgTypes[i], err)
			}
			r[i] = s
		}
		out = append(out, r)
	}
	return out
}

// canonPG renders one rows.jsonl value (PostgreSQL's row_to_json of a column
// of type pg) as canonCH renders the ClickHouse column t that holds it.
func canonPG(pg string, t mapping.Type, raw json.RawMessage) (string, error) {
	if string(raw) == "null" {
		return "NULL", nil
	}
	var s string
	isString := json.Unmarshal(raw, &s) == nil
	switch {
	case pg == "smallint" || pg == "integer" || pg == "bigint":
		n, ok := new(big.Int).SetString(string(raw), 10)
		if !ok {
			return "", fmt.Errorf("not an integer: %s", raw)
		}
		return "int:" + n.String(), nil
	case pg == "numeric" || strings.HasPrefix(pg, "numeric("):
		text := string(raw)
		if isString {
			text = s
		}
		r, ok := new(big.Rat).SetString(text)
		if !ok {
			return "", fmt.Errorf("not a decimal: %s", raw)
		}
		return "dec:" + r.RatString(), nil
	case pg == "real" || pg == "double precision":
		text := string(raw)
		if isString { // NaN, Infinity, -Infinity
			text = s
		}
		bits := 64
		if pg == "real" {
			bits = 32
		}
		f, err := strconv.ParseFloat(text, bits)
		if err != nil {
			return "", err
		}
		switch {
		case math.IsNaN(f) && bits == 32:
			return "f32:NaN", nil
		case math.IsNaN(f):
			return "f64:NaN", nil
		case bits == 32:
			return fmt.Sprintf("f32:%08x", math.Float32bits(float32(f))), nil
		}
		return fmt.Sprintf("f64:%016x", math.Float64bits(f)), nil
	case pg == "boolean":
		if string(raw) == "true" {
			return "int:1", nil
		}
		return "int:0", nil
	case pg == "text" || strings.HasPrefix(pg, "varchar"):
		return "str:" + strconv.Quote(s), nil
	case pg == "jsonb":
		// row_to_json embeds jsonb as its text output, which is what
		// Debezium sends.
		return "str:" + strconv.Quote(string(raw)), nil
	case pg == "bytea":
		b, err := hex.DecodeString(strings.TrimPrefix(s, `\x`))
		if err != nil {
			return "", err
		}
		return "str:" + strconv.Quote(string(b)), nil
	case pg == "uuid":
		u, err := uuid.Parse(s)
		if err != nil {
			return "", err
		}
		return "uuid:" + u.String(), nil
	case pg == "date":
		if _, err := time.Parse("2006-01-02", s); err != nil {
			return "", err
		}
		return "date:" + s, nil
	case pg == "timestamp":
		tm, err := time.ParseInLocation("2006-01-02T15:04:05.999999", s, time.UTC)
		if err != nil {
			return "", err
		}
		return "time:" + tm.Format(time.RFC3339Nano), nil
	case pg == "timestamptz":
		tm, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return "", err
		}
		return "time:" + tm.UTC().Format(time.RFC3339Nano), nil
	}
	return "", fmt.Errorf("the oracle does not know PostgreSQL type %q", pg)
}

func compareRows(t *testing.T, m *mapping.Mapping, want, got [][]string) {
	t.Helper()
	render := func(r []string) string { return strings.Join(r, " | ") }
	if len(want) != len(got) {
		var w, g []string
		for _, r := range want {
			w = append(w, render(r))
		}
		for _, r := range got {
			g = append(g, render(r))
		}
		t.Fatalf("live view has %d rows, the source %d:\nsource:\n  %s\nlive view:\n  %s", len(got), len(want),
			strings.Join(w, "\n  "), strings.Join(g, "\n  "))
	}
	checked := 0
	for n := range want {
		for i := range m.Cols {
			checked++
			if want[n][i] != got[n][i] {
				t.Errorf("row %d (%s) column %q: live view %s, source %s", n+1, want[n][m.KeyIdx[0]], m.Cols[i].Name,
					short(got[n][i]), short(want[n][i]))
			}
		}
	}
	t.Logf("%d rows, %d values equal to the source's", len(want), checked)
}

func short(s string) string {
	if len(s) > 120 {
		return fmt.Sprintf("%s… (%d bytes)", s[:100], len(s))
	}
	return s
}

// TestRealBatchesCurrentServerTypes decodes the real types_edge batches
// (microseconds, a worker-zone timestamptz, 30-digit numerics) with the
// mapping a ClickHouse 20.1+/21.6+ target would use, DateTime64(6, 'UTC')
// and Decimal(76, 38), which no server here can hold, and compares every
// decoded value with rows.jsonl; then the types that would round them.
func TestRealBatchesCurrentServerTypes(t *testing.T) {
	dir := "testdata/debezium/types_edge"
	raw := string(testenv.ReadFile(t, filepath.Join(dir, "mapping.yaml")))
	current := retyped(t, raw, map[string]string{"at": "Nullable(DateTime64(6, 'UTC'))", "at_tz": "Nullable(DateTime64(6, 'UTC'))", "num": "Nullable(Decimal(76, 38))"})
	m, err := mapping.Parse("types_edge.current.yaml", current)
	if err != nil {
		t.Fatal(err)
	}
	for _, form := range []string{"binary", "text"} {
		t.Run(form, func(t *testing.T) {
			sc := loadRealScenario(t, dir, form)
			got := map[string][]string{}
			for _, f := range sc.batches {
				b, err := decodeFile(context.Background(), f, m, 1)
				if err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				for _, r := range b.Sorted() {
					vals := make([]string, len(m.Cols))
					for i := range m.Cols {
						vals[i] = canonValue(m.Cols[i].Type, sc.pgTypes[i], r.Vals[i])
					}
					got[vals[0]] = vals
				}
			}
			want := sc.expectedRows(t, m)
			var rows [][]string
			for _, w := range want {
				rows = append(rows, got[w[0]])
			}
			compareRows(t, m, want, rows)
		})
	}
	// The same batches into types that would round: refused, naming the
	// column, the type, the value and what to map it to.
	for _, tt := range []struct{ col, to, want string }{
		{"at", "Nullable(DateTime('UTC'))",
			`column "at": value does not fit its column: 2024-02-29T12:34:56.123456Z has fractions of a second, which Nullable(DateTime('UTC')) (whole seconds) would round`},
		{"at_tz", "Nullable(DateTime64(3, 'UTC'))",
			`column "at_tz": value does not fit its column: 2024-02-29T07:04:56.123456Z has more sub-second digits than DateTime64(3)`},
		{"day", "Nullable(Date)",
			`column "day": value does not fit its column: 1969-12-31 is outside the Date range 1970-01-01..2149-06-06`},
		{"num", "Nullable(Decimal(38, 9))",
			`column "num": value does not fit its column: 0.00000000000000000001 has more than 9 decimal places`},
	} {
		m, err := mapping.Parse("types_edge.yaml", retyped(t, raw, map[string]string{tt.col: tt.to}))
		if err != nil {
			t.Fatal(err)
		}
		for _, form := range []string{"binary", "text"} {
			_, err := decodeFile(context.Background(), filepath.Join(dir, "changes-01."+form+".ion"), m, 1)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s into %s (%s): %v\nwant …%s", tt.col, tt.to, form, err, tt.want)
			}
		}
	}
	// A timestamp has no time zone: Debezium sends its wall-clock time as
	// UTC, so a DateTime64 in another zone would show another time.
	_, err = mapping.Parse("types_edge.yaml", retyped(t, raw, map[string]string{"at": "Nullable(DateTime64(6, 'Europe/Paris'))"}))
	if err == nil || !strings.Contains(err.Error(), `column "at": a PostgreSQL timestamp cannot be mapped to Nullable(DateTime64(6, 'Europe/Paris')); map it to DateTime('UTC')`) {
		t.Errorf("timestamp into DateTime64(6, 'Europe/Paris'): %v", err)
	}
}

// retyped returns the mapping text raw with each column of types given that
// type; it fails t when raw has no such column (the test would retype
// nothing).
func retyped(t *testing.T, raw string, types map[string]string) []byte {
	t.Helper()
	for col, typ := range types {
		re := regexp.MustCompile(`\{name: ` + regexp.QuoteMeta(col) + `, type: (?:"[^"]*"|[^,}]*)`)
		if !re.MatchString(raw) {
			t.Fatalf("the mapping no longer has the column %s this test retypes", col)
		}
		raw = re.ReplaceAllLiteralString(raw, `{name: `+col+`, type: "`+typ+`"`)
	}
	return []byte(raw)
}

// canonValue renders a decoded value as canonCH renders the ClickHouse
// value it is written as.
func canonValue(t mapping.Type, pg string, v change.Value) string {
	switch {
	case v.Null:
		return "NULL"
	case t.Kind == mapping.KindDateTime64:
		return "time:" + change.TicksTime(int64(v.N), t).Format(time.RFC3339Nano)
	case t.Kind == mapping.KindDecimal:
		n, _ := new(big.Int).SetString(v.S, 10)
		return "dec:" + new(big.Rat).SetFrac(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(t.Scale)), nil)).RatString()
	case t.Kind == mapping.KindFloat32:
		return canonCH(t, pg, reflect.ValueOf(float32(math.Float64frombits(v.N))))
	case t.Kind == mapping.KindFloat64:
		return canonCH(t, pg, reflect.ValueOf(math.Float64frombits(v.N)))
	case t.Kind == mapping.KindInt:
		return fmt.Sprintf("int:%d", int64(v.N))
	case t.Kind == mapping.KindString:
		return canonCH(t, pg, reflect.ValueOf(v.S))
	}
	return fmt.Sprintf("?%v", v)
}

// TestRealDefaultIdentityDeletes: under REPLICA IDENTITY DEFAULT a delete
// carries the key's real value and a zero value in every other NOT NULL
// column (Debezium fills required fields): "" for a uuid, 1970-01-01 for a
// date, {scale: 0, value: 0} for a numeric. None of them is read: the
// delete applies (TestRealDebeziumBatches checks the row is gone) and is
// written with the seed's zeros.
func TestRealDefaultIdentityDeletes(t *testing.T) {
	for _, tt := range []struct {
		scenario, batch string
		key             string
		zeros           map[string]string // non-key fields the delete carries, as ion-go prints them
	}{
		{"types_default", "changes-02", "3", map[string]string{"uid": `""`, "day": `"1970-01-01"`, "doc": `""`, "i64": "0", "bin": "{{}}"}},
		{"orders_default", "changes-02", "2", map[string]string{"customer_id": "0", "status": `""`}},
		{"toast_default", "changes-03", "1", map[string]string{"status": `""`}},
	} {
		for _, form := range []string{"binary", "text"} {
			t.Run(tt.scenario+"/"+form, func(t *testing.T) {
				dir := filepath.Join("testdata/debezium", tt.scenario)
				path := filepath.Join(dir, tt.batch+"."+form+".ion")
				fields := deleteFields(t, path)
				for f, want := range tt.zeros {
					if fields[f] != want {
						t.Errorf("the delete's %s is %s in the batch, want %s (has the capture changed?)", f, fields[f], want)
					}
				}
				m := loadMapping(t, filepath.Join(dir, "mapping.yaml"))
				b, err := decodeFile(context.Background(), path, m, 1)
				if err != nil {
					t.Fatalf("a DEFAULT-identity delete is refused: %v", err)
				}
				var del *change.Row
				for _, r := range b.Sorted() {
					if r.Deleted && change.RenderKey(m, r.Vals) == m.Key[0]+"="+tt.key {
						del = r
					}
				}
				if del == nil {
					t.Fatalf("no delete of key %s in %s", tt.key, path)
				}
				for i := range m.Cols {
					if !m.Cols[i].IsKey && !del.Vals[i].Equal(change.Zero(m.Cols[i].Type)) {
						t.Errorf("column %s of the delete is %v, want the seed's zero %v", m.Cols[i].Name, del.Vals[i], change.Zero(m.Cols[i].Type))
					}
				}
			})
		}
	}
}

// deleteFields returns the top-level fields of the batch's DELETE record,
// each as ion-go writes it in text.
func deleteFields(t *testing.T, path string) map[string]string {
	t.Helper()
	for _, v := range testenv.IonValues(t, testenv.ReadFile(t, path)) {
		rec, _ := v.(map[string]any)
		meta, _ := rec["metadata"].(map[string]any)
		if op, _ := meta["operation"].(*string); op == nil || *op != "DELETE" {
			continue
		}
		out := map[string]string{}
		for k, v := range rec {
			b, err := ion.MarshalText(v)
			if err != nil {
				t.Fatal(err)
			}
			out[k] = string(b)
		}
		return out
	}
	t.Fatalf("no DELETE record in %s", path)
	return nil
}

// TestRealAbsentColumns: the trigger leaves NULL columns out of a record
// (types, changes-01: row 1 has no *_n field). Nullable, they are NULL
// (TestRealDebeziumBatches compares them); mapped as not Nullable, the
// record is refused naming the column and saying the source value was NULL.
func TestRealAbsentColumns(t *testing.T) {
	dir := "testdata/debezium/types"
	raw := string(testenv.ReadFile(t, filepath.Join(dir, "mapping.yaml")))
	m, err := mapping.Parse("types.yaml", retyped(t, raw, map[string]string{"uid_n": "UUID"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, form := range []string{"binary", "text"} {
		_, err := decodeFile(context.Background(), filepath.Join(dir, "changes-01."+form+".ion"), m, 1)
		var re *change.RecordError
		if !errors.As(err, &re) || !errors.Is(err, change.ErrNotNullable) || re.Record != 1 || re.Key != "id=1" || re.Column != "uid_n" ||
			!strings.Contains(err.Error(), `column "uid_n" is absent (a NULL, which the trigger leaves out), but UUID is not Nullable`) ||
			!strings.Contains(Hint(err), "Make the column Nullable(T) in the mapping and the target table") {
			t.Errorf("%s: %v", form, err)
		}
	}
}

// TestRealBatchesIntoCurrentTypes applies the real types and types_edge
// batches with the mapping docs/mapping.md gives for ClickHouse 20.1 and
// newer (DateTime64(6, 'UTC') for every timestamp and timestamptz,
// Decimal(76, 38) for an unconstrained numeric) through setup and apply
// into the server under test, and compares the live view with rows.jsonl
// value by value. A server without DateTime64 or a Decimal of more than
// 38 digits (18.16) refuses the setup, naming the column.
//
//changesink:per-server
func TestRealBatchesIntoCurrentTypes(t *testing.T) {
	dt64, dt64n := "DateTime64(6, 'UTC')", "Nullable(DateTime64(6, 'UTC'))"
	for _, tt := range []struct {
		scenario string
		types    map[string]string
	}{
		{"types", map[string]string{"at": dt64, "at_n": dt64n, "at_tz": dt64, "at_tz_n": dt64n}},
		{"types_edge", map[string]string{"at": dt64n, "at_tz": dt64n, "num": "Nullable(Decimal(76, 38))"}},
	} {
		for _, form := range []string{"binary", "text"} {
			t.Run(tt.scenario+"/"+form, func(t *testing.T) {
				dir := filepath.Join("testdata/debezium", tt.scenario)
				path := writeFile(t, "mapping.yaml", retyped(t, string(testenv.ReadFile(t, filepath.Join(dir, "mapping.yaml"))), tt.types))
				if caps := newEnv(t, path).caps(); !caps.DateTime64 || !caps.Decimal256 {
					e := newEnv(t, path)
					_, err := testSetup(context.Background(), e.config(""))
					wantError(t, err, outcome.Config, change.ErrUnsupportedServer, "has no DateTime64")
					return
				}
				sc := loadRealScenario(t, dir, form)
				sc.mappingPath = path
				runRealScenario(t, sc)
			})
		}
	}
}
