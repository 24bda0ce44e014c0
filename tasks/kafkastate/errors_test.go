package kafkastate

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/changesink/changesink/internal/testenv"
)

// TestRunbookNamesEveryRefusal: the README's kafka-state runbook has a row
// whose first cell quotes the message of every sentinel errors.go
// declares, so an on-call engineer finds each error there by its first
// words.
func TestRunbookNamesEveryRefusal(t *testing.T) {
	runbook := testenv.RunbookMessages(t, "kafka-state")
	sentinels := testenv.Sentinels(t, "errors.go")
	t.Logf("%d sentinels in errors.go", len(sentinels))
	for _, name := range slices.Sorted(maps.Keys(sentinels)) {
		if !strings.Contains(runbook, "`"+sentinels[name]+"`") {
			t.Errorf("the README's kafka-state runbook has no row for %s (%q)", name, sentinels[name])
		}
	}
}
