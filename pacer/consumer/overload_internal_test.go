package consumer

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestOverloadSaid: a minute in which 5 of 1,000 send slots were given up
// as late is not overload; one with 50 of 1,000 sets pacer_overloaded and
// logs it once, naming both counts; a quiet minute after sets it back.
func TestOverloadSaid(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var buf testenv.SyncBuffer
	p := &Pacer{m: m, log: slog.New(slog.NewTextHandler(&buf, nil))}
	minute := func(slots, lapsed int) {
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
	var last overload
	minute(1000, 5)
	if last = p.lookOverload(last); gauge() != 0 || buf.String() != "" {
		t.Fatalf("5 of 1,000 slots given up: overloaded %v, log %q; want 0 and nothing", gauge(), buf.String())
	}
	minute(1000, 50)
	if last = p.lookOverload(last); gauge() != 1 {
		t.Fatalf("50 of 1,000 slots given up: overloaded %v, want 1", gauge())
	}
	if out := buf.String(); strings.Count(out, "overloaded") != 1 || !strings.Contains(out, "slots_given_up=50") || !strings.Contains(out, "slots=1000") {
		t.Fatalf("log %q: want one overloaded line with slots_given_up=50 slots=1000", out)
	}
	minute(1000, 0)
	if p.lookOverload(last); gauge() != 0 {
		t.Errorf("a minute with none given up: overloaded %v, want 0", gauge())
	}
}
