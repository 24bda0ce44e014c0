package cdc

import (
	"os"
	"testing"
)

// TestMain runs the child of TestApplyBreaksAKilledHolder, of
// TestSyncExactlyOnceUnderKills, of TestStoppedHolderAfterLocking, of
// TestClusterExactlyOnceUnderKills or of TestSyncLoadContinuesAfterKills
// when asked to.
func TestMain(m *testing.M) {
	if os.Getenv("CDC_TEST_CHILD_HOLD") != "" {
		holdingChild()
		os.Exit(3)
	}
	if os.Getenv(envStoppedChild) != "" {
		os.Exit(stoppedChild())
	}
	if os.Getenv(envSyncChild) != "" {
		os.Exit(syncChild())
	}
	if os.Getenv(envClusterChild) != "" {
		os.Exit(clusterChild())
	}
	if os.Getenv(envLoadChild) != "" {
		os.Exit(loadChild())
	}
	os.Exit(m.Run())
}
