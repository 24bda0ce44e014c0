package applier

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
)

// TestStopAtTheLedger: a stop while the ledger row is written (no hook
// reaches that step) says the batch is in and verified, the row may be
// missing, and a re-run converges; an error that is not the stop is left
// as it is.
func TestStopAtTheLedger(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	st := Stop{Step: StepLedger, Sent: true}
	err := st.Wrap(ctx, fmt.Errorf("write the ledger: %w", context.Canceled))
	testenv.WantError(t, err, outcome.Transient, context.Canceled, "stopped (a stop signal, SIGTERM or SIGINT, or the task's timeout) while "+StepLedger,
		"the target holds the batch, verified; its ledger row may be missing", "re-run the batch (a re-run converges)")
	other := errors.New("another failure")
	if got := st.Wrap(ctx, other); got != other {
		t.Errorf("wrap changed an error that is not the stop: %v", got)
	}
}
