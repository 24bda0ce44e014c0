package testenv

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/changesink/changesink/internal/outcome"
)

// WantError fails t and stops the test (t.FailNow) unless err is an error
// of class kind (outcome.Classify) that wraps is (errors.Is; a nil is asks
// for no sentinel) and whose text contains every one of says. Its one
// failure message gives the error's full text and class and every way it
// differs from what was wanted.
func WantError(t testing.TB, err error, kind outcome.Kind, is error, says ...string) {
	t.Helper()
	if !CheckError(t, err, kind, is, says...) {
		t.FailNow()
	}
}

// CheckError is WantError for a test that goes on after a mismatch: it
// reports the mismatches with t.Errorf and returns whether there were none.
// WantError(t, err, kind, is) then CheckError(t, err, kind, is, says...)
// stops on a wrong error but only reports a message lacking some of says,
// so that the test still checks what a failed run must not have changed.
func CheckError(t testing.TB, err error, kind outcome.Kind, is error, says ...string) bool {
	t.Helper()
	return CheckHinted(t, err, nil, kind, is, says...)
}

// WantHinted is WantError for a task whose remedies live in a hints table:
// says may be found in the error's text or in hint(err), the remedy the
// CLI prints apart.
func WantHinted(t testing.TB, err error, hint func(error) string, kind outcome.Kind, is error, says ...string) {
	t.Helper()
	if !CheckHinted(t, err, hint, kind, is, says...) {
		t.FailNow()
	}
}

// CheckHinted is WantHinted for a test that goes on after a mismatch.
func CheckHinted(t testing.TB, err error, hint func(error) string, kind outcome.Kind, is error, says ...string) bool {
	t.Helper()
	var miss []string
	got := outcome.Classify(err)
	if err == nil {
		miss = append(miss, "there is no error")
	} else if got != kind {
		miss = append(miss, fmt.Sprintf("class is %v", got))
	}
	if is != nil && !errors.Is(err, is) {
		miss = append(miss, fmt.Sprintf("does not wrap %q", is))
	}
	text := ""
	if err != nil {
		text = err.Error()
		if hint != nil {
			text += "\nhint: " + hint(err)
		}
	}
	for _, s := range says {
		if !strings.Contains(text, s) {
			miss = append(miss, fmt.Sprintf("does not say %q", s))
		}
	}
	if len(miss) == 0 {
		return true
	}
	want := "class " + kind.String()
	if is != nil {
		want += fmt.Sprintf(", wrapping %q", is)
	}
	if len(says) > 0 {
		want += fmt.Sprintf(", saying %q", says)
	}
	shown := text
	if err == nil {
		shown = "<nil>"
	}
	t.Errorf("err = %s (class %v)\nwant %s\nbut: %s", shown, got, want, strings.Join(miss, "; "))
	return false
}
