package testenv

import (
	"testing"
)

func TestLookup(t *testing.T) {
	t.Setenv("CHANGESINK_TESTENV_A", "a")
	got := Lookup(t, "CHANGESINK_TESTENV_A")
	if got["CHANGESINK_TESTENV_A"] != "a" {
		t.Fatalf("Lookup = %v", got)
	}
}

func TestMissingSkipsOrFails(t *testing.T) {
	for _, strict := range []bool{false, true} {
		rec := &recorder{}
		t.Setenv(RequireServices, map[bool]string{false: "", true: "1"}[strict])
		func() {
			defer func() { _ = recover() }() // recorder panics to stop like Skip/Fatal do
			Lookup(rec, "CHANGESINK_TESTENV_UNSET_X")
		}()
		if rec.skipped == strict || rec.failed != strict {
			t.Errorf("strict=%v: skipped=%v failed=%v", strict, rec.skipped, rec.failed)
		}
	}
}

// recorder is a testing.TB that records Skip and Fatal instead of acting.
type recorder struct {
	testing.TB
	skipped, failed bool
}

func (r *recorder) Helper()           {}
func (r *recorder) Skip(args ...any)  { r.skipped = true; panic("skip") }
func (r *recorder) Fatal(args ...any) { r.failed = true; panic("fatal") }
