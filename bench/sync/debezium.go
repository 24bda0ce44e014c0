package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/changesink/changesink/bench/internal/benchrun"
)

// debezium is the Debezium run: harness/debezium-bench's BenchMain on a
// copy of the first sync slot.
type debezium struct {
	Process timing `json:"process"`
	// Records is how many change records the engine handed over.
	Records int64 `json:"records"`
	// EngineSeconds is from the engine's start to the last record;
	// FirstSeconds from its start to the first record.
	EngineSeconds float64 `json:"engine_seconds"`
	FirstSeconds  float64 `json:"first_record_seconds"`
}

var benchLine = regexp.MustCompile(`(?m)^bench-debezium: (\{.*\})$`)

// runDebezium streams the changes with Debezium's embedded engine from a
// copy of the first sync slot (snapshot mode no_data: the stream alone) and
// counts the records, converting none.
func (b *bench) runDebezium(ctx context.Context) error {
	s := b.name + "_dbz" // copied from the first sync slot before that sync
	u, err := url.Parse(b.dsn)
	if err != nil {
		return err
	}
	pw, _ := u.User.Password()
	dir := b.runDir(0) + "-debezium"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	env := append(os.Environ(), "BENCH_PG_HOST="+u.Hostname(), "BENCH_PG_PORT="+u.Port(), "BENCH_PG_DB="+b.name,
		"BENCH_PG_USER="+u.User.Username(), "BENCH_PG_PASSWORD="+pw, "BENCH_SLOT="+s, "BENCH_PUBLICATION="+b.name,
		"BENCH_TABLES="+strings.Join(qualified(), ","), fmt.Sprintf("BENCH_RECORDS=%d", b.written.total()), "BENCH_DIR="+dir)
	p, err := benchrun.Run(ctx, dir, env, b.java, "-Xmx1g", "-XX:+UseParallelGC", "-cp", b.debezium,
		"io.changesink.harness.debeziumbench.BenchMain")
	if err != nil {
		return fmt.Errorf("debezium: %w", err)
	}
	m := benchLine.FindSubmatch(p.Output)
	var d debezium
	if m == nil || json.Unmarshal(m[1], &d) != nil {
		return fmt.Errorf("debezium printed no result:\n%s", p.Output)
	}
	if d.Records != b.written.total() {
		return fmt.Errorf("debezium handed over %d records, want %d", d.Records, b.written.total())
	}
	d.Process = measured(p)
	b.res.Debezium = &d
	fmt.Printf("  debezium               %7.3f s %9.0f changes/s  (engine start to last record; first record after %.3f s; "+
		"the process %.3f s, CPU %.2f s, peak RSS %.0f MB)\n", d.EngineSeconds, float64(d.Records)/d.EngineSeconds, d.FirstSeconds,
		d.Process.Seconds, d.Process.CPU, d.Process.RSSMB)
	return benchrun.ExecSQL(ctx, b.dsn, fmt.Sprintf("SELECT pg_drop_replication_slot('%s')", s))
}

func qualified() []string {
	var out []string
	for _, t := range tables {
		out = append(out, "public."+t.name)
	}
	return out
}
