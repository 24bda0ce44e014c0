package target

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/decode"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/merge"

	"github.com/amazon-ion/ion-go/ion"
	"github.com/google/uuid"

	"github.com/changesink/changesink/internal/iongen"
	"github.com/changesink/changesink/internal/testenv"
)

// pythonOrSkip returns CHANGESINK_TEST_PYTHON (a venv with chdb and the
// seed's dependencies), or skips loudly.
func pythonOrSkip(t *testing.T) string {
	t.Helper()
	return testenv.Lookup(t, "CHANGESINK_TEST_PYTHON")["CHANGESINK_TEST_PYTHON"]
}

type chdbStep map[string]any

// runChdb runs the steps in one chdb session and returns the results of
// the steps that have a format.
func runChdb(t *testing.T, py string, steps []chdbStep) (version string, results []string) {
	t.Helper()
	in, err := json.Marshal(map[string]any{"steps": steps})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "testdata/chdb_driver.py")
	cmd.Stdin = bytes.NewReader(in)
	run, err := testenv.Run(cmd)
	var res struct {
		Version string   `json:"version"`
		Results []string `json:"results"`
		Error   string   `json:"error"`
		Step    int      `json:"step"`
	}
	if jerr := json.Unmarshal([]byte(run.Stdout), &res); jerr != nil {
		t.Fatalf("chdb driver: exit %d, %v, %v\n%s\n%s", run.Code, err, jerr, run.Stdout, run.Stderr)
	}
	if res.Error != "" {
		t.Fatalf("chdb step %d (%v): %s", res.Step, steps[res.Step], res.Error)
	}
	return res.Version, res.Results
}

// chJSON renders a canonical value for ClickHouse's JSONEachRow input.
func chJSON(t mapping.Type, v change.Value) any {
	if v.Null {
		return nil
	}
	switch t.Kind {
	case mapping.KindInt, mapping.KindDate, mapping.KindDateTime, mapping.KindDateTime64:
		switch t.Kind {
		case mapping.KindDate:
			return time.Unix(int64(v.N)*86400, 0).UTC().Format("2006-01-02")
		case mapping.KindDateTime:
			return time.Unix(int64(v.N), 0).In(t.Loc).Format("2006-01-02 15:04:05")
		case mapping.KindDateTime64:
			return chDateTime64(int64(v.N), t)
		}
		return json.Number(strconv.FormatInt(int64(v.N), 10))
	case mapping.KindUint:
		return json.Number(strconv.FormatUint(v.N, 10))
	case mapping.KindFloat32, mapping.KindFloat64:
		return math.Float64frombits(v.N)
	case mapping.KindDecimal:
		return string(change.AppendDecimal(nil, v.S, t.Scale))
	case mapping.KindBool:
		return v.N != 0
	case mapping.KindUUID:
		var u uuid.UUID
		copy(u[:], v.S)
		return u.String()
	}
	return v.S
}

func chDateTime64(ticks int64, t mapping.Type) string {
	tm := change.TicksTime(ticks, t).In(t.Loc)
	s := tm.Format("2006-01-02 15:04:05")
	if t.Prec > 0 {
		frac := fmt.Sprintf("%09d", tm.Nanosecond())
		s += "." + frac[:t.Prec]
	}
	return s
}

// chValue parses one JSONEachRow output field into a canonical value.
func chValue(t mapping.Type, raw any) (change.Value, error) {
	if raw == nil {
		return change.Value{Null: true}, nil
	}
	text := fmt.Sprint(raw)
	switch t.Kind {
	case mapping.KindInt:
		n, err := strconv.ParseInt(text, 10, 64)
		return change.Value{N: uint64(n)}, err
	case mapping.KindUint:
		n, err := strconv.ParseUint(text, 10, 64)
		return change.Value{N: n}, err
	case mapping.KindFloat32:
		f, err := strconv.ParseFloat(text, 32)
		return change.FloatValue(float64(float32(f))), err
	case mapping.KindFloat64:
		f, err := strconv.ParseFloat(text, 64)
		return change.FloatValue(f), err
	case mapping.KindDecimal:
		d, err := ion.ParseDecimal(text)
		if err != nil {
			return change.Value{}, err
		}
		coef, exp := d.CoEx()
		n, err := change.Rescale(coef, int64(exp), t)
		if err != nil {
			return change.Value{}, err
		}
		return change.Value{S: n.String()}, nil
	case mapping.KindString:
		return change.Value{S: text}, nil
	case mapping.KindBool:
		if raw == true {
			return change.Value{N: 1}, nil
		}
		return change.Value{}, nil
	case mapping.KindDate:
		d, err := time.Parse("2006-01-02", text)
		return change.Value{N: uint64(d.Unix() / 86400)}, err
	case mapping.KindDateTime:
		tm, err := time.ParseInLocation("2006-01-02 15:04:05", text, t.Loc)
		return change.Value{N: uint64(tm.Unix())}, err
	case mapping.KindDateTime64:
		tm, err := time.ParseInLocation("2006-01-02 15:04:05.999999999", text, t.Loc)
		if err != nil {
			return change.Value{}, err
		}
		// Ticks since the epoch: change.TicksTime's inverse.
		per := t.TicksPerSecond()
		return change.Value{N: uint64(tm.Unix()*per + int64(tm.Nanosecond())/(1_000_000_000/per))}, nil
	case mapping.KindUUID:
		u, err := uuid.Parse(text)
		return change.Value{S: string(u[:])}, err
	}
	return change.Value{}, fmt.Errorf("kind %d", t.Kind)
}

// chRows parses JSONEachRow output of readSQL into canonical rows by key.
func chRows(t *testing.T, m *mapping.Mapping, out string) map[string]*change.Row {
	t.Helper()
	rows := map[string]*change.Row{}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	for dec.More() {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			t.Fatal(err)
		}
		r := &change.Row{Vals: make([]change.Value, len(m.Cols))}
		for i := range m.Cols {
			v, err := chValue(m.Cols[i].Type, obj[m.Cols[i].Name])
			if err != nil {
				t.Fatalf("column %s = %v: %v", m.Cols[i].Name, obj[m.Cols[i].Name], err)
			}
			r.Vals[i] = v
		}
		lsn, err := strconv.ParseUint(fmt.Sprint(obj[m.Target.VersionColumn]), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		r.Version, r.Deleted = lsn, fmt.Sprint(obj[m.Target.DeletedColumn]) == "1"
		r.Key = string(change.EncodeKey(nil, m, r.Vals))
		rows[r.Key] = r
	}
	return rows
}

// insertStep renders rows for the insert statement changesink sends.
func insertStep(m *mapping.Mapping, rows []*change.Row) chdbStep {
	var objs []map[string]any
	for _, r := range rows {
		obj := map[string]any{}
		for i := range m.Cols {
			obj[m.Cols[i].Name] = chJSON(m.Cols[i].Type, r.Vals[i])
		}
		obj[m.Target.VersionColumn] = json.Number(strconv.FormatUint(r.Version, 10))
		obj[m.Target.DeletedColumn] = map[bool]int{false: 0, true: 1}[r.Deleted]
		objs = append(objs, obj)
	}
	return chdbStep{"insert": insertSQL(m), "rows": objs}
}

// keysStep stands in for the external table of the batch's keys.
func keysStep(m *mapping.Mapping, rows []*change.Row) chdbStep {
	var cols [][]string
	for n, i := range m.KeyIdx {
		cols = append(cols, []string{keysColumn(n), m.Cols[i].Type.DDL(currentCaps)})
	}
	var objs []map[string]any
	for _, r := range rows {
		obj := map[string]any{}
		for n, i := range m.KeyIdx {
			obj[keysColumn(n)] = chJSON(m.Cols[i].Type, r.Vals[i])
		}
		objs = append(objs, obj)
	}
	return chdbStep{"keys": map[string]any{"columns": cols, "rows": objs}}
}

// oneRow decodes one event into its canonical row.
func oneRow(t *testing.T, m *mapping.Mapping, event iongen.Struct) *change.Row {
	t.Helper()
	b, err := decodeBytes(t, m, encode(t, false, event), 1)
	if err != nil {
		t.Fatal(err)
	}
	return b.Sorted()[0]
}

// TestCurrentServerSQLInChdb runs the statements changesink generates for a
// current server (DDL with DateTime64 and Bool, the insert, the read and
// verify query with its keys table, the schema check's view of the table)
// in chdb, with rows decoded from Debezium events, and checks that what
// comes back is what the Go code expects: FINAL keeps the highest LSN per
// key, delete markers stay readable, the live view hides them, and the
// schema check accepts the types a current server reports.
func TestCurrentServerSQLInChdb(t *testing.T) {
	py := pythonOrSkip(t)
	for _, mappingFile := range []string{"../testdata/types_current.mapping.yaml", ordersMappingFile, "../testdata/quoting.mapping.yaml"} {
		t.Run(filepath.Base(mappingFile), func(t *testing.T) {
			m := loadMapping(t, mappingFile)
			m.Target.CreateDatabase = true
			a1, a2, b1, bDel, c1 := chdbRows(t, m)

			db, tbl := m.Target.Database, m.Target.Table
			steps := []chdbStep{
				{"sql": createDatabaseSQL(m)},
				{"sql": createTableSQL(m, currentCaps)},
				{"sql": createViewSQL(m)},
				{"sql": createTableSQL(m, currentCaps)}, // setup is idempotent
				{"sql": createViewSQL(m)},
				insertStep(m, []*change.Row{a1, b1, c1}),
				insertStep(m, []*change.Row{a2, bDel, a2}), // a retried insert: a2 twice
				keysStep(m, []*change.Row{a2, bDel}),
				{"sql": readSQL(m), "format": "JSONEachRow"},
				{"sql": "SELECT count() AS n FROM " + mapping.Qualified(db, m.Target.LiveView), "format": "JSONEachRow"},
				{"sql": "SELECT name, type FROM system.columns WHERE database = '" + db + "' AND table = '" + tbl + "'", "format": "JSONEachRow"},
				{"sql": "SELECT engine, engine_full, sorting_key FROM system.tables WHERE database = '" + db + "' AND name = '" + tbl + "'", "format": "JSONEachRow"},
				{"sql": versionsSQL(m), "format": "JSONEachRow"},
				// The ledger and the lock (results 5..).
				{"sql": createLedgerSQL(m)},
				{"sql": "SELECT name, type FROM system.columns WHERE database = '" + db + "' AND table = '" + mapping.LedgerName(m) + "'", "format": "JSONEachRow"},
				{"sql": lockCreateSQL(mapping.Qualified(db, mapping.LockName(m)), "0123456789abcdef", "h'ost", 7)},
				{"sql": lockBeatSQL(mapping.Qualified(db, mapping.LockName(m)), "0123456789abcdef", "h'ost", 7)},
				{"sql": renameSQL(mapping.Qualified(db, mapping.LockName(m)), mapping.Qualified(db, mapping.LockName(m)+"_xaside"))},
				{"sql": lockHolderSQL(mapping.Qualified(db, mapping.LockName(m)+"_xaside")), "format": "JSONEachRow"},
				{"sql": strings.Replace(truncatedSQL(m), "?", "18446744073709551615", 1), "format": "JSONEachRow"},
				// The delete markers of the keys, without FINAL (result 8): a
				// ReplacingMergeTree(version, deleted) hides them from FINAL,
				// and query reads them so for the keys FINAL left out.
				{"sql": deletedSQL(m, false), "format": "JSONEachRow"},
			}
			version, results := runChdb(t, py, steps)
			t.Logf("chdb runs ClickHouse %s", version)
			final := chRows(t, m, results[0])
			markers := chRows(t, m, results[8])

			// The versions read: the winning LSN of each of the two keys.
			var lsns []string
			dec := json.NewDecoder(strings.NewReader(results[4]))
			dec.UseNumber()
			for dec.More() {
				var obj map[string]any
				if err := dec.Decode(&obj); err != nil {
					t.Fatal(err)
				}
				lsns = append(lsns, fmt.Sprint(obj[m.Target.VersionColumn]))
			}
			for k, r := range markers {
				if final[k] == nil {
					lsns = append(lsns, fmt.Sprint(r.Version))
				}
			}
			sort.Strings(lsns)
			if want := []string{fmt.Sprint(min(a2.Version, bDel.Version)), fmt.Sprint(max(a2.Version, bDel.Version))}; !slices.Equal(lsns, want) {
				t.Errorf("versions read %v, want %v:\n%s", lsns, want, results[4])
			}

			// The ledger has its columns; the lock's rows name the holder
			// after a rename; the TRUNCATE read finds the live keys.
			for _, c := range ledgerColumns {
				if !strings.Contains(results[5], `"name":"`+c[0]+`","type":"`+c[1]+`"`) {
					t.Errorf("ledger column %s %s missing on a current server:\n%s", c[0], c[1], results[5])
				}
			}
			if !strings.Contains(results[6], `"0123456789abcdef","h'ost",7`) && !strings.Contains(results[6], `0123456789abcdef`) {
				t.Errorf("lock holder read: %s", results[6])
			}
			if n := strings.Count(strings.TrimSpace(results[7]), "\n") + 1; strings.TrimSpace(results[7]) == "" || n != 2 {
				t.Errorf("live keys below any version: %q, want the 2 live keys (a2 and c1)", results[7])
			}

			got := final
			for k, r := range markers {
				if got[k] == nil {
					got[k] = r
				}
			}
			if len(got) != 2 {
				t.Fatalf("read returned %d keys, want 2 (the keys table holds 2):\n%s", len(got), results[0])
			}
			for _, want := range []*change.Row{a2, bDel} {
				r := got[want.Key]
				if r == nil || !change.SamePayload(r, want) {
					t.Errorf("key %s: got %s, want %s", change.RenderKey(m, want.Vals), renderJSON(m, r), renderJSON(m, want))
				}
			}
			if !strings.Contains(results[1], `"n":"2"`) && !strings.Contains(results[1], `"n":2`) {
				t.Errorf("live view count %s, want 2 (a2 and c1; b deleted)", results[1])
			}

			types := map[string]string{}
			dec = json.NewDecoder(strings.NewReader(results[2]))
			for dec.More() {
				var c struct{ Name, Type string }
				if err := dec.Decode(&c); err != nil {
					t.Fatal(err)
				}
				types[c.Name] = c.Type
			}
			for i := range m.Cols {
				if !m.Cols[i].Type.SameType(types[m.Cols[i].Name]) {
					t.Errorf("column %s is %q on ClickHouse %s; the schema check would refuse it", m.Cols[i].Name, types[m.Cols[i].Name], version)
				}
			}
			var tb struct {
				Engine     string `json:"engine"`
				EngineFull string `json:"engine_full"`
				SortingKey string `json:"sorting_key"`
			}
			if err := json.Unmarshal([]byte(results[3]), &tb); err != nil {
				t.Fatal(err)
			}
			if tb.Engine != "ReplacingMergeTree" || engineVersion(tb.EngineFull) != m.Target.VersionColumn ||
				normKey(tb.SortingKey) != normKey(strings.Join(m.Key, ",")) {
				t.Errorf("the schema check would refuse system.tables %+v", tb)
			}
		})
	}
}

// chdbRows builds the rows of the chdb test for a mapping: key a at LSN 5
// then 7, key b created at 3 and deleted at 6, key c at 4 (not asked for).
func chdbRows(t *testing.T, m *mapping.Mapping) (a1, a2, b1, bDel, c1 *change.Row) {
	t.Helper()
	src := func(lsn int64, del bool) iongen.Struct {
		op := "UPDATE"
		if del {
			op = "DELETE"
		}
		return iongen.Metadata(op, iongen.Source(m.Source.Database, m.Source.Schema, m.Source.Table, lsn, 1, "false"))
	}
	switch m.Source.Table {
	case "everything":
		row := func(id int64, code string, edit func(iongen.Struct)) iongen.Struct {
			r := everythingRow(id, true)
			for i := range r {
				switch r[i].Name {
				case "code":
					r[i].Value = code
				case "payload":
					r[i].Value = "utf-8 text ✓" // JSON carries text only
				}
			}
			if edit != nil {
				edit(r)
			}
			return r
		}
		v2 := func(r iongen.Struct) {
			for i := range r {
				switch r[i].Name {
				case "price":
					r[i].Value = iongen.Decimal("-0.01")
				case "note":
					r[i].Value = "second"
				case "local":
					r[i].Value = nil
				case "flag":
					r[i].Value = false
				case "u64":
					r[i].Value = new(big.Int).SetUint64(1 << 63)
				case "zoned":
					r[i].Value = iongen.Annotated{Annotation: "ZonedDateTime", Value: "2299-12-31T22:59:59.999999Z"}
				}
			}
		}
		a1 = oneRow(t, m, iongen.Event(row(1, "A", nil), false, src(5, false)))
		a2 = oneRow(t, m, iongen.Event(row(1, "A", v2), false, src(7, false)))
		b1 = oneRow(t, m, iongen.Event(row(2, "B", nil), false, src(3, false)))
		bDel = oneRow(t, m, iongen.Event(iongen.Struct{{"id", int64(2)}, {"code", "B"}}, true, src(6, true)))
		c1 = oneRow(t, m, iongen.Event(row(3, "C", nil), false, src(4, false)))
	case "orders":
		a1 = oneRow(t, m, iongen.Event(orderRow(1, int64(10), int64(500), "new"), false, src(5, false)))
		a2 = oneRow(t, m, iongen.Event(orderRow(1, int64(10), int64(550), "paid ✓"), false, src(7, false)))
		b1 = oneRow(t, m, iongen.Event(orderRow(2, int64(20), int64(1), "new"), false, src(3, false)))
		bDel = oneRow(t, m, iongen.Event(iongen.Struct{{"id", int64(2)}}, true, src(6, true)))
		c1 = oneRow(t, m, iongen.Event(orderRow(3, int64(30), int64(3), "new"), false, src(4, false)))
	default: // quoting.mapping.yaml: select Int32, naïve String, from-to Nullable(Date)
		r := func(sel int64, name string, day any) iongen.Struct {
			return iongen.Struct{{"select", sel}, {"naïve", name}, {"from-to", day}, {"my-key", int64(9)}}
		}
		a1 = oneRow(t, m, iongen.Event(r(1, "a", nil), false, src(5, false)))
		a2 = oneRow(t, m, iongen.Event(r(1, "a", iongen.Day(2024, 2, 29)), false, src(7, false)))
		b1 = oneRow(t, m, iongen.Event(r(2, "b", nil), false, src(3, false)))
		bDel = oneRow(t, m, iongen.Event(iongen.Struct{{"select", int64(2)}, {"naïve", "b"}, {"my-key", int64(9)}}, true, src(6, true)))
		c1 = oneRow(t, m, iongen.Event(r(3, "c", nil), false, src(4, false)))
	}
	return a1, a2, b1, bDel, c1
}

func renderJSON(m *mapping.Mapping, r *change.Row) string {
	if r == nil {
		return "nothing"
	}
	return string(change.AppendJSON(nil, m, r))
}

// TestTextColumnsConvertInPlaceInChdb: on ClickHouse 18.16 the real
// types_edge batches go to String columns with source_type (microseconds,
// 30-digit numerics); after an upgrade, ALTER TABLE … MODIFY COLUMN turns
// those columns into DateTime64(6, 'UTC') and Decimal(76, 38) holding
// exactly what changesink writes with those types (current ClickHouse, in
// chdb).
func TestTextColumnsConvertInPlaceInChdb(t *testing.T) {
	py := pythonOrSkip(t)
	dir := "../testdata/debezium/types_edge"
	raw := string(testenv.ReadFile(t, filepath.Join(dir, "mapping.yaml")))
	mText, err := mapping.Parse("types_edge.yaml", []byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	retype := map[string]string{"at": "Nullable(DateTime64(6, 'UTC'))", "at_tz": "Nullable(DateTime64(6, 'UTC'))", "num": "Nullable(Decimal(76, 38))"}
	mCur, err := mapping.Parse("types_edge.current.yaml", retyped(t, raw, retype))
	if err != nil {
		t.Fatal(err)
	}
	decodeAll := func(m *mapping.Mapping) []*change.Row {
		var rows []*change.Row
		for _, f := range []string{"changes-01.binary.ion", "changes-02.binary.ion"} {
			b, err := decodeFile(context.Background(), filepath.Join(dir, f), m, 1)
			if err != nil {
				t.Fatal(err)
			}
			rows = append(rows, b.Sorted()...)
		}
		return rows
	}
	textRows, curRows := decodeAll(mText), decodeAll(mCur)
	// The floats (NaN, ±Infinity) are not what this test is about, and
	// JSONEachRow cannot carry them: zero in both.
	for _, rows := range [][]*change.Row{textRows, curRows} {
		for _, r := range rows {
			for i := range mText.Cols {
				if k := mText.Cols[i].Type.Kind; k == mapping.KindFloat32 || k == mapping.KindFloat64 {
					r.Vals[i] = change.FloatValue(0)
				}
			}
		}
	}
	name := mapping.Qualified(mText.Target.Database, mText.Target.Table)
	steps := []chdbStep{{"sql": createDatabaseSQL(mText)}, {"sql": createTableSQL(mText, currentCaps)}, insertStep(mText, textRows)}
	for _, col := range []string{"at", "at_tz", "num"} {
		steps = append(steps, chdbStep{"sql": "ALTER TABLE " + name + " MODIFY COLUMN " + col + " " + retype[col]})
	}
	steps = append(steps, keysStep(mCur, curRows), chdbStep{"sql": readSQL(mCur), "format": "JSONEachRow"})
	version, results := runChdb(t, py, steps)
	got := chRows(t, mCur, results[0])
	if len(got) != len(curRows) {
		t.Fatalf("ClickHouse %s: %d rows after the ALTER, want %d:\n%s", version, len(got), len(curRows), results[0])
	}
	for _, want := range curRows {
		if r := got[want.Key]; r == nil || !change.SamePayload(r, want) {
			t.Errorf("ClickHouse %s, key %s: converted %s, changesink writes %s", version, change.RenderKey(mCur, want.Vals), renderJSON(mCur, r), renderJSON(mCur, want))
		}
	}
	t.Logf("ClickHouse %s: %d rows converted in place to DateTime64(6, 'UTC') and Decimal(76, 38), equal to what changesink writes with those types", version, len(got))
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

// everythingRow is a row image of the types mappings with every Debezium
// shape: ints, a UInt64 beyond int64, a float4 widened to a double, a
// float8, decimals (12.50), an unconstrained numeric as {scale, value}, a
// bool, a day timestamp, a millisecond timestamp, annotated ZonedDateTime
// and LocalDateTime strings, a UUID, nulls and a blob.
func everythingRow(id int64, current bool) iongen.Struct {
	two64m1 := new(big.Int).SetUint64(math.MaxUint64)
	row := iongen.Struct{
		{"id", id}, {"code", "A-1"},
		{"i8", int64(-128)}, {"i16", int64(32767)}, {"i32", int64(-2147483648)},
		{"u8", int64(255)}, {"u16", int64(65535)}, {"u32", int64(4294967295)}, {"u64", two64m1},
		{"f32", 3.200000047683716}, {"f64", 1.0e-7},
		{"price", iongen.Decimal("12.50")}, {"big", iongen.Decimal("123456789012345678.0123456789")},
		{"var_num", iongen.Struct{{"scale", int64(2)}, {"value", iongen.Blob{0xFB, 0x1E}}}}, // -1250 → -12.50
		{"flag", true}, {"day", iongen.Day(2024, 1, 15)},
		{"at", iongen.Millis(time.Date(2024, 1, 15, 10, 30, 0, 0, time.UTC))},
		{"uid", "6F1C7A3E-2B4D-4C8E-9F10-112233445566"},
		{"note", nil}, {"qty", iongen.Null(0x2)}, {"payload", iongen.Blob("\x00\xffbin")},
	}
	if current {
		row[16] = iongen.Field{"at", iongen.Millis(time.Date(2024, 1, 15, 10, 30, 0, 123_000_000, time.UTC))}
		row = append(row[:17], append(iongen.Struct{
			{"zoned", iongen.Annotated{"ZonedDateTime", "2024-01-15T10:30:00.123456Z"}},
			{"local", iongen.Annotated{"LocalDateTime", "2024-01-15T10:30:00.654321"}},
		}, row[17:]...)...)
	}
	return row
}

// orderRow is an orders row image; nil fields are written as Ion nulls.
func orderRow(id int64, customer, amount any, status any) iongen.Struct {
	return iongen.Struct{{"id", id}, {"customer_id", customer}, {"amount_cents", amount}, {"status", status}}
}

// encode writes events in text (binary=false) or binary Ion.
func encode(t testing.TB, binary bool, events ...any) []byte {
	t.Helper()
	var b bytes.Buffer
	w := iongen.NewWriter(&b, binary)
	for _, e := range events {
		if err := w.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// decodeBytes decodes a batch held in memory with the given worker count.
func decodeBytes(t testing.TB, m *mapping.Mapping, data []byte, workers int) (*merge.Batch, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "changes.ion")
	testenv.WriteFile(t, path, data, 0o644)
	return decodeFile(context.Background(), path, m, workers)
}

// decodeFile decodes a batch file into its latest rows by key as Apply
// does (tasks/cdc/decode.go): the rows the chdb tests write.
func decodeFile(ctx context.Context, path string, m *mapping.Mapping, workers int) (*merge.Batch, error) {
	scan := decode.Options{Workers: workers}
	b := merge.NewBatch(m)
	if err := decode.Scan(ctx, path, m, scan, b.Reset, b.Add); err != nil {
		return nil, err
	}
	if len(b.OutOfOrder) > 0 {
		h := merge.NewHistory(b)
		if err := decode.Scan(ctx, path, m, scan, h.Reset, h.Check); err != nil {
			return nil, err
		}
	}
	return b, nil
}
