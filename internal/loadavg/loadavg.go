// Package loadavg reads the machine's load average, which the benchmark
// programs (.ci/bench-cdc, .ci/bench-kafka-state) print beside their
// timings: on a machine shared with other work it says how far to trust them.
package loadavg

import (
	"os"
	"strings"
)

// Read returns the first three fields of /proc/loadavg ("1.20 0.90 0.70"),
// or "unknown" when it cannot be read.
func Read() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
