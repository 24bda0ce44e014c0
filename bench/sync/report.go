package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/changesink/changesink/bench/internal/benchrun"
)

// results is what -results holds.
type results struct {
	Date         string    `json:"date"`
	CPUs         int       `json:"cpus"`
	LoadBefore   string    `json:"load_before"`
	LoadAfter    string    `json:"load_after"`
	Changes      int64     `json:"changes"`
	Inserts      int64     `json:"inserts"`
	Updates      int64     `json:"updates"`
	Deletes      int64     `json:"deletes"`
	Transactions int64     `json:"transactions"`
	Tables       int       `json:"tables"`
	Recvlogical  []timing  `json:"pg_recvlogical"`
	Sync         []timing  `json:"sync"`
	SyncDuration []float64 `json:"sync_duration_metric_seconds"`
	RawInsert    []timing  `json:"raw_insert"`
	Compare      []timing  `json:"compare_sync,omitempty"`
	Debezium     *debezium `json:"debezium,omitempty"`
	// Rates (changes/s) of the medians, and the ratios.
	RecvRate       float64 `json:"pg_recvlogical_changes_per_s"`
	SyncRate       float64 `json:"sync_changes_per_s"`
	RawRate        float64 `json:"raw_insert_changes_per_s"`
	DebeziumRate   float64 `json:"debezium_changes_per_s,omitempty"`
	SyncVsRecv     float64 `json:"sync_vs_pg_recvlogical"`
	SyncVsDebezium float64 `json:"sync_vs_debezium,omitempty"`
	// SyncVsDebeziumStream leaves out the engine's start (its first record's wait).
	SyncVsDebeziumStream float64 `json:"sync_vs_debezium_stream,omitempty"`
	SyncVsRawInsert      float64 `json:"sync_vs_raw_insert"`
}

func (b *bench) report() error {
	r := &b.res
	w := b.written
	r.Date, r.CPUs, r.LoadAfter = time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), benchrun.LoadAvg()
	r.Changes, r.Inserts, r.Updates, r.Deletes, r.Transactions, r.Tables = w.total(), w.inserts, w.updates, w.deletes, w.transactions, len(tables)
	n := float64(w.total())
	recv, sync, raw := median(seconds(r.Recvlogical)), median(seconds(r.Sync)), median(seconds(r.RawInsert))
	r.RecvRate, r.SyncRate, r.RawRate = n/recv, n/sync, n/raw
	r.SyncVsRecv, r.SyncVsRawInsert = recv/sync, raw/sync
	fmt.Printf("medians of %d: pg_recvlogical %.0f changes/s (%.3f s), cdc sync %.0f changes/s (%.3f s), raw insert of sync's rows %.3f s\n",
		len(r.Sync), r.RecvRate, recv, r.SyncRate, sync, raw)
	fmt.Printf("cdc sync vs pg_recvlogical: %.2f× (target ≥ 0.5: %s); the raw insert is %.0f%% of sync's time\n",
		r.SyncVsRecv, verdict(r.SyncVsRecv >= 0.5), 100*raw/sync)
	if len(r.Compare) > 0 {
		c := median(seconds(r.Compare))
		fmt.Printf("the -compare binary's sync: %.0f changes/s (%.3f s); this build is %.2f× its speed\n", n/c, c, c/sync)
	}
	if d := r.Debezium; d != nil {
		r.DebeziumRate = n / d.EngineSeconds
		r.SyncVsDebezium = d.EngineSeconds / sync
		stream := d.EngineSeconds - d.FirstSeconds
		r.SyncVsDebeziumStream = stream / sync
		fmt.Printf("cdc sync vs Debezium's capture alone (engine start to last record, %.0f changes/s): %.1f× (target ≥ 5: %s); "+
			"its stream alone (first record to last, %.3f s): %.1f×; with the JVM's start (%.3f s): %.1f×\n", r.DebeziumRate,
			r.SyncVsDebezium, verdict(r.SyncVsDebezium >= 5), stream, r.SyncVsDebeziumStream, d.Process.Seconds, d.Process.Seconds/sync)
	}
	fmt.Printf("load %s\n", r.LoadAfter)
	if err := os.MkdirAll(filepath.Dir(b.results), 0o755); err != nil {
		return err
	}
	raw2, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(b.results, append(raw2, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("results: %s\n", b.results)
	return nil
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}
