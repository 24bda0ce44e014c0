package cdc

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/internal/iongen"
)

// Situations real Debezium batches put a target in (a snapshot overlapping
// the stream, a source restored, a key swapped, a TRUNCATE): each ends with
// the right rows, or with a refusal that changed nothing.

// TestContradictions: an event whose operation and delete marker disagree
// is refused before anything is written.
func TestContradictions(t *testing.T) {
	src := func(op string, lsn int64) iongen.Struct {
		return iongen.Metadata(op, iongen.Source("shop", "public", "orders", lsn, 700, "false"))
	}
	row := orderRow(1, int64(10), int64(500), "paid")
	noMarker := append(append(iongen.Struct{}, row...), iongen.Field{Name: "metadata", Value: src("DELETE", 102)})
	for _, tc := range []struct {
		name  string
		event any
		want  string
	}{
		{"delete with deleted false", iongen.Event(row, false, src("DELETE", 102)), `metadata.operation is DELETE but "deleted" is not true`},
		{"delete without deleted", noMarker, `metadata.operation is DELETE but "deleted" is not true`},
		{"create with deleted true", iongen.Event(row, true, src("CREATE", 102)), `metadata.operation is CREATE but "deleted" is true`},
		{"update with deleted true", iongen.Event(row, true, src("UPDATE", 102)), `metadata.operation is UPDATE but "deleted" is true`},
		{"read with deleted true", iongen.Event(row, true, src("READ", 102)), `metadata.operation is READ but "deleted" is true`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, ordersMapping)
			e.setup()
			if _, _, err := e.apply(false, orderEvent(1, int64(10), int64(500), "new", int64(100), false)); err != nil {
				t.Fatal(err)
			}
			before := e.physical()
			_, cfg, err := e.apply(true, orderEvent(2, int64(20), int64(1), "fine", int64(101), false), tc.event)
			testenv.WantError(t, err, outcome.Refused, ErrContradiction)
			if !strings.HasPrefix(err.Error(), `record 2 (key id=1, LSN 102), column "metadata.operation": event contradicts itself: `) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("message %v", err)
			}
			noOutputs(t, cfg)
			if after := e.physical(); after != before {
				t.Errorf("the refused batch changed the target:\n%s", after)
			}
		})
	}
}

// TestSequenceContradiction: a sequence naming another LSN than the
// event's is refused (Debezium writes [lsn_commit, lsn]).
func TestSequenceContradiction(t *testing.T) {
	m := loadMapping(t, ordersMapping)
	ev := withSource(orderEvent(1, int64(1), int64(1), "x", int64(950), false), "sequence", `["900","951"]`)
	_, err := decodeBytes(t, m, encode(t, true, ev), 1)
	if !errors.Is(err, ErrContradiction) || !strings.Contains(err.Error(), `metadata.source.sequence ["900","951"] names LSN 951, but metadata.source.lsn is 950`) {
		t.Fatalf("err = %v", err)
	}
}

// TestInsertIsOnePart: a batch's rows go in one INSERT block, which
// ClickHouse writes as one part of a table without PARTITION BY: a run cut
// during the insert leaves none of them or all. The batch is larger than
// the 100,000-row blocks used before.
func TestInsertIsOnePart(t *testing.T) {
	e := newEnv(t, ordersMapping)
	e.setup()
	const n = 120_000
	evs := make([]any, n)
	for i := range evs {
		evs[i] = orderEvent(int64(i), int64(i), int64(i), "x", int64(1000+i), false)
	}
	res, _, err := e.apply(true, evs...)
	if err != nil {
		t.Fatal(err)
	}
	if res.Pending != n {
		t.Fatalf("outputs %v", res.Outputs())
	}
	if got := e.query("SELECT count(), sum(rows) FROM system.parts WHERE database = ? AND table = 'orders_cdc' AND active", e.db); got[0] != fmt.Sprintf("1\t%d", n) {
		t.Errorf("parts (count, rows) %v, want one part of %d rows", got, n)
	}
	if got := e.query("SELECT partition_key FROM system.tables WHERE database = ? AND name = 'orders_cdc'", e.db); got[0] != "" {
		t.Errorf("setup made a partitioned table: %v", got)
	}
}
