package bucket_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/redistest"
)

// reserve is one step of a step table for Reserve.
type reserve struct {
	at       time.Duration // since the start of the test
	cost     int
	maxWait  time.Duration
	ok       bool
	delay    time.Duration // want Reservation.Delay (0 when refused)
	wait     time.Duration // want Reservation.Wait (0 when granted)
	cooldown bool
}

func (e *env) reserves(t *testing.T, key string, lim bucket.Limit, steps []reserve) {
	t.Helper()
	for i, s := range steps {
		r, c, lo, hi, err := e.reserveAt(t, s.at, key, lim, s.cost, s.maxWait)
		if err != nil || r.OK != s.ok || r.Cooldown != s.cooldown || !e.NearShift(r.Delay, s.delay, lo, hi) || !e.NearShift(r.Wait, s.wait, lo, hi) ||
			(r.OK && (r.At.Before(c.Sent.Add(r.Delay)) || r.At.After(time.Now().Add(r.Delay)))) || (!r.OK && !r.At.IsZero()) {
			t.Fatalf("step %d (at %v, cost %d, maxWait %v): got %+v, %v; want ok=%v delay=%v wait=%v cooldown=%v",
				i, s.at, s.cost, s.maxWait, r, err, s.ok, s.delay, s.wait, s.cooldown)
		}
	}
}

const ms = time.Millisecond

// TestReserveSlots checks that reservations queue one slot apart, that a
// slot beyond maxWait is refused with the time until it would fit, and that
// the debt refills.
func TestReserveSlots(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		e.reserves(t, "k", bucket.Limit{PerSecond: 2, Burst: 2}, []reserve{
			{0, 1, 0, true, 0, 0, false},
			{0, 1, time.Second, true, 0, 0, false}, // the burst: now
			{0, 1, 0, false, 0, 500 * ms, false},   // maxWait 0 is a take
			{0, 1, time.Second, true, 500 * ms, 0, false},
			{0, 1, time.Second, true, time.Second, 0, false},
			{0, 1, time.Second, false, 0, 500 * ms, false}, // slot 1.5 s > 1 s: try again in 0.5 s
			{0, 2, 10 * time.Second, true, 2 * time.Second, 0, false},
			{0, 1, time.Hour, true, 2500 * ms, 0, false},
			{3 * time.Second, 1, 0, true, 0, 0, false}, // 2 + 6 tokens by 3 s, 7 taken before
			{3 * time.Second, 1, 0, false, 0, 500 * ms, false},
		})
	})
}

// TestReserveSubSecond checks that slots keep their microseconds and are
// never rounded to 0.
func TestReserveSubSecond(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		if !e.Exact() {
			// 1000/s, burst 1: reservation i's slot is i ms after the first,
			// so its delay is in whole µs and at most i ms. How long the calls
			// themselves take shifts it on a loaded machine, so only these
			// bounds are checked on the real clock; the exact values (never
			// rounded to 0) are the miniredis table below.
			lim := bucket.Limit{PerSecond: 1000, Burst: 1}
			for i := range 20 {
				r, err := e.l.Reserve(t.Context(), "test", "k", lim, 1, time.Second)
				if err != nil || !r.OK || r.Delay%time.Microsecond != 0 || r.Delay < 0 ||
					r.Delay > time.Duration(i)*time.Millisecond {
					t.Fatalf("reservation %d: %+v, %v; want a delay in [0, %d ms] in whole µs", i, r, err, i)
				}
			}
			return
		}
		e.reserves(t, "k", bucket.Limit{PerSecond: 1000, Burst: 1}, []reserve{
			{0, 1, time.Second, true, 0, 0, false},
			{0, 1, time.Second, true, ms, 0, false},
			{0, 1, time.Second, true, 2 * ms, 0, false},
			{1999 * time.Microsecond, 1, 0, false, 0, 1001 * time.Microsecond, false}, // the slot at 3 ms
			{1999 * time.Microsecond, 1, 1000 * time.Microsecond, false, 0, time.Microsecond, false},
			{1999 * time.Microsecond, 1, 1001 * time.Microsecond, true, 1001 * time.Microsecond, 0, false},
		})
		e.reserves(t, "k3", bucket.Limit{PerSecond: 3, Burst: 1}, []reserve{
			{0, 1, time.Second, true, 0, 0, false},
			{0, 1, time.Second, true, 333334 * time.Microsecond, 0, false},
			{0, 1, time.Second, true, 666667 * time.Microsecond, 0, false},
			{0, 1, 0, false, 0, time.Second, false},
		})
	})
}

// TestReserveNoHerd checks that concurrent waiters get distinct slots one
// token apart: each sleeps once, and they wake one by one.
func TestReserveNoHerd(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		lim := bucket.Limit{PerSecond: 100, Burst: 1}
		const n = 50
		slots := make([]int64, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				r, err := e.l.Reserve(t.Context(), "test", "k", lim, 1, time.Second)
				if err != nil || !r.OK {
					t.Errorf("reserve: %+v, %v", r, err)
				}
				slots[i] = bucket.RedisSlot(r)
			})
		}
		wg.Wait()
		slices.Sort(slots)
		for i := 1; i < n; i++ {
			if gap := slots[i] - slots[i-1]; gap < 10000 || (e.Exact() && gap != 10000) {
				t.Fatalf("slots %d and %d are %d µs apart, want 10000 (all: %v)", i-1, i, gap, slots)
			}
		}
	})
}

// TestReserveRefusedChangesNothing checks that a refused reservation (too
// far, or in cooldown) neither debits the bucket nor moves its refill time.
func TestReserveRefusedChangesNothing(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		lim := bucket.Limit{PerSecond: 1, Burst: 2}
		bk := e.keys.Bucket("test", "k")
		if r, err := e.l.Reserve(ctx, "test", "k", lim, 2, time.Hour); err != nil || !r.OK {
			t.Fatalf("first reserve: %+v, %v", r, err)
		}
		if r, err := e.l.Reserve(ctx, "test", "k", lim, 1, 5*time.Second); err != nil || !r.OK || !e.Near(r.Delay, time.Second) {
			t.Fatalf("second reserve: %+v, %v", r, err)
		}
		before := e.Snapshot(t, bk)
		for _, c := range []struct {
			cost    int
			maxWait time.Duration
		}{{1, 0}, {1, 1500 * ms}, {2, 2 * time.Second}} {
			if r, err := e.l.Reserve(ctx, "test", "k", lim, c.cost, c.maxWait); err != nil || r.OK || r.Wait <= 0 {
				t.Fatalf("reserve %+v: %+v, %v; want refused", c, r, err)
			}
		}
		for _, maxWait := range []time.Duration{0, 1500 * ms} {
			if ls, err := e.l.Lease(ctx, "test", "k", lim, 3, maxWait); err != nil || ls.Granted != 0 || ls.Wait <= 0 {
				t.Fatalf("lease within %v: %+v, %v; want refused", maxWait, ls, err)
			}
		}
		if d, err := e.l.ReserveMulti(ctx, "test", "k", []bucket.Request{{Limit: lim, Cost: 1}, {Sub: "r", Limit: lim, Cost: 1}}, 0); err != nil || d.OK {
			t.Fatalf("take multi: %+v, %v; want refused", d, err)
		}
		if err := e.l.Cooldown(ctx, "test", "k", time.Minute); err != nil {
			t.Fatal(err)
		}
		if r, err := e.l.Reserve(ctx, "test", "k", lim, 1, time.Hour); err != nil || r.OK || !r.Cooldown {
			t.Fatalf("reserve in cooldown: %+v, %v", r, err)
		}
		after := e.Snapshot(t, bk)
		if !maps.Equal(before.Hash, after.Hash) || after.PTTL > before.PTTL || (e.Exact() && after.PTTL != before.PTTL) {
			t.Fatalf("refusals changed the bucket: before %+v, after %+v", before, after)
		}
		if n := e.RDB.Exists(ctx, e.keys.SubBucket("test", "k", "r")).Val(); n != 0 {
			t.Fatal("a refused multi-bucket take wrote its sub-bucket")
		}
	})
}

// TestRequestLargerThanBurst checks that a request that could never be
// granted is refused with ErrInvalidLimit, without calling Redis, by every
// call: never an endless wait.
func TestRequestLargerThanBurst(t *testing.T) {
	t.Parallel()
	l := bucket.New(noRedis{}, bucket.Config{})
	ctx := t.Context()
	lim := bucket.Limit{PerSecond: 10, Burst: 5}
	for name, call := range map[string]func() error{
		"Reserve now": func() error { _, err := l.Reserve(ctx, "test", "k", lim, 6, 0); return err },
		"Reserve":     func() error { _, err := l.Reserve(ctx, "test", "k", lim, 6, time.Hour); return err },
		"ReserveMulti": func() error {
			_, err := l.ReserveMulti(ctx, "test", "k", []bucket.Request{{Limit: lim, Cost: 1}, {Sub: "r", Limit: lim, Cost: 6}}, time.Hour)
			return err
		},
		"ReserveMulti now": func() error {
			_, err := l.ReserveMulti(ctx, "test", "k", []bucket.Request{{Limit: lim, Cost: 6}}, 0)
			return err
		},
		"Lease zero":      func() error { _, err := l.Lease(ctx, "test", "k", lim, 0, time.Hour); return err },
		"Lease bad limit": func() error { _, err := l.Lease(ctx, "test", "k", bucket.Limit{Burst: 1}, 1, time.Hour); return err },
		"ValidateCost":    func() error { return lim.ValidateCost(6) },
		"Multi empty":     func() error { _, err := l.ReserveMulti(ctx, "test", "k", nil, 0); return err },
		"Multi duplicated": func() error {
			_, err := l.ReserveMulti(ctx, "test", "k", []bucket.Request{{Sub: "x", Limit: lim, Cost: 1}, {Sub: "x", Limit: lim, Cost: 1}}, 0)
			return err
		},
		"Local Reserve": func() error {
			_, err := bucket.NewLocal(bucket.LocalConfig{}).Reserve(ctx, "test", "k", lim, 6, time.Hour)
			return err
		},
	} {
		if err := call(); !errors.Is(err, bucket.ErrInvalidLimit) {
			t.Errorf("%s: error %v, want ErrInvalidLimit", name, err)
		}
	}
	if err := lim.ValidateCost(5); err != nil {
		t.Fatalf("ValidateCost(5) = %v", err)
	}
}

// TestReserveAheadAndNowShareTheBucket checks that a reservation with no
// wait sees the debt of slots granted ahead, and one with a wait the
// tokens taken now.
func TestReserveAheadAndNowShareTheBucket(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		lim := bucket.Limit{PerSecond: 4, Burst: 2}
		e.takes(t, "k", lim, []take{{0, 1, true, 1, 0, false}})
		e.reserves(t, "k", lim, []reserve{
			{0, 1, time.Second, true, 0, 0, false},
			{0, 2, time.Second, true, 500 * ms, 0, false},
		})
		e.takes(t, "k", lim, []take{
			{0, 1, false, 0, 750 * ms, false},
			{750 * ms, 1, true, 0, 0, false},
		})
		if st, err := e.l.State(t.Context(), "test", "k", lim); err != nil || !e.nearTokens(st.Tokens, 0, lim) {
			t.Fatalf("State = %+v, %v; want 0 tokens", st, err)
		}
	})
}

// TestStateShowsDebt checks that State reports a debt as negative tokens.
func TestStateShowsDebt(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		lim := bucket.Limit{PerSecond: 2, Burst: 2}
		e.reserves(t, "k", lim, []reserve{
			{0, 2, 0, true, 0, 0, false},
			{0, 2, 2 * time.Second, true, time.Second, 0, false},
			{0, 1, 2 * time.Second, true, 1500 * ms, 0, false},
		})
		if st, err := e.l.State(t.Context(), "test", "k", lim); err != nil || !e.nearTokens(st.Tokens, -3, lim) {
			t.Fatalf("State = %+v, %v; want -3 tokens", st, err)
		}
	})
}

// TestReserveClockSteppedBack checks that state stamped ahead of Redis TIME
// (the clock stepped back, a failover) neither mints tokens nor stalls the
// key for longer than the step.
func TestReserveClockSteppedBack(t *testing.T) {
	lim := bucket.Limit{PerSecond: 2, Burst: 2}
	t.Run("TIME", func(t *testing.T) {
		t.Parallel()
		e := newMini(t) // only miniredis can step TIME back
		e.reserves(t, "k", lim, []reserve{
			{0, 2, 0, true, 0, 0, false},
			{0, 1, time.Second, true, 500 * ms, 0, false},
		})
		// An hour back: no refill, and slots as if the stamp were now.
		e.reserves(t, "k", lim, []reserve{
			{-time.Hour, 1, 0, false, 0, time.Second, false},
			{-time.Hour, 1, 2 * time.Second, true, time.Second, 0, false},
			{-time.Hour + time.Second, 1, 2 * time.Second, true, 500 * ms, 0, false},
		})
	})
	stampsAhead(t, []stampAheadCase[reserve]{
		{"empty", "0", []reserve{
			{0, 1, 0, false, 0, 500 * ms, false},
			{0, 1, time.Second, true, 500 * ms, 0, false},
			{0, 1, time.Second, true, time.Second, 0, false},
		}},
		{"in debt", "-2000000", []reserve{
			{0, 1, time.Second, false, 0, 500 * ms, false},
			{0, 1, 2 * time.Second, true, 1500 * ms, 0, false},
		}},
		{"full", "2000000", []reserve{
			{0, 2, 0, true, 0, 0, false},
			{0, 1, time.Second, true, 500 * ms, 0, false},
		}},
	}, func(t *testing.T, e *env, steps []reserve) { e.reserves(t, "k", lim, steps) })
}

// TestReserveCorruptHashIsFull checks that Reserve and Lease read a corrupt
// bucket as fresh and full, and repair it.
func TestReserveCorruptHashIsFull(t *testing.T) {
	lim := bucket.Limit{PerSecond: 1, Burst: 3}
	eachCorrupt(t, func(t *testing.T, e *env, bk string) {
		ctx := t.Context()
		ls, err := e.l.Lease(ctx, "test", "k", lim, 4, 1500*ms)
		if err != nil || ls.Granted != 4 || !e.Near(ls.Slot(3).Sub(ls.Start), time.Second) {
			t.Fatalf("Lease = %+v, %v; want 4 slots, 3 at once", ls, err)
		}
		e.reserves(t, "k", lim, []reserve{{0, 1, 3 * time.Second, true, 2 * time.Second, 0, false}})
		h := e.RDB.HGetAll(ctx, bk).Val()
		if u, err := strconv.ParseInt(h["utokens"], 10, 64); err != nil || u != -2e6 && e.Exact() {
			t.Fatalf("not repaired: %v", h)
		}
	})
}

// TestIdleMonth checks that 30 idle days refill to burst without overflow,
// even at the fastest rate, and from a debt.
func TestIdleMonth(t *testing.T) {
	const month = 30 * 24 * time.Hour
	for _, lim := range []bucket.Limit{
		{PerSecond: 80, Burst: 80},
		{PerSecond: 1e12, Burst: 1e9},
		{PerSecond: 0.1, Burst: 1},
	} {
		t.Run(formatLimit(lim), func(t *testing.T) {
			each(t, func(t *testing.T, e *env) {
				ctx := t.Context()
				now, err := e.RDB.Time(ctx).Result()
				if err != nil {
					t.Fatal(err)
				}
				past := strconv.FormatInt(now.Add(-month).UnixMicro(), 10)
				if err := e.RDB.HSet(ctx, e.keys.Bucket("test", "k"), "utokens", "-1000000000", "ts_us", past).Err(); err != nil {
					t.Fatal(err)
				}
				if st, err := e.l.State(ctx, "test", "k", lim); err != nil || st.Tokens != float64(lim.Burst) {
					t.Fatalf("State after a month = %+v, %v; want %d tokens", st, err, lim.Burst)
				}
				e.reserves(t, "k", lim, []reserve{{0, lim.Burst, 0, true, 0, 0, false}})
				if !e.Exact() {
					return
				}
				// And a month of miniredis's own clock.
				e.At(month)
				e.reserves(t, "k", lim, []reserve{{month, lim.Burst, 0, true, 0, 0, false}})
			})
		})
	}
}

func formatLimit(l bucket.Limit) string {
	return strconv.FormatFloat(l.PerSecond, 'g', -1, 64) + "/s burst " + strconv.Itoa(l.Burst)
}

// TestLowerLimitClamps checks that lowering a limit below the tokens held
// clamps the bucket at once.
func TestLowerLimitClamps(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		high := bucket.Limit{PerSecond: 0.001, Burst: 100}
		low := bucket.Limit{PerSecond: 0.001, Burst: 10}
		e.takes(t, "k", high, []take{{0, 1, true, 99, 0, false}})
		if st, err := e.l.State(t.Context(), "test", "k", low); err != nil || st.Tokens != 10 {
			t.Fatalf("State under the lower limit = %+v, %v; want 10", st, err)
		}
		e.takes(t, "k", low, []take{{0, 1, true, 9, 0, false}})
		e.reserves(t, "k", low, []reserve{{0, 9, 0, true, 0, 0, false}, {0, 1, 0, false, 0, 1000 * time.Second, false}})
		e.takes(t, "k", high, []take{{0, 1, false, 0, 1000 * time.Second, false}}) // raising it back adds nothing
	})
}

// TestSlowRateTTL checks that at 0.1 token/s the bucket key outlives its
// refill, from a debt too: the TTL never resets an unfinished refill.
func TestSlowRateTTL(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		lim := bucket.Limit{PerSecond: 0.1, Burst: 1}
		bk := e.keys.Bucket("test", "k")
		since := time.Now()
		e.reserves(t, "k", lim, []reserve{
			{0, 1, time.Minute, true, 0, 0, false},
			{0, 1, time.Minute, true, 10 * time.Second, 0, false},
			{0, 1, time.Minute, true, 20 * time.Second, 0, false}, // 2 tokens in debt
		})
		full := 30 * time.Second // from -2 to 1 token at 0.1/s
		// On redis-server the debt is what the time since the first grant
		// has not refilled: the TTL is full less that time.
		if ttl := e.RDB.PTTL(ctx, bk).Val(); !e.TTLIn(ttl, full, full+time.Second, since) {
			t.Fatalf("PTTL = %v, want in [%v, %v] less the time since the first grant", ttl, full, full+time.Second)
		}
		if !e.Exact() {
			return
		}
		e.At(full - ms)
		if st, err := e.l.State(ctx, "test", "k", lim); err != nil || st.Tokens != 0.9999 {
			t.Fatalf("State 1 ms before full = %+v, %v; want 0.9999 tokens", st, err)
		}
		e.reserves(t, "k", lim, []reserve{{full - ms, 1, 0, false, 0, ms, false}}) // refused: the TTL stays
		e.At(full + 2*ms)
		if n := e.RDB.Exists(ctx, bk).Val(); n != 0 {
			t.Fatal("the key outlived its TTL")
		}
		e.reserves(t, "k", lim, []reserve{{full + 2*ms, 1, 0, true, 0, 0, false}})
	})
}

// TestLease checks the slots of leases: the tokens there at once, then one
// per 1/rate, all within maxWait, and that other callers queue after them.
func TestLease(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		// Slots 400 ms apart: on redis-server every grant and refusal
		// stays that far from flipping, beyond Slack.
		lim := bucket.Limit{PerSecond: 2.5, Burst: 5}
		type step struct {
			at      time.Duration
			n       int
			maxWait time.Duration
			granted int
			slots   []time.Duration // want Slot(i) - Slot(0) ... as offsets from Start
			start   time.Duration   // want Start - reply time
			wait    time.Duration
		}
		for i, s := range []step{
			{0, 8, 4 * time.Second, 8, []time.Duration{0, 0, 0, 0, 0, 400 * ms, 800 * ms, 1200 * ms}, 0, 0},
			{0, 20, 2 * time.Second, 2, []time.Duration{0, 400 * ms}, 1600 * ms, 0},
			{0, 1, 2 * time.Second, 0, nil, 0, 400 * ms},
			{2 * time.Second, 3, 0, 0, nil, 0, 400 * ms},
			{2400 * ms, 3, 400 * ms, 2, []time.Duration{0, 400 * ms}, 0, 0},
		} {
			e.At(s.at)
			before := time.Now()
			ls, err := e.l.Lease(ctx, "test", "k", lim, s.n, s.maxWait)
			e.Mark()
			if err != nil || ls.Granted != s.granted || !e.Near(ls.Wait, s.wait) || ls.Interval != 400*ms {
				t.Fatalf("step %d: Lease = %+v, %v; want %d slots, wait %v", i, ls, err, s.granted, s.wait)
			}
			if s.granted == 0 {
				if !ls.Start.IsZero() || !ls.Slot(0).IsZero() {
					t.Fatalf("step %d: refused lease has slots: %+v", i, ls)
				}
				continue
			}
			// Start is on the local clock, on miniredis too.
			if d := ls.Start.Sub(before); d < s.start-slack || d > s.start+slack || (e.Exact() && d < s.start) {
				t.Fatalf("step %d: Start %v after the call, want %v", i, ls.Start.Sub(before), s.start)
			}
			for j, want := range s.slots {
				if got := ls.Slot(j).Sub(ls.Start); got != want && (e.Exact() || got < want-slack || got > want+slack) {
					t.Fatalf("step %d: Slot(%d) - Start = %v, want %v", i, j, got, want)
				}
			}
			if !ls.Slot(s.granted).IsZero() || !ls.Slot(-1).IsZero() {
				t.Fatalf("step %d: Slot out of range is not zero", i)
			}
		}
	})
}

type call = redistest.Call

var timed = redistest.Timed

// unstarted reports whether n slots of ls from used on are the ones that
// had not started when Redis ran ret (a Return), the lease granted at
// lease: exactly want on miniredis, whose clock the test sets; on
// redis-server, whose clock ran on while the process waited, at least
// those certain not to have started (on the Redis clock a slot starts up
// to the lease's round trip before [bucket.Lease.Slot]) and at most those
// that may not have, so a late call changes which ones, never the check.
func (e *env) unstarted(n, want int, ls bucket.Lease, used int, lease, ret call) (ok bool, bounds string) {
	if e.Exact() {
		return n == want, ""
	}
	lo, hi := 0, 0
	for i := used; i < ls.Granted; i++ {
		if ls.Slot(i).Add(-lease.Trip()).After(ret.Answered) {
			lo++
		}
		if !ls.Slot(i).Before(ret.Sent) {
			hi++
		}
	}
	return n >= lo && n <= hi, fmt.Sprintf(" (on redis-server %d..%d: lease trip %v, return sent %v and answered %v after the lease's reply)",
		lo, hi, lease.Trip(), ret.Sent.Sub(ls.Slot(0)), ret.Answered.Sub(ls.Slot(0)))
}

// TestLeaseReturn checks that Return gives back exactly the unused slots
// that have not started, once, and that the bucket is then as if they had
// never been granted.
func TestLeaseReturn(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		lim := bucket.Limit{PerSecond: 10, Burst: 5}
		var ls bucket.Lease
		var err error
		lease := timed(func() { ls, err = e.l.Lease(ctx, "test", "k", lim, 10, time.Second) }) // 5 at once, then 100..500 ms
		e.Mark()
		if err != nil || ls.Granted != 10 {
			t.Fatalf("Lease = %+v, %v", ls, err)
		}
		e.At(250 * ms) // slots at 100 and 200 ms have started
		var n int
		ret := timed(func() { n, err = e.l.Return(ctx, ls, 6) })
		if ok, bounds := e.unstarted(n, 3, ls, 6, lease, ret); err != nil || !ok {
			t.Fatalf("Return(6) at 250 ms = %d, %v; want 3 (300, 400, 500 ms)%s", n, err, bounds)
		}
		if n, err := e.l.Return(ctx, ls, 6); !errors.Is(err, bucket.ErrReturned) || n != 0 {
			t.Fatalf("second Return = %d, %v; want ErrReturned", n, err)
		}
		// As if only 7 slots (5 at once, 100 and 200 ms) had been granted:
		// at 250 ms the bucket holds 2.5 - 2 = 0.5 token. On redis-server,
		// as if 10 - n had been: n - 5 tokens and the refill since the
		// lease, whenever the calls ran.
		var st bucket.State
		state := timed(func() { st, err = e.l.State(ctx, "test", "k", lim) })
		lo := float64(n-5) + lim.PerSecond*state.Sent.Sub(lease.Answered).Seconds() - 1e-3 // the slots' rounding
		hi := float64(n-5) + lim.PerSecond*state.Answered.Sub(lease.Sent).Seconds() + 1e-3
		if err != nil || (e.Exact() && st.Tokens != 0.5) || (!e.Exact() && (st.Tokens < min(lo, 5) || st.Tokens > min(hi, 5))) {
			t.Fatalf("State after Return = %+v, %v; want 0.5 tokens (on redis-server %.3f..%.3f)", st, err, lo, hi)
		}
		e.reserves(t, "k", lim, []reserve{{250 * ms, 1, time.Second, true, 50 * ms, 0, false}})

		// Nothing to give back: a refused lease, all used, all started.
		if n, err := e.l.Return(ctx, bucket.Lease{}, 0); err != nil || n != 0 {
			t.Fatalf("Return of a zero Lease = %d, %v", n, err)
		}
		ls2, err := e.l.Lease(ctx, "test", "k2", lim, 3, 0)
		if err != nil || ls2.Granted != 3 {
			t.Fatalf("Lease = %+v, %v", ls2, err)
		}
		if n, err := e.l.Return(ctx, ls2, 3); err != nil || n != 0 {
			t.Fatalf("Return all used = %d, %v", n, err)
		}
		if n, err := e.l.Return(ctx, ls2, 1); err != nil || n != 0 {
			t.Fatalf("Return of slots that all started at once = %d, %v", n, err)
		}

		// A lease followed by another (a second replica's): giving the first
		// one's slots back would put the next lease on top of the second's
		// slots, so they lapse; the last lease gives its slots back.
		e.At(2 * time.Second)                                          // every bucket full again (the last slot above: 300 ms)
		a, err := e.l.Lease(ctx, "test", "k3", lim, 10, 2*time.Second) // 5 at once, then 100..500 ms
		if err != nil || a.Granted != 10 {
			t.Fatalf("Lease a = %+v, %v", a, err)
		}
		var b bucket.Lease
		leaseB := timed(func() { b, err = e.l.Lease(ctx, "test", "k3", lim, 5, 2*time.Second) }) // 600..1000 ms
		if err != nil || b.Granted != 5 {
			t.Fatalf("Lease b = %+v, %v", b, err)
		}
		if n, err := e.l.Return(ctx, a, 5); err != nil || n != 0 {
			t.Fatalf("Return of a lease granted before another = %d, %v; want 0 (its slots lapse)", n, err)
		}
		ret = timed(func() { n, err = e.l.Return(ctx, b, 2) })
		if ok, bounds := e.unstarted(n, 3, b, 2, leaseB, ret); err != nil || !ok {
			t.Fatalf("Return of the last lease = %d, %v; want 3 (800, 900, 1000 ms)%s", n, err, bounds)
		}
		// The next slot follows b's used ones: at 800 ms, its first slot
		// given back (on redis-server, where it stood on the local clock,
		// within the round trips that map it there, or at once if passed).
		if e.Exact() {
			e.reserves(t, "k3", lim, []reserve{{2 * time.Second, 1, 2 * time.Second, true, 800 * ms, 0, false}})
			return
		}
		var r bucket.Reservation
		res := timed(func() { r, err = e.l.Reserve(ctx, "test", "k3", lim, 1, 2*time.Second) })
		want := b.Slot(b.Granted - n)
		if err != nil || !r.OK || r.At.Before(want.Add(-leaseB.Trip())) ||
			r.At.After(latest(want, res.Answered).Add(res.Trip())) {
			t.Fatalf("Reserve after the Return = %+v, %v; want its slot at %v (b's slot %d)", r, err, want, b.Granted-n)
		}
	})
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// TestReserveNowMulti checks the all-or-nothing take (no wait) of a
// number and a pair bucket.
func TestReserveNowMulti(t *testing.T) {
	number := bucket.Limit{PerSecond: 10, Burst: 2}
	pair := bucket.Limit{PerSecond: 1.0 / 6, Burst: 2}
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		type step struct {
			at        time.Duration
			recipient string
			allowed   bool
			remaining int
			wait      time.Duration
		}
		for i, s := range []step{
			{0, "a", true, 1, 0},
			{0, "a", true, 0, 0},
			{0, "a", false, 0, 6 * time.Second},  // the pair is the longer wait
			{0, "b", false, 0, 100 * ms},         // another pair, the number is empty
			{300 * ms, "a", false, 0, 5700 * ms}, // the pair refilled 0.05 token
			{300 * ms, "b", true, 1, 0},          // "a" took nothing: the number has 2
			{300 * ms, "c", true, 0, 0},
		} {
			e.At(s.at)
			d, err := e.l.ReserveMulti(ctx, "test", "k", []bucket.Request{
				{Limit: number, Cost: 1},
				{Sub: s.recipient, Limit: pair, Cost: 1},
			}, 0)
			e.Mark()
			if err != nil || d.OK != s.allowed || d.Remaining != s.remaining || !e.Near(d.Wait, s.wait) || d.Cooldown {
				t.Fatalf("step %d: ReserveMulti(%s, now) = %+v, %v; want allowed=%v remaining=%d wait=%v", i, s.recipient, d, err, s.allowed, s.remaining, s.wait)
			}
		}
		if k := e.keys.SubBucket("test", "k", "a"); e.RDB.Exists(ctx, k).Val() != 1 {
			t.Fatalf("no sub-bucket at %s", k)
		}
	})
}

// TestReserveMultiDebitsAtTheSlot checks that a bucket whose own slot is
// earlier than the common slot is debited as at the common slot, so it does
// not pass its refill on to the next caller.
func TestReserveMultiDebitsAtTheSlot(t *testing.T) {
	lim := bucket.Limit{PerSecond: 1, Burst: 1}
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		both := []bucket.Request{{Limit: lim, Cost: 1}, {Sub: "r", Limit: lim, Cost: 1}}
		// Empty the pair bucket only.
		if d, err := e.l.ReserveMulti(ctx, "test", "k", both[1:], 0); err != nil || !d.OK {
			t.Fatalf("ReserveMulti(pair, now) = %+v, %v", d, err)
		}
		e.Mark()
		r, err := e.l.ReserveMulti(ctx, "test", "k", both, 5*time.Second)
		if err != nil || !r.OK || !e.Near(r.Delay, time.Second) {
			t.Fatalf("ReserveMulti = %+v, %v; want the pair's slot at 1 s", r, err)
		}
		// The number bucket, full now, is debited as at 1 s (full: 1 token,
		// less 1), so the next message on the number alone goes at 2 s, not
		// at 1 s next to the first.
		e.reserves(t, "k", lim, []reserve{{0, 1, 5 * time.Second, true, 2 * time.Second, 0, false}})
	})
}

// TestSubCooldown checks that a sub-bucket's cooldown (its end in µs of
// Redis TIME at Keys.SubCooldown, as reserve.lua reads it) stops the calls
// that include it, and only those.
func TestSubCooldown(t *testing.T) {
	lim := bucket.Limit{PerSecond: 100, Burst: 100}
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		now, err := e.RDB.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		end := now.Add(2 * time.Second).UnixMicro()
		if err := e.RDB.Set(ctx, e.keys.SubCooldown("test", "k", "r"), end, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		e.Mark()
		r, err := e.l.ReserveMulti(ctx, "test", "k", []bucket.Request{{Limit: lim, Cost: 1}, {Sub: "r", Limit: lim, Cost: 1}}, time.Hour)
		if err != nil || r.OK || !r.Cooldown || !e.Near(r.Wait, 2*time.Second) {
			t.Fatalf("ReserveMulti with the pair in cooldown = %+v, %v", r, err)
		}
		e.reserves(t, "k", lim, []reserve{{0, 1, 0, true, 0, 0, false}})
		r, err = e.l.ReserveMulti(ctx, "test", "k", []bucket.Request{{Limit: lim, Cost: 1}, {Sub: "other", Limit: lim, Cost: 1}}, 0)
		if err != nil || !r.OK {
			t.Fatalf("ReserveMulti with another pair = %+v, %v", r, err)
		}
		if err := e.l.Cooldown(ctx, "test", "k", 3*time.Second); err != nil {
			t.Fatal(err)
		}
		e.reserves(t, "k", lim, []reserve{{0, 1, time.Hour, false, 0, 3 * time.Second, true}})
		if ls, err := e.l.Lease(ctx, "test", "k", lim, 5, time.Hour); err != nil || ls.Granted != 0 || !ls.Cooldown || !e.Near(ls.Wait, 3*time.Second) {
			t.Fatalf("Lease in cooldown = %+v, %v", ls, err)
		}
	})
}

// TestConcurrentAcrossForms checks that concurrent Reserve (with and
// without a wait), Lease and ReserveMulti calls on one key never grant more
// than the bucket holds.
func TestConcurrentAcrossForms(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		lim := bucket.Limit{PerSecond: 0.001, Burst: 100} // no refill within the test
		granted := redistest.Sum(t, 10, 10, func(g int) (int, error) {
			switch g % 4 {
			case 0:
				r, err := e.l.Reserve(ctx, "test", "k", lim, 1, time.Second)
				return b2i(r.OK), err
			case 1:
				ls, err := e.l.Lease(ctx, "test", "k", lim, 3, 0)
				return ls.Granted, err
			case 2:
				d, err := e.l.Reserve(ctx, "test", "k", lim, 2, 0)
				return 2 * b2i(d.OK), err
			default:
				d, err := e.l.ReserveMulti(ctx, "test", "k", []bucket.Request{{Limit: lim, Cost: 1}, {Sub: "r" + strconv.Itoa(g), Limit: lim, Cost: 1}}, 0)
				return b2i(d.OK), err
			}
		})
		if granted != 100 {
			t.Fatalf("granted %d tokens of a bucket of 100", granted)
		}
	})
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestDispenser checks that a Dispenser hands out the slots of successive
// leases in order, to concurrent goroutines, and gives back the rest.
func TestDispenser(t *testing.T) {
	t.Parallel()
	for name, mk := range map[string]func(t *testing.T) (bucket.Leaser, func() time.Time){
		"miniredis": func(t *testing.T) (bucket.Leaser, func() time.Time) { return newMini(t).l, time.Now },
		"Local": func(t *testing.T) (bucket.Leaser, func() time.Time) {
			clock := time.Now()
			return bucket.NewLocalAt(bucket.LocalConfig{}, func() time.Time { return clock }), func() time.Time { return clock }
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l, _ := mk(t)
			ctx := t.Context()
			d := bucket.NewDispenser(l, "test", "k", bucket.Limit{PerSecond: 10, Burst: 5}, 8, time.Second)
			var mu sync.Mutex
			var slots []int64
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for range 3 {
						r, err := d.Next(ctx)
						if err != nil || !r.OK || r.Delay < 0 {
							t.Errorf("Next = %+v, %v", r, err)
							return
						}
						mu.Lock()
						slots = append(slots, bucket.RedisSlot(r))
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			slices.Sort(slots)
			// 5 at once, then one per 100 ms: the first lease's 8, then 4 of
			// the second lease's 7 (400 ms .. 1 s).
			for i, s := range slots {
				want := int64(max(0, i-4)) * 100000
				if s-slots[0] != want {
					t.Fatalf("slot %d at +%d µs, want +%d (all: %v)", i, s-slots[0], want, slots)
				}
			}
			if n, err := d.Close(ctx); err != nil || n != 3 {
				t.Fatalf("Close = %d, %v; want 3 unused slots back", n, err)
			}
			if n, err := d.Close(ctx); err != nil || n != 0 {
				t.Fatalf("second Close = %d, %v", n, err)
			}
		})
	}
}

// TestUnexpectedReplyNewCalls checks that malformed script replies are
// errors, never panics or made-up answers.
func TestUnexpectedReplyNewCalls(t *testing.T) {
	t.Parallel()
	lim := bucket.Limit{PerSecond: 1, Burst: 1}
	for _, v := range []any{
		nil, "OK", int64(1), []any{},
		[]any{int64(1), int64(0), int64(0), int64(0), int64(0), int64(0)},             // 6 values
		[]any{int64(2), int64(0), int64(0), int64(0), int64(0), int64(0), int64(1)},   // 2 slots of 1 asked
		[]any{int64(1), int64(-1), int64(0), int64(0), int64(0), int64(0), int64(1)},  // negative delay
		[]any{int64(1), int64(0), int64(5), int64(0), int64(0), int64(0), int64(1)},   // granted with a wait
		[]any{int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), int64(1)},   // refused without a wait
		[]any{int64(1), int64(2e6), int64(0), int64(0), int64(0), int64(0), int64(1)}, // delay > maxWait
		[]any{int64(1), int64(0), int64(0), int64(0), int64(0), int64(2e6), int64(1)}, // u0 > burst
		[]any{"1", "0", "0", "0", "0", "0", "1"},
	} {
		l := bucket.New(fakeReply{v: v}, bucket.Config{})
		ctx := t.Context()
		if r, err := l.Reserve(ctx, "test", "k", lim, 1, time.Second); err == nil {
			t.Errorf("Reserve with reply %#v: %+v, want an error", v, r)
		}
		if ls, err := l.Lease(ctx, "test", "k", lim, 1, time.Second); err == nil {
			t.Errorf("Lease with reply %#v: %+v, want an error", v, ls)
		}
		if d, err := l.ReserveMulti(ctx, "test", "k", []bucket.Request{{Limit: lim, Cost: 1}}, 0); err == nil {
			t.Errorf("ReserveMulti with reply %#v: %+v, want an error", v, d)
		}
	}
}
