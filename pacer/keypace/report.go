package keypace

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/channels"
)

// Result is the provider's answer to one send.
type Result struct {
	Class channels.Class
	Err   error  // the send's error, nil when accepted
	Cred  uint64 // Config.CredentialVersion of the key when the request left
}

// Report takes the provider's answer to the record's send: to the
// breaker when the send was its probe; an accepted send to the key's
// counters (and its report to the shared state when due, see
// reportIfDue); a throttle to the AIMD and cooldowns of its scope (the
// key, the account, the pair: see throttled, accountThrottled,
// pairThrottled); a halt to the breaker, which opens. It returns Pass but
// for a throttle or a halt: Again, or for a pair throttle Wait (then
// again), Requeue ("pair-throttle") or Stop. now is the time of the
// answer.
func (k *Key) Report(ctx context.Context, now time.Time, r Result, log *slog.Logger) Verdict {
	p := k.ks
	var perr *channels.Error
	errors.As(r.Err, &perr)
	if k.probe {
		p.breakerResult(ctx, k.name, k.st, k.pol, r.Class == channels.Success || r.Class == channels.Permanent,
			"probe answered "+r.Class.String()+" "+codeOf(perr), log)
	}
	switch r.Class {
	case channels.Success:
		k.st.accepted.Add(1)
		k.st.delivered.Add(1)
		p.reportIfDue(ctx, now, k.name, k.st, log)
	case channels.Throttle:
		if perr != nil && perr.Scope == channels.ScopePair {
			return k.pairThrottled(ctx, perr, log)
		}
		if perr != nil && perr.Scope == channels.ScopeAccount {
			p.accountThrottled(ctx, k.name, k.pol, perr, log)
			return Verdict{Kind: Again} // the account gate holds it
		}
		p.throttled(ctx, k.name, k.st, k.pol, k.paced, perr, log)
		return Verdict{Kind: Again}
	case channels.Transient:
		if perr != nil && perr.Status >= 500 {
			p.serverError(ctx, k.name, k.st, k.pol, log)
		}
	case channels.Halt:
		log.Error("provider refuses this pacing key (credentials or account); opening its breaker, nothing dropped",
			"code", codeOf(perr), "err", r.Err)
		k.st.haltedWith(r.Cred)
		p.breakerResult(ctx, k.name, k.st, k.pol, false, "halt: "+codeOf(perr), log)
		return Verdict{Kind: Again}
	}
	return Verdict{}
}

func codeOf(e *channels.Error) string {
	if e == nil || e.Code == "" {
		return "none"
	}
	return e.Code
}

// throttled applies a key-wide throttle: one AIMD decrease for the burst of
// throttles it belongs to, and a cooldown every replica honours. A key
// throttled again and again at its floor trips the breaker.
// paced is the adapted rate the throttled send was paced at (see
// [adapt.Adapter.ThrottledAfter]).
func (p *Keys) throttled(ctx context.Context, key string, st *keyState, pol KeyPolicy, paced float64, perr *channels.Error, log *slog.Logger) {
	hint := time.Duration(0)
	code := codeOf(perr)
	if perr != nil {
		hint = perr.RetryAfter
	}
	var a adapt.Adapted
	n := st.accepted.Swap(0)
	if err := p.redis(ctx, log, func() (err error) {
		a, err = p.adapter.ThrottledAfter(ctx, p.cfg.Channel, key, pol.Limit, pol.AIMD, hint, int(n), paced)
		return err
	}); err != nil {
		st.accepted.Add(n)
		if errors.Is(err, ErrRedisDown) {
			p.fallback.Cooldown(ctx, p.cfg.Channel, key, pol.AIMD.CooldownFor(hint))
		}
		return
	}
	st.mu.Lock()
	st.set(a, pol.Limit, time.Now())
	st.mu.Unlock()
	st.dropLease(ctx)
	if a.Decreased {
		log.Warn("throttled: rate lowered", "code", code, "rate", a.Rate, "ceiling", a.Ceiling, "cooldown", a.CooldownLeft)
	} else {
		log.Info("throttled (a lone throttle or one of the same burst: no decrease)", "code", code, "rate", a.Rate, "cooldown", a.CooldownLeft)
	}
	if pol.Breaker.FloorTripped(a) {
		p.breakerResult(ctx, key, st, pol, false, "throttled at the floor: "+code, log)
	}
}

// serverErrorer is an Adapter that counts a key's server errors and
// lowers its rate on a burst of them, as [adapt.Adapter.ServerError] does.
type serverErrorer interface {
	ServerError(ctx context.Context, channel, key string, ceiling bucket.Limit, a adapt.AIMD) (adapt.Adapted, error)
}

// serverError reports a server error (HTTP 5xx) of key to the shared
// adaptive state: a burst of them, counted across replicas, lowers the
// key's rate once by a mild factor ([adapt.AIMD].ServerErrors). The
// message itself is retried after its retry delay by the caller. Without
// Redis (or an Adapter that does not count them) nothing changes.
func (p *Keys) serverError(ctx context.Context, key string, st *keyState, pol KeyPolicy, log *slog.Logger) {
	se, ok := p.adapter.(serverErrorer)
	if !ok || pol.AIMD.ServerErrors < 0 {
		return
	}
	var a adapt.Adapted
	if err := p.redis(ctx, log, func() (err error) {
		a, err = se.ServerError(ctx, p.cfg.Channel, key, pol.Limit, pol.AIMD)
		return err
	}); err != nil || !a.Decreased {
		return
	}
	st.mu.Lock()
	st.set(a, pol.Limit, time.Now())
	st.mu.Unlock()
	st.dropLease(ctx)
	log.Warn("burst of server errors: rate lowered", "rate", a.Rate, "ceiling", a.Ceiling)
}

// accountThrottled applies an account-scoped throttle of key: a cooldown
// of every key of its account (those sharing its credential, see
// [Config].AccountOf), shared through Redis, of the provider's hint clamped
// to the key's cooldown bounds (the WhatsApp adapter asks for a minute: the
// budget is a rolling hour). Other accounts of the channel go on. It
// returns the cooldown.
func (p *Keys) accountThrottled(ctx context.Context, key string, pol KeyPolicy, perr *channels.Error, log *slog.Logger) time.Duration {
	hint := time.Duration(0)
	if perr != nil {
		hint = perr.RetryAfter
	}
	d := pol.AIMD.CooldownFor(hint)
	account := p.accountOf(key)
	if err := p.redis(ctx, log, func() error { return p.bucket.Cooldown(ctx, p.cfg.Channel, accountKey(account), d) }); err != nil &&
		!errors.Is(err, ErrRedisDown) {
		return d
	}
	a := p.accounts.of(account)
	a.mu.Lock()
	a.until = maxTime(a.until, time.Now().Add(d))
	a.mu.Unlock()
	log.Warn("account throttled: every key sharing its credential cools down", "code", codeOf(perr), "cooldown", d)
	return d
}

// pairThrottled holds one message whose recipient alone is limited
// (WhatsApp 131056 asks for 4^n s between tries), not the key.
func (k *Key) pairThrottled(ctx context.Context, perr *channels.Error, log *slog.Logger) Verdict {
	p := k.ks
	k.pairThrottles++
	// The pair's first cooldown: the provider's hint, or one token interval
	// of the recipient bucket, at least a second; later ones a minute or
	// more (adapt.PairAgain), shared by every replica through Redis.
	base := max(perr.RetryAfter, time.Second)
	if rl := k.pol.RecipientLimit; rl.PerSecond > 0 {
		base = max(base, time.Duration(float64(time.Second)/rl.PerSecond))
	}
	_, maxCD := k.pol.AIMD.CooldownBounds()
	base = min(base, maxCD)
	// The pair's rate after its first throttle: the configured recipient
	// rate, else one message per base cooldown; halved by each later
	// throttle (adapt.Adapter.PairThrottled).
	rate := 1 / base.Seconds()
	if rl := k.pol.RecipientLimit; rl.PerSecond > 0 {
		rate = min(rate, rl.PerSecond)
	}
	sub := recipientSub(k.to)
	// Held in this process before Redis is written: a message of the pair
	// this process handles during the write (one that read Redis after it,
	// or none) waits too, rather than meet the provider's refusal again.
	k.st.setPair(sub, base, 0)
	var pr adapt.Pair
	if err := p.redis(ctx, log, func() (err error) {
		pr, err = p.adapter.PairThrottled(ctx, p.cfg.Channel, k.name, sub, base, maxCD, rate)
		return err
	}); err != nil {
		if !errors.Is(err, ErrRedisDown) {
			return Verdict{Kind: Stop}
		}
		pr.Left = time.Second << min(2*(k.pairThrottles-1), 12) // without Redis: this message's own 4^n s
	}
	d := pr.Left
	k.st.setPair(sub, d, pr.Rate)
	log.Info("pair throttled; this recipient waits, the key's others do not", "code", codeOf(perr), "after", d,
		"pair_rate", pr.Rate, "pair_throttles", pr.Throttles)
	if d > p.cfg.MaxTokenWait {
		return requeue("pair-throttle", d)
	}
	return Verdict{Kind: Wait, Wait: d}
}

// breakerResult reports an outcome to the key's breaker.
func (p *Keys) breakerResult(ctx context.Context, key string, st *keyState, pol KeyPolicy, ok bool, reason string, log *slog.Logger) {
	// A halt opens the breaker (breaker_result.lua): this process's other
	// senders of the key stop at once (breakerShut), not a Redis round
	// trip later.
	st.mu.Lock()
	was := st.breaker
	if !ok && was == adapt.BreakerClosed {
		st.breaker = adapt.BreakerOpen
	}
	st.mu.Unlock()
	var state adapt.BreakerState
	if err := p.redis(ctx, log, func() (err error) {
		state, err = p.adapter.BreakerResult(ctx, p.cfg.Channel, key, pol.Breaker, ok, reason)
		return err
	}); err != nil {
		return
	}
	st.mu.Lock()
	st.breaker = state
	st.mu.Unlock()
	switch {
	case state == adapt.BreakerOpen && was != adapt.BreakerOpen:
		log.Error("breaker open: the provider refuses this pacing key; its messages wait, none is dropped", "reason", reason)
	case state == adapt.BreakerClosed && was != adapt.BreakerClosed:
		log.Info("breaker closed: the probe succeeded")
	}
}
