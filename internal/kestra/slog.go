package kestra

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// LogHandler is a slog.Handler that prints INFO and DEBUG records as plain
// stdout lines (Kestra shows them as INFO) and WARN and ERROR records as
// `::{"logs":...}::` lines so that Kestra shows the right level. Attributes are
// appended as key=value; every line passes through the emitter's masker.
type LogHandler struct {
	em    *Emitter
	level slog.Leveler
	attrs []slog.Attr
	group string
}

// NewLogHandler returns a handler writing through em at level and above.
func NewLogHandler(em *Emitter, level slog.Leveler) *LogHandler {
	return &LogHandler{em: em, level: level}
}

// Enabled implements slog.Handler.
func (h *LogHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

// Handle implements slog.Handler.
func (h *LogHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	write := func(a slog.Attr) bool {
		if a.Equal(slog.Attr{}) {
			return true
		}
		key := a.Key
		if h.group != "" {
			key = h.group + "." + key
		}
		fmt.Fprintf(&b, " %s=%v", key, a.Value.Resolve().Any())
		return true
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(write)
	switch {
	case r.Level >= slog.LevelError:
		return h.em.Log(LevelError, b.String())
	case r.Level >= slog.LevelWarn:
		return h.em.Log(LevelWarn, b.String())
	default:
		return h.em.Plain(b.String())
	}
}

// WithAttrs implements slog.Handler.
func (h *LogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return &c
}

// WithGroup implements slog.Handler.
func (h *LogHandler) WithGroup(name string) slog.Handler {
	c := *h
	if c.group != "" {
		name = c.group + "." + name
	}
	c.group = name
	return &c
}
