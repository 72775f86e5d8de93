package adapt_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/internal/redistest"
)

// The operations of a breaker step table.
const (
	opAllow  = iota // BreakerAllow(owner)
	opOK            // BreakerResult(ok true)
	opHalt          // BreakerResult(ok false, reason)
	opStatus        // BreakerStatus
)

// breakerStep is one step of a step table for a breaker.
type breakerStep struct {
	at      time.Duration // since the start of the test
	op      int           // opAllow, opOK, opHalt or opStatus
	owner   string        // opAllow: the asking replica
	allowed bool          // opAllow: want allowed
	probe   bool          // opAllow: want probe
	wait    time.Duration // opAllow: want wait; opStatus: want OpenLeft
	state   adapt.BreakerState
	opens   int    // opStatus: want Opens
	reason  string // opHalt: the reason given; opStatus: want Reason
	prober  string // opStatus: want Prober
}

// breakers runs steps on one key's breaker.
func (e *env) breakers(t *testing.T, key string, b adapt.Breaker, steps []breakerStep) {
	t.Helper()
	ctx := t.Context()
	for i, s := range steps {
		e.at(s.at)
		switch s.op {
		case opAllow:
			allowed, probe, wait, err := e.l.BreakerAllow(ctx, "test", key, b, s.owner)
			e.mark()
			if err != nil || allowed != s.allowed || probe != s.probe || !e.near(wait, s.wait) {
				t.Fatalf("step %d (at %v): BreakerAllow(%q) = %v, %v, %v, %v; want %v, %v, %v",
					i, s.at, s.owner, allowed, probe, wait, err, s.allowed, s.probe, s.wait)
			}
		case opOK, opHalt:
			st, err := e.l.BreakerResult(ctx, "test", key, b, s.op == opOK, s.reason)
			e.mark()
			if err != nil || st != s.state {
				t.Fatalf("step %d (at %v): BreakerResult(ok %v) = %v, %v; want %v", i, s.at, s.op == opOK, st, err, s.state)
			}
		case opStatus:
			st, err := e.l.BreakerStatus(ctx, "test", key)
			e.mark()
			if err != nil || st.State != s.state || !e.near(st.OpenLeft, s.wait) || st.Opens != s.opens ||
				st.Reason != s.reason || st.Prober != s.prober || (st.Prober == "") != (st.ProbeLeft == 0) {
				t.Fatalf("step %d (at %v): BreakerStatus = %+v, %v; want state %v, open left %v, opens %d, reason %q, prober %q",
					i, s.at, st, err, s.state, s.wait, s.opens, s.reason, s.prober)
			}
		}
	}
}

// TestBreakerSingleProbe checks that a halt opens the breaker for every
// replica, and that once it is half-open exactly one replica probes while
// the others wait, until the probe's success closes it.
func TestBreakerSingleProbe(t *testing.T) {
	b := adapt.Breaker{OpenFor: 500 * time.Millisecond, ProbeTTL: 600 * time.Millisecond}
	each(t, func(t *testing.T, e *env) {
		e.breakers(t, "k", b, []breakerStep{
			{at: 0, op: opStatus, state: adapt.BreakerClosed},
			{at: 0, op: opAllow, owner: "a", allowed: true},
			{at: 0, op: opOK, state: adapt.BreakerClosed},
			{at: 0, op: opHalt, reason: "halt:401", state: adapt.BreakerOpen},
			{at: 0, op: opAllow, owner: "a", wait: 500 * ms},
			{at: 0, op: opAllow, owner: "b", wait: 500 * ms},
			{at: 0, op: opOK, state: adapt.BreakerOpen},                       // sent before it opened
			{at: 0, op: opHalt, reason: "halt:403", state: adapt.BreakerOpen}, // likewise: no doubling
			{at: 0, op: opStatus, state: adapt.BreakerOpen, wait: 500 * ms, opens: 1, reason: "halt:401"},
			{at: 800 * ms, op: opStatus, state: adapt.BreakerHalfOpen, opens: 1, reason: "halt:401"},
			{at: 800 * ms, op: opAllow, owner: "b", allowed: true, probe: true},
			{at: 800 * ms, op: opAllow, owner: "a", wait: 600 * ms},
			{at: 800 * ms, op: opAllow, owner: "b", allowed: true, probe: true}, // asking again: same lease
			{at: 800 * ms, op: opStatus, state: adapt.BreakerHalfOpen, opens: 1, reason: "halt:401", prober: "b"},
			{at: 1100 * ms, op: opAllow, owner: "a", wait: 300 * ms}, // not renewed by b's second ask
			{at: 1100 * ms, op: opOK, state: adapt.BreakerClosed},
			{at: 1100 * ms, op: opAllow, owner: "a", allowed: true},
			{at: 1100 * ms, op: opStatus, state: adapt.BreakerClosed},
		})
		if n := e.rdb.Exists(t.Context(), e.keys.Breaker("test", "k")).Val(); n != 0 {
			t.Fatal("a closed breaker left its hash behind")
		}
	})
}

// TestBreakerProbeTTL checks that a prober that never reports (it crashed)
// loses its lease after ProbeTTL, and another replica probes.
func TestBreakerProbeTTL(t *testing.T) {
	b := adapt.Breaker{OpenFor: 300 * time.Millisecond, ProbeTTL: 500 * time.Millisecond}
	each(t, func(t *testing.T, e *env) {
		e.breakers(t, "k", b, []breakerStep{
			{at: 0, op: opHalt, state: adapt.BreakerOpen},
			{at: 600 * ms, op: opAllow, owner: "a", allowed: true, probe: true}, // a crashes
			{at: 600 * ms, op: opAllow, owner: "b", wait: 500 * ms},
			{at: 800 * ms, op: opAllow, owner: "b", wait: 300 * ms},
			{at: 1400 * ms, op: opStatus, state: adapt.BreakerHalfOpen, opens: 1},
			{at: 1400 * ms, op: opAllow, owner: "b", allowed: true, probe: true},
			{at: 1400 * ms, op: opAllow, owner: "a", wait: 500 * ms}, // a is back: b holds it now
			{at: 1400 * ms, op: opStatus, state: adapt.BreakerHalfOpen, opens: 1, prober: "b"},
			{at: 1400 * ms, op: opHalt, reason: "still 401", state: adapt.BreakerOpen},
			{at: 1400 * ms, op: opStatus, state: adapt.BreakerOpen, wait: 600 * ms, opens: 2, reason: "still 401"},
		})
	})
}

// TestBreakerDoubling checks that each failed probe doubles the open
// period up to MaxOpenFor, and that a success starts over.
func TestBreakerDoubling(t *testing.T) {
	b := adapt.Breaker{OpenFor: 400 * time.Millisecond, MaxOpenFor: 1600 * time.Millisecond}
	open := adapt.BreakerOpen
	each(t, func(t *testing.T, e *env) {
		e.breakers(t, "k", b, []breakerStep{
			{at: 0, op: opHalt, reason: "r1", state: open},
			{at: 0, op: opStatus, state: open, wait: 400 * ms, opens: 1, reason: "r1"},
			{at: 700 * ms, op: opAllow, owner: "a", allowed: true, probe: true},
			{at: 700 * ms, op: opHalt, reason: "r2", state: open},
			{at: 700 * ms, op: opStatus, state: open, wait: 800 * ms, opens: 2, reason: "r2"},
			{at: 1200 * ms, op: opAllow, owner: "a", wait: 300 * ms},
			{at: 1800 * ms, op: opAllow, owner: "a", allowed: true, probe: true},
			{at: 1800 * ms, op: opHalt, reason: "r3", state: open},
			{at: 1800 * ms, op: opStatus, state: open, wait: 1600 * ms, opens: 3, reason: "r3"},
			{at: 3700 * ms, op: opAllow, owner: "b", allowed: true, probe: true},
			{at: 3700 * ms, op: opHalt, reason: "r4", state: open},
			{at: 3700 * ms, op: opStatus, state: open, wait: 1600 * ms, opens: 4, reason: "r4"}, // capped
			{at: 5600 * ms, op: opAllow, owner: "b", allowed: true, probe: true},
			{at: 5600 * ms, op: opOK, state: adapt.BreakerClosed},
			{at: 5600 * ms, op: opHalt, reason: "r5", state: open},
			{at: 5600 * ms, op: opStatus, state: open, wait: 400 * ms, opens: 1, reason: "r5"},
		})
	})
}

// TestBreakerDefaults checks the default open period and the hash's TTL:
// the open period plus max(1h, 2*MaxOpenFor).
func TestBreakerDefaults(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		for _, tc := range []struct {
			key  string
			b    adapt.Breaker
			open time.Duration
			ttl  time.Duration
		}{
			{"default", adapt.Breaker{}, 30 * time.Second, 30*time.Second + time.Hour},
			{"long", adapt.Breaker{OpenFor: 40 * time.Minute}, 40 * time.Minute, 40*time.Minute + 80*time.Minute},
		} {
			since := time.Now()
			if st, err := e.l.BreakerResult(ctx, "test", tc.key, tc.b, false, "halt"); err != nil || st != adapt.BreakerOpen {
				t.Fatalf("%s: BreakerResult = %v, %v", tc.key, st, err)
			}
			if _, _, wait, err := e.l.BreakerAllow(ctx, "test", tc.key, tc.b, "a"); err != nil || !e.near(wait, tc.open) {
				t.Fatalf("%s: BreakerAllow wait = %v, %v; want %v", tc.key, wait, err, tc.open)
			}
			bk := e.keys.Breaker("test", tc.key)
			if ttl := e.rdb.PTTL(ctx, bk).Val(); !e.TTLNear(ttl, tc.ttl, since) {
				t.Fatalf("%s: PTTL = %v, want %v less the time since the halt", tc.key, ttl, tc.ttl)
			}
		}
		if !e.exact() {
			return
		}
		// A breaker nobody probes expires, closed.
		e.at(30*time.Second + time.Hour)
		if st, err := e.l.BreakerStatus(ctx, "test", "default"); err != nil || st.State != adapt.BreakerClosed {
			t.Fatalf("BreakerStatus after the TTL = %+v, %v; want closed", st, err)
		}
		// A probe lease keeps the hash at least ProbeTTL + idle.
		b := adapt.Breaker{OpenFor: time.Second, ProbeTTL: 2 * time.Hour}
		if _, err := e.l.BreakerResult(ctx, "test", "probe", b, false, ""); err != nil {
			t.Fatal(err)
		}
		e.at(30*time.Second + time.Hour + time.Second)
		if ok, probe, _, err := e.l.BreakerAllow(ctx, "test", "probe", b, "a"); err != nil || !ok || !probe {
			t.Fatalf("BreakerAllow = %v, %v, %v; want the probe", ok, probe, err)
		}
		if ttl := e.rdb.PTTL(ctx, e.keys.Breaker("test", "probe")).Val(); ttl != 3*time.Hour {
			t.Fatalf("PTTL with a lease = %v, want 3h", ttl)
		}
	})
}

// TestBreakerCorruptIsClosed checks that breaker state that makes no sense
// reads as a closed breaker and is repaired by the next halt.
func TestBreakerCorruptIsClosed(t *testing.T) {
	for _, tc := range append([]redistest.Corrupt{
		{Name: "words", Write: hset("opens", "some", "until_us", "later", "probe_us", "never")},
		{Name: "no opens", Write: hset("until_us", "99999999999999999", "probe_us", "0")},
		{Name: "zero opens", Write: hset("opens", "0", "until_us", "99999999999999999", "probe_us", "0")},
		{Name: "negative", Write: hset("opens", "1", "until_us", "-1", "probe_us", "0")},
		{Name: "nan", Write: hset("opens", "nan", "until_us", "nan", "probe_us", "nan")},
	}, redistest.WrongTypes...) {
		t.Run(tc.Name, func(t *testing.T) {
			each(t, func(t *testing.T, e *env) {
				if err := tc.Write(t.Context(), e.rdb, e.keys.Breaker("test", "k")); err != nil {
					t.Fatal(err)
				}
				e.breakers(t, "k", adapt.Breaker{}, []breakerStep{
					{at: 0, op: opStatus, state: adapt.BreakerClosed},
					{at: 0, op: opAllow, owner: "a", allowed: true},
					{at: 0, op: opOK, state: adapt.BreakerClosed},
					{at: 0, op: opHalt, reason: "halt", state: adapt.BreakerOpen},
					{at: 0, op: opStatus, state: adapt.BreakerOpen, wait: 30 * time.Second, opens: 1, reason: "halt"},
				})
			})
		})
	}
	// A lease without an owner is no lease.
	t.Run("lease without owner", func(t *testing.T) {
		each(t, func(t *testing.T, e *env) {
			if err := e.rdb.HSet(t.Context(), e.keys.Breaker("test", "k"), "opens", "2", "until_us", "1",
				"probe_us", "99999999999999999", "reason", "r").Err(); err != nil {
				t.Fatal(err)
			}
			e.breakers(t, "k", adapt.Breaker{}, []breakerStep{
				{at: 0, op: opStatus, state: adapt.BreakerHalfOpen, opens: 2, reason: "r"},
				{at: 0, op: opAllow, owner: "a", allowed: true, probe: true},
			})
		})
	})
}

func TestBreakerReasonCut(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		long := "x" + strings.Repeat("é", 150) // 301 bytes; byte 200 is inside a rune
		if _, err := e.l.BreakerResult(t.Context(), "test", "k", adapt.Breaker{}, false, long); err != nil {
			t.Fatal(err)
		}
		st, err := e.l.BreakerStatus(t.Context(), "test", "k")
		if err != nil || st.Reason != long[:199] || !utf8.ValidString(st.Reason) {
			t.Fatalf("Reason = %q, %v; want the first 199 bytes", st.Reason, err)
		}
	})
}

func TestBreakerValidate(t *testing.T) {
	t.Parallel()
	l := adapt.New(noRedis{}, bucket.Config{})
	for _, tc := range []struct {
		b    adapt.Breaker
		want string // "" for valid
	}{
		{adapt.Breaker{}, ""},
		{adapt.Breaker{OpenFor: time.Millisecond, MaxOpenFor: time.Millisecond, ProbeTTL: time.Millisecond, FloorThrottles: 1}, ""},
		{adapt.Breaker{OpenFor: time.Hour}, ""}, // default MaxOpenFor follows
		{adapt.Breaker{OpenFor: -time.Second}, "adapt: invalid breaker: open for -1s must be in [1ms, 87600h0m0s]"},
		{adapt.Breaker{OpenFor: time.Microsecond}, "adapt: invalid breaker: open for 1µs must be in [1ms, 87600h0m0s]"},
		{adapt.Breaker{MaxOpenFor: 11 * 365 * 24 * time.Hour}, "adapt: invalid breaker: max open for 96360h0m0s must be in [1ms, 87600h0m0s]"},
		{adapt.Breaker{OpenFor: time.Minute, MaxOpenFor: time.Second}, "adapt: invalid breaker: max open for 1s must be >= open for 1m0s"},
		{adapt.Breaker{ProbeTTL: -1}, "adapt: invalid breaker: probe ttl -1ns must be in [1ms, 87600h0m0s]"},
		{adapt.Breaker{FloorThrottles: -1}, "adapt: invalid breaker: floor throttles -1 must be >= 0"},
	} {
		t.Run(fmt.Sprintf("%+v", tc.b), func(t *testing.T) {
			err := tc.b.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, adapt.ErrInvalidBreaker) || err.Error() != tc.want {
				t.Fatalf("Validate = %v, want %q", err, tc.want)
			}
			// No call reaches Redis (noRedis would panic).
			if _, _, _, err := l.BreakerAllow(t.Context(), "test", "k", tc.b, "a"); err == nil || err.Error() != tc.want {
				t.Errorf("BreakerAllow error = %v, want %q", err, tc.want)
			}
			if _, err := l.BreakerResult(t.Context(), "test", "k", tc.b, false, ""); err == nil || err.Error() != tc.want {
				t.Errorf("BreakerResult error = %v, want %q", err, tc.want)
			}
		})
	}
	_, _, _, err := l.BreakerAllow(t.Context(), "test", "k", adapt.Breaker{}, "")
	if !errors.Is(err, adapt.ErrInvalidBreaker) || err.Error() != "adapt: invalid breaker: owner must not be empty" {
		t.Errorf("BreakerAllow with no owner: %v", err)
	}
}

func TestBreakerStateString(t *testing.T) {
	t.Parallel()
	for s, want := range map[adapt.BreakerState]string{
		adapt.BreakerClosed:   "closed",
		adapt.BreakerOpen:     "open",
		adapt.BreakerHalfOpen: "half-open",
		7:                     "BreakerState(7)",
	} {
		if got := s.String(); got != want {
			t.Errorf("BreakerState(%d).String() = %q, want %q", int(s), got, want)
		}
	}
}

// TestSnapshot checks what `pacer status` shows for a key that was
// throttled, sent, and halted.
func TestSnapshot(t *testing.T) {
	ceiling := bucket.Limit{PerSecond: 80, Burst: 20}
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		a := adapt.AIMD{Decrease: 0.5, Backoff: 1e-9, Persist: time.Hour, Coalesce: time.Millisecond, NoRefillPause: true}
		sn, err := e.l.Snapshot(ctx, "test", "k", ceiling, a)
		// The pacing limit keeps 25 ms of jitter headroom: 2 tokens at 80/s.
		if err != nil || sn.Adapted.Rate != 80 || sn.Adapted.Ceiling != 80 || sn.Adapted.CooldownLeft != 0 ||
			sn.Limit != (bucket.Limit{PerSecond: 80, Burst: 18}) || sn.Tokens != 18 || sn.Breaker.State != adapt.BreakerClosed {
			t.Fatalf("Snapshot of a fresh key = %+v, %v; want rate 80, limit 80/s burst 18, 18 tokens", sn, err)
		}
		if _, err := e.l.Throttled(ctx, "test", "k", ceiling, a, time.Millisecond); err != nil { // lone
			t.Fatal(err)
		}
		e.mark()
		e.at(50 * time.Millisecond)                                         // after the lone one's cooldown (one token interval, 13 ms)
		ad, err := e.l.Throttled(ctx, "test", "k", ceiling, a, time.Minute) // persistent: halves
		if err != nil {
			t.Fatal(err)
		}
		// Sends under the adapted limit (the pacer takes before a cooldown
		// or after it; Reserve itself refuses during one).
		if err := e.rdb.Del(ctx, e.keys.Cooldown("test", "k")).Err(); err != nil {
			t.Fatal(err)
		}
		if d, err := e.b.Reserve(ctx, "test", "k", ad.Limit(ceiling), 4, 0); err != nil || !d.OK {
			t.Fatalf("Reserve = %+v, %v", d, err)
		}
		if err := e.b.Cooldown(ctx, "test", "k", time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := e.l.BreakerResult(ctx, "test", "k", adapt.Breaker{}, false, "halt:401"); err != nil {
			t.Fatal(err)
		}
		sn, err = e.l.Snapshot(ctx, "test", "k", ceiling, a)
		if err != nil || sn.Adapted.Rate != 40 || sn.Limit != (bucket.Limit{PerSecond: 40, Burst: 9}) ||
			!e.near(sn.Adapted.CooldownLeft, time.Minute) || !e.nearTokens(sn.Tokens, 5, sn.Limit) ||
			sn.Breaker.State != adapt.BreakerOpen || sn.Breaker.Reason != "halt:401" ||
			!e.near(sn.Breaker.OpenLeft, 30*time.Second) {
			t.Fatalf("Snapshot = %+v, %v", sn, err)
		}
	})
}

// TestBreakerClose: BreakerClose ends an open breaker at once (its
// credential was replaced): the next allow is an ordinary send, not a
// probe, and a later halt opens it again for the first open period.
func TestBreakerClose(t *testing.T) {
	b := adapt.Breaker{OpenFor: time.Minute}
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		if _, err := e.l.BreakerResult(ctx, "test", "k", b, false, "halt: 401"); err != nil {
			t.Fatal(err)
		}
		if allowed, _, _, err := e.l.BreakerAllow(ctx, "test", "k", b, "a"); err != nil || allowed {
			t.Fatalf("open breaker: allowed %v, %v", allowed, err)
		}
		if err := e.l.BreakerClose(ctx, "test", "k"); err != nil {
			t.Fatal(err)
		}
		allowed, probe, _, err := e.l.BreakerAllow(ctx, "test", "k", b, "a")
		if err != nil || !allowed || probe {
			t.Fatalf("after BreakerClose: allowed %v, probe %v, %v; want an ordinary send", allowed, probe, err)
		}
		if st, err := e.l.BreakerStatus(ctx, "test", "k"); err != nil || st.State != adapt.BreakerClosed || st.Opens != 0 {
			t.Fatalf("after BreakerClose: %+v, %v; want closed", st, err)
		}
		if _, err := e.l.BreakerResult(ctx, "test", "k", b, false, "halt: 401"); err != nil {
			t.Fatal(err)
		}
		if st, err := e.l.BreakerStatus(ctx, "test", "k"); err != nil || st.State != adapt.BreakerOpen || st.Opens != 1 {
			t.Fatalf("halt after BreakerClose: %+v, %v; want open, opens 1", st, err)
		}
	})
}
