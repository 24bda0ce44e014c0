package benchrun

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestLoadAvgGivesThreeLoads(t *testing.T) {
	got := LoadAvg()
	f := strings.Fields(got)
	if len(f) != 3 {
		t.Fatalf("LoadAvg() = %q, want three load averages", got)
	}
	for _, x := range f {
		if _, err := strconv.ParseFloat(x, 64); err != nil {
			t.Errorf("LoadAvg() = %q: %q is not a number", got, x)
		}
	}
}

// TestRunMeasuresTheChildNotThisProcess: a small child's peak RSS is its
// own, even when this process holds much more memory (the rusage of a
// direct child would report this process's).
func TestRunMeasuresTheChildNotThisProcess(t *testing.T) {
	if _, err := os.Stat("/usr/bin/time"); err != nil {
		t.Skip("SKIPPED: no GNU time (/usr/bin/time); the benchmark programs need it")
	}
	ballast := make([]byte, 300<<20)
	for i := range ballast {
		ballast[i] = byte(i)
	}
	p, err := Run(context.Background(), t.TempDir(), os.Environ(), "/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	if p.MaxRSSKiB <= 0 || p.MaxRSSKiB > 100<<10 {
		t.Errorf("peak RSS of /bin/true is %d KiB with %d MiB held here, want its own few MiB", p.MaxRSSKiB, len(ballast)>>20)
	}
	if _, err := Run(context.Background(), t.TempDir(), os.Environ(), "/bin/false"); err == nil {
		t.Error("Run of /bin/false gave no error")
	}
	_ = ballast[len(ballast)-1]
}
