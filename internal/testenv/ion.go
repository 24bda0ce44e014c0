package testenv

import (
	"errors"
	"testing"

	"github.com/amazon-ion/ion-go/ion"
)

// IonValues decodes every top-level value of an Ion stream, text or binary,
// with ion-go (the reference reader: a struct is a map[string]any, a string
// a *string), or fails the test naming the value that does not decode.
func IonValues(t testing.TB, data []byte) []any {
	t.Helper()
	dec := ion.NewDecoder(ion.NewReaderBytes(data))
	var out []any
	for {
		v, err := dec.Decode()
		if errors.Is(err, ion.ErrNoInput) {
			return out
		}
		if err != nil {
			t.Fatalf("Ion value %d: %v", len(out)+1, err)
		}
		out = append(out, v)
	}
}
