package consumer

import (
	"context"
	"time"

	"github.com/pacerhq/pacer/internal/tick"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// OverloadEvery is the span over which the process judges the share of
// its send slots given up as late, and at most how often it says so in
// its log; pacer_overloaded follows that span's share every OverloadLook.
const OverloadEvery = time.Minute

// OverloadLook is how often the process looks at its slots given up as
// late: pacer_overloaded turns 1 within this long of the last minute's
// share passing OverloadShare, not a minute later.
const OverloadLook = 5 * time.Second

// OverloadShare is the share of a minute's send slots given up as late
// above which the process says it is overloaded: a process that carries
// its load gives up well under 1% (a sender woken late, now and then).
const OverloadShare = 0.01

// overload is one look: slots given up as late and every slot (used or
// given up), as counted since start, and when.
type overload struct {
	lapsed, slots float64
	at            time.Time
}

// overloadWatch is what overloadLoop keeps between looks: the looks of
// the last OverloadEvery, oldest first, and when it last logged.
type overloadWatch struct {
	looks  []overload
	logged time.Time
}

// overloadLoop looks every OverloadLook at the slots given up as late
// over the last OverloadEvery, sets pacer_overloaded and, while that share
// is over OverloadShare, logs it at most once per OverloadEvery. A slot
// given up is taken again later, so nothing is sent above the rate: what
// an overloaded process loses is rate, and this says so rather than
// under-delivering quietly.
func (p *Pacer) overloadLoop(ctx context.Context) {
	var w overloadWatch
	w.looks = append(w.looks, p.overloadNow(time.Now()))
	tick.Every(ctx, OverloadLook, func(now time.Time) { p.lookOverload(&w, now) })
}

// Overloaded reports whether the last look found more than OverloadShare
// of the last minute's send slots given up as late (pacer_overloaded): the
// status page names such a replica.
func (p *Pacer) Overloaded() bool { return p.isOverloaded.Load() }

// overloadNow reads the counters at now.
func (p *Pacer) overloadNow(now time.Time) overload {
	return overload{lapsed: counterValue(p.m.lateSlots.WithLabelValues()), slots: sampleCount(p.m.latenessO), at: now}
}

// lookOverload is one look of overloadLoop at now: the share over the
// looks kept since now - OverloadEvery (the oldest kept at or before it).
func (p *Pacer) lookOverload(w *overloadWatch, now time.Time) {
	cur := p.overloadNow(now)
	for len(w.looks) > 1 && !w.looks[1].at.After(now.Add(-OverloadEvery)) {
		w.looks = w.looks[1:]
	}
	var from overload
	if len(w.looks) > 0 {
		from = w.looks[0]
	}
	w.looks = append(w.looks, cur)
	lapsed, slots := cur.lapsed-from.lapsed, cur.slots-from.slots
	over := slots > 0 && lapsed > OverloadShare*slots
	g := p.m.overloaded.WithLabelValues()
	p.isOverloaded.Store(over)
	if !over {
		g.Set(0)
		return
	}
	g.Set(1)
	if !w.logged.IsZero() && now.Sub(w.logged) < OverloadEvery {
		return
	}
	w.logged = now
	p.log.Warn("overloaded: send slots given up because their senders woke late; this process is asked for more than it carries (CPU, or too few places for slow answers): it sends what it can at the conforming rate; add replicas or cores",
		"slots_given_up", lapsed, "slots", slots, "share", lapsed/slots, "over", cur.at.Sub(from.at).Round(time.Second))
}

// counterValue is c's value (0 if c cannot be read).
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if c.Write(&m) != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// sampleCount is the number of observations of o, a histogram (0 if o
// cannot be read as one).
func sampleCount(o prometheus.Observer) float64 {
	h, ok := o.(prometheus.Metric)
	if !ok {
		return 0
	}
	var m dto.Metric
	if h.Write(&m) != nil {
		return 0
	}
	return float64(m.GetHistogram().GetSampleCount())
}
