package ionwalk

import (
	"strings"
	"testing"

	"github.com/amazon-ion/ion-go/ion"
)

func TestWalk(t *testing.T) {
	for _, tt := range []struct {
		name, text string
		values     int
		err        bool
	}{
		{"scalars", `1 2.5e0 3.25 "s" sym true 2024-01-02T03:04:05Z {{AQ==}} null.int`, 9, false},
		{"a big int is read whole", `123456789012345678901234567890`, 1, false},
		{"containers count with what they hold", `{a:1,b:[2,3],c:(4)}`, 7, false},
		{"empty", ``, 0, false},
		{"malformed", `{a:`, 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n, err := Walk(ion.NewReader(strings.NewReader(tt.text)))
			if (err != nil) != tt.err {
				t.Fatalf("err = %v, want error %v", err, tt.err)
			}
			if !tt.err && n != tt.values {
				t.Errorf("visited %d values, want %d", n, tt.values)
			}
		})
	}
}
