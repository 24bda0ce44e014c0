package kestra

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Masker hides secret values in text before it is printed.
// *redact.Masker implements it.
type Masker interface {
	Mask(s string) string
}

type noMask struct{}

func (noMask) Mask(s string) string { return s }

// Emitter writes a run's messages and results. Made by NewEmitter it writes
// Kestra protocol lines to one writer (the process's stdout); made by
// NewTextEmitter it writes plain text for a person, warnings and errors on
// their own writer (stderr). It is safe for concurrent use; each line is
// written with a single Write.
type Emitter struct {
	mu   sync.Mutex
	w    io.Writer
	mask Masker
	// text: plain text for a person; errw takes WARN and ERROR messages.
	text bool
	errw io.Writer
}

// NewEmitter returns an Emitter writing Kestra protocol lines to w. mask may
// be nil.
func NewEmitter(w io.Writer, mask Masker) *Emitter {
	if mask == nil {
		mask = noMask{}
	}
	return &Emitter{w: w, mask: mask}
}

// NewTextEmitter returns an Emitter for a person at a terminal: messages,
// outputs and metrics as plain lines on out, warnings and errors on errw, no
// protocol lines. mask may be nil.
func NewTextEmitter(out, errw io.Writer, mask Masker) *Emitter {
	e := NewEmitter(out, mask)
	e.text, e.errw = true, errw
	return e
}

// Metric is one Kestra metric entry. Type is "counter" (Value is a count),
// "timer" (Value is seconds) or "gauge" (Value is a level at the end of the
// run; Kestra 1.1 and later). Tags may be nil.
type Metric struct {
	Name  string            `json:"name"`
	Type  string            `json:"type"`
	Value float64           `json:"value"`
	Tags  map[string]string `json:"tags,omitempty"`
}

// Counter returns a counter metric.
func Counter(name string, value float64, tags map[string]string) Metric {
	return Metric{Name: name, Type: "counter", Value: value, Tags: tags}
}

// Gauge returns a gauge metric: a level, such as a lag, rather than a
// count of what the run did. Kestra reads it from 1.1 on (io.kestra.core.
// models.executions.metrics.Gauge); an older engine drops the whole metrics
// line with a WARN.
func Gauge(name string, value float64, tags map[string]string) Metric {
	return Metric{Name: name, Type: "gauge", Value: value, Tags: tags}
}

// Timer returns a timer metric; Kestra reads a JSON number as seconds.
func Timer(name string, d time.Duration, tags map[string]string) Metric {
	return Metric{Name: name, Type: "timer", Value: d.Seconds(), Tags: tags}
}

// Result is what a task returns on success: the outputs and metrics to report.
type Result interface {
	// Outputs returns the values for `outputs.<task>.vars`.
	Outputs() map[string]any
	// Metrics returns the metrics of the run.
	Metrics() []Metric
}

// Report prints the outputs line, then the metrics line, of a finished task.
func (e *Emitter) Report(r Result) error {
	if err := e.Outputs(r.Outputs()); err != nil {
		return err
	}
	if m := r.Metrics(); len(m) > 0 {
		return e.Metrics(m)
	}
	return nil
}

// Outputs prints `::{"outputs":{...}}::`; as text, "outputs: k=v ..." with
// the keys sorted and each value in JSON.
func (e *Emitter) Outputs(outputs map[string]any) error {
	if e.text {
		keys := slices.Sorted(maps.Keys(outputs))
		var b strings.Builder
		b.WriteString("outputs:")
		for _, k := range keys {
			fmt.Fprintf(&b, " %s=%s", k, textJSON(outputs[k]))
		}
		return e.plain(e.w, b.String())
	}
	return e.line(map[string]any{"outputs": outputs})
}

// Metrics prints `::{"metrics":[...]}::`; as text, "metrics: name=value ..."
// with timers as durations ("1.5s", "520µs") and the tags once when every
// metric has the same ones (else after each metric).
func (e *Emitter) Metrics(metrics []Metric) error {
	if e.text {
		same := true
		for _, m := range metrics {
			same = same && maps.Equal(m.Tags, metrics[0].Tags)
		}
		var b strings.Builder
		b.WriteString("metrics:")
		for _, m := range metrics {
			v := strconv.FormatFloat(m.Value, 'g', -1, 64)
			if m.Type == "timer" {
				v = time.Duration(m.Value * float64(time.Second)).Round(time.Microsecond).String()
			}
			fmt.Fprintf(&b, " %s=%s", m.Name, v)
			if !same && len(m.Tags) > 0 {
				b.WriteString(textJSON(m.Tags))
			}
		}
		if same && len(metrics) > 0 && len(metrics[0].Tags) > 0 {
			b.WriteString(" " + textJSON(metrics[0].Tags))
		}
		return e.plain(e.w, b.String())
	}
	// A metric's name and type are changesink's own words (a password
	// "counter" must not make Kestra drop the line); tag values are data.
	masked := make([]Metric, len(metrics))
	for i, m := range metrics {
		masked[i] = m
		if m.Tags != nil {
			masked[i].Tags = make(map[string]string, len(m.Tags))
			for k, v := range m.Tags {
				masked[i].Tags[k] = e.mask.Mask(v)
			}
		}
	}
	return e.write(map[string]any{"metrics": masked})
}

// textJSON renders v as compact JSON without HTML escaping, for text output.
func textJSON(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// Level is a Kestra log level (org.slf4j.event.Level names, case-sensitive).
type Level string

// Kestra log levels.
const (
	LevelError Level = "ERROR"
	LevelWarn  Level = "WARN"
	LevelInfo  Level = "INFO"
	LevelDebug Level = "DEBUG"
)

// Log prints a `::{"logs":[...]}::` line with an explicit level; as text, a
// "LEVEL: message" line, on the error writer for WARN and ERROR.
func (e *Emitter) Log(level Level, message string) error {
	if e.text {
		w := e.w
		if level == LevelWarn || level == LevelError {
			w = e.errw
		}
		return e.plain(w, string(level)+": "+message)
	}
	return e.log(level, e.mask.Mask(message))
}

// log prints a logs line of an already masked message; the level is
// changesink's own word, never masked.
func (e *Emitter) log(level Level, masked string) error {
	return e.write(map[string]any{"logs": []map[string]string{{"level": string(level), "message": masked}}})
}

// Fail reports a failed run of the given class (refused, config, transient,
// internal): for Kestra an ERROR log line "changesink: <class>: <message>",
// a WARN line "hint: <hint>" when there is a hint (what to do, from the
// task's hints table), and the outputs error_class, error and hint (Kestra
// keeps the outputs of a failed task, so a flow's errors branch can act on
// the class); as text, those lines alone, on the error writer.
// The error_class output is changesink's own word and is never masked (a
// password "transient" must not hide it from an errors branch); the error
// and hint outputs are masked, and the log lines are masked whole, so that
// a secret that straddles a prefix and the message is masked too.
func (e *Emitter) Fail(class, message, hint string) error {
	line := e.mask.Mask("changesink: " + class + ": " + message)
	message = e.mask.Mask(message)
	hintLine := ""
	if hint != "" {
		hint = e.mask.Mask(hint)
		hintLine = e.mask.Mask("hint: " + hint)
	}
	if e.text {
		if err := e.writeText(e.errw, line); err != nil || hintLine == "" {
			return err
		}
		return e.writeText(e.errw, hintLine)
	}
	if err := e.log(LevelError, line); err != nil {
		return err
	}
	outputs := map[string]any{"error_class": class, "error": message}
	if hintLine != "" {
		if err := e.log(LevelWarn, hintLine); err != nil {
			return err
		}
		outputs["hint"] = hint
	}
	return e.write(map[string]any{"outputs": outputs})
}

// Plain prints a plain stdout line, which Kestra shows as INFO. Line breaks
// are replaced by spaces so that one message stays one log entry.
func (e *Emitter) Plain(message string) error { return e.plain(e.w, message) }

func (e *Emitter) plain(w io.Writer, message string) error {
	return e.writeText(w, e.mask.Mask(message))
}

// writeText writes an already masked message as one line.
func (e *Emitter) writeText(w io.Writer, msg string) error {
	msg = string(bytes.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, []byte(msg)))
	e.mu.Lock()
	defer e.mu.Unlock()
	_, err := io.WriteString(w, msg+"\n")
	return err
}

// line prints v as a protocol line, every string value in it masked.
func (e *Emitter) line(v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("kestra: encode protocol line: %w", err)
	}
	if raw, err = e.maskJSON(raw); err != nil {
		return err
	}
	return e.writeLine(raw)
}

// write prints v, whose strings the caller masked, as a protocol line.
func (e *Emitter) write(v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("kestra: encode protocol line: %w", err)
	}
	return e.writeLine(raw)
}

func (e *Emitter) writeLine(raw []byte) error {
	out := make([]byte, 0, len(raw)+8)
	out = append(out, "::"...)
	out = appendASCII(out, string(raw))
	out = append(out, "::\n"...)
	e.mu.Lock()
	defer e.mu.Unlock()
	_, err := e.w.Write(out)
	return err
}

// maskJSON masks secrets in the string values of the encoded JSON raw, never
// in object keys, numbers or booleans: those are the program's own, and a
// short secret such as "1000" must neither corrupt an output nor hide it.
// Strings are masked decoded, so escaping cannot split a secret. raw is
// returned unchanged (same key order) when no string held a secret.
func (e *Emitter) maskJSON(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, fmt.Errorf("kestra: re-read protocol line: %w", err)
	}
	tree, changed := maskStrings(tree, e.mask)
	if !changed {
		return raw, nil
	}
	masked, err := json.Marshal(tree)
	if err != nil {
		return nil, fmt.Errorf("kestra: encode masked protocol line: %w", err)
	}
	return masked, nil
}

// maskStrings masks every string value in a tree decoded from JSON and
// reports whether any changed.
func maskStrings(v any, m Masker) (any, bool) {
	switch t := v.(type) {
	case string:
		s := m.Mask(t)
		return s, s != t
	case []any:
		changed := false
		for i := range t {
			t[i] = maskChild(t[i], m, &changed)
		}
		return t, changed
	case map[string]any:
		changed := false
		for k := range t {
			t[k] = maskChild(t[k], m, &changed)
		}
		return t, changed
	default: // json.Number, bool, nil
		return v, false
	}
}

// maskChild masks an element of an array or object, setting *changed when
// anything in it changed.
func maskChild(v any, m Masker, changed *bool) any {
	v, c := maskStrings(v, m)
	*changed = *changed || c
	return v
}

// appendASCII appends JSON text s with every non-ASCII rune escaped as \uXXXX
// (surrogate pairs above the BMP). Valid because non-ASCII bytes in encoded
// JSON only occur inside strings.
func appendASCII(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	esc := func(dst []byte, r rune) []byte {
		return append(dst, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
	}
	for _, r := range s {
		switch {
		case r < utf8.RuneSelf:
			dst = append(dst, byte(r))
		case r > 0xffff:
			r -= 0x10000
			dst = esc(dst, 0xd800+(r>>10))
			dst = esc(dst, 0xdc00+(r&0x3ff))
		default:
			dst = esc(dst, r)
		}
	}
	return dst
}
