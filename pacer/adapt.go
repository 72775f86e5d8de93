package pacer

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/channels"
	"github.com/prometheus/client_golang/prometheus"
)

// Adapter is the shared adaptive state of pacing keys (AIMD rate, breaker);
// *adapt.Adapter implements it. Methods are safe for concurrent use.
type Adapter interface {
	Throttled(ctx context.Context, channel, key string, ceiling bucket.Limit, a adapt.AIMD, hint time.Duration) (adapt.Adapted, error)
	Recover(ctx context.Context, channel, key string, ceiling bucket.Limit, a adapt.AIMD) (adapt.Adapted, error)
	BreakerAllow(ctx context.Context, channel, key string, b adapt.Breaker, owner string) (allowed, probe bool, wait time.Duration, err error)
	BreakerResult(ctx context.Context, channel, key string, b adapt.Breaker, ok bool, reason string) (adapt.BreakerState, error)
	BreakerStatus(ctx context.Context, channel, key string) (adapt.BreakerStatus, error)
}

// refreshEvery is how often a replica re-reads a key's shared state (its
// adapted rate and breaker) from Redis while it sends for that key: the
// bound on how long replicas disagree, at one or two calls per key per second.
const refreshEvery = time.Second

// activeFor is how long a key counts in the per-channel gauges after its
// last message in this process.
const activeFor = 5 * time.Minute

// keyState is this process's view of one pacing key's shared state.
type keyState struct {
	mu            sync.Mutex
	adapted       adapt.Adapted
	limit         bucket.Limit // adapted limit passed to Take
	refreshed     time.Time    // when adapted was last read from Redis
	breaker       adapt.BreakerState
	breakerUntil  time.Time
	cooldownUntil time.Time
	lastSeen      time.Time

	disp    *bucket.Dispenser // leases of this key's slots, shared by this process's senders
	dispLim bucket.Limit      // the limit disp leases under
}

// countingLeaser counts the Lease calls a Dispenser makes.
type countingLeaser struct {
	bucket.Leaser
	calls func()
}

func (c countingLeaser) Lease(ctx context.Context, channel, key string, lim bucket.Limit, n int, maxWait time.Duration) (bucket.Lease, error) {
	c.calls()
	return c.Leaser.Lease(ctx, channel, key, lim, n, maxWait)
}

// dispenser returns the key's Dispenser for lim, replacing (and returning
// the unused slots of) one made for another limit.
func (st *keyState) dispenser(ctx context.Context, p *Pacer, key string, lim bucket.Limit) *bucket.Dispenser {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.disp != nil && st.dispLim == lim {
		return st.disp
	}
	if st.disp != nil {
		st.disp.Close(ctx)
	}
	n := min(p.cfg.LeaseSize, lim.Burst)
	st.disp = bucket.NewDispenser(countingLeaser{p.bucket, func() { p.m.bucketCalls.WithLabelValues().Inc() }},
		p.cfg.Channel, key, lim, max(n, 1), p.cfg.MaxTokenWait)
	st.dispLim = lim
	return st.disp
}

// dropLease gives back the key's leased slots that have not started (after
// a throttle, so the lowered rate applies at once).
func (st *keyState) dropLease(ctx context.Context) {
	st.mu.Lock()
	d := st.disp
	st.disp = nil
	st.mu.Unlock()
	if d != nil {
		d.Close(ctx)
	}
}

type keyStates struct {
	mu sync.Mutex
	m  map[string]*keyState
}

func (p *Pacer) keyState(key string) *keyState {
	p.keys.mu.Lock()
	defer p.keys.mu.Unlock()
	st := p.keys.m[key]
	if st == nil {
		st = &keyState{limit: p.cfg.Limit, adapted: adapt.Adapted{Rate: p.cfg.Limit.PerSecond, Ceiling: p.cfg.Limit.PerSecond}}
		p.keys.m[key] = st
	}
	st.mu.Lock()
	st.lastSeen = time.Now()
	st.mu.Unlock()
	return st
}

func (st *keyState) set(a adapt.Adapted, ceiling bucket.Limit, now time.Time) {
	st.adapted = a
	st.limit = a.Limit(ceiling)
	st.refreshed = now
	if a.CooldownLeft > 0 {
		st.cooldownUntil = now.Add(a.CooldownLeft)
	}
}

// limitFor returns the adapted limit of key, re-reading the shared state
// (and raising the rate after a clean window) at most once per refreshEvery.
// A Redis error keeps the last known limit: Take will fail the same way and
// hold the message.
func (p *Pacer) limitFor(ctx context.Context, key string, st *keyState, log *slog.Logger) bucket.Limit {
	st.mu.Lock()
	defer st.mu.Unlock()
	now := time.Now()
	if now.Sub(st.refreshed) < refreshEvery {
		return st.limit
	}
	st.refreshed = now
	a, err := p.adapter.Recover(ctx, p.cfg.Channel, key, p.cfg.Limit, p.cfg.AIMD)
	if err != nil {
		return st.limit
	}
	if a.Increased {
		log.Info("clean window: rate raised", "rate", a.Rate, "ceiling", a.Ceiling)
	}
	st.set(a, p.cfg.Limit, now)
	if bs, err := p.adapter.BreakerStatus(ctx, p.cfg.Channel, key); err == nil {
		st.breaker = bs.State
		st.breakerUntil = now.Add(bs.OpenLeft)
	}
	return st.limit
}

// throttled applies a key-wide throttle: one AIMD decrease for the burst of
// throttles it belongs to, and a cooldown every replica honours. A key
// throttled again and again at its floor trips the breaker.
func (p *Pacer) throttled(ctx context.Context, key string, st *keyState, perr *channels.Error, log *slog.Logger) {
	hint := time.Duration(0)
	code := codeOf(perr)
	if perr != nil {
		hint = perr.RetryAfter
	}
	var a adapt.Adapted
	if err := p.redis(ctx, log, func() (err error) {
		a, err = p.adapter.Throttled(ctx, p.cfg.Channel, key, p.cfg.Limit, p.cfg.AIMD, hint)
		return err
	}); err != nil {
		if errors.Is(err, errRedisDown) {
			p.fallback.Cooldown(ctx, p.cfg.Channel, key, p.cfg.AIMD.CooldownFor(hint))
		}
		return
	}
	st.mu.Lock()
	st.set(a, p.cfg.Limit, time.Now())
	st.mu.Unlock()
	st.dropLease(ctx)
	if a.Decreased {
		log.Warn("throttled: rate lowered", "code", code, "rate", a.Rate, "ceiling", a.Ceiling, "cooldown", a.CooldownLeft)
	} else {
		log.Info("throttled (same burst: no further decrease)", "code", code, "rate", a.Rate, "cooldown", a.CooldownLeft)
	}
	if p.cfg.Breaker.FloorTripped(a) {
		p.breakerResult(ctx, key, st, false, "throttled at the floor: "+code, log)
	}
}

// breakerResult reports an outcome to the key's breaker.
func (p *Pacer) breakerResult(ctx context.Context, key string, st *keyState, ok bool, reason string, log *slog.Logger) {
	var state adapt.BreakerState
	if err := p.redis(ctx, log, func() (err error) {
		state, err = p.adapter.BreakerResult(ctx, p.cfg.Channel, key, p.cfg.Breaker, ok, reason)
		return err
	}); err != nil {
		return
	}
	st.mu.Lock()
	was := st.breaker
	st.breaker = state
	if state != adapt.BreakerClosed {
		st.breakerUntil = time.Now().Add(p.cfg.Breaker.OpenFor)
	}
	st.mu.Unlock()
	switch {
	case state == adapt.BreakerOpen && was != adapt.BreakerOpen:
		log.Error("breaker open: the provider refuses this pacing key; its messages wait, none is dropped", "reason", reason)
	case state == adapt.BreakerClosed && was != adapt.BreakerClosed:
		log.Info("breaker closed: the probe succeeded")
	}
}

// breakerGate asks the breaker before a send when this process believes it
// may be open. It returns allowed, whether this send is the half-open probe,
// and how long to wait when not allowed; ok is false when ctx ended.
func (p *Pacer) breakerGate(ctx context.Context, key string, st *keyState, log *slog.Logger) (allowed, probe bool, wait time.Duration, ok bool) {
	st.mu.Lock()
	closed := st.breaker == adapt.BreakerClosed
	st.mu.Unlock()
	if closed {
		return true, false, 0, true
	}
	if err := p.redis(ctx, log, func() (err error) {
		allowed, probe, wait, err = p.adapter.BreakerAllow(ctx, p.cfg.Channel, key, p.cfg.Breaker, p.cfg.Owner)
		return err
	}); err != nil {
		if errors.Is(err, errRedisDown) {
			return true, false, 0, true // no shared breaker without Redis
		}
		return false, false, 0, false
	}
	if allowed && !probe {
		st.mu.Lock()
		st.breaker = adapt.BreakerClosed
		st.mu.Unlock()
	}
	return allowed, probe, wait, true
}

// registerKeyGauges adds the per-channel gauges computed from the keys this
// process sent for in the last activeFor.
func (p *Pacer) keyGauges() []prometheus.Collector {
	sum := func(f func(st *keyState, now time.Time) float64) func() float64 {
		return func() float64 {
			now := time.Now()
			p.keys.mu.Lock()
			defer p.keys.mu.Unlock()
			total := 0.0
			for k, st := range p.keys.m {
				st.mu.Lock()
				if now.Sub(st.lastSeen) > activeFor {
					st.mu.Unlock()
					delete(p.keys.m, k)
					continue
				}
				total += f(st, now)
				st.mu.Unlock()
			}
			return total
		}
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	g := func(name, help string, f func(st *keyState, now time.Time) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "pacer", Name: name, Help: help}, sum(f))
	}
	return []prometheus.Collector{
		g("keys_active", "Pacing keys this process sent for in the last 5 minutes.",
			func(*keyState, time.Time) float64 { return 1 }),
		g("rate_current", "Adapted rate summed over active pacing keys, in messages per second.",
			func(st *keyState, _ time.Time) float64 { return st.limit.PerSecond }),
		g("rate_configured", "Configured rate (the AIMD ceiling) summed over active pacing keys, in messages per second.",
			func(*keyState, time.Time) float64 { return p.cfg.Limit.PerSecond }),
		g("keys_cooldown", "Active pacing keys in a cooldown.",
			func(st *keyState, now time.Time) float64 { return b(st.cooldownUntil.After(now)) }),
		g("keys_at_floor", "Active pacing keys whose adapted rate is at the AIMD floor.",
			func(st *keyState, _ time.Time) float64 { return b(st.adapted.AtFloor) }),
		g("breakers_open", "Active pacing keys whose breaker is open or half-open.",
			func(st *keyState, _ time.Time) float64 { return b(st.breaker != adapt.BreakerClosed) }),
	}
}
