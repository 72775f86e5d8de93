package consumer

import (
	"context"
	"log/slog"
	"slices"
)

// lazyAttrs is a slog.Handler that keeps the attributes of With and hands
// them to the handler it wraps only when a record is written. The pacer
// gives every record it handles a logger with the record's place and id,
// and almost none of them logs: the JSON and text handlers format a
// With's attributes at once, which cost more than a twentieth of the CPU
// per message; here a With copies a slice.
type lazyAttrs struct {
	h     slog.Handler
	attrs []slog.Attr
}

// newLazyLogger returns l with its handler wrapped in lazyAttrs.
func newLazyLogger(l *slog.Logger) *slog.Logger {
	return slog.New(lazyAttrs{h: l.Handler()})
}

func (l lazyAttrs) Enabled(ctx context.Context, lvl slog.Level) bool { return l.h.Enabled(ctx, lvl) }

func (l lazyAttrs) Handle(ctx context.Context, r slog.Record) error {
	h := l.h
	if len(l.attrs) > 0 {
		h = h.WithAttrs(l.attrs)
	}
	return h.Handle(ctx, r)
}

func (l lazyAttrs) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return l
	}
	return lazyAttrs{h: l.h, attrs: append(slices.Clip(l.attrs), attrs...)}
}

// WithGroup hands the attributes kept so far to the wrapped handler: they
// belong outside the group.
func (l lazyAttrs) WithGroup(name string) slog.Handler {
	if name == "" {
		return l
	}
	h := l.h
	if len(l.attrs) > 0 {
		h = h.WithAttrs(l.attrs)
	}
	return lazyAttrs{h: h.WithGroup(name)}
}

// flightLog is the handler of a flight's logger: the record's place (topic,
// partition, offset) and, once parsed, its id are read from the flight when
// a line is written. It lives in the flight, so a record's logger costs no
// allocation; almost no record logs.
type flightLog struct {
	h slog.Handler // the pacer's
	f *flight
}

func (l *flightLog) attrs() []slog.Attr {
	r := l.f.r
	a := []slog.Attr{slog.String("topic", r.Topic), slog.Int("partition", int(r.Partition)), slog.Int64("offset", r.Offset)}
	if l.f.env.ID != "" {
		a = append(a, slog.String("id", l.f.env.ID))
	}
	return a
}

func (l *flightLog) Enabled(ctx context.Context, lvl slog.Level) bool { return l.h.Enabled(ctx, lvl) }

func (l *flightLog) Handle(ctx context.Context, r slog.Record) error {
	return l.h.WithAttrs(l.attrs()).Handle(ctx, r)
}

func (l *flightLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	return l.h.WithAttrs(append(l.attrs(), attrs...))
}

func (l *flightLog) WithGroup(name string) slog.Handler {
	if name == "" {
		return l
	}
	return l.h.WithAttrs(l.attrs()).WithGroup(name)
}
