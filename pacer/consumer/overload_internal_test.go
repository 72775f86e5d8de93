package consumer

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestOverloadSaid: 5 of 1,000 send slots given up as late in a minute is
// not overload; 50 more of 1,000 five seconds later sets pacer_overloaded
// at that look (not a minute later) and logs it once, naming both counts;
// looks within the minute keep it set without a second line; once the
// minute holding the 50 has passed, it is 0 again.
func TestOverloadSaid(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var buf testenv.SyncBuffer
	p := &Pacer{m: m, log: slog.New(slog.NewTextHandler(&buf, nil))}
	add := func(slots, lapsed int) {
		for range slots {
			m.latenessO.Observe(0.001)
		}
		m.lateSlots.WithLabelValues().Add(float64(lapsed))
	}
	gauge := func() float64 {
		var d dto.Metric
		if err := m.overloaded.WithLabelValues().Write(&d); err != nil {
			t.Fatal(err)
		}
		return d.GetGauge().GetValue()
	}
	t0 := time.Unix(1_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	w := overloadWatch{looks: []overload{p.overloadNow(t0)}}
	add(1000, 5)
	if p.lookOverload(&w, at(5)); gauge() != 0 || buf.String() != "" {
		t.Fatalf("5 of 1,000 slots given up: overloaded %v, log %q; want 0 and nothing", gauge(), buf.String())
	}
	add(1000, 50)
	if p.lookOverload(&w, at(10)); gauge() != 1 {
		t.Fatalf("55 of 2,000 slots given up within 10 s: overloaded %v at that look, want 1", gauge())
	}
	for s := 15; s <= 40; s += 5 {
		if p.lookOverload(&w, at(s)); gauge() != 1 {
			t.Fatalf("at %ds, the 50 within the last minute: overloaded %v, want 1", s, gauge())
		}
	}
	if out := buf.String(); strings.Count(out, "overloaded") != 1 || !strings.Contains(out, "slots_given_up=55") || !strings.Contains(out, "slots=2000") {
		t.Fatalf("log %q: want one overloaded line with slots_given_up=55 slots=2000", out)
	}
	add(1000, 0)
	for s := 45; s <= 70; s += 5 {
		p.lookOverload(&w, at(s))
	}
	if gauge() != 0 {
		t.Errorf("a minute after the 50 with none given up since: overloaded %v, want 0", gauge())
	}
	if n := len(w.looks); n > 14 {
		t.Errorf("%d looks kept, want at most a minute's (13)", n)
	}
}
