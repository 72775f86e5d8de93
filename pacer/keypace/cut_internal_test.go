package keypace

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/pacer/keypace/keypacetest"
)

// aheadBucket grants every reservation a slot 100 ms ahead.
type aheadBucket struct {
	Bucket
	mu    sync.Mutex
	calls int
}

func (b *aheadBucket) Reserve(context.Context, string, string, bucket.Limit, int, time.Duration) (bucket.Reservation, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	now := time.Now()
	return bucket.Reservation{OK: true, At: now.Add(100 * time.Millisecond), Delay: 100 * time.Millisecond, Granted: now}, nil
}

// A sender that learns of a decrease while it sleeps on its slot (a
// refresh: another replica made it) gives the slot up only if it was
// granted before the decrease, which cleared the debt of such slots; a
// slot granted after it is the new schedule and is kept, paced at the rate
// it was granted at (its throttle is the tail of that decrease). Dropping
// those too left their places unused by every replica: a gap of up to a
// second of the key's rate after each decrease.
func TestAcquireKeepsSlotsGrantedAfterADecrease(t *testing.T) {
	for _, c := range []struct {
		name  string
		since time.Duration // the decrease, this long before the refresh that learns of it
		calls int           // reservations
		paced float64
	}{
		{"decrease before the grant: kept", 80 * time.Millisecond, 1, 100},
		{"decrease after the grant: dropped", 20 * time.Millisecond, 2, 50},
		{"decrease at an unknown time: dropped", -1, 2, 50},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := &aheadBucket{}
				p := testKeys(t, b, &keypacetest.Adapter{}, nil)
				p.cfg.LeaseSize = 1 // one reservation per slot
				st := p.keyState("k")
				defer p.done(st)
				ceiling := bucket.Limit{PerSecond: 100, Burst: 10}
				type result struct {
					paced float64
					ok    bool
				}
				done := make(chan result, 1)
				time.Sleep(50 * time.Millisecond) // the grant at 50 ms
				go func() {
					_, _, paced, ok := p.acquire(t.Context(), "k", "to", false, st, KeyPolicy{Limit: ceiling}, ceiling, testLog, 0, nil)
					done <- result{paced, ok}
				}()
				synctest.Wait()
				time.Sleep(50 * time.Millisecond) // the refresh at 100 ms, before the slot at 150 ms
				st.mu.Lock()
				st.set(adapt.Adapted{Rate: 50, Ceiling: 100, SinceDecrease: c.since}, ceiling, time.Now())
				st.mu.Unlock()
				r := <-done
				b.mu.Lock()
				calls := b.calls
				b.mu.Unlock()
				if !r.ok || calls != c.calls || r.paced != c.paced {
					t.Fatalf("acquire: ok %v after %d reservations, paced at %v; want %d, paced at %v", r.ok, calls, r.paced, c.calls, c.paced)
				}
			})
		})
	}
}
