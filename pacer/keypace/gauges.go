package keypace

import (
	"strconv"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/prometheus/client_golang/prometheus"
)

// utilization returns Σ achieved / Σ adapted rate over the keys of this
// process that had a record in hand in the last achievedOver (busy keys:
// their rate was the limit, not their demand); 0 when there are none.
func (p *Keys) utilization() float64 {
	var got, allowed float64
	for _, c := range p.byClass() {
		got += c.achievedBusy
		allowed += c.allowedBusy
	}
	if allowed <= 0 {
		return 0
	}
	return got / allowed
}

// classSums are the sums behind pacer_utilization and pacer_rate_achieved
// for one key class.
type classSums struct {
	achieved     float64 // accepted msgs/s of the active keys
	achievedBusy float64 // the same, of the keys with a record in hand lately
	allowedBusy  float64 // adapted msgs/s of the keys with a record in hand lately
}

// keyClass names the class of a key with configured limit lim: its
// configured rate, such as "80/s" or "1000/s" (WhatsApp's throughput
// tiers). Few distinct values, so a bounded label.
func keyClass(lim bucket.Limit) string {
	return strconv.FormatFloat(lim.PerSecond, 'g', 6, 64) + "/s"
}

// byClass sums the keys of this process by key class.
func (p *Keys) byClass() map[string]classSums {
	now := nowInstant()
	out := map[string]classSums{}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, st := range p.m {
		st.mu.Lock()
		active := st.users > 0 || now.Sub(st.lastSeen) <= activeFor
		busy := (st.users > 0 || now.Sub(st.lastSeen) < achievedOver) && !st.mark.IsZero()
		if active || busy {
			k := keyClass(st.pol.Limit)
			c := out[k]
			if active {
				c.achieved += st.achieved
			}
			if busy {
				c.achievedBusy += st.achieved
				c.allowedBusy += st.adapted.Rate
			}
			out[k] = c
		}
		st.mu.Unlock()
	}
	return out
}

// classGauges is the collector of pacer_rate_achieved and
// pacer_utilization by key_class.
type classGauges struct {
	p                 *Keys
	achieved, utilize *prometheus.Desc
}

func (c classGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.achieved
	ch <- c.utilize
}

func (c classGauges) Collect(ch chan<- prometheus.Metric) {
	for class, s := range c.p.byClass() {
		ch <- prometheus.MustNewConstMetric(c.achieved, prometheus.GaugeValue, s.achieved, class)
		u := 0.0
		if s.allowedBusy > 0 {
			u = s.achievedBusy / s.allowedBusy
		}
		ch <- prometheus.MustNewConstMetric(c.utilize, prometheus.GaugeValue, u, class)
	}
}

// Gauges returns the per-channel gauges computed from the keys this
// process sent for in the last activeFor.
func (p *Keys) Gauges() []prometheus.Collector {
	sum := func(f func(st *keyState, now instant) float64) func() float64 {
		return func() float64 {
			now := nowInstant()
			p.mu.Lock()
			defer p.mu.Unlock()
			total := 0.0
			for _, st := range p.m {
				st.mu.Lock()
				if st.users > 0 || now.Sub(st.lastSeen) <= activeFor {
					total += f(st, now)
				}
				st.mu.Unlock()
			}
			return total
		}
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	g := func(name, help string, f func(st *keyState, now instant) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "pacer", Name: name, Help: help}, sum(f))
	}
	return []prometheus.Collector{
		g("keys_active", "Pacing keys this process sent for in the last 5 minutes.",
			func(*keyState, instant) float64 { return 1 }),
		g("rate_current", "Adapted rate summed over active pacing keys, in messages per second.",
			func(st *keyState, _ instant) float64 { return st.limit.PerSecond }),
		g("rate_configured", "Configured rate (the AIMD ceiling) summed over active pacing keys, in messages per second.",
			func(st *keyState, _ instant) float64 { return st.pol.Limit.PerSecond }),
		g("keys_cooldown", "Active pacing keys in a cooldown.",
			func(st *keyState, now instant) float64 { return b(st.cooldownUntil.After(now)) }),
		g("keys_at_floor", "Active pacing keys whose adapted rate is at the AIMD floor.",
			func(st *keyState, _ instant) float64 { return b(st.adapted.AtFloor) }),
		g("breakers_open", "Active pacing keys whose breaker is open or half-open.",
			func(st *keyState, _ instant) float64 { return b(st.breaker != adapt.BreakerClosed) }),
		classGauges{p: p,
			achieved: prometheus.NewDesc("pacer_rate_achieved",
				"Accepted sends per second summed over active pacing keys (each measured over at least 5 s), by key class (the keys' configured rate).",
				[]string{"key_class"}, nil),
			utilize: prometheus.NewDesc("pacer_utilization",
				"Achieved / allowed rate over the pacing keys that had messages in hand in the last 5 s, by key class (the keys' configured rate): accepted sends per second divided by their adapted rates. Near 1 when the pacer sends at the limit it was given; below it, sends stalled or slots lapsed.",
				[]string{"key_class"}, nil)},
	}
}
