package cdc

import (
	"context"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDecode decodes the batch .ci/bench-cdc generates (set
// CDC_BENCH_BATCH to its path) with CDC_BENCH_WORKERS workers (default one
// per CPU); CDC_BENCH_ION=1 reads it with ion-go alone.
func BenchmarkDecode(b *testing.B) {
	path := os.Getenv("CDC_BENCH_BATCH")
	if path == "" {
		b.Skip("SKIPPED: set CDC_BENCH_BATCH to a batch file (.ci/bench-cdc writes .scratch/bench/cdc/changes.ion)")
	}
	m := loadMapping(b, ordersMapping)
	workers, _ := strconv.Atoi(os.Getenv("CDC_BENCH_WORKERS")) // 0: GOMAXPROCS
	opts := decodeOptions{workers: workers, ionOnly: os.Getenv("CDC_BENCH_ION") == "1"}
	cpu := cpuTime()
	for b.Loop() {
		if _, err := decodeFileWith(context.Background(), path, m, opts); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu)/1e6/float64(b.N), "cpu-ms/op")
}

// BenchmarkApply applies the batch .ci/bench-cdc generates (CDC_BENCH_BATCH)
// to a fresh table on the test ClickHouse, from the file to verified rows;
// each iteration applies it to a table holding the previous iteration's
// rows (a replay: every key read, none written, all verified) after the
// first.
func BenchmarkApply(b *testing.B) {
	path := os.Getenv("CDC_BENCH_BATCH")
	if path == "" {
		b.Skip("SKIPPED: set CDC_BENCH_BATCH to a batch file (.ci/bench-cdc writes .scratch/bench/cdc/changes.ion)")
	}
	e := newEnv(b, ordersMapping)
	e.setup()
	cfg := e.config(path)
	cpu := cpuTime()
	for b.Loop() {
		if _, err := testApply(context.Background(), cfg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu)/1e6/float64(b.N), "cpu-ms/op")
}
