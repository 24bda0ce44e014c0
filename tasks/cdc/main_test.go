package cdc

import (
	"os"
	"testing"
)

// TestMain runs the child of TestApplyBreaksAKilledHolder, of
// TestStoppedHolderAfterLocking or of TestClusterExactlyOnceUnderKills
// when asked to.
func TestMain(m *testing.M) {
	if os.Getenv("CDC_TEST_CHILD_HOLD") != "" {
		holdingChild()
		os.Exit(3)
	}
	if os.Getenv(envStoppedChild) != "" {
		os.Exit(stoppedChild())
	}
	if os.Getenv(envClusterChild) != "" {
		os.Exit(clusterChild())
	}
	os.Exit(m.Run())
}
