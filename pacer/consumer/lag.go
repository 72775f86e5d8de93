package consumer

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// lagEvery is how often a replica reads its consumer group's lag.
const lagEvery = 15 * time.Second

// newLagGauge registers pacer_consumer_lag_records{topic}: the records of
// each consumed topic (main and retry) past the group's committed offsets,
// summed over partitions, as read by this replica. Every replica reports
// the whole group's lag, so aggregate with max, not sum.
func newLagGauge(reg prometheus.Registerer) (*prometheus.GaugeVec, error) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "pacer", Name: "consumer_lag_records",
		Help: "Records of the topic past the consumer group's committed offsets (end offset minus commit, summed over partitions; a partition without a commit counts from its start), read every 15 s. Every replica reports the whole group's lag: aggregate with max.",
	}, []string{"topic"})
	return g, reg.Register(g)
}

// lagLoop reads the group's lag every lagEvery until ctx ends: one
// DescribeGroups, OffsetFetch and ListOffsets round per reading. A failed
// reading keeps the last values (the watch on Kafka reports the outage).
func (p *Pacer) lagLoop(ctx context.Context, cl *kgo.Client, topics []string) {
	adm := kadm.NewClient(cl)
	// read sets the gauges and reports whether it knew any topic's lag.
	read := func() bool {
		rctx, cancel := context.WithTimeout(ctx, lagEvery)
		defer cancel()
		lags, err := adm.Lag(rctx, p.cfg.Group)
		if err != nil {
			p.log.Debug("consumer lag not read", "err", err)
			return false
		}
		dl, ok := lags[p.cfg.Group]
		if !ok || dl.Error() != nil {
			p.log.Debug("consumer lag not read", "err", dl.Error())
			return false
		}
		seen := false
		for _, t := range topics {
			var sum int64
			known := false
			for _, pl := range dl.Lag[t] {
				if pl.Lag >= 0 {
					sum += pl.Lag
					known = true
				}
			}
			if known {
				p.lag.WithLabelValues(t).Set(float64(sum))
				seen = true
			}
		}
		return seen
	}
	// Every second until the group has committed offsets (a fresh group
	// has no lag to tell), then every lagEvery.
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if read() {
			t.Reset(lagEvery)
		} else {
			t.Reset(time.Second)
		}
	}
}
