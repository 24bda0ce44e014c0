package kestra

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/changesink/changesink/internal/redact"
)

// kestraLine is Kestra's own matcher (TaskLogLineMatcher.LOG_DATA_SYNTAX).
var kestraLine = regexp.MustCompile(`^::(\{.*})::$`)

type replacer struct{ old, new string }

func (r replacer) Mask(s string) string { return strings.ReplaceAll(s, r.old, r.new) }

func TestOutputsLineIsASCIIAndParses(t *testing.T) {
	var buf bytes.Buffer
	em := NewEmitter(&buf, nil)
	if err := em.Outputs(map[string]any{"topic": "tópico-😀", "consumed": 3}); err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSuffix(buf.String(), "\n")
	m := kestraLine.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("line %q does not match Kestra's pattern", line)
	}
	for _, b := range []byte(line) {
		if b >= 0x80 {
			t.Fatalf("line has a non-ASCII byte: %q", line)
		}
	}
	var got struct {
		Outputs map[string]any `json:"outputs"`
	}
	if err := json.Unmarshal([]byte(m[1]), &got); err != nil {
		t.Fatal(err)
	}
	if got.Outputs["topic"] != "tópico-😀" || got.Outputs["consumed"] != float64(3) {
		t.Fatalf("round trip = %v", got.Outputs)
	}
}

func TestMetricsAndLogs(t *testing.T) {
	var buf bytes.Buffer
	em := NewEmitter(&buf, replacer{"hunter2", "xxxxx"})
	if err := em.Metrics([]Metric{Counter("records", 5, map[string]string{"topic": "t"}), Timer("batch", 1500*time.Millisecond, nil),
		Gauge("lag", 7, map[string]string{"partition": "0"})}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(NewLogHandler(em, slog.LevelInfo))
	log.Info("plain\nmessage", "pw", "hunter2")
	log.Warn("careful", "n", 1)
	log.Debug("hidden")
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	want := []string{
		`::{"metrics":[{"name":"records","type":"counter","value":5,"tags":{"topic":"t"}},{"name":"batch","type":"timer","value":1.5},` +
			`{"name":"lag","type":"gauge","value":7,"tags":{"partition":"0"}}]}::`,
		`plain message pw=xxxxx`,
		`::{"logs":[{"level":"WARN","message":"careful n=1"}]}::`,
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines %q, want %d", len(lines), lines, len(want))
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d = %q, want %q", i, lines[i], want[i])
		}
	}
}

func TestDirCreateIsAtomic(t *testing.T) {
	dir := Dir{Path: t.TempDir()}
	f, err := dir.Create("report.json")
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("partial")
	if _, err := os.Stat(filepath.Join(dir.Path, "report.json")); !os.IsNotExist(err) {
		t.Fatalf("file visible before Commit: %v", err)
	}
	f.Abort()
	entries, _ := os.ReadDir(dir.Path)
	if len(entries) != 0 {
		t.Fatalf("Abort left files: %v", entries)
	}
	commitFile(t, dir, "r.json", `{"a": 1}`)
	st, err := os.Stat(filepath.Join(dir.Path, "r.json"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Fatalf("output file mode = %v, want 0644", st.Mode())
	}
	b, err := os.ReadFile(filepath.Join(dir.Path, "r.json"))
	if err != nil || !strings.Contains(string(b), `"a": 1`) {
		t.Fatalf("Commit left %q, %v", b, err)
	}
	if _, err := dir.Create("../x"); err == nil {
		t.Fatal("Create accepted a path")
	}
}

func TestMaskTouchesOnlyStringValues(t *testing.T) {
	var buf bytes.Buffer
	// A short numeric password and one that equals an output key: neither may
	// corrupt or hide the outputs (found by the kafka-state breaker).
	em := NewEmitter(&buf, multiMask{"1000", "topic", `pa"ss`})
	err := em.Outputs(map[string]any{
		"topic":    "t",
		"consumed": 1000,
		"error":    `login as topic with pa"ss failed after 1000 tries`,
		"offsets":  map[string]int{"1000": 1000},
	})
	if err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSuffix(buf.String(), "\n")
	m := kestraLine.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("line %q does not match Kestra's pattern", line)
	}
	var got struct {
		Outputs map[string]any `json:"outputs"`
	}
	if err := json.Unmarshal([]byte(m[1]), &got); err != nil {
		t.Fatalf("masked line is not JSON: %v: %s", err, line)
	}
	if got.Outputs["consumed"] != float64(1000) {
		t.Errorf("consumed = %v, want the number 1000", got.Outputs["consumed"])
	}
	if off, _ := got.Outputs["offsets"].(map[string]any); off["1000"] != float64(1000) {
		t.Errorf("offsets = %v, want key and value kept", got.Outputs["offsets"])
	}
	if got.Outputs["topic"] != "t" {
		t.Errorf("outputs[topic] = %v, want the key kept with its value", got.Outputs["topic"])
	}
	if e, _ := got.Outputs["error"].(string); strings.Contains(e, "1000") || strings.Contains(e, `pa"ss`) || strings.Contains(e, "topic") {
		t.Errorf("error output leaks a secret: %q", e)
	}
}

type multiMask []string

func (m multiMask) Mask(s string) string {
	for _, v := range m {
		s = strings.ReplaceAll(s, v, "xxxxx")
	}
	return s
}

// TestTextEmitter: for a person, no protocol lines: outputs and metrics as
// plain lines on stdout, warnings and failures on stderr, secrets masked.
func TestTextEmitter(t *testing.T) {
	var out, errw bytes.Buffer
	em := NewTextEmitter(&out, &errw, replacer{"hunter2", "xxxxx"})
	log := slog.New(NewLogHandler(em, slog.LevelInfo))
	log.Info("batch done", "pw", "hunter2")
	log.Warn("careful")
	if err := em.Outputs(map[string]any{"topic": "tópico", "consumed": 3, "next_offsets": map[string]int{"0": 5}}); err != nil {
		t.Fatal(err)
	}
	if err := em.Metrics([]Metric{Counter("records", 5, map[string]string{"topic": "t"}), Timer("batch", 1500*time.Millisecond, nil)}); err != nil {
		t.Fatal(err)
	}
	if err := em.Metrics([]Metric{Counter("events", 3, map[string]string{"view": "v"}), Timer("decode", 521400*time.Nanosecond, map[string]string{"view": "v"})}); err != nil {
		t.Fatal(err)
	}
	if err := em.Fail("refused", "bad <record> hunter2", ""); err != nil {
		t.Fatal(err)
	}
	wantOut := "batch done pw=xxxxx\n" +
		`outputs: consumed=3 next_offsets={"0":5} topic="tópico"` + "\n" +
		`metrics: records=5{"topic":"t"} batch=1.5s` + "\n" +
		`metrics: events=3 decode=521µs {"view":"v"}` + "\n"
	wantErr := "WARN: careful\nchangesink: refused: bad <record> xxxxx\n"
	if out.String() != wantOut {
		t.Errorf("stdout\n got %q\nwant %q", out.String(), wantOut)
	}
	if errw.String() != wantErr {
		t.Errorf("stderr\n got %q\nwant %q", errw.String(), wantErr)
	}
}

// TestFailForKestra: a failure is an ERROR log line and the error outputs.
func TestFailForKestra(t *testing.T) {
	var out bytes.Buffer
	if err := NewEmitter(&out, nil).Fail("transient", "lost", ""); err != nil {
		t.Fatal(err)
	}
	want := `::{"logs":[{"level":"ERROR","message":"changesink: transient: lost"}]}::` + "\n" +
		`::{"outputs":{"error":"lost","error_class":"transient"}}::` + "\n"
	if out.String() != want {
		t.Errorf("got %q\nwant %q", out.String(), want)
	}
}

// TestFailWithHint: the hint is a line of its own after the error (WARN
// for Kestra, on stderr as text) and, for Kestra, the hint output; a
// secret in it is masked like one in the message.
func TestFailWithHint(t *testing.T) {
	mask := &redact.Masker{}
	mask.Add("hunter2")
	var out bytes.Buffer
	if err := NewEmitter(&out, mask).Fail("refused", "bad hunter2", "retry with hunter2"); err != nil {
		t.Fatal(err)
	}
	want := `::{"logs":[{"level":"ERROR","message":"changesink: refused: bad xxxxx"}]}::` + "\n" +
		`::{"logs":[{"level":"WARN","message":"hint: retry with xxxxx"}]}::` + "\n" +
		`::{"outputs":{"error":"bad xxxxx","error_class":"refused","hint":"retry with xxxxx"}}::` + "\n"
	if out.String() != want {
		t.Errorf("kestra\n got %q\nwant %q", out.String(), want)
	}
	var stdout, stderr bytes.Buffer
	if err := NewTextEmitter(&stdout, &stderr, mask).Fail("refused", "bad hunter2", "retry with hunter2"); err != nil {
		t.Fatal(err)
	}
	if got, want := stderr.String(), "changesink: refused: bad xxxxx\nhint: retry with xxxxx\n"; got != want || stdout.Len() != 0 {
		t.Errorf("text: stderr %q, stdout %q; want stderr %q", got, stdout.String(), want)
	}
}

// TestFailMasksAcrossThePrefix: a secret that straddles the log line's
// prefix and the message ("ient: ab" in "changesink: transient: ab …") is
// masked in the log line, for Kestra and as text.
func TestFailMasksAcrossThePrefix(t *testing.T) {
	for _, text := range []bool{false, true} {
		var out, errw bytes.Buffer
		em := NewEmitter(&out, multiMask{"ient: ab"})
		if text {
			em = NewTextEmitter(&out, &errw, multiMask{"ient: ab"})
		}
		if err := em.Fail("transient", "ab cannot be reached", ""); err != nil {
			t.Fatal(err)
		}
		if got := out.String() + errw.String(); strings.Contains(got, "ient: ab") || !strings.Contains(got, "xxxxx") {
			t.Errorf("text=%v: the secret across the prefix is not masked:\n%s", text, got)
		}
	}
}

// TestProtocolWordsSurviveMasking: the masker replaced every occurrence of
// a secret in every string of a line, the protocol's own words included. A
// password "transient" turned the output error_class into "xxxxx" (an
// errors branch testing it never matched), "counter" turned a metric's
// type into "xxxxx" and "ERROR" a log line's level (Kestra drops a line
// with an unknown type or level: "Invalid outputs"). The class, the level
// and a metric's name and type are changesink's own words and hide no
// secret; messages, errors and tag values are masked.
func TestProtocolWordsSurviveMasking(t *testing.T) {
	var buf bytes.Buffer
	em := NewEmitter(&buf, multiMask{"transient", "counter", "ERROR", "records"})
	if err := em.Fail("transient", "login with transient failed: ERROR", ""); err != nil {
		t.Fatal(err)
	}
	if err := em.Metrics([]Metric{Counter("records", 2, map[string]string{"topic": "records-counter"})}); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Outputs map[string]any `json:"outputs"`
		Metrics []Metric       `json:"metrics"`
		Logs    []struct{ Level, Message string }
	}
	for _, line := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
		m := kestraLine.FindStringSubmatch(line)
		if m == nil || json.Unmarshal([]byte(m[1]), &got) != nil {
			t.Fatalf("not a protocol line: %q", line)
		}
	}
	if got.Outputs["error_class"] != "transient" {
		t.Errorf("error_class = %v, want transient", got.Outputs["error_class"])
	}
	if got.Outputs["error"] != "login with xxxxx failed: xxxxx" {
		t.Errorf("error = %v, want the secrets masked", got.Outputs["error"])
	}
	if len(got.Logs) != 1 || got.Logs[0].Level != "ERROR" || got.Logs[0].Message != "changesink: xxxxx: login with xxxxx failed: xxxxx" {
		t.Errorf("logs = %+v, want level ERROR, the message masked whole", got.Logs)
	}
	if len(got.Metrics) != 1 || got.Metrics[0].Name != "records" || got.Metrics[0].Type != "counter" || got.Metrics[0].Tags["topic"] != "xxxxx-xxxxx" {
		t.Errorf("metrics = %+v, want name and type kept, the tag value masked", got.Metrics)
	}
}
