package parity

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/changesink/changesink/internal/testenv"
)

// kafkaScenario is one file under testdata/kafka: a topic, what is
// produced to it, and the batches both implementations run.
type kafkaScenario struct {
	// Description says what the scenario proves.
	Description string `yaml:"description"`
	// Partitions of the topic (default 1).
	Partitions int `yaml:"partitions"`
	// Configs are topic configs, e.g. cleanup.policy: compact.
	Configs map[string]string `yaml:"configs"`
	// Steps run in order.
	Steps []kafkaStep `yaml:"steps"`
}

// kafkaStep is exactly one of its fields.
type kafkaStep struct {
	// Produce writes records without a transaction, in order, synchronously.
	Produce []kafkaRecord `yaml:"produce"`
	// Transaction writes records in one transaction and commits or aborts it.
	Transaction *kafkaTxn `yaml:"transaction"`
	// Compact waits until the log cleaner has compacted the topic.
	Compact *kafkaCompact `yaml:"compact"`
	// DeleteRecords moves a partition's log start offset (kadm DeleteRecords).
	DeleteRecords *kafkaDeleteRecords `yaml:"delete_records"`
	// PauseMS sleeps, e.g. so that the next record rolls a segment
	// (segment.ms) and the records before it become compactable.
	PauseMS int `yaml:"pause_ms"`
	// Batch runs one batch of each implementation and compares.
	Batch *kafkaBatch `yaml:"batch"`
}

// kafkaRecord is one produced record. Key and value are each given as text
// (`key`, `value`; YAML null is a null key / a tombstone) or as base64 bytes
// (`key_b64`, `value_b64`). With repeat N > 0 the record is produced N times,
// with every "{i}" in key and value text replaced by 0..N-1 and "{i6}" by
// the same zero-padded to six digits.
type kafkaRecord struct {
	Partition int       `yaml:"partition"`
	Key       yaml.Node `yaml:"key"`
	KeyB64    yaml.Node `yaml:"key_b64"`
	Value     yaml.Node `yaml:"value"`
	ValueB64  yaml.Node `yaml:"value_b64"`
	Repeat    int       `yaml:"repeat"`
}

type kafkaTxn struct {
	// End is commit or abort.
	End     string        `yaml:"end"`
	Records []kafkaRecord `yaml:"records"`
}

type kafkaCompact struct {
	// Remaining is, per partition, how many records (read uncommitted, from
	// the log start) must remain once compaction has run. The step fails
	// after 120 s if the cleaner has not got there.
	Remaining map[int]int `yaml:"remaining"`
}

type kafkaDeleteRecords struct {
	Partition int   `yaml:"partition"`
	Before    int64 `yaml:"before"`
}

// kafkaBatch is one run of each implementation with the seed's inputs.
type kafkaBatch struct {
	MaxRecords  int `yaml:"max_records"`  // default 1000, as the seed flow
	PollSeconds int `yaml:"poll_seconds"` // default 5 (the flow's is 10; only waits matter)
	// Swap runs the seed on changesink's database and changesink on the
	// seed's for this batch, so each continues from positions and records the
	// other wrote (the databases stay comparable: both must still agree).
	Swap bool `yaml:"swap"`
	// MissingTopic runs the batch with TOPIC set to the scenario's topic
	// name + "-missing", which does not exist.
	MissingTopic bool `yaml:"missing_topic"`
	// HoldLock holds the seed's per-topic advisory transaction lock from a
	// side connection (in each database) while the batch runs.
	HoldLock bool `yaml:"hold_lock"`
	// Expect is the outcome: ok (both succeed) or the changesink class of
	// a failure (refused, config, transient) — the seed must fail too, and
	// neither may change any table.
	Expect string `yaml:"expect"`
	// Differs names the deliberate differences this batch must show (see
	// differences_test.go); any other difference fails the test.
	Differs []string `yaml:"differs"`
	// Want pins values of the seed's outputs (a check on the scenario itself).
	Want map[string]any `yaml:"want"`
	// AnyOrder says the batch stops mid-way across several partitions, so
	// which records each implementation takes is not determined (librdkafka
	// and changesink interleave partitions as fetches arrive): only the
	// outcome and `consumed` are compared for this batch; the full state is
	// compared after the scenario's last batch as always.
	AnyOrder bool `yaml:"any_order"`
	// ErrorMentions are texts changesink's error must contain (case-insensitive).
	// "{topic}" stands for the scenario's topic.
	ErrorMentions []string `yaml:"error_mentions"`
}

// producedRecord is a record ready to produce. Nil Key is a null key; nil
// Value is a tombstone.
type producedRecord struct {
	Partition int32
	Key       []byte
	Value     []byte
}

// loadKafkaScenarios reads every testdata/kafka/*.yaml, strictly.
func loadKafkaScenarios(t *testing.T) map[string]*kafkaScenario {
	return loadScenarios[kafkaScenario](t, "kafka")
}

// loadScenarios reads every testdata/<kind>/*.yaml into a T, strictly
// (unknown keys are errors), validates it and returns the scenarios by file
// name without ".yaml".
func loadScenarios[T any, PT interface {
	*T
	validate() error
}](t *testing.T, kind string) map[string]*T {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", kind, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no %s scenarios under testdata/%s (err %v)", kind, kind, err)
	}
	out := map[string]*T{}
	for _, f := range files {
		raw := testenv.ReadFile(t, f)
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		dec.KnownFields(true)
		sc := new(T)
		if err := dec.Decode(sc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if err := PT(sc).validate(); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".yaml")] = sc
	}
	return out
}

func (sc *kafkaScenario) validate() error {
	if sc.Description == "" {
		return fmt.Errorf("description is required")
	}
	if sc.Partitions == 0 {
		sc.Partitions = 1
	}
	if sc.Partitions < 1 || sc.Partitions > 32 {
		return fmt.Errorf("partitions %d not in 1..32", sc.Partitions)
	}
	batches := 0
	for i := range sc.Steps {
		st := &sc.Steps[i]
		n := 0
		for _, set := range []bool{st.Produce != nil, st.Transaction != nil, st.Compact != nil, st.DeleteRecords != nil, st.PauseMS > 0, st.Batch != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("step %d: exactly one of produce, transaction, compact, delete_records, pause_ms, batch is required", i+1)
		}
		recs := st.Produce
		if st.Transaction != nil {
			if st.Transaction.End != "commit" && st.Transaction.End != "abort" {
				return fmt.Errorf("step %d: transaction end %q is not commit or abort", i+1, st.Transaction.End)
			}
			recs = st.Transaction.Records
		}
		for j, r := range recs {
			if _, err := r.expand(); err != nil {
				return fmt.Errorf("step %d record %d: %w", i+1, j+1, err)
			}
			if r.Partition < 0 || r.Partition >= sc.Partitions {
				return fmt.Errorf("step %d record %d: partition %d out of range", i+1, j+1, r.Partition)
			}
		}
		if b := st.Batch; b != nil {
			batches++
			if b.MaxRecords == 0 {
				b.MaxRecords = 1000
			}
			if b.PollSeconds == 0 {
				b.PollSeconds = 5
			}
			switch b.Expect {
			case "ok", "refused", "config", "transient":
			default:
				return fmt.Errorf("step %d: expect %q is not ok, refused, config or transient", i+1, b.Expect)
			}
			for _, d := range b.Differs {
				if _, ok := kafkaDifferences[d]; !ok {
					return fmt.Errorf("step %d: unknown difference %q (known: %s)", i+1, d, strings.Join(slices.Sorted(maps.Keys(kafkaDifferences)), ", "))
				}
				if outcomeDifferences[d] && (b.Expect == "ok" || len(b.Differs) != 1 || i != len(sc.Steps)-1) {
					return fmt.Errorf("step %d: outcome difference %q must be the only one named, by the last step, with the seed's failing expect", i+1, d)
				}
			}
		}
	}
	if batches == 0 {
		return fmt.Errorf("no batch step")
	}
	if !sc.Steps[len(sc.Steps)-1].isBatch() {
		return fmt.Errorf("the last step must be a batch")
	}
	return nil
}

func (st kafkaStep) isBatch() bool { return st.Batch != nil }

// bytesField decodes a text/base64 pair of nodes: text set → its bytes,
// YAML null → nil (null), base64 set → decoded bytes. Exactly one of the two
// must be given.
func bytesField(name string, text, b64 yaml.Node) ([]byte, error) {
	hasText, hasB64 := text.Kind != 0, b64.Kind != 0
	switch {
	case hasText == hasB64:
		return nil, fmt.Errorf("exactly one of %s and %s_b64 is required", name, name)
	case hasText && text.Tag == "!!null":
		return nil, nil
	case hasText:
		if text.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("%s must be a string (line %d)", name, text.Line)
		}
		return []byte(text.Value), nil
	default:
		raw, err := base64.StdEncoding.DecodeString(b64.Value)
		if err != nil {
			return nil, fmt.Errorf("%s_b64 (line %d): %w", name, b64.Line, err)
		}
		return raw, nil
	}
}

// expand returns the records r stands for.
func (r kafkaRecord) expand() ([]producedRecord, error) {
	key, err := bytesField("key", r.Key, r.KeyB64)
	if err != nil {
		return nil, err
	}
	value, err := bytesField("value", r.Value, r.ValueB64)
	if err != nil {
		return nil, err
	}
	if r.Repeat == 0 {
		return []producedRecord{{Partition: int32(r.Partition), Key: key, Value: value}}, nil
	}
	out := make([]producedRecord, 0, r.Repeat)
	for i := range r.Repeat {
		sub := func(b []byte) []byte {
			if b == nil {
				return nil
			}
			return []byte(expandIndex(string(b), i))
		}
		out = append(out, producedRecord{Partition: int32(r.Partition), Key: sub(key), Value: sub(value)})
	}
	return out, nil
}

// TestKafkaScenarioFiles checks every kafka scenario file parses and is
// consistent; it needs no services.
func TestKafkaScenarioFiles(t *testing.T) {
	scenarios := loadKafkaScenarios(t)
	for name, sc := range scenarios {
		for _, st := range sc.Steps {
			for _, r := range append(append([]kafkaRecord{}, st.Produce...), txnRecords(st)...) {
				if _, err := r.expand(); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
		}
	}
	t.Logf("%d kafka scenarios", len(scenarios))
}

func txnRecords(st kafkaStep) []kafkaRecord {
	if st.Transaction == nil {
		return nil
	}
	return st.Transaction.Records
}

// TestKafkaRecordNulls pins how the scenario format tells a null key or
// tombstone from an absent field.
func TestKafkaRecordNulls(t *testing.T) {
	tests := []struct {
		name      string
		yaml      string
		wantKey   []byte
		wantValue []byte
		wantErr   bool
	}{
		{name: "text", yaml: `{key: a, value: '{}'}`, wantKey: []byte("a"), wantValue: []byte("{}")},
		{name: "null key and tombstone", yaml: `{key: null, value: null}`},
		{name: "tilde null", yaml: `{key: ~, value: '1'}`, wantValue: []byte("1")},
		{name: "quoted null is text", yaml: `{key: "null", value: "null"}`, wantKey: []byte("null"), wantValue: []byte("null")},
		{name: "empty value", yaml: `{key: k, value: ""}`, wantKey: []byte("k"), wantValue: []byte{}},
		{name: "base64", yaml: `{key_b64: /w==, value_b64: 77u/e30=}`, wantKey: []byte{0xff}, wantValue: []byte("\ufeff{}")},
		{name: "missing key", yaml: `{value: '{}'}`, wantErr: true},
		{name: "both forms", yaml: `{key: a, key_b64: YQ==, value: '{}'}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r kafkaRecord
			if err := yaml.Unmarshal([]byte(tt.yaml), &r); err != nil {
				t.Fatal(err)
			}
			recs, err := r.expand()
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			got := recs[0]
			if (got.Key == nil) != (tt.wantKey == nil) || !bytes.Equal(got.Key, tt.wantKey) {
				t.Errorf("key = %q (nil %v), want %q (nil %v)", got.Key, got.Key == nil, tt.wantKey, tt.wantKey == nil)
			}
			if (got.Value == nil) != (tt.wantValue == nil) || !bytes.Equal(got.Value, tt.wantValue) {
				t.Errorf("value = %q (nil %v), want %q (nil %v)", got.Value, got.Value == nil, tt.wantValue, tt.wantValue == nil)
			}
		})
	}
}
