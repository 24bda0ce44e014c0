package applier

import (
	"context"
	"fmt"

	"github.com/changesink/changesink/internal/outcome"
)

// The steps of cdc apply and cdc sync, as a stopped run's message names
// them.
const (
	StepOpen    = "opening the slot and the targets"
	StepStream  = "reading the slot"
	StepConfirm = "confirming the slot"
	StepDecode  = "decoding the batch"
	StepConnect = "connecting to ClickHouse"
	StepLock    = "waiting for the target's lock"
	StepRead    = "reading the target"
	StepInsert  = "inserting the batch"
	StepVerify  = "verifying the batch"
	StepLedger  = "recording the batch in the ledger"
	StepRelease = "giving back the target's lock"
)

// Stop is where a run is, for the message of a run stopped there.
type Stop struct {
	// Cmd is the command: "cdc sync" or "cdc setup"; "" is cdc apply.
	Cmd string
	// Step is the step the run is in (StepX).
	Step string
	// Sent: the insert was sent, the batch's rows may be in the target.
	Sent bool
}

// Wrap says what a stop (a signal or Kestra's timeout cancels ctx) left:
// the step, what the target holds, and that a re-run converges; the
// error's class (transient) is kept. Any other error is returned as it is.
func (s Stop) Wrap(ctx context.Context, err error) error {
	if !outcome.Stopped(ctx, err) {
		return err
	}
	if s.Cmd != "" {
		// The slot stays where the last verified flush confirmed it: a
		// re-run reads the rest again and skips what is in as replays.
		return outcome.Transient.Mark(fmt.Errorf("%s was stopped (%s) while %s; the slot is confirmed up to the last verified flush; "+
			"re-run it (a re-run converges): %w", s.Cmd, outcome.StopCause(ctx), s.Step, err))
	}
	held := "nothing was written"
	switch {
	case s.Step == StepRelease:
		return err // its message says what the run did, and the stop
	case s.Step == StepLedger:
		held = "the target holds the batch, verified; its ledger row may be missing"
	case s.Sent:
		held = "the target holds none or all of the batch's rows (not yet recorded in the ledger)"
	}
	return outcome.Transient.Mark(fmt.Errorf("cdc apply was stopped (%s) while %s; %s; re-run the batch (a re-run converges): %w", outcome.StopCause(ctx), s.Step, held, err))
}
