package kafkastate

import (
	"testing"

	"github.com/changesink/changesink/internal/testenv"
)

// TestRunbookHasEveryHint: docs/runbook.md explains every error Hint knows
// in a section headed by its message, whose "What to do" is the hint the
// CLI prints, word for word: the two cannot drift apart.
func TestRunbookHasEveryHint(t *testing.T) {
	var hs []testenv.RunbookHint
	for _, h := range hints() {
		hs = append(hs, testenv.RunbookHint{Message: h.err.Error(), Text: h.text})
	}
	testenv.CheckHintsInRunbook(t, "kafka-state", hs)
}

// TestEverySentinelHasAHint: every sentinel errors.go declares has a
// remedy in the hints table, so no refusal reaches an operator without one.
func TestEverySentinelHasAHint(t *testing.T) {
	known := map[string]bool{}
	for _, h := range hints() {
		known[h.err.Error()] = true
	}
	for name, msg := range testenv.Sentinels(t, "errors.go") {
		if !known[msg] {
			t.Errorf("errors.go: %s (%q) has no hint", name, msg)
		}
	}
}
