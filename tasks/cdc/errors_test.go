package cdc

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
	testenv.CheckHintsInRunbook(t, "cdc", hs)
}

// TestEverySentinelHasAHint: every sentinel the layers declare (change,
// target) has a remedy in the hints table, so no error reaches an
// operator without one.
func TestEverySentinelHasAHint(t *testing.T) {
	known := map[string]bool{}
	for _, h := range hints() {
		known[h.err.Error()] = true
	}
	for _, file := range []string{"change/errors.go", "target/errors.go", "mapping/errors.go"} {
		for name, msg := range testenv.Sentinels(t, file) {
			if !known[msg] {
				t.Errorf("%s: %s (%q) has no hint", file, name, msg)
			}
		}
	}
}
