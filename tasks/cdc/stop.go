package cdc

import (
	"context"
	"fmt"

	"github.com/changesink/changesink/internal/outcome"
)

// The steps of Apply and Sync, as a stopped run's message names them.
const (
	stepOpen    = "opening the slot and the targets"
	stepStream  = "reading the slot"
	stepConfirm = "confirming the slot"
	stepDecode  = "decoding the batch"
	stepConnect = "connecting to ClickHouse"
	stepLock    = "waiting for the target's lock"
	stepRead    = "reading the target"
	stepInsert  = "inserting the batch"
	stepVerify  = "verifying the batch"
	stepLedger  = "recording the batch in the ledger"
	stepRelease = "giving back the target's lock"
)

// stopState is where a run is, for the message of a run stopped there.
type stopState struct {
	cmd  string // "cdc sync"; "" is cdc apply
	step string
	sent bool // the insert was sent: the batch's rows may be in the target
}

// wrap says what a stop (a signal or Kestra's timeout cancels ctx) left:
// the step, what the target holds, and that a re-run converges; the
// error's class (transient) is kept.
func (s stopState) wrap(ctx context.Context, err error) error {
	if !outcome.Stopped(ctx, err) {
		return err
	}
	if s.cmd != "" {
		// The slot stays where the last verified flush confirmed it: a
		// re-run reads the rest again and skips what is in as replays.
		return outcome.Transient.Mark(fmt.Errorf("%s was stopped (%s) while %s; the slot is confirmed up to the last verified flush; "+
			"re-run it (a re-run converges): %w", s.cmd, outcome.StopCause(ctx), s.step, err))
	}
	held := "nothing was written"
	switch {
	case s.step == stepRelease:
		return err // its message says what the run did, and the stop
	case s.step == stepLedger:
		held = "the target holds the batch, verified; its ledger row may be missing"
	case s.sent:
		held = "the target holds none or all of the batch's rows (not yet recorded in the ledger)"
	}
	return outcome.Transient.Mark(fmt.Errorf("cdc apply was stopped (%s) while %s; %s; re-run the batch (a re-run converges): %w", outcome.StopCause(ctx), s.step, held, err))
}
