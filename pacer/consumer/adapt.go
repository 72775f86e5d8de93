package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/prometheus/client_golang/prometheus"
)

// Adapter is the shared adaptive state of pacing keys (AIMD rate, breaker);
// *adapt.Adapter implements it. Methods are safe for concurrent use.
type Adapter interface {
	// ThrottledAfter and RecoverAfter also report the sends of the key this
	// process saw accepted since it last reported them: the estimate of the
	// provider's capacity when throttles persist.
	ThrottledAfter(ctx context.Context, channel, key string, ceiling bucket.Limit, a adapt.AIMD, hint time.Duration, accepted int, paced float64) (adapt.Adapted, error)
	RecoverAfter(ctx context.Context, channel, key string, ceiling bucket.Limit, a adapt.AIMD, accepted int) (adapt.Adapted, error)
	// Adapted reads a key's adaptive state and cooldown without changing them.
	Adapted(ctx context.Context, channel, key string, ceiling bucket.Limit, a adapt.AIMD) (adapt.Adapted, error)
	// PairThrottled sets the shared cooldown of one pair (key, recipient)
	// and learned rate after a pair-scoped throttle; Pairs reads a key's
	// throttled pairs (see adapt.Adapter.PairThrottled).
	PairThrottled(ctx context.Context, channel, key, sub string, base, maxCooldown time.Duration, rate float64) (adapt.Pair, error)
	Pairs(ctx context.Context, channel, key string) (map[string]adapt.Pair, error)
	BreakerAllow(ctx context.Context, channel, key string, b adapt.Breaker, owner string) (allowed, probe bool, wait time.Duration, err error)
	BreakerResult(ctx context.Context, channel, key string, b adapt.Breaker, ok bool, reason string) (adapt.BreakerState, error)
	BreakerStatus(ctx context.Context, channel, key string) (adapt.BreakerStatus, error)
}

// refresher is an Adapter that reads what [Pacer.limitFor] refreshes of a
// key (RecoverAfter, BreakerStatus and Pairs) in one Redis round trip, as
// [adapt.Adapter.Refresh] does.
type refresher interface {
	Refresh(ctx context.Context, channel, key string, ceiling bucket.Limit, a adapt.AIMD, accepted int) adapt.Refreshed
}

// refreshEvery is how often a replica re-reads a key's policy and shared
// state (its adapted rate and breaker) while it sends for that key: the
// bound on how long replicas disagree, at one or two calls per key per second.
const refreshEvery = time.Second

// refreshAdapting is how often a replica re-reads a key's shared state (and
// reports the sends of it the provider accepted) while the key adapts: its
// adapted rate is below its ceiling, or this process saw a throttle or a
// cooldown of it less than adaptingFor ago (see [keyState.refreshInterval]).
// A throttle episode lasts 0.5-2 s, and its capacity estimate is the sends
// every replica reported over it (aimd_throttle.lua): with a report a
// second, one report more or less per replica made it err by 20% and more
// either way; at 250 ms the reports of three replicas still lagged the
// sends by 0-14 (0.5 s at 30 msgs/s), an estimate 30% low now and then and
// a cut to it; at 100 ms they lag by 0-3. It costs such a key up to ten
// Redis round trips per second per replica instead of one (never more
// than one per accepted send: a report follows a send) (a pipelined refresh, see [adapt.Adapter.Refresh]); the policy is
// still read once per refreshEvery, and a key at its ceiling with no
// throttle (the common case) is read once per refreshEvery as before.
const refreshAdapting = 100 * time.Millisecond

// adaptingFor is how long after a throttle or a cooldown of a key this
// process saw (the end of the cooldown) the key's state is still read every
// refreshAdapting, though its rate is back at its ceiling: the default
// [adapt.AIMD].Persist, within which the next throttle continues the
// episode the last one began.
const adaptingFor = 2 * time.Second

// activeFor is how long a key counts in the per-channel gauges after its
// last message in this process; an idle key's state is freed (and its
// unused leased slots given back) by the sweep that runs every sweepEvery.
const (
	activeFor  = 5 * time.Minute
	sweepEvery = time.Minute
)

// keyState is this process's view of one pacing key's policy and shared
// state. One exists per key active in this process (100,000 keys at a time
// is a supported load), so it is kept small (192 B): the parts few keys use
// (the wait for the first read, the priority handoff, pair cooldowns, a
// refused limit, a halt's credential: see [keyRare]) sit behind one
// pointer, the lookahead gate and the lease dispenser are made on first
// use and dropped again once the key has no record in hand (see
// [keyState.trim]), times are 8-byte [instant]s, and the counters that fit
// 32 bits share 8 bytes. TestKeyStateBytes bounds its size.
type keyState struct {
	mu            sync.Mutex
	refreshing    bool         // a goroutine is reading it now (without holding mu)
	normalWaiting atomic.Int32 // the key's normal-priority senders in acquire
	users         int32        // records of this key being handled now; never swept while > 0
	// adapting: the key may adapt as refreshInterval sees it (set by set
	// under mu when its rate is below its ceiling or a cooldown was seen;
	// cleared by reportIfDue once refreshInterval says it no longer does),
	// so reportIfDue, after every accepted send, takes mu only for such a
	// key. In the padding after users: no byte more per key.
	adapting atomic.Bool
	// cutAt is when the last decrease this process has seen was made (by
	// any replica), in Unix ns of the local clock, and grows with each one
	// (0: none): a sender holding a slot granted before it drops it (the
	// decrease cleared the bucket's debt) and takes a new one at the new
	// rate; a slot granted after it is the new schedule (see acquire).
	cutAt         atomic.Int64
	pol           *control.KeyPolicy // shared with every key of the same policy (see keyStates.def)
	adapted       adapt.Adapted
	limit         bucket.Limit // adapted limit passed to the bucket
	refreshed     instant      // when the state was last read from Redis; zero before the first read ends
	breaker       adapt.BreakerState
	cooldownUntil instant
	// rare is what few keys need; nil while none of it is set (see keyRare).
	rare *keyRare
	// lastSeen is when the key was last in use: a record of it taken or
	// let go, or the latest slot granted to one of its senders if later
	// (see handedOut: a raise of the key's limit starts the new rate after
	// it, keyRare.raisedAfter).
	lastSeen  instant
	delivered atomic.Uint64 // messages of this key the provider accepted through this process

	// accepted counts the sends of the key the provider accepted since the
	// last report to the shared state (RecoverAfter, ThrottledAfter).
	accepted atomic.Int64
	// achieved is the key's accepted sends per second in this process,
	// measured over at least achievedOver (refreshed by limitFor) from
	// delivered; mark/markCount are where the current measure began.
	achieved  float64
	mark      instant
	markCount uint64
	// ahead bounds the senders of this process holding a slot of the key
	// that has not started (see aheadGate); nil while no sender holds one.
	ahead chan struct{}

	disp *bucket.Dispenser // leases of this key's slots, shared by this process's senders; nil when none is held
}

// keyRare is the part of a key's state that few keys need: one pointer in
// every key's state (of 100,000 in a process), made for a key when one of
// its fields is set and dropped once they are all zero again. Guarded by
// the key's mu.
type keyRare struct {
	// prev is the dispenser disp replaced when the rate rose: its slots are
	// handed out first (see keyState.dispenser); nil when none is left.
	prev *bucket.Dispenser
	// first, made by a sender that waits for the key's first read, is
	// closed (and dropped) once that read is done.
	first chan struct{}
	// handoff passes a slot from a normal-priority sender whose slot came
	// to a high-priority one waiting (unbuffered: only to one waiting now);
	// made by the first high-priority sender that waits (see handoffChan).
	handoff chan struct{}
	// pairs is the key's recipients in a pair cooldown and their learned
	// rates; nil until one of the key's pairs is throttled.
	pairs *pairState
	// refused describes the last limit read for the key and refused (one
	// that does not parse, or above the AIMD's highest ceiling), logged
	// once when it was read; "" once a valid one is read.
	refused     string
	haltCred    uint64 // CredentialVersion of the last request a halt refused
	haltCredSet bool   // haltCred is set: a halt opened the breaker in this process
	// raisedAfter, set when the key's limit (its ceiling) rose while this
	// process held slots granted at the old rate, is when the last of
	// those starts plus one interval of the new rate: the key's senders
	// reserve no slot of the new rate before it (see acquire), so the two
	// rates never overlap in this process. Zero once it has passed.
	raisedAfter instant
	// policyAt is when the key's policy was last read while the key adapts
	// (its state is read every refreshAdapting; its policy, as any key's,
	// once per refreshEvery); zero while it does not.
	policyAt instant
}

// rareSet returns st.rare, made if nil. Callers hold st.mu.
func (st *keyState) rareSet() *keyRare {
	if st.rare == nil {
		st.rare = &keyRare{}
	}
	return st.rare
}

// rareTidy drops st.rare once all of it is zero. Callers hold st.mu.
func (st *keyState) rareTidy() {
	if st.rare != nil && *st.rare == (keyRare{}) {
		st.rare = nil
	}
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

// countingLeaser counts the Lease calls a Dispenser makes in
// pacer_bucket_calls_total.
type countingLeaser struct{ p *Pacer }

func (c countingLeaser) Lease(ctx context.Context, channel, key string, lim bucket.Limit, n int, maxWait time.Duration) (bucket.Lease, error) {
	c.p.m.bucketCallsC.Inc()
	return c.p.bucket.Lease(ctx, channel, key, lim, n, maxWait)
}

func (c countingLeaser) Return(ctx context.Context, lease bucket.Lease, used int) (int, error) {
	return c.p.bucket.Return(ctx, lease, used)
}

// dispenser returns the key's Dispenser for lim (the adapted limit of
// ceiling) leasing n slots at a time, replacing (and returning the unused
// slots of) one made for another limit or lateness. Its slots stay usable
// as long after their start as a sender may be late (lateSlot, which
// follows both lim and ceiling: the dispenser's lateness is how the key's
// state remembers the ceiling it was made for).
func (st *keyState) dispenser(ctx context.Context, p *Pacer, key string, ceiling, lim bucket.Limit, n int) *bucket.Dispenser {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.dispenserLocked(ctx, p, key, ceiling, lim, n)
}

// dispenserLocked is dispenser for callers that hold st.mu.
func (st *keyState) dispenserLocked(ctx context.Context, p *Pacer, key string, ceiling, lim bucket.Limit, n int) *bucket.Dispenser {
	late := lateSlot(ceiling, lim)
	if st.disp != nil && st.disp.Limit() == lim && st.disp.Late() == late {
		return st.disp
	}
	switch {
	case st.disp != nil && lim.PerSecond > st.disp.Limit().PerSecond:
		// A raise: the slots leased at the old rate are kept and handed out
		// first (take), at their old spacing. Given back, they would
		// leave a gap where they were and, since the bucket counts tokens,
		// not slots, put the next lease on top of those of other replicas
		// granted after them (see lease_return.lua): a burst at the
		// provider. The raise scaled the bucket's debt, so the new rate's
		// slots follow every slot granted before it.
		st.rareSet().prev = st.disp
	case st.disp != nil:
		// A decrease (it cleared the bucket's debt: the slots granted
		// before it are dropped) or another ceiling.
		st.disp.Close(ctx)
		st.dropPrev()
	}
	st.disp = bucket.NewDispenser(countingLeaser{p}, p.cfg.Channel, key, lim, n, p.cfg.MaxTokenWait).WithLate(late)
	return st.disp
}

// take returns the key's next slot: one the dispenser a raise replaced
// still holds (see dispenser), else one of the key's dispenser for lim
// (see [bucket.Dispenser.Next]).
func (st *keyState) take(ctx context.Context, p *Pacer, key string, ceiling, lim bucket.Limit, n int) (bucket.Reservation, error) {
	st.mu.Lock()
	if st.rare != nil && st.rare.prev != nil {
		if r, ok := st.rare.prev.Held(); ok {
			st.mu.Unlock()
			return r, nil
		}
		st.dropPrev()
	}
	d := st.dispenserLocked(ctx, p, key, ceiling, lim, n)
	st.mu.Unlock()
	return d.Next(ctx)
}

// dropPrev drops the dispenser a raise replaced. Callers hold st.mu.
func (st *keyState) dropPrev() {
	if st.rare != nil && st.rare.prev != nil {
		st.rare.prev = nil
		st.rareTidy()
	}
}

// accountKey is the pacing key under which the cooldown of the channel's
// account lives in Redis (WhatsApp 80007 and 4 limit the business account
// or app: every number behind the same credentials). With one credential
// per channel the account is the channel. "@" starts no provider's key.
const accountKey = "@account"

// accountState is this process's view of the account cooldown, re-read from
// Redis at most once per refreshEvery.
type accountState struct {
	mu        sync.Mutex
	until     time.Time
	refreshed time.Time
}

// accountLeft returns how long the account cooldown lasts from now, as this
// process last read it (at most refreshEvery ago) or set it. A Redis error
// keeps the last value.
func (p *Pacer) accountLeft(ctx context.Context, pol control.KeyPolicy) time.Duration {
	a := &p.account
	a.mu.Lock()
	now := time.Now()
	if now.Sub(a.refreshed) >= refreshEvery {
		a.refreshed = now
		a.mu.Unlock()
		ad, err := p.adapter.Adapted(ctx, p.cfg.Channel, accountKey, pol.Limit, pol.AIMD)
		a.mu.Lock()
		if err == nil && ad.CooldownLeft > 0 {
			a.until = maxTime(a.until, time.Now().Add(ad.CooldownLeft))
		}
	}
	left := a.until.Sub(now)
	a.mu.Unlock()
	return max(left, 0)
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

// maxTime returns the later of a and b.
func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// accountThrottled applies an account-scoped throttle: a cooldown of every
// key of the channel, shared through Redis, of the provider's hint clamped
// to the key's cooldown bounds (the WhatsApp adapter asks for a minute: the
// budget is a rolling hour). It returns the cooldown.
func (p *Pacer) accountThrottled(ctx context.Context, pol control.KeyPolicy, perr *channels.Error, log *slog.Logger) time.Duration {
	hint := time.Duration(0)
	if perr != nil {
		hint = perr.RetryAfter
	}
	d := pol.AIMD.CooldownFor(hint)
	if err := p.redis(ctx, log, func() error { return p.bucket.Cooldown(ctx, p.cfg.Channel, accountKey, d) }); err != nil &&
		!errors.Is(err, errRedisDown) {
		return d
	}
	p.account.mu.Lock()
	p.account.until = maxTime(p.account.until, time.Now().Add(d))
	p.account.mu.Unlock()
	log.Warn("account throttled: every key of the channel cools down", "code", codeOf(perr), "cooldown", d)
	return d
}

// achievedOver is the shortest span over which a key's achieved rate (the
// numerator of pacer_utilization) is measured.
const achievedOver = 5 * time.Second

// reserveAhead is how far ahead of now, at the key's adapted rate, the
// senders of one process hold slots of a key at its configured rate (its
// ceiling). Slots granted ahead were counted at the rate of their grant:
// however many senders wait (Config.InFlight per partition), a change of
// the rate takes effect within about this long per process.
const reserveAhead = time.Second

// reserveAheadAdapting is reserveAhead for a key whose adapted rate is
// below its ceiling: a key the provider throttled, whose rate is raised
// a step each clean window. Every replica holds its own reserve of the
// key's shared slots, so a raise took effect only after about a second
// per replica: with 3 replicas a probe step of 30 -> 33 msgs/s was sent at
// about 30 for 3 s, and the next steps climbed above what the provider
// took (it refused nothing: the sends had not followed) to cut below it
// later. A quarter of a second per process follows a raise within the
// window that judges it.
const reserveAheadAdapting = 250 * time.Millisecond

// aheadSenders is how many senders of a key in this process may hold a
// slot not yet started under lim (the adapted limit of pol.Limit): rate *
// reserveAhead + burst (reserveAheadAdapting when adapting: the key's
// adapted rate is below pol.Limit's), at least 1; for a key with a
// recipient bucket, whose reservations look only [multiReach] ahead, rate
// * that reach + 1.
//
// More senders than the bucket grants slots to would each be refused and
// ask again every slot interval: with a recipient bucket (FCM's device
// limit), a gate of rate * reserveAhead + burst let 40 of a 50/s key's 60
// senders ask Redis 50 times a second each, about 50 calls per message
// sent, and the CPU they took woke the slot holders too late to use their
// slots: the key ran at half its rate. The one sender beyond the reach
// asks for the next slot as the first held one starts.
func aheadSenders(lim bucket.Limit, pol control.KeyPolicy, maxWait time.Duration, adapting bool) int {
	if pol.RecipientLimit != (bucket.Limit{}) {
		return max(int(math.Ceil(lim.PerSecond*multiReach(lim, maxWait).Seconds()))+1, 1)
	}
	ahead := reserveAhead
	if adapting {
		ahead = reserveAheadAdapting
	}
	return max(int(math.Ceil(lim.PerSecond*ahead.Seconds()))+lim.Burst, 1)
}

// aheadGate returns the semaphore of the n senders that may hold a slot of
// the key not yet started (n from [aheadSenders]). A sender takes a place
// before asking for a slot and gives it back to the same channel once its
// slot started; a change of n (of the rate) makes a new channel, so for a
// moment both may be full.
func (st *keyState) aheadGate(n int) chan struct{} {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ahead == nil || cap(st.ahead) != n {
		st.ahead = make(chan struct{}, n)
	}
	return st.ahead
}

// handoffChan returns the key's handoff channel (see keyRare.handoff).
// A high-priority sender about to wait for a slot passes create true; a
// normal one offering its slot passes false and gets nil while no
// high-priority sender ever waited (a send to nil is never ready).
func (st *keyState) handoffChan(create bool) chan struct{} {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.rare == nil && !create {
		return nil
	}
	r := st.rareSet()
	if r.handoff == nil && create {
		r.handoff = make(chan struct{})
	}
	return r.handoff
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

// keyStates holds the state of the keys this process handles; idle keys are
// dropped by sweep.
type keyStates struct {
	// mu guards m (read-locked by a record's lookup of its key's state,
	// locked to add or sweep one); a state's users change under its own
	// mu, which sweep takes too.
	mu sync.RWMutex
	m  map[string]*keyState
	// peak is the most keys m held since it was last made: a Go map
	// never gives back the space of deleted entries, so sweep makes a new
	// one once m holds a small part of its peak.
	peak int
	// def is the channel's policy (Config's), shared by every key whose
	// policy is the same, so a key's state holds a pointer, not a copy.
	def *control.KeyPolicy
	// slab is the rest of the block new states are cut from (see
	// keyStateBlock).
	slab []keyState
	// text is the block the keys of m are copied into (see keyTextBlock):
	// its bytes up to len are keys, never written again.
	text []byte
}

// keyStateBlock is how many keys' states are allocated together. A
// campaign's keys are made while its records' garbage is made, in the
// same size classes: one at a time, 100,000 keys' states ended up spread
// over spans twice their size once that garbage was collected (1.6 KB of
// RSS per active key for 370 B of state), and a span with one live state
// is not given back. Made in blocks, the states of keys that start
// together sit together; a block is freed by the garbage collector once
// none of its states is referenced (swept keys' states are never reused),
// so a key that stays active keeps at most its block alive (8 KiB, as one
// live state kept its 8 KiB span before). A block is as many states as
// fill 8 KiB, one of the runtime's size classes, so it wastes almost
// nothing: 42 of 192 B take 8,064 B (16 of 368 B took a 6 KiB class for
// 5,888 B).
const keyStateBlock = int(8192 / unsafe.Sizeof(keyState{}))

// newState returns a zero state from the current block. Callers hold mu.
func (ks *keyStates) newState() *keyState {
	if len(ks.slab) == 0 {
		ks.slab = make([]keyState, keyStateBlock)
	}
	st := &ks.slab[0]
	ks.slab = ks.slab[1:]
	return st
}

// keyTextBlock is the size of the blocks a key of the key map is copied
// into (keys longer than keyTextMax are copied alone). A key as decoded
// from its record is a small string made among the garbage of every
// record of a campaign: 100,000 keys (1.6 MB) kept whole spans of that
// garbage from being reused or given back, each span held by a few of
// them. Copied when their state is made, the keys that start together sit
// together, as their states do (see keyStateBlock); a block is freed once
// none of its keys is referenced any more.
const (
	keyTextBlock = 4096
	keyTextMax   = 256
)

// keyText returns a copy of key in the current block of keys. Callers
// hold mu.
func (ks *keyStates) keyText(key string) string {
	if len(key) > keyTextMax {
		return strings.Clone(key)
	}
	if cap(ks.text)-len(ks.text) < len(key) {
		ks.text = make([]byte, 0, keyTextBlock)
	}
	ks.text = append(ks.text, key...)
	b := ks.text[len(ks.text)-len(key):]
	return unsafe.String(unsafe.SliceData(b), len(b)) // b is never written again
}

// keyState returns key's state and counts one more record of the key in
// hand; the caller calls done when the record is finished.
func (p *Pacer) keyState(key string) *keyState {
	p.keys.mu.RLock()
	if st := p.keys.m[key]; st != nil { // a key in use: sweep waits for the read lock
		st.mu.Lock()
		st.seen(nowInstant())
		st.users++
		st.mu.Unlock()
		p.keys.mu.RUnlock()
		return st
	}
	p.keys.mu.RUnlock()
	p.keys.mu.Lock()
	defer p.keys.mu.Unlock()
	st := p.keys.m[key]
	if st == nil {
		if def := control.KeyPolicy(p.policyDefault); p.keys.def == nil || *p.keys.def != def {
			p.keys.def = &def
		}
		pol := p.keys.def
		st = p.keys.newState()
		st.pol, st.limit = pol, pol.Limit
		st.adapted = adapt.Adapted{Rate: pol.Limit.PerSecond, Ceiling: pol.Limit.PerSecond}
		p.keys.m[p.keys.keyText(key)] = st
		p.keys.peak = max(p.keys.peak, len(p.keys.m))
	}
	st.mu.Lock()
	st.seen(nowInstant())
	st.users++
	st.mu.Unlock()
	return st
}

// done counts one record of st's key as no longer in hand; the last one
// trims the key's state. It takes st.mu only: sweep reads users under it,
// and frees a state only once it reads 0 (after this, which touches st no
// more).
func (ks *keyStates) done(st *keyState) {
	st.mu.Lock()
	st.users--
	now := time.Now()
	st.seen(instantOf(now))
	if st.users == 0 {
		st.trim(now)
	}
	st.mu.Unlock()
}

// trim drops what a key with no record in hand does not need until its
// next record: the lookahead gate (no sender holds a place: every sender
// is a user) and a spent dispenser (nothing to give back; one still
// holding slots is kept for the key's next records, or given back by
// sweep). Callers hold st.mu and see st.users == 0.
func (st *keyState) trim(now time.Time) {
	st.ahead = nil
	if st.disp != nil && st.disp.Spent(now) {
		st.disp = nil
	}
	if st.rare != nil && st.rare.prev != nil && st.rare.prev.Spent(now) {
		st.dropPrev()
	}
}

// sweep frees the state of keys idle for longer than activeFor at now (no
// record in hand), giving back their leased slots that have not started, and
// reports how many it freed. Run calls it every sweepEvery, so memory
// follows the keys in use, not every key ever seen.
func (p *Pacer) sweep(ctx context.Context, now time.Time) int {
	var idle []*keyState
	at := instantOf(now)
	p.keys.mu.Lock()
	for k, st := range p.keys.m {
		st.mu.Lock()
		if st.users == 0 && at.Sub(st.lastSeen) > activeFor {
			delete(p.keys.m, k)
			idle = append(idle, st)
		} else if st.users == 0 {
			st.trim(now) // a dispenser whose slots lapsed since the key's last record
		}
		st.mu.Unlock()
	}
	if p.keys.peak >= shrinkFrom && len(p.keys.m) <= p.keys.peak/4 {
		m := make(map[string]*keyState, len(p.keys.m))
		for k, st := range p.keys.m {
			m[k] = st
		}
		p.keys.m, p.keys.peak = m, len(m)
	}
	p.keys.mu.Unlock()
	for _, st := range idle {
		st.dropLease(ctx)
	}
	if len(idle) >= freeOSFrom {
		// Give the freed pages back now rather than over the next minutes
		// (the runtime returns idle heap gradually), so the RSS of a burst
		// of keys' state does not outlast it. A full GC at most once per
		// sweepEvery.
		debug.FreeOSMemory()
	}
	return len(idle)
}

// shrinkFrom is the peak size from which a map of keys (or of ids in
// hand) is made anew once it holds a quarter of it or less: a Go map keeps
// the space of its deleted entries for good. Below it the space kept is
// about 50 KB at most.
const shrinkFrom = 1024

// freeOSFrom is how many keys one sweep must free for it to return the
// process's idle heap to the operating system at once (a key's state and
// its share of the key map are about 0.25 MB per thousand keys).
const freeOSFrom = 10_000

// idleReleases are how long after it last finished a record an idle
// process returns its free memory to the operating system (see
// releaseLoop): at 30 s, and again once the provider connections of its
// last sends have closed (channels.IdleConnTimeout, 90 s idle) with their
// buffers and goroutines.
var idleReleases = []time.Duration{30 * time.Second, 2 * time.Minute}

// releaseTick is how often releaseLoop looks at the records finished.
const releaseTick = 10 * time.Second

// releaseLoop gives a process's free heap back to the operating system
// once it has been idle for each of idleReleases after finishing records:
// a campaign leaves the garbage of its sends (a heap up to twice what is
// live, by the runtime's GOGC), which the runtime would otherwise collect
// and return over several minutes; an idle replica then holds what is
// live (its keys' state, kept activeFor) and little more. A full GC per
// release, never while records are being finished.
func (p *Pacer) releaseLoop(ctx context.Context, release func()) {
	t := time.NewTicker(releaseTick)
	defer t.Stop()
	last, since, done := p.tally.snapshot(), time.Now(), len(idleReleases)
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if s := p.tally.snapshot(); s != last {
				last, since, done = s, now, 0
			} else if done < len(idleReleases) && now.Sub(since) >= idleReleases[done] {
				release()
				done++
			}
		}
	}
}

// sweepLoop runs sweep every sweepEvery until ctx ends.
func (p *Pacer) sweepLoop(ctx context.Context) {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			p.sweep(ctx, now)
		}
	}
}

// current returns the key's adapted limit and policy as last read (no
// Redis call), or lim and pol while the key has not been read yet: a
// sender that waited (for a place among the key's senders, a slot) uses
// the key's limit of now, not the one it read before its wait, so no slot
// is reserved at a rate the key no longer has. It also returns how long
// from now the key's new slots wait after a raise (see
// keyRare.raisedAfter), 0 when they do not.
func (st *keyState) current(lim bucket.Limit, pol control.KeyPolicy, now instant) (bucket.Limit, control.KeyPolicy, time.Duration) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.refreshed.IsZero() {
		lim, pol = st.limit, *st.pol
	}
	var hold time.Duration
	if r := st.rare; r != nil && !r.raisedAfter.IsZero() {
		if hold = r.raisedAfter.Sub(now); hold <= 0 {
			hold, r.raisedAfter = 0, 0
			st.rareTidy()
		}
	}
	return lim, pol, hold
}

// handedOut records that a sender of this process was granted the key's
// slot at at (it sends in it, or lets it lapse): the key is in use until
// then (lastSeen).
func (st *keyState) handedOut(at time.Time) {
	st.mu.Lock()
	st.seen(instantOf(at))
	st.mu.Unlock()
}

// seen moves lastSeen to at unless it is later already (a slot granted
// ahead). Callers hold st.mu.
func (st *keyState) seen(at instant) {
	if at.After(st.lastSeen) {
		st.lastSeen = at
	}
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
func (p *Pacer) reportIfDue(ctx context.Context, key string, st *keyState, log *slog.Logger) {
	if !st.adapting.Load() {
		return // at its ceiling, no cooldown lately: left to limitFor
	}
	st.mu.Lock()
	now := nowInstant()
	every := st.refreshInterval(now)
	if every >= refreshEvery {
		st.adapting.Store(false) // until set sees a cut or a cooldown again
	}
	due := every < refreshEvery && !st.refreshing && !st.refreshed.IsZero() && now.Sub(st.refreshed) >= every
	st.mu.Unlock()
	if due {
		p.limitFor(ctx, key, st, log)
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
func (p *Pacer) limitFor(ctx context.Context, key string, st *keyState, log *slog.Logger) (bucket.Limit, control.KeyPolicy) {
	st.mu.Lock()
	now := time.Now()
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
		if p.keys.def != nil && pol == *p.keys.def {
			st.pol = p.keys.def
		} else {
			np := pol
			st.pol = &np
		}
	}
	if aerr == nil {
		if a.Increased {
			log.Info("clean window: rate raised", "rate", a.Rate, "ceiling", a.Ceiling)
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

// throttled applies a key-wide throttle: one AIMD decrease for the burst of
// throttles it belongs to, and a cooldown every replica honours. A key
// throttled again and again at its floor trips the breaker.
// paced is the adapted rate the throttled send was paced at (see
// [adapt.Adapter.ThrottledAfter]).
func (p *Pacer) throttled(ctx context.Context, key string, st *keyState, pol control.KeyPolicy, paced float64, perr *channels.Error, log *slog.Logger) {
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
		if errors.Is(err, errRedisDown) {
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

// breakerResult reports an outcome to the key's breaker.
func (p *Pacer) breakerResult(ctx context.Context, key string, st *keyState, pol control.KeyPolicy, ok bool, reason string, log *slog.Logger) {
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

// breakerShut holds back a record whose slot came after the key's breaker
// opened in this process: a halt (a refused credential, a blocked account)
// answered to another sender of the key while this one waited for its
// slot. Its request would be refused the same way; before this gate every
// slot granted ahead was still sent with the refused credential (a second
// of slots: 24 requests at 20 msgs/s + burst). The record goes back to the
// breaker gate, which parks it ("breaker"); its slot lapses. The
// half-open probe passes.
func (p *Pacer) breakerShut(f *flight) outcome {
	if f.probe {
		return next()
	}
	f.st.mu.Lock()
	shut := f.st.breaker != adapt.BreakerClosed
	f.st.mu.Unlock()
	if shut {
		return outcome{kind: again}
	}
	return next()
}

// CredentialVersioner is a [channels.Sender] whose credential per pacing
// key can be replaced while the pacer runs (`pacer run` with
// PACER_CREDENTIALS_DIR). CredentialVersion returns a number that changes
// whenever key's credential is added, replaced or removed. A breaker that a
// halt (a refused credential) opened is closed as soon as the key's
// version differs from the one its refused request was sent with, so the
// new credential is tried at once rather than at the next half-open probe
// (up to Breaker.MaxOpenFor later).
type CredentialVersioner interface {
	CredentialVersion(key string) uint64
}

// credentialVersion returns the sender's CredentialVersion of key, 0 when
// the sender does not have one.
func (p *Pacer) credentialVersion(key string) uint64 {
	if cv, ok := p.sender.(CredentialVersioner); ok {
		return cv.CredentialVersion(key)
	}
	return 0
}

// haltedWith records that a request sent with credential version v was
// refused by a halt.
func (st *keyState) haltedWith(v uint64) {
	st.mu.Lock()
	r := st.rareSet()
	r.haltCred, r.haltCredSet = v, true
	st.mu.Unlock()
}

// credentialReplaced reports whether the key's breaker was opened, in this
// process, by a halt of a credential that has since been replaced. Every
// sender that asks before the breaker is closed (breakerAllow) is told so.
func (p *Pacer) credentialReplaced(key string, st *keyState) bool {
	if _, ok := p.sender.(CredentialVersioner); !ok {
		return false
	}
	v := p.credentialVersion(key)
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.rare != nil && st.rare.haltCredSet && st.rare.haltCred != v
}

// breakerAllow asks the breaker before a send when this process believes it
// may be open. It returns allowed, whether this send is the half-open probe,
// and how long to wait when not allowed; ok is false when ctx ended.
func (p *Pacer) breakerAllow(ctx context.Context, key string, st *keyState, pol control.KeyPolicy, log *slog.Logger) (allowed, probe bool, wait time.Duration, ok bool) {
	st.mu.Lock()
	closed := st.breaker == adapt.BreakerClosed
	st.mu.Unlock()
	if closed {
		return true, false, 0, true
	}
	if bc, ok := p.adapter.(interface {
		BreakerClose(ctx context.Context, channel, key string) error
	}); ok && p.credentialReplaced(key, st) {
		if err := p.redis(ctx, log, func() error { return bc.BreakerClose(ctx, p.cfg.Channel, key) }); err != nil && !errors.Is(err, errRedisDown) {
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
		if errors.Is(err, errRedisDown) {
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

// utilization returns Σ achieved / Σ adapted rate over the keys of this
// process that had a record in hand in the last achievedOver (busy keys:
// their rate was the limit, not their demand); 0 when there are none.
func (p *Pacer) utilization() float64 {
	var got, allowed float64
	for _, c := range p.byClass() {
		got += c.achievedBusy
		allowed += c.allowedBusy
	}
	if allowed <= 0 {
		return 0
	}
	return got / allowed
}

// classSums are the sums behind pacer_utilization and pacer_rate_achieved
// for one key class.
type classSums struct {
	achieved     float64 // accepted msgs/s of the active keys
	achievedBusy float64 // the same, of the keys with a record in hand lately
	allowedBusy  float64 // adapted msgs/s of the keys with a record in hand lately
}

// keyClass names the class of a key with configured limit lim: its
// configured rate, such as "80/s" or "1000/s" (WhatsApp's throughput
// tiers). Few distinct values, so a bounded label.
func keyClass(lim bucket.Limit) string {
	return strconv.FormatFloat(lim.PerSecond, 'g', 6, 64) + "/s"
}

// byClass sums the keys of this process by key class.
func (p *Pacer) byClass() map[string]classSums {
	now := nowInstant()
	out := map[string]classSums{}
	p.keys.mu.Lock()
	defer p.keys.mu.Unlock()
	for _, st := range p.keys.m {
		st.mu.Lock()
		active := st.users > 0 || now.Sub(st.lastSeen) <= activeFor
		busy := (st.users > 0 || now.Sub(st.lastSeen) < achievedOver) && !st.mark.IsZero()
		if active || busy {
			k := keyClass(st.pol.Limit)
			c := out[k]
			if active {
				c.achieved += st.achieved
			}
			if busy {
				c.achievedBusy += st.achieved
				c.allowedBusy += st.adapted.Rate
			}
			out[k] = c
		}
		st.mu.Unlock()
	}
	return out
}

// classGauges is the collector of pacer_rate_achieved and
// pacer_utilization by key_class.
type classGauges struct {
	p                 *Pacer
	achieved, utilize *prometheus.Desc
}

func (c classGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.achieved
	ch <- c.utilize
}

func (c classGauges) Collect(ch chan<- prometheus.Metric) {
	for class, s := range c.p.byClass() {
		ch <- prometheus.MustNewConstMetric(c.achieved, prometheus.GaugeValue, s.achieved, class)
		u := 0.0
		if s.allowedBusy > 0 {
			u = s.achievedBusy / s.allowedBusy
		}
		ch <- prometheus.MustNewConstMetric(c.utilize, prometheus.GaugeValue, u, class)
	}
}

// keyGauges returns the per-channel gauges computed from the keys this
// process sent for in the last activeFor.
func (p *Pacer) keyGauges() []prometheus.Collector {
	sum := func(f func(st *keyState, now instant) float64) func() float64 {
		return func() float64 {
			now := nowInstant()
			p.keys.mu.Lock()
			defer p.keys.mu.Unlock()
			total := 0.0
			for _, st := range p.keys.m {
				st.mu.Lock()
				if st.users > 0 || now.Sub(st.lastSeen) <= activeFor {
					total += f(st, now)
				}
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
	g := func(name, help string, f func(st *keyState, now instant) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "pacer", Name: name, Help: help}, sum(f))
	}
	return []prometheus.Collector{
		g("keys_active", "Pacing keys this process sent for in the last 5 minutes.",
			func(*keyState, instant) float64 { return 1 }),
		g("rate_current", "Adapted rate summed over active pacing keys, in messages per second.",
			func(st *keyState, _ instant) float64 { return st.limit.PerSecond }),
		g("rate_configured", "Configured rate (the AIMD ceiling) summed over active pacing keys, in messages per second.",
			func(st *keyState, _ instant) float64 { return st.pol.Limit.PerSecond }),
		g("keys_cooldown", "Active pacing keys in a cooldown.",
			func(st *keyState, now instant) float64 { return b(st.cooldownUntil.After(now)) }),
		g("keys_at_floor", "Active pacing keys whose adapted rate is at the AIMD floor.",
			func(st *keyState, _ instant) float64 { return b(st.adapted.AtFloor) }),
		g("breakers_open", "Active pacing keys whose breaker is open or half-open.",
			func(st *keyState, _ instant) float64 { return b(st.breaker != adapt.BreakerClosed) }),
		classGauges{p: p,
			achieved: prometheus.NewDesc("pacer_rate_achieved",
				"Accepted sends per second summed over active pacing keys (each measured over at least 5 s), by key class (the keys' configured rate).",
				[]string{"key_class"}, nil),
			utilize: prometheus.NewDesc("pacer_utilization",
				"Achieved / allowed rate over the pacing keys that had messages in hand in the last 5 s, by key class (the keys' configured rate): accepted sends per second divided by their adapted rates. Near 1 when the pacer sends at the limit it was given; below it, sends stalled or slots lapsed.",
				[]string{"key_class"}, nil)},
	}
}
