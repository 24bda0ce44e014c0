package cdc

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/merge"

	"github.com/amazon-ion/ion-go/ion"

	"github.com/changesink/changesink/internal/testenv"
)

// ionToJSONL converts a batch to the JSON lines IonToJson gives the seed:
// structs as objects, decimals as JSON numbers, annotations dropped.
func ionToJSONL(t *testing.T, data []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	for _, v := range testenv.IonValues(t, data) {
		line, err := json.Marshal(jsonable(v))
		if err != nil {
			t.Fatal(err)
		}
		out.Write(line)
		out.WriteByte('\n')
	}
	return out.Bytes()
}

func jsonable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[k] = jsonable(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonable(e)
		}
		return out
	case *string:
		return *x
	case *ion.SymbolToken:
		if x.Text != nil {
			return *x.Text
		}
		return nil
	case *ion.Decimal:
		return json.Number(x.String())
	case *big.Int:
		return json.Number(x.String())
	case *float64:
		return *x
	case *ion.Timestamp:
		return x.String()
	case []byte:
		return base64.StdEncoding.EncodeToString(x)
	}
	return v
}

// runSeedScript runs one of the seed's Python scripts in dir.
func runSeedScript(t *testing.T, py, seeds, script, dir string) string {
	t.Helper()
	src := testenv.ReadFile(t, filepath.Join(seeds, "reference", script))
	code := strings.ReplaceAll(string(src), "{{ vars.postgres_database }}", "shop")
	cmd := exec.Command(py, "-c", code)
	cmd.Dir = dir
	res, err := testenv.Run(cmd)
	if err != nil || res.Code != 0 {
		t.Fatalf("%s: exit %d, %v\n%s", script, res.Code, err, res.Output())
	}
	return res.Output()
}

// TestOutputFilesMatchTheSeed runs the seed's prepare_batch and
// select_changes on the JSON lines of a batch and compares their
// expected.jsonl and pending.jsonl byte for byte with changesink's, and
// their outputs with changesink's counts.
func TestOutputFilesMatchTheSeed(t *testing.T) {
	py := pythonOrSkip(t)
	seeds := testenv.Seeds(t)
	m := loadMapping(t, ordersMapping)
	var events []any
	statuses := []string{"new", "paid ✓", `q"b\s/<a&b>`, "t\tn\nr\rb\bf\fz\x01\x1f\x7f", "ls\u2028ps\u2029", "😀😀", "", " lead "}
	for i := range 300 {
		id := int64(i%97 + 1)
		if i%7 == 3 {
			id = -id
		}
		events = append(events, orderEvent(id, int64(i), int64(i*13-400), statuses[i%len(statuses)], int64(1000+i), i%10 == 9))
	}
	events = append(events, events[5], events[17]) // replays
	data := encode(t, false, events...)
	b, err := decodeBytes(t, m, data, 2)
	if err != nil {
		t.Fatal(err)
	}
	expected := b.Sorted()

	dir := t.TempDir()
	testenv.WriteFile(t, filepath.Join(dir, "changes.jsonl"), ionToJSONL(t, data), 0o644)
	out := runSeedScript(t, py, seeds, "cdc_prepare_batch.py", dir)
	seedExpected := testenv.ReadFile(t, filepath.Join(dir, "expected.jsonl"))
	if len(b.Sorted()) < 100 || bytes.Count(seedExpected, []byte("\n")) != len(b.Sorted()) {
		t.Fatalf("%d keys, seed wrote %d lines", len(b.Sorted()), bytes.Count(seedExpected, []byte("\n")))
	}
	if got := jsonLines(b); got != string(seedExpected) {
		t.Errorf("expected.jsonl differs from the seed's:\n ours %.400s\nseed's %.400s", got, seedExpected)
	}
	if want := fmt.Sprintf(`"events": %d, "keys": %d`, b.Events, len(b.Sorted())); !strings.Contains(out, want) {
		t.Errorf("seed outputs %s, ours %s", out, want)
	}

	// The target holds every third key at an older LSN, every fifth at the
	// same version (a replay), and nothing else.
	current := map[string]*change.Row{}
	var cur bytes.Buffer
	for i, r := range expected {
		var c change.Row
		switch {
		case i%3 == 0:
			c = *r
			c.Version = r.Version - 500
		case i%5 == 0:
			c = *r
		default:
			continue
		}
		current[c.Key] = &c
		line := change.AppendJSON(nil, m, &c)
		// read_current selects toString(_cdc_lsn): the LSN is a string there.
		lsn := strconv.FormatUint(c.Version, 10)
		line = bytes.Replace(line, []byte(`"_cdc_lsn": `+lsn), []byte(`"_cdc_lsn": "`+lsn+`"`), 1)
		cur.Write(line)
		cur.WriteByte('\n')
	}
	testenv.WriteFile(t, filepath.Join(dir, "current.jsonl"), cur.Bytes(), 0o644)
	out = runSeedScript(t, py, seeds, "cdc_select_changes.py", dir)
	seedPending := testenv.ReadFile(t, filepath.Join(dir, "pending.jsonl"))
	sel, err := merge.SelectPending(m, expected, current, nil)
	if err != nil {
		t.Fatal(err)
	}
	pending, deletes := sel.Pending, sel.Deletes
	if len(pending) == 0 || len(pending) == len(expected) {
		t.Fatalf("%d of %d pending: the case tests nothing", len(pending), len(expected))
	}
	var ours []byte
	for _, r := range pending {
		ours = change.AppendJSON(ours, m, r)
		ours = append(ours, '\n')
	}
	if string(ours) != string(seedPending) {
		t.Errorf("pending.jsonl differs from the seed's:\n ours %.400s\nseed's %.400s", ours, seedPending)
	}
	want := fmt.Sprintf(`{"outputs": {"pending": %d, "skipped": %d, "deletes": %d}}`, len(pending), len(expected)-len(pending), deletes)
	if !strings.Contains(out, want) {
		t.Errorf("seed printed %s, ours %s", out, want)
	}
}

// pythonOrSkip returns CHANGESINK_TEST_PYTHON (a venv with chdb and the
// seed's dependencies), or skips loudly.
func pythonOrSkip(t *testing.T) string {
	t.Helper()
	return testenv.Lookup(t, "CHANGESINK_TEST_PYTHON")["CHANGESINK_TEST_PYTHON"]
}
