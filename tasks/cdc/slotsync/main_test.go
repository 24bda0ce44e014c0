package slotsync

import (
	"os"
	"testing"
)

// TestMain runs the child of TestSyncExactlyOnceUnderKills or of
// TestSyncLoadContinuesAfterKills when asked to.
func TestMain(m *testing.M) {
	if os.Getenv(envSyncChild) != "" {
		os.Exit(syncChild())
	}
	if os.Getenv(envLoadChild) != "" {
		os.Exit(loadChild())
	}
	os.Exit(m.Run())
}
