package keypace

// Tests of slot.go: how a sender takes its slot (acquire) around a
// decrease of the key's rate, and how late after its slot it may still
// send (lateSlot).

import (
	"context"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/pacer/keypace/keypacetest"
	"github.com/prometheus/client_golang/prometheus/testutil"
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

// lateSlot gives a late sender half the headroom the pacing burst leaves
// under the provider's, never less than the floor of half a slot interval
// (at most a quarter of the burst's refill time, at least 1 ms).
func TestLateSlotIsHalfTheHeadroom(t *testing.T) {
	for _, c := range []struct {
		name         string
		ceiling, lim bucket.Limit
		want         time.Duration
	}{
		{"1000/s burst 10 paced at burst 5", bucket.Limit{PerSecond: 1000, Burst: 10}, bucket.Limit{PerSecond: 1000, Burst: 5}, 2500 * time.Microsecond},
		{"80/s burst 10 paced at burst 8", bucket.Limit{PerSecond: 80, Burst: 10}, bucket.Limit{PerSecond: 80, Burst: 8}, 12500 * time.Microsecond},
		{"adapted to 40/s of 80/s burst 10, paced at burst 3", bucket.Limit{PerSecond: 80, Burst: 10}, bucket.Limit{PerSecond: 40, Burst: 3}, 25 * time.Millisecond},
		{"no headroom at 1000/s: the 1 ms floor", bucket.Limit{PerSecond: 1000, Burst: 10}, bucket.Limit{PerSecond: 1000, Burst: 10}, time.Millisecond},
		{"no headroom at 80/s: a quarter of the burst's refill", bucket.Limit{PerSecond: 80, Burst: 1}, bucket.Limit{PerSecond: 80, Burst: 1}, 3125 * time.Microsecond},
		{"0.5/s burst 1: a quarter of the burst's refill", bucket.Limit{PerSecond: 0.5, Burst: 1}, bucket.Limit{PerSecond: 0.4938, Burst: 1}, seconds(0.25 / 0.4938)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := lateSlot(c.ceiling, c.lim); got != c.want {
				t.Fatalf("lateSlot(%v, %v) = %v, want %v", c.ceiling, c.lim, got, c.want)
			}
		})
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// The reason lateSlot may grow with the headroom: sends made up to
// lateSlot after slots that conform to the paced limit never find a strict
// provider bucket of the configured limit (rate, burst) empty, whichever
// sends are late (every slot of a span late by the most and the next
// span's on time, the worst being the first span after an idle bucket: its
// burst late; and random lateness). The same check with
// lateness of the whole headroom plus two slots does find it empty, so the
// check can fail.
func TestLateSendsWithinHeadroomFitTheProvider(t *testing.T) {
	for _, c := range []struct{ ceiling, lim bucket.Limit }{
		{bucket.Limit{PerSecond: 1000, Burst: 10}, bucket.Limit{PerSecond: 1000, Burst: 5}},
		{bucket.Limit{PerSecond: 80, Burst: 10}, bucket.Limit{PerSecond: 80, Burst: 8}},
		{bucket.Limit{PerSecond: 80, Burst: 10}, bucket.Limit{PerSecond: 40, Burst: 3}},
		{bucket.Limit{PerSecond: 100, Burst: 20}, bucket.Limit{PerSecond: 100, Burst: 10}},
	} {
		// The provider's bucket at the paced rate, as lateSlot reads it.
		provider := bucket.Limit{PerSecond: c.lim.PerSecond, Burst: int(float64(c.ceiling.Burst) * min(c.lim.PerSecond/c.ceiling.PerSecond, 1))}
		late := lateSlot(c.ceiling, c.lim)
		slots := greedySlots(c.lim, 3*time.Second)
		headroom := time.Duration(float64(provider.Burst-c.lim.Burst) / c.lim.PerSecond * float64(time.Second))
		interval := time.Duration(float64(time.Second) / c.lim.PerSecond)
		for _, l := range []time.Duration{late, headroom + 2*interval} {
			worst := 0
			// Every slot in [cut - l, cut) late by l, the rest on time; the
			// worst cut follows an idle bucket (cut = l: the burst late).
			for cut := time.Duration(0); cut < 2*time.Second; cut += interval / 4 {
				sends := make([]time.Duration, len(slots))
				for i, s := range slots {
					sends[i] = s
					if s >= cut-l && s < cut {
						sends[i] = s + l
					}
				}
				worst = max(worst, refused(provider, sends))
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for range 200 {
				sends := make([]time.Duration, len(slots))
				for i, s := range slots {
					sends[i] = s + time.Duration(rng.Int64N(int64(l)+1))
				}
				worst = max(worst, refused(provider, sends))
			}
			if l == late && worst > 0 {
				t.Errorf("%v paced at %v, sends up to %v late: a provider bucket of %v refused %d", c.ceiling, c.lim, l, provider, worst)
			}
			if l != late && worst == 0 {
				t.Errorf("%v paced at %v, sends up to %v late (beyond the headroom): no refusal; the check cannot fail", c.ceiling, c.lim, l)
			}
		}
	}
}

// greedySlots returns the slots a bucket of lim grants to demand far above
// it for span from full: burst at 0, then one per interval.
func greedySlots(lim bucket.Limit, span time.Duration) []time.Duration {
	var s []time.Duration
	for i := 0; ; i++ {
		at := time.Duration(math.Ceil(float64(max(i-lim.Burst+1, 0)) / lim.PerSecond * float64(time.Second)))
		if at > span {
			return s
		}
		s = append(s, at)
	}
}

// refused counts the sends a strict provider bucket of lim, full at the
// first send, refuses (a refused send takes no token).
func refused(lim bucket.Limit, sends []time.Duration) int {
	sort.Slice(sends, func(i, j int) bool { return sends[i] < sends[j] })
	tokens, last, n := float64(lim.Burst), sends[0], 0
	for _, s := range sends {
		tokens = min(tokens+(s-last).Seconds()*lim.PerSecond, float64(lim.Burst))
		last = s
		if tokens < 1-1e-9 {
			n++
			continue
		}
		tokens--
	}
	return n
}

// lateBucket grants slots that started the given time ago, one per call,
// then slots one interval ahead: a sender woken that late.
type lateBucket struct {
	Bucket
	mu    sync.Mutex
	late  []time.Duration
	calls int
}

func (b *lateBucket) Reserve(context.Context, string, string, bucket.Limit, int, time.Duration) (bucket.Reservation, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	at := time.Now().Add(time.Millisecond)
	if len(b.late) > 0 {
		at = time.Now().Add(-b.late[0])
		b.late = b.late[1:]
	}
	return bucket.Reservation{OK: true, At: at, Delay: max(time.Until(at), 0)}, nil
}

// acquire keeps a slot its sender woke for within lateSlot (half the
// headroom) and gives one up beyond it, taking a new one; with no headroom
// the 1 ms floor applies.
func TestAcquireGivesUpOnlySlotsLaterThanTheHeadroomAllows(t *testing.T) {
	for _, c := range []struct {
		name    string
		ceiling bucket.Limit
		late    []time.Duration
		given   float64 // slots given up
		calls   int
	}{
		{"2.4 ms late within 2.5 ms", bucket.Limit{PerSecond: 1000, Burst: 10}, []time.Duration{2400 * time.Microsecond}, 0, 1},
		{"2.6 ms late beyond 2.5 ms", bucket.Limit{PerSecond: 1000, Burst: 10}, []time.Duration{2600 * time.Microsecond}, 1, 2},
		{"1.5 ms late without headroom", bucket.Limit{PerSecond: 1000, Burst: 5}, []time.Duration{1500 * time.Microsecond}, 1, 2},
		{"0.9 ms late without headroom", bucket.Limit{PerSecond: 1000, Burst: 5}, []time.Duration{900 * time.Microsecond}, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := &lateBucket{late: c.late}
				p := testKeys(t, b, &keypacetest.Adapter{}, nil)
				p.cfg.LeaseSize = 1 // one reservation per slot
				st := p.keyState("k")
				defer p.done(st)
				lim := bucket.Limit{PerSecond: 1000, Burst: 5}
				wait, _, _, ok := p.acquire(t.Context(), "k", "to", false, st, KeyPolicy{Limit: c.ceiling}, lim, testLog, 0, nil)
				if !ok || wait != 0 {
					t.Fatalf("acquire: wait %v ok %v, want a slot", wait, ok)
				}
				if got := testutil.ToFloat64(p.mt.LateSlots); got != c.given || b.calls != c.calls {
					t.Fatalf("%v slots given up in %d reservations, want %v in %d", got, b.calls, c.given, c.calls)
				}
			})
		})
	}
}

// leaseCounter counts the Reserve and Lease calls made of a Local bucket.
type leaseCounter struct {
	*bucket.Local
	mu              sync.Mutex
	reserves, lease int
}

func (b *leaseCounter) Reserve(ctx context.Context, channel, key string, lim bucket.Limit, cost int, maxWait time.Duration) (bucket.Reservation, error) {
	b.mu.Lock()
	b.reserves++
	b.mu.Unlock()
	return b.Local.Reserve(ctx, channel, key, lim, cost, maxWait)
}

func (b *leaseCounter) Lease(ctx context.Context, channel, key string, lim bucket.Limit, n int, maxWait time.Duration) (bucket.Lease, error) {
	b.mu.Lock()
	b.lease++
	b.mu.Unlock()
	return b.Local.Lease(ctx, channel, key, lim, n, maxWait)
}

// leasingKey makes keys over a bucket that counts its leases and
// reservations, with key "k" limited to lim. It returns the bucket, k's
// state (in hand until t ends), the size of k's lease at lim and a call
// reserving k's next slot (to recipient "to").
func leasingKey(t *testing.T, lim bucket.Limit) (*leaseCounter, *keyState, int, func() (bucket.Reservation, error)) {
	b := &leaseCounter{Local: bucket.NewLocal(bucket.LocalConfig{})}
	p := testKeys(t, b, &keypacetest.Adapter{}, nil)
	st := p.keyState("k")
	t.Cleanup(func() { p.done(st) })
	reserve := func() (bucket.Reservation, error) {
		return p.reserve(t.Context(), b, "k", "to", st, KeyPolicy{Limit: lim}, lim)
	}
	return b, st, p.cfg.leaseSize(lim, lim), reserve
}

// A key under 100 msgs/s leases only while as many senders wait as a
// lease holds; once it holds leased slots, a lone sender takes the next of
// them rather than a reservation of its own, which would cost a bucket
// call and leave the held slot to lapse (with a slow provider the senders
// waiting dip below a lease's size while their records are on the wire).
func TestReserveTakesHeldLeasedSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, st, n, reserve := leasingKey(t, bucket.Limit{PerSecond: 80, Burst: 8})
		if n != 16 {
			t.Fatalf("lease size at 80/s: %d, want 16", n)
		}
		st.normalWaiting.Add(int32(n)) // a backlog: the key leases
		first, err := reserve()
		if err != nil || !first.OK {
			t.Fatalf("first slot: %+v %v", first, err)
		}
		st.normalWaiting.Add(int32(1 - n)) // one sender waits now
		second, err := reserve()
		if err != nil || !second.OK {
			t.Fatalf("second slot: %+v %v", second, err)
		}
		st.normalWaiting.Add(-1)
		if b.lease != 1 || b.reserves != 0 {
			t.Errorf("bucket calls for 2 slots: %d leases, %d reservations; want the lease's second slot (1 lease, 0 reservations)", b.lease, b.reserves)
		}
		// Its slots spent (lapsed), the lone sender reserves its own.
		time.Sleep(time.Second)
		st.normalWaiting.Add(1)
		defer st.normalWaiting.Add(-1)
		if r, err := reserve(); err != nil || !r.OK {
			t.Fatalf("third slot: %+v %v", r, err)
		}
		if b.lease != 1 || b.reserves != 1 {
			t.Errorf("bucket calls after the lease lapsed: %d leases, %d reservations; want 1 and 1", b.lease, b.reserves)
		}
	})
}

// A key whose senders used its last lease whole, as it ran, leases again
// though fewer senders wait now than a lease holds: the senders kept up
// with the rate, and a reservation per sender would cost a bucket call
// each (with a slow provider, most of the key's Redis commands).
func TestReserveLeasesAgainAfterAWholeLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, st, n, reserve := leasingKey(t, bucket.Limit{PerSecond: 80, Burst: 8})
		st.normalWaiting.Add(int32(n))
		for i := range n { // the lease's every slot, handed out at once
			if r, err := reserve(); err != nil || !r.OK {
				t.Fatalf("slot %d: %+v %v", i, r, err)
			}
		}
		st.normalWaiting.Add(int32(1 - n)) // one sender waits now
		defer st.normalWaiting.Add(-1)
		if r, err := reserve(); err != nil || !r.OK {
			t.Fatalf("slot %d: %+v %v", n, r, err)
		}
		if b.lease != 2 || b.reserves != 0 {
			t.Errorf("bucket calls for %d slots after a lease used whole: %d leases, %d reservations; want 2 leases", n+1, b.lease, b.reserves)
		}
	})
}

// A key at 100 msgs/s or more (a lease of 20 slots or more) leases only
// while another of its senders waits besides the one asking: a lone sender
// (strict order, one record in hand) whose answers take longer than a slot
// interval could use a lease's slots only late or one interval later, so it
// reserves its own, granted at once when the key is behind its rate.
func TestReserveLeasesOnlyForWaitingSenders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, st, n, reserve := leasingKey(t, bucket.Limit{PerSecond: 200, Burst: 1})
		if n != 40 {
			t.Fatalf("lease size at 200/s: %d, want 40", n)
		}
		st.normalWaiting.Add(1) // a lone sender, one message after another
		for i := range 3 {
			r, err := reserve()
			if err != nil || !r.OK {
				t.Fatalf("slot %d: %+v %v", i, r, err)
			}
			time.Sleep(10 * time.Millisecond) // its send, longer than the 5 ms interval
		}
		if b.lease != 0 || b.reserves != 3 {
			t.Errorf("bucket calls of a lone sender for 3 slots: %d leases, %d reservations; want 3 reservations", b.lease, b.reserves)
		}
		st.normalWaiting.Add(1) // a second sender waits
		defer st.normalWaiting.Add(-2)
		for i := range 2 {
			if r, err := reserve(); err != nil || !r.OK {
				t.Fatalf("slot %d with 2 senders: %+v %v", i, r, err)
			}
		}
		if b.lease != 1 || b.reserves != 3 {
			t.Errorf("bucket calls with 2 senders waiting for 2 slots: %d leases, %d reservations; want 1 lease and the 3 reservations before", b.lease, b.reserves)
		}
	})
}
