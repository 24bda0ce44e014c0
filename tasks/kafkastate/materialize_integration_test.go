package kafkastate

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
	"github.com/changesink/changesink/internal/testenv"
)

// TestMaterializeBatch: a first batch over three partitions stores every
// key's latest value with its partition and offset, writes the positions as
// the seed does ({"<partition>": next}) with the seed's id forms, returns the
// seed's outputs and writes the same batch-report.json; a second run over
// the fully read topic commits nothing new and keeps the positions.
func TestMaterializeBatch(t *testing.T) {
	e := newTopicEnv(t, 3)
	produce(t, e.kcl, e.topic,
		kv(0, "a", `{"v":1}`), kv(1, "b", `{"v":1}`), kv(2, "c", `[1,2]`),
		kv(0, "a", `{"v":2}`), kv(1, "d", `"text"`), tomb(2, "c"))

	dir := t.TempDir()
	res, err := Materialize(testCtx(t, time.Minute), e.config(), Env{Dir: kestra.Dir{Path: dir}})
	if err != nil {
		t.Fatalf("Materialize: %v", err)
	}
	wantNext := Offsets{0: 2, 1: 2, 2: 2}
	if res.Topic != e.topic || res.Consumed != 6 || res.Tombstones != 1 || res.LiveKeys != 3 || !maps.Equal(res.NextOffsets, wantNext) {
		t.Errorf("result = %+v; want consumed 6, tombstones 1, live_keys 3, next %v", res, wantNext)
	}
	v2, v1, text := `{"v": 2}`, `{"v": 1}`, `"text"`
	want := map[string]stored{
		"a": {Payload: &v2, Partition: 0, Offset: 1},
		"b": {Payload: &v1, Partition: 1, Offset: 0},
		"c": {Deleted: true, Partition: 2, Offset: 1},
		"d": {Payload: &text, Partition: 1, Offset: 1},
	}
	assertRecords(t, e.records(t), want)
	next, cluster, topicID := e.positions(t)
	wantCluster, wantTopicID := e.ids(t)
	if !maps.Equal(next, map[string]int64{"0": 2, "1": 2, "2": 2}) || cluster != wantCluster || topicID != wantTopicID || len(topicID) != 22 {
		t.Errorf("positions = %v %q %q; want next 2/2/2, %q, %q (22 chars)", next, cluster, topicID, wantCluster, wantTopicID)
	}

	report := testenv.ReadFile(t, filepath.Join(dir, ReportFile))
	wantReport := `{
  "topic": "` + e.topic + `",
  "consumed": 6,
  "tombstones": 1,
  "next_offsets": {
    "0": 2,
    "1": 2,
    "2": 2
  },
  "live_keys": 3
}`
	if string(report) != wantReport {
		t.Errorf("%s =\n%s\nwant (the seed's json.dumps(report, indent=2)):\n%s", ReportFile, report, wantReport)
	}
	out, err := json.Marshal(res.Outputs())
	if err != nil {
		t.Fatal(err)
	}
	wantOut := `{"batches":1,"consumed":6,"lag":{"0":0,"1":0,"2":0},"lag_total":0,"live_keys":3,"next_offsets":{"0":2,"1":2,"2":2},"tombstones":1,"topic":"` + e.topic + `"}`
	if string(out) != wantOut {
		t.Errorf("outputs = %s, want %s", out, wantOut)
	}

	again := e.mustRun(t)
	if again.Consumed != 0 || again.LiveKeys != 3 || !maps.Equal(again.NextOffsets, wantNext) {
		t.Errorf("re-run = %+v; want nothing consumed, same positions", again)
	}
	assertRecords(t, e.records(t), want)
	noGroups(t, e.adm)
}

func assertRecords(t testing.TB, got, want map[string]stored) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("stored %d keys, want %d: %v", len(got), len(want), describeStored(got))
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("key %q missing", k)
			continue
		}
		if g.Deleted != w.Deleted || g.Partition != w.Partition || g.Offset != w.Offset ||
			(g.Payload == nil) != (w.Payload == nil) || (g.Payload != nil && *g.Payload != *w.Payload) {
			t.Errorf("key %q = %s, want %s", k, describeStored(map[string]stored{k: g}), describeStored(map[string]stored{k: w}))
		}
	}
}

func describeStored(m map[string]stored) string {
	var b strings.Builder
	for k, s := range m {
		p := "NULL"
		if s.Payload != nil {
			p = *s.Payload
		}
		b.WriteString(k + "={" + p + " deleted=" + map[bool]string{true: "t", false: "f"}[s.Deleted] +
			" p" + itoa(int64(s.Partition)) + " o" + itoa(s.Offset) + "} ")
	}
	return b.String()
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestUnwritableWorkingDir: with a working directory the report
// cannot be written into, the run committed the batch and then failed as
// transient ("nothing was committed", exit 3), losing the batch's outputs.
// It must find out before it changes anything: a configuration error
// naming WORKING_DIR, and nothing committed.
func TestUnwritableWorkingDir(t *testing.T) {
	e := newTopicEnv(t, 1)
	produce(t, e.kcl, e.topic, kv(0, "a", `{"v":1}`))
	before := e.snapshot(t)
	missing := filepath.Join(t.TempDir(), "gone")
	_, err := Materialize(testCtx(t, time.Minute), e.config(), Env{Dir: kestra.Dir{Path: missing}})
	testenv.WantHinted(t, err, Hint, outcome.Config, nil, "WORKING_DIR")
	if after := e.snapshot(t); after != before {
		t.Fatalf("the run changed the tables:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestReportNameTakenByADirectory: a directory named batch-report.json in
// the working directory. The early check only created the temporary file,
// so the batch committed and then the rename failed: exit 4 for a
// committed batch. It is a configuration error before anything changes.
func TestReportNameTakenByADirectory(t *testing.T) {
	e := newTopicEnv(t, 1)
	produce(t, e.kcl, e.topic, kv(0, "a", `{"v":1}`))
	before := e.snapshot(t)
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, ReportFile), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Materialize(testCtx(t, time.Minute), e.config(), Env{Dir: kestra.Dir{Path: dir}})
	testenv.WantHinted(t, err, Hint, outcome.Config, nil, "WORKING_DIR", "directory")
	if after := e.snapshot(t); after != before {
		t.Fatalf("the run changed the tables:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
