// Package testhook is the one seam through which the tests of the cdc
// commands stop a run at a chosen step (a crash after the insert, a server
// that goes away mid-batch, a holder frozen before its write) or shrink its
// sizes. Each command's Env holds a Hooks, unexported where the command is
// called from outside tasks/cdc; the code of the step calls it. A real run's
// Hooks is zero: every hook is nil and every size the default. Being
// internal, nothing outside tasks/cdc can name it.
package testhook

import (
	"context"

	"github.com/changesink/changesink/tasks/cdc/target"
)

// Hooks are the points a test can stop a run at, and the sizes it can
// shrink; nil and zero leave the run as it is.
type Hooks struct {
	// Locked runs once the target's lock is held (every target's, in
	// cdc sync): a run killed while holding it.
	Locked func(context.Context) error
	// BeforeInsert and AfterInsert run around a batch's insert.
	BeforeInsert func(context.Context) error
	AfterInsert  func(context.Context) error
	// Recorded runs once the ledger row is written, the lock not yet given
	// back (cdc apply), or the sync ledger's row, the slot not yet
	// confirmed (cdc sync).
	Recorded func(context.Context) error
	// Checked runs after each lock check that guards a write, before the
	// write ("insert", "ledger"): a holder frozen there.
	Checked func(ctx context.Context, write string) error
	// LockTiming overrides target.DefaultLockTiming (a stale lock broken
	// in seconds).
	LockTiming target.LockTiming
	// LoadChunkRows and LoadBlockRows override the initial load's chunk
	// and block sizes (many chunks and blocks from a small table).
	LoadChunkRows, LoadBlockRows int
	// Loading runs when a load's snapshot is taken, before its first
	// chunk is read (DDL during a load).
	Loading func(context.Context) error
}

// Run calls the hook f, when set.
func Run(ctx context.Context, f func(context.Context) error) error {
	if f == nil {
		return nil
	}
	return f(ctx)
}

// Timing is the lock timing of the run: LockTiming, or
// target.DefaultLockTiming when unset.
func (h Hooks) Timing() target.LockTiming {
	if h.LockTiming == (target.LockTiming{}) {
		return target.DefaultLockTiming
	}
	return h.LockTiming
}
