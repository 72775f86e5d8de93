package ingest

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/pacerhq/pacer/pacer/ingest/quota"
)

// The RateLimit-Policy and RateLimit fields, as
// draft-ietf-httpapi-ratelimit-headers-10 (and later) defines them: both are
// Structured Field Lists (RFC 9651) of Items whose value is the policy name
// as a String, with parameters
//
//	RateLimit-Policy: "tenant";q=50;w=1;pacer-burst=100, "tenant-day";q=1000000;w=86400;pacer-unit="messages"
//	RateLimit: "tenant-day";r=12;t=3600
//
// q is the quota (Integer), w the window in seconds (Integer >= 1), r the
// quota units remaining (at most q) and t the seconds until more quota is
// made available (draft -10: a sliding window gains quota before its period
// ends): a bucket's next whole unit, a window's next unit beyond r, which
// is the Retry-After a request for r+1 units would get (quota.TierState's
// Reset, rounded up).
// The draft's quota units are "requests", "content-bytes" and
// "concurrent-requests"; message tiers count envelopes, which the draft
// does not register, so they say so in the vendor parameter pacer-unit and
// leave qu out. A token bucket is advertised as its rate over one second
// (q = rate, w = 1; a rate below 1/s as q = 1 over w = ceil(1/rate) s), with
// its capacity in pacer-burst. RateLimit names the one policy closest to
// its limit (the lowest r/q; on a 429 the refusing tier).
// Source: https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/
// (fields "RateLimit-Policy" and "RateLimit", read 2026-11).

// quotaOf returns the q and w a tier is advertised with (see above).
func quotaOf(t quota.Tier) (q, w int64) {
	switch {
	case t.Bucket != nil:
		q, w = int64(math.Round(t.Bucket.PerSecond)), 1
		if t.Bucket.PerSecond < 1 {
			q, w = 1, int64(math.Ceil(1/t.Bucket.PerSecond))
		}
		return max(q, 1), w
	case t.Window != nil:
		return int64(t.Window.Max), max(int64(t.Window.Period/time.Second), 1)
	}
	return 0, 1
}

// policyItem renders one tier as a RateLimit-Policy list member.
func policyItem(t quota.Tier) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%q", t.Name)
	q, w := quotaOf(t)
	switch {
	case t.Bucket != nil:
		fmt.Fprintf(&b, ";q=%d;w=%d;pacer-burst=%d", q, w, t.Bucket.Burst)
	case t.Window != nil:
		fmt.Fprintf(&b, ";q=%d;w=%d", q, w)
	}
	if t.Unit == quota.PerMessage {
		b.WriteString(`;pacer-unit="messages"`)
	}
	return b.String()
}

// closest returns the index of the tier closest to its limit: on a
// refusal the refusing tier, else the lowest remaining share of capacity.
func closest(tiers []quota.Tier, res quota.Result) int {
	if res.Refused >= 0 {
		return res.Refused
	}
	best, share := 0, math.Inf(1)
	for i, t := range tiers {
		if s := float64(res.Tiers[i].Remaining) / float64(t.Capacity()); s < share {
			best, share = i, s
		}
	}
	return best
}

// seconds rounds d up to whole seconds, for t and Retry-After.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// setRateLimit writes both fields for tiers and their answer.
func setRateLimit(h http.Header, tiers []quota.Tier, res quota.Result) {
	if len(tiers) == 0 || len(res.Tiers) != len(tiers) {
		return
	}
	items := make([]string, len(tiers))
	for i, t := range tiers {
		items[i] = policyItem(t)
	}
	h.Set("RateLimit-Policy", strings.Join(items, ", "))
	i := closest(tiers, res)
	st := res.Tiers[i]
	// r is the quota units remaining of the policy's q: a bucket's burst
	// above its rate is not advertised as more than q. A refused request
	// leaves them as they were: a batch larger than what remains is
	// refused with r naming what a smaller one could still take.
	q, _ := quotaOf(tiers[i])
	r := min(int64(st.Remaining), q)
	reset := st.Reset
	if st.Wait > reset {
		reset = st.Wait
	}
	h.Set("RateLimit", fmt.Sprintf("%q;r=%d;t=%d", tiers[i].Name, r, seconds(reset)))
}
