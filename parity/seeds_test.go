package parity

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/changesink/changesink/internal/testenv"
)

// TestSeedCopyIsCurrent: parity/seeds is a copy of the seed flows and their
// scripts; where the original folder is beside the clone (.ci/env names it
// CHANGESINK_TEST_SEEDS_ORIGIN), the copy must be identical to it. A public
// clone has no original: the test then skips, saying so.
func TestSeedCopyIsCurrent(t *testing.T) {
	origin := os.Getenv("CHANGESINK_TEST_SEEDS_ORIGIN")
	if origin == "" {
		t.Skip("SKIPPED: no original seeds folder beside this clone (../shared/seeds); parity/seeds is used as it is")
	}
	for _, f := range testenv.SeedFiles() {
		want := testenv.ReadFile(t, filepath.Join(origin, f))
		got := testenv.ReadFile(t, filepath.Join("seeds", f))
		if !bytes.Equal(got, want) {
			t.Errorf("parity/seeds/%s differs from %s: copy the original again (cp %s parity/seeds/%s)", f, filepath.Join(origin, f), filepath.Join(origin, f), f)
		}
	}
}
