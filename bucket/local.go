package bucket

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/pacerhq/pacer/internal/wire"
)

// LocalConfig configures a [Local]. The zero value means all defaults.
type LocalConfig struct {
	// Replicas is the number of pacer replicas expected to fall back to
	// Local at the same time. Each Local grants 1/Replicas of every limit:
	// PerSecond / Replicas, and Burst / Replicas rounded down (at least 1,
	// and at least the cost of the request at hand). Default 1.
	Replicas int
}

// Local is an in-process token bucket per pacing key with the semantics of
// [Limiter] (Reserve, ReserveMulti, Lease, Return, Cooldown, State), for PACER_REDIS_FAILURE=local: when Redis is unreachable, each
// replica paces on its own at its share of the limit instead of stopping.
// It is never the default, since replicas that disagree about how many of
// them run can together exceed a limit: that is the price of sending
// without Redis, and the operator chooses it.
//
// The maths are those of the Lua scripts, ported line for line (tokens in
// millionths, time in whole microseconds, the same float64 rounding), on
// the process's monotonic clock instead of Redis TIME: a Local answers what
// a Limiter would for the same calls at the same instants, except that
// limits are divided by [LocalConfig].Replicas. Nothing is shared with
// Redis: a Local starts with every bucket full, and what it granted is not
// written back when Redis returns. Buckets that have refilled to full, and
// cooldowns that have ended, are dropped as calls go by, so memory follows
// the keys in use.
//
// Methods never return Redis errors; they return an error wrapping
// [ErrInvalidLimit] for the same bad limits, costs and requests as
// Limiter's, and ctx is accepted only to match Limiter's methods. A Local
// is safe for concurrent use.
type Local struct {
	replicas int
	now      func() time.Time // time.Now; tests set their own
	epoch    time.Time        // µs of the local clock count from here

	mu        sync.Mutex
	buckets   map[string]*localBucket
	cooldowns map[string]int64 // end, µs since epoch
	calls     int              // since the last sweep
	swept     int              // entries left by the last sweep
}

// localBucket is a bucket hash: utokens and ts_us, plus the limit of its
// last write so that sweep knows when it is full.
type localBucket struct {
	u, rate, burstU float64
	ts              int64
}

// NewLocal returns an empty Local.
func NewLocal(cfg LocalConfig) *Local {
	return newLocal(cfg, time.Now)
}

func newLocal(cfg LocalConfig, now func() time.Time) *Local {
	if cfg.Replicas < 1 {
		cfg.Replicas = 1
	}
	return &Local{
		replicas:  cfg.Replicas,
		now:       now,
		epoch:     now(),
		buckets:   make(map[string]*localBucket),
		cooldowns: make(map[string]int64),
	}
}

// share returns this Local's part of lim for a request of cost tokens.
func (l *Local) share(lim Limit, cost int) Limit {
	if l.replicas == 1 {
		return lim
	}
	return Limit{PerSecond: lim.PerSecond / float64(l.replicas), Burst: max(lim.Burst/l.replicas, 1, cost)}
}

// clock returns the local time now and the same instant in µs since epoch.
func (l *Local) clock() (time.Time, int64) {
	t := l.now()
	return t, int64(t.Sub(l.epoch) / time.Microsecond)
}

// localKey names a bucket and its cooldown (in their two maps): the pacing
// key's own for sub "", else a sub-bucket's.
func localKey(channel, key, sub string) string {
	if sub == "" {
		return channel + "\x00" + key
	}
	return channel + "\x00" + key + "\x00" + sub
}

// Reserve is [Limiter.Reserve] on this process's buckets.
func (l *Local) Reserve(ctx context.Context, channel, key string, lim Limit, cost int, maxWait time.Duration) (Reservation, error) {
	return l.ReserveMulti(ctx, channel, key, []Request{{Limit: lim, Cost: cost}}, maxWait)
}

// ReserveMulti is [Limiter.ReserveMulti] on this process's buckets.
func (l *Local) ReserveMulti(ctx context.Context, channel, key string, reqs []Request, maxWait time.Duration) (Reservation, error) {
	t, rep, err := l.reserve(channel, key, reqs, 1, waitUS(maxWait))
	if err != nil {
		return Reservation{}, err
	}
	return rep.reservation(t), nil
}

// Lease is [Limiter.Lease] on this process's buckets.
func (l *Local) Lease(ctx context.Context, channel, key string, lim Limit, n int, maxWait time.Duration) (Lease, error) {
	if err := validateLease(lim, n); err != nil {
		return Lease{}, err
	}
	t, rep, err := l.reserve(channel, key, []Request{{Limit: lim, Cost: 1}}, int64(n), waitUS(maxWait))
	if err != nil {
		return Lease{}, err
	}
	return rep.lease(t, &leaseSource{channel: channel, key: key, lim: l.share(lim, 1), local: l}), nil
}

// Return is [Limiter.Return] for a lease of this Local.
func (l *Local) Return(ctx context.Context, lease Lease, used int) (int, error) {
	s, used, err := lease.returning(l, used)
	if s == nil {
		return 0, err
	}
	_, now := l.clock()
	l.mu.Lock()
	defer l.mu.Unlock()
	// lease_return.lua
	if now < s.now0 {
		return 0, nil
	}
	rate := s.lim.PerSecond
	burstU := float64(s.lim.Burst) * 1e6
	k := localKey(s.channel, s.key, "")
	// Only while the lease is the bucket's last write (see lease_return.lua).
	if b := l.buckets[k]; b == nil || b.ts != s.now0 || b.u != float64(s.u0)-float64(lease.Granted)*1e6 {
		return 0, nil
	}
	started := slotsStarted(float64(s.u0), s.now0, now, rate, 1e6)
	from := float64(used)
	if started > from {
		from = started
	}
	r := float64(lease.Granted) - from
	if r <= 0 {
		return 0, nil
	}
	u, _ := l.buckets[k].read(now, rate, burstU)
	u = math.Min(u+r*1e6, burstU)
	l.store(k, u, now, rate, burstU)
	return int(r), nil
}

// Cooldown is [Limiter.Cooldown] on this process: the key refuses every call
// for at least d (rounded up to the millisecond), keeping a longer
// cooldown. d <= 0 does nothing.
func (l *Local) Cooldown(ctx context.Context, channel, key string, d time.Duration) error {
	l.cooldown(localKey(channel, key, ""), d)
	return nil
}

func (l *Local) cooldown(k string, d time.Duration) {
	if d <= 0 {
		return
	}
	ms := cooldownMS(d)
	_, now := l.clock()
	end := int64(math.MaxInt64)
	if ms < (math.MaxInt64-now)/1000 {
		end = now + ms*1000
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur, ok := l.cooldowns[k]; !ok || cur < end {
		l.cooldowns[k] = end
	}
}

// State is [Limiter.State] on this process's buckets, for the share of lim
// that this Local grants.
func (l *Local) State(ctx context.Context, channel, key string, lim Limit) (State, error) {
	if err := lim.Validate(); err != nil {
		return State{}, err
	}
	lim = l.share(lim, 1)
	_, now := l.clock()
	k := localKey(channel, key, "")
	l.mu.Lock()
	defer l.mu.Unlock()
	u, _ := l.buckets[k].read(now, lim.PerSecond, float64(lim.Burst)*1e6)
	var left time.Duration
	if end, ok := l.cooldowns[k]; ok && end > now {
		left = wire.Duration((end-now+999)/1000, time.Millisecond)
	}
	return State{Tokens: u / 1e6, CooldownLeft: left}, nil
}

// reserve is reserve.lua on this process's buckets: up to n slots within
// maxWait µs of now for reqs of (channel, key).
func (l *Local) reserve(channel, key string, reqs []Request, n, maxWait int64) (time.Time, reserveReply, error) {
	if len(reqs) == 0 || len(reqs) > maxRequests {
		return time.Time{}, reserveReply{}, fmt.Errorf("%w: %d buckets, want 1 to %d", ErrInvalidLimit, len(reqs), maxRequests)
	}
	nb := len(reqs)
	keys := make([]string, nb) // in l.buckets and l.cooldowns
	rates := make([]float64, nb)
	bursts := make([]float64, nb)
	costs := make([]float64, nb)
	for i, r := range reqs {
		if err := validateCost(r.Limit, r.Cost); err != nil {
			return time.Time{}, reserveReply{}, err
		}
		for _, o := range reqs[:i] {
			if o.Sub == r.Sub {
				return time.Time{}, reserveReply{}, fmt.Errorf("%w: bucket %q asked for twice", ErrInvalidLimit, r.Sub)
			}
		}
		keys[i] = localKey(channel, key, r.Sub)
		lim := l.share(r.Limit, r.Cost)
		rates[i], bursts[i], costs[i] = lim.PerSecond, float64(lim.Burst)*1e6, float64(r.Cost)*1e6
	}
	t, now := l.clock()

	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	us := make([]float64, nb)
	for i := range nb {
		us[i], _ = l.buckets[keys[i]].read(now, rates[i], bursts[i])
	}
	remaining := func(vs []float64) int64 {
		r := int64(math.MaxInt64)
		for _, v := range vs {
			w := int64(0)
			if v > 0 {
				w = int64(math.Floor(v / 1e6))
			}
			r = min(r, w)
		}
		return r
	}
	var cd int64
	for _, k := range keys {
		if end, ok := l.cooldowns[k]; ok && end > now {
			cd = max(cd, end-now)
		}
	}
	rep := reserveReply{u0: int64(us[0]), now: now}
	if cd > 0 {
		rep.wait, rep.cooldown, rep.remaining = cd, 1, remaining(us)
		return t, rep, nil
	}
	refuse := func(wait int64) (time.Time, reserveReply, error) {
		rep.wait, rep.remaining = max(wait, 1), remaining(us)
		return t, rep, nil
	}
	mw := float64(maxWait)
	if nb == 1 {
		u, rate, costU := us[0], rates[0], costs[0]
		first := slotUS(costU-u, rate)
		g := math.Floor((u + refill(mw, rate)) / costU)
		g = min(g, float64(n), math.Floor((u+maxDebtU)/costU))
		if g < 1 || first > maxWait {
			return refuse(first - maxWait)
		}
		v := u - g*costU
		l.store(keys[0], v, now, rate, bursts[0])
		rep.granted, rep.delay, rep.remaining = int64(g), first, remaining([]float64{v})
		return t, rep, nil
	}
	var s int64
	for i := range nb {
		s = max(s, slotUS(costs[i]-us[i], rates[i]))
	}
	if s > maxWait {
		return refuse(s - maxWait)
	}
	vs := make([]float64, nb)
	for i := range nb {
		r := refill(float64(s), rates[i])
		c := math.Min(us[i]+r, bursts[i])
		vs[i] = c - costs[i] - r
		if vs[i] < -maxDebtU {
			return refuse(1)
		}
	}
	for i := range nb {
		l.store(keys[i], vs[i], now, rates[i], bursts[i])
	}
	rep.granted, rep.delay, rep.remaining = 1, s, remaining(vs)
	return t, rep, nil
}

// read is read() of the scripts: the tokens at now in millionths (a
// missing bucket is full) and whether the bucket is stamped after now. The
// monotonic clock never steps back, but the maths stay those of Redis.
func (b *localBucket) read(now int64, rate, burstU float64) (float64, bool) {
	if b == nil {
		return burstU, false
	}
	return tokensAt(b.u, b.ts, now, rate, burstU), b.ts > now
}

func (l *Local) store(k string, v float64, now int64, rate, burstU float64) {
	b := l.buckets[k]
	if b == nil {
		b = new(localBucket)
		l.buckets[k] = b
	}
	*b = localBucket{u: v, ts: now, rate: rate, burstU: burstU}
}

// sweep drops full buckets and ended cooldowns every max(1024, n) calls,
// n the entries left by the last sweep, so each call pays O(1) on average
// and the maps at most double between sweeps.
func (l *Local) sweep(now int64) {
	l.calls++
	if l.calls < max(1024, l.swept) {
		return
	}
	for k, b := range l.buckets {
		if u, _ := b.read(now, b.rate, b.burstU); u >= b.burstU {
			delete(l.buckets, k)
		}
	}
	for k, end := range l.cooldowns {
		if end <= now {
			delete(l.cooldowns, k)
		}
	}
	l.calls, l.swept = 0, len(l.buckets)+len(l.cooldowns)
}
