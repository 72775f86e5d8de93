package adapt_test

import (
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/internal/redistest"
)

// Refresh answers what RecoverAfter, BreakerStatus and Pairs answer, in
// one round trip; when Redis has no script cached, each part still
// answers (its script run again, which loads it).
func TestRefresh(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		ceiling := bucket.Limit{PerSecond: 80, Burst: 10}
		// Cooldowns that last the test however late its calls run (the
		// default, 1 / 80 s, could end before the first read).
		a := adapt.AIMD{MinCooldown: time.Minute}
		since := time.Now() // before every end the test reads
		// Two keys in the same state: a throttle (a cooldown), a throttled
		// pair, an open breaker.
		for _, k := range []string{"three", "one"} {
			if _, err := e.l.ThrottledAfter(ctx, "test", k, ceiling, a, 0, 0, 80); err != nil {
				t.Fatal(err)
			}
			if _, err := e.l.PairThrottled(ctx, "test", k, "15551234567", 30*time.Second, time.Minute, 0.5); err != nil {
				t.Fatal(err)
			}
			if _, err := e.l.BreakerResult(ctx, "test", k, adapt.Breaker{}, false, "halt"); err != nil {
				t.Fatal(err)
			}
		}
		want := adapt.Refreshed{}
		want.Adapted, want.AdaptedErr = e.l.RecoverAfter(ctx, "test", "three", ceiling, a, 7)
		want.Breaker, want.BreakerErr = e.l.BreakerStatus(ctx, "test", "three")
		want.Pairs, want.PairsErr = e.l.Pairs(ctx, "test", "three")
		if want.AdaptedErr != nil || want.BreakerErr != nil || want.PairsErr != nil {
			t.Fatalf("the three calls: %v, %v, %v", want.AdaptedErr, want.BreakerErr, want.PairsErr)
		}
		if want.Adapted.CooldownLeft <= 0 || want.Breaker.State != adapt.BreakerOpen || len(want.Pairs) != 1 {
			t.Fatalf("the state set up: %+v", want)
		}
		n := &redistest.Trips{Match: redistest.RunsScript}
		e.rdb.AddHook(n)
		got := e.l.Refresh(ctx, "test", "one", ceiling, a, 7)
		check := func(what string, got adapt.Refreshed) {
			t.Helper()
			if got.AdaptedErr != nil || got.BreakerErr != nil || got.PairsErr != nil {
				t.Fatalf("%s: errors %v, %v, %v", what, got.AdaptedErr, got.BreakerErr, got.PairsErr)
			}
			g, w := got.Adapted, want.Adapted
			if g.Rate != w.Rate || g.Ceiling != w.Ceiling || g.Increased != w.Increased || g.Decreased != w.Decreased ||
				!e.NearSince(g.CooldownLeft, w.CooldownLeft, since) || (g.SinceDecrease < 0) != (w.SinceDecrease < 0) {
				t.Fatalf("%s: Adapted %+v; want %+v", what, g, w)
			}
			if got.Breaker.State != want.Breaker.State || got.Breaker.Reason != "halt" || !e.NearSince(got.Breaker.OpenLeft, want.Breaker.OpenLeft, since) {
				t.Fatalf("%s: Breaker %+v; want %+v", what, got.Breaker, want.Breaker)
			}
			p, ok := got.Pairs["15551234567"]
			if len(got.Pairs) != 1 || !ok || p.Rate != 0.5 || !e.NearSince(p.Left, want.Pairs["15551234567"].Left, since) {
				t.Fatalf("%s: Pairs %+v; want %+v", what, got.Pairs, want.Pairs)
			}
		}
		check("Refresh", got)
		if n.Load() != 1 {
			t.Fatalf("Refresh made %d round trips; want 1", n.Load())
		}
		// The accepted sends were reported: both keys hold a count.
		for _, k := range []string{"three", "one"} {
			if n := e.rdb.Exists(ctx, e.keys.Achieved("test", k)).Val(); n != 1 {
				t.Fatalf("%s: no achieved count written", k)
			}
		}
		if e.mr != nil { // no script cached (a flushed or new Redis)
			if _, err := e.rdb.Do(ctx, "SCRIPT", "FLUSH").Result(); err != nil {
				t.Fatal(err)
			}
			check("Refresh after SCRIPT FLUSH", e.l.Refresh(ctx, "test", "one", ceiling, a, 0))
		}
	})
}
