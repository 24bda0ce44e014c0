package testenv

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/changesink/changesink/internal/outcome"
)

// failRecorder is a testing.TB that records Errorf, Fatalf and FailNow
// instead of acting, so a test can see how a helper fails.
type failRecorder struct {
	testing.TB
	errors         []string
	fatal, stopped bool
	helperCalls    int
}

func (r *failRecorder) Helper() { r.helperCalls++ }
func (r *failRecorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *failRecorder) Fatalf(format string, args ...any) {
	r.fatal = true
	r.Errorf(format, args...)
}
func (r *failRecorder) FailNow() { r.stopped = true }

func TestWantError(t *testing.T) {
	errSentinel := errors.New("the sentinel")
	errOther := errors.New("another sentinel")
	refused := outcome.Refused.Mark(fmt.Errorf("record 3 (key id=7): %w: rebuild the target", errSentinel))
	tests := []struct {
		name string
		err  error
		kind outcome.Kind
		is   error
		says []string
		// the lines the failure must state; none: err is what was wanted
		report []string
	}{
		{name: "all match", err: refused, kind: outcome.Refused, is: errSentinel, says: []string{"key id=7", "rebuild the target"}},
		{name: "no sentinel asked", err: refused, kind: outcome.Refused, says: []string{"record 3"}},
		{name: "class only", err: refused, kind: outcome.Refused},
		{name: "unmarked error is internal", err: errSentinel, kind: outcome.Internal, is: errSentinel},
		{name: "nil error", err: nil, kind: outcome.Refused, is: errSentinel, says: []string{"key id=7"},
			report: []string{"err = <nil> (class ok)", "there is no error", `does not wrap "the sentinel"`, `does not say "key id=7"`}},
		{name: "nil error, nothing but a class", err: nil, kind: outcome.Config,
			report: []string{"err = <nil> (class ok)", "want class config", "there is no error"}},
		{name: "wrong class", err: refused, kind: outcome.Config, is: errSentinel,
			report: []string{"err = record 3 (key id=7): the sentinel: rebuild the target (class refused)", "want class config", "but: class is refused"}},
		{name: "wrong sentinel", err: refused, kind: outcome.Refused, is: errOther,
			report: []string{"(class refused)", `want class refused, wrapping "another sentinel"`, `but: does not wrap "another sentinel"`}},
		{name: "a missing substring", err: refused, kind: outcome.Refused, is: errSentinel, says: []string{"key id=7", "LSN 5"},
			report: []string{`saying ["key id=7" "LSN 5"]`, `but: does not say "LSN 5"`}},
		{name: "every part wrong", err: refused, kind: outcome.Transient, is: errOther, says: []string{"LSN 5", "key id=8"},
			report: []string{"err = record 3 (key id=7): the sentinel: rebuild the target (class refused)",
				`but: class is refused; does not wrap "another sentinel"; does not say "LSN 5"; does not say "key id=8"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, fatal := range []bool{true, false} {
				rec := &failRecorder{TB: t}
				var ok bool
				if fatal {
					WantError(rec, tt.err, tt.kind, tt.is, tt.says...)
					ok = len(rec.errors) == 0
				} else {
					ok = CheckError(rec, tt.err, tt.kind, tt.is, tt.says...)
				}
				if rec.helperCalls == 0 {
					t.Errorf("fatal=%v: Helper not called", fatal)
				}
				if rec.fatal {
					t.Errorf("fatal=%v: Fatalf called; the report goes through Errorf", fatal)
				}
				if tt.report == nil {
					if !ok || rec.stopped || len(rec.errors) != 0 {
						t.Errorf("fatal=%v: ok=%v stopped=%v errors %q, want a pass", fatal, ok, rec.stopped, rec.errors)
					}
					continue
				}
				if ok || len(rec.errors) != 1 || rec.stopped != fatal {
					t.Fatalf("fatal=%v: ok=%v stopped=%v errors %q, want one report and stopped=%v", fatal, ok, rec.stopped, rec.errors, fatal)
				}
				for _, line := range tt.report {
					if !strings.Contains(rec.errors[0], line) {
						t.Errorf("fatal=%v: the report does not say %q:\n%s", fatal, line, rec.errors[0])
					}
				}
			}
		})
	}
}
