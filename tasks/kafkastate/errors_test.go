package kafkastate

import (
	"errors"
	"strings"
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

// TestOffsetPastEnd: a saved offset past the log's end is told apart from
// one below its start (issue 28): its message and hint name the causes
// that fit, not retention.
func TestOffsetPastEnd(t *testing.T) {
	tests := []struct {
		name    string
		err     *OffsetError
		pastEnd bool
	}{
		{"below the log start", &OffsetError{Topic: "t", Partition: 1, Saved: 5, LogStart: 10, End: 20}, false},
		{"past the log end", &OffsetError{Topic: "t", Partition: 1, Saved: 25, LogStart: 10, End: 20}, true},
		{"end unknown", &OffsetError{Topic: "t", Partition: 1, Saved: 25, LogStart: 10, End: -1}, false},
		{"fetched", &OffsetError{Topic: "t", Partition: 1, Saved: 25, LogStart: -1, End: -1, Fetched: true, FetchOffset: 25}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !errors.Is(tt.err, ErrOffsetOutOfRange) {
				t.Errorf("%v does not wrap ErrOffsetOutOfRange", tt.err)
			}
			if got := errors.Is(tt.err, ErrOffsetPastEnd); got != tt.pastEnd {
				t.Errorf("errors.Is(ErrOffsetPastEnd) = %v, want %v", got, tt.pastEnd)
			}
			if got := strings.HasSuffix(tt.err.Error(), ErrOffsetPastEnd.Error()); got != tt.pastEnd {
				t.Errorf("message %q: ends with %q = %v, want %v", tt.err, ErrOffsetPastEnd, got, tt.pastEnd)
			}
			if got := strings.Contains(Hint(tt.err), "retention"); got == tt.pastEnd {
				t.Errorf("hint %q names retention = %v", Hint(tt.err), got)
			}
		})
	}
}
