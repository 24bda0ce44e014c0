package cdc

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/changesink/changesink/tasks/cdc/change"

	"github.com/changesink/changesink/internal/iongen"
	"github.com/changesink/changesink/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the generated batches and their testdata/*.expected.jsonl")

// committedBatches are the batch files in testdata/, written by
// TestGenerate -update with ion-go's text and binary writers in Kestra's
// two forms, and the expected.jsonl each must decode to.
var committedBatches = []struct {
	name, mapping string
	events        func() []any
}{
	{"orders", ordersMapping, ordersFixture},
	{"types", "testdata/types.mapping.yaml", func() []any { return typesFixture(false) }},
	{"types_current", "testdata/types_current.mapping.yaml", func() []any { return typesFixture(true) }},
}

// ordersFixture is a trigger batch of shop.public.orders: a snapshot
// (READ), inserts, updates, deletes under REPLICA IDENTITY DEFAULT (nulls
// but the key), a delete with a TOAST placeholder in its image, and a
// replayed event.
func ordersFixture() []any {
	ev := func(op string, id int64, customer, amount, status any, lsn int64, snapshot string) any {
		src := iongen.Source("shop", "public", "orders", lsn, 760+lsn%7, snapshot)
		return iongen.Event(orderRow(id, customer, amount, status), op == "DELETE", iongen.Metadata(op, src))
	}
	return []any{
		ev("READ", 1, int64(100), int64(1250), "new", 24023128, "first"),
		ev("READ", 2, int64(101), int64(990), "paid", 24023128, "last"),
		ev("CREATE", 3, int64(102), int64(5), "new", 24023300, "false"),
		ev("UPDATE", 1, int64(100), int64(1250), "paid", 24023400, "false"),
		ev("UPDATE", 3, int64(102), int64(5), "cancelled — client a écrit", 24023500, "false"),
		ev("DELETE", 2, nil, nil, nil, 24023600, "false"),
		ev("CREATE", 4, int64(103), int64(-7), "refund \"partial\"", 24023700, "false"),
		ev("DELETE", 3, int64(102), int64(5), change.ToastPlaceholder, 24023800, "false"),
		ev("UPDATE", 1, int64(100), int64(1300), "shipped", 24023900, "false"),
		ev("UPDATE", 1, int64(100), int64(1300), "shipped", 24023900, "false"), // a replay
	}
}

func typesFixture(current bool) []any {
	src := func(lsn int64, op string) iongen.Struct {
		return iongen.Metadata(op, iongen.Source("shop", "public", "everything", lsn, 9, "false"))
	}
	second := everythingRow(2, current)
	for i := range second {
		switch second[i].Name {
		case "note":
			second[i].Value = "second ✓"
		case "qty":
			second[i].Value = int64(3)
		case "price":
			second[i].Value = iongen.Decimal("-0.01")
		case "day":
			// The last Date each server shows: 18.16 stores later ones
			// but reads them back as 1970 (refused: ErrNotShown).
			second[i].Value = iongen.Day(2106, 2, 7)
			if current {
				second[i].Value = iongen.Day(2149, 6, 6)
			}
		case "at":
			if current {
				second[i].Value = iongen.Annotated{Annotation: "ZonedDateTime", Value: "2024-03-31T01:59:59.999Z"}
			} else {
				second[i].Value = iongen.Millis(time.Date(2106, 2, 6, 23, 59, 59, 0, time.UTC)) // the last DateTime 18.16 shows
			}
		}
	}
	return []any{
		iongen.Event(everythingRow(1, current), false, src(10, "CREATE")),
		iongen.Event(second, false, src(11, "CREATE")),
		iongen.Event(iongen.Struct{{"id", int64(1)}, {"code", "A-1"}}, true, src(12, "DELETE")),
	}
}

func batchPath(name string, binary bool) string {
	form := "text"
	if binary {
		form = "binary"
	}
	return filepath.Join("testdata", name+"."+form+".ion")
}

// TestGenerate writes (with -update) and checks the committed batches: the
// generator still produces the committed bytes, and both forms decode to
// the committed expected.jsonl.
func TestGenerate(t *testing.T) {
	for _, c := range committedBatches {
		m := loadMapping(t, c.mapping)
		golden := filepath.Join("testdata", c.name+".expected.jsonl")
		for _, binary := range []bool{false, true} {
			path := batchPath(c.name, binary)
			data := encode(t, binary, c.events()...)
			if *update {
				testenv.WriteFile(t, path, data, 0o644)
			}
			committed, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test -run TestGenerate -update writes it)", err)
			}
			if string(committed) != string(data) {
				t.Errorf("%s differs from what the generator writes (go test -run TestGenerate -update)", path)
			}
			b, err := decodeFile(context.Background(), path, m, 2)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			got := jsonLines(b)
			if *update && !binary {
				testenv.WriteFile(t, golden, []byte(got), 0o644)
			}
			want := testenv.ReadFile(t, golden)
			if got != string(want) {
				t.Errorf("%s decodes to\n%s\nwant (%s)\n%s", path, got, golden, want)
			}
		}
	}
}

// TestApplyCommittedBatches applies the committed orders batch in text
// form, then in binary form (a replay: nothing pending), and the types
// batch, against the test ClickHouse.
//
//changesink:per-server
func TestApplyCommittedBatches(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	cfg := e.config(batchPath("orders", false))
	res, err := testApply(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Events != 10 || res.Keys != 4 || res.Pending != 4 || res.Deletes != 2 || res.Verified != 4 {
		t.Errorf("text: %v", res.Outputs())
	}
	exp, _ := outputFile(t, cfg, ExpectedFile)
	if want, _ := os.ReadFile("testdata/orders.expected.jsonl"); exp != string(want) {
		t.Errorf("expected.jsonl\n%s\nwant\n%s", exp, want)
	}
	res, err = testApply(context.Background(), e.config(batchPath("orders", true)))
	if err != nil {
		t.Fatal(err)
	}
	if res.Pending != 0 || res.Skipped != 4 || res.Verified != 4 {
		t.Errorf("binary replay: %v", res.Outputs())
	}

	types := newEnv(t, "testdata/types.mapping.yaml")
	types.setup()
	for _, binary := range []bool{true, false} {
		if _, err := testApply(context.Background(), types.config(batchPath("types", binary))); err != nil {
			t.Fatal(err)
		}
	}
}
