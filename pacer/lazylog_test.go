package pacer

import (
	"bytes"
	"log/slog"
	"testing"
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
