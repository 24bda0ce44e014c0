package cdc

// Tests of TRUNCATE: passed by the trigger, it deletes every key older
// than it, in the batch and in the target; dropped by the trigger, it
// leaves the target as it was.

import (
	"strings"
	"testing"

	"github.com/changesink/changesink/internal/iongen"
)

// TestRealTruncatePassed: with skipped.operations: none the trigger passes
// a TRUNCATE (a record without columns): every key older than it is
// deleted, in the batch and in the target (the snapshot's rows 1 and 2).
//
//changesink:per-server
func TestRealTruncatePassed(t *testing.T) {
	for _, f := range forms() {
		t.Run(f.name, func(t *testing.T) {
			e := scenarioEnv(t, "truncate_passed")
			res := e.applyScenario("truncate_passed", f.binary)
			if got, want := e.liveJSON(), sourceRows(t, "truncate_passed"); got != want {
				t.Errorf("live rows\n%s\nwant (the source)\n%s", got, want)
			}
			if res.Events != 3 || res.Keys != 4 || res.Pending != 4 || res.Deletes != 3 {
				t.Errorf("outputs %v", res.Outputs())
			}
			if res = e.applyScenario("truncate_passed", !f.binary); res.Pending != 0 || res.Verified != 2 {
				t.Errorf("replay: %v", res.Outputs())
			}
		})
	}
}

// TestRealTruncateDroppedByTheTrigger pins what changesink cannot see:
// with the seed's trigger settings Debezium drops a TRUNCATE
// (skipped.operations=t), and the rows it removed stay in the target. The
// runbook says so and how to make the trigger pass it.
func TestRealTruncateDroppedByTheTrigger(t *testing.T) {
	e := scenarioEnv(t, "truncate")
	e.applyScenario("truncate", true)
	if got := e.liveJSON(); got != `{"id":1,"v":"one"}`+"\n"+`{"id":2,"v":"two"}`+"\n"+`{"id":3,"v":"three"}`+"\n"+`{"id":4,"v":"four"}`+"\n" {
		t.Errorf("live rows\n%s", got)
	}
	if sourceRows(t, "truncate") != `{"id":4,"v":"four"}`+"\n" {
		t.Error("the scenario's source changed")
	}
}

// TestTruncateOnlyBatch: a batch holding nothing but a TRUNCATE deletes
// every live key of the target.
func TestTruncateOnlyBatch(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	if _, _, err := e.apply(false, orderEvent(1, int64(1), int64(1), "a", int64(100), false),
		orderEvent(2, int64(2), int64(2), "b", int64(101), false), orderEvent(3, nil, nil, nil, int64(102), true)); err != nil {
		t.Fatal(err)
	}
	res, cfg, err := e.apply(true, iongen.Event(iongen.Struct{}, true, iongen.Metadata("TRUNCATE", iongen.Source("shop", "public", "orders", int64(200), 5, "false"))))
	if err != nil {
		t.Fatal(err)
	}
	if res.Events != 1 || res.Keys != 2 || res.Pending != 2 || res.Deletes != 2 || res.Verified != 2 {
		t.Errorf("outputs %v", res.Outputs())
	}
	if n := e.query("SELECT count() FROM " + e.db + ".orders_live"); n[0] != "0" {
		t.Errorf("%s live rows after the TRUNCATE", n[0])
	}
	if exp, _ := outputFile(t, cfg, ExpectedFile); !strings.Contains(exp, `{"id": 1, "customer_id": 0, "amount_cents": 0, "status": "", "_cdc_lsn": 200, "_cdc_deleted": 1}`) {
		t.Errorf("expected.jsonl\n%s", exp)
	}
}
