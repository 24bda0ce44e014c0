package kafkastate

import (
	"testing"

	"github.com/changesink/changesink/internal/testenv"
)

// TestRunbookNamesEveryRefusal: the README's kafka-state runbook has a row
// whose first cell quotes the message of every sentinel errors.go
// declares, so an on-call engineer finds each error there by its first
// words.
func TestRunbookNamesEveryRefusal(t *testing.T) {
	testenv.CheckRunbook(t, "kafka-state", testenv.Sentinels(t, "errors.go"))
}
