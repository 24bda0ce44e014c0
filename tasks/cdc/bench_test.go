package cdc

import (
	"context"
	"os"
	"strconv"
	"testing"
)

// BenchmarkDecode decodes the batch .ci/bench-cdc generates (set
// CDC_BENCH_BATCH to its path) with CDC_BENCH_WORKERS workers (default one
// per CPU).
func BenchmarkDecode(b *testing.B) {
	path := os.Getenv("CDC_BENCH_BATCH")
	if path == "" {
		b.Skip("SKIPPED: set CDC_BENCH_BATCH to a batch file (.ci/bench-cdc writes .scratch/bench/cdc/changes.ion)")
	}
	m := loadMapping(b, ordersMapping)
	workers, _ := strconv.Atoi(os.Getenv("CDC_BENCH_WORKERS")) // 0: one per CPU
	for b.Loop() {
		if _, err := decodeFile(context.Background(), path, m, workers); err != nil {
			b.Fatal(err)
		}
	}
}
