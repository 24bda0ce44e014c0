package target

import (
	"context"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
	"github.com/changesink/changesink/tasks/cdc/change"
)

// TestSyncLedger: the sync ledger is made once (Ensure is idempotent),
// numbers each slot's rows on its own, returns a slot's latest row, and a
// table of that name that is not the ledger is refused.
//
//changesink:per-server
func TestSyncLedger(t *testing.T) {
	url := testenv.ClickHouseURL(t)
	db, _ := testenv.CreateClickHouseDatabase(t, url, "cdc_sync_")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Connect(ctx, ClickHouse{URL: url, Timeout: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := s.SyncLedger(db)
	for range 2 {
		if err := l.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if last, err := l.Last(ctx, "a"); err != nil || last != nil {
		t.Fatalf("an empty ledger: %+v, %v", last, err)
	}
	var prevA *SyncEntry
	for i, through := range []uint64{100, 250} {
		e := &SyncEntry{Slot: "a", Holder: "h", SystemID: "7350", SourceDB: "shop", Through: through, Transactions: 2, Changes: 5, Tables: `{"public.orders":5}`}
		if err := l.Append(ctx, prevA, e, Fence{}); err != nil {
			t.Fatal(err)
		}
		if e.Seq != uint64(i+1) {
			t.Errorf("seq %d, want %d", e.Seq, i+1)
		}
		prevA = e
	}
	if err := l.Append(ctx, nil, &SyncEntry{Slot: "b", Through: 7}, Fence{}); err != nil {
		t.Fatal(err)
	}
	last, err := l.Last(ctx, "a")
	if err != nil || last == nil || last.Seq != 2 || last.Through != 250 || last.SystemID != "7350" || last.SourceDB != "shop" ||
		last.Changes != 5 || last.Tables != `{"public.orders":5}` || last.AppliedAt.IsZero() {
		t.Fatalf("last of slot a: %+v, %v", last, err)
	}
	if last, err := l.Last(ctx, "b"); err != nil || last == nil || last.Seq != 1 || last.Through != 7 {
		t.Fatalf("last of slot b: %+v, %v", last, err)
	}

	// Fenced by a lock: written while the lock holds the holder's row,
	// not written (silently) under another holder's lock, refused when the
	// lock is gone.
	lock := db + ".lk"
	if err := s.exec(ctx, lockCreateSQL(lock, "me", "host", 1)); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(ctx, prevA, &SyncEntry{Slot: "a", Through: 300}, Fence{lock: lock, holder: "me"}); err != nil {
		t.Fatal(err)
	}
	if last, err := l.Last(ctx, "a"); err != nil || last.Seq != 3 || last.Through != 300 {
		t.Fatalf("after a fenced append: %+v, %v", last, err)
	}
	prevA = &SyncEntry{Seq: 3}
	if err := l.Append(ctx, prevA, &SyncEntry{Slot: "a", Through: 400}, Fence{lock: lock, holder: "other"}); err != nil {
		t.Fatal(err)
	}
	if last, err := l.Last(ctx, "a"); err != nil || last.Seq != 3 {
		t.Fatalf("another holder's lock let a row through: %+v, %v", last, err)
	}
	if err := s.exec(ctx, "DROP TABLE "+lock); err != nil {
		t.Fatal(err)
	}
	err = l.Append(ctx, prevA, &SyncEntry{Slot: "a", Through: 400}, Fence{lock: lock, holder: "me"})
	testenv.WantError(t, err, outcome.Transient, change.ErrTargetLocked, "the lock "+lock+" is gone", "the sync ledger row of seq 4 was not written")

	other, _ := testenv.CreateClickHouseDatabase(t, url, "cdc_sync_")
	if err := s.exec(ctx, "CREATE TABLE "+other+"._changesink_sync (slot String, seq UInt32) ENGINE = Memory"); err != nil {
		t.Fatal(err)
	}
	err = s.SyncLedger(other).Ensure(ctx)
	testenv.WantError(t, err, outcome.Config, change.ErrTargetMismatch, "the sync ledger "+other+"._changesink_sync has no column seq UInt64")
}
