package cdc

// Batch sequences checked against the target (issue 28): a batch older
// than the target, newer, or overlapping it, for a key the target lacks,
// holds live or holds deleted, for each operation. Each case names the
// outcome a source replayed in commit order gives: the row the key ends
// with, or the refusal, with nothing written.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/changesink/changesink/internal/iongen"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/tasks/cdc/change"
)

// seqEvent is an event of shop.public.orders key id at lsn, in transaction
// lsn/100, with amount_cents lsn/100: op is CREATE, UPDATE, DELETE or
// TOAST (an UPDATE leaving status unchanged: Debezium's placeholder).
func seqEvent(id int64, op string, lsn int64, status string) iongen.Struct {
	var ev iongen.Struct
	switch op {
	case "CREATE":
		ev = createEvent(orderRow(id, int64(1), lsn/100, status), lsn)
	case "DELETE":
		ev = orderEvent(id, nil, nil, nil, lsn, true)
	case "TOAST":
		ev = orderEvent(id, int64(1), lsn/100, "__debezium_unavailable_value", lsn, false)
	default:
		ev = orderEvent(id, int64(1), lsn/100, status, lsn, false)
	}
	return withSource(ev, "txId", lsn/100)
}

// TestBatchAgainstTarget is the cross product of issue 28: key 1's target
// row (none; live at version 300, status T300; deleted at 300) × the batch
// (older: an event at 200, with key 2 new to the target at 250, so that the
// batch can be placed; newer: an event at 400; overlapping: an UPDATE at
// 200, status B200, then an event at 400) × the operation of the event
// (CREATE, UPDATE, TOAST, DELETE; the older batch's event at 200 is of
// that operation). want is key 1's row in the FINAL table afterwards
// (amount/status/version/deleted), or the refusal.
//
//changesink:per-server
func TestBatchAgainstTarget(t *testing.T) {
	type outcomeWant struct {
		row  string // amount, status, version, deleted; "" none
		err  error
		says string
		// carried: the batch ends inside the transaction of a CREATE of a
		// live key (it may yet delete the older row); the next batch, of
		// another transaction, reports the key as recreated.
		carried bool
	}
	cases := map[string]map[string]map[string]outcomeWant{
		"none": {
			"older": {
				"CREATE": {row: "2\tX\t200\t0"}, "UPDATE": {row: "2\tX\t200\t0"},
				"TOAST":  {err: change.ErrToast, says: "the target does not hold the key"},
				"DELETE": {row: "0\t\t200\t1"},
			},
			"newer": {
				"CREATE": {row: "4\tX\t400\t0"}, "UPDATE": {row: "4\tX\t400\t0"},
				"TOAST":  {err: change.ErrToast, says: "the target does not hold the key"},
				"DELETE": {row: "0\t\t400\t1"},
			},
			"overlapping": {
				"CREATE": {row: "4\tX\t400\t0", carried: true}, "UPDATE": {row: "4\tX\t400\t0"},
				"TOAST": {row: "4\tB200\t400\t0"}, "DELETE": {row: "0\t\t400\t1"},
			},
		},
		"live": {
			// The older event is skipped (a replay); key 2 is applied.
			"older": {
				"CREATE": {row: "3\tT300\t300\t0"}, "UPDATE": {row: "3\tT300\t300\t0"},
				"TOAST": {row: "3\tT300\t300\t0"}, "DELETE": {row: "3\tT300\t300\t0"},
			},
			"newer": {
				"CREATE": {row: "4\tX\t400\t0", carried: true}, "UPDATE": {row: "4\tX\t400\t0"},
				"TOAST": {row: "4\tT300\t400\t0"}, "DELETE": {row: "0\t\t400\t1"},
			},
			"overlapping": {
				// The placeholder's previous version is the target's row
				// (300), not the batch's event at 200 (issue 28 case 1).
				"CREATE": {row: "4\tX\t400\t0", carried: true}, "UPDATE": {row: "4\tX\t400\t0"},
				"TOAST": {row: "4\tT300\t400\t0"}, "DELETE": {row: "0\t\t400\t1"},
			},
		},
		"deleted": {
			"older": {
				"CREATE": {row: "0\t\t300\t1"}, "UPDATE": {row: "0\t\t300\t1"},
				"TOAST": {row: "0\t\t300\t1"}, "DELETE": {row: "0\t\t300\t1"},
			},
			"newer": {
				"CREATE": {row: "4\tX\t400\t0"}, "UPDATE": {row: "4\tX\t400\t0"},
				"TOAST":  {err: change.ErrToast, says: "the target holds the key deleted (LSN 300)"},
				"DELETE": {row: "0\t\t400\t1"},
			},
			"overlapping": {
				"CREATE": {row: "4\tX\t400\t0", carried: true}, "UPDATE": {row: "4\tX\t400\t0"},
				"TOAST":  {err: change.ErrToast, says: "the target holds the key deleted at version 300, between the batch's event it was filled from (version 200) and this one"},
				"DELETE": {row: "0\t\t400\t1"},
			},
		},
	}
	const id = 1
	for _, target := range []string{"none", "live", "deleted"} {
		for _, batch := range []string{"older", "newer", "overlapping"} {
			for _, op := range []string{"CREATE", "UPDATE", "TOAST", "DELETE"} {
				want := cases[target][batch][op]
				t.Run(fmt.Sprintf("%s/%s/%s", target, batch, op), func(t *testing.T) {
					e := newEnv(t, ordersMapping)
					e.setup()
					switch target {
					case "live":
						if _, _, err := e.apply(false, seqEvent(id, "UPDATE", 300, "T300")); err != nil {
							t.Fatal(err)
						}
					case "deleted":
						if _, _, err := e.apply(false, seqEvent(id, "UPDATE", 280, "T280"), seqEvent(id, "DELETE", 300, "")); err != nil {
							t.Fatal(err)
						}
					}
					var evs []any
					switch batch {
					case "older":
						evs = []any{seqEvent(id, op, 200, "X"), seqEvent(id+1, "UPDATE", 250, "K2")}
					case "newer":
						evs = []any{seqEvent(id, op, 400, "X")}
					case "overlapping":
						evs = []any{seqEvent(id, "UPDATE", 200, "B200"), seqEvent(id, op, 400, "X")}
					}
					before := e.physical()
					res, log, err := e.applyLogged(evs...)
					if want.err != nil {
						wantError(t, err, outcome.Refused, want.err, want.says)
						if e.physical() != before {
							t.Error("the refused batch changed the target")
						}
						return
					}
					if err != nil {
						t.Fatal(err)
					}
					got := e.query(e.finalSQL("amount_cents, status, _cdc_lsn, _cdc_deleted", fmt.Sprintf("id = %d", id)))
					if strings.Join(got, "\n") != want.row {
						t.Errorf("key 1's row %q, want %q", strings.Join(got, "\n"), want.row)
					}
					if res.Recreated != 0 || strings.Contains(log, "created again while live") {
						t.Errorf("recreated %d; log:\n%s", res.Recreated, log)
					}
					if batch == "older" {
						k2 := e.query(fmt.Sprintf("SELECT status FROM %s.orders_cdc FINAL WHERE id = %d", e.db, id+1))
						if strings.Join(k2, "") != "K2" {
							t.Errorf("key 2 (new to the target) %q, want K2", k2)
						}
					}
					// The same batch again is a replay: nothing written.
					if res, _, err := e.applyLogged(evs...); err != nil || res.Pending != 0 {
						t.Errorf("replay: %v, %v", res, err)
					}
					// The next transaction's batch: a key carried is recreated.
					res, log, err = e.applyLogged(seqEvent(3, "UPDATE", 500, "N"))
					if err != nil {
						t.Fatal(err)
					}
					if recreated := map[bool]int64{true: 1}[want.carried]; res.Recreated != recreated ||
						(recreated > 0) != strings.Contains(log, "key id=1 (transaction 4)") {
						t.Errorf("next batch: recreated %d, want %d; log:\n%s", res.Recreated, recreated, log)
					}
				})
			}
		}
	}
}

// TestDatesTheServerShows (issue 28 case 5): ClickHouse 18.16 stores a
// Date after 2106-02-07 and a DateTime after 2106-02-06 23:59:59 UTC but
// reads them back as 1970; changesink asks the server which it shows and
// refuses a row beyond them, naming record, key and column, writing
// nothing. The last values it shows are applied. A server that shows the
// whole ranges (per the probe) applies all of them.
//
//changesink:per-server
func TestDatesTheServerShows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ev.mapping.yaml")
	if err := os.WriteFile(path, []byte(`source: {database: shop, schema: public, table: ev}
target: {database: x, table: ev_cdc}
key: [id]
columns:
  - {name: id, type: Int64}
  - {name: day, type: Nullable(Date)}
  - {name: at, type: "Nullable(DateTime('UTC'))"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	ev := func(id int64, day, at any) iongen.Struct {
		return iongen.Event(iongen.Struct{{"id", id}, {"day", day}, {"at", at}}, false,
			iongen.Metadata("CREATE", iongen.Source("shop", "public", "ev", 100+id, 1, "false")))
	}
	date := func(s string) any { return iongen.Annotated{"LocalDate", s} }
	instant := func(s string) any { return iongen.Annotated{"ZonedDateTime", s} }
	e := newEnv(t, path)
	e.setup()
	short := e.caps().DateDays != 0
	if short != strings.HasPrefix(e.query("SELECT version()")[0], "18.") {
		t.Fatalf("the probe says short dates %v on ClickHouse %s", short, e.query("SELECT version()")[0])
	}
	if _, _, err := e.apply(true, ev(1, date("2106-02-07"), instant("2106-02-06T23:59:59Z"))); err != nil {
		t.Fatalf("the last values 18.16 shows: %v", err)
	}
	if got := e.query("SELECT toString(day), toString(at) FROM " + e.db + ".ev_cdc WHERE id = 1"); got[0] != "2106-02-07\t2106-02-06 23:59:59" {
		t.Errorf("shown as %q", got)
	}
	for _, tc := range []struct {
		name   string
		event  iongen.Struct
		column string
	}{
		{"a Date after 2106-02-07", ev(2, date("2106-02-08"), nil), "day"},
		{"the top of Date", ev(3, date("2149-06-06"), nil), "day"},
		{"a DateTime after 2106-02-06 23:59:59", ev(4, nil, instant("2106-02-07T00:00:00Z")), "at"},
		{"the top of DateTime", ev(5, nil, instant("2106-02-07T06:28:15Z")), "at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.physical()
			_, cfg, err := e.apply(true, tc.event)
			if !short {
				if err != nil {
					t.Fatalf("a server that shows the whole range refused: %v", err)
				}
				return
			}
			wantError(t, err, outcome.Refused, change.ErrNotShown, fmt.Sprintf("column %q", tc.column), "reads back as 1970")
			noOutputs(t, cfg)
			if e.physical() != before {
				t.Error("the refused batch changed the target")
			}
		})
	}
}
