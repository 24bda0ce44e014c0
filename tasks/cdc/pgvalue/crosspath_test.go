package pgvalue

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/decode"
	"github.com/changesink/changesink/tasks/cdc/mapping"
)

// debeziumDir holds the real Debezium captures (tasks/cdc/testdata/debezium).
const debeziumDir = "../testdata/debezium"

// TestSameAsTriggerPath: the same source changes reach the same canonical
// values, and the same key bytes, through the trigger's batches (decode,
// reading what real Debezium 3.6.1 captured of a scenario) and through a
// real pgoutput slot (pgvalue, reading what the walsender prints when the
// scenario's statements, from its run.log, run again): a key encodes alike
// whichever source produced it. The events are compared one by one, in
// order: an insert (or Debezium's snapshot read) and an update by every
// value, a delete by its key (and by every value under REPLICA IDENTITY
// FULL). Each scenario's mapping is read as captured and retyped to the
// String forms, Decimals and DateTime64; the only differences are the
// trigger's known losses (numeric NaN arrives as NULL, timestamp infinity
// as a wrong time: docs/mapping.md, "What the trigger loses"), which the
// test lists.
func TestSameAsTriggerPath(t *testing.T) {
	// both retypes a column and its nullable twin <name>_n: name, then the
	// type and source_type ("" for none), by three.
	both := func(cols ...string) map[string]retype {
		out := map[string]retype{}
		for i := 0; i+2 < len(cols); i += 3 {
			out[cols[i]] = retype{cols[i+1], cols[i+2]}
			out[cols[i]+"_n"] = retype{"Nullable(" + cols[i+1] + ")", cols[i+2]}
		}
		return out
	}
	everyStringForm := both("price", "String", "numeric", "num", "String", "numeric", "uid", "String", "uuid",
		"day", "String", "date", "at", "String", "timestamp", "at_tz", "String", "timestamptz",
		"i64", "Decimal(19, 0)", "", "i32", "Int64", "", "i16", "Decimal(6, 1)", "", "f32", "Float64", "",
		"doc", "String", "jsonb", "bin", "String", "bytea", "txt", "String", "text")
	for _, tt := range []struct {
		scenario, variant string
		retype            map[string]retype
		losses            map[string]string // "<change>: <key> <column>" → why the values differ
	}{
		{scenario: "types", variant: "as captured"},
		{scenario: "types", variant: "DateTime64", retype: both("at", "DateTime64(6, 'UTC')", "", "at_tz", "DateTime64(6, 'UTC')", "")},
		{scenario: "types", variant: "String forms", retype: everyStringForm},
		{scenario: "types_default", variant: "as captured"},
		{scenario: "orders_full", variant: "as captured"},
		{scenario: "orders_default", variant: "as captured"},
		{scenario: "multichange", variant: "as captured"},
		{scenario: "toast_full", variant: "as captured"},
		{scenario: "defaults", variant: "as captured", losses: map[string]string{
			"1: id=1 note": nullAsDefault, "1: id=1 qty": nullAsDefault, "1: id=1 flag": nullAsDefault,
			"4: id=4 note": nullAsDefault, "4: id=4 qty": nullAsDefault, "4: id=4 flag": nullAsDefault,
			"5: id=2 note": nullAsDefault, "5: id=2 qty": nullAsDefault, "5: id=2 flag": nullAsDefault}},
		{scenario: "types_default", variant: "String forms", retype: everyStringForm},
		{scenario: "types_edge", variant: "as captured", losses: edgeLosses},
		{scenario: "types_edge", variant: "Decimal, Float64", losses: edgeLosses,
			retype: map[string]retype{"price": {"Nullable(Decimal(12, 5))", ""}, "f32": {"Nullable(Float64)", ""},
				"at_tz": {"Nullable(DateTime64(6, 'UTC'))", ""}, "day": {"Nullable(String)", ""}}},
	} {
		t.Run(tt.scenario+" "+tt.variant, func(t *testing.T) {
			m := scenarioMapping(t, tt.scenario, tt.retype)
			fromIon := decodeBatches(t, tt.scenario, m)
			fromSlot := slotChanges(t, tt.scenario, m)
			if len(fromIon) != len(fromSlot) || len(fromSlot) == 0 {
				t.Fatalf("the batches hold %d changes, the slot streamed %d", len(fromIon), len(fromSlot))
			}
			compared, lost := 0, 0
			for n, slot := range fromSlot {
				ion := fromIon[n]
				key := change.RenderKey(m, slot.Vals)
				if ion.Key != slot.Key || ion.Deleted != slot.Deleted {
					t.Errorf("change %d: the batch's is %s of key %s (%x), the slot's %s of key %s (%x)", n+1,
						ion.Meta.Op, change.RenderKey(m, ion.Vals), ion.Key, slot.Meta.Op, key, slot.Key)
					continue
				}
				for i, c := range m.Cols {
					if slot.Deleted && !slot.Meta.Image && !c.IsKey {
						continue // a delete's key only: the other columns are not logged
					}
					why, isLoss := tt.losses[fmt.Sprintf("%d: %s %s", n+1, key, c.Name)]
					same := ion.Vals[i].Equal(slot.Vals[i])
					switch {
					case isLoss && same:
						t.Errorf("change %d, key %s, column %s: the trigger was to lose the value (%s), yet both read %+v", n+1, key, c.Name, why, slot.Vals[i])
					case isLoss:
						lost++
					case !same:
						t.Errorf("change %d (%s), key %s, column %s (%s): the batch reads %s, the slot %s", n+1, slot.Meta.Op, key, c.Name, c.Type, brief(ion.Vals[i]), brief(slot.Vals[i]))
					default:
						compared++
					}
				}
			}
			if lost != len(tt.losses) {
				t.Errorf("%d of the %d losses listed were seen", lost, len(tt.losses))
			}
			t.Logf("%d changes, %d values equal, %d trigger losses", len(fromSlot), compared, lost)
		})
	}
}

// brief renders a value for a message, a long string cut short.
func brief(v change.Value) string {
	if len(v.S) > 40 {
		v.S = v.S[:40] + fmt.Sprintf("… (%d bytes)", len(v.S))
	}
	return fmt.Sprintf("%+v", v)
}

// edgeLosses are the values of types_edge the trigger does not carry.
var edgeLosses = map[string]string{
	"1: id=1 num":  "numeric NaN arrives as NULL",
	"5: id=11 num": "numeric NaN arrives as NULL",
	"4: id=4 at":   "timestamp infinity arrives as a wrong time",
	"8: id=14 at":  "timestamp infinity arrives as a wrong time",
}

// nullAsDefault: an explicit NULL in a column with a DEFAULT arrives as the
// DEFAULT in a trigger batch.
const nullAsDefault = "NULL arrives as the DEFAULT"

// retype is a column's new type and source_type ("": none).
type retype struct{ typ, source string }

// scenarioMapping reads a scenario's mapping with the columns of retypes
// given their new type and source_type.
func scenarioMapping(t *testing.T, scenario string, retypes map[string]retype) *mapping.Mapping {
	t.Helper()
	raw := string(testenv.ReadFile(t, filepath.Join(debeziumDir, scenario, "mapping.yaml")))
	for col, rt := range retypes {
		re := regexp.MustCompile(`\{name: ` + regexp.QuoteMeta(col) + `, [^}]*\}`)
		if !re.MatchString(raw) {
			t.Fatalf("the mapping has no column %s to retype", col)
		}
		col := fmt.Sprintf("{name: %s, type: %q", col, rt.typ)
		if rt.source != "" {
			col += ", source_type: " + rt.source
		}
		raw = re.ReplaceAllLiteralString(raw, col+"}")
	}
	m, err := mapping.Parse(scenario, []byte(raw))
	if err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	return m
}

// decodeBatches decodes the scenario's batches in order (Kestra 2's binary
// form) and returns every change.
func decodeBatches(t *testing.T, scenario string, m *mapping.Mapping) []change.Row {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(debeziumDir, scenario, "changes-*.binary.ion"))
	if len(paths) == 0 {
		t.Fatalf("no batches of %s", scenario)
	}
	var rows []change.Row
	for _, p := range paths {
		start := len(rows)
		err := decode.Scan(context.Background(), p, m, decode.Options{Workers: 1}, func() { rows = rows[:start] }, func(r change.Row) error {
			rows = append(rows, r)
			return nil
		})
		if err != nil {
			t.Fatalf("decode %s: %v", p, err)
		}
	}
	return rows
}

// slotChanges runs the scenario's statements (run.log: its DDL, then, once
// a temporary pgoutput slot exists, its changes) on a database of the
// test's own, streams the slot with the startup parameters of Settings and
// converts every change's values with Decoders of the Relation message's
// columns. A delete holds its key (Meta.Image false), or its whole old row
// under REPLICA IDENTITY FULL (Meta.Image true).
func slotChanges(t *testing.T, scenario string, m *mapping.Mapping) []change.Row {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := testenv.Lookup(t, "CHANGESINK_TEST_PG")["CHANGESINK_TEST_PG"]
	dsn := testenv.CreateDatabase(t, admin, testenv.UniqueName(t, "pgv_"), "")
	setup, changes := scenarioSQL(t, scenario)
	exec(t, ctx, dsn, Settings(), setup)
	pub := regexp.MustCompile(`CREATE PUBLICATION (\S+)`).FindStringSubmatch(setup)
	if pub == nil {
		t.Fatalf("%s's run.log creates no publication", scenario)
	}
	conn, _ := replicationConn(t, ctx, dsn, Settings())
	slot := "pgv_" + testenv.RandomHex(6)
	if _, err := pglogrepl.CreateReplicationSlot(ctx, conn, slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{Temporary: true}); err != nil {
		t.Fatalf("create the slot: %v", err)
	}
	exec(t, ctx, dsn, Settings(), changes)
	err := pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + pub[1] + "'"}})
	if err != nil {
		t.Fatalf("start replication: %v", err)
	}
	var rows []change.Row
	var decoders []*Decoder // by Relation column
	var index []int         // Relation column → mapping column
	// convert reads a tuple; old is the update's old row under REPLICA
	// IDENTITY FULL, which holds the values of the TOASTed columns the
	// update left unchanged ('u' in the new row, even under FULL).
	convert := func(op string, tuple, old *pglogrepl.TupleData, deleted, image bool) {
		r := change.Row{Vals: make([]change.Value, len(m.Cols)), Deleted: deleted, Meta: change.Meta{Op: op, Image: image}}
		for j, col := range tuple.Columns {
			i := index[j]
			if deleted && !image && !m.Cols[i].IsKey {
				continue
			}
			if col.DataType == 'u' && old != nil {
				col = old.Columns[j]
			}
			v, err := decoders[j].Value(col.DataType, col.Data)
			if err != nil {
				t.Fatalf("change %d (%s), column %s, %q: %v", len(rows)+1, op, m.Cols[i].Name, col.Data, err)
			}
			r.Vals[i] = v
		}
		r.Key = string(change.EncodeKey(nil, m, r.Vals))
		rows = append(rows, r)
	}
	for expected := len(decodeBatches(t, scenario, m)); len(rows) < expected; {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("receive after %d changes of %d: %v", len(rows), expected, err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok || len(cd.Data) == 0 || cd.Data[0] != pglogrepl.XLogDataByteID {
			continue
		}
		x, err := pglogrepl.ParseXLogData(cd.Data[1:])
		if err != nil {
			t.Fatal(err)
		}
		lm, err := pglogrepl.Parse(x.WALData)
		if err != nil {
			t.Fatal(err)
		}
		switch lm := lm.(type) {
		case *pglogrepl.RelationMessage:
			decoders, index = make([]*Decoder, len(lm.Columns)), make([]int, len(lm.Columns))
			for j, rc := range lm.Columns {
				i, ok := m.ByName[rc.Name]
				if !ok {
					t.Fatalf("the Relation's column %s is not in the mapping", rc.Name)
				}
				d, err := NewDecoder(Column{Name: rc.Name, TypeOID: rc.DataType, TypeMod: rc.TypeModifier, Key: rc.Flags == 1}, &m.Cols[i])
				if err != nil {
					t.Fatal(err)
				}
				decoders[j], index[j] = d, i
			}
		case *pglogrepl.InsertMessage:
			convert("INSERT", lm.Tuple, nil, false, false)
		case *pglogrepl.UpdateMessage:
			convert("UPDATE", lm.NewTuple, lm.OldTuple, false, false)
		case *pglogrepl.DeleteMessage:
			convert("DELETE", lm.OldTuple, nil, true, lm.OldTupleType == pglogrepl.UpdateMessageTupleTypeOld)
		}
	}
	return rows
}

// scenarioSQL splits a scenario's run.log into its DDL (CREATE TABLE,
// CREATE PUBLICATION, ALTER TABLE) and its changes (the rest), each as one
// script; comments are left out.
func scenarioSQL(t *testing.T, scenario string) (setup, changes string) {
	t.Helper()
	var ddl, dml strings.Builder
	in := &dml
	for _, line := range strings.Split(string(testenv.ReadFile(t, filepath.Join(debeziumDir, scenario, "run.log"))), "\n") {
		switch {
		case strings.HasPrefix(line, "--") || strings.TrimSpace(line) == "":
			continue
		case strings.HasPrefix(line, "CREATE TABLE"), strings.HasPrefix(line, "CREATE PUBLICATION"), strings.HasPrefix(line, "ALTER TABLE"):
			in = &ddl
		case !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, ")"):
			in = &dml
		}
		in.WriteString(line + "\n")
	}
	return ddl.String(), dml.String()
}
