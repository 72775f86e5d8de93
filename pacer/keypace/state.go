package keypace

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
)

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

// achievedOver is the shortest span over which a key's achieved rate (the
// numerator of pacer_utilization) is measured.
const achievedOver = 5 * time.Second

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
	pol           *KeyPolicy // shared with every key of the same policy (see Keys.def)
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

// current returns the key's adapted limit and policy as last read (no
// Redis call), or lim and pol while the key has not been read yet: a
// sender that waited (for a place among the key's senders, a slot) uses
// the key's limit of now, not the one it read before its wait, so no slot
// is reserved at a rate the key no longer has. It also returns how long
// from now the key's new slots wait after a raise (see
// keyRare.raisedAfter), 0 when they do not.
func (st *keyState) current(lim bucket.Limit, pol KeyPolicy, now instant) (bucket.Limit, KeyPolicy, time.Duration) {
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
