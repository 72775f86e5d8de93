package bucket_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/redistest"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// t0 is where miniredis's clock starts; slack is the tolerance on
// redis-server's running clock (see redistest).
var t0 = redistest.T0

const slack = redistest.Slack

// env is one backend for one test, with the Limiter under test.
type env struct {
	*redistest.Env
	l    *bucket.Limiter
	keys bucket.Keys
}

func newEnv(r *redistest.Env) *env {
	l := bucket.New(r.RDB, bucket.Config{Prefix: r.Prefix})
	return &env{Env: r, l: l, keys: l.Keys()}
}

// each runs f in parallel against miniredis (exact, clock set by the test)
// and against a real redis-server (clock running, checks within slack).
func each(t *testing.T, f func(t *testing.T, e *env)) {
	redistest.Each(t, func(t *testing.T, r *redistest.Env) { f(t, newEnv(r)) })
}

func newMini(t testing.TB) *env { return newEnv(redistest.Mini(t)) }

func newReal(t testing.TB) *env { return newEnv(redistest.Real(t)) }

// take is one step of a step table for Reserve with no wait: a take of
// the tokens there now.
type take struct {
	at        time.Duration // since the start of the test
	cost      int
	allowed   bool
	remaining int
	wait      time.Duration // want Reservation.Wait (0 when allowed)
	cooldown  bool
}

// reserveAt sets the clock to at since the start of the test and reserves
// cost tokens of key under lim, waiting at most maxWait. Besides Reserve's
// answer it gives the call's bounds: c, when it was sent and answered, and
// lo, hi, how far redis-server's clock may be off at (both 0 on miniredis,
// see redistest.Env.Ran).
func (e *env) reserveAt(t *testing.T, at time.Duration, key string, lim bucket.Limit, cost int, maxWait time.Duration) (r bucket.Reservation, c redistest.Call, lo, hi time.Duration, err error) {
	e.At(at)
	c = redistest.Timed(func() { r, err = e.l.Reserve(t.Context(), "test", key, lim, cost, maxWait) })
	lo, hi = e.Ran(at, c)
	return r, c, lo, hi, err
}

func (e *env) takes(t *testing.T, key string, lim bucket.Limit, steps []take) {
	t.Helper()
	for i, s := range steps {
		d, _, lo, hi, err := e.reserveAt(t, s.at, key, lim, s.cost, 0)
		if err != nil || d.OK != s.allowed || d.Remaining != s.remaining ||
			d.Cooldown != s.cooldown || !e.NearShift(d.Wait, s.wait, lo, hi) {
			t.Fatalf("step %d (at %v, cost %d): got %+v, %v; want allowed=%v remaining=%d wait=%v cooldown=%v",
				i, s.at, s.cost, d, err, s.allowed, s.remaining, s.wait, s.cooldown)
		}
	}
}

func TestReserveNowBurstThenRefusal(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		e.takes(t, "k", bucket.Limit{PerSecond: 2, Burst: 3}, []take{
			{0, 1, true, 2, 0, false},
			{0, 2, true, 0, 0, false},
			{0, 1, false, 0, 500 * time.Millisecond, false},
			{0, 2, false, 0, time.Second, false},
			{0, 3, false, 0, 1500 * time.Millisecond, false},
		})
	})
}

func TestReserveNowRefills(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		e.takes(t, "k", bucket.Limit{PerSecond: 2, Burst: 2}, []take{
			{0, 2, true, 0, 0, false},
			{0, 1, false, 0, 500 * time.Millisecond, false},
			{500 * time.Millisecond, 1, true, 0, 0, false},
			{500 * time.Millisecond, 1, false, 0, 500 * time.Millisecond, false},
			{1500 * time.Millisecond, 1, true, 1, 0, false}, // 2 tokens back
			{3 * time.Second, 2, true, 0, 0, false},         // 4 would be back, but burst is 2
			{3 * time.Second, 1, false, 0, 500 * time.Millisecond, false},
		})
	})
}

// TestTakeSubSecondWait checks that short waits keep their microseconds and
// are never rounded to 0.
func TestReserveNowSubSecondWait(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		lim := bucket.Limit{PerSecond: 1000, Burst: 1}
		if !e.Exact() {
			// Real time runs about one round trip (~0.1 ms) per call: take
			// until refused, then the wait is what is left of 1 ms.
			for i := range 1000 {
				d, err := e.l.Reserve(t.Context(), "test", "k", lim, 1, 0)
				if err != nil {
					t.Fatal(err)
				}
				if !d.OK {
					if d.Wait <= 0 || d.Wait > time.Millisecond || d.Wait%time.Microsecond != 0 {
						t.Fatalf("call %d: wait %v, want in (0, 1ms] in whole µs", i, d.Wait)
					}
					return
				}
			}
			t.Fatal("1000 calls at 1000/s with burst 1 were never refused")
		}
		e.takes(t, "k", lim, []take{
			{0, 1, true, 0, 0, false},
			{0, 1, false, 0, time.Millisecond, false},
			{999 * time.Microsecond, 1, false, 0, time.Microsecond, false},
			{999*time.Microsecond + 999*time.Nanosecond, 1, false, 0, time.Microsecond, false}, // TIME has µs
			{time.Millisecond, 1, true, 0, 0, false},
		})
		// 1/3 s is not a whole number of µs: the wait rounds up.
		e.takes(t, "k3", bucket.Limit{PerSecond: 3, Burst: 3}, []take{
			{0, 3, true, 0, 0, false},
			{0, 1, false, 0, 333334 * time.Microsecond, false},
			{333333 * time.Microsecond, 1, false, 0, time.Microsecond, false},
			{333334 * time.Microsecond, 1, true, 0, 0, false},
		})
	})
}

// TestTakeFractionalRate checks rates below one token per second and
// burst-sized takes at rates whose token is not a whole number of µs.
func TestReserveNowFractionalRate(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		e.takes(t, "slow", bucket.Limit{PerSecond: 0.1, Burst: 1}, []take{
			{0, 1, true, 0, 0, false},
			{0, 1, false, 0, 10 * time.Second, false},
		})
		// Burst 3 at rate 3/s is three takes at one instant, not two.
		e.takes(t, "thirds", bucket.Limit{PerSecond: 3, Burst: 3}, []take{
			{0, 1, true, 2, 0, false},
			{0, 1, true, 1, 0, false},
			{0, 1, true, 0, 0, false},
			{0, 1, false, 0, 333334 * time.Microsecond, false},
		})
	})
}

// TestReserveNowExtremeLimits checks the fastest and slowest limits that the
// scripts represent exactly.
func TestReserveNowExtremeLimits(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		// 10^12 tokens/s: a missing token is 1 µs away, not 0. (On
		// redis-server, time between calls refills millions of tokens.)
		fast := []take{{0, 1e9, true, 0, 0, false}}
		if e.Exact() {
			fast = append(fast,
				take{0, 1, false, 0, time.Microsecond, false},
				take{time.Microsecond, 1, true, 1e6 - 1, 0, false})
		}
		e.takes(t, "fast", bucket.Limit{PerSecond: 1e12, Burst: 1e9}, fast)
		// One token per 10^8 s (3.2 years).
		lim := bucket.Limit{PerSecond: 1e-8, Burst: 1}
		since := time.Now()
		e.takes(t, "slow", lim, []take{
			{0, 1, true, 0, 0, false},
			{0, 1, false, 0, 1e8 * time.Second, false},
		})
		// The time to refill from empty, 10^8 s, plus 1 ms (and float
		// rounding), less on redis-server the time since the grant.
		if ttl := e.RDB.PTTL(t.Context(), e.keys.Bucket("test", "slow")).Val(); !e.TTLIn(ttl, 1e8*time.Second, 1e8*time.Second+time.Second, since) {
			t.Fatalf("PTTL = %v, want 1e8 s to 1e8 s + 1 s, less the time since the grant", ttl)
		}
	})
}

func TestReserveNowRefusedChangesNothing(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		lim := bucket.Limit{PerSecond: 1, Burst: 2}
		bk := e.keys.Bucket("test", "k")
		if d, err := e.l.Reserve(ctx, "test", "k", lim, 2, 0); err != nil || !d.OK {
			t.Fatalf("first take: %+v, %v", d, err)
		}
		before := e.Snapshot(t, bk)
		for _, cost := range []int{1, 2} {
			if d, err := e.l.Reserve(ctx, "test", "k", lim, cost, 0); err != nil || d.OK {
				t.Fatalf("take %d: %+v, %v; want refused", cost, d, err)
			}
		}
		if err := e.l.Cooldown(ctx, "test", "k", time.Minute); err != nil {
			t.Fatal(err)
		}
		if d, err := e.l.Reserve(ctx, "test", "k", lim, 1, 0); err != nil || !d.Cooldown {
			t.Fatalf("take in cooldown: %+v, %v", d, err)
		}
		if _, err := e.l.State(ctx, "test", "k", lim); err != nil {
			t.Fatal(err)
		}
		after := e.Snapshot(t, bk)
		if !maps.Equal(before.Hash, after.Hash) || after.PTTL > before.PTTL || (e.Exact() && after.PTTL != before.PTTL) {
			t.Fatalf("refusals changed the bucket: before %+v, after %+v", before, after)
		}
	})
}

// TestReserveNowTTL checks that a bucket key lives at least as long as the bucket
// needs to refill from empty, so it expires only when full.
func TestReserveNowTTL(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		lim := bucket.Limit{PerSecond: 0.1, Burst: 5} // refill from empty: 50 s
		refill := 50 * time.Second
		since := time.Now()
		if d, err := e.l.Reserve(ctx, "test", "k", lim, 1, 0); err != nil || !d.OK {
			t.Fatalf("take: %+v, %v", d, err)
		}
		bk := e.keys.Bucket("test", "k")
		ttl := e.RDB.PTTL(ctx, bk).Val()
		if !e.TTLIn(ttl, refill, refill+time.Second, since) {
			t.Fatalf("PTTL %s = %v, want in [%v, %v] less the time since the take", bk, ttl, refill, refill+time.Second)
		}
		if !e.Exact() {
			return
		}
		// Just before expiry the bucket is full already; after, it reads full.
		e.At(refill)
		if st, err := e.l.State(ctx, "test", "k", lim); err != nil || st.Tokens != 5 {
			t.Fatalf("state at %v: %+v, %v; want 5 tokens", refill, st, err)
		}
		e.At(ttl)
		if n := e.RDB.Exists(ctx, bk).Val(); n != 0 {
			t.Fatalf("%s still exists after its TTL", bk)
		}
		e.takes(t, "k", lim, []take{{ttl, 5, true, 0, 0, false}})
	})
}

func TestCooldown(t *testing.T) {
	lim := bucket.Limit{PerSecond: 100, Burst: 100}
	type step struct {
		at       time.Duration
		cooldown time.Duration // Cooldown(d) before the take, if != 0
		allowed  bool
		wait     time.Duration // want Reservation.Wait and State.CooldownLeft
	}
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		for i, s := range []step{
			{0, 0, true, 0},
			{0, 600 * time.Millisecond, false, 600 * time.Millisecond},
			{0, 100 * time.Millisecond, false, 600 * time.Millisecond}, // never shortened
			{0, 1, false, 600 * time.Millisecond},                      // 1 ns rounds up to 1 ms, still shorter
			{200 * time.Millisecond, 0, false, 400 * time.Millisecond},
			{200 * time.Millisecond, time.Second, false, time.Second}, // lengthened
			{200 * time.Millisecond, -time.Hour, false, time.Second},  // d <= 0: no-op
			{1400 * time.Millisecond, 0, true, 0},                     // over at 1200 ms
		} {
			e.At(s.at)
			if s.cooldown != 0 {
				err := e.l.Cooldown(ctx, "test", "k", s.cooldown)
				e.Mark()
				if err != nil {
					t.Fatalf("step %d: Cooldown(%v): %v", i, s.cooldown, err)
				}
			}
			st, err := e.l.State(ctx, "test", "k", lim)
			e.Mark()
			if err != nil || !e.Near(st.CooldownLeft, s.wait) {
				t.Fatalf("step %d: State = %+v, %v; want CooldownLeft %v", i, st, err, s.wait)
			}
			d, err := e.l.Reserve(ctx, "test", "k", lim, 1, 0)
			e.Mark()
			if err != nil || d.OK != s.allowed || d.Cooldown != !s.allowed || !e.Near(d.Wait, s.wait) {
				t.Fatalf("step %d: Take = %+v, %v; want allowed=%v wait=%v", i, d, err, s.allowed, s.wait)
			}
		}
		if !e.Exact() {
			// The longest cooldown saturates Wait instead of overflowing it.
			// (miniredis overflows a TTL this long itself.)
			if err := e.l.Cooldown(ctx, "test", "long", math.MaxInt64); err != nil {
				t.Fatal(err)
			}
			if d, err := e.l.Reserve(ctx, "test", "long", lim, 1, 0); err != nil || !d.Cooldown || d.Wait < math.MaxInt64-slack {
				t.Fatalf("Take in a %v cooldown: %+v, %v", time.Duration(math.MaxInt64), d, err)
			}
			return
		}
		// Cooldown(0) on a key without one creates nothing.
		if err := e.l.Cooldown(ctx, "test", "other", 0); err != nil {
			t.Fatal(err)
		}
		if n := e.RDB.Exists(ctx, e.keys.Cooldown("test", "other")).Val(); n != 0 {
			t.Fatal("Cooldown(0) created a key")
		}
	})
}

// TestCooldownWithoutTTL checks that a cooldown key without a TTL, which this
// package never writes, does not stop the key forever, and that Cooldown
// gives it a TTL.
func TestCooldownWithoutTTL(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		lim := bucket.Limit{PerSecond: 1, Burst: 5}
		if err := e.RDB.Set(ctx, e.keys.Cooldown("test", "k"), "forever", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if st, err := e.l.State(ctx, "test", "k", lim); err != nil || st.CooldownLeft != 0 {
			t.Fatalf("State = %+v, %v; want no cooldown", st, err)
		}
		e.takes(t, "k", lim, []take{{0, 1, true, 4, 0, false}})
		if err := e.l.Cooldown(ctx, "test", "k", time.Minute); err != nil {
			t.Fatal(err)
		}
		e.takes(t, "k", lim, []take{{0, 1, false, 4, time.Minute, true}})
	})
}

// TestCooldownKeepsRemaining checks that a refusal in cooldown reports the
// bucket's tokens and takes none.
func TestCooldownKeepsRemaining(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		lim := bucket.Limit{PerSecond: 0.001, Burst: 5}
		e.takes(t, "k", lim, []take{{0, 2, true, 3, 0, false}})
		if err := e.l.Cooldown(t.Context(), "test", "k", time.Hour); err != nil {
			t.Fatal(err)
		}
		e.takes(t, "k", lim, []take{
			{0, 1, false, 3, time.Hour, true},
			{0, 5, false, 3, time.Hour, true},
		})
	})
}

// TestCorruptHashIsFull checks that a bucket whose stored state makes no
// sense is a fresh, full bucket, and is repaired by the next grant.
func TestCorruptHashIsFull(t *testing.T) {
	lim := bucket.Limit{PerSecond: 1, Burst: 3}
	eachCorrupt(t, func(t *testing.T, e *env, bk string) {
		ctx := t.Context()
		if st, err := e.l.State(ctx, "test", "k", lim); err != nil || st.Tokens != 3 {
			t.Fatalf("State = %+v, %v; want 3 tokens", st, err)
		}
		e.takes(t, "k", lim, []take{
			{0, 3, true, 0, 0, false},
			{0, 1, false, 0, time.Second, false},
		})
		h := e.RDB.HGetAll(ctx, bk).Val()
		if _, err := strconv.ParseInt(h["utokens"], 10, 64); err != nil {
			t.Fatalf("not repaired: %v", h)
		}
		if _, err := strconv.ParseInt(h["ts_us"], 10, 64); err != nil {
			t.Fatalf("not repaired: %v", h)
		}
	})
}

// corruptBuckets are bucket states that make no sense: every script reads
// them as a fresh, full bucket.
var corruptBuckets = append([]redistest.Corrupt{
	{Name: "empty fields", Write: redistest.HSet("utokens", "", "ts_us", "")},
	{Name: "words", Write: redistest.HSet("utokens", "lots", "ts_us", "yesterday")},
	{Name: "no stamp", Write: redistest.HSet("utokens", "0")},
	{Name: "no tokens", Write: redistest.HSet("ts_us", "1")},
	{Name: "nan", Write: redistest.HSet("utokens", "nan", "ts_us", "nan")},
	{Name: "inf", Write: redistest.HSet("utokens", "inf", "ts_us", "-inf")},
	{Name: "negative", Write: redistest.HSet("utokens", "-5000000", "ts_us", "1")},
	{Name: "debt too deep", Write: redistest.HSet("utokens", "-1000000000000001", "ts_us", "1")},
	{Name: "stamp < 0", Write: redistest.HSet("utokens", "0", "ts_us", "-1")},
}, redistest.WrongTypes...)

// eachCorrupt runs f as a subtest per corrupt bucket state against each
// backend, once the state is written at bk, the bucket of key "k" on
// channel "test".
func eachCorrupt(t *testing.T, f func(t *testing.T, e *env, bk string)) {
	for _, tc := range corruptBuckets {
		t.Run(tc.Name, func(t *testing.T) {
			each(t, func(t *testing.T, e *env) {
				bk := e.keys.Bucket("test", "k")
				if err := tc.Write(t.Context(), e.RDB, bk); err != nil {
					t.Fatal(err)
				}
				f(t, e, bk)
			})
		})
	}
}

// TestClockSteppedBack checks that state stamped after Redis TIME neither
// mints tokens nor stalls the bucket until the clock catches up.
func TestClockSteppedBack(t *testing.T) {
	lim := bucket.Limit{PerSecond: 2, Burst: 2}
	t.Run("TIME", func(t *testing.T) {
		t.Parallel()
		e := newMini(t) // only miniredis can step TIME back
		e.takes(t, "k", lim, []take{{0, 2, true, 0, 0, false}})
		e.At(-time.Hour)
		if st, err := e.l.State(t.Context(), "test", "k", lim); err != nil || st.Tokens != 0 {
			t.Fatalf("State after the step = %+v, %v; want 0 tokens", st, err)
		}
		e.takes(t, "k", lim, []take{
			{-time.Hour, 1, false, 0, 500 * time.Millisecond, false},
			{-time.Hour + 499*time.Millisecond, 1, false, 0, time.Millisecond, false},
			{-time.Hour + 500*time.Millisecond, 1, true, 0, 0, false},
			{-time.Hour + 500*time.Millisecond, 1, false, 0, 500 * time.Millisecond, false},
		})
	})
	// The same seen from the stored side: a stamp an hour ahead of TIME.
	stampsAhead(t, []stampAheadCase[take]{
		{"empty", "0", []take{
			{0, 1, false, 0, 500 * time.Millisecond, false},
			{500 * time.Millisecond, 1, true, 0, 0, false},
			{500 * time.Millisecond, 1, false, 0, 500 * time.Millisecond, false},
		}},
		{"one token", "1000000", []take{
			{0, 1, true, 0, 0, false},
			{0, 1, false, 0, 500 * time.Millisecond, false},
		}},
		{"half a token", "500000", []take{
			{0, 1, false, 0, 250 * time.Millisecond, false},
			{0, 2, false, 0, 750 * time.Millisecond, false},
		}},
	}, func(t *testing.T, e *env, steps []take) { e.takes(t, "k", lim, steps) })
}

func TestState(t *testing.T) {
	lim := bucket.Limit{PerSecond: 2, Burst: 4}
	type step struct {
		at     time.Duration
		take   int     // cost taken after State, 0 for none
		tokens float64 // want State.Tokens
	}
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		for i, s := range []step{
			{0, 4, 4},
			{0, 0, 0},
			{250 * time.Millisecond, 0, 0.5},
			{1250 * time.Millisecond, 1, 2.5},
			{1250 * time.Millisecond, 0, 1.5},
			{3 * time.Second, 0, 4}, // capped at burst
		} {
			e.At(s.at)
			st, err := e.l.State(ctx, "test", "k", lim)
			e.Mark()
			if err != nil || st.CooldownLeft != 0 || !e.nearTokens(st.Tokens, s.tokens, lim) {
				t.Fatalf("step %d (at %v): State = %+v, %v; want %v tokens", i, s.at, st, err, s.tokens)
			}
			if s.take > 0 {
				if d, err := e.l.Reserve(ctx, "test", "k", lim, s.take, 0); err != nil || !d.OK {
					t.Fatalf("step %d: Take(%d) = %+v, %v", i, s.take, d, err)
				}
			}
		}
		// State never creates a bucket.
		if _, err := e.l.State(ctx, "test", "never", lim); err != nil {
			t.Fatal(err)
		}
		if n := e.RDB.Exists(ctx, e.keys.Bucket("test", "never"), e.keys.Cooldown("test", "never")).Val(); n != 0 {
			t.Fatal("State created keys")
		}
	})
}

// stampAhead writes utokens (millionths) into key's bucket, stamped an
// hour ahead of Redis TIME: a clock stepped back, seen from the stored side.
func (e *env) stampAhead(t *testing.T, key, utokens string) {
	t.Helper()
	now, err := e.RDB.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	ahead := strconv.FormatInt(now.Add(time.Hour).UnixMicro(), 10)
	if err := e.RDB.HSet(t.Context(), e.keys.Bucket("test", key), "utokens", utokens, "ts_us", ahead).Err(); err != nil {
		t.Fatal(err)
	}
}

// stampAheadCase is a step table run on a bucket stamped ahead of TIME
// holding utokens (millionths).
type stampAheadCase[S any] struct {
	name    string
	utokens string
	steps   []S
}

// stampsAhead runs each case as subtest "stamp ahead/<name>" on each
// backend: key "k" stamped ahead (stampAhead), then run of its steps.
func stampsAhead[S any](t *testing.T, cases []stampAheadCase[S], run func(t *testing.T, e *env, steps []S)) {
	for _, tc := range cases {
		t.Run("stamp ahead/"+tc.name, func(t *testing.T) {
			each(t, func(t *testing.T, e *env) {
				e.stampAhead(t, "k", tc.utokens)
				run(t, e, tc.steps)
			})
		})
	}
}

// nearTokens is Near for token counts of a bucket under lim.
func (e *env) nearTokens(got, want float64, lim bucket.Limit) bool {
	return e.NearTokens(got, want, lim.PerSecond, lim.Burst)
}

// TestTakeAtomic checks that concurrent takes never grant more than the
// bucket holds.
func TestReserveNowAtomic(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		lim := bucket.Limit{PerSecond: 0.001, Burst: 50} // refills 1 token in 1000 s
		allowed := redistest.Sum(t, 20, 10, func(int) (int, error) {
			d, err := e.l.Reserve(t.Context(), "test", "k", lim, 1, 0)
			return b2i(d.OK), err
		})
		if n := allowed; n != 50 {
			t.Fatalf("%d of 200 concurrent takes allowed, want 50", n)
		}
	})
}

// noRedis fails the test on any Redis call (its nil Scripter panics).
type noRedis struct{ redis.Scripter }

func TestInvalidLimit(t *testing.T) {
	t.Parallel()
	l := bucket.New(noRedis{}, bucket.Config{})
	for _, tc := range []struct {
		lim  bucket.Limit
		cost int
		want string // error text; "" for valid
	}{
		{bucket.Limit{PerSecond: 80, Burst: 80}, 1, ""},
		{bucket.Limit{PerSecond: 0.001, Burst: 1}, 1, ""},
		{bucket.Limit{PerSecond: 1e12, Burst: 1e9}, 1e9, ""},
		{bucket.Limit{PerSecond: 0, Burst: 1}, 1, "bucket: invalid limit: rate 0 must be > 0"},
		{bucket.Limit{}, 1, "bucket: invalid limit: rate 0 must be > 0"},
		{bucket.Limit{PerSecond: -1, Burst: 1}, 1, "bucket: invalid limit: rate -1 must be > 0"},
		{bucket.Limit{PerSecond: math.NaN(), Burst: 1}, 1, "bucket: invalid limit: rate NaN must be > 0"},
		{bucket.Limit{PerSecond: math.Inf(1), Burst: 1}, 1, "bucket: invalid limit: rate +Inf must be finite"},
		{bucket.Limit{PerSecond: 1, Burst: 0}, 1, "bucket: invalid limit: burst 0 must be >= 1"},
		{bucket.Limit{PerSecond: 1, Burst: -3}, 1, "bucket: invalid limit: burst -3 must be >= 1"},
		{bucket.Limit{PerSecond: 1, Burst: 1e9 + 1}, 1, "bucket: invalid limit: burst 1000000001 must be <= 1000000000"},
		{bucket.Limit{PerSecond: 1e-9, Burst: 10}, 1, "bucket: invalid limit: refill time burst/rate = 10/1e-09 s must be <= 876000h0m0s"},
		{bucket.Limit{PerSecond: 1, Burst: 5}, 6, "bucket: invalid limit: cost 6 must be between 1 and burst 5"},
		{bucket.Limit{PerSecond: 1, Burst: 5}, 0, "bucket: invalid limit: cost 0 must be between 1 and burst 5"},
		{bucket.Limit{PerSecond: 1, Burst: 5}, -1, "bucket: invalid limit: cost -1 must be between 1 and burst 5"},
	} {
		t.Run(fmt.Sprintf("%+v cost %d", tc.lim, tc.cost), func(t *testing.T) {
			verr := tc.lim.Validate()
			if tc.want == "" {
				if verr != nil {
					t.Fatalf("Validate = %v, want nil", verr)
				}
				return
			}
			_, err := l.Reserve(t.Context(), "test", "k", tc.lim, tc.cost, 0)
			if !errors.Is(err, bucket.ErrInvalidLimit) || err.Error() != tc.want {
				t.Fatalf("Take error = %v, want %q wrapping ErrInvalidLimit", err, tc.want)
			}
			if strings.HasPrefix(tc.want, "bucket: invalid limit: cost") {
				return // the limit itself is fine
			}
			if !errors.Is(verr, bucket.ErrInvalidLimit) || verr.Error() != tc.want {
				t.Fatalf("Validate = %v, want %q", verr, tc.want)
			}
			if _, err := l.State(t.Context(), "test", "k", tc.lim); !errors.Is(err, bucket.ErrInvalidLimit) {
				t.Fatalf("State error = %v, want ErrInvalidLimit", err)
			}
		})
	}
}

// TestKeys checks every key name: one function names them all, with the
// pacing key's hash tag, so every piece of its state shares its slot.
func TestKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		prefix, want string
	}{
		{"", "pacer"},
		{"stage", "stage"},
	} {
		k := bucket.New(noRedis{}, bucket.Config{Prefix: tc.prefix}).Keys()
		if k != bucket.NewKeys(tc.prefix) || k.Prefix() != tc.want {
			t.Fatalf("prefix %q: Keys %+v (prefix %q), want NewKeys(%q)", tc.prefix, k, k.Prefix(), tc.prefix)
		}
		p := tc.want + ":{whatsapp:106540352242922}:"
		const ch, key = "whatsapp", "106540352242922"
		for got, want := range map[string]string{
			k.Bucket(ch, key):                     p + "bucket",
			k.Cooldown(ch, key):                   p + "cooldown",
			k.SubBucket(ch, key, "15551234567"):   p + "sub:15551234567:bucket",
			k.SubCooldown(ch, key, "15551234567"): p + "sub:15551234567:cooldown",
			k.AIMD(ch, key):                       p + "aimd",
			k.Breaker(ch, key):                    p + "breaker",
			k.IDs(ch, key, 7):                     p + "ids:7",
			k.ChannelIDs(ch, -2):                  tc.want + ":{whatsapp}:ids:-2",
			k.Window("tenant", "acme"):            tc.want + ":{tenant:acme}:window",
		} {
			if got != want {
				t.Errorf("prefix %q: key %q, want %q", tc.prefix, got, want)
			}
		}
	}
	if (bucket.Keys{}).Bucket("a", "b") != "pacer:{a:b}:bucket" {
		t.Errorf("the zero Keys does not use the default prefix")
	}
}

func TestLoad(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		if err := e.l.Load(ctx); err != nil {
			t.Fatal(err)
		}
		// Take works through EVALSHA, and through EVAL after a flush (only on
		// miniredis: other tests share redis-server's script cache).
		e.takes(t, "k", bucket.Limit{PerSecond: 1, Burst: 1}, []take{{0, 1, true, 0, 0, false}})
		if e.Exact() {
			if err := e.RDB.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			e.takes(t, "k", bucket.Limit{PerSecond: 1, Burst: 1}, []take{{0, 1, false, 0, time.Second, false}})
		}
	})
}

func TestRedisErrorsWrapped(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	e.MR.SetError("LOADING Redis is loading the dataset in memory")
	ctx := t.Context()
	lim := bucket.Limit{PerSecond: 1, Burst: 1}
	for name, err := range map[string]error{
		`bucket: reserve "pacer:{test:k}:bucket": LOADING`:    func() error { _, err := e.l.Reserve(ctx, "test", "k", lim, 1, 0); return err }(),
		`bucket: state "pacer:{test:k}:bucket": LOADING`:      func() error { _, err := e.l.State(ctx, "test", "k", lim); return err }(),
		`bucket: cooldown "pacer:{test:k}:cooldown": LOADING`: e.l.Cooldown(ctx, "test", "k", time.Second),
		`bucket: load state script: LOADING`:                  e.l.Load(ctx),
	} {
		var rerr redis.Error
		if err == nil || !strings.HasPrefix(err.Error(), name) || !errors.As(err, &rerr) {
			t.Errorf("got %v, want %q... wrapping a redis.Error", err, name)
		}
	}
}

// fakeReply is a Scripter whose every script replies v.
type fakeReply struct {
	redis.Scripter
	v any
}

func (f fakeReply) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return redis.NewCmdResult(f.v, nil)
}

func TestUnexpectedReply(t *testing.T) {
	t.Parallel()
	lim := bucket.Limit{PerSecond: 1, Burst: 1}
	// Each reply is malformed for every script, except where valid says.
	for _, tc := range []struct {
		v     any
		valid string
	}{
		{nil, ""},
		{"OK", ""},
		{int64(1), ""},
		{[]any{}, ""},
		{[]any{int64(1), int64(0)}, "state"},
		{[]any{int64(5000000), int64(0)}, ""},   // 5 tokens in a bucket of 1
		{[]any{int64(-1e15 - 1), int64(0)}, ""}, // a debt beyond 10^9 tokens
		{[]any{"1", "0", "0", "0"}, ""},
		{[]any{int64(2), int64(0), int64(0), int64(0)}, ""},
		{[]any{int64(0), int64(0), int64(-1), int64(0)}, ""},
		{[]any{int64(1), int64(0), int64(0), int64(0), int64(0)}, ""},
	} {
		l := bucket.New(fakeReply{v: tc.v}, bucket.Config{})
		if d, err := l.Reserve(t.Context(), "test", "k", lim, 1, 0); err == nil || !strings.Contains(err.Error(), "unexpected reply") {
			t.Errorf("Reserve with reply %#v: %+v, %v; want an unexpected-reply error", tc.v, d, err)
		}
		if st, err := l.State(t.Context(), "test", "k", lim); tc.valid != "state" && (err == nil || !strings.Contains(err.Error(), "unexpected reply")) {
			t.Errorf("State with reply %#v: %+v, %v; want an unexpected-reply error", tc.v, st, err)
		}
		if err := l.Cooldown(t.Context(), "test", "k", time.Second); err == nil || !strings.Contains(err.Error(), "unexpected reply") {
			t.Errorf("Cooldown with reply %#v: %v; want an unexpected-reply error", tc.v, err)
		}
	}
}

func ExampleLimiter_Reserve_now() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	mr.SetTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	l := bucket.New(rdb, bucket.Config{})
	lim := bucket.Limit{PerSecond: 80, Burst: 2} // 80 messages per second, 2 at once
	for range 3 {
		d, err := l.Reserve(context.Background(), "whatsapp", "106540352242922", lim, 1, 0)
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v remaining=%d wait=%v\n", d.OK, d.Remaining, d.Wait)
	}
	// Output:
	// allowed=true remaining=1 wait=0s
	// allowed=true remaining=0 wait=0s
	// allowed=false remaining=0 wait=12.5ms
}
