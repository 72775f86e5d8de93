package keypace

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/pacer/keypace/keypacetest"
)

// returnCounter is an in-process Bucket that counts the slots given back
// through Return.
type returnCounter struct {
	*bucket.Local
	returned atomic.Int64
}

func (r *returnCounter) Return(ctx context.Context, lease bucket.Lease, used int) (int, error) {
	n, err := r.Local.Return(ctx, lease, used)
	r.returned.Add(int64(n))
	return n, err
}

// policyFunc serves a key's policy from a function.
type policyFunc func(key string) KeyPolicy

func (f policyFunc) KeyPolicy(_ context.Context, key string) (KeyPolicy, error) {
	return f(key), nil
}

// settablePolicy serves every key the policy of limit lim, which a test
// changes with set, and counts the reads.
type settablePolicy struct {
	mu    sync.Mutex
	lim   bucket.Limit
	reads int
}

func (s *settablePolicy) KeyPolicy(context.Context, string) (KeyPolicy, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	return KeyPolicy{Limit: s.lim}, nil
}

func (s *settablePolicy) set(lim bucket.Limit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lim = lim
}

func (s *settablePolicy) readCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

// testLog discards what the keys log.
var testLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// testKeys returns a channel "test" of 100 msgs/s burst 20 on b and a,
// its policy pol (the channel's when nil), its metrics unregistered.
func testKeys(t *testing.T, b Bucket, a Adapter, pol Policy) *Keys {
	t.Helper()
	lim := bucket.Limit{PerSecond: 100, Burst: 20}
	return New(Config{Channel: "test", MaxTokenWait: 5 * time.Second, Bucket: b, Adapter: a, Policy: pol, Default: KeyPolicy{Limit: lim}})
}

// localKeys is testKeys on a local bucket, with a keypacetest.Adapter.
func localKeys(t *testing.T, pol Policy) *Keys {
	t.Helper()
	return testKeys(t, bucket.NewLocal(bucket.LocalConfig{}), &keypacetest.Adapter{}, pol)
}

// An idle key's state is freed by the sweep, without any /metrics scrape,
// and the slots its lease still held are given back to the bucket; a key
// with a record in hand is kept however long it waits.
func TestSweepFreesIdleKeysAndReturnsLeases(t *testing.T) {
	b := &returnCounter{Local: bucket.NewLocal(bucket.LocalConfig{})}
	p := testKeys(t, b, &keypacetest.Adapter{}, nil)
	ctx := t.Context()
	// An empty bucket at 10/s: the lease's 10 slots all lie in the next second.
	lim := bucket.Limit{PerSecond: 10, Burst: 10}
	if r, err := b.Reserve(ctx, "test", "idle", lim, 10, time.Minute); err != nil || !r.OK {
		t.Fatalf("draining reservation: %+v, %v", r, err)
	}

	idle := p.keyState("idle")
	if _, err := idle.dispenser(ctx, p, "idle", lim, lim, 10).Next(ctx); err != nil {
		t.Fatal(err)
	}
	p.done(idle)
	busy := p.keyState("busy") // a record still in hand

	if n := p.Sweep(ctx, time.Now()); n != 0 {
		t.Fatalf("sweep right away freed %d keys, want 0", n)
	}
	if n := p.Sweep(ctx, time.Now().Add(activeFor+time.Second)); n != 1 {
		t.Fatalf("sweep after activeFor freed %d keys, want 1 (the idle one)", n)
	}
	p.mu.Lock()
	_, idleKept := p.m["idle"]
	_, busyKept := p.m["busy"]
	p.mu.Unlock()
	if idleKept || !busyKept {
		t.Fatalf("after sweep: idle kept %v (want false), busy kept %v (want true)", idleKept, busyKept)
	}
	// The lease took 10 slots and handed out 1: 9 were unused.
	if got := b.returned.Load(); got != 9 {
		t.Fatalf("slots given back = %d, want 9", got)
	}
	p.done(busy)
	if n := p.Sweep(ctx, time.Now().Add(activeFor+time.Second)); n != 1 {
		t.Fatalf("sweep after the busy key's record finished freed %d, want 1", n)
	}
}

// A slow Redis reply while one sender refreshes a key's state must not
// stall the key's other senders: they go on with the last known limit.
func TestLimitForDoesNotHoldTheKeyAcrossRedis(t *testing.T) {
	a := &keypacetest.Adapter{}
	p := testKeys(t, bucket.NewLocal(bucket.LocalConfig{}), a, nil)
	ctx := t.Context()
	st := p.keyState("k")
	defer p.done(st)
	if lim, _ := p.limitFor(ctx, time.Now(), "k", st, testLog); lim.PerSecond != 100 {
		t.Fatalf("first limit = %v, want 100/s", lim)
	}
	st.mu.Lock()
	st.refreshed = instantOf(time.Now().Add(-2 * refreshEvery)) // due for a refresh
	st.mu.Unlock()

	a.Mu.Lock()
	a.Block, a.Entered = make(chan struct{}), make(chan struct{})
	a.Mu.Unlock()
	defer close(a.Block)
	go p.limitFor(ctx, time.Now(), "k", st, testLog) // the refresher, stuck in Recover
	<-a.Entered

	got := make(chan bucket.Limit, 1)
	go func() {
		lim, _ := p.limitFor(ctx, time.Now(), "k", st, testLog)
		got <- lim
	}()
	select {
	case lim := <-got:
		if lim.PerSecond != 100 {
			t.Fatalf("limit during the refresh = %v, want the last known 100/s", lim)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a second sender of the key waited for the first one's Redis call")
	}
}

// A key's policy is asked again within refreshEvery, so a changed ceiling
// reaches the limit without a restart.
func TestPolicyRefreshedWithinASecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pol := &settablePolicy{lim: bucket.Limit{PerSecond: 50, Burst: 10}}
		p := localKeys(t, pol)
		ctx := t.Context()
		st := p.keyState("k")
		defer p.done(st)
		if lim, _ := p.limitFor(ctx, time.Now(), "k", st, testLog); lim.PerSecond != 50 {
			t.Fatalf("limit = %v, want the policy's 50/s (not the channel's 100/s)", lim)
		}
		pol.set(bucket.Limit{PerSecond: 200, Burst: 10})
		if lim, _ := p.limitFor(ctx, time.Now(), "k", st, testLog); lim.PerSecond != 50 {
			t.Fatalf("limit right after the change = %v, want 50/s until the refresh", lim)
		}
		time.Sleep(refreshEvery)
		lim, kp := p.limitFor(ctx, time.Now(), "k", st, testLog)
		if lim.PerSecond != 200 || kp.Limit.PerSecond != 200 {
			t.Fatalf("limit %v, policy %v one refresh later; want 200/s", lim, kp.Limit)
		}
	})
}

// A policy that cannot pace is refused and the key keeps its last one.
func TestInvalidPolicyKeepsTheLastOne(t *testing.T) {
	p := localKeys(t, policyFunc(func(string) KeyPolicy { return KeyPolicy{Limit: bucket.Limit{PerSecond: 0, Burst: 1}} }))
	st := p.keyState("k")
	defer p.done(st)
	if lim, _ := p.limitFor(t.Context(), time.Now(), "k", st, testLog); lim.PerSecond != 100 {
		t.Fatalf("limit = %v, want the channel's 100/s kept", lim)
	}
}

// TestUtilization checks pacer_utilization: achieved over adapted rate,
// summed over the keys that had a record in hand lately, idle keys left out.
func TestUtilization(t *testing.T) {
	p := &Keys{m: map[string]*keyState{}}
	if u := p.utilization(); u != 0 {
		t.Fatalf("no keys: utilization %v, want 0", u)
	}
	now := nowInstant()
	p.m["busy"] = &keyState{pol: &KeyPolicy{}, users: 2, mark: now, achieved: 72, adapted: adapt.Adapted{Rate: 80}}
	p.m["recent"] = &keyState{pol: &KeyPolicy{}, lastSeen: now, mark: now, achieved: 18, adapted: adapt.Adapted{Rate: 20}}
	p.m["idle"] = &keyState{pol: &KeyPolicy{}, lastSeen: instantOf(time.Now().Add(-time.Minute)), mark: now, achieved: 0, adapted: adapt.Adapted{Rate: 100}}
	p.m["unmeasured"] = &keyState{pol: &KeyPolicy{}, users: 1, adapted: adapt.Adapted{Rate: 100}}
	if u := p.utilization(); math.Abs(u-0.9) > 1e-9 {
		t.Fatalf("utilization %v, want (72+18)/(80+20) = 0.9", u)
	}
}

// TestUtilizationByKeyClass: pacer_utilization and pacer_rate_achieved
// are summed per key class, the keys' configured rate.
func TestUtilizationByKeyClass(t *testing.T) {
	p := &Keys{m: map[string]*keyState{}}
	now := nowInstant()
	tier := func(r float64) KeyPolicy { return KeyPolicy{Limit: bucket.Limit{PerSecond: r, Burst: 10}} }
	p.m["a"] = &keyState{users: 1, mark: now, achieved: 76, adapted: adapt.Adapted{Rate: 80}, pol: new(tier(80))}
	p.m["b"] = &keyState{users: 1, mark: now, achieved: 40, adapted: adapt.Adapted{Rate: 80}, pol: new(tier(80))}
	p.m["c"] = &keyState{users: 1, mark: now, achieved: 990, adapted: adapt.Adapted{Rate: 1000}, pol: new(tier(1000))}
	got := p.byClass()
	if len(got) != 2 {
		t.Fatalf("classes %v, want 80/s and 1000/s", got)
	}
	if c := got["80/s"]; c.achieved != 116 || math.Abs(c.achievedBusy/c.allowedBusy-116.0/160) > 1e-9 {
		t.Errorf("80/s: %+v, want achieved 116, utilization 116/160", c)
	}
	if c := got["1000/s"]; c.achieved != 990 || math.Abs(c.achievedBusy/c.allowedBusy-0.99) > 1e-9 {
		t.Errorf("1000/s: %+v, want achieved 990, utilization 0.99", c)
	}
}

// TestAccountLeftNoCooldown: with no account cooldown in Redis, accountLeft
// is 0 after its refresh, not the time the read took (which made every
// slot after a refresh lapse: at 0.5/s, every slot).
func TestAccountLeftNoCooldown(t *testing.T) {
	p := &Keys{adapter: &keypacetest.Adapter{}, cfg: Config{Channel: "test"}}
	pol := KeyPolicy{Limit: bucket.Limit{PerSecond: 0.5, Burst: 1}}
	for i := range 3 {
		if left := p.accountLeft(t.Context(), "k", pol); left != 0 {
			t.Fatalf("read %d: accountLeft = %v, want 0", i, left)
		}
		a := p.accounts.of("")
		a.mu.Lock()
		a.refreshed = time.Time{} // refresh again
		a.mu.Unlock()
	}
}

// TestLeaseSizeIgnoresHeadroom: a lease is 200 ms of slots at the
// adapted rate, whatever the burst: the pacing headroom takes tokens off
// the burst, not off the lease (a lease's slots are spaced at the rate).
func TestLeaseSizeIgnoresHeadroom(t *testing.T) {
	c := &Config{}
	ceiling := bucket.Limit{PerSecond: 1000, Burst: 10}
	for _, tc := range []struct {
		lim  bucket.Limit
		want int
	}{
		{bucket.Limit{PerSecond: 1000, Burst: 5}, 200}, // headroom only: 200 ms at 1000/s
		{bucket.Limit{PerSecond: 500, Burst: 2}, 100},  // adapted to half
		{bucket.Limit{PerSecond: 80, Burst: 8}, 16},    // 200 ms at 80/s
		{bucket.Limit{PerSecond: 5, Burst: 1}, 1},      // one reservation per message
	} {
		if got := c.leaseSize(ceiling, tc.lim); got != tc.want {
			t.Errorf("leaseSize(%+v, %+v) = %d, want %d", ceiling, tc.lim, got, tc.want)
		}
	}
}

// TestKeyStateBytes bounds what one active key costs this process: n keys
// each taken up by one record the way handle does (its state read, a place
// in its lookahead gate, the record finished) hold at most
// keyStateBudget bytes of heap each, and the sweep after activeFor gives
// back all but a few bytes per key (the key map made anew included). The
// issue's bound is 1 KB of RSS per active key; the Go heap grows to about
// twice its live part between collections (GOGC 100), so live state must
// stay under about half of that.
func TestKeyStateBytes(t *testing.T) {
	const n = 20_000
	const keyStateBudget = 270 // bytes of live heap per active key (250 measured: the state, 192 B in blocks that fill 8 KiB, the key map and the key's copy)
	p := localKeys(t, nil)
	ctx := t.Context()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("2065%07d", i) // a 10-digit phone number id, as a WhatsApp key
	}
	before := keypacetest.HeapAfterGC()
	for _, k := range keys {
		st := p.keyState(k)
		lim, _ := p.limitFor(ctx, time.Now(), k, st, testLog)
		gate := st.aheadGate(aheadSenders(lim, KeyPolicy{}, time.Second, false))
		gate <- struct{}{}
		<-gate
		p.done(st)
	}
	active := keypacetest.HeapAfterGC()
	perKey := (float64(active) - float64(before)) / n
	t.Logf("%d active keys: %.0f bytes of heap per key", n, perKey)
	if perKey > keyStateBudget {
		t.Errorf("%.0f bytes of heap per active key, want <= %d", perKey, keyStateBudget)
	}

	if freed := p.Sweep(ctx, time.Now().Add(activeFor+time.Second)); freed != n {
		t.Fatalf("sweep freed %d keys, want %d", freed, n)
	}
	left := (float64(keypacetest.HeapAfterGC()) - float64(before)) / n
	t.Logf("after the sweep: %.1f bytes of heap per key still held", left)
	if left > 8 {
		t.Errorf("after the sweep %.1f bytes per key still held, want <= 8 (the key map not made anew, or state kept)", left)
	}
	runtime.KeepAlive(p)
	runtime.KeepAlive(keys)
}

// A key with no record in hand keeps no lookahead gate and no spent
// dispenser; one whose lease still holds slots not started keeps it for
// its next records.
func TestDoneTrimsTheKeyState(t *testing.T) {
	b := bucket.NewLocal(bucket.LocalConfig{})
	p := testKeys(t, b, &keypacetest.Adapter{}, nil)
	ctx := t.Context()
	lim := bucket.Limit{PerSecond: 10, Burst: 1}

	st := p.keyState("spent")
	st.aheadGate(aheadSenders(lim, KeyPolicy{}, time.Second, false))
	d := st.dispenser(ctx, p, "spent", lim, lim, 1)
	if r, err := d.Next(ctx); err != nil || !r.OK {
		t.Fatalf("Next: %+v, %v", r, err)
	}
	p.done(st)
	if st.ahead != nil || st.disp != nil {
		t.Errorf("after its last record: gate %v, dispenser %v, want both dropped", st.ahead != nil, st.disp != nil)
	}

	// Burst 1 at 10/s: a lease of 5 slots reaches 400 ms ahead.
	st = p.keyState("holding")
	d = st.dispenser(ctx, p, "holding", lim, lim, 5)
	if r, err := d.Next(ctx); err != nil || !r.OK {
		t.Fatalf("Next: %+v, %v", r, err)
	}
	p.done(st)
	if st.disp != d {
		t.Fatal("a dispenser with slots not started was dropped")
	}
	st.mu.Lock()
	st.trim(time.Now().Add(time.Second)) // every slot lapsed
	st.mu.Unlock()
	if st.disp != nil {
		t.Error("a dispenser whose slots all lapsed was kept")
	}
}

// TestKeyRates: a key's rate is its adapted limit and its ceiling its
// policy's, each the channel's until this process knows the key; parked
// records are estimated at the ceiling, so a key cut by throttles (40 of
// 80) must still report 80 there.
func TestKeyRates(t *testing.T) {
	p := localKeys(t, nil)
	if r, c := p.Rates("unknown"); r != 100 || c != 100 {
		t.Errorf("unknown key: rate %v, ceiling %v; want the channel's 100, 100", r, c)
	}
	st := p.keyState("cut")
	st.mu.Lock()
	st.limit = bucket.Limit{PerSecond: 40, Burst: 5}
	st.pol = &KeyPolicy{Limit: bucket.Limit{PerSecond: 80, Burst: 10}}
	st.mu.Unlock()
	if r, c := p.Rates("cut"); r != 40 || c != 80 {
		t.Errorf("cut key: rate %v, ceiling %v; want 40 (adapted), 80 (its policy)", r, c)
	}
}

// scriptedAdapter answers a key's refresh (RecoverAfter) with reply(n),
// n the number of the call from 0, and counts the calls; its breaker and
// pairs are empty.
type scriptedAdapter struct {
	Adapter
	mu       sync.Mutex
	calls    int
	accepted int // sends reported accepted, over all calls
	reply    func(n int, ceiling float64) adapt.Adapted
}

func (a *scriptedAdapter) RecoverAfter(_ context.Context, _, _ string, ceiling bucket.Limit, _ adapt.AIMD, accepted int) (adapt.Adapted, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.reply(a.calls, ceiling.PerSecond)
	a.calls++
	a.accepted += accepted
	return r, nil
}

func (a *scriptedAdapter) Pairs(context.Context, string, string) (map[string]adapt.Pair, error) {
	return nil, nil
}

func (a *scriptedAdapter) BreakerStatus(context.Context, string, string) (adapt.BreakerStatus, error) {
	return adapt.BreakerStatus{}, nil
}

// A key's shared state is read once per refreshEvery while it is at its
// ceiling with no throttle, and every refreshAdapting while it adapts (its
// rate below its ceiling, or a throttle's cooldown less than adaptingFor
// ago), so that every replica's accepted sends reach a throttle episode's
// estimate within a quarter of a second; its policy is read once per
// refreshEvery either way. A sender asks for the key's limit every 10 ms
// for 3 s.
func TestRefreshIntervalWhileAdapting(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		reply                   func(n int, ceiling float64) adapt.Adapted
		wantRefresh, wantPolicy int
	}{
		{"at the ceiling", func(_ int, c float64) adapt.Adapted {
			return adapt.Adapted{Rate: c, Ceiling: c, SinceDecrease: -1}
		}, 3, 3}, // at 0, 1 and 2 s
		{"below the ceiling", func(_ int, c float64) adapt.Adapted {
			return adapt.Adapted{Rate: c / 2, Ceiling: c, SinceDecrease: time.Second}
		}, 30, 3}, // every 100 ms; the policy at 0, 1 and 2 s
		{"back at the ceiling after a cooldown", func(n int, c float64) adapt.Adapted {
			if n == 0 { // a throttle of another replica: its cooldown ends at 100 ms
				return adapt.Adapted{Rate: c, Ceiling: c, SinceDecrease: -1, CooldownLeft: 100 * time.Millisecond}
			}
			return adapt.Adapted{Rate: c, Ceiling: c, SinceDecrease: -1}
		}, 21, 3}, // every 100 ms until 2 s (less than adaptingFor after 100 ms), then at 3 s
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				pol := &settablePolicy{lim: bucket.Limit{PerSecond: 40, Burst: 10}}
				a := &scriptedAdapter{reply: tc.reply}
				p := testKeys(t, bucket.NewLocal(bucket.LocalConfig{}), a, pol)
				ctx := t.Context()
				st := p.keyState("k")
				defer p.done(st)
				end := time.Now().Add(3 * time.Second)
				for time.Now().Before(end) {
					p.limitFor(ctx, time.Now(), "k", st, testLog)
					time.Sleep(10 * time.Millisecond)
				}
				a.mu.Lock()
				refreshes := a.calls
				a.mu.Unlock()
				if policyReads := pol.readCount(); refreshes != tc.wantRefresh || policyReads != tc.wantPolicy {
					t.Errorf("over 3 s: %d reads of the shared state, %d of the policy; want %d and %d",
						refreshes, policyReads, tc.wantRefresh, tc.wantPolicy)
				}
			})
		})
	}
}

// An adapting key's accepted sends are reported within refreshAdapting of
// each send even when none of its records reads its limit meanwhile (they
// read it in bunches, before waiting for their slots): each accepted send
// refreshes the key once its refresh is due. A key at its ceiling with no
// throttle is not refreshed that way. Here the key's limit is read once,
// then a send is accepted every 10 ms for 3 s.
func TestAcceptedSendsReportedWhileAdapting(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		rate                      float64 // of the ceiling
		wantRefresh, wantReported int
	}{
		{"at the ceiling", 1, 1, 0},         // only the first read; nothing reported
		{"below the ceiling", 0.5, 31, 300}, // at 0, then every 100 ms to 3 s with the sends so far
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := &scriptedAdapter{reply: func(_ int, c float64) adapt.Adapted {
					return adapt.Adapted{Rate: c * tc.rate, Ceiling: c, SinceDecrease: -1}
				}}
				p := testKeys(t, bucket.NewLocal(bucket.LocalConfig{}), a, nil)
				ctx := t.Context()
				st := p.keyState("k")
				defer p.done(st)
				p.limitFor(ctx, time.Now(), "k", st, testLog)
				end := time.Now().Add(3 * time.Second)
				for time.Now().Before(end) {
					time.Sleep(10 * time.Millisecond)
					st.accepted.Add(1)
					p.reportIfDue(ctx, time.Now(), "k", st, testLog)
				}
				a.mu.Lock()
				defer a.mu.Unlock()
				if a.calls != tc.wantRefresh || a.accepted != tc.wantReported {
					t.Errorf("over 3 s of sends: %d reads of the shared state reporting %d sends; want %d and %d",
						a.calls, a.accepted, tc.wantRefresh, tc.wantReported)
				}
			})
		})
	}
}

// A key at its ceiling holds a second of slots ahead per process; one whose
// adapted rate is below its ceiling a quarter of a second, so that a raise
// of its rate is sent within the window that judges it (with a second per
// replica, three replicas sent a raised rate 3 s late).
func TestAheadSendersWhileAdapting(t *testing.T) {
	pol := KeyPolicy{Limit: bucket.Limit{PerSecond: 80, Burst: 10}}
	for _, c := range []struct {
		lim      bucket.Limit
		adapting bool
		want     int
	}{
		{bucket.Limit{PerSecond: 80, Burst: 8}, false, 88}, // at the ceiling: 80/s x 1 s + 8
		{bucket.Limit{PerSecond: 30, Burst: 2}, true, 10},  // adapted: ceil(30/s x 0.25 s) + 2
		{bucket.Limit{PerSecond: 79, Burst: 8}, true, 28},  // just below: ceil(19.75) + 8
	} {
		if got := aheadSenders(c.lim, pol, 5*time.Second, c.adapting); got != c.want {
			t.Errorf("aheadSenders(%+v, adapting %v) under %+v = %d, want %d", c.lim, c.adapting, pol.Limit, got, c.want)
		}
	}
}
