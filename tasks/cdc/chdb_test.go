package cdc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amazon-ion/ion-go/ion"
	"github.com/google/uuid"

	"github.com/changesink/changesink/tasks/cdc/internal/iongen"

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
func chJSON(t colType, v value) any {
	if v.null {
		return nil
	}
	switch t.kind {
	case kindInt, kindDate, kindDateTime, kindDateTime64:
		switch t.kind {
		case kindDate:
			return time.Unix(int64(v.n)*86400, 0).UTC().Format("2006-01-02")
		case kindDateTime:
			return time.Unix(int64(v.n), 0).In(t.loc).Format("2006-01-02 15:04:05")
		case kindDateTime64:
			return chDateTime64(int64(v.n), t)
		}
		return json.Number(strconv.FormatInt(int64(v.n), 10))
	case kindUint:
		return json.Number(strconv.FormatUint(v.n, 10))
	case kindFloat32, kindFloat64:
		return math.Float64frombits(v.n)
	case kindDecimal:
		return string(appendDecimal(nil, v.s, t.scale))
	case kindBool:
		return v.n != 0
	case kindUUID:
		var u uuid.UUID
		copy(u[:], v.s)
		return u.String()
	}
	return v.s
}

func chDateTime64(ticks int64, t colType) string {
	tm := ticksTime(ticks, t).In(t.loc)
	s := tm.Format("2006-01-02 15:04:05")
	if t.prec > 0 {
		frac := fmt.Sprintf("%09d", tm.Nanosecond())
		s += "." + frac[:t.prec]
	}
	return s
}

// chValue parses one JSONEachRow output field into a canonical value.
func chValue(t colType, raw any) (value, error) {
	if raw == nil {
		return value{null: true}, nil
	}
	text := fmt.Sprint(raw)
	switch t.kind {
	case kindInt:
		n, err := strconv.ParseInt(text, 10, 64)
		return value{n: uint64(n)}, err
	case kindUint:
		n, err := strconv.ParseUint(text, 10, 64)
		return value{n: n}, err
	case kindFloat32:
		f, err := strconv.ParseFloat(text, 32)
		return floatValue(float64(float32(f))), err
	case kindFloat64:
		f, err := strconv.ParseFloat(text, 64)
		return floatValue(f), err
	case kindDecimal:
		d, err := ion.ParseDecimal(text)
		if err != nil {
			return value{}, err
		}
		coef, exp := d.CoEx()
		n, err := rescale(coef, int64(exp), t)
		if err != nil {
			return value{}, err
		}
		return value{s: n.String()}, nil
	case kindString:
		return value{s: text}, nil
	case kindBool:
		if raw == true {
			return value{n: 1}, nil
		}
		return value{}, nil
	case kindDate:
		d, err := time.Parse("2006-01-02", text)
		return value{n: uint64(d.Unix() / 86400)}, err
	case kindDateTime:
		tm, err := time.ParseInLocation("2006-01-02 15:04:05", text, t.loc)
		return value{n: uint64(tm.Unix())}, err
	case kindDateTime64:
		tm, err := time.ParseInLocation("2006-01-02 15:04:05.999999999", text, t.loc)
		if err != nil {
			return value{}, err
		}
		return timeValue(tm, t)
	case kindUUID:
		u, err := uuid.Parse(text)
		return value{s: string(u[:])}, err
	}
	return value{}, fmt.Errorf("kind %d", t.kind)
}

// chRows parses JSONEachRow output of readSQL into canonical rows by key.
func chRows(t *testing.T, m *Mapping, out string) map[string]*row {
	t.Helper()
	rows := map[string]*row{}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	for dec.More() {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			t.Fatal(err)
		}
		r := &row{vals: make([]value, len(m.cols))}
		for i := range m.cols {
			v, err := chValue(m.cols[i].typ, obj[m.cols[i].name])
			if err != nil {
				t.Fatalf("column %s = %v: %v", m.cols[i].name, obj[m.cols[i].name], err)
			}
			r.vals[i] = v
		}
		lsn, err := strconv.ParseUint(fmt.Sprint(obj[m.Target.VersionColumn]), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		r.lsn, r.deleted = lsn, fmt.Sprint(obj[m.Target.DeletedColumn]) == "1"
		r.key = string(encodeKey(nil, m, r.vals))
		rows[r.key] = r
	}
	return rows
}

// insertStep renders rows for the insert statement changesink sends.
func insertStep(m *Mapping, rows []*row) chdbStep {
	var objs []map[string]any
	for _, r := range rows {
		obj := map[string]any{}
		for i := range m.cols {
			obj[m.cols[i].name] = chJSON(m.cols[i].typ, r.vals[i])
		}
		obj[m.Target.VersionColumn] = json.Number(strconv.FormatUint(r.lsn, 10))
		obj[m.Target.DeletedColumn] = map[bool]int{false: 0, true: 1}[r.deleted]
		objs = append(objs, obj)
	}
	return chdbStep{"insert": insertSQL(m), "rows": objs}
}

// keysStep stands in for the external table of the batch's keys.
func keysStep(m *Mapping, rows []*row) chdbStep {
	var cols [][]string
	for n, i := range m.keyIdx {
		cols = append(cols, []string{keysColumn(n), m.cols[i].typ.ddl(latestCaps())})
	}
	var objs []map[string]any
	for _, r := range rows {
		obj := map[string]any{}
		for n, i := range m.keyIdx {
			obj[keysColumn(n)] = chJSON(m.cols[i].typ, r.vals[i])
		}
		objs = append(objs, obj)
	}
	return chdbStep{"keys": map[string]any{"columns": cols, "rows": objs}}
}

// oneRow decodes one event into its canonical row.
func oneRow(t *testing.T, m *Mapping, event iongen.Struct) *row {
	t.Helper()
	b, err := decodeBytes(t, m, encode(t, false, event), 1)
	if err != nil {
		t.Fatal(err)
	}
	return b.at(0)
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
	for _, mapping := range []string{"testdata/types_current.mapping.yaml", ordersMapping, "testdata/quoting.mapping.yaml"} {
		t.Run(mapping, func(t *testing.T) {
			m := loadMapping(t, mapping)
			m.Target.CreateDatabase = true
			a1, a2, b1, bDel, c1 := chdbRows(t, m)

			db, tbl := m.Target.Database, m.Target.Table
			steps := []chdbStep{
				{"sql": createDatabaseSQL(m)},
				{"sql": createTableSQL(m, latestCaps())},
				{"sql": createViewSQL(m)},
				{"sql": createTableSQL(m, latestCaps())}, // setup is idempotent
				{"sql": createViewSQL(m)},
				insertStep(m, []*row{a1, b1, c1}),
				insertStep(m, []*row{a2, bDel, a2}), // a retried insert: a2 twice
				keysStep(m, []*row{a2, bDel}),
				{"sql": readSQL(m), "format": "JSONEachRow"},
				{"sql": "SELECT count() AS n FROM " + qualified(db, m.Target.LiveView), "format": "JSONEachRow"},
				{"sql": "SELECT name, type FROM system.columns WHERE database = '" + db + "' AND table = '" + tbl + "'", "format": "JSONEachRow"},
				{"sql": "SELECT engine, engine_full, sorting_key FROM system.tables WHERE database = '" + db + "' AND name = '" + tbl + "'", "format": "JSONEachRow"},
				{"sql": versionsSQL(m), "format": "JSONEachRow"},
				// The ledger and the lock (results 5..).
				{"sql": createLedgerSQL(m)},
				{"sql": "SELECT name, type FROM system.columns WHERE database = '" + db + "' AND table = '" + ledgerName(m) + "'", "format": "JSONEachRow"},
				{"sql": lockCreateSQL(qualified(db, lockName(m)), "0123456789abcdef", "h'ost", 7)},
				{"sql": lockBeatSQL(qualified(db, lockName(m)), "0123456789abcdef", "h'ost", 7)},
				{"sql": renameSQL(qualified(db, lockName(m)), qualified(db, lockName(m)+"_xaside"))},
				{"sql": lockHolderSQL(qualified(db, lockName(m)+"_xaside")), "format": "JSONEachRow"},
				{"sql": strings.Replace(truncatedSQL(m), "?", "18446744073709551615", 1), "format": "JSONEachRow"},
			}
			version, results := runChdb(t, py, steps)
			t.Logf("chdb runs ClickHouse %s", version)

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
			sort.Strings(lsns)
			if want := []string{fmt.Sprint(min(a2.lsn, bDel.lsn)), fmt.Sprint(max(a2.lsn, bDel.lsn))}; !slices.Equal(lsns, want) {
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

			got := chRows(t, m, results[0])
			if len(got) != 2 {
				t.Fatalf("read returned %d keys, want 2 (the keys table holds 2):\n%s", len(got), results[0])
			}
			for _, want := range []*row{a2, bDel} {
				r := got[want.key]
				if r == nil || !samePayload(r, want) {
					t.Errorf("key %s: got %s, want %s", renderKey(m, want.vals), renderJSON(m, r), renderJSON(m, want))
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
			for i := range m.cols {
				if !m.cols[i].typ.sameType(types[m.cols[i].name]) {
					t.Errorf("column %s is %q on ClickHouse %s; the schema check would refuse it", m.cols[i].name, types[m.cols[i].name], version)
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
func chdbRows(t *testing.T, m *Mapping) (a1, a2, b1, bDel, c1 *row) {
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

func renderJSON(m *Mapping, r *row) string {
	if r == nil {
		return "nothing"
	}
	return string(appendJSONRow(nil, m, r))
}

// TestTextColumnsConvertInPlaceInChdb: on ClickHouse 18.16 the real
// types_edge batches go to String columns with source_type (microseconds,
// 30-digit numerics); after an upgrade, ALTER TABLE … MODIFY COLUMN turns
// those columns into DateTime64(6, 'UTC') and Decimal(76, 38) holding
// exactly what changesink writes with those types (current ClickHouse, in
// chdb).
func TestTextColumnsConvertInPlaceInChdb(t *testing.T) {
	py := pythonOrSkip(t)
	dir := "testdata/debezium/types_edge"
	raw := string(testenv.ReadFile(t, filepath.Join(dir, "mapping.yaml")))
	mText, err := ParseMapping("types_edge.yaml", []byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	retype := map[string]string{"at": "Nullable(DateTime64(6, 'UTC'))", "at_tz": "Nullable(DateTime64(6, 'UTC'))", "num": "Nullable(Decimal(76, 38))"}
	mCur, err := ParseMapping("types_edge.current.yaml", retyped(t, raw, retype))
	if err != nil {
		t.Fatal(err)
	}
	decodeAll := func(m *Mapping) []*row {
		var rows []*row
		for _, f := range []string{"changes-01.binary.ion", "changes-02.binary.ion"} {
			b, err := decodeFile(context.Background(), filepath.Join(dir, f), m, 1)
			if err != nil {
				t.Fatal(err)
			}
			rows = append(rows, b.sorted()...)
		}
		return rows
	}
	textRows, curRows := decodeAll(mText), decodeAll(mCur)
	// The floats (NaN, ±Infinity) are not what this test is about, and
	// JSONEachRow cannot carry them: zero in both.
	for _, rows := range [][]*row{textRows, curRows} {
		for _, r := range rows {
			for i := range mText.cols {
				if k := mText.cols[i].typ.kind; k == kindFloat32 || k == kindFloat64 {
					r.vals[i] = floatValue(0)
				}
			}
		}
	}
	name := qualified(mText.Target.Database, mText.Target.Table)
	steps := []chdbStep{{"sql": createDatabaseSQL(mText)}, {"sql": createTableSQL(mText, latestCaps())}, insertStep(mText, textRows)}
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
		if r := got[want.key]; r == nil || !samePayload(r, want) {
			t.Errorf("ClickHouse %s, key %s: converted %s, changesink writes %s", version, renderKey(mCur, want.vals), renderJSON(mCur, r), renderJSON(mCur, want))
		}
	}
	t.Logf("ClickHouse %s: %d rows converted in place to DateTime64(6, 'UTC') and Decimal(76, 38), equal to what changesink writes with those types", version, len(got))
}
