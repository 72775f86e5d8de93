package keypace

import (
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/pacer/inflight"
)

// TestKeyInFlight: a key's records in hand follow its answer times at its
// ceiling rate and burst (not its rate cut by throttles), up to the
// pacer's upper bound; a key not known yet counts at the channel's limit
// (100/s, burst 20), and with no answer yet a 1 s answer time.
func TestKeyInFlight(t *testing.T) {
	p := localKeys(t, nil)
	var none inflight.Estimator
	if got := p.InFlight("unknown", &none, 1024); got != 120+20+32 {
		t.Errorf("unknown key: %d, want 172 (1.2 x 100/s x 1 s + burst 20 + 32)", got)
	}
	k := p.Get("slow", "to")
	defer k.Done()
	k.st.mu.Lock()
	k.st.limit = bucket.Limit{PerSecond: 400, Burst: 5} // cut by throttles
	k.st.pol = &KeyPolicy{Limit: bucket.Limit{PerSecond: 1000, Burst: 10}}
	k.st.mu.Unlock()
	var slow inflight.Estimator
	for range 100 {
		slow.Answered(500 * time.Millisecond)
	}
	if got := p.InFlight("slow", &slow, 1024); got != 600+10+32 {
		t.Errorf("1,000/s at 500 ms: %d, want 642 (1.2 x 1000/s x 0.5 s + burst 10 + 32)", got)
	}
	if got := p.InFlight("slow", &slow, 256); got != 256 {
		t.Errorf("upper bound 256: %d", got)
	}
}
