package cdc

import (
	"context"
	"os"
	"testing"
)

// BenchmarkDecode decodes the batch .ci/bench-cdc generates (set
// CDC_BENCH_BATCH to its path) with every worker count the machine has.
func BenchmarkDecode(b *testing.B) {
	path := os.Getenv("CDC_BENCH_BATCH")
	if path == "" {
		b.Skip("SKIPPED: set CDC_BENCH_BATCH to a batch file (.ci/bench-cdc writes .scratch/bench/cdc/changes.ion)")
	}
	m := loadMapping(b, ordersMapping)
	for b.Loop() {
		if _, err := decodeFile(context.Background(), path, m, 0); err != nil {
			b.Fatal(err)
		}
	}
}
