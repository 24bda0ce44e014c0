package kestra

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"testing/slogtest"
)

// TestLogHandlerGroups: attributes added before a group are not qualified
// by it; those added after are.
func TestLogHandlerGroups(t *testing.T) {
	tests := []struct {
		name string
		log  func(*slog.Logger)
		want string
	}{
		{"attrs then group", func(l *slog.Logger) { l.With("a", 1).WithGroup("g").Info("m", "b", 2) }, "m a=1 g.b=2"},
		{"group then attrs", func(l *slog.Logger) { l.WithGroup("g").With("a", 1).Info("m", "b", 2) }, "m g.a=1 g.b=2"},
		{"nested groups", func(l *slog.Logger) { l.WithGroup("g").With("a", 1).WithGroup("h").Info("m", "b", 2) }, "m g.a=1 g.h.b=2"},
		{"group attr", func(l *slog.Logger) { l.Info("m", slog.Group("g", "a", 1, slog.Group("h", "b", 2))) }, "m g.a=1 g.h.b=2"},
		{"inline group", func(l *slog.Logger) { l.Info("m", slog.Group("", "a", 1)) }, "m a=1"},
		{"empty group", func(l *slog.Logger) { l.WithGroup("g").Info("m", slog.Group("h")) }, "m"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			tt.log(slog.New(NewLogHandler(NewEmitter(&buf, nil), slog.LevelInfo)))
			if got := strings.TrimSuffix(buf.String(), "\n"); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestLogHandlerConformance runs the standard library's handler tests. The
// handler prints "message k=v g.k=v" (plain lines, or the message of a
// ::{"logs":...}:: line for WARN and above); the result parser turns that
// back into slogtest's nested maps. Kestra stamps every line with its own
// time when it reads it, so the handler never prints the record's time: the
// parser adds the time key, and the one case that needs a zero time to be
// left out is skipped with that reason.
func TestLogHandlerConformance(t *testing.T) {
	var buf *bytes.Buffer
	slogtest.Run(t, func(t *testing.T) slog.Handler {
		buf = new(bytes.Buffer)
		return NewLogHandler(NewEmitter(buf, nil), slog.LevelDebug)
	}, func(t *testing.T) map[string]any {
		if strings.HasSuffix(t.Name(), "/zero-time") {
			t.Skip("Kestra stamps each line with its own time; the handler never prints the record's time")
		}
		return parseLogLine(t, strings.TrimSuffix(buf.String(), "\n"))
	})
}

// parseLogLine reads one line the handler printed into slogtest's shape.
func parseLogLine(t *testing.T, line string) map[string]any {
	t.Helper()
	level := "INFO"
	if strings.HasPrefix(line, "::") {
		var v struct {
			Logs []struct{ Level, Message string }
		}
		if err := json.Unmarshal([]byte(strings.TrimSuffix(strings.TrimPrefix(line, "::"), "::")), &v); err != nil || len(v.Logs) != 1 {
			t.Fatalf("protocol line %q: %v", line, err)
		}
		level, line = v.Logs[0].Level, v.Logs[0].Message
	}
	out := map[string]any{slog.TimeKey: "stamped by Kestra", slog.LevelKey: level}
	words := strings.Split(line, " ")
	out[slog.MessageKey] = words[0]
	for _, w := range words[1:] {
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			t.Fatalf("line %q: %q is not key=value", line, w)
		}
		m := out
		path := strings.Split(k, ".")
		for _, g := range path[:len(path)-1] {
			sub, ok := m[g].(map[string]any)
			if !ok {
				sub = map[string]any{}
				m[g] = sub
			}
			m = sub
		}
		m[path[len(path)-1]] = v
	}
	return out
}
