package cdc

import (
	"os"
	"testing"
)

// TestMain runs the child of TestApplyBreaksAKilledHolder or of
// TestSyncExactlyOnceUnderKills when asked to.
func TestMain(m *testing.M) {
	if os.Getenv("CDC_TEST_CHILD_HOLD") != "" {
		holdingChild()
		os.Exit(3)
	}
	if os.Getenv(envSyncChild) != "" {
		os.Exit(syncChild())
	}
	os.Exit(m.Run())
}
