//go:build e2e

package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
)

// BenchmarkRedisCallsPerMessage drives `pacer run` on a real Kafka broker
// and redis-server at 80, 1,000 and 10,000 msgs/s on one pacing key and
// reports what Redis sees per delivered message: token-bucket script calls
// (reservations, or leases of LeaseSize slots), plus the idempotency claim
// (one script) and delivered record (one SET) that every message costs.
// It runs once per sub-benchmark whatever b.N is: the figures are ratios.
func BenchmarkRedisCallsPerMessage(b *testing.B) {
	for _, c := range []struct{ rate, seconds, inflight int }{{80, 10, 32}, {1000, 10, 64}, {10000, 6, 512}} {
		b.Run(fmt.Sprintf("rate=%d", c.rate), func(b *testing.B) {
			const key = "1065488880001"
			e := newE2E(b, whatsapptest.Config{})
			n := c.rate * c.seconds
			var sb strings.Builder
			for i := range n {
				fmt.Fprintf(&sb, `{"id":"b-%d","key":%q,"to":"1555%07d"}`+"\n", i, key, i)
			}
			if code, out, errs := e.publish(sb.String(), "--partitions", "1"); code != 0 {
				b.Fatalf("publish: %d %s %s", code, out, errs)
			}
			p := e.run(fmt.Sprintf("PACER_WHATSAPP_RATE=%d", c.rate), fmt.Sprintf("PACER_WHATSAPP_BURST=%d", max(10, c.rate/100)),
				fmt.Sprintf("PACER_INFLIGHT=%d", c.inflight))
			e.waitDelivered(n, time.Duration(c.seconds*4+60)*time.Second, p)
			calls, delivered := p.metricSum(b, "pacer_bucket_calls_total"), p.metricSum(b, "pacer_delivered_total")
			p.stop(b)
			s := e.fake.Stats()[key]
			secs := s.Last.Sub(s.First).Seconds()
			b.ReportMetric(calls/delivered, "bucket-calls/msg")
			b.ReportMetric((calls+delivered)/delivered, "scripts/msg")
			b.ReportMetric(float64(s.Delivered)/secs, "msgs/s")
			b.ReportMetric(float64(s.Max1s), "max-in-1s")
			b.Logf("rate %d: delivered %d in %.2fs (%.0f msgs/s), bucket calls %.0f (%.4f per message), max in 1s %d (limit %d + burst %d), duplicates %d",
				c.rate, s.Delivered, secs, float64(s.Delivered)/secs, calls, calls/delivered, s.Max1s, c.rate, max(10, c.rate/100), s.Duplicates)
		})
	}
}
