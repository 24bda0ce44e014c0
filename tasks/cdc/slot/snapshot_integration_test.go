package slot

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestSnapshotSeam: a new slot's exported snapshot and its stream meet
// exactly. A row committed before the slot was created is in the snapshot
// and not in the stream; one committed after is in the stream and not in
// the snapshot, also when read from a connection opened after it; the
// snapshot is importable from several connections until released, and not
// after; the consistent point precedes every streamed commit.
func TestSnapshotSeam(t *testing.T) {
	src := newSource(t)
	src.exec("CREATE TABLE seam (id int PRIMARY KEY, v text)", "INSERT INTO seam VALUES (1, 'before')")
	slot := slotName(t)
	pub := slot + "_pub"
	src.dropSlotAtEnd(slot)
	ctx := testCtx(t, 2*time.Minute)
	res, err := Ensure(ctx, src.pg, Setup{Slot: slot, Publication: pub, Tables: []Table{{"public", "seam"}}, ExportSnapshot: true})
	if err != nil {
		t.Fatal(err)
	}
	if !res.SlotCreated || !res.PublicationCreated || res.Snapshot == nil {
		t.Fatalf("Ensure: slot created %v, publication created %v, snapshot %v", res.SlotCreated, res.PublicationCreated, res.Snapshot)
	}
	defer res.Snapshot.Release()
	if res.Snapshot.ConsistentPoint != res.ConsistentPoint || res.ConsistentPoint == 0 {
		t.Errorf("consistent point %s, snapshot's %s", res.ConsistentPoint, res.Snapshot.ConsistentPoint)
	}
	src.exec("INSERT INTO seam VALUES (2, 'after')", "UPDATE seam SET v = 'changed after' WHERE id = 1")

	rowsUnder := func() []string {
		conn, err := pgx.Connect(ctx, src.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		tx, err := res.Snapshot.Begin(ctx, conn)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		rows, err := tx.Query(ctx, "SELECT id || '=' || v FROM seam ORDER BY id")
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	for i := range 2 { // two connections, one after the other
		if got, want := rowsUnder(), []string{"1=before"}; !slices.Equal(got, want) {
			t.Errorf("reader %d under the snapshot: %q, want %q", i+1, got, want)
		}
	}
	if got := src.query("SELECT string_agg(id || '=' || v, ',' ORDER BY id) FROM seam"); got != "1=changed after,2=after" {
		t.Errorf("outside the snapshot: %q", got)
	}

	res.Snapshot.Release()
	conn, err := pgx.Connect(ctx, src.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := res.Snapshot.Begin(ctx, conn); !errors.Is(err, ErrSnapshotReleased) {
		t.Errorf("Begin after Release: %v, want ErrSnapshotReleased", err)
	}

	st := src.start(slot, pub)
	var got []string
	for _, tx := range readTxs(t, st, 2) {
		if tx.commit.LSN <= res.ConsistentPoint {
			t.Errorf("a transaction committing at %s, not after the consistent point %s", tx.commit.LSN, res.ConsistentPoint)
		}
		got = append(got, tx.lines...)
	}
	want := []string{
		"begin", "relation public.seam [id 23 key, v 25] identity d", "insert public.seam (t:2 t:after)", "commit",
		"begin", "update public.seam (t:1 t:changed after)", "commit",
	}
	if !slices.Equal(got, want) {
		t.Errorf("stream:\n\t%q\nwant\n\t%q", got, want)
	}
}
