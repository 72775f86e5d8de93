package consumer

import (
	"github.com/prometheus/client_golang/prometheus"
)

// backlogClasses are the label values of pacer_key_backlog_keys: a key's
// backlog (records held in memory plus the estimated parked ones) falls in
// the first class whose bound is above it.
var backlogClasses = []struct {
	name  string
	below int
}{{"1-9", 10}, {"10-99", 100}, {"100-999", 1000}, {"1000-9999", 10000}, {"10000+", 1 << 62}}

// queueMetrics are the per-key queue collectors: labels are backlog
// classes, never a pacing key.
type queueMetrics struct {
	parked      prometheus.Counter
	staleCopies prometheus.Counter
	backlog     *prometheus.Desc
	held        *prometheus.Desc
	fill        *prometheus.Desc
	handling    *prometheus.Desc
	pacerRef    *Pacer
}

func newQueueMetrics(p *Pacer) *queueMetrics {
	return &queueMetrics{
		pacerRef: p,
		parked: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "pacer", Name: "parked_total",
			Help: "Records parked: written to a retry topic, due at their estimated slot, because their pacing key held its lookahead bound in the partition (one Kafka write each; not an attempt).",
		}),
		staleCopies: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "pacer", Name: "parked_stale_total",
			Help: "Parked copies of strict-order keys dropped unsent because their chain ended with its partition's worker (a crash, a revoke): each record is sent already or read again from its main partition.",
		}),
		backlog: prometheus.NewDesc("pacer_key_backlog_keys",
			"Pacing keys with records waiting in this process, by backlog class (records held plus the estimated parked ones).",
			[]string{"class"}, nil),
		held: prometheus.NewDesc("pacer_lookahead_records",
			"Records held in the per-key queues of this process's partitions (waiting or being handled).", nil, nil),
		fill: prometheus.NewDesc("pacer_lookahead_fill",
			"Records held over the partitions' capacity (partitions owned x 2,000), 0..2; at 1 fetching pauses; a fetch asked for below 2 is held whole, and records are parked for a full partition only once it holds 2.", nil, nil),
		handling: prometheus.NewDesc("pacer_inflight_records",
			"Records being handled by this process (waiting for their slot, their claim or the provider's answer), at most PACER_PROCESS_INFLIGHT; the others held wait in their key's queue.", nil, nil),
	}
}

func (m *queueMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.parked.Describe(ch)
	m.staleCopies.Describe(ch)
	ch <- m.backlog
	ch <- m.held
	ch <- m.fill
	ch <- m.handling
}

func (m *queueMetrics) Collect(ch chan<- prometheus.Metric) {
	m.parked.Collect(ch)
	m.staleCopies.Collect(ch)
	p := m.pacerRef
	p.mu.Lock()
	parts := len(p.workers)
	p.mu.Unlock()
	counts := make([]int, len(backlogClasses))
	keys, held := p.backlogs()
	for _, b := range keys {
		for i, c := range backlogClasses {
			if b.Held+b.Parked < c.below {
				counts[i]++
				break
			}
		}
	}
	for i, c := range backlogClasses {
		ch <- prometheus.MustNewConstMetric(m.backlog, prometheus.GaugeValue, float64(counts[i]), c.name)
	}
	ch <- prometheus.MustNewConstMetric(m.held, prometheus.GaugeValue, float64(held))
	fill := 0.0
	if parts > 0 {
		fill = float64(held) / float64(parts*p.cfg.MaxQueued)
	}
	ch <- prometheus.MustNewConstMetric(m.fill, prometheus.GaugeValue, fill)
	ch <- prometheus.MustNewConstMetric(m.handling, prometheus.GaugeValue, float64(p.places.inUse(p.cfg.ProcessInFlight)))
}
