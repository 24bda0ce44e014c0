package decode

import (
	"bytes"
	"syscall"
	"testing"
	"time"

	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/amazon-ion/ion-go/ion"

	"github.com/changesink/changesink/internal/ionwalk"
	"github.com/changesink/changesink/tasks/cdc/internal/batchfile"
)

// benchEvents is the size of the in-memory batches of the micro-benchmarks.
const benchEvents = 20000

// BenchmarkDecodeSegment decodes a trigger-shaped batch of the orders
// table held in memory as one segment on one goroutine: ionrec (the
// default) against ion-go alone, and ion-go's bare Reader walking the same
// bytes (every value read, nothing checked). Compare with benchstat; the
// events/s metric is per core.
func BenchmarkDecodeSegment(b *testing.B) {
	m := loadMapping(b, ordersMapping)
	for _, f := range forms() {
		data := encode(b, f.binary, triggerBatch(benchEvents)...)
		seg := &batchfile.Segment{Data: data, FirstLine: 1, Lines: int64(bytes.Count(data, []byte{'\n'}))}
		for _, dec := range []struct {
			name string
			new  func(*mapping.Mapping) *recordDecoder
		}{{"ionrec", newRecordDecoder}, {"ion-go", newIonDecoder}} {
			b.Run(f.name+"/"+dec.name, func(b *testing.B) {
				d := dec.new(m)
				b.SetBytes(int64(len(data)))
				cpu := cpuTime()
				for b.Loop() {
					if res := decodeSegment(d, seg, f.binary); res.err != nil || res.n != benchEvents {
						b.Fatal(res.n, res.err)
					}
				}
				reportEvents(b, cpu)
			})
		}
		b.Run(f.name+"/walk", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			cpu := cpuTime()
			for b.Loop() {
				if n, err := ionwalk.Walk(ion.NewReaderBytes(data)); err != nil || n == 0 {
					b.Fatal(n, err)
				}
			}
			reportEvents(b, cpu)
		})
	}
}

// reportEvents reports events/s of wall time and the process's CPU time
// per event since start (user and system, garbage collection included):
// on a machine shared with other work the second is the steadier one.
func reportEvents(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(benchEvents*b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(cpuTime()-start)/float64(benchEvents*b.N), "cpu-ns/event")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
