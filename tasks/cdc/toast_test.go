package cdc

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/changesink/changesink/internal/testenv"
)

// The real toast_default batches (REPLICA IDENTITY DEFAULT, 3.2 kB text,
// jsonb and bytea values stored out of line): a snapshot of rows 1 and 2
// (changes-01); an update of row 1's status, which leaves body, meta and
// blob unchanged, an update of row 2's body, which leaves meta and blob
// unchanged, and an insert of row 3 (changes-02: the placeholder as a string
// for text and jsonb, as a blob for bytea); a delete of row 1 (changes-03).

const toastDir = "testdata/debezium/toast_default"

// toastRow1 is row 1 after changes-02, as the source held it: the
// scenario's generated values (repeat(md5('1'), 100) and so on) and the new
// status.
func toastRow1() map[string]json.RawMessage {
	h := hex.EncodeToString(func() []byte { s := md5.Sum([]byte("1")); return s[:] }())
	body, _ := json.Marshal(strings.Repeat(h, 100))
	meta := `{"pad": ` + string(body) + `}`
	blob, _ := json.Marshal(`\x` + strings.Repeat(h, 200))
	return map[string]json.RawMessage{"id": json.RawMessage("1"), "status": json.RawMessage(`"touched"`),
		"body": body, "meta": json.RawMessage(meta), "blob": blob}
}

// concat writes the batches as one file, as a trigger evaluation that
// captured them all writes it (one value per line; one version-marked
// stream per record).
func concat(t *testing.T, form string, batches ...string) string {
	t.Helper()
	var all []byte
	for _, b := range batches {
		all = append(all, testenv.ReadFile(t, filepath.Join(toastDir, b+"."+form+".ion"))...)
	}
	return writeFile(t, "changes."+form+".ion", all)
}

// TestRealToastUnchangedInBatch: the three batches as one: row 2's update
// takes meta and blob from its snapshot row in the same batch, row 1's
// update all three (then row 1 is deleted); with changes-01 and changes-02
// as one, row 1 stays, holding its snapshot values and the new status.
func TestRealToastUnchangedInBatch(t *testing.T) {
	for _, form := range []string{"binary", "text"} {
		t.Run(form+"/all", func(t *testing.T) {
			sc := loadRealScenario(t, toastDir, form)
			sc.batches = []string{concat(t, form, "changes-01", "changes-02", "changes-03")}
			runRealScenario(t, sc)
		})
		t.Run(form+"/snapshot and updates", func(t *testing.T) {
			sc := loadRealScenario(t, toastDir, form)
			sc.batches = []string{concat(t, form, "changes-01", "changes-02")}
			sc.rows = append([]map[string]json.RawMessage{toastRow1()}, sc.rows...)
			runRealScenario(t, sc)
		})
	}
}

// TestRealToastUnchangedFromTarget: applied in order, changes-02's
// placeholders are taken from the target's rows (the snapshot's), which
// TestRealDebeziumBatches checks at the end; here row 1 is checked after
// changes-02, before its delete. Applied to a target without the rows,
// changes-02 is refused, naming the key and the column, and nothing is
// written; the runbook's remedy (apply the earlier batch, then replay) then
// works, and so do later replays, when the target holds row 1 deleted at a
// newer LSN.
//
//changesink:per-server
func TestRealToastUnchangedFromTarget(t *testing.T) {
	for _, form := range []string{"binary", "text"} {
		t.Run(form, func(t *testing.T) {
			sc := loadRealScenario(t, toastDir, form)
			batch := func(name string) string { return filepath.Join(toastDir, name+"."+form+".ion") }
			e := newEnv(t, sc.mappingPath)
			e.setup()

			// Without the previous versions: refused, nothing written.
			_, cfg, err := e.applyFile(batch("changes-02"))
			var re *change.RecordError
			if !errors.Is(err, change.ErrToast) || !errors.As(err, &re) || re.Key != "id=1" || re.Column != "body" ||
				!strings.Contains(err.Error(), "neither the batch nor the target holds the previous version (the target does not hold the key)") ||
				!strings.Contains(Hint(err), "Apply the trigger's earlier batches first, in order, then replay this one") {
				t.Fatalf("changes-02 into an empty target: %v; want a TOAST refusal naming key id=1 and column body", err)
			}
			t.Logf("refused: %v", err)
			noOutputs(t, cfg)
			if n := e.query("SELECT count() FROM " + mapping.Qualified(e.db, e.m.Target.Table)); n[0] != "0" {
				t.Fatalf("the refused batch wrote %s rows", n[0])
			}

			// The remedy: the earlier batch, then the refused one again.
			for _, b := range []string{"changes-01", "changes-02"} {
				if _, _, err := e.applyFile(batch(b)); err != nil {
					t.Fatalf("%s: %v", b, err)
				}
			}
			want := sc.expectedRows(t, e.m)
			row1 := (&realScenario{name: sc.name, pgTypes: sc.pgTypes, rows: []map[string]json.RawMessage{toastRow1()}}).expectedRows(t, e.m)
			compareRows(t, e.m, slices.Concat(row1, want), e.liveRows(t, sc.pgTypes))

			// A replay of changes-02 (every key at its own LSN), then
			// changes-03 and a replay of changes-02 again (row 1 deleted at
			// a newer LSN: skipped, its unchanged values never needed).
			for _, b := range []string{"changes-02", "changes-03", "changes-02"} {
				res, cfg, err := e.applyFile(batch(b))
				if err != nil {
					t.Fatalf("%s: %v", b, err)
				}
				if b == "changes-02" && (res.Skipped != 3 || res.Pending != 0) {
					t.Errorf("replay of %s: %v, want every key skipped", b, res.Outputs())
				}
				exp, _ := outputFile(t, cfg, ExpectedFile)
				t.Logf("%s: %v", b, res.Outputs())
				if b == "changes-02" && strings.Contains(exp, `"id": 1, "status": "touched", "body": "__debezium_unavailable_value"`) !=
					(e.query("SELECT count() FROM " + mapping.Qualified(e.db, e.m.Target.LiveView) + " WHERE id = 1")[0] == "0") {
					t.Errorf("expected.jsonl shows the placeholder exactly when row 1's value is not known (deleted at a newer LSN):\n%.300s", exp)
				}
			}
			compareRows(t, e.m, want, e.liveRows(t, sc.pgTypes))
		})
	}
}

// applyFile applies the batch file at path.
func (e *env) applyFile(path string) (*Result, testRun, error) {
	e.t.Helper()
	cfg := e.config(path)
	res, err := testApply(context.Background(), cfg)
	return res, cfg, err
}

// TestUnchangedToastRules: the cases the real batches do not hold, on the
// orders mapping: an update's placeholder filled from the key's previous
// event in the batch (also through a chain of updates), kept equal to a
// repeated copy of the event, refused after a delete in the batch, and a
// key whose target row is a delete.
func TestUnchangedToastRules(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	ph := change.ToastPlaceholder
	for _, f := range forms() {
		t.Run(f.name, func(t *testing.T) {
			b, err := decodeBytes(t, m, encode(t, f.binary,
				createEvent(orderRow(1, int64(10), int64(100), "new"), 5),
				orderEvent(1, int64(11), int64(100), ph, int64(6), false),
				orderEvent(1, int64(12), ph, ph, int64(7), false),
				orderEvent(1, int64(12), ph, ph, int64(7), false), // the same event again
				orderEvent(2, int64(20), int64(200), ph, int64(8), false),
			), 1)
			if err != nil {
				t.Fatal(err)
			}
			got := jsonLines(b)
			want := `{"id": 1, "customer_id": 12, "amount_cents": 100, "status": "new", "_cdc_lsn": 7, "_cdc_deleted": 0}
{"id": 2, "customer_id": 20, "amount_cents": 200, "status": "__debezium_unavailable_value", "_cdc_lsn": 8, "_cdc_deleted": 0}
`
			if got != want {
				t.Errorf("rows\n got %s\nwant %s", got, want)
			}
		})
	}
	e := newEnv(t, ordersMapping)
	e.setup()
	if _, _, err := e.apply(true, orderEvent(3, int64(30), int64(300), "gone", int64(10), false), orderEvent(3, nil, nil, nil, int64(11), true)); err != nil {
		t.Fatal(err)
	}
	_, cfg, err := e.apply(true, orderEvent(3, int64(31), int64(300), ph, int64(12), false))
	if !errors.Is(err, change.ErrToast) || !strings.Contains(err.Error(), `record 1 (key id=3, LSN 12), column "status": incomplete TOAST value`) ||
		!strings.Contains(err.Error(), "(the target holds the key deleted (LSN 11))") {
		t.Errorf("an update of a key the target holds deleted: %v", err)
	}
	noOutputs(t, cfg)
}
