package keypace

import (
	"context"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/pacerhq/pacer/bucket/adapt"
)

// activeFor is how long a key counts in the per-channel gauges after its
// last message in this process; an idle key's state is freed (and its
// unused leased slots given back) by the sweep that runs every SweepEvery.
const (
	activeFor  = 5 * time.Minute
	SweepEvery = time.Minute
)

// Keys is the pacing keys of one channel in this process: the state of
// each key this process handles (see [Key]), what it needs of the
// pacer ([Config]), and the cooldowns of the channel's accounts. Idle keys are
// dropped by [Keys.Sweep]. Make it with [New]; it is safe for concurrent
// use.
type Keys struct {
	cfg      Config
	bucket   Bucket
	fallback Bucket
	adapter  Adapter
	policy   Policy
	mt       Metrics
	// policyDefault is the channel's policy from Config: a key's policy
	// until its first read of Policy.
	policyDefault StaticPolicy
	accounts      accounts

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
	def *KeyPolicy
	// slab is the rest of the block new states are cut from (see
	// keyStateBlock).
	slab []keyState
	// text is the block the keys of m are copied into (see keyTextBlock):
	// its bytes up to len are keys, never written again.
	text []byte

	// throttleCount counts, per key of m the provider throttled through this
	// process (every scope), its throttles: a map of the few keys
	// throttled rather than 8 bytes more in every key's state
	// (TestKeyStateBytes); an entry goes with its key's state at a sweep.
	// thMu guards it, taken after mu when both are.
	thMu          sync.Mutex
	throttleCount map[string]uint64
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
func (ks *Keys) newState() *keyState {
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
func (ks *Keys) keyText(key string) string {
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
func (p *Keys) keyState(key string) *keyState {
	p.mu.RLock()
	if st := p.m[key]; st != nil { // a key in use: sweep waits for the read lock
		st.mu.Lock()
		st.seen(nowInstant())
		st.users++
		st.mu.Unlock()
		p.mu.RUnlock()
		return st
	}
	p.mu.RUnlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.m[key]
	if st == nil {
		if def := KeyPolicy(p.policyDefault); p.def == nil || *p.def != def {
			p.def = &def
		}
		pol := p.def
		st = p.newState()
		st.pol, st.limit = pol, pol.Limit
		st.adapted = adapt.Adapted{Rate: pol.Limit.PerSecond, Ceiling: pol.Limit.PerSecond}
		p.m[p.keyText(key)] = st
		p.peak = max(p.peak, len(p.m))
	}
	st.mu.Lock()
	st.seen(nowInstant())
	st.users++
	st.mu.Unlock()
	return st
}

// Get returns key's hold for a record to recipient to, counting one more
// record of the key in hand until [Key.Done].
func (p *Keys) Get(key, to string) Key {
	return Key{ks: p, st: p.keyState(key), name: key, to: to}
}

// done counts one record of st's key as no longer in hand; the last one
// trims the key's state. It takes st.mu only: sweep reads users under it,
// and frees a state only once it reads 0 (after this, which touches st no
// more).
func (ks *Keys) done(st *keyState) {
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

// Sweep frees the state of keys idle for longer than activeFor at now (no
// record in hand), giving back their leased slots that have not started, and
// reports how many it freed. The pacer calls it every SweepEvery, so memory
// follows the keys in use, not every key ever seen.
func (p *Keys) Sweep(ctx context.Context, now time.Time) int {
	var idle []*keyState
	at := instantOf(now)
	p.mu.Lock()
	for k, st := range p.m {
		st.mu.Lock()
		if st.users == 0 && at.Sub(st.lastSeen) > activeFor {
			delete(p.m, k)
			p.forgetThrottles(k)
			idle = append(idle, st)
		} else if st.users == 0 {
			st.trim(now) // a dispenser whose slots lapsed since the key's last record
		}
		st.mu.Unlock()
	}
	if p.peak >= shrinkFrom && len(p.m) <= p.peak/4 {
		m := make(map[string]*keyState, len(p.m))
		for k, st := range p.m {
			m[k] = st
		}
		p.m, p.peak = m, len(m)
	}
	p.mu.Unlock()
	for _, st := range idle {
		st.dropLease(ctx)
	}
	if len(idle) >= freeOSFrom {
		// Give the freed pages back now rather than over the next minutes
		// (the runtime returns idle heap gradually), so the RSS of a burst
		// of keys' state does not outlast it. A full GC at most once per
		// SweepEvery.
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

// Activity is one active pacing key as this process sees it, for a
// status page that adds up every replica's view. 40 bytes: a publisher
// keeps one per active key between its readings.
type Activity struct {
	Key string
	// Delivered counts the key's messages the provider accepted through
	// this process since the key became active here (it restarts from 0
	// when an idle key's state is freed); a reader derives the achieved
	// rate from two readings.
	Delivered uint64
	// Throttled counts the provider's throttles of the key's sends
	// through this process (every scope: key, pair, account), from the
	// same start as Delivered.
	Throttled uint64
	// InHand is the key's records this process is handling now: fetched,
	// not yet finished (waiting for a token, being sent).
	InHand int
}

// AppendActive appends to dst the keys this process handled in the last
// activeFor (or has records of in hand), in no particular order, and
// returns the extended slice: a caller that reads every few seconds
// passes its last result's dst[:0] and makes no garbage. It takes the key
// table's lock briefly and calls neither Redis nor Kafka.
func (p *Keys) AppendActive(dst []Activity) []Activity {
	now := nowInstant()
	p.mu.Lock()
	p.thMu.Lock()
	out := slices.Grow(dst, len(p.m))
	for k, st := range p.m {
		st.mu.Lock()
		if st.users > 0 || now.Sub(st.lastSeen) <= activeFor {
			out = append(out, Activity{Key: k, Delivered: st.delivered.Load(), Throttled: p.throttleCount[k], InHand: int(st.users)})
		}
		st.mu.Unlock()
	}
	p.thMu.Unlock()
	p.mu.Unlock()
	return out
}

// SlotWaiters returns how many of key's normal records wait for a slot in
// this process now (in Slot: for a token, a lease's slot, a cooldown's
// end), 0 for a key it holds no state of. It takes the key table's lock
// briefly and calls neither Redis nor Kafka.
func (p *Keys) SlotWaiters(key string) int {
	p.mu.Lock()
	st := p.m[key]
	p.mu.Unlock()
	if st == nil {
		return 0
	}
	return int(st.normalWaiting.Load())
}

// forgetThrottles drops key's count with its state; callers hold p.mu.
func (p *Keys) forgetThrottles(key string) {
	p.thMu.Lock()
	delete(p.throttleCount, key)
	if len(p.throttleCount) == 0 {
		p.throttleCount = nil // a Go map keeps the space of its deleted entries
	}
	p.thMu.Unlock()
}

// Rates returns key's rate and ceiling in msgs/s as this process knows
// them: the rate adapted (by AIMD and the key's policy) if the key was
// sent for lately, and the ceiling, its policy's rate once read; each the
// channel's default until known. It never calls Redis.
func (p *Keys) Rates(key string) (rate, ceiling float64) {
	def := p.policyDefault.Limit.PerSecond
	p.mu.Lock()
	st := p.m[key]
	p.mu.Unlock()
	if st == nil {
		return def, def
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	rate, ceiling = st.limit.PerSecond, st.pol.Limit.PerSecond
	if rate <= 0 {
		rate = def
	}
	if ceiling <= 0 {
		ceiling = def
	}
	return rate, ceiling
}
