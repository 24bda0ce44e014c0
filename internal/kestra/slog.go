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
// appended as key=value, a group's attributes as group.key=value; every line
// passes through the emitter's masker. Kestra stamps each line's time itself,
// so the record's time is not printed.
type LogHandler struct {
	em    *Emitter
	level slog.Leveler
	// attrs holds the attributes of WithAttrs calls, already formatted with
	// the groups open at the time of the call.
	attrs string
	// prefix is the open groups, each followed by a dot ("g.h.").
	prefix string
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
	b.WriteString(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		appendAttr(&b, h.prefix, a)
		return true
	})
	switch {
	case r.Level >= slog.LevelError:
		return h.em.Log(LevelError, b.String())
	case r.Level >= slog.LevelWarn:
		return h.em.Log(LevelWarn, b.String())
	default:
		return h.em.Plain(b.String())
	}
}

// appendAttr writes " prefix+key=value" for a, and for a group each of its
// attributes under "prefix+key."; empty attributes and empty groups print
// nothing, and a group without a key is inlined (as slog.Handler requires).
func appendAttr(b *strings.Builder, prefix string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if a.Value.Kind() == slog.KindGroup {
		if a.Key != "" {
			prefix += a.Key + "."
		}
		for _, g := range a.Value.Group() {
			appendAttr(b, prefix, g)
		}
		return
	}
	fmt.Fprintf(b, " %s%s=%v", prefix, a.Key, a.Value.Any())
}

// WithAttrs implements slog.Handler.
func (h *LogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.attrs)
	for _, a := range attrs {
		appendAttr(&b, h.prefix, a)
	}
	c := *h
	c.attrs = b.String()
	return &c
}

// WithGroup implements slog.Handler: attributes added later, by WithAttrs or
// in a record, are qualified by name; those added before are not.
func (h *LogHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.prefix += name + "."
	return &c
}
