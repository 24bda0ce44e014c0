package kafkastate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/changesink/changesink/internal/kestra"
)

// ReportFile is the output file materialize writes into the working
// directory after PostgreSQL has committed (the seed's outputFiles).
const ReportFile = "batch-report.json"

// Offsets maps a partition to its next offset to fetch. It marshals as the
// seed's JSON object {"0": 12, "1": 7}, partitions in numeric order.
type Offsets map[int32]int64

// MarshalJSON writes {"<partition>": <offset>, ...} in partition order.
func (o Offsets) MarshalJSON() ([]byte, error) {
	parts := make([]int32, 0, len(o))
	for p := range o {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	b := []byte{'{'}
	for i, p := range parts {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = strconv.AppendInt(b, int64(p), 10)
		b = append(b, '"', ':')
		b = strconv.AppendInt(b, o[p], 10)
	}
	return append(b, '}'), nil
}

// Result is one committed batch. Outputs and the report file carry the
// seed's keys: topic, consumed, tombstones, next_offsets, live_keys.
type Result struct {
	// Topic is the materialized topic.
	Topic string `json:"topic"`
	// Consumed counts the records read and applied in this batch,
	// tombstones included (records of aborted transactions and transaction
	// markers are never counted).
	Consumed int64 `json:"consumed"`
	// Tombstones counts the null-valued records among Consumed.
	Tombstones int64 `json:"tombstones"`
	// NextOffsets is the durable next offset per partition, as committed.
	NextOffsets Offsets `json:"next_offsets"`
	// LiveKeys counts the topic's keys in kafka_state.current_values
	// (tombstoned keys excluded) after the commit.
	LiveKeys int64 `json:"live_keys"`
	// Batches counts the committed batches: 1 without DrainSeconds.
	Batches int `json:"-"`
	// Lag is, per partition, the high watermark less the committed next
	// offset, read after the run's last commit: the records (and
	// transaction markers, and records of open or aborted transactions) not
	// materialized yet. LagTotal is their sum; -1 when the broker could
	// not be asked (Lag is then nil).
	Lag      Offsets `json:"-"`
	LagTotal int64   `json:"-"`
	// Partitions counts the partitions the run read: the topic's, or its
	// shard's.
	Partitions int `json:"-"`
	// Shard is the run's SHARD, "" for the whole topic; NextOffsets, Lag
	// and LagTotal are then its partitions'.
	Shard string `json:"-"`
	// Duration is the run's wall time, from its start to the commit.
	Duration time.Duration `json:"-"`
	// Reject: the run ran with ON_BAD_RECORD=reject. Rejected counts the
	// records its batches kept aside in kafka_state.rejected (not counted
	// in Consumed).
	Reject   bool  `json:"-"`
	Rejected int64 `json:"-"`
}

// Summary is the line the CLI logs for a committed run.
func (r *Result) Summary() string {
	next, _ := r.NextOffsets.MarshalJSON()
	of := ""
	if r.Shard != "" {
		of = " of shard " + r.Shard
	}
	s := fmt.Sprintf("kafka-state: topic %s: committed %d records (%d tombstones) from %d partitions%s in %s",
		r.Topic, r.Consumed, r.Tombstones, r.Partitions, of, r.Duration.Round(time.Millisecond))
	if r.Batches > 1 {
		s += fmt.Sprintf(", %d batches (%.0f records/s)", r.Batches, float64(r.Consumed)/r.Duration.Seconds())
	}
	if r.Reject {
		s += fmt.Sprintf(", %d kept aside in kafka_state.rejected", r.Rejected)
	}
	s += fmt.Sprintf("; next offsets %s; %d live keys", next, r.LiveKeys)
	if r.Lag != nil {
		s += fmt.Sprintf("; lag %d", r.LagTotal)
	}
	return s
}

// Outputs returns the seed's outputs, topic, consumed, tombstones,
// next_offsets ({"<partition>": <next offset>}) and live_keys, then
// batches and, when it could be read, the lag: lag ({"<partition>":
// <records>}) and lag_total; with ON_BAD_RECORD=reject, rejected (the
// records kept aside in kafka_state.rejected).
func (r *Result) Outputs() map[string]any {
	out := map[string]any{
		"topic":        r.Topic,
		"consumed":     r.Consumed,
		"tombstones":   r.Tombstones,
		"next_offsets": r.NextOffsets,
		"live_keys":    r.LiveKeys,
		"batches":      r.Batches,
	}
	if r.Lag != nil {
		out["lag"] = r.Lag
		out["lag_total"] = r.LagTotal
	}
	if r.Shard != "" {
		out["shard"] = r.Shard
	}
	if r.Reject {
		out["rejected"] = r.Rejected
	}
	return out
}

// Metrics returns the counters records, tombstones, batches and, with
// ON_BAD_RECORD=reject, rejected, the timer batch (the run's seconds) and,
// when it could be read, the gauges lag (per partition, tagged with it) and
// lag_total; every metric is tagged with the topic.
func (r *Result) Metrics() []kestra.Metric {
	tags := r.tags()
	m := []kestra.Metric{
		kestra.Counter("records", float64(r.Consumed), tags),
		kestra.Counter("tombstones", float64(r.Tombstones), tags),
		kestra.Counter("batches", float64(r.Batches), tags),
		kestra.Timer("batch", r.Duration, tags),
	}
	if r.Reject {
		m = append(m, kestra.Counter("rejected", float64(r.Rejected), tags))
	}
	if r.Lag == nil {
		return m
	}
	m = append(m, kestra.Gauge("lag_total", float64(r.LagTotal), tags))
	for _, p := range slices.Sorted(maps.Keys(r.Lag)) {
		pt := r.tags()
		pt["partition"] = strconv.Itoa(int(p))
		m = append(m, kestra.Gauge("lag", float64(r.Lag[p]), pt))
	}
	return m
}

// tags are every metric's tags: the topic and, for a shard, the shard.
func (r *Result) tags() map[string]string {
	t := map[string]string{"topic": r.Topic}
	if r.Shard != "" {
		t["shard"] = r.Shard
	}
	return t
}

// setLag sets Lag and LagTotal from the watermarks read after the commit.
func (r *Result) setLag(marks map[int32]watermarks) {
	r.Lag = make(Offsets, len(r.NextOffsets))
	r.LagTotal = 0
	for p, next := range r.NextOffsets {
		r.Lag[p] = max(marks[p].hwm-next, 0)
		r.LagTotal += r.Lag[p]
	}
}

// reportJSON renders the report as the seed's json.dumps(report, indent=2):
// keys in the seed's order, two-space indent, non-ASCII escaped as \uXXXX
// (ensure_ascii), no HTML escaping, no trailing newline.
func (r *Result) reportJSON() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return nil, fmt.Errorf("encode %s: %w", ReportFile, err)
	}
	raw := bytes.TrimRight(buf.Bytes(), "\n")
	out := make([]byte, 0, len(raw))
	for len(raw) > 0 {
		c, n := utf8.DecodeRune(raw)
		raw = raw[n:]
		switch {
		case c < utf8.RuneSelf:
			out = append(out, byte(c))
		case c > 0xffff:
			c -= 0x10000
			out = fmt.Appendf(out, `\u%04x\u%04x`, 0xd800+(c>>10), 0xdc00+(c&0x3ff))
		default:
			out = fmt.Appendf(out, `\u%04x`, c)
		}
	}
	return out, nil
}

// stageReport writes the report's content into f (batch-report.json,
// created by Materialize before the batch) and syncs it, without giving it
// its final name: Materialize calls f.Commit after the PostgreSQL commit.
func (r *Result) stageReport(f *kestra.File) error {
	b, err := r.reportJSON()
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		return fmt.Errorf("write %s: %w", ReportFile, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", ReportFile, err)
	}
	return nil
}
