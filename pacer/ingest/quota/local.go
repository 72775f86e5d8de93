package quota

import (
	"context"
	"math"
	"sync"
	"time"
)

// Local answers [Limiter]'s questions in-process, for
// PACER_REDIS_FAILURE=local: when Redis is unreachable each gateway replica
// enforces its share of every tier (a bucket's rate and burst, a window's
// max, divided by Replicas; at least 1) on its own clock, and remembers ids
// and Idempotency-Keys for this process only, so a retry that reaches
// another replica while Redis is down may be produced twice. Nothing is
// written back when Redis returns.
//
// The zero Local is not usable: build it with [NewLocal]. A Local is safe
// for concurrent use.
type Local struct {
	replicas int
	now      func() time.Time

	mu      sync.Mutex
	buckets map[string]*localBucket
	windows map[string]*localWindow
	records map[string]localRecord
	calls   int
}

type localBucket struct {
	tokens float64
	ts     time.Time
}

type localWindow struct {
	start     time.Time
	cur, prev int
}

type localRecord struct {
	value   string
	expires time.Time
}

// NewLocal returns a Local granting 1/replicas of every tier (replicas < 1
// counts as 1).
func NewLocal(replicas int) *Local {
	return &Local{replicas: max(replicas, 1), now: time.Now,
		buckets: map[string]*localBucket{}, windows: map[string]*localWindow{}, records: map[string]localRecord{}}
}

// Share returns t with its limit divided as this Local applies it.
func (l *Local) Share(t Tier) Tier {
	if t.Bucket != nil {
		b := *t.Bucket
		b.PerSecond /= float64(l.replicas)
		b.Burst = max(b.Burst/l.replicas, 1)
		t.Bucket = &b
	}
	if t.Window != nil {
		w := *t.Window
		w.Max = max(w.Max/l.replicas, 1)
		t.Window = &w
	}
	return t
}

// Take is [Limiter.Take] in-process, with each tier's share.
func (l *Local) Take(_ context.Context, r Request) (Result, error) {
	if err := r.validate(); err != nil {
		return Result{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.sweep(now)
	var stored *localRecord
	if r.IdemKey != "" {
		if rec, ok := l.records[r.IdemKey]; ok && now.Before(rec.expires) {
			stored = &rec
		}
	}
	res := Result{Refused: -1, Tiers: make([]TierState, len(r.Tiers)), IDs: make([]IDState, len(r.IDs)), Token: newToken()}
	for k, id := range r.IDs {
		rec, ok := l.records[id]
		switch {
		case !ok || !now.Before(rec.expires):
			res.Counted++
		case len(rec.value) > 2 && rec.value[:2] == "p:":
			res.IDs[k] = IDPending
		default:
			res.IDs[k] = IDDone
		}
	}
	type pending struct {
		b    *localBucket
		w    *localWindow
		cost int
		// A window's max (this process's share) and the time elapsed in
		// its fixed window, for its Reset after the grant.
		max     int
		elapsed time.Duration
	}
	apply := make([]pending, len(r.Tiers))
	var longest time.Duration
	for i, t := range r.Tiers {
		t = l.Share(t)
		cost := 1
		if t.Unit == PerMessage {
			cost = res.Counted
		}
		var st TierState
		if t.Bucket != nil {
			rate, burst := t.Bucket.PerSecond, float64(t.Bucket.Burst)
			b := l.buckets[t.Key]
			if b == nil {
				b = &localBucket{tokens: burst, ts: now}
			}
			tokens := math.Min(burst, b.tokens+now.Sub(b.ts).Seconds()*rate)
			b = &localBucket{tokens: tokens, ts: now}
			switch {
			case cost > t.Bucket.Burst:
				st.Wait = -1
			case tokens < float64(cost):
				st.Wait = time.Duration(math.Ceil((float64(cost)-tokens)/rate*1e6)) * time.Microsecond
			}
			apply[i] = pending{b: b, cost: cost}
			st.Remaining = int(math.Floor(tokens))
			if tokens < burst {
				st.Reset = time.Duration(math.Ceil((math.Floor(tokens)+1-tokens)/rate*1e6)) * time.Microsecond
			}
		} else {
			period := t.Window.Period
			ws := now.Truncate(period)
			w := l.windows[t.Key]
			nw := &localWindow{start: ws}
			if w != nil && !w.start.Before(ws) {
				nw.cur, nw.prev = w.cur, w.prev
			} else if w != nil && w.start.Equal(ws.Add(-period)) {
				nw.prev = w.cur
			}
			elapsed := now.Sub(ws)
			est := localCount(nw.cur, nw.prev, period, elapsed)
			switch {
			case cost > t.Window.Max:
				st.Wait = -1
			case cost > 0 && est+cost > t.Window.Max:
				st.Wait = localWindowWait(nw.cur, nw.prev, cost, t.Window.Max, period, elapsed)
			}
			apply[i] = pending{w: nw, cost: cost, max: t.Window.Max, elapsed: elapsed}
			st.Remaining = max(t.Window.Max-est, 0)
			st.Reset = localWindowReset(nw.cur, nw.prev, t.Window.Max, period, elapsed)
		}
		if st.Wait != 0 && (res.Refused < 0 || st.Wait == -1 || (longest != -1 && st.Wait > longest)) {
			res.Refused, longest = i, st.Wait
		}
		res.Tiers[i] = st
	}
	if stored != nil {
		res.Known, res.Stored, res.Refused = true, stored.value, -1
		return res, nil
	}
	res.Granted = res.Refused < 0
	if !res.Granted {
		return res, nil
	}
	for i, t := range r.Tiers {
		p := apply[i]
		if p.b != nil {
			p.b.tokens -= float64(p.cost)
			l.buckets[t.Key] = p.b
			res.Tiers[i].Remaining = int(math.Floor(p.b.tokens))
		} else {
			p.w.cur += p.cost
			l.windows[t.Key] = p.w
			res.Tiers[i].Remaining = max(res.Tiers[i].Remaining-p.cost, 0)
			res.Tiers[i].Reset = localWindowReset(p.w.cur, p.w.prev, p.max, t.Window.Period, p.elapsed)
		}
	}
	claim := localRecord{value: "p:" + res.Token, expires: now.Add(r.ClaimTTL)}
	if r.IdemKey != "" {
		l.records[r.IdemKey] = claim
	}
	for k, id := range r.IDs {
		if res.IDs[k] == IDNew {
			l.records[id] = claim
		}
	}
	return res, nil
}

// Finish is [Limiter.Finish] in-process.
func (l *Local) Finish(_ context.Context, f Finish) error {
	if f.DoneTTL < time.Millisecond || f.Token == "" {
		return ErrInvalid
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	claim := "p:" + f.Token
	release := func(k string) {
		if l.records[k].value == claim {
			delete(l.records, k)
		}
	}
	if f.IdemKey != "" {
		if f.Stored != "" {
			l.records[f.IdemKey] = localRecord{value: f.Stored, expires: now.Add(f.DoneTTL)}
		} else {
			release(f.IdemKey)
		}
	}
	for _, k := range f.Done {
		l.records[k] = localRecord{value: "d", expires: now.Add(f.DoneTTL)}
	}
	for _, k := range f.Release {
		release(k)
	}
	return nil
}

// sweep drops expired records and idle state every 4096 calls, so memory
// follows the keys in use.
func (l *Local) sweep(now time.Time) {
	if l.calls++; l.calls < 4096 {
		return
	}
	l.calls = 0
	for k, r := range l.records {
		if !now.Before(r.expires) {
			delete(l.records, k)
		}
	}
	for k, b := range l.buckets {
		if now.Sub(b.ts) > time.Hour {
			delete(l.buckets, k)
		}
	}
	for k, w := range l.windows {
		if now.Sub(w.start) > 400*24*time.Hour {
			delete(l.windows, k)
		}
	}
}

// localCount is the sliding count e into a fixed window of period holding
// c, with p in the previous one (window_read.lua's window_count).
func localCount(c, p int, period, e time.Duration) int {
	return c + int(math.Ceil(float64(p)*float64(period-e)/float64(period)))
}

// localWindowWait is how long until n more events fit in a window of limit
// per period holding cur and prev at elapsed, if nothing else is counted
// (1 <= n <= limit), at least 1 µs: window_read.lua's window_wait, in
// whole microseconds as it reckons them.
func localWindowWait(cur, prev, n, limit int, period, elapsed time.Duration) time.Duration {
	us := func(d time.Duration) float64 { return float64(d / time.Microsecond) }
	pd, el := us(period), us(elapsed)
	count := func(c, p int, e float64) float64 { return float64(c) + math.Ceil(float64(p)*(pd-e)/pd) }
	// need is the fewest µs e into a window (0 <= e <= period) at which
	// count(c, p, e) + n <= limit; false if even e = period is too early.
	need := func(c, p int) (float64, bool) {
		room := limit - n - c
		if room < 0 {
			return 0, false
		}
		if p <= room {
			return 0, true
		}
		e := pd - math.Floor(float64(room)*pd/float64(p))
		for e > 0 && count(c, p, e-1)+float64(n) <= float64(limit) {
			e--
		}
		for e <= pd && count(c, p, e)+float64(n) > float64(limit) {
			e++
		}
		return e, true
	}
	var wait float64
	if e, ok := need(cur, prev); ok && e < pd {
		wait = e - el
	} else {
		e, ok := need(0, cur) // in the next window cur becomes prev
		if !ok {
			e = pd
		}
		wait = pd - el + e
	}
	return time.Duration(max(wait, 1)) * time.Microsecond
}

// localWindowReset is a window's Reset: how long until one unit more than
// it has left fits (0 when it counts nothing), as quota.lua answers it.
func localWindowReset(cur, prev, limit int, period, elapsed time.Duration) time.Duration {
	est := localCount(cur, prev, period, elapsed)
	if est <= 0 {
		return 0
	}
	return localWindowWait(cur, prev, max(limit-est, 0)+1, limit, period, elapsed)
}
