package keypace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/pacer/control"
)

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
