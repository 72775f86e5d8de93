package consumer

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestLazyAttrs: a logger over lazyAttrs writes the same lines as the
// handler it wraps, through With, WithGroup and levels; siblings made from
// one logger do not share attributes.
func TestLazyAttrs(t *testing.T) {
	write := func(l *slog.Logger) {
		a := l.With("channel", "whatsapp")
		r1 := a.With("topic", "t", "partition", 3, "offset", int64(7))
		r2 := a.With("topic", "u")
		r1.With("id", "e-1").Info("one", "n", 1)
		r2.Info("two")
		r1.WithGroup("g").With("k", "v").Warn("three", "m", 2)
		r1.Debug("not written")
		a.WithGroup("").Error("four")
	}
	opts := &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}
	var want, got bytes.Buffer
	write(slog.New(slog.NewJSONHandler(&want, opts)))
	write(newLazyLogger(slog.New(slog.NewJSONHandler(&got, opts))))
	if got.String() != want.String() {
		t.Errorf("through lazyAttrs:\n%s\nwant:\n%s", got.String(), want.String())
	}
	if want.Len() == 0 || bytes.Contains(want.Bytes(), []byte("not written")) {
		t.Fatalf("reference output wrong:\n%s", want.String())
	}
}

// TestFlightLog: a record's logger writes the lines the pacer's logger
// would with the record's place and, once its envelope is parsed, its id,
// through With and WithGroup too.
func TestFlightLog(t *testing.T) {
	var got, want bytes.Buffer
	opts := &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}
	base := newLazyLogger(slog.New(slog.NewJSONHandler(&got, opts))).With("channel", "whatsapp")
	f := &flight{r: &kgo.Record{Topic: "t", Partition: 3, Offset: 7}}
	f.logh = flightLog{h: base.Handler(), f: f}
	f.logger = *slog.New(&f.logh)
	f.log = &f.logger
	f.log.Info("before parse", "n", 1)
	f.env.ID = "e-1"
	f.log.Warn("after", "n", 2)
	f.log.With("k", "v").WithGroup("g").Error("grouped", "m", 3)
	f.log.Debug("not written")

	ref := slog.New(slog.NewJSONHandler(&want, opts)).With("channel", "whatsapp", "topic", "t", "partition", 3, "offset", int64(7))
	ref.Info("before parse", "n", 1)
	ref.With("id", "e-1").Warn("after", "n", 2)
	ref.With("id", "e-1", "k", "v").WithGroup("g").Error("grouped", "m", 3)
	if got.String() != want.String() {
		t.Errorf("lines:\n%s\nwant:\n%s", got.String(), want.String())
	}
}
