package applier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/changesink/changesink/internal/iongen"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/decode"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/merge"
	"github.com/changesink/changesink/tasks/cdc/target"
)

// pkswap is the target of the real Debezium scenario pkswap (the table
// public.swap (id, v)), set up as cdc setup makes it in a ClickHouse
// database of the test's own.
type pkswap struct {
	t    *testing.T
	m    *mapping.Mapping
	tbl  *target.Table
	conn driver.Conn
	db   string
}

func newPKSwap(t *testing.T) *pkswap {
	t.Helper()
	ctx := context.Background()
	url := testenv.ClickHouseURL(t)
	e := &pkswap{t: t, conn: testenv.OpenClickHouse(t, url)}
	e.db, _ = testenv.CreateClickHouseDatabase(t, url, "cdc_")
	m, err := mapping.Load("../testdata/debezium/pkswap/mapping.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m.Target.Database, m.Target.CreateDatabase = e.db, false
	e.m = m
	tg, err := target.Connect(ctx, target.ClickHouse{URL: url, Timeout: time.Minute}, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tg.Close)
	if _, err := tg.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	if e.tbl, err = tg.CheckSchema(ctx); err != nil {
		t.Fatal(err)
	}
	return e
}

// swapEvent is an event of the pkswap scenario's table public.swap (id, v)
// in transaction tx.
func swapEvent(op string, id int64, v string, lsn int64, tx int64) iongen.Struct {
	return iongen.Event(iongen.Struct{{"id", id}, {"v", v}}, op == "DELETE", iongen.Metadata(op, iongen.Source("cs_dbz_pkswap", "public", "swap", lsn, tx, "false")))
}

// file writes events as a binary Ion batch and returns its path.
func (e *pkswap) file(events ...any) string {
	e.t.Helper()
	var b bytes.Buffer
	w := iongen.NewWriter(&b, true)
	for _, ev := range events {
		if err := w.Write(ev); err != nil {
			e.t.Fatal(err)
		}
	}
	return testenv.WriteFile(e.t, filepath.Join(e.t.TempDir(), "changes.ion"), b.Bytes(), 0o644)
}

// batch decodes events into a batch, as cdc apply decodes its file.
func (e *pkswap) batch(events ...any) *merge.Batch {
	e.t.Helper()
	b := merge.NewBatch(e.m)
	if err := decode.Scan(context.Background(), e.file(events...), e.m, decode.Options{Workers: 1}, b.Reset, b.Add); err != nil {
		e.t.Fatal(err)
	}
	return b
}

// fileOrigin is the batch file path (Origin), never decoded again.
type fileOrigin struct {
	path string
	m    *mapping.Mapping
}

func (f fileOrigin) Redecode(context.Context, *target.Table, []change.OpenKey, bool) (*merge.Batch, error) {
	return nil, errors.New("not decoded again")
}

func (f fileOrigin) Source() change.SourceID { return decode.SourceOf(f.path, f.m) }

// seed fills the target with the given rows at LSN 100 (a snapshot),
// applied by a Table under the target's lock.
func (e *pkswap) seed(rows map[int64]string) {
	e.t.Helper()
	ctx := context.Background()
	var evs []any
	for id := int64(1); id <= 9; id++ {
		if v, ok := rows[id]; ok {
			evs = append(evs, iongen.Event(iongen.Struct{{"id", id}, {"v", v}}, false,
				iongen.Metadata("READ", iongen.Source("cs_dbz_pkswap", "public", "swap", int64(100), 1, "true"))))
		}
	}
	path := e.file(evs...)
	b := merge.NewBatch(e.m)
	if err := decode.Scan(ctx, path, e.m, decode.Options{Workers: 1}, b.Reset, b.Add); err != nil {
		e.t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	lk, err := e.tbl.Lock(ctx, target.DefaultLockTiming, log)
	if err != nil {
		e.t.Fatal(err)
	}
	defer GiveBack(ctx, lk)
	tr := &Table{M: e.m, Tbl: e.tbl, Lock: lk, Origin: fileOrigin{path: path, m: e.m}, Stop: &Stop{}, Res: &Counts{}, Log: log}
	if err := tr.Apply(ctx, b); err != nil {
		e.t.Fatal(err)
	}
}

// refusedAt checks err is a refusal (exit 1) wrapping sentinel, whose
// RecordError is want, message included.
func refusedAt(t *testing.T, err, sentinel error, want *change.RecordError) {
	t.Helper()
	testenv.WantError(t, err, outcome.Refused, sentinel)
	var re *change.RecordError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v, not a *RecordError", err)
	}
	if re.Record != want.Record || re.Key != want.Key || re.LSN != want.LSN || re.Version != want.Version || re.Column != want.Column || re.Other != 0 {
		t.Errorf("located at record %d key %q LSN %d version %d column %q other %d, want record %d key %q LSN %d version %d column %q",
			re.Record, re.Key, re.LSN, re.Version, re.Column, re.Other, want.Record, want.Key, want.LSN, want.Version, want.Column)
	}
	if got, w := err.Error(), want.Error(); got != w {
		t.Errorf("message\n%s\nwant\n%s", got, w)
	}
}

// TestKeyChangeTargetRowVanished: a batch that ends inside transaction 9
// after a CREATE of key 7, which the target holds live, carries the key to
// the next batch with the hash of the target's row, read again for it. If
// that row is gone by then (another writer: nothing else writes the target
// between the two reads, which Apply makes under its lock), the batch is
// refused. Apply has no seam between the reads, so the test runs the
// check itself on the reads of a real target and empties the table
// between them.
func TestKeyChangeTargetRowVanished(t *testing.T) {
	ctx := context.Background()
	e := newPKSwap(t)
	e.seed(map[int64]string{7: "seven"})
	b := e.batch(swapEvent("CREATE", 7, "again", 1000, 9))
	tbl := e.tbl
	current, err := tbl.Current(ctx, b.Sorted())
	if err != nil {
		t.Fatal(err)
	}
	// With the row there, key 7 is carried (as Apply would), with the sum
	// of its image v = 'seven' (stable: the ledger carries it from one
	// batch to the next).
	open, err := keyChangesOf(ctx, tbl, b, current)
	if err != nil || len(open) != 1 || open[0].Shown != "id=7" || open[0].Tx != 9 ||
		!slices.Equal(open[0].Others, []string{"cc1ee5fd073e3cff"}) {
		t.Fatalf("with the target's row: open %+v, err %v", open, err)
	}
	if err := e.conn.Exec(ctx, "TRUNCATE TABLE "+mapping.Qualified(e.db, e.m.Target.Table)); err != nil {
		t.Fatal(err)
	}
	_, err = keyChangesOf(ctx, tbl, b, current)
	refusedAt(t, err, change.ErrKeyChange, &change.RecordError{Record: 1, Offset: -1, Key: "id=7", LSN: 1000,
		Err: fmt.Errorf("%w: key id=7: the target's row of this key vanished while the batch ran (another writer?)", change.ErrKeyChange)})
	if !strings.Contains(err.Error(), "record 1 (key id=7, LSN 1000)") {
		t.Errorf("message %v", err)
	}
}
