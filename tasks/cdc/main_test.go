package cdc

import (
	"os"
	"testing"
)

// TestMain runs the child of TestApplyBreaksAKilledHolder when asked to.
func TestMain(m *testing.M) {
	if os.Getenv("CDC_TEST_CHILD_HOLD") != "" {
		holdingChild()
		os.Exit(3)
	}
	os.Exit(m.Run())
}
