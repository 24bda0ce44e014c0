package main

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"time"

	"github.com/changesink/changesink/bench/internal/benchrun"
)

// sustainedResults is what -results holds after a sustained run.
type sustainedResults struct {
	Date            string      `json:"date"`
	CPUs            int         `json:"cpus"`
	LoadBefore      string      `json:"load_before"`
	LoadAfter       string      `json:"load_after"`
	Seconds         float64     `json:"seconds"`
	Rate            int         `json:"rate_changes_per_s"`
	Period          string      `json:"period"`
	Budget          string      `json:"cdc_max_duration"`
	Changes         int64       `json:"changes"`
	Inserts         int64       `json:"inserts"`
	Updates         int64       `json:"updates"`
	Deletes         int64       `json:"deletes"`
	Transactions    int64       `json:"transactions"`
	WriterRate      float64     `json:"writer_changes_per_s"`
	WriterLateMax   float64     `json:"writer_behind_schedule_max_seconds"`
	LagP50          float64     `json:"commit_to_visible_p50_seconds"`
	LagP99          float64     `json:"commit_to_visible_p99_seconds"`
	LagMax          float64     `json:"commit_to_visible_max_seconds"`
	MaxRetained     int64       `json:"max_retained_wal_bytes"`
	MaxSlotLag      int64       `json:"max_slot_lag_bytes"`
	WALWritten      int64       `json:"server_wal_written_bytes"`
	PollErrors      int         `json:"poll_errors"`
	Executions      []execution `json:"executions"`
	SamplesCSV      string      `json:"samples_csv"`
	TransactionsCSV string      `json:"transactions_csv"`
}

func (b *bench) reportSustained(s *sustained) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.commits) == 0 {
		return errors.New("the writer committed nothing")
	}
	last := s.commits[len(s.commits)-1].at.Sub(s.start)
	r := sustainedResults{Date: time.Now().UTC().Format(time.RFC3339), CPUs: runtime.NumCPU(), LoadBefore: b.res.LoadBefore,
		LoadAfter: benchrun.LoadAvg(), Seconds: time.Since(s.start).Seconds(), Rate: b.rate, Period: b.period.String(),
		Budget: b.budget.String(), Changes: s.written.total(), Inserts: s.written.inserts, Updates: s.written.updates,
		Deletes: s.written.deletes, Transactions: s.written.transactions, WriterLateMax: s.late.Seconds(),
		MaxRetained: s.maxRetained, WALWritten: s.walWritten, PollErrors: s.pollErrors, Executions: s.executions}
	r.WriterRate = float64(r.Changes) / last.Seconds()
	var lags []float64
	for _, c := range s.commits {
		lags = append(lags, c.visible.Seconds())
	}
	sort.Float64s(lags)
	r.LagP50, r.LagP99, r.LagMax = percentile(lags, 0.50), percentile(lags, 0.99), lags[len(lags)-1]
	for _, smp := range s.samples {
		r.MaxSlotLag = max(r.MaxSlotLag, smp.lag)
	}
	base := b.results[:len(b.results)-len(".json")]
	r.SamplesCSV, r.TransactionsCSV = base+"-samples.csv", base+"-transactions.csv"
	if err := writeSamples(r.SamplesCSV, s); err != nil {
		return err
	}
	if err := writeCommits(r.TransactionsCSV, s); err != nil {
		return err
	}
	kept := "kept up"
	if r.WriterRate < 0.98*float64(b.rate) {
		kept = "DID NOT keep up"
	}
	fmt.Printf("writer: %d changes (%d inserts, %d updates, %d deletes) in %d transactions over %.1f s: %.0f changes/s of %d asked (%s; at most %.2f s behind its schedule)\n",
		r.Changes, r.Inserts, r.Updates, r.Deletes, r.Transactions, last.Seconds(), r.WriterRate, b.rate, kept, r.WriterLateMax)
	fmt.Printf("commit to visible in the live view, %d transactions: p50 %.1f s, p99 %.1f s, max %.1f s (polled every %s; %d failed polls)\n",
		len(lags), r.LagP50, r.LagP99, r.LagMax, b.poll, r.PollErrors)
	fmt.Printf("slot: retained WAL at most %.1f MB, lag (current − confirmed) at most %.1f MB; %d executions\n",
		mb(r.MaxRetained), mb(r.MaxSlotLag), len(r.Executions))
	fmt.Printf("the server wrote %.1f MB of WAL while the writer ran (%.2f MB/s, %.0f bytes a change; every database's WAL, other work on the machine included)\n",
		mb(r.WALWritten), mb(r.WALWritten)/last.Seconds(), float64(r.WALWritten)/float64(r.Changes))
	fmt.Printf("load %s\n", r.LoadAfter)
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(b.results, append(raw, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("results: %s, %s, %s\n", b.results, r.SamplesCSV, r.TransactionsCSV)
	return nil
}

// percentile is the nearest-rank p-quantile of sorted xs.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// writeSamples writes the sampler's seconds: the time since the start,
// changes written, the slot's retained WAL and lag, the age of the oldest
// commit not yet visible, and whether an execution was running.
func writeSamples(path string, s *sustained) error {
	rows := [][]string{{"seconds", "changes_written", "retained_wal_bytes", "slot_lag_bytes", "oldest_not_visible_seconds", "execution_running"}}
	for _, smp := range s.samples {
		running := "0"
		if smp.running {
			running = "1"
		}
		rows = append(rows, []string{f3(smp.at.Sub(s.start).Seconds()), strconv.FormatInt(smp.written, 10), strconv.FormatInt(smp.retained, 10),
			strconv.FormatInt(smp.lag, 10), f3(smp.oldestUnseen.Seconds()), running})
	}
	return writeCSV(path, rows)
}

// writeCommits writes each transaction's commit time (since the start),
// changes and commit-to-visible lag.
func writeCommits(path string, s *sustained) error {
	rows := [][]string{{"commit_seconds", "changes", "visible_after_seconds"}}
	for _, c := range s.commits {
		rows = append(rows, []string{f3(c.at.Sub(s.start).Seconds()), strconv.FormatInt(c.changes, 10), f3(c.visible.Seconds())})
	}
	return writeCSV(path, rows)
}

func writeCSV(path string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	if err := w.WriteAll(rows); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func f3(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }

// sustainedOutputs is what the sustained mode reads of cdc sync's outputs.
type sustainedOutputs struct {
	Changes       int64    `json:"changes"`
	Transactions  int64    `json:"transactions"`
	Ended         string   `json:"ended"`
	BehindSeconds *float64 `json:"behind_seconds"`
	LagBytes      int64    `json:"lag_bytes"`
	RetainedBytes int64    `json:"retained_wal_bytes"`
}

func parseSustainedOutputs(output []byte) (sustainedOutputs, error) {
	m := outputsLine.FindSubmatch(output)
	var out struct{ Outputs sustainedOutputs }
	if m == nil || json.Unmarshal(m[1], &out) != nil {
		return sustainedOutputs{}, fmt.Errorf("cdc sync printed no outputs:\n%s", output)
	}
	return out.Outputs, nil
}
