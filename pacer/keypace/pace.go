package keypace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/pacer/control"
)

// This file holds a key's two adaptive verbs and the state they share:
// Gate, asked before a slot (the key's limit and policy refreshed from
// Redis, its breaker, the cooldowns of its account and pair), and Report,
// told the provider's answer after the send (the AIMD, the cooldowns of
// the answer's scope, the breaker). The pair state (each recipient's
// cooldown and learned rate) lives here too. Slot, the third verb, is in
// slot.go.

// accountKey is the pacing key under which the cooldown of an account
// lives in Redis (WhatsApp 80007 and 4 limit the business account or the
// app: every number behind the same credential). account is the account's
// name ([Config].AccountOf): "" for the channel's single credential, whose
// key is "@account". "@" starts no provider's key.
func accountKey(account string) string {
	if account == "" {
		return "@account"
	}
	return "@account:" + account
}

// accountState is this process's view of one account's cooldown, re-read
// from Redis at most once per refreshEvery.
type accountState struct {
	mu        sync.Mutex
	until     time.Time
	refreshed time.Time
}

// accounts is this process's view of the cooldowns of the channel's
// accounts, by account name.
type accounts struct {
	mu sync.Mutex
	m  map[string]*accountState
}

// of returns account's state, made on first use.
func (a *accounts) of(account string) *accountState {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.m[account]
	if st == nil {
		if a.m == nil {
			a.m = map[string]*accountState{}
		}
		st = &accountState{}
		a.m[account] = st
	}
	return st
}

// accountOf returns the account of key (see [Config].AccountOf).
func (p *Keys) accountOf(key string) string {
	if p.cfg.AccountOf == nil {
		return ""
	}
	return p.cfg.AccountOf(key)
}

// Gate refreshes the key's policy and adapted limit (see limitFor) and
// asks the breaker: an open breaker requeues the record ("breaker"). An
// account or pair cooldown (see scopeLeft) requeues it when it lasts
// longer than MaxTokenWait, else has it Wait out the cooldown (plus up to
// 10%). now is the time of the call; the cooldowns are read after the
// breaker's answer, on the clock.
func (k *Key) Gate(ctx context.Context, now time.Time, log *slog.Logger) Verdict {
	p := k.ks
	k.lim, k.pol = p.limitFor(ctx, now, k.name, k.st, log)
	allowed, probe, wait, ok := p.breakerAllow(ctx, k.name, k.st, k.pol, log)
	if !ok {
		return Verdict{Kind: Stop}
	}
	if !allowed {
		return requeue("breaker", max(wait, time.Second))
	}
	k.probe = probe
	if left, reason := k.scopeLeft(ctx); left > 0 {
		if left > p.cfg.MaxTokenWait {
			return requeue(reason, left)
		}
		return Verdict{Kind: Wait, Wait: left + time.Duration(rand.Int64N(int64(left)/10+1))}
	}
	return Verdict{}
}

// accountLeft returns how long the cooldown of key's account lasts from
// now, as this process last read it (at most refreshEvery ago) or set it.
// A Redis error keeps the last value.
func (p *Keys) accountLeft(ctx context.Context, key string, pol KeyPolicy) time.Duration {
	account := p.accountOf(key)
	a := p.accounts.of(account)
	a.mu.Lock()
	now := time.Now()
	if now.Sub(a.refreshed) >= refreshEvery {
		a.refreshed = now
		a.mu.Unlock()
		ad, err := p.adapter.Adapted(ctx, p.cfg.Channel, accountKey(account), pol.Limit, pol.AIMD)
		a.mu.Lock()
		if err == nil && ad.CooldownLeft > 0 {
			a.until = maxTime(a.until, time.Now().Add(ad.CooldownLeft))
		}
	}
	left := a.until.Sub(now)
	a.mu.Unlock()
	return max(left, 0)
}

// scopeLeft returns how long the record's account (every key behind its
// key's credential, see [Config].AccountOf) or its pair (key, recipient) is in a cooldown a
// throttle of that scope set, and which ("account-cooldown",
// "pair-cooldown"); 0 when neither is.
func (k *Key) scopeLeft(ctx context.Context) (time.Duration, string) {
	left, reason := k.ks.accountLeft(ctx, k.name, k.pol), "account-cooldown"
	if pl := k.st.pairLeft(k.to, time.Now()); pl > left {
		left, reason = pl, "pair-cooldown"
	}
	return left, reason
}

// reportIfDue refreshes key's state (see limitFor), reporting its accepted
// sends, when the key adapts and its refresh is due; otherwise it does
// nothing. Called after each send the provider accepted: a key's records
// reach limitFor in bunches (a sender reads the limit before it waits for
// its slot, up to about a second ahead), gaps of up to 2 s in which no
// refresh was made, while an adapting key's reports must follow its sends
// within refreshAdapting. The refresh runs in the caller's goroutine, after
// its send: that record finishes one Redis round trip later, once per
// refreshAdapting per key and process. A key at its ceiling with no
// throttle is left to limitFor: it costs it one atomic load (adapting),
// no lock and no clock read.
func (p *Keys) reportIfDue(ctx context.Context, now time.Time, key string, st *keyState, log *slog.Logger) {
	if !st.adapting.Load() {
		return // at its ceiling, no cooldown lately: left to limitFor
	}
	st.mu.Lock()
	at := instantOf(now)
	every := st.refreshInterval(at)
	if every >= refreshEvery {
		st.adapting.Store(false) // until set sees a cut or a cooldown again
	}
	due := every < refreshEvery && !st.refreshing && !st.refreshed.IsZero() && at.Sub(st.refreshed) >= every
	st.mu.Unlock()
	if due {
		p.limitFor(ctx, now, key, st, log)
	}
}

// limitFor returns the adapted limit and the policy of key. At most once per
// refreshEvery (refreshAdapting while the key adapts, see
// [keyState.refreshInterval]) one caller re-reads them (the policy, at most
// once per refreshEvery, then the shared state in Redis, raising the rate
// after a clean window) without holding the key's lock, so a slow Redis
// reply never stalls the key's other senders: they use the last known
// values meanwhile (except before the key's first read, which they wait
// for). A Redis or policy error keeps the last known values: the bucket
// call will fail the same way and hold the message.
func (p *Keys) limitFor(ctx context.Context, now time.Time, key string, st *keyState, log *slog.Logger) (bucket.Limit, KeyPolicy) {
	st.mu.Lock()
	every := st.refreshInterval(instantOf(now))
	if st.refreshing || instantOf(now).Sub(st.refreshed) < every {
		if st.refreshed.IsZero() { // the key's first read is under way: wait for it
			r := st.rareSet()
			if r.first == nil {
				r.first = make(chan struct{})
			}
			first := r.first
			st.mu.Unlock()
			select {
			case <-first:
			case <-ctx.Done():
			}
			st.mu.Lock()
		}
		defer st.mu.Unlock()
		return st.limit, *st.pol
	}
	st.refreshing = true
	pol := *st.pol
	// A key that adapts has its state read every refreshAdapting, its
	// policy (another Redis read) still once per refreshEvery.
	readPolicy := every >= refreshEvery || st.rare == nil || instantOf(now).Sub(st.rare.policyAt) >= refreshEvery
	var keptRefused string
	if st.rare != nil {
		keptRefused = st.rare.refused
	}
	st.mu.Unlock()

	// A stored limit read but refused (it does not parse, or the pacer
	// cannot pace it) is logged once, until it changes, not at every refresh.
	var refused string
	var refusedAttrs []any
	if !readPolicy {
		refused = keptRefused // as it was: logged once already
	} else if np, err := p.policy.KeyPolicy(ctx, key); errors.Is(err, control.ErrInvalid) {
		refused, refusedAttrs = err.Error(), []any{"err", err}
	} else if err != nil {
		log.Warn("key policy unavailable; keeping the last one", "err", err)
	} else if err := np.Validate(); err != nil {
		refused = fmt.Sprintf("%+v %v", np, err)
		refusedAttrs = []any{"rate", np.Limit.PerSecond, "burst", np.Limit.Burst, "err", err}
	} else {
		if np.Limit != pol.Limit {
			log.Info("key limit changed", "old_rate", pol.Limit.PerSecond, "old_burst", pol.Limit.Burst,
				"rate", np.Limit.PerSecond, "burst", np.Limit.Burst)
		}
		pol = np
	}
	began := time.Now() // the reads of Redis below start after this
	n := st.accepted.Swap(0)
	var a adapt.Adapted
	var bs adapt.BreakerStatus
	var pairs map[string]adapt.Pair
	var aerr, berr, perr error
	if r, ok := p.adapter.(refresher); ok { // one round trip
		rr := r.Refresh(ctx, p.cfg.Channel, key, pol.Limit, pol.AIMD, int(n))
		a, aerr, bs, berr, pairs, perr = rr.Adapted, rr.AdaptedErr, rr.Breaker, rr.BreakerErr, rr.Pairs, rr.PairsErr
	} else {
		a, aerr = p.adapter.RecoverAfter(ctx, p.cfg.Channel, key, pol.Limit, pol.AIMD, int(n))
		bs, berr = p.adapter.BreakerStatus(ctx, p.cfg.Channel, key)
		pairs, perr = p.adapter.Pairs(ctx, p.cfg.Channel, key)
	}
	if aerr != nil {
		st.accepted.Add(n) // reported with the next call
	}
	ramp := p.slowStart(ctx, key)

	st.mu.Lock()
	defer st.mu.Unlock()
	now = time.Now()
	st.refreshing = false
	at := instantOf(now)
	st.refreshed = at
	if st.rare != nil && st.rare.first != nil {
		close(st.rare.first)
		st.rare.first = nil
	}
	if d := at.Sub(st.mark); d >= achievedOver {
		n := st.delivered.Load()
		if !st.mark.IsZero() {
			st.achieved = float64(n-st.markCount) / d.Seconds()
		}
		st.mark, st.markCount = at, n
	}
	if refused != "" && (st.rare == nil || refused != st.rare.refused) {
		log.Warn("key limit refused; keeping the last one", append(append([]any{"key", key}, refusedAttrs...),
			"kept_rate", pol.Limit.PerSecond, "kept_burst", pol.Limit.Burst)...)
	}
	if refused != "" {
		st.rareSet().refused = refused
	} else if st.rare != nil {
		st.rare.refused = ""
	}
	ceilingChanged := st.pol.Limit != pol.Limit
	prev := st.limit
	if pol != *st.pol {
		if p.def != nil && pol == *p.def {
			st.pol = p.def
		} else {
			np := pol
			st.pol = &np
		}
	}
	if aerr == nil {
		if a.Increased {
			log.Info("clean window: rate raised", "rate", a.Rate, "ceiling", a.Ceiling)
		}
		if most := pol.Limit.PerSecond * ramp; a.Rate > most {
			a.Rate = most // the slow start of a key back from idle
		}
		st.set(a, pol.Limit, now)
	} else if ceilingChanged {
		st.limit = pol.Limit
	}
	if ceilingChanged && st.limit.PerSecond > prev.PerSecond && st.lastSeen.After(at) {
		// The bucket counts the slots granted ahead as tokens, and repays
		// them at the rate of each call: at the higher rate its next
		// slots would start among those this process handed out at the
		// old one. An increase of the adapted rate within the ceiling
		// moves that debt in Redis (aimd_recover.lua); a changed ceiling
		// does not, so the new slots wait for the old ones here.
		st.rareSet().raisedAfter = st.lastSeen + instant(float64(time.Second)/st.limit.PerSecond)
	}
	if berr == nil {
		st.breaker = bs.State
	}
	if perr == nil && (st.pairs() != nil || len(pairs) > 0) {
		r := st.rareSet()
		if r.pairs == nil {
			r.pairs = &pairState{}
		}
		r.pairs.merge(pairs, began, now)
		if ps := r.pairs; len(ps.until) == 0 && ps.rates == nil {
			r.pairs = nil // every pair cooled down: the key's usual state
		}
	}
	if st.refreshInterval(at) < refreshEvery {
		if readPolicy {
			st.rareSet().policyAt = at
		}
	} else if st.rare != nil {
		st.rare.policyAt = 0
	}
	st.rareTidy()
	return st.limit, *st.pol
}

// activeMarker is an Adapter that marks a key active and says since when,
// for the slow start of a key back from idle, as [adapt.Adapter.Active]
// does.
type activeMarker interface {
	Active(ctx context.Context, channel, key string, s adapt.SlowStart) (time.Duration, error)
}

// slowStart marks key active in Redis (shared by every replica) and
// returns the share of its rate it may be paced at: Config.SlowStart's
// ramp since the key came back from idle, 1 without a slow start, once
// the ramp is over, or when Redis does not answer (the ramp is a courtesy
// to the provider, never a reason to hold a key).
func (p *Keys) slowStart(ctx context.Context, key string) float64 {
	am, ok := p.adapter.(activeMarker)
	if !ok || p.cfg.SlowStart.Ramp <= 0 {
		return 1
	}
	elapsed, err := am.Active(ctx, p.cfg.Channel, key, p.cfg.SlowStart)
	if err != nil {
		return 1
	}
	return p.cfg.SlowStart.Factor(elapsed)
}

// credentialReplaced reports whether the key's breaker was opened, in this
// process, by a halt of a credential that has since been replaced. Every
// sender that asks before the breaker is closed (breakerAllow) is told so.
func (p *Keys) credentialReplaced(key string, st *keyState) bool {
	if p.cfg.CredentialVersion == nil {
		return false
	}
	v := p.credentialVersion(key)
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.rare != nil && st.rare.haltCredSet && st.rare.haltCred != v
}

// credentialVersion returns Config.CredentialVersion of key, 0 without one.
func (p *Keys) credentialVersion(key string) uint64 {
	if p.cfg.CredentialVersion == nil {
		return 0
	}
	return p.cfg.CredentialVersion(key)
}

// breakerAllow asks the breaker before a send when this process believes it
// may be open. It returns allowed, whether this send is the half-open probe,
// and how long to wait when not allowed; ok is false when ctx ended.
func (p *Keys) breakerAllow(ctx context.Context, key string, st *keyState, pol KeyPolicy, log *slog.Logger) (allowed, probe bool, wait time.Duration, ok bool) {
	st.mu.Lock()
	closed := st.breaker == adapt.BreakerClosed
	st.mu.Unlock()
	if closed {
		return true, false, 0, true
	}
	if bc, ok := p.adapter.(interface {
		BreakerClose(ctx context.Context, channel, key string) error
	}); ok && p.credentialReplaced(key, st) {
		if err := p.redis(ctx, log, func() error { return bc.BreakerClose(ctx, p.cfg.Channel, key) }); err != nil && !errors.Is(err, ErrRedisDown) {
			return false, false, 0, false
		}
		st.mu.Lock()
		closing := st.rare != nil && st.rare.haltCredSet
		st.breaker = adapt.BreakerClosed
		if closing {
			st.rare.haltCred, st.rare.haltCredSet = 0, false // haltCred is read only while set
			st.rareTidy()
		}
		st.mu.Unlock()
		if closing {
			log.Info("breaker closed: the key's credential was replaced since it was refused")
		}
		return true, false, 0, true
	}
	if err := p.redis(ctx, log, func() (err error) {
		allowed, probe, wait, err = p.adapter.BreakerAllow(ctx, p.cfg.Channel, key, pol.Breaker, p.cfg.Owner)
		return err
	}); err != nil {
		if errors.Is(err, ErrRedisDown) {
			// No shared breaker without Redis: nor a local one, which
			// breakerShut would otherwise keep sending back here.
			st.mu.Lock()
			st.breaker = adapt.BreakerClosed
			st.mu.Unlock()
			return true, false, 0, true
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

// breakerShut holds back a record whose slot came after the key's breaker
// opened in this process: a halt (a refused credential, a blocked account)
// answered to another sender of the key while this one waited for its
// slot. Its request would be refused the same way; before this gate every
// slot granted ahead was still sent with the refused credential (a second
// of slots: 24 requests at 20 msgs/s + burst). The record goes back to the
// breaker gate, which parks it ("breaker"); its slot lapses. The
// half-open probe passes.
func (p *Keys) breakerShut(k *Key) bool {
	if k.probe {
		return false
	}
	k.st.mu.Lock()
	shut := k.st.breaker != adapt.BreakerClosed
	k.st.mu.Unlock()
	return shut
}

// Result is the provider's answer to one send.
type Result struct {
	Class channels.Class
	Err   error  // the send's error, nil when accepted
	Cred  uint64 // Config.CredentialVersion of the key when the request left
}

// countThrottle counts one provider throttle of key (Activity.Throttled).
func (p *Keys) countThrottle(key string) {
	p.thMu.Lock()
	if p.throttleCount == nil {
		p.throttleCount = map[string]uint64{}
	}
	p.throttleCount[key]++
	p.thMu.Unlock()
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
		p.countThrottle(k.name)
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
	base, maxCD, rate := k.pol.PairThrottle(perr.RetryAfter)
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

// maxTime returns the later of a and b.
func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (st *keyState) set(a adapt.Adapted, ceiling bucket.Limit, now time.Time) {
	if a.Rate < st.adapted.Rate {
		// The decrease was made a.SinceDecrease before the reply (by
		// another replica, up to a refresh ago); now less that is no
		// earlier than it on this clock, as the reply came after the
		// script ran. Unknown: now, so every slot held is dropped.
		at := now.Add(-max(a.SinceDecrease, 0)).UnixNano()
		st.cutAt.Store(max(at, st.cutAt.Load()+1)) // under mu: its only writer
	}
	st.adapted = a
	st.limit = a.Limit(ceiling)
	if a.CooldownLeft > 0 {
		st.cooldownUntil = instantOf(now.Add(a.CooldownLeft))
	}
	if a.Rate < a.Ceiling || !st.cooldownUntil.IsZero() {
		st.adapting.Store(true)
	}
}

// refreshInterval is how long after the last read of the key's state the
// next one is due at now: refreshAdapting while the key adapts (its last
// known adapted rate is below its ceiling, or a throttle or cooldown of it
// that this process saw ended less than adaptingFor before now), else
// refreshEvery. Callers hold st.mu.
func (st *keyState) refreshInterval(now instant) time.Duration {
	if st.adapted.Rate < st.adapted.Ceiling ||
		(!st.cooldownUntil.IsZero() && now.Sub(st.cooldownUntil) < adaptingFor) {
		return refreshAdapting
	}
	return refreshEvery
}

// haltedWith records that a request sent with credential version v was
// refused by a halt.
func (st *keyState) haltedWith(v uint64) {
	st.mu.Lock()
	r := st.rareSet()
	r.haltCred, r.haltCredSet = v, true
	st.mu.Unlock()
}

// dropLease gives back the key's leased slots that have not started (after
// a throttle, so the lowered rate applies at once).
func (st *keyState) dropLease(ctx context.Context) {
	st.mu.Lock()
	d := st.disp
	st.disp = nil
	st.dropPrev()
	st.mu.Unlock()
	if d != nil {
		d.Close(ctx)
	}
}

// clockBase is the origin of every [instant]: when the package was
// initialized, with its monotonic clock reading.
var clockBase = time.Now()

// instant is a time kept in a key's state: the nanoseconds from clockBase
// to it, 8 bytes where a time.Time takes 24 (a key's state keeps four, and
// a process up to 100,000 states). 0 is the zero time.Time ("never").
//
// An instant is made from a time.Time ([instantOf], [nowInstant]) and
// compares as that time would: the difference from clockBase is read on the
// monotonic clock when the time has a monotonic reading (every time.Now()
// of the process does), so a step of the wall clock changes no comparison,
// as with time.Time. Inside a testing/synctest bubble, whose clock has no
// monotonic reading (and starts in 2000), the difference is of wall times:
// negative, and consistent among the bubble's times.
//
// Sub and After treat the zero instant as time.Time treats its zero value
// (the year 1, long before any time of the process), so a key never read
// is due for a read and a cooldown never set is over.
type instant int64

// instantOf returns t as an instant. A t that falls exactly on clockBase
// is taken 1 ns later (0 is the zero instant); one more than about 292
// years from clockBase saturates, as time.Time's Sub does.
func instantOf(t time.Time) instant {
	if t.IsZero() {
		return 0
	}
	d := t.Sub(clockBase)
	if d == 0 {
		d = 1
	}
	return instant(d)
}

// nowInstant returns time.Now() as an instant.
func nowInstant() instant { return instantOf(time.Now()) }

// IsZero reports whether i is the zero instant.
func (i instant) IsZero() bool { return i == 0 }

// Time returns i as a time.Time (the zero time.Time for the zero
// instant). Outside a synctest bubble it carries a monotonic reading.
func (i instant) Time() time.Time {
	if i == 0 {
		return time.Time{}
	}
	return clockBase.Add(time.Duration(i))
}

// Sub returns the duration i - u, as time.Time's Sub would for their
// times (saturating at the largest or smallest time.Duration). The zero
// instant, like the zero time.Time (the year 1), lies more than 292 years
// before every other, so a difference with it saturates.
func (i instant) Sub(u instant) time.Duration {
	d := time.Duration(i - u)
	switch {
	case i == u:
		return 0
	case u == 0, i >= 0 && u < 0 && d < 0:
		return math.MaxInt64
	case i == 0, i < 0 && u > 0 && d > 0:
		return math.MinInt64
	}
	return d
}

// After reports whether i is after u. The zero instant is before every
// other (as the zero time.Time is before every time of the process), so
// no clock is read.
func (i instant) After(u instant) bool {
	if i == 0 || u == 0 {
		return i != 0 && u == 0
	}
	return i > u
}

// pairs returns the key's pair state, nil when none of its pairs is
// known. Callers hold st.mu.
func (st *keyState) pairs() *pairState {
	if st.rare == nil {
		return nil
	}
	return st.rare.pairs
}

// pairState is what a key's process knows of its pairs (key, recipient):
// until holds the recipients (by recipientSub) in a pair cooldown, with its
// end; rates their learned rates (msgs/s). Set by this process's pair
// throttles and re-read from Redis with the rest of the key's state.
type pairState struct {
	until map[string]time.Time
	rates map[string]float64
	// rateAt is when this process set each rate of rates it learned from
	// its own throttle: a refresh whose read of Redis began before that
	// keeps it (its read may predate the write).
	rateAt map[string]time.Time
}

// pairLeft returns how long the pair (key, recipient to) is in cooldown from now, as
// this process knows it.
func (st *keyState) pairLeft(to string, now time.Time) time.Duration {
	st.mu.Lock()
	defer st.mu.Unlock()
	ps := st.pairs()
	if ps == nil || len(ps.until) == 0 {
		return 0 // no pair of the key cools down: no hash of the recipient
	}
	return max(ps.until[recipientSub(to)].Sub(now), 0)
}

// setPair records that the pair (key, sub) cools down for d from now and
// is paced at rate msgs/s (0: no learned rate) after.
func (st *keyState) setPair(sub string, d time.Duration, rate float64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	r := st.rareSet()
	if r.pairs == nil {
		r.pairs = &pairState{}
	}
	ps := r.pairs
	if ps.until == nil {
		ps.until = map[string]time.Time{}
	}
	ps.until[sub] = maxTime(ps.until[sub], time.Now().Add(d))
	if rate > 0 {
		if ps.rates == nil {
			ps.rates = map[string]float64{}
		}
		ps.rates[sub] = rate
		if ps.rateAt == nil {
			ps.rateAt = map[string]time.Time{}
		}
		ps.rateAt[sub] = time.Now()
	}
}

// anyPairRate reports whether any pair of the key has a learned rate.
func (st *keyState) anyPairRate() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	ps := st.pairs()
	return ps != nil && len(ps.rates) > 0
}

// pairRate returns the learned rate of the pair (key, sub) in msgs/s, 0
// when it has none.
func (st *keyState) pairRate(sub string) float64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	ps := st.pairs()
	if ps == nil {
		return 0
	}
	return ps.rates[sub]
}

// merge takes the key's pairs as read from Redis (a read that began at
// began) at now: cooldowns end at the later of the read's and this
// process's own; rates are the read's, plus those this process learned
// after the read began (its throttle's write may postdate the read).
func (ps *pairState) merge(pairs map[string]adapt.Pair, began, now time.Time) {
	for sub, until := range ps.until { // keep what this process set since
		if until.Before(now) {
			delete(ps.until, sub)
		}
	}
	// Keep the rates this process learned after the read began (a
	// throttle's write to Redis the read may not have seen).
	var kept map[string]float64
	for sub, at := range ps.rateAt {
		if _, read := pairs[sub]; !read && at.After(began) {
			if kept == nil {
				kept = map[string]float64{}
			}
			kept[sub] = ps.rates[sub]
		} else {
			delete(ps.rateAt, sub)
		}
	}
	if len(ps.rateAt) == 0 {
		ps.rateAt = nil
	}
	ps.rates = kept
	for sub, pr := range pairs {
		if pr.Left > 0 {
			if ps.until == nil {
				ps.until = map[string]time.Time{}
			}
			ps.until[sub] = maxTime(ps.until[sub], now.Add(pr.Left))
		}
		if pr.Rate > 0 {
			if ps.rates == nil {
				ps.rates = map[string]float64{}
			}
			ps.rates[sub] = pr.Rate
		}
	}
}
