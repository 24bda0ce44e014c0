package cdc

import (
	"testing"

	"github.com/changesink/changesink/internal/testenv"
)

// TestRunbookNamesEveryError: the README's cdc runbook quotes the message
// of every sentinel change/errors.go declares (refusals and the lock's transient
// failure in its table, configuration errors in the paragraph after it),
// so an on-call engineer finds each error there by its first words.
func TestRunbookNamesEveryError(t *testing.T) {
	sentinels := testenv.Sentinels(t, "change/errors.go")
	// ErrMapping is never printed: a *MappingError prints
	// <file>:<line>:<column>: <what is wrong>, which the runbook explains.
	delete(sentinels, "ErrMapping")
	testenv.CheckRunbook(t, "cdc", sentinels)
}
