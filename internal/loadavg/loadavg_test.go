package loadavg

import (
	"strconv"
	"strings"
	"testing"
)

func TestReadGivesThreeLoads(t *testing.T) {
	got := Read()
	f := strings.Fields(got)
	if len(f) != 3 {
		t.Fatalf("Read() = %q, want three load averages", got)
	}
	for _, x := range f {
		if _, err := strconv.ParseFloat(x, 64); err != nil {
			t.Errorf("Read() = %q: %q is not a number", got, x)
		}
	}
}
