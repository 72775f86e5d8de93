package consumer

import (
	"context"
	"time"

	"github.com/pacerhq/pacer/internal/tick"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// OverloadEvery is how often the process looks at the share of its send
// slots given up as late, and at most how often it says it is overloaded.
const OverloadEvery = time.Minute

// OverloadShare is the share of a minute's send slots given up as late
// above which the process says it is overloaded: a process that carries
// its load gives up well under 1% (a sender woken late, now and then).
const OverloadShare = 0.01

// overload is what the last look saw: slots given up as late and every
// slot (used or given up), as counted since start.
type overload struct {
	lapsed, slots float64
}

// overloadLoop looks every OverloadEvery at the slots given up as late
// since the last look, sets pacer_overloaded and, while it is over
// OverloadShare, logs it once per look. A slot given up is taken again
// later, so nothing is sent above the rate: what an overloaded process
// loses is rate, and this says so rather than under-delivering quietly.
func (p *Pacer) overloadLoop(ctx context.Context) {
	var last overload
	tick.Every(ctx, OverloadEvery, func(time.Time) { last = p.lookOverload(last) })
}

// lookOverload is one look of overloadLoop after last; it returns this one.
func (p *Pacer) lookOverload(last overload) overload {
	cur := overload{lapsed: counterValue(p.m.lateSlots.WithLabelValues()), slots: sampleCount(p.m.latenessO)}
	lapsed, slots := cur.lapsed-last.lapsed, cur.slots-last.slots
	over := slots > 0 && lapsed > OverloadShare*slots
	g := p.m.overloaded.WithLabelValues()
	if !over {
		g.Set(0)
		return cur
	}
	g.Set(1)
	p.log.Warn("overloaded: send slots given up because their senders woke late; this process is asked for more than it carries (CPU, or too few places for slow answers): it sends what it can at the conforming rate; add replicas or cores",
		"slots_given_up", lapsed, "slots", slots, "share", lapsed/slots, "over", OverloadEvery)
	return cur
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
