// Package formats is what TestFormatsOf reads: each string says whether it
// is an error format.
package formats

import (
	"errors"
	"fmt"
	format "fmt"
	"strings"
)

const (
	part   = "with a constant"
	folded = "folded errorf " + part
	typed  = "typed constant"
)

var errA = errors.New("errors new")

type typedError struct{ name string }

func (e *typedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "typed fprintf %d", 1)
	return fmt.Sprintf("typed %q: %w", e.name, errA) + b.String() + " (typed literal)" + typed
}

type named string

func (n named) String() string { return fmt.Sprintf("a String method") }

func use(n int) error {
	_ = fmt.Sprintf("sprintf outside an Error method")
	_ = "a literal outside an Error method"
	if n > 0 {
		return format.Errorf("aliased fmt")
	}
	if n < 0 {
		return fmt.Errorf(folded)
	}
	return fmt.Errorf("errorf %d", n)
}

func wrap(code int, format string, args ...any) error {
	return fmt.Errorf("wrapped: "+format, args...)
}

func wrapWrap(format string, args ...any) error { return wrap(1, format+" %d", append(args, 1)...) }

func useWrappers() {
	_ = wrap(1, "through a wrapper %d", 1)
	_ = wrapWrap("through a wrapper of a wrapper")
}
