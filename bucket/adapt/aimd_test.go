package adapt_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The operations of an aimd step table.
const (
	opThrottle = iota // Throttled(hint)
	opRecover         // Recover
	opRead            // Adapted
)

// capacityAIMD is the configuration of the tests of a capacity found:
// halving capped at Backoff 0.9 of the estimate, a 10 ms cooldown, a
// window (probe interval) of window, probes of +10% doubling on evidence.
func capacityAIMD(window time.Duration) adapt.AIMD {
	return adapt.AIMD{Decrease: 0.5, Backoff: 0.9, Persist: 2 * time.Second, MinEpisode: 400 * time.Millisecond,
		NoRefillPause: true, Coalesce: 100 * time.Millisecond, MinCooldown: 10 * time.Millisecond, Window: window,
		Factor: 1.1, Accelerate: 2}
}

// capacity40 are the first steps of those tests under capacityAIMD: a
// lone throttle at 100/s and two of its burst, then one with 20 accepted
// in 0.5 s (4 of 24 requests refused), a capacity of 40/s; the cut stops
// at 50 (Decrease).
func capacity40() []aimdStep {
	const ms, cd = time.Millisecond, 10 * time.Millisecond
	return []aimdStep{
		{at: 0, op: opThrottle, rate: 100, cooldown: cd},
		{at: 50 * ms, op: opThrottle, rate: 100, cooldown: cd},
		{at: 60 * ms, op: opThrottle, rate: 100, cooldown: cd},
		{at: 500 * ms, op: opThrottle, rate: 50, change: -1, cooldown: cd, accepted: 20},
	}
}

// aimdStep is one step of a step table for the adaptive rate.
type aimdStep struct {
	at       time.Duration // since the start of the test
	op       int           // opThrottle, opRecover or opRead
	hint     time.Duration // throttle: the provider's hint
	rate     float64       // want Adapted.Rate
	change   int           // want -1 (Decreased), 1 (Increased) or 0
	cooldown time.Duration // want Adapted.CooldownLeft
	streak   int           // want Adapted.FloorStreak
	ceiling  float64       // ceiling.PerSecond for this step; 0: the table's
	accepted int           // throttle, recover: accepted sends reported
	paced    float64       // throttle: the rate the send was paced at (0: unknown)
}

// adapts runs steps on one key. Rates are exact on both backends (steps
// keep clear of window ends by more than slack); cooldowns are near.
func (e *env) adapts(t *testing.T, key string, ceiling bucket.Limit, a adapt.AIMD, steps []aimdStep) {
	t.Helper()
	for i, s := range steps {
		e.at(s.at)
		c := ceiling
		if s.ceiling != 0 {
			c.PerSecond = s.ceiling
		}
		var ad adapt.Adapted
		var err error
		switch s.op {
		case opThrottle:
			ad, err = e.l.Throttled(t.Context(), "test", key, c, a, s.hint)
		case opRecover:
			ad, err = e.l.Recover(t.Context(), "test", key, c, a)
		case opRead:
			ad, err = e.l.Adapted(t.Context(), "test", key, c, a)
		}
		e.mark()
		floor := a.Floor
		if floor == 0 {
			floor = min(1, c.PerSecond)
		}
		if err != nil || ad.Rate != s.rate || ad.Ceiling != c.PerSecond || ad.AtFloor != (s.rate <= floor) ||
			ad.Decreased != (s.change < 0) || ad.Increased != (s.change > 0) ||
			!e.near(ad.CooldownLeft, s.cooldown) || ad.FloorStreak != s.streak {
			t.Fatalf("step %d (at %v, op %d): got %+v, %v; want rate=%v change=%d cooldown=%v streak=%d",
				i, s.at, s.op, ad, err, s.rate, s.change, s.cooldown, s.streak)
		}
	}
}

var lim100 = bucket.Limit{PerSecond: 100, Burst: 100}

// classic turns a into plain AIMD for the tables that test the decrease,
// the coalescing and the increase one at a time: every counted throttle
// after the first of an episode cuts by exactly Decrease (Persist is long
// and a tiny Backoff puts the estimate below it), and increases do not
// accelerate unless a asks for it.
func classic(a adapt.AIMD) adapt.AIMD {
	a.Backoff, a.Persist, a.NoRefillPause = 1e-9, time.Hour, true
	if a.Accelerate == 0 {
		a.Accelerate = 1
	}
	if a.Decrease == 0 {
		a.Decrease = 0.5
	}
	return a
}

func TestAIMDHalvesToFloor(t *testing.T) {
	a := classic(adapt.AIMD{Floor: 10, Coalesce: 300 * time.Millisecond, MinCooldown: 300 * time.Millisecond})
	cd, ms := 300*time.Millisecond, time.Millisecond
	each(t, func(t *testing.T, e *env) {
		e.adapts(t, "k", lim100, a, []aimdStep{
			{at: 0, op: opRead, rate: 100},
			{at: 0, op: opThrottle, rate: 100, cooldown: cd}, // a lone throttle cuts nothing
			{at: 600 * ms, op: opThrottle, rate: 50, change: -1, cooldown: cd},
			{at: 1200 * ms, op: opThrottle, rate: 25, change: -1, cooldown: cd},
			{at: 1800 * ms, op: opThrottle, rate: 12.5, change: -1, cooldown: cd},
			{at: 2400 * ms, op: opThrottle, rate: 10, change: -1, cooldown: cd}, // 6.25, floored
			{at: 3000 * ms, op: opThrottle, rate: 10, cooldown: cd, streak: 1},
			{at: 3600 * ms, op: opThrottle, rate: 10, cooldown: cd, streak: 2},
			{at: 3600 * ms, op: opRead, rate: 10, cooldown: cd, streak: 2},
		})
	})
}

// TestAIMDDecreaseFactor checks a non-default Decrease and that the rate
// keeps its millionths.
func TestAIMDDecreaseFactor(t *testing.T) {
	a := classic(adapt.AIMD{Decrease: 0.9, Floor: 0.7, MinCooldown: 300 * time.Millisecond, Coalesce: 300 * time.Millisecond})
	cd := 300 * time.Millisecond
	each(t, func(t *testing.T, e *env) {
		e.adapts(t, "k", bucket.Limit{PerSecond: 1, Burst: 1}, a, []aimdStep{
			{at: 0, op: opThrottle, rate: 1, cooldown: cd},
			{at: 400 * time.Millisecond, op: opThrottle, rate: 0.9, change: -1, cooldown: cd},
			{at: 1000 * time.Millisecond, op: opThrottle, rate: 0.81, change: -1, cooldown: cd},
			{at: 1600 * time.Millisecond, op: opThrottle, rate: 0.729, change: -1, cooldown: cd},
			{at: 2200 * time.Millisecond, op: opThrottle, rate: 0.7, change: -1, cooldown: cd}, // 0.6561, floored
		})
	})
}

// TestAIMDCoalesce checks that throttles from one burst of in-flight
// requests lower the rate once: those within Coalesce of a counted one, and
// those during the cooldown it set, however long a later hint made it.
func TestAIMDCoalesce(t *testing.T) {
	a := classic(adapt.AIMD{Coalesce: 800 * time.Millisecond, MinCooldown: 250 * time.Millisecond})
	each(t, func(t *testing.T, e *env) {
		e.adapts(t, "k", lim100, a, []aimdStep{
			{at: 0, op: opThrottle, rate: 100, cooldown: 250 * ms}, // lone
			{at: 0, op: opThrottle, rate: 100, cooldown: 250 * ms}, // coalesced into it
			{at: 1000 * ms, op: opThrottle, rate: 50, change: -1, cooldown: 250 * ms},
			{at: 1000 * ms, op: opThrottle, rate: 50, cooldown: 250 * ms},
			{at: 1000 * ms, op: opThrottle, rate: 50, cooldown: 250 * ms},
			{at: 1500 * ms, op: opThrottle, rate: 50, cooldown: 250 * ms}, // cooldown over, Coalesce not
			{at: 1500 * ms, op: opThrottle, hint: 1500 * ms, rate: 50, cooldown: 1500 * ms},
			{at: 2200 * ms, op: opThrottle, rate: 50, cooldown: 800 * ms}, // Coalesce over, cooldown not
			{at: 3300 * ms, op: opThrottle, rate: 25, change: -1, cooldown: 250 * ms},
			{at: 3300 * ms, op: opThrottle, rate: 25, cooldown: 250 * ms},
		})
	})
}

// TestAIMDCoalesceConcurrent checks that a burst of throttles reported at
// once by many replicas lowers the rate once.
func TestAIMDCoalesceConcurrent(t *testing.T) {
	a := classic(adapt.AIMD{Coalesce: 300 * time.Millisecond, MinCooldown: 300 * time.Millisecond})
	each(t, func(t *testing.T, e *env) {
		if ad, err := e.l.Throttled(t.Context(), "test", "k", lim100, a, 0); err != nil || ad.Rate != 100 {
			t.Fatalf("lone Throttled = %+v, %v; want rate 100", ad, err)
		}
		e.mark()
		e.at(time.Second)
		decreased := redistest.Sum(t, 20, 1, func(int) (int, error) {
			ad, err := e.l.Throttled(t.Context(), "test", "k", lim100, a, 0)
			if err == nil && ad.Rate != 50 {
				err = fmt.Errorf("Throttled = %+v; want rate 50", ad)
			}
			if ad.Decreased {
				return 1, err
			}
			return 0, err
		})
		if n := decreased; n != 1 {
			t.Fatalf("%d of 20 concurrent throttles decreased the rate, want 1", n)
		}
	})
}

func TestAIMDCooldownClamp(t *testing.T) {
	const year = 365 * 24 * time.Hour
	for _, tc := range []struct {
		a    adapt.AIMD
		hint time.Duration
		want time.Duration
	}{
		{adapt.AIMD{}, 0, time.Second},
		{adapt.AIMD{}, -5 * time.Second, time.Second},
		{adapt.AIMD{}, math.MinInt64, time.Second},
		{adapt.AIMD{}, time.Nanosecond, time.Second},
		{adapt.AIMD{}, 90 * time.Second, 90 * time.Second},
		{adapt.AIMD{}, 10 * year, time.Hour},
		{adapt.AIMD{}, math.MaxInt64, time.Hour},
		{adapt.AIMD{MinCooldown: time.Millisecond}, 1500 * time.Microsecond, 2 * time.Millisecond}, // rounded up
		{adapt.AIMD{MinCooldown: 5 * time.Second, MaxCooldown: time.Minute}, 2 * time.Second, 5 * time.Second},
		{adapt.AIMD{MinCooldown: 5 * time.Second, MaxCooldown: time.Minute}, time.Hour, time.Minute},
		{adapt.AIMD{MaxCooldown: 500 * time.Millisecond}, 0, 500 * time.Millisecond}, // default Min follows Max
		{adapt.AIMD{MinCooldown: 2 * time.Hour}, 10 * year, 2 * time.Hour},           // default Max follows Min
		{adapt.AIMD{MaxCooldown: 10 * year}, 20 * year, 10 * year},
	} {
		t.Run(fmt.Sprintf("%+v/%v", tc.a, tc.hint), func(t *testing.T) {
			if got := tc.a.CooldownFor(tc.hint); got != tc.want {
				t.Fatalf("CooldownFor(%v) = %v, want %v", tc.hint, got, tc.want)
			}
			// At a ceiling of 1/s the default MinCooldown (one token
			// interval, within [10ms, 1s]) is the 1s CooldownFor assumes.
			lim1 := bucket.Limit{PerSecond: 1, Burst: 1}
			each(t, func(t *testing.T, e *env) {
				ad, err := e.l.Throttled(t.Context(), "test", "k", lim1, tc.a, tc.hint)
				if err != nil || !e.near(ad.CooldownLeft, tc.want) {
					t.Fatalf("Throttled(%v) = %+v, %v; want CooldownLeft %v", tc.hint, ad, err, tc.want)
				}
				if tc.want < time.Second {
					return // on redis-server it may be over before Reserve
				}
				// The bucket honours it: the cooldown key is shared with Limiter.Cooldown.
				d, err := e.b.Reserve(t.Context(), "test", "k", ad.Limit(lim1), 1, 0)
				if err != nil || d.OK || !d.Cooldown || !e.near(d.Wait, tc.want) {
					t.Fatalf("Reserve after the throttle = %+v, %v; want a cooldown of %v", d, err, tc.want)
				}
			})
		})
	}
}

// TestAIMDCooldownNeverShortened checks that a throttle keeps a longer
// cooldown, whoever set it, and lengthens a shorter one.
func TestAIMDCooldownNeverShortened(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		if err := e.b.Cooldown(ctx, "test", "k", 10*time.Minute); err != nil {
			t.Fatal(err)
		}
		for i, s := range []struct{ hint, want time.Duration }{
			{0, 10 * time.Minute},
			{time.Minute, 10 * time.Minute},
			{30 * time.Minute, 30 * time.Minute},
			{time.Second, 30 * time.Minute},
		} {
			ad, err := e.l.Throttled(ctx, "test", "k", lim100, adapt.AIMD{}, s.hint)
			if err != nil || !e.near(ad.CooldownLeft, s.want) {
				t.Fatalf("step %d: Throttled(%v) = %+v, %v; want CooldownLeft %v", i, s.hint, ad, err, s.want)
			}
		}
		st, err := e.b.State(ctx, "test", "k", lim100)
		if err != nil || !e.near(st.CooldownLeft, 30*time.Minute) {
			t.Fatalf("State = %+v, %v; want a 30m cooldown", st, err)
		}
		if err := e.b.Cooldown(ctx, "test", "k", time.Second); err != nil {
			t.Fatal(err)
		}
		ad, err := e.l.Adapted(ctx, "test", "k", lim100, adapt.AIMD{})
		// Every throttle fell in the cooldown the first one found, so all
		// belong to one lone throttle: no decrease.
		if err != nil || !e.near(ad.CooldownLeft, 30*time.Minute) || ad.Rate != 100 {
			t.Fatalf("Adapted = %+v, %v; want rate 100 and a 30m cooldown", ad, err)
		}
	})
}

func TestAIMDRecover(t *testing.T) {
	a := classic(adapt.AIMD{Window: time.Second, Step: 35, Coalesce: 300 * time.Millisecond, MinCooldown: 300 * time.Millisecond})
	cd, ms := 300*time.Millisecond, time.Millisecond
	each(t, func(t *testing.T, e *env) {
		e.adapts(t, "k", lim100, a, []aimdStep{
			{at: 0, op: opRecover, rate: 100},                                  // no state: at the ceiling
			{at: 0, op: opThrottle, rate: 100, cooldown: cd},                   // lone
			{at: 400 * ms, op: opThrottle, rate: 50, change: -1, cooldown: cd}, // window starts at 700ms
			{at: 400 * ms, op: opRecover, rate: 50, cooldown: cd},
			{at: 1400 * ms, op: opRecover, rate: 50},
			{at: 2000 * ms, op: opRecover, rate: 85, change: 1}, // window starts at 2000ms
			{at: 2600 * ms, op: opRecover, rate: 85},
			{at: 2600 * ms, op: opThrottle, rate: 42.5, change: -1, cooldown: cd}, // window starts at 2900ms
			{at: 3400 * ms, op: opRecover, rate: 42.5},
			{at: 4200 * ms, op: opRecover, rate: 77.5, change: 1},
			{at: 4200 * ms, op: opRecover, rate: 77.5},           // once per window, not per call
			{at: 5400 * ms, op: opRecover, rate: 100, change: 1}, // 112.5, capped
			{at: 5400 * ms, op: opRecover, rate: 100},
			{at: 5400 * ms, op: opRead, rate: 100},
		})
		// Back at the ceiling, the key has no state left.
		if n := e.rdb.Exists(t.Context(), e.keys.AIMD("test", "k")).Val(); n != 0 {
			t.Fatal("the aimd hash outlived the return to the ceiling")
		}
	})
}

func TestAIMDRecoverFactor(t *testing.T) {
	a := classic(adapt.AIMD{Window: time.Second, Factor: 3, Coalesce: 300 * time.Millisecond, MinCooldown: 300 * time.Millisecond})
	cd, ms := 300*time.Millisecond, time.Millisecond
	each(t, func(t *testing.T, e *env) {
		e.adapts(t, "k", lim100, a, []aimdStep{
			{at: 0, op: opThrottle, rate: 100, cooldown: cd},
			{at: 400 * ms, op: opThrottle, rate: 50, change: -1, cooldown: cd},
			{at: 1000 * ms, op: opThrottle, rate: 25, change: -1, cooldown: cd}, // window starts at 1300ms
			{at: 1900 * ms, op: opRecover, rate: 25},
			{at: 2600 * ms, op: opRecover, rate: 75, change: 1},
			{at: 3900 * ms, op: opRecover, rate: 100, change: 1}, // 225, capped
		})
	})
}

// TestAIMDRecoverResetsStreak checks that a clean window ends a streak of
// throttles at the floor.
func TestAIMDRecoverResetsStreak(t *testing.T) {
	a := classic(adapt.AIMD{Floor: 40, Step: 10, Window: time.Second, Coalesce: 300 * time.Millisecond, MinCooldown: 300 * time.Millisecond})
	cd, ms := 300*time.Millisecond, time.Millisecond
	each(t, func(t *testing.T, e *env) {
		e.adapts(t, "k", lim100, a, []aimdStep{
			{at: 0, op: opThrottle, rate: 100, cooldown: cd},
			{at: 0 * ms, op: opThrottle, rate: 100, cooldown: cd}, // coalesced
			{at: 400 * ms, op: opThrottle, rate: 50, change: -1, cooldown: cd},
			{at: 1000 * ms, op: opThrottle, rate: 40, change: -1, cooldown: cd},
			{at: 1600 * ms, op: opThrottle, rate: 40, cooldown: cd, streak: 1},
			{at: 1600 * ms, op: opThrottle, rate: 40, cooldown: cd, streak: 1}, // coalesced: counts once
			{at: 2200 * ms, op: opThrottle, rate: 40, cooldown: cd, streak: 2}, // window starts at 2500ms
			{at: 3200 * ms, op: opRecover, rate: 40, streak: 2},
			{at: 3800 * ms, op: opRecover, rate: 50, change: 1},
			{at: 3800 * ms, op: opRead, rate: 50},
			{at: 4100 * ms, op: opThrottle, rate: 40, change: -1, cooldown: cd},
		})
	})
}

// TestAIMDCeilingChanges checks that a lowered ceiling caps the stored rate
// at once, in every call, and that a raised one applies at once to a key
// at its ceiling.
func TestAIMDCeilingChanges(t *testing.T) {
	a := classic(adapt.AIMD{Window: time.Second, Step: 20, Coalesce: 300 * time.Millisecond, MinCooldown: 300 * time.Millisecond})
	cd, ms := 300*time.Millisecond, time.Millisecond
	each(t, func(t *testing.T, e *env) {
		e.adapts(t, "k", lim100, a, []aimdStep{
			{at: 0, op: opRead, rate: 120, ceiling: 120},
			{at: 0, op: opThrottle, rate: 100, cooldown: cd},
			{at: 400 * ms, op: opThrottle, rate: 50, change: -1, cooldown: cd},
			{at: 400 * ms, op: opRead, rate: 30, cooldown: cd, ceiling: 30},
			{at: 400 * ms, op: opRecover, rate: 30, cooldown: cd, ceiling: 30},
			{at: 1000 * ms, op: opThrottle, rate: 15, change: -1, cooldown: cd, ceiling: 30}, // from 30, not 50
			{at: 1000 * ms, op: opRead, rate: 15, cooldown: cd},
			{at: 2400 * ms, op: opRecover, rate: 35, change: 1, ceiling: 200},
			{at: 2400 * ms, op: opRead, rate: 0.5, ceiling: 0.5}, // the default floor follows a ceiling below 1
		})
	})
}

// TestAIMDIdleExpiry checks that the aimd hash lives max(4*Window, 1h) past
// the end of its cooldown, after which the key is back at its ceiling.
func TestAIMDIdleExpiry(t *testing.T) {
	for _, tc := range []struct {
		window, idle time.Duration
	}{
		{time.Second, time.Hour},
		{20 * time.Minute, 80 * time.Minute},
	} {
		t.Run(tc.window.String(), func(t *testing.T) {
			a := adapt.AIMD{Window: tc.window, MinCooldown: 2 * time.Second, Persist: 10 * time.Second, Decrease: 0.5, Backoff: 1e-9, NoRefillPause: true}
			each(t, func(t *testing.T, e *env) {
				ctx := t.Context()
				since := time.Now()
				if _, err := e.l.Throttled(ctx, "test", "k", lim100, a, 0); err != nil {
					t.Fatal(err)
				}
				ak := e.keys.AIMD("test", "k")
				want := tc.idle + 2*time.Second
				if ttl := e.rdb.PTTL(ctx, ak).Val(); !e.TTLNear(ttl, want, since) {
					t.Fatalf("PTTL %s = %v, want %v less the time since the throttle", ak, ttl, want)
				}
				if !e.exact() {
					return
				}
				// A second throttle after the first one's cooldown cuts.
				e.at(2 * time.Second)
				if ad, err := e.l.Throttled(ctx, "test", "k", lim100, a, 0); err != nil || ad.Rate != 50 {
					t.Fatalf("second Throttled = %+v, %v; want rate 50", ad, err)
				}
				want += 2 * time.Second
				e.at(want - time.Millisecond)
				if ad, err := e.l.Adapted(ctx, "test", "k", lim100, a); err != nil || ad.Rate != 50 {
					t.Fatalf("Adapted just before expiry = %+v, %v; want rate 50", ad, err)
				}
				e.at(want)
				if ad, err := e.l.Adapted(ctx, "test", "k", lim100, a); err != nil || ad.Rate != 100 {
					t.Fatalf("Adapted after expiry = %+v, %v; want rate 100", ad, err)
				}
				// An increase gives the hash a fresh idle TTL.
				for _, at := range []time.Duration{want, want + 2*time.Second} {
					e.at(at)
					if _, err := e.l.Throttled(ctx, "test", "k", lim100, a, 0); err != nil {
						t.Fatal(err)
					}
				}
				e.at(want + 4*time.Second + tc.window)
				if ad, err := e.l.Recover(ctx, "test", "k", lim100, a); err != nil || !ad.Increased {
					t.Fatalf("Recover = %+v, %v; want an increase", ad, err)
				}
				if ttl := e.rdb.PTTL(ctx, ak).Val(); ttl != tc.idle {
					t.Fatalf("PTTL after an increase = %v, want %v", ttl, tc.idle)
				}
			})
		})
	}
}

// TestAIMDReadsChangeNothing checks that Adapted never writes and that
// Recover writes only when it raises the rate.
func TestAIMDReadsChangeNothing(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		if _, err := e.l.Adapted(ctx, "test", "never", lim100, adapt.AIMD{}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.l.Recover(ctx, "test", "never", lim100, adapt.AIMD{}); err != nil {
			t.Fatal(err)
		}
		if n := e.rdb.Exists(ctx, e.keys.AIMD("test", "never"), e.keys.Cooldown("test", "never")).Val(); n != 0 {
			t.Fatal("Adapted or Recover created keys")
		}
		if _, err := e.l.Throttled(ctx, "test", "k", lim100, adapt.AIMD{}, 0); err != nil {
			t.Fatal(err)
		}
		ak := e.keys.AIMD("test", "k")
		before := e.snapshot(t, ak)
		for range 3 {
			if _, err := e.l.Adapted(ctx, "test", "k", lim100, adapt.AIMD{}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.l.Recover(ctx, "test", "k", lim100, adapt.AIMD{}); err != nil {
				t.Fatal(err)
			}
		}
		after := e.snapshot(t, ak)
		if !maps.Equal(before.hash, after.hash) || after.pttl > before.pttl {
			t.Fatalf("reads changed the hash: before %+v, after %+v", before, after)
		}
	})
}

// TestAIMDCorruptIsFresh checks that adaptive state that makes no sense
// reads as a key at its ceiling and is repaired by the next throttle.
func TestAIMDCorruptIsFresh(t *testing.T) {
	for _, tc := range append([]redistest.Corrupt{
		{Name: "words", Write: hset("urate", "fast", "last_us", "x", "hold_us", "y", "win_us", "z", "streak", "many")},
		{Name: "no rate", Write: hset("last_us", "1", "hold_us", "1", "win_us", "1", "streak", "0")},
		{Name: "no window", Write: hset("urate", "5000000", "last_us", "1", "hold_us", "1", "streak", "0")},
		{Name: "zero rate", Write: hset("urate", "0", "last_us", "1", "hold_us", "1", "win_us", "1", "streak", "0")},
		{Name: "negative", Write: hset("urate", "-5", "last_us", "1", "hold_us", "1", "win_us", "1", "streak", "-1")},
		{Name: "fraction", Write: hset("urate", "5000000.5", "last_us", "1", "hold_us", "1", "win_us", "1", "streak", "0")},
		{Name: "nan", Write: hset("urate", "nan", "last_us", "nan", "hold_us", "nan", "win_us", "nan", "streak", "nan")},
		{Name: "inf", Write: hset("urate", "inf", "last_us", "1", "hold_us", "inf", "win_us", "1", "streak", "0")},
	}, redistest.WrongTypes...) {
		t.Run(tc.Name, func(t *testing.T) {
			each(t, func(t *testing.T, e *env) {
				ctx := t.Context()
				ak := e.keys.AIMD("test", "k")
				if err := tc.Write(ctx, e.rdb, ak); err != nil {
					t.Fatal(err)
				}
				e.adapts(t, "k", lim100, adapt.AIMD{}, []aimdStep{
					{at: 0, op: opRead, rate: 100},
					{at: 0, op: opRecover, rate: 100},
					{at: 0, op: opThrottle, rate: 100, cooldown: 10 * time.Millisecond}, // lone: 1/100 s
				})
				h := e.rdb.HGetAll(ctx, ak).Val()
				for _, f := range []string{"urate", "last_us", "hold_us", "win_us", "streak", "ep_us", "n", "k"} {
					if _, err := strconv.ParseInt(h[f], 10, 64); err != nil {
						t.Fatalf("not repaired: %v", h)
					}
				}
			})
		})
	}
}

// TestAIMDFloorTripsBreaker checks the path from persistent throttling at
// the floor to an open breaker.
func TestAIMDFloorTripsBreaker(t *testing.T) {
	a := classic(adapt.AIMD{Floor: 50, Coalesce: 300 * time.Millisecond, MinCooldown: 300 * time.Millisecond})
	b := adapt.Breaker{FloorThrottles: 3}
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		for i, want := range []struct {
			streak  int
			tripped bool
		}{{0, false}, {0, false}, {1, false}, {2, false}, {3, true}} {
			e.at(time.Duration(i) * 600 * time.Millisecond)
			ad, err := e.l.Throttled(ctx, "test", "k", lim100, a, 0)
			e.mark()
			if err != nil || ad.FloorStreak != want.streak || b.FloorTripped(ad) != want.tripped {
				t.Fatalf("throttle %d: %+v, %v; want streak %d, tripped %v", i, ad, err, want.streak, want.tripped)
			}
			if b.FloorTripped(ad) {
				if st, err := e.l.BreakerResult(ctx, "test", "k", b, false, "throttled at floor"); err != nil || st != adapt.BreakerOpen {
					t.Fatalf("BreakerResult = %v, %v; want open", st, err)
				}
			}
		}
		if allowed, _, _, err := e.l.BreakerAllow(ctx, "test", "k", b, "a"); err != nil || allowed {
			t.Fatalf("BreakerAllow = %v, %v; want refused", allowed, err)
		}
	})
}

func TestFloorTripped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		b      adapt.Breaker
		streak int
		want   bool
	}{
		{adapt.Breaker{}, 4, false},
		{adapt.Breaker{}, 5, true},
		{adapt.Breaker{}, 6, true},
		{adapt.Breaker{FloorThrottles: 1}, 0, false},
		{adapt.Breaker{FloorThrottles: 1}, 1, true},
	} {
		if got := tc.b.FloorTripped(adapt.Adapted{FloorStreak: tc.streak}); got != tc.want {
			t.Errorf("%+v.FloorTripped(streak %d) = %v, want %v", tc.b, tc.streak, got, tc.want)
		}
	}
}

func TestAIMDValidate(t *testing.T) {
	t.Parallel()
	l := adapt.New(noRedis{}, bucket.Config{})
	for _, tc := range []struct {
		a       adapt.AIMD
		ceiling bucket.Limit
		want    string // "" for valid
	}{
		{adapt.AIMD{}, lim100, ""},
		{adapt.AIMD{}, bucket.Limit{PerSecond: 0.5, Burst: 1}, ""}, // default floor: 0.5
		{adapt.AIMD{Floor: 1e-6}, bucket.Limit{PerSecond: 1e-6, Burst: 1}, ""},
		{adapt.AIMD{Decrease: 0.99, Floor: 100, Window: time.Millisecond, Step: 1e-6, Coalesce: time.Nanosecond,
			MinCooldown: time.Millisecond, MaxCooldown: 10 * 365 * 24 * time.Hour}, bucket.Limit{PerSecond: 1e9, Burst: 1e9}, ""},
		{adapt.AIMD{Factor: 1.5}, lim100, ""},
		{adapt.AIMD{}, bucket.Limit{}, "bucket: invalid limit: rate 0 must be > 0"},
		{adapt.AIMD{}, bucket.Limit{PerSecond: 1e10, Burst: 1}, "adapt: invalid aimd: ceiling 1e+10 msgs/s must be in [1e-06, 1e+09]"},
		{adapt.AIMD{}, bucket.Limit{PerSecond: 1e-7, Burst: 1}, "adapt: invalid aimd: ceiling 1e-07 msgs/s must be in [1e-06, 1e+09]"},
		{adapt.AIMD{Decrease: 1}, lim100, "adapt: invalid aimd: decrease 1 must be in (0, 1)"},
		{adapt.AIMD{Decrease: -0.5}, lim100, "adapt: invalid aimd: decrease -0.5 must be in (0, 1)"},
		{adapt.AIMD{Decrease: math.NaN()}, lim100, "adapt: invalid aimd: decrease NaN must be in (0, 1)"},
		{adapt.AIMD{Floor: -1}, lim100, "adapt: invalid aimd: floor -1 must be >= 1e-06"},
		{adapt.AIMD{Floor: 1e-7}, lim100, "adapt: invalid aimd: floor 1e-07 must be >= 1e-06"},
		{adapt.AIMD{Floor: math.NaN()}, lim100, "adapt: invalid aimd: floor NaN must be >= 1e-06"},
		{adapt.AIMD{Floor: 101}, lim100, "adapt: invalid aimd: floor 101 must be <= ceiling 100"},
		{adapt.AIMD{Step: -1}, lim100, "adapt: invalid aimd: step -1 must be finite and > 0"},
		{adapt.AIMD{Step: math.Inf(1)}, lim100, "adapt: invalid aimd: step +Inf must be finite and > 0"},
		{adapt.AIMD{Factor: 1}, lim100, "adapt: invalid aimd: factor 1 must be 0 or a finite number > 1"},
		{adapt.AIMD{Factor: 0.5}, lim100, "adapt: invalid aimd: factor 0.5 must be 0 or a finite number > 1"},
		{adapt.AIMD{Factor: math.Inf(1)}, lim100, "adapt: invalid aimd: factor +Inf must be 0 or a finite number > 1"},
		{adapt.AIMD{Window: -time.Second}, lim100, "adapt: invalid aimd: window -1s must be in [1ms, 87600h0m0s]"},
		{adapt.AIMD{Window: time.Microsecond}, lim100, "adapt: invalid aimd: window 1µs must be in [1ms, 87600h0m0s]"},
		{adapt.AIMD{Window: 11 * 365 * 24 * time.Hour}, lim100, "adapt: invalid aimd: window 96360h0m0s must be in [1ms, 87600h0m0s]"},
		{adapt.AIMD{Coalesce: -1}, lim100, "adapt: invalid aimd: coalesce -1ns must be in [1ns, 87600h0m0s]"},
		{adapt.AIMD{MinCooldown: -time.Second}, lim100, "adapt: invalid aimd: min cooldown -1s must be in [1ms, 87600h0m0s]"},
		{adapt.AIMD{MaxCooldown: time.Microsecond}, lim100, "adapt: invalid aimd: max cooldown 1µs must be in [1ms, 87600h0m0s]"},
		{adapt.AIMD{MinCooldown: time.Minute, MaxCooldown: time.Second}, lim100, "adapt: invalid aimd: min cooldown 1m0s must be <= max cooldown 1s"},
		{adapt.AIMD{Persist: time.Second, MinEpisode: time.Second}, lim100, ""},
		{adapt.AIMD{Persist: time.Second, MinEpisode: 2 * time.Second}, lim100, "adapt: invalid aimd: minimum episode 2s must be <= Persist (1s)"},
		{adapt.AIMD{MinEpisode: time.Microsecond}, lim100, "adapt: invalid aimd: minimum episode 1µs must be in [1ms, 87600h0m0s]"},
	} {
		t.Run(fmt.Sprintf("%+v/%+v", tc.a, tc.ceiling), func(t *testing.T) {
			err := tc.a.Validate(tc.ceiling)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			sentinel := adapt.ErrInvalidAIMD
			if strings.HasPrefix(tc.want, "bucket: invalid limit") {
				sentinel = bucket.ErrInvalidLimit
			}
			if !errors.Is(err, sentinel) || err.Error() != tc.want {
				t.Fatalf("Validate = %v, want %q", err, tc.want)
			}
			// No call reaches Redis (noRedis would panic).
			for name, f := range map[string]func() error{
				"Throttled": func() error { _, err := l.Throttled(t.Context(), "test", "k", tc.ceiling, tc.a, 0); return err },
				"Recover":   func() error { _, err := l.Recover(t.Context(), "test", "k", tc.ceiling, tc.a); return err },
				"Adapted":   func() error { _, err := l.Adapted(t.Context(), "test", "k", tc.ceiling, tc.a); return err },
				"Snapshot":  func() error { _, err := l.Snapshot(t.Context(), "test", "k", tc.ceiling, tc.a); return err },
			} {
				if err := f(); !errors.Is(err, sentinel) || err.Error() != tc.want {
					t.Errorf("%s error = %v, want %q", name, err, tc.want)
				}
			}
		})
	}
}

func TestAdaptedLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rate    float64
		ceiling bucket.Limit
		want    bucket.Limit
	}{
		{0, lim100, lim100}, // the zero Adapted
		{100, lim100, lim100},
		{150, lim100, lim100},
		{50, lim100, bucket.Limit{PerSecond: 50, Burst: 50}},
		{12.5, bucket.Limit{PerSecond: 80, Burst: 10}, bucket.Limit{PerSecond: 12.5, Burst: 1}},   // 1.5625, rounded down
		{1e-6, bucket.Limit{PerSecond: 1e9, Burst: 1e9}, bucket.Limit{PerSecond: 1e-6, Burst: 1}}, // at least 1
		{0.5, bucket.Limit{PerSecond: 1, Burst: 3}, bucket.Limit{PerSecond: 0.5, Burst: 1}},
	} {
		got := adapt.Adapted{Rate: tc.rate}.Limit(tc.ceiling)
		if got != tc.want {
			t.Errorf("Adapted{Rate: %v}.Limit(%+v) = %+v, want %+v", tc.rate, tc.ceiling, got, tc.want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("Adapted{Rate: %v}.Limit(%+v) = %+v: %v", tc.rate, tc.ceiling, got, err)
		}
	}
}

func TestAdaptRedisErrorsWrapped(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	e.mr.SetError("LOADING Redis is loading the dataset in memory")
	ctx := t.Context()
	a, b := adapt.AIMD{}, adapt.Breaker{}
	for _, tc := range []struct {
		want string
		err  error
	}{
		{`adapt: throttled "pacer:{test:k}:aimd": LOADING`, second(e.l.Throttled(ctx, "test", "k", lim100, a, 0))},
		{`adapt: recover "pacer:{test:k}:aimd": LOADING`, second(e.l.Recover(ctx, "test", "k", lim100, a))},
		{`adapt: adapted "pacer:{test:k}:aimd": LOADING`, second(e.l.Adapted(ctx, "test", "k", lim100, a))},
		{`adapt: adapted "pacer:{test:k}:aimd": LOADING`, second(e.l.Snapshot(ctx, "test", "k", lim100, a))},
		{`adapt: breaker result "pacer:{test:k}:breaker": LOADING`, second(e.l.BreakerResult(ctx, "test", "k", b, false, ""))},
		{`adapt: breaker status "pacer:{test:k}:breaker": LOADING`, second(e.l.BreakerStatus(ctx, "test", "k"))},
		{`adapt: breaker allow "pacer:{test:k}:breaker": LOADING`, func() error {
			_, _, _, err := e.l.BreakerAllow(ctx, "test", "k", b, "a")
			return err
		}()},
	} {
		var rerr redis.Error
		if tc.err == nil || !strings.HasPrefix(tc.err.Error(), tc.want) || !errors.As(tc.err, &rerr) {
			t.Errorf("got %v, want %q... wrapping a redis.Error", tc.err, tc.want)
		}
	}
}

// second returns the error of a call that returns a value and an error.
func second[T any](_ T, err error) error { return err }

func TestAdaptUnexpectedReply(t *testing.T) {
	t.Parallel()
	a, b := adapt.AIMD{}, adapt.Breaker{}
	for _, v := range []any{
		nil, "OK", int64(1), []any{},
		[]any{int64(100e6), int64(0), int64(0)},                       // too short
		[]any{int64(50e6), int64(0), int64(0), int64(0)},              // aimd: no since_us
		[]any{int64(101e6), int64(0), int64(0), int64(0), int64(-1)},  // above the ceiling
		[]any{int64(0), int64(0), int64(0), int64(0), int64(-1)},      // below the floor
		[]any{int64(50e6), int64(2), int64(0), int64(0), int64(-1)},   // change out of range
		[]any{int64(50e6), int64(0), int64(-1), int64(0), int64(-1)},  // negative cooldown
		[]any{int64(50e6), int64(0), int64(0), int64(-1), int64(-1)},  // negative streak
		[]any{int64(50e6), int64(0), int64(0), int64(0), int64(-2)},   // since_us below -1
		[]any{"50000000", int64(0), int64(0), int64(0), int64(-1)},    // a string
		[]any{int64(1), int64(1), int64(1), int64(1), "x", int64(0)},  // status: reason not a string
		[]any{int64(3), int64(1), int64(0), int64(0), "", ""},         // status: no such state
		[]any{int64(1), int64(0), int64(5), int64(0), "", ""},         // status: open, no opens
		[]any{int64(2), int64(1), int64(0), int64(5), "", ""},         // status: a lease without an owner
		[]any{int64(1), int64(1), int64(0), int64(0), int64(0), "x"},  // status: owner not a string
		[]any{int64(0), int64(0), int64(0), int64(0), "", "", "more"}, // status: too long
	} {
		l := adapt.New(fakeReply{v: v}, bucket.Config{})
		ctx := t.Context()
		for name, f := range map[string]func() error{
			"Throttled": func() error { _, err := l.Throttled(ctx, "test", "k", lim100, a, 0); return err },
			"Recover":   func() error { _, err := l.Recover(ctx, "test", "k", lim100, a); return err },
			"Adapted":   func() error { _, err := l.Adapted(ctx, "test", "k", lim100, a); return err },
			"BreakerAllow": func() error {
				_, _, _, err := l.BreakerAllow(ctx, "test", "k", b, "a")
				return err
			},
			"BreakerResult": func() error { _, err := l.BreakerResult(ctx, "test", "k", b, false, ""); return err },
			"BreakerStatus": func() error { _, err := l.BreakerStatus(ctx, "test", "k"); return err },
		} {
			if err := f(); err == nil || !strings.Contains(err.Error(), "unexpected reply") {
				t.Errorf("%s with reply %#v: %v; want an unexpected-reply error", name, v, err)
			}
		}
	}
	// Replies that are valid in shape but break a contract.
	for _, tc := range []struct {
		name string
		v    any
		f    func(l *adapt.Adapter) error
	}{
		{"throttle shorter than the hint", []any{int64(50e6), int64(-1), int64(10), int64(0), int64(0)}, func(l *adapt.Adapter) error {
			_, err := l.Throttled(t.Context(), "test", "k", lim100, a, time.Minute)
			return err
		}},
		{"throttle that increased", []any{int64(50e6), int64(1), int64(60000), int64(0), int64(0)}, func(l *adapt.Adapter) error {
			_, err := l.Throttled(t.Context(), "test", "k", lim100, a, time.Minute)
			return err
		}},
		{"recover that decreased", []any{int64(50e6), int64(-1), int64(0), int64(0), int64(0)}, func(l *adapt.Adapter) error {
			_, err := l.Recover(t.Context(), "test", "k", lim100, a)
			return err
		}},
		{"allowed with a wait", []any{int64(1), int64(0), int64(5), int64(0)}, func(l *adapt.Adapter) error {
			_, _, _, err := l.BreakerAllow(t.Context(), "test", "k", b, "a")
			return err
		}},
		{"probe while closed", []any{int64(1), int64(1), int64(0), int64(0)}, func(l *adapt.Adapter) error {
			_, _, _, err := l.BreakerAllow(t.Context(), "test", "k", b, "a")
			return err
		}},
		{"halt that closed", []any{int64(0), int64(0), int64(0)}, func(l *adapt.Adapter) error {
			_, err := l.BreakerResult(t.Context(), "test", "k", b, false, "")
			return err
		}},
	} {
		if err := tc.f(adapt.New(fakeReply{v: tc.v}, bucket.Config{})); err == nil || !strings.Contains(err.Error(), "unexpected reply") {
			t.Errorf("%s (%#v): %v; want an unexpected-reply error", tc.name, tc.v, err)
		}
	}
}

// TestAdaptKeys checks that an Adapter names its keys as the Limiter of
// the same Config does, so its throttles set that Limiter's cooldown.
func TestAdaptKeys(t *testing.T) {
	t.Parallel()
	cfg := bucket.Config{Prefix: "stage"}
	k := adapt.New(noRedis{}, cfg).Keys()
	if k != bucket.New(noRedis{}, cfg).Keys() {
		t.Fatalf("Adapter keys %+v differ from the Limiter's", k)
	}
	if got, want := k.AIMD("whatsapp", "106540352242922"), "stage:{whatsapp:106540352242922}:aimd"; got != want {
		t.Errorf("AIMD key = %q, want %q", got, want)
	}
	if got, want := k.Breaker("whatsapp", "106540352242922"), "stage:{whatsapp:106540352242922}:breaker"; got != want {
		t.Errorf("Breaker key = %q, want %q", got, want)
	}
}

func ExampleAdapter_Throttled() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	mr.SetTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	ctx := context.Background()
	l := adapt.New(rdb, bucket.Config{})
	ceiling := bucket.Limit{PerSecond: 80, Burst: 20}
	a := adapt.AIMD{} // the defaults
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	show := func(ad adapt.Adapted, err error) {
		if err != nil {
			panic(err)
		}
		fmt.Printf("rate=%.4g decreased=%v increased=%v cooldown=%v limit=%+v\n",
			ad.Rate, ad.Decreased, ad.Increased, ad.CooldownLeft, ad.Limit(ceiling))
	}
	// One refusal at the edge of the provider's burst: no cut, one token
	// interval of cooldown. The pacing limit keeps jitter headroom.
	show(l.ThrottledAfter(ctx, "whatsapp", "106540352242922", ceiling, a, 0, 0, 0))
	// 0.6 s later, after replicas saw 27 sends accepted, another: throttles
	// persist, but 0.6 s is too short an episode to measure the provider
	// (one report more or less per replica would move it by a fifth), and
	// 2 refusals of 29 requests do not show a rate far above it: counted,
	// no cut.
	mr.SetTime(t0.Add(600 * time.Millisecond))
	show(l.ThrottledAfter(ctx, "whatsapp", "106540352242922", ceiling, a, 0, 27, 0))
	// At 1.2 s a third, 27 more accepted: 54 reported in 1.2 s (45/s; a
	// replica that has seen no throttle reports once a second), but only 2
	// refusals, so the rate less the refusals per second (78.3/s) bounds
	// what the provider took: the rate goes to 0.95 of that, with a pause
	// for the provider to earn the burst the pacer takes at the new rate.
	mr.SetTime(t0.Add(1200 * time.Millisecond))
	show(l.ThrottledAfter(ctx, "whatsapp", "106540352242922", ceiling, a, 0, 27, 0))
	// A clean 2 s window after the pause: the rate stays. It is above the
	// capacity the reports showed (45/s; the bound is not a capacity), so
	// it cruises 4 windows in all; then, the rate in use (the replicas
	// report about 74 and 76 sends a second), the probe: +2%, then +4%.
	mr.SetTime(t0.Add(3600 * time.Millisecond))
	show(l.RecoverAfter(ctx, "whatsapp", "106540352242922", ceiling, a, 160))
	mr.SetTime(t0.Add(9600 * time.Millisecond))
	show(l.RecoverAfter(ctx, "whatsapp", "106540352242922", ceiling, a, 440))
	mr.SetTime(t0.Add(11700 * time.Millisecond))
	show(l.RecoverAfter(ctx, "whatsapp", "106540352242922", ceiling, a, 160))
	// Output:
	// rate=80 decreased=false increased=false cooldown=13ms limit={PerSecond:80 Burst:18}
	// rate=80 decreased=false increased=false cooldown=13ms limit={PerSecond:80 Burst:18}
	// rate=74.42 decreased=true increased=false cooldown=250ms limit={PerSecond:74.416666 Burst:16}
	// rate=74.42 decreased=false increased=false cooldown=0s limit={PerSecond:74.416666 Burst:16}
	// rate=75.9 decreased=false increased=true cooldown=0s limit={PerSecond:75.904999 Burst:16}
	// rate=78.94 decreased=false increased=true cooldown=0s limit={PerSecond:78.941198 Burst:17}
}

// TestAIMDEstimate checks the throttle rules: a lone throttle cuts nothing;
// throttles that persist (within Persist of the last counted one) cut to
// Backoff times the estimated capacity, the rate less the throttles per
// second of the episode (coalesced ones count for it); the cut never goes
// below Decrease of the rate; the increase after a throttle starts at Factor
// and doubles with each clean window in a row. Rates are exact on
// miniredis; on redis-server the episode's length is a few ms longer than
// the step offsets, so rates derived from it are near.
func TestAIMDEstimate(t *testing.T) {
	a := capacityAIMD(time.Second)
	steps := []aimdStep{
		{at: 0, op: opThrottle, rate: 100, cooldown: cd},       // lone: episode starts, n = 0
		{at: 50 * ms, op: opThrottle, rate: 100, cooldown: cd}, // coalesced: n = 1
		{at: 60 * ms, op: opThrottle, rate: 100, cooldown: cd}, // n = 2
		// persistent: n = 3 in 0.5 s, 6/s refused: est 94, * 0.9
		{at: 500 * ms, op: opThrottle, rate: 84.6, change: -1, cooldown: cd},
		{at: 550 * ms, op: opThrottle, rate: 84.6, cooldown: cd}, // coalesced: n = 1
		// n = 2 in 0.5 s: est 84.6 - 4 = 80.6, * 0.9
		{at: 1000 * ms, op: opThrottle, rate: 72.54, change: -1, cooldown: cd},
		{at: 1500 * ms, op: opRecover, rate: 72.54},                            // window ends at 2010ms
		{at: 3100 * ms, op: opThrottle, rate: 72.54, cooldown: cd},             // 2.1 s after the last: lone
		{at: 4200 * ms, op: opRecover, rate: 79.794, change: 1, accepted: 80},  // * (1 + 0.1), the rate in use
		{at: 4200 * ms, op: opRecover, rate: 79.794, accepted: 1},              // once per window
		{at: 5300 * ms, op: opRecover, rate: 95.7528, change: 1, accepted: 80}, // * (1 + 0.2)
		{at: 6400 * ms, op: opRecover, rate: 100, change: 1, accepted: 100},    // * (1 + 0.4), capped
		{at: 7000 * ms, op: opThrottle, rate: 100, cooldown: cd},               // lone again
	}
	for range 10 {
		steps = append(steps, aimdStep{at: 7050 * ms, op: opThrottle, rate: 100, cooldown: cd})
	}
	// 11 refused in 0.2 s: est 100 - 55 = 45, * 0.9 = 40.5; the cut stops at
	// Decrease (50).
	steps = append(steps, aimdStep{at: 7200 * ms, op: opThrottle, rate: 50, change: -1, cooldown: cd})
	each(t, func(t *testing.T, e *env) { e.adaptsNear(t, a, steps) })
}

// adaptsNear runs steps on key "k" under lim100 like adapts, for rates
// derived from the time an episode lasted: exact on miniredis, within 15%
// on redis-server, where steps run a few ms after their offsets; there,
// after a change, later rates are scaled by the same error. A step that
// ran more than stepLate after its offset (a loaded machine stalled the
// test between steps) voids the run, which starts again on a fresh key, up
// to 5 times: a failure counts only from a run whose steps kept time. It
// returns the key of the run that passed.
func (e *env) adaptsNear(t *testing.T, a adapt.AIMD, steps []aimdStep) (key string) {
	t.Helper()
	const stepLate = 40 * time.Millisecond
	for attempt := 0; ; attempt++ {
		key := "k"
		if attempt > 0 {
			key = fmt.Sprintf("k%d", attempt)
			e.Restart()
		}
		steps := slices.Clone(steps)
		var fail string
		late := false
		for i, s := range steps {
			e.at(s.at)
			var ad adapt.Adapted
			var err error
			l := e.l
			switch s.op {
			case opThrottle:
				ad, err = l.ThrottledAfter(t.Context(), "test", key, lim100, a, s.hint, s.accepted, s.paced)
			case opRecover:
				ad, err = l.RecoverAfter(t.Context(), "test", key, lim100, a, s.accepted)
			}
			e.mark()
			if e.Behind(s.at) > stepLate {
				late = true
			}
			near := ad.Rate == s.rate
			if !e.exact() {
				near = math.Abs(ad.Rate-s.rate) <= 0.15*s.rate
			}
			if err != nil || !near || ad.Decreased != (s.change < 0) || ad.Increased != (s.change > 0) ||
				!e.near(ad.CooldownLeft, s.cooldown) {
				fail = fmt.Sprintf("step %d (at %v, op %d): got %+v, %v; want rate=%v change=%d cooldown=%v",
					i, s.at, s.op, ad, err, s.rate, s.change, s.cooldown)
				break
			}
			if !e.exact() && s.change != 0 {
				// Later rates follow this one, and so do the rates later
				// sends were paced at: a step paced just below the rate
				// must stay below it (a paced rate above the key's current
				// one reads as a stale replica's throttle, which cuts
				// nothing).
				scale := ad.Rate / s.rate
				for j := i + 1; j < len(steps); j++ {
					steps[j].rate = min(steps[j].rate*scale, 100)
					steps[j].paced *= scale
				}
			}
		}
		switch {
		case fail == "":
			return key
		case late && attempt < 4:
			t.Logf("run %d void: a step ran more than %v after its offset; %s", attempt+1, stepLate, fail)
		default:
			t.Fatal(fail)
		}
	}
}

// adapts runs e.adaptsNear(t, a, steps) on each backend.
func adapts(t *testing.T, a adapt.AIMD, steps []aimdStep) {
	each(t, func(t *testing.T, e *env) { e.adaptsNear(t, a, steps) })
}

// TestAIMDAcceptedEstimate checks the estimate from accepted sends: what
// every replica reported accepted over the episode, per second, is the
// capacity of a provider that keeps refusing; the cut goes to Backoff of
// it; one clean window returns the rate to it (the cap), where it cruises
// for 3 windows more before the probe goes on gently from there.
func TestAIMDAcceptedEstimate(t *testing.T) {
	a := capacityAIMD(time.Second)
	each(t, func(t *testing.T, e *env) {
		key := e.adaptsNear(t, a, []aimdStep{
			{at: 0, op: opThrottle, rate: 100, cooldown: cd}, // lone: episode from 0
			{at: 20 * ms, op: opThrottle, rate: 100, cooldown: cd},
			{at: 30 * ms, op: opThrottle, rate: 100, cooldown: cd},
			{at: 40 * ms, op: opThrottle, rate: 100, cooldown: cd},
			{at: 200 * ms, op: opRecover, rate: 100, accepted: 30}, // one replica reports 30
			{at: 500 * ms, op: opThrottle, rate: 72, change: -1, cooldown: cd, // 40 in 0.5 s: 80/s, * 0.9
				accepted: 10},
			{at: 550 * ms, op: opThrottle, rate: 72, cooldown: cd}, // coalesced
			{at: 1000 * ms, op: opRecover, rate: 72, accepted: 1},  // window (from 560ms) ends at 1560ms
			// The window is over, but the rate is not in use: of the 0.9 * 72/s *
			// 0.04 s = 2.6 sends the window beyond its first second calls for,
			// 1 was reported. No increase.
			{at: 1600 * ms, op: opRecover, rate: 72},
			{at: 1700 * ms, op: opRecover, rate: 80, change: 1, accepted: 80}, // below the cap: straight to it
			// At the cap the rate cruises 3 windows more (to 4700ms), then
			// the probe's window (to 5700ms) must pass before the probe.
			{at: 2800 * ms, op: opRecover, rate: 80, accepted: 80},
			{at: 5600 * ms, op: opRecover, rate: 80, accepted: 300},
			{at: 5800 * ms, op: opRecover, rate: 88, change: 1, accepted: 20},  // from the cap: * 1.1
			{at: 7000 * ms, op: opRecover, rate: 100, change: 1, accepted: 90}, // * 1.2, capped at the ceiling
		})
		// The key of the run that counted (a void run leaves its own).
		if n := e.rdb.Exists(t.Context(), e.keys.AIMD("test", key)).Val(); n != 0 {
			t.Fatal("the aimd hash outlived the return to the ceiling")
		}
	})
}

// TestAIMDFoundCapacity checks the rules for a key whose capacity is
// found: a throttle episode whose estimate is near the last one averages
// the two; throttles that persist while the rate is below the estimate cut
// nothing but pause until the provider's bucket has earned the pacer's
// burst back (they come from its bucket, emptied by the probe); back at
// the capacity the rate cruises for 4 windows before the probe above it;
// and that probe climbs only while 90% of its rate is accepted over the
// window less a quarter of a second (not less a second, as below it).
func TestAIMDFoundCapacity(t *testing.T) {
	adapts(t, pausingAIMD(), append(capacity85(), []aimdStep{
		// At the cap: no probe before 4 windows (8500ms).
		{at: 5600 * ms, op: opRecover, rate: 85, accepted: 95},
		{at: 8400 * ms, op: opRecover, rate: 85, accepted: 250},
		{at: 8600 * ms, op: opRecover, rate: 93.5, change: 1, accepted: 40}, // 385 >= 0.9 * 85/s * 3.6 s: * 1.1
		// 40 < 0.9 * 93.5/s * 0.85 s: not in use yet (the rule below the
		// cap, over the window less a second, would take 8.4).
		{at: 9700 * ms, op: opRecover, rate: 93.5, accepted: 40},
		// 70 < 0.9 * 93.5/s * 0.95 s = 80: not yet (over the window
		// less half a second, 59, it would have climbed).
		{at: 9800 * ms, op: opRecover, rate: 93.5, accepted: 30},
		{at: 9900 * ms, op: opRecover, rate: 100, change: 1, accepted: 20}, // 90 >= 88: * (1 + 0.2), capped
	}...))
}

// pausingAIMD is capacityAIMD(time.Second) with the refill pause: lim100
// has a burst of 100, so a pause earns u * 100/100 tokens at u/s: 1 s.
func pausingAIMD() adapt.AIMD {
	a := capacityAIMD(time.Second)
	a.NoRefillPause = false
	return a
}

// capacity85 are the first steps of TestAIMDFoundCapacity under
// pausingAIMD: a capacity of 85 found, the rate there at 4.5 s.
func capacity85() []aimdStep {
	const ms, pause = time.Millisecond, time.Second
	return []aimdStep{
		{at: 0, op: opThrottle, rate: 100, cooldown: 10 * ms}, // lone
		{at: 20 * ms, op: opThrottle, rate: 100, cooldown: 10 * ms},
		{at: 30 * ms, op: opThrottle, rate: 100, cooldown: 10 * ms},
		{at: 40 * ms, op: opThrottle, rate: 100, cooldown: 10 * ms},
		// 40 accepted in 0.5 s: 80/s, the cut to 72 and the pause (to 1500ms).
		{at: 500 * ms, op: opThrottle, rate: 72, change: -1, cooldown: pause, accepted: 40},
		// 171 accepted in the 1.9 s since the cut, its pause included (the
		// provider's bucket, empty at the cut, earns tokens through it
		// that the sends after it take): 90/s, near 80: the estimate is
		// 85, above the rate: no cut, a pause again (to 3400ms). Counted
		// from the pause's end (0.9 s) the same sends made 190/s.
		{at: 2400 * ms, op: opThrottle, rate: 72, cooldown: pause, accepted: 171},
		{at: 4500 * ms, op: opRecover, rate: 85, change: 1, accepted: 80}, // below the cap: to it
	}
}

// TestAIMDProbeCutToTheCapacity: a probe above a capacity found that meets
// the limit steps back to the capacity less one probe step and pauses
// (lone); a throttle that persists there with no reports to measure the
// episode by is cut to Backoff of that capacity, not by Decrease below it.
func TestAIMDProbeCutToTheCapacity(t *testing.T) {
	adapts(t, pausingAIMD(), append(capacity85(), []aimdStep{
		{at: 8400 * ms, op: opRecover, rate: 85, accepted: 345},
		{at: 8600 * ms, op: opRecover, rate: 93.5, change: 1, accepted: 40}, // the probe
		// lone: the capacity steps down to 85 / 1.1, the rate with it,
		// and the pause (77.27 tokens at 77.27/s)
		{at: 8700 * ms, op: opThrottle, rate: 77.272727, change: -1, cooldown: time.Second},
		{at: 8750 * ms, op: opThrottle, rate: 77.272727, cooldown: 950 * ms}, // coalesced
		// After the pause, no reports: Decrease's cut would be to
		// 38.6; the capacity's Backoff is 69.5.
		{at: 9800 * ms, op: opThrottle, rate: 69.545454, change: -1, cooldown: time.Second},
	}...))
}

// TestAIMDLoneThrottleStepsCapacityDown: a lone throttle of a key at or
// above a capacity found lowers the capacity by one probe step (divided
// by Factor, or less Step), but not below what the provider accepted
// since the last throttle when the pacer was busy over 2 * Persist or
// more, which also raises it; a rate above it goes to it, keeping the
// slots granted (the debt is scaled, not cleared), and the key pauses as
// after a decrease; below the capacity, the rate and the capacity stay.
// Without a capacity found, a lone throttle changes no rate and sets no
// pause.
func TestAIMDLoneThrottleStepsCapacityDown(t *testing.T) {
	t.Run("at the capacity", func(t *testing.T) {
		adapts(t, pausingAIMD(), append(capacity85(), []aimdStep{
			{at: 8400 * ms, op: opThrottle, rate: 77.272727, change: -1, cooldown: time.Second}, // 85 / 1.1
			// The next lone one, 2 s later: 77.27 / 1.1.
			{at: 10500 * ms, op: opThrottle, rate: 70.247933, change: -1, cooldown: time.Second},
		}...))
	})
	t.Run("measured", func(t *testing.T) {
		adapts(t, pausingAIMD(), append(capacity85(), []aimdStep{
			{at: 6000 * ms, op: opRecover, rate: 85, accepted: 300},
			// 480 accepted in the 6 s since the throttle at 2.4 s, the
			// pacer busy (481 sent >= 0.9 * 85/s * 6 s): 80/s.
			{at: 8400 * ms, op: opThrottle, rate: 80, change: -1, cooldown: time.Second, accepted: 100},
			// 4.1 s later, 100 sent: not busy, one step (80 / 1.1).
			{at: 12500 * ms, op: opThrottle, rate: 72.727272, change: -1, cooldown: time.Second, accepted: 100},
		}...))
	})
	t.Run("never below a step", func(t *testing.T) {
		adapts(t, pausingAIMD(), append(capacity85(), []aimdStep{
			{at: 6000 * ms, op: opRecover, rate: 85, accepted: 300},
			// 460 in 6 s, busy: 76.67/s, below one step (85 / 1.1):
			// the step it is.
			{at: 8400 * ms, op: opThrottle, rate: 77.272727, change: -1, cooldown: time.Second, accepted: 80},
		}...))
	})
	t.Run("measured above", func(t *testing.T) {
		adapts(t, pausingAIMD(), append(capacity85(), []aimdStep{
			{at: 6000 * ms, op: opRecover, rate: 85, accepted: 300},
			// 540 in 6 s: the provider took 90/s; the rate stays (the
			// pause: 85 tokens at 85/s) and goes to the capacity, 90,
			// after a clean window.
			{at: 8400 * ms, op: opThrottle, rate: 85, cooldown: time.Second, accepted: 160},
			{at: 10500 * ms, op: opRecover, rate: 90, change: 1, accepted: 90},
		}...))
	})
	t.Run("below the capacity", func(t *testing.T) {
		adapts(t, pausingAIMD(), append(capacity85()[:6], []aimdStep{
			// 72 < 85: the rate and the capacity stay (the pacer, not
			// the provider, set what was accepted); the pause.
			{at: 4500 * ms, op: opThrottle, rate: 72, cooldown: time.Second, accepted: 80},
			{at: 6600 * ms, op: opRecover, rate: 85, change: 1, accepted: 80}, // to the capacity
		}...))
	})
	t.Run("step", func(t *testing.T) {
		a := pausingAIMD()
		a.Factor, a.Step = 0, 4
		adapts(t, a, append(capacity85()[:6], []aimdStep{
			{at: 4500 * ms, op: opRecover, rate: 85, change: 1, accepted: 80},
			{at: 4600 * ms, op: opThrottle, rate: 81, change: -1, cooldown: time.Second}, // 85 - 4
		}...))
	})
	// slots ahead reserves lim.Burst + 60 slots of key "s" under ad's limit
	// (about 0.7 s ahead) and returns how far ahead the last one is.
	slotsAhead := func(t *testing.T, e *env, ad adapt.Adapted) time.Duration {
		t.Helper()
		lim := ad.Limit(lim100)
		var last time.Duration
		for range lim.Burst + 60 {
			r, err := e.b.Reserve(t.Context(), "test", "s", lim, 1, 10*time.Second)
			if err != nil || !r.OK {
				t.Fatalf("Reserve = %+v, %v", r, err)
			}
			last = r.Delay
		}
		return last
	}
	// nextSlot is the delay of the next slot of key "s" under ad's limit,
	// at least 20 ms after the throttle that returned ad (its cooldown), and
	// how long after granted the grant was (0 on miniredis's exact clock).
	nextSlot := func(t *testing.T, e *env, ad adapt.Adapted, at time.Duration, granted time.Time) (time.Duration, time.Duration) {
		t.Helper()
		e.at(at)
		if !e.exact() {
			time.Sleep(20 * ms) // the cooldown runs from the throttle's own time
		}
		r, err := e.b.Reserve(t.Context(), "test", "s", ad.Limit(lim100), 1, 10*time.Second)
		if err != nil || !r.OK {
			t.Fatalf("Reserve = %+v, %v", r, err)
		}
		if e.exact() {
			return r.Delay, 0
		}
		return r.Delay, time.Since(granted)
	}
	// off reports whether rate is not want: exactly on miniredis, within 15%
	// on redis-server (its real clock makes each episode longer by however
	// late the calls are, on a loaded machine tens of ms of a 0.5 s one).
	off := func(e *env, rate, want float64) bool {
		if e.exact() {
			return math.Abs(rate-want) > 1e-5
		}
		return math.Abs(rate-want) > 0.15*want
	}
	// capacity80 throttles key "s" under pausingAIMD with no refill pause
	// (the pause is tested elsewhere): lone, then 40 accepted in 0.5 s: a
	// capacity of 80 found; with so few refusals the cut stops at 0.9 x
	// (100 less the refusals per second), 88.2, above it. It returns the
	// AIMD, a throttle of "s" with accepted sends reported, lone, which
	// moves to offset d and on redis-server also waits Persist after the
	// last throttle really ran (so the next is lone however late the
	// calls), and the bounds of the rate a lone throttle then steps the
	// capacity down to: 80 / 1.1 on miniredis; on redis-server 40 over the
	// episode as it really ran, / 1.1.
	capacity80 := func(t *testing.T, e *env) (adapt.AIMD, func(accepted int) adapt.Adapted, func(d time.Duration), [2]float64) {
		a := pausingAIMD()
		a.NoRefillPause = true
		var calls []redistest.Call
		throttle := func(accepted int) adapt.Adapted {
			t.Helper()
			var ad adapt.Adapted
			var err error
			calls = append(calls, redistest.Timed(func() {
				ad, err = e.l.ThrottledAfter(t.Context(), "test", "s", lim100, a, 0, accepted, 0)
			}))
			if err != nil {
				t.Fatalf("Throttled: %v", err)
			}
			e.mark()
			return ad
		}
		lone := func(d time.Duration) {
			e.at(d)
			if !e.exact() {
				time.Sleep(time.Until(calls[len(calls)-1].Answered.Add(a.Persist)))
			}
		}
		throttle(0) // lone: the episode starts
		e.at(500 * ms)
		if ad := throttle(40); !ad.Decreased || off(e, ad.Rate, 88.2) {
			t.Fatalf("Throttled = %+v; want a cut to 88.2", ad)
		}
		step := [2]float64{72.727272, 72.727272}
		if first, cut := calls[0], calls[1]; !e.exact() {
			step = [2]float64{40 / cut.Answered.Sub(first.Sent).Seconds() / 1.1, 40 / cut.Sent.Sub(first.Answered).Seconds() / 1.1}
		}
		return a, throttle, lone, step
	}
	// stepped reports whether rate is the capacity stepped down, within
	// step's bounds (less the millionths the script floors).
	stepped := func(rate float64, step [2]float64) bool {
		return rate >= step[0]-1e-5 && rate <= step[1]+1e-5
	}
	t.Run("slots dropped above the capacity", func(t *testing.T) {
		each(t, func(t *testing.T, e *env) {
			a, throttle, lone, step := capacity80(t, e)
			lone(2600 * ms) // Persist after the cut
			ad, err := e.l.Adapted(t.Context(), "test", "s", lim100, a)
			if err != nil {
				t.Fatal(err)
			}
			last := slotsAhead(t, e, ad)
			granted := time.Now()
			// Lone, at 88.2 above the capacity (a probe, or a cut kept above
			// the estimate): the provider refuses that rate, so the slots
			// granted at it are dropped, a decrease every replica learns
			// of (SinceDecrease 0), and taken anew at 80 / 1.1.
			ad = throttle(0)
			if !ad.Decreased || ad.SinceDecrease != 0 || !stepped(ad.Rate, step) {
				t.Fatalf("Throttled = %+v; want a decrease to %.6f..%.6f (72.73 on miniredis) recorded now (SinceDecrease 0)", ad, step[0], step[1])
			}
			// With the debt cleared the next slot is one token interval
			// (14 ms) from the throttle, not after the granted ones.
			d, _ := nextSlot(t, e, ad, 2620*ms, granted)
			if d > last/4 {
				t.Fatalf("first slot after the throttle in %v, want within a few token intervals (the granted ones, the last %v ahead, dropped)",
					d, last)
			}
		})
	})
	t.Run("measured above the capacity", func(t *testing.T) {
		each(t, func(t *testing.T, e *env) {
			_, throttle, lone, _ := capacity80(t, e)
			cut := time.Now()
			lone(2600 * ms)
			// Lone at 88.2, above the capacity of 80 that the cut kept it
			// over: 220 accepted in the 2.1 s since the cut (Persist, not
			// 2 x Persist, as the rate ran above the capacity), 104.8/s:
			// the capacity is at least that, and the rate stays. On
			// redis-server, 104.8/s over the time since the cut as it ran,
			// and 0.5 s more: above 88.2/s however late the call.
			accepted := 220
			if !e.exact() {
				accepted = int(math.Ceil(104.8 * (time.Since(cut) + 500*ms).Seconds()))
			}
			if ad := throttle(accepted); ad.Decreased || off(e, ad.Rate, 88.2) {
				t.Fatalf("Throttled = %+v; want the rate kept at 88.2", ad)
			}
		})
	})
	t.Run("slots kept at the capacity", func(t *testing.T) {
		each(t, func(t *testing.T, e *env) {
			a, throttle, lone, step := capacity80(t, e)
			lone(2600 * ms)
			ad := throttle(0)
			if !ad.Decreased || !stepped(ad.Rate, step) { // to the capacity, 80 / 1.1
				t.Fatalf("Throttled = %+v; want a step down to %.6f..%.6f (72.73 on miniredis)", ad, step[0], step[1])
			}
			atCap := ad.Rate
			lone(4700 * ms) // Persist later
			ad, err := e.l.Adapted(t.Context(), "test", "s", lim100, a)
			if err != nil {
				t.Fatal(err)
			}
			last := slotsAhead(t, e, ad)
			granted := time.Now()
			// Lone at the capacity: one probe step down (72.73 / 1.1)
			// keeps the slots granted (the debt is scaled, not cleared).
			if ad = throttle(0); !ad.Decreased || ad.CooldownLeft > 10*ms || !stepped(ad.Rate, [2]float64{atCap / 1.1, atCap / 1.1}) {
				t.Fatalf("Throttled = %+v; want a step down to %.6f (66.12 on miniredis) with a 10ms cooldown", ad, atCap/1.1)
			}
			// The next slot follows the granted ones (the last was granted
			// about 0.7 s ahead; on redis-server the time since has passed
			// for real); with the debt cleared it would be one token
			// interval from now, 15 ms.
			d, elapsed := nextSlot(t, e, ad, 4720*ms, granted)
			if d+elapsed < last/2 {
				t.Fatalf("first slot after the step in %v (%v after the grants), want after the granted ones (the last %v ahead)",
					d, elapsed, last)
			}
		})
	})
	t.Run("no capacity", func(t *testing.T) {
		adapts(t, pausingAIMD(), []aimdStep{
			{at: 0, op: opThrottle, rate: 100, cooldown: 10 * ms},
			{at: 2100 * ms, op: opThrottle, rate: 100, cooldown: 10 * ms},
		})
	})
}

// TestAIMDProbeAcceleratesOnEvidence checks that above a capacity found a
// probe step doubles the next only once the sends accepted over the
// window average at least halfway from the capacity to the rate; else the
// next step keeps its size.
func TestAIMDProbeAcceleratesOnEvidence(t *testing.T) {
	a := capacityAIMD(time.Second)
	adapts(t, a, append(capacity40(), []aimdStep{
		{at: 4600 * ms, op: opRecover, rate: 55, change: 1, accepted: 180}, // after 4 windows: * 1.1
		// 45 in 1.1 s: in use, but under (40 + 55) / 2 per second. This
		// step is 20% (the first one doubles), and the next one keeps it.
		{at: 5700 * ms, op: opRecover, rate: 66, change: 1, accepted: 45},
		// 20% again, not 40%; 80 in 1.1 s is over (40 + 66) / 2 per
		// second, so the next one doubles.
		{at: 6800 * ms, op: opRecover, rate: 79.2, change: 1, accepted: 80},
		{at: 7900 * ms, op: opRecover, rate: 100, change: 1, accepted: 90}, // * 1.4, capped
	}...))
}

// TestAIMDFewRefusalsKeepTheCapacity: an episode whose refusals are 10%
// of its requests or fewer did not saturate the provider (the pacer sent
// short of its rate after a cut, replicas reported late), so what was
// reported accepted is a bound below the capacity: the cut goes no lower
// than Backoff of the rate less the refusals per second (what the
// provider took had the pacer sent its rate) nor the capacity found less
// Backoff; an episode with more refusals cuts to Backoff of what the
// provider accepted.
func TestAIMDFewRefusalsKeepTheCapacity(t *testing.T) {
	a := capacityAIMD(time.Hour)
	adapts(t, a, append(capacity40(), []aimdStep{
		// 20 accepted and 1 refused in 1 s at 50/s: the provider refused
		// under 10%: the rate less the refusals is 49/s, the rate goes to
		// 0.9 of it (not Decrease's 25, nor 36, the capacity found less
		// Backoff).
		{at: 1500 * ms, op: opThrottle, rate: 44.1, change: -1, cooldown: cd, accepted: 20},
		{at: 1550 * ms, op: opThrottle, rate: 44.1, cooldown: cd},
		{at: 1560 * ms, op: opThrottle, rate: 44.1, cooldown: cd},
		{at: 1570 * ms, op: opThrottle, rate: 44.1, cooldown: cd},
		// 10 accepted and 4 refused in 0.5 s: saturated, a capacity of
		// 20/s: the cut stops at Decrease's 22.05.
		{at: 2000 * ms, op: opThrottle, rate: 22.05, change: -1, cooldown: cd, accepted: 10},
	}...))
}

// TestAIMDFewRefusalsFloorAtCapacity: with few refusals at a rate near the
// capacity found, where the rate less the refusals is under it, the
// capacity less Backoff is the floor, and the rate goes to it.
func TestAIMDFewRefusalsFloorAtCapacity(t *testing.T) {
	// Decrease 0.5: its floor (40.5 at the last step) stays far below the
	// capacity's; at 0.8 (80 at the cut) it held the rate above the
	// capacity less Backoff as soon as redis-server's episode ran 7 ms
	// longer than 0.5 s (a capacity under 88.9), and the last step cut.
	a := capacityAIMD(time.Hour)
	adapts(t, a, []aimdStep{
		{at: 0, op: opThrottle, rate: 100, cooldown: cd},
		{at: 20 * ms, op: opThrottle, rate: 100, cooldown: cd},
		{at: 30 * ms, op: opThrottle, rate: 100, cooldown: cd},
		{at: 40 * ms, op: opThrottle, rate: 100, cooldown: cd},
		{at: 50 * ms, op: opThrottle, rate: 100, cooldown: cd},
		// 45 accepted and 6 refused in 0.5 s: a capacity of 90/s, the
		// rate to 81.
		{at: 500 * ms, op: opThrottle, rate: 81, change: -1, cooldown: cd, accepted: 45},
		// 1 s later, 60 accepted and 1 refused: 60/s reported, the rate
		// less the refusals 80/s; the capacity found less Backoff, 81, is
		// the floor: no cut (the rate is there already).
		{at: 1500 * ms, op: opThrottle, rate: 81, cooldown: cd, accepted: 60},
	})
}

// TestAIMDEstimateFarAboveCapacity: throttles that persist while the
// rate is below an estimate more than 1.25 times the capacity found cut
// nothing and raise the capacity to the rate at most: the next clean
// window does not jump to the estimate, and the rate cruises there.
func TestAIMDEstimateFarAboveCapacity(t *testing.T) {
	a := capacityAIMD(time.Second)
	adapts(t, a, append(capacity40(), []aimdStep{
		// 40 in 0.5 s: 80/s, twice the capacity and above the rate: no
		// cut; the capacity goes to 50, not 80.
		{at: 1000 * ms, op: opThrottle, rate: 50, cooldown: cd, accepted: 40},
		{at: 2100 * ms, op: opRecover, rate: 50, accepted: 60}, // at the capacity: cruising
		{at: 5100 * ms, op: opRecover, rate: 55, change: 1, accepted: 150},
	}...))
}

// TestAIMDStaleReplicaThrottle checks that a throttle of a send paced
// above the current adapted rate (a replica that had not yet seen the last
// decrease) sets the cooldown and counts as part of that decrease, where
// the same throttle paced at the current rate cuts again.
func TestAIMDStaleReplicaThrottle(t *testing.T) {
	a := capacityAIMD(time.Second)
	adapts(t, a, []aimdStep{
		{at: 0, op: opThrottle, rate: 100, cooldown: cd, paced: 100}, // lone
		{at: 20 * ms, op: opThrottle, rate: 100, cooldown: cd, paced: 100},
		{at: 30 * ms, op: opThrottle, rate: 100, cooldown: cd, paced: 100},
		{at: 40 * ms, op: opThrottle, rate: 100, cooldown: cd, paced: 100},
		{at: 500 * ms, op: opThrottle, rate: 72, change: -1, cooldown: cd, accepted: 40, paced: 100}, // 80/s * 0.9
		// 300 ms later, past the coalescing, a replica still pacing at
		// 100/s is refused: part of the decrease made, no new cut.
		{at: 800 * ms, op: opThrottle, rate: 72, cooldown: cd, paced: 100},
		{at: 900 * ms, op: opThrottle, rate: 72, cooldown: cd, paced: 100},
		// Paced at no more than the current rate, a throttle within
		// Persist cuts: 30 accepted in the 0.5 s since the decrease, 60/s *
		// 0.9.
		{at: 1000 * ms, op: opThrottle, rate: 54, change: -1, cooldown: cd, accepted: 30, paced: 70},
	})
}

// TestAIMDSporadicThrottlesCutNothing: throttles within Persist of each
// other cut nothing while the provider accepted 99% or more of the
// episode's requests (the jitter of a busy key at its burst edge); a
// refused share of 1% or more does.
func TestAIMDSporadicThrottlesCutNothing(t *testing.T) {
	a := capacityAIMD(time.Hour)
	adapts(t, a, []aimdStep{
		{at: 0, op: opThrottle, rate: 100, cooldown: cd},
		{at: 1000 * ms, op: opThrottle, rate: 100, cooldown: cd, accepted: 198}, // 2 of 200 refused: no cut, a new episode
		// 2 of 99: a cut, to 0.9 of the rate less the refusals per second
		// (99/s; the reports, 97/s, can only err low).
		{at: 2000 * ms, op: opThrottle, rate: 89.1, change: -1, cooldown: cd, accepted: 97},
	})
}

// TestAIMDCeilingRaiseFollowed: a key whose state holds its ceiling (lone
// throttles only) follows a raised ceiling at once; one the provider cut
// keeps its rate under the new ceiling.
func TestAIMDCeilingRaiseFollowed(t *testing.T) {
	a := capacityAIMD(time.Hour)
	old, raised := bucket.Limit{PerSecond: 50, Burst: 10}, bucket.Limit{PerSecond: 200, Burst: 10}
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		if ad, err := e.l.Throttled(ctx, "test", "lone", old, a, 0); err != nil || ad.Rate != 50 {
			t.Fatalf("lone throttle: %+v, %v", ad, err)
		}
		if ad, err := e.l.Adapted(ctx, "test", "lone", raised, a); err != nil || ad.Rate != 200 {
			t.Fatalf("after the raise: %+v, %v; want rate 200 (it held its old ceiling)", ad, err)
		}
		if !e.exact() {
			return // the cut needs the clock moved
		}
		if _, err := e.l.Throttled(ctx, "test", "cut", old, a, 0); err != nil {
			t.Fatal(err)
		}
		e.at(500 * time.Millisecond)
		ad, err := e.l.Throttled(ctx, "test", "cut", old, a, 0)
		if err != nil || !(ad.Rate < 50) {
			t.Fatalf("persistent throttle: %+v, %v; want a cut", ad, err)
		}
		if got, err := e.l.Adapted(ctx, "test", "cut", raised, a); err != nil || got.Rate != ad.Rate {
			t.Fatalf("after the raise: %+v, %v; want the cut rate %v kept", got, err, ad.Rate)
		}
	})
}

// TestAIMDPacingHeadroom checks the limit the pacer takes tokens under:
// the burst less the tokens Jitter can bunch, or, with a burst of 1, slots
// Jitter further apart, at a cost of at most 2.5% of the rate; Jitter < 0
// leaves none.
func TestAIMDPacingHeadroom(t *testing.T) {
	for _, tc := range []struct {
		ceiling bucket.Limit
		a       adapt.AIMD
		want    bucket.Limit
	}{
		{bucket.Limit{PerSecond: 80, Burst: 10}, adapt.AIMD{}, bucket.Limit{PerSecond: 80, Burst: 8}}, // 2 tokens in 25ms
		{bucket.Limit{PerSecond: 80, Burst: 10}, adapt.AIMD{Jitter: -1}, bucket.Limit{PerSecond: 80, Burst: 10}},
		{bucket.Limit{PerSecond: 80, Burst: 10}, adapt.AIMD{Jitter: 100 * time.Millisecond}, bucket.Limit{PerSecond: 80, Burst: 5}}, // at most half
		{bucket.Limit{PerSecond: 0.5, Burst: 1}, adapt.AIMD{}, bucket.Limit{PerSecond: 0.5 / 1.0125, Burst: 1}},
		{bucket.Limit{PerSecond: 40, Burst: 2}, adapt.AIMD{}, bucket.Limit{PerSecond: 40, Burst: 1}},
		{bucket.Limit{PerSecond: 20, Burst: 1}, adapt.AIMD{}, bucket.Limit{PerSecond: 20 / 1.025, Burst: 1}}, // 0.5 tokens of jitter: at most 2.5% of the rate
		{bucket.Limit{PerSecond: 39, Burst: 1}, adapt.AIMD{}, bucket.Limit{PerSecond: 39 / 1.025, Burst: 1}}, // 0.975 tokens: not half the rate
		{bucket.Limit{PerSecond: 1, Burst: 1}, adapt.AIMD{}, bucket.Limit{PerSecond: 1 / 1.025, Burst: 1}},   // 0.025 tokens: all of it
		{bucket.Limit{PerSecond: 80, Burst: 1}, adapt.AIMD{}, bucket.Limit{PerSecond: 80, Burst: 1}},         // 2 tokens: no cut
		{bucket.Limit{PerSecond: 1000, Burst: 10}, adapt.AIMD{}, bucket.Limit{PerSecond: 1000, Burst: 5}},    // leases stay large
	} {
		t.Run(fmt.Sprintf("%v/%v", tc.ceiling, tc.a.Jitter), func(t *testing.T) {
			e := newMini(t)
			ad, err := e.l.Adapted(t.Context(), "test", "k", tc.ceiling, tc.a)
			if err != nil {
				t.Fatal(err)
			}
			got := ad.Limit(tc.ceiling)
			if got.Burst != tc.want.Burst || math.Abs(got.PerSecond-tc.want.PerSecond) > 1e-9 {
				t.Fatalf("Limit = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestAIMDReschedulesDebt checks that a change of the adapted rate moves
// the slots the bucket granted ahead: a decrease clears the debt (the
// pacer drops the slots it held and takes new ones at the new rate), an
// increase scales it, so new slots follow the granted ones at the new
// spacing instead of falling among them.
func TestAIMDReschedulesDebt(t *testing.T) {
	a := adapt.AIMD{MinCooldown: time.Millisecond, Coalesce: time.Millisecond, Decrease: 0.5, Backoff: 1e-9, NoRefillPause: true,
		Persist: time.Hour, Window: time.Second, Factor: 2, Accelerate: 1}
	ceiling := bucket.Limit{PerSecond: 10, Burst: 1}
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		reserve := func(perSecond float64) time.Duration {
			t.Helper()
			r, err := e.b.Reserve(ctx, "test", "k", bucket.Limit{PerSecond: perSecond, Burst: 1}, 1, 10*time.Second)
			if err != nil || !r.OK {
				t.Fatalf("Reserve = %+v, %v", r, err)
			}
			return r.Delay
		}
		throttle := func(want float64) {
			t.Helper()
			if ad, err := e.l.Throttled(ctx, "test", "k", ceiling, a, 0); err != nil || ad.Rate != want {
				t.Fatalf("Throttled = %+v, %v; want rate %v", ad, err, want)
			}
		}
		throttle(10) // lone
		e.mark()
		e.at(100 * ms)
		for range 10 {
			reserve(10) // slots up to 0.9 s ahead: 9 tokens of debt
		}
		throttle(5) // persistent: 10 -> 5, the debt is cleared
		e.mark()
		e.at(110 * ms) // past the 1ms cooldown
		if !e.exact() {
			// The cooldown runs from the throttle's own time on the running
			// clock, which a loaded machine can put past 109 ms.
			time.Sleep(2 * ms)
		}
		if d := reserve(5); d > 200*ms {
			t.Fatalf("first slot after the decrease in %v, want < 200ms (one interval at 5/s, not behind the old debt)", d)
		}
		for range 9 {
			reserve(5) // slots up to about 2.1 s at 5/s
		}
		e.at(1300 * ms) // the window (from 101ms) is over: 5 -> 10
		if ad, err := e.l.Recover(ctx, "test", "k", ceiling, a); err != nil || ad.Rate != 10 || !ad.Increased {
			t.Fatalf("Recover = %+v, %v; want rate 10", ad, err)
		}
		e.mark()
		// At 1.3 s the last slot granted at 5/s is at about 2.1 s: 0.8 s
		// ahead, 4 tokens of debt at 5/s. Scaled to 8 at 10/s, the next slot
		// is 0.9 s ahead, after them; left at 4 tokens it would be 0.5 s
		// ahead, among them.
		if d := reserve(10); d < 800*ms || d > time.Second {
			t.Fatalf("first slot after the increase in %v, want about 900ms (after the granted ones)", d)
		}
	})
}

// TestAIMDRefillPause checks the cooldown after a decrease: until the
// provider, which kept refusing and so has spent its burst, has earned the
// burst the pacer takes at the new rate (the ceiling's burst scaled by new
// rate / ceiling), not its whole burst; a lone throttle and NoRefillPause
// have none.
func TestAIMDRefillPause(t *testing.T) {
	ceiling := bucket.Limit{PerSecond: 10, Burst: 5}
	for _, tc := range []struct {
		off  bool
		want time.Duration
	}{{false, 500 * ms}, {true, 100 * ms}} {
		t.Run(fmt.Sprint("NoRefillPause=", tc.off), func(t *testing.T) {
			a := adapt.AIMD{Decrease: 0.5, Backoff: 1e-9, Persist: time.Hour, Coalesce: time.Millisecond, NoRefillPause: tc.off}
			each(t, func(t *testing.T, e *env) {
				e.adapts(t, "k", ceiling, a, []aimdStep{
					{at: 0, op: opThrottle, rate: 10, cooldown: 100 * ms}, // lone: one token interval
					// The burst the pacer takes at 5/s, 5 * 5/10 = 2.5 tokens, at
					// 5/s: 500ms. The provider's whole burst (1 s) would cost
					// 2.5 sends more at each cut.
					{at: 200 * ms, op: opThrottle, rate: 5, change: -1, cooldown: tc.want},
				})
			})
		})
	}
}

// TestPairThrottled checks the shared pair state: for a pair's first
// throttle the cooldown base and the given rate, then max(PairAgain (a
// minute), base) and half the rate each time (never below a message a
// minute), never above the maximum nor shortened; other pairs and keys
// untouched; a pair quiet for 10 minutes counts anew.
func TestPairThrottled(t *testing.T) {
	s := time.Second
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		pt := func(key, sub string, base time.Duration, rate float64, wantCD time.Duration, wantN int, wantRate float64) {
			t.Helper()
			pr, err := e.l.PairThrottled(ctx, "test", key, sub, base, time.Hour, rate)
			if err != nil || !e.near(pr.Left, wantCD) || pr.Throttles != wantN || math.Abs(pr.Rate-wantRate) > 1e-6 {
				t.Fatalf("PairThrottled(%s, %s) = %+v, %v; want %v, %d, rate %v", key, sub, pr, err, wantCD, wantN, wantRate)
			}
		}
		pt("k", "p1", 2*s, 0.5, 2*s, 1, 0.5)
		pt("k", "p1", 2*s, 0.5, time.Minute, 2, 0.25)  // max(1m, 2s), half the rate
		pt("k", "p1", 2*s, 0.5, time.Minute, 3, 0.125) // again, not 4^n: the pair's bucket refills meanwhile
		pt("k", "p2", 6*s, 1.0/6, 6*s, 1, 1.0/6)       // another pair: its own count and rate
		pt("other", "p1", 2*s, 0.5, 2*s, 1, 0.5)       // another key
		pt("k", "p1", 90*s, 0.5, 90*s, 4, 0.0625)      // a longer base (hint) wins over the minute
		for n := 5; n <= 8; n++ {
			pt("k", "p1", 2*s, 0.5, 90*s, n, max(0.5/float64(int(1)<<(n-1)), adapt.PairMinRate))
		}
		if pr, err := e.l.PairThrottled(ctx, "test", "k", "p3", 2*s, 30*s, 0.5); err != nil || !e.near(pr.Left, 2*s) || pr.Throttles != 1 {
			t.Fatalf("p3 first: %+v, %v", pr, err)
		}
		if pr, err := e.l.PairThrottled(ctx, "test", "k", "p3", 2*s, 30*s, 0.5); err != nil || !e.near(pr.Left, 30*s) || pr.Throttles != 2 {
			t.Fatalf("p3 again, max 30s: %+v, %v; want the 30s cap", pr, err)
		}
		got, err := e.l.Pairs(ctx, "test", "k")
		if err != nil || len(got) != 3 || !e.near(got["p1"].Left, 90*s) || !e.near(got["p2"].Left, 6*s) || !e.near(got["p3"].Left, 30*s) ||
			math.Abs(got["p1"].Rate-adapt.PairMinRate) > 1e-6 || math.Abs(got["p3"].Rate-0.25) > 1e-6 {
			t.Fatalf("Pairs = %+v, %v; want p1 ~90s at 1/min, p2 ~6s, p3 ~30s at 0.25/s", got, err)
		}
		if _, err := e.l.PairThrottled(ctx, "test", "k", "", s, time.Hour, 1); !errors.Is(err, adapt.ErrInvalidAIMD) {
			t.Fatalf("empty sub: %v, want ErrInvalidAIMD", err)
		}
		if _, err := e.l.PairThrottled(ctx, "test", "k", "p1", s, time.Hour, 0); !errors.Is(err, adapt.ErrInvalidAIMD) {
			t.Fatalf("rate 0: %v, want ErrInvalidAIMD", err)
		}
		if !e.exact() {
			return
		}
		e.at(7 * s) // p2's cooldown over: still listed with its rate
		if got, _ := e.l.Pairs(ctx, "test", "k"); len(got) != 3 || got["p2"].Left != 0 || math.Abs(got["p2"].Rate-1.0/6) > 1e-6 {
			t.Fatalf("after p2's cooldown: %+v, want p2 with no cooldown at 1/6 s", got)
		}
		e.at(12 * time.Minute) // quiet for 10 minutes: forgotten, and counts anew
		if got, _ := e.l.Pairs(ctx, "test", "k"); len(got) != 0 {
			t.Fatalf("after 12 minutes: %+v, want none", got)
		}
		pt("k", "p1", 2*s, 0.5, 2*s, 1, 0.5)
	})
}

// TestAchieved checks the achieved rate every replica reports with
// RecoverAfter and ThrottledAfter: summed over a window of at least 5 s,
// whatever the key's adaptive state (a key being throttled is still
// sending), and none before a window closed.
func TestAchieved(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		if a, err := e.l.Achieved(ctx, "test", "k"); a != (adapt.Achieved{}) || err != nil {
			t.Fatalf("Achieved before any report: %+v, %v; want neither known nor warming up", a, err)
		}
		rec := func(n int) {
			t.Helper()
			if _, err := e.l.RecoverAfter(ctx, "test", "k", lim100, adapt.AIMD{}, n); err != nil {
				t.Fatal(err)
			}
		}
		rec(0) // opens the window
		e.mark()
		e.at(2 * time.Second)
		rec(200) // replica A
		// Replica B reports with a throttle.
		if _, err := e.l.ThrottledAfter(ctx, "test", "k", lim100, adapt.AIMD{}, 0, 150, 0); err != nil {
			t.Fatal(err)
		}
		if a, _ := e.l.Achieved(ctx, "test", "k"); a.Known || !a.WarmingUp {
			t.Fatalf("Achieved before the window closed: %+v; want warming up", a)
		}
		e.at(5 * time.Second)
		rec(50)
		a, err := e.l.Achieved(ctx, "test", "k")
		// 400 in 5 s; on the real clock the window is a little longer (up to
		// a quarter of a second on a loaded machine).
		if lo := map[bool]float64{true: 80, false: 76}[e.exact()]; !a.Known || a.WarmingUp || err != nil || a.PerSecond < lo || a.PerSecond > 80 {
			t.Fatalf("Achieved = %+v, %v; want 80 (400 in 5 s), >= %v on the real clock", a, err, lo)
		}
	})
}

// TestAchievedAfterIdle: a window in which the key went unreported for
// over 10 s (it sat idle) is no measure of its pace: a key that sent 40 in
// the first second, paused 19 s and is back at 80/s would read 2/s (40
// over 20 s) for the 5 s after. Achieved says warming up instead, until a
// window without such a gap closes: 400 in the 5 s after the pause, 80/s.
// A key paced at 0.1/s, reporting every 10 s, still has its rate measured.
func TestAchievedAfterIdle(t *testing.T) {
	e := newMini(t)
	ctx := t.Context()
	rec := func(at time.Duration, n int) {
		t.Helper()
		e.at(at)
		if _, err := e.l.RecoverAfter(ctx, "test", "k", lim100, adapt.AIMD{}, n); err != nil {
			t.Fatal(err)
		}
	}
	rec(0, 0) // opens the window
	rec(time.Second, 40)
	rec(20*time.Second, 0) // the key is used again: its first report
	if a, err := e.l.Achieved(ctx, "test", "k"); err != nil || a.Known || !a.WarmingUp {
		t.Fatalf("after a window with a 19 s pause: %+v, %v; want warming up", a, err)
	}
	for s := 21; s <= 25; s++ {
		rec(time.Duration(s)*time.Second, 80)
	}
	if a, err := e.l.Achieved(ctx, "test", "k"); err != nil || !a.Known || a.WarmingUp || a.PerSecond != 80 {
		t.Fatalf("after 5 s back at 80/s: %+v, %v; want 80/s", a, err)
	}
	// Paced at 0.1/s: one send reported every 10 s.
	for s := 35; s <= 55; s += 10 {
		rec(time.Duration(s)*time.Second, 1)
	}
	if a, err := e.l.Achieved(ctx, "test", "k"); err != nil || !a.Known || a.PerSecond != 0.1 {
		t.Fatalf("a key paced at 0.1/s: %+v, %v; want 0.1/s", a, err)
	}
}

// TestAIMDSinceDecrease checks that every reply says how long ago the rate
// was last lowered, on the Redis clock: -1 before any decrease, 0 from the
// throttle that lowers it, the time since from later reads, recovers and
// throttles that lower nothing (a replica that learns of a decrease at a
// refresh keeps the slots granted after it), and -1 again once the rate is
// back at its ceiling.
func TestAIMDSinceDecrease(t *testing.T) {
	a := classic(adapt.AIMD{MinCooldown: time.Millisecond, Coalesce: time.Millisecond, Window: time.Second, Factor: 4})
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		var dec redistest.Call // the call that decreased
		// step runs f, the call for op, and checks its rate and
		// SinceDecrease: exact on miniredis; on redis-server between the
		// times that passed from the decrease's call to this one, however
		// late either ran.
		step := func(op string, rate float64, want time.Duration, f func() (adapt.Adapted, error)) redistest.Call {
			t.Helper()
			var ad adapt.Adapted
			var err error
			c := redistest.Timed(func() { ad, err = f() })
			e.mark()
			since := ad.SinceDecrease
			ok := err == nil && ad.Rate == rate && (want < 0) == (since < 0)
			switch {
			case want <= 0 || e.exact():
				ok = ok && (want < 0 || since == want)
			default:
				ok = ok && since >= c.Sent.Sub(dec.Answered)-time.Millisecond && since <= c.Answered.Sub(dec.Sent)+time.Millisecond
			}
			if !ok {
				t.Fatalf("%s = %+v, %v; want rate %v, SinceDecrease %v", op, ad, err, rate, want)
			}
			return c
		}
		step("Adapted of a new key", 100, -1, func() (adapt.Adapted, error) { return e.l.Adapted(ctx, "test", "k", lim100, a) })
		step("lone Throttled", 100, -1, func() (adapt.Adapted, error) { return e.l.Throttled(ctx, "test", "k", lim100, a, 0) })
		e.at(100 * ms)
		dec = step("Throttled that lowers", 50, 0, func() (adapt.Adapted, error) { return e.l.Throttled(ctx, "test", "k", lim100, a, 0) })
		e.at(400 * ms)
		step("Recover within the window", 50, 300*ms, func() (adapt.Adapted, error) { return e.l.RecoverAfter(ctx, "test", "k", lim100, a, 0) })
		e.at(500 * ms)
		step("Adapted", 50, 400*ms, func() (adapt.Adapted, error) { return e.l.Adapted(ctx, "test", "k", lim100, a) })
		e.at(600 * ms)
		paced := step("Throttled paced at the old rate", 50, 500*ms, func() (adapt.Adapted, error) {
			return e.l.ThrottledAfter(ctx, "test", "k", lim100, a, 0, 0, 100) // paced above the rate: the same decrease
		})
		// A Window after the last throttle's cooldown (1 ms): on redis-server
		// after it really ran.
		e.at(1700 * ms)
		if !e.exact() {
			time.Sleep(time.Until(paced.Answered.Add(a.Window + 2*ms)))
		}
		step("Recover to the ceiling", 100, -1, func() (adapt.Adapted, error) { return e.l.Recover(ctx, "test", "k", lim100, a) })
	})
}

// TestAIMDShortEpisode: a persistent throttle in an episode shorter than
// MinEpisode is counted and the episode goes on (its estimate, from a
// fraction of a second of late reports, would be noise), unless its
// refusals are a fifth of its requests or more: then the cut is
// Decrease's, and its rough estimate sets no capacity (the next clean
// window probes at once instead of cruising under a capacity found).
func TestAIMDShortEpisode(t *testing.T) {
	a := capacityAIMD(time.Second)
	a.MinEpisode = time.Second
	for name, steps := range map[string][]aimdStep{
		"few refusals": {
			{at: 0, op: opThrottle, rate: 100, cooldown: cd}, // lone: episode from 0
			// 0.3 s in, 25 accepted, 2 of 27 requests refused: too short to
			// measure, too few refusals to cut by Decrease: no cut.
			{at: 300 * ms, op: opThrottle, rate: 100, cooldown: cd, accepted: 25},
			{at: 310 * ms, op: opThrottle, rate: 100, cooldown: cd},
			{at: 320 * ms, op: opThrottle, rate: 100, cooldown: cd},
			{at: 330 * ms, op: opThrottle, rate: 100, cooldown: cd},
			{at: 340 * ms, op: opThrottle, rate: 100, cooldown: cd},
			// 7 of 57 refused: still under a fifth.
			{at: 600 * ms, op: opThrottle, rate: 100, cooldown: cd, accepted: 25},
			{at: 610 * ms, op: opThrottle, rate: 100, cooldown: cd},
			{at: 620 * ms, op: opThrottle, rate: 100, cooldown: cd},
			{at: 630 * ms, op: opThrottle, rate: 100, cooldown: cd},
			{at: 640 * ms, op: opThrottle, rate: 100, cooldown: cd},
			// 1.1 s in: 93 accepted, 84.5/s, and 12 of 105 requests refused
			// (more than 10%: the provider is saturated, its accepted sends
			// are its capacity): the cut to 0.9 of it.
			{at: 1100 * ms, op: opThrottle, rate: 76.090909, change: -1, cooldown: cd, accepted: 43},
		},
		"a fifth refused": {
			{at: 0, op: opThrottle, rate: 100, cooldown: cd},
			{at: 50 * ms, op: opThrottle, rate: 100, cooldown: cd}, // coalesced
			// 0.3 s in, 3 of 11 requests refused: a rate far above the
			// provider's: the cut by Decrease, and no capacity from 8 sends.
			{at: 300 * ms, op: opThrottle, rate: 50, change: -1, cooldown: cd, accepted: 8},
			// One clean window (from 310ms) later, the rate in use: the probe
			// at once (with a capacity found below the rate, it would cruise
			// 3 windows more).
			{at: 1400 * ms, op: opRecover, rate: 55, change: 1, accepted: 50},
		},
	} {
		t.Run(name, func(t *testing.T) {
			each(t, func(t *testing.T, e *env) { e.adaptsNear(t, a, steps) })
		})
	}
}

// TestPersistFor: Persist's default is 4 token intervals at the ceiling,
// at least 2s; a value set is kept; an AIMD that does not apply is an error.
func TestPersistFor(t *testing.T) {
	for _, c := range []struct {
		a    adapt.AIMD
		lim  bucket.Limit
		want time.Duration
	}{
		{adapt.AIMD{}, bucket.Limit{PerSecond: 80, Burst: 10}, 2 * time.Second},
		{adapt.AIMD{}, bucket.Limit{PerSecond: 0.5, Burst: 1}, 8 * time.Second},
		{adapt.AIMD{Persist: 3 * time.Second}, bucket.Limit{PerSecond: 80, Burst: 10}, 3 * time.Second},
	} {
		if got, err := c.a.PersistFor(c.lim); err != nil || got != c.want {
			t.Errorf("%+v at %v: PersistFor = %v, %v; want %v", c.a, c.lim, got, err, c.want)
		}
	}
	if _, err := (adapt.AIMD{Decrease: 2}).PersistFor(bucket.Limit{PerSecond: 80, Burst: 10}); !errors.Is(err, adapt.ErrInvalidAIMD) {
		t.Errorf("Decrease 2: err %v; want adapt.ErrInvalidAIMD", err)
	}
}
