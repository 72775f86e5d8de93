package bucket_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
)

// TestLocalMatchesRedis runs one random sequence of calls against the Lua
// scripts (on miniredis's clock) and against a Local on the same clock, and
// checks that every answer is the same: Local is the scripts' maths.
func TestLocalMatchesRedis(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	clock := t0
	loc := bucket.NewLocalAt(bucket.LocalConfig{}, func() time.Time { return clock })
	ctx := t.Context()
	rnd := rand.New(rand.NewPCG(1, 2))
	limits := []bucket.Limit{
		{PerSecond: 2, Burst: 3},
		{PerSecond: 0.1, Burst: 1},
		{PerSecond: 1000, Burst: 5},
		{PerSecond: 1.0 / 6, Burst: 45},
		{PerSecond: 80, Burst: 80},
		{PerSecond: 3, Burst: 3},
	}
	pair := bucket.Limit{PerSecond: 0.5, Burst: 2}
	var at time.Duration
	type leases struct{ redis, local bucket.Lease }
	open := map[string]leases{}
	for i := range 4000 {
		if rnd.IntN(3) > 0 {
			at += time.Duration(rnd.Int64N(int64(400 * ms)))
			if rnd.IntN(10) == 0 {
				at += time.Duration(rnd.Int64N(int64(time.Minute)))
			}
		}
		e.At(at)
		clock = t0.Add(at)
		ki := rnd.IntN(len(limits))
		key, lim := "k"+strconv.Itoa(ki), limits[ki]
		cost := 1 + rnd.IntN(lim.Burst)
		if rnd.IntN(2) == 0 {
			cost = 1
		}
		maxWait := time.Duration(rnd.Int64N(int64(5 * time.Second)))
		if rnd.IntN(4) == 0 {
			maxWait = 0
		}
		reqs := []bucket.Request{{Limit: lim, Cost: cost}, {Sub: "r" + strconv.Itoa(rnd.IntN(3)), Limit: pair, Cost: 1}}
		var got, want string
		switch op := rnd.IntN(8); op {
		case 0:
			r, err := e.l.Reserve(ctx, "test", key, lim, cost, 0)
			l, lerr := loc.Reserve(ctx, "test", key, lim, cost, 0)
			got, want = resv(l, lerr), resv(r, err)
		case 1, 2:
			r, err := e.l.Reserve(ctx, "test", key, lim, cost, maxWait)
			l, lerr := loc.Reserve(ctx, "test", key, lim, cost, maxWait)
			got, want = resv(l, lerr), resv(r, err)
		case 3:
			n := 1 + rnd.IntN(20)
			r, err := e.l.Lease(ctx, "test", key, lim, n, maxWait)
			l, lerr := loc.Lease(ctx, "test", key, lim, n, maxWait)
			got, want = lease(l, lerr), lease(r, err)
			if r.Granted > 0 && l.Granted > 0 {
				if old, ok := open[key]; ok { // give back the previous lease, partly used
					used := rnd.IntN(old.redis.Granted + 1)
					rn, err := e.l.Return(ctx, old.redis, used)
					ln, lerr := loc.Return(ctx, old.local, used)
					if rn != ln || err != nil || lerr != nil {
						t.Fatalf("call %d: Return(%d): Redis %d, %v; Local %d, %v", i, used, rn, err, ln, lerr)
					}
				}
				open[key] = leases{r, l}
				if rnd.IntN(2) == 0 { // give this one back at once: the bucket's last lease
					used := rnd.IntN(r.Granted + 1)
					rn, err := e.l.Return(ctx, r, used)
					ln, lerr := loc.Return(ctx, l, used)
					if rn != ln || err != nil || lerr != nil {
						t.Fatalf("call %d: Return(%d) of the last lease: Redis %d, %v; Local %d, %v", i, used, rn, err, ln, lerr)
					}
					delete(open, key)
				}
			}
		case 4:
			r, err := e.l.ReserveMulti(ctx, "test", key, reqs, 0)
			l, lerr := loc.ReserveMulti(ctx, "test", key, reqs, 0)
			got, want = resv(l, lerr), resv(r, err)
		case 5:
			r, err := e.l.ReserveMulti(ctx, "test", key, reqs, maxWait)
			l, lerr := loc.ReserveMulti(ctx, "test", key, reqs, maxWait)
			got, want = resv(l, lerr), resv(r, err)
		case 6:
			st, err := e.l.State(ctx, "test", key, lim)
			lst, lerr := loc.State(ctx, "test", key, lim)
			got, want = fmt.Sprint(lst, lerr), fmt.Sprint(st, err)
		case 7:
			if rnd.IntN(5) > 0 {
				continue
			}
			d := time.Duration(rnd.Int64N(int64(3 * time.Second)))
			err, lerr := e.l.Cooldown(ctx, "test", key, d), loc.Cooldown(ctx, "test", key, d)
			got, want = fmt.Sprint(lerr), fmt.Sprint(err)
		}
		if got != want {
			t.Fatalf("call %d at %v on %s %v: Local %s, Redis %s", i, at, key, lim, got, want)
		}
	}
}

// resv prints a Reservation without its local-clock fields.
func resv(r bucket.Reservation, err error) string {
	return fmt.Sprintf("ok=%v delay=%v remaining=%d cooldown=%v wait=%v err=%v", r.OK, r.Delay, r.Remaining, r.Cooldown, r.Wait, err)
}

// lease prints a Lease with its slots as offsets from Start.
func lease(l bucket.Lease, err error) string {
	s := fmt.Sprintf("granted=%d interval=%v remaining=%d cooldown=%v wait=%v err=%v slots=", l.Granted, l.Interval, l.Remaining, l.Cooldown, l.Wait, err)
	for i := range l.Granted {
		s += l.Slot(i).Sub(l.Start).String() + ","
	}
	return s
}

// TestLocalReplicas checks that each Local grants its share of a limit.
func TestLocalReplicas(t *testing.T) {
	t.Parallel()
	clock := t0
	loc := bucket.NewLocalAt(bucket.LocalConfig{Replicas: 4}, func() time.Time { return clock })
	ctx := t.Context()
	lim := bucket.Limit{PerSecond: 80, Burst: 80} // 20/s, burst 20 each
	for i := range 20 {
		if d, err := loc.Reserve(ctx, "whatsapp", "n", lim, 1, 0); err != nil || !d.OK {
			t.Fatalf("take %d: %+v, %v", i, d, err)
		}
	}
	if d, err := loc.Reserve(ctx, "whatsapp", "n", lim, 1, 0); err != nil || d.OK || d.Wait != 50*ms {
		t.Fatalf("take 21: %+v, %v; want refused for 50 ms", d, err)
	}
	if r, err := loc.Reserve(ctx, "whatsapp", "n", lim, 1, time.Second); err != nil || !r.OK || r.Delay != 50*ms || !r.At.Equal(clock.Add(50*ms)) {
		t.Fatalf("reserve: %+v, %v", r, err)
	}
	// A cost above the share of the burst still passes, alone.
	if d, err := loc.Reserve(ctx, "whatsapp", "big", lim, 30, 0); err != nil || !d.OK {
		t.Fatalf("take 30 of a share of 20: %+v, %v", d, err)
	}
	if st, err := loc.State(ctx, "whatsapp", "n", lim); err != nil || st.Tokens != -1 {
		t.Fatalf("State = %+v, %v; want -1 token", st, err)
	}
}

// TestLocalForgetsIdleKeys checks that full buckets and ended cooldowns are
// dropped, so memory follows the keys in use.
func TestLocalForgetsIdleKeys(t *testing.T) {
	t.Parallel()
	clock := t0
	loc := bucket.NewLocalAt(bucket.LocalConfig{}, func() time.Time { return clock })
	ctx := t.Context()
	lim := bucket.Limit{PerSecond: 10, Burst: 1}
	for i := range 5000 {
		if _, err := loc.Reserve(ctx, "test", "k"+strconv.Itoa(i), lim, 1, 0); err != nil {
			t.Fatal(err)
		}
		if err := loc.Cooldown(ctx, "test", "k"+strconv.Itoa(i), time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if n := bucket.LocalSize(loc); n < 5000 {
		t.Fatalf("%d entries after 5000 keys", n)
	}
	clock = clock.Add(2 * time.Second)
	for i := range 12000 {
		if _, err := loc.Reserve(ctx, "test", "other"+strconv.Itoa(i%10), lim, 1, 0); err != nil {
			t.Fatal(err)
		}
	}
	if n := bucket.LocalSize(loc); n > 100 {
		t.Fatalf("%d entries left, want only the 10 keys in use", n)
	}
}

// TestReturnToAnotherLimiter: a lease given back to a limiter that did
// not grant it is refused, naming the mix-up, gives nothing back and
// leaves the lease to its owner.
func TestReturnToAnotherLimiter(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	lim := bucket.Limit{PerSecond: 0.1, Burst: 5} // slots 10 s apart: none starts during the test
	a, b := bucket.NewLocal(bucket.LocalConfig{}), bucket.NewLocal(bucket.LocalConfig{})
	e := newMini(t)
	local, err := a.Lease(ctx, "test", "k", lim, 10, time.Minute)
	if err != nil || local.Granted != 10 {
		t.Fatalf("Local Lease = %+v, %v", local, err)
	}
	remote, err := e.l.Lease(ctx, "test", "k", lim, 10, time.Minute)
	if err != nil || remote.Granted != 10 {
		t.Fatalf("Limiter Lease = %+v, %v", remote, err)
	}
	for _, c := range []struct {
		name string
		ret  func(context.Context, bucket.Lease, int) (int, error)
		ls   bucket.Lease
		want string
	}{
		{"a Local's to a Limiter", e.l.Return, local, "bucket: return of a lease of a Local to a Limiter"},
		{"a Local's to another", b.Return, local, "bucket: return of a lease to a limiter that did not grant it"},
		{"a Limiter's to a Local", a.Return, remote, "bucket: return of a lease to a limiter that did not grant it"},
	} {
		if n, err := c.ret(ctx, c.ls, 6); err == nil || err.Error() != c.want || n != 0 {
			t.Errorf("Return of %s = %d, %v; want 0, %q", c.name, n, err, c.want)
		}
	}
	for name, c := range map[string]struct {
		ret func(context.Context, bucket.Lease, int) (int, error)
		ls  bucket.Lease
	}{"the Local": {a.Return, local}, "the Limiter": {e.l.Return, remote}} {
		if n, err := c.ret(ctx, c.ls, 6); err != nil || n != 4 {
			t.Errorf("Return to %s that granted it = %d, %v; want its 4 unused slots", name, n, err)
		}
	}
}
