package cdc

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/changesink/changesink/internal/testenv"
)

// TestRunbookNamesEveryError: the README's cdc runbook quotes the message
// of every sentinel errors.go declares (refusals and the lock's transient
// failure in its table, configuration errors in the paragraph after it),
// so an on-call engineer finds each error there by its first words.
func TestRunbookNamesEveryError(t *testing.T) {
	runbook := testenv.RunbookMessages(t, "cdc")
	sentinels := testenv.Sentinels(t, "errors.go")
	t.Logf("%d sentinels in errors.go", len(sentinels))
	// ErrMapping is never printed: a *MappingError prints
	// <file>:<line>:<column>: <what is wrong>, which the runbook explains.
	delete(sentinels, "ErrMapping")
	for _, name := range slices.Sorted(maps.Keys(sentinels)) {
		// The message's first words: ErrToast's goes on with its remedy.
		words, _, _ := strings.Cut(sentinels[name], " (")
		if !strings.Contains(runbook, "`"+words+"`") {
			t.Errorf("the README's cdc runbook has no row for %s (%q)", name, sentinels[name])
		}
	}
}
