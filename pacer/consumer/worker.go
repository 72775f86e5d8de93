package consumer

import (
	"bytes"
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/pacerhq/pacer/pacer/inflight"
	"github.com/pacerhq/pacer/pacer/park"
	"github.com/twmb/franz-go/pkg/kgo"
)

// worker owns one partition. Its records are dispatched into one FIFO
// queue per pacing key (the Kafka record key): each key has up to its
// in-flight bound of records handled at once (see [worker.inFlight]), so a
// key's backlog waits for its own slots and never for another key's. A
// key's records beyond its lookahead bound are parked (see [Pacer.park])
// instead of held, so the partition keeps moving and memory stays bounded.
//
// Offsets are marked for commit only up to the lowest record not yet
// finished (sent, parked, retried or dead-lettered), so a crash re-delivers
// and never skips.
type worker struct {
	p      *Pacer
	cl     *kgo.Client
	tp     tp
	ctx    context.Context // ends when the partition is revoked or the pacer stops
	cancel context.CancelFunc
	// parkCtx outlives ctx by up to Config.Drain: a park copy already on
	// its way when the partition is revoked is finished and committed
	// rather than written twice.
	parkCtx    context.Context
	parkCancel context.CancelFunc
	done       chan struct{}
	wg         sync.WaitGroup // handlers and parkers
	// handover is set before ctx ends when the partition is revoked (not
	// lost): its held records are parked before the commit, see parkHeld.
	handover atomic.Bool
	// backlogEnd bounds the records a previous owner may have handled (-1
	// before the worker's first fetch): those below it are read in the
	// ledger before they are queued (see [Pacer.skipKnown] and
	// [Pacer.horizons]). Poll loop only.
	backlogEnd int64
	// horizon is the partition's horizon this worker knows is recorded
	// (-1: none): it records a higher one before it handles a record at or
	// past it (see [Pacer.horizons]). Poll loop only.
	horizon int64
	// rereadEnd bounds the records a previous owner may have handled, as
	// tightly as known (the stop horizon of an owner that stopped cleanly,
	// else backlogEnd): those below it are read again, not published again
	// (see meta.reread). Poll loop only.
	rereadEnd int64
	// stopHorizon is the stop horizon to record when the worker stops
	// cleanly (see [Pacer.tightenHorizons]): one more than the highest
	// offset it fetched, and at least its rereadEnd; 0 before its first
	// push.
	stopHorizon atomic.Int64

	// commit is the offset to mark for commit once the ledger's marks
	// before it are written (see [worker.markCommit]).
	commit commitMark

	mu      sync.Mutex
	stopped bool
	log     []*pending           // records not yet committed, in offset order
	keys    map[string]*keyQueue // pacing key -> its queue; removed when empty
	// keysPeak is the most queues keys held since it was made: forget
	// makes it anew once it holds a quarter of that or less (a Go map
	// keeps the space of deleted entries).
	keysPeak int
	held     int               // records in key queues (waiting or being handled)
	parking  int               // park copies being written
	paused   bool              // the partition is paused at the client
	chains   map[string]*chain // strict order: pacing key -> its live chain (see [chain])
}

// pending is one fetched record until its offset is marked for commit.
// Once finished it keeps only the offset: the value may be large, and the
// entry may wait in the log behind a slower record.
type pending struct {
	r        *kgo.Record        // nil once finished
	env      *envelope.Envelope // r's envelope if parsed before it is handled (see fetched.envs), until it is
	offset   int64
	epoch    int32
	finished bool
}

// keyQueue is one pacing key's records in a partition, in offset order:
// two FIFOs, high-priority records first.
type keyQueue struct {
	key string
	// answers follows the provider's answer times to this key's sends
	// from this queue: they size its in-flight bound (see inFlight).
	answers inflight.Estimator
	waiting []*kgo.Record // not started yet
	entries []*pending    // the pending of each waiting record
	// dues is when each waiting record may start: its pacer-due, or when
	// it was fetched. Except in strict order, waiting is kept in due order
	// (records due alike in fetch order) and a record starts only once
	// due, so a copy due now never waits for an InFlight place held by
	// copies sleeping until later.
	dues    []time.Time
	timer   *time.Timer   // dispatches the head of waiting when it falls due
	timed   time.Time     // when timer fires
	high    []*kgo.Record // priority high, not started yet: they start before waiting
	highE   []*pending
	running int // being handled
	runHigh int // of which priority high
	// placeQueued: q waits in [places] for a place for its next record;
	// placeServed: q is being dispatched with a freed place (see places.put).
	placeQueued, placeServed bool
	// parkedUntil is the estimated slot of the last record parked for
	// this key by this worker: the next parked record is due one slot later.
	parkedUntil time.Time
	parkRate    float64   // msgs/s parkedUntil was estimated at
	rate        float64   // msgs/s, adapted, read once per fetched batch: the bound
	ceil        float64   // msgs/s, the key's ceiling, read with rate: the slot estimates
	seen        time.Time // the batch rate was read for
}

func (q *keyQueue) size() int { return len(q.waiting) + len(q.high) + q.running }

// highPriority reports whether r's envelope has priority high. Only a
// value that mentions "priority" is parsed, so a normal record costs one
// byte search.
func highPriority(r *kgo.Record) bool {
	if !bytes.Contains(r.Value, []byte(`"priority"`)) {
		return false
	}
	env, err := envelope.Parse(r.Value)
	return err == nil && env.High()
}

func newWorker(p *Pacer, cl *kgo.Client, k tp) *worker {
	ctx, cancel := context.WithCancel(context.Background())
	parkCtx, parkCancel := context.WithCancel(context.Background())
	return &worker{p: p, cl: cl, tp: k, ctx: ctx, cancel: cancel, parkCtx: parkCtx, parkCancel: parkCancel,
		done: make(chan struct{}), keys: map[string]*keyQueue{}, chains: map[string]*chain{}, backlogEnd: -1, rereadEnd: -1, horizon: -1}
}

// keyRates returns key's rate and ceiling in msgs/s as this process knows
// them: the rate adapted (by AIMD and the key's policy) if the key was sent
// for lately, and the ceiling, its policy's rate once read; each the
// channel's default until known. Parked records are due at slots
// estimated at the ceiling: an adapted rate lowered by throttles would put
// them later than the key, recovering, can send them, and its queue would
// run dry meanwhile; too early, they are held once their slot is within
// the lookahead.
func (p *Pacer) keyRates(key string) (rate, ceiling float64) {
	return p.keys.Rates(key)
}

// keyRate is the rate of [Pacer.keyRates].
func (p *Pacer) keyRate(key string) float64 {
	r, _ := p.keyRates(key)
	return r
}

// keyBound is how many records of a key at rate msgs/s one partition holds
// in memory: Config.Lookahead of its rate, at least inFlight (the key's
// in-flight bound).
func (p *Pacer) keyBound(rate float64, inFlight int) int {
	n := int(math.Ceil(rate * p.cfg.Lookahead.Seconds()))
	return max(n, inFlight)
}

// inFlight is how many of q's records may be handled at once: 1 in strict
// order, else the key's bound by Little's law over its answer times (see
// [keypace.Keys.InFlight]), at most Config.InFlight. Callers hold w.mu.
func (w *worker) inFlight(q *keyQueue) int {
	if w.p.strict() {
		return 1
	}
	return w.p.keys.InFlight(q.key, &q.answers, w.p.cfg.InFlight)
}

// strict reports whether every key's records are sent one at a time in
// offset order (InFlight 1): such a key is parked only in a [chain], which
// keeps that order.
func (p *Pacer) strict() bool { return p.cfg.InFlight == 1 }

// maxHeld is how many records one partition holds before it parks a
// key's records within the key's own bound: twice MaxQueued. Fetching
// pauses at MaxQueued and resumes at half, and the fetches already on
// their way when it pauses bring up to FetchMaxPartitionBytes more each
// (about 1,300 envelopes of 100 bytes uncompressed, 4,000 to 7,000 in a
// compressed batch): parking those at once, to read them back from a
// retry topic soon after, cost one Kafka write and read each and most of
// a send's CPU (200 keys with backlogs in 12 partitions parked 1.75
// copies per message delivered). So push holds a whole fetch that was
// asked for while the partition held less than maxHeld, and parks only
// from a fetch that comes once it holds maxHeld.
func (p *Pacer) maxHeld() int { return 2 * p.cfg.MaxQueued }

// syncPause pauses fetching the partition while it holds MaxQueued records
// and resumes it at half. Park copies being written do not pause it: the
// client's produce buffer (10,000 records) bounds them, and a paused
// partition waits for the next fetch request once resumed.
// Callers hold w.mu.
func (w *worker) syncPause() {
	want := w.paused
	switch {
	case w.held >= w.p.cfg.MaxQueued:
		want = true
	case w.held <= w.p.cfg.MaxQueued/2:
		want = false
	}
	if want == w.paused || w.stopped {
		return
	}
	w.paused = want
	parts := map[string][]int32{w.tp.topic: {w.tp.partition}}
	if want {
		w.cl.PauseFetchPartitions(parts)
	} else {
		w.cl.ResumeFetchPartitions(parts)
	}
}

// push takes fetched records: each joins its key's queue, or is parked
// when the key already holds its bound (or the partition twice its
// MaxQueued, see maxHeld, and the key at least InFlight) and the record is
// due. A record not yet due
// (a retry or parked copy) is held: parking it again would only move it.
// A record whose skip is true was handled already (see [Pacer.skipKnown]):
// it is finished at once as a duplicate, taking no slot; skip may be nil.
func (w *worker) push(rs []*kgo.Record, skip []bool, envs []envelope.Envelope) {
	type parkJob struct {
		key   string
		e     *pending
		r     *kgo.Record
		due   time.Time
		rate  float64 // msgs/s due was estimated at; 0: not an estimate
		chain *chain  // strict order: parked in this chain
	}
	var jobs []parkJob
	now := time.Now()
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	w.p.m.queued.WithLabelValues().Add(float64(len(rs)))
	if len(rs) > 0 {
		w.stopHorizon.Store(max(w.stopHorizon.Load(), w.rereadEnd, rs[len(rs)-1].Offset+1))
	}
	// A fetch asked for while the partition held fewer than maxHeld
	// records is held whole: one fetch is bounded in bytes
	// (FetchMaxPartitionBytes, compressed), and a first fetch of a backlog
	// brings thousands of small envelopes at once.
	heldBefore := w.held
	for i, r := range rs {
		e := &pending{r: r, offset: r.Offset, epoch: r.LeaderEpoch}
		if envs != nil && envs[i].ID != "" {
			e.env = &envs[i]
		}
		w.log = append(w.log, e)
		if skip != nil && skip[i] {
			w.finish(e)
			w.p.m.duplicates.WithLabelValues().Inc()
			w.p.tally.count(duplicate)
			// Looked up because a previous owner may have handled it
			// (below backlogEnd), but fetched by none before (at or past
			// rereadEnd): a record published again.
			if e.env != nil && r.Offset >= w.rereadEnd && envelope.Header(r, envelope.HeaderReread) == "" && envelope.Header(r, envelope.HeaderReplayed) != "1" {
				w.p.countDuplicate(e.env.Campaign)
			}
			continue
		}
		if r.Offset < w.rereadEnd && envelope.Header(r, envelope.HeaderReread) == "" {
			// Read again: a previous owner may have handled it. Its
			// handling and its copies know it (meta.reread).
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: envelope.HeaderReread, Value: []byte("1")})
		}
		if len(r.Key) == 0 {
			// A record published without a key (a producer of its own)
			// is queued, and its retry and parked copies partitioned, by
			// its envelope's pacing key: keyless records must not share
			// one queue. A record that does not parse keeps no key and is
			// dead-lettered as malformed when handled.
			if env, err := envelope.Parse(r.Value); err == nil {
				r.Key = []byte(env.Key)
			}
		}
		k := string(r.Key)
		q := w.keys[k]
		if q == nil {
			q = &keyQueue{key: k}
			w.keys[k] = q
			w.keysPeak = max(w.keysPeak, len(w.keys))
		}
		if q.seen != now {
			q.seen = now
			q.rate, q.ceil = w.p.keyRates(k)
		}
		if !w.p.strict() && highPriority(r) {
			// Ahead of the key's normal records, never parked behind them.
			q.high = append(q.high, r)
			q.highE = append(q.highE, e)
			w.held++
			w.dispatch(q)
			continue
		}
		n := w.inFlight(q)
		full := heldBefore >= w.p.maxHeld() && q.size() >= n
		over := q.size() >= w.p.keyBound(q.rate, n) || full
		if w.p.strict() && w.tp.topic == w.p.cfg.Topic {
			// Once a strict key parks, all its later records follow in its
			// chain, in offset order, until the chain is empty.
			c := w.chains[k]
			if c == nil && over {
				c = w.startChain(k)
			}
			if c != nil {
				c.pend[e.offset] = e
				jobs = append(jobs, parkJob{key: k, e: e, r: r, chain: c})
				continue
			}
		}
		if over && !w.p.strict() && !readMeta(r).due.After(now) {
			// A copy back from parking is held once its own slot is within
			// the lookahead (its key's bound counts the records ahead of
			// it, not behind); before that it is parked again for the same
			// slot. Only a full partition parks it behind the key's others.
			slot, back := park.SlotOf(r)
			was := park.RateOf(r)
			if back && was > 0 && slot.After(now) {
				// The key's rate rose since the slot was estimated (`pacer
				// limit set`): the records ahead of it drain faster from now.
				slot = park.Rescale(slot, now, was, max(q.rate, q.ceil))
				was = max(was, q.rate, q.ceil)
			}
			switch {
			case back && !full && !slot.After(now.Add(w.p.cfg.Lookahead)):
			case back && !full:
				jobs = append(jobs, parkJob{key: k, e: e, r: r, due: slot, rate: was})
				continue
			default:
				due, rate := w.slotAfter(q, now)
				jobs = append(jobs, parkJob{key: k, e: e, r: r, due: due, rate: rate})
				continue
			}
		}
		q.enqueue(r, e, now, w.p.strict())
		w.held++
		w.dispatch(q)
	}
	w.parking += len(jobs)
	w.wg.Add(len(jobs))
	w.syncPause()
	w.mu.Unlock()
	for _, j := range jobs {
		if j.chain != nil {
			w.p.parkChained(w.parkCtx, j.r, j.chain, func(copied, ok bool) { w.chainParked(j.chain, j.e, copied, ok) })
			continue
		}
		w.p.parkAsync(w.parkCtx, j.r, j.due, j.rate, func(ok bool) { w.parked(j.key, j.e, ok) })
	}
}

// slotAfter estimates when the next record of q's key to be parked will
// get its slot at the key's ceiling (see [Pacer.keyCeiling]), after those
// held and those parked before it (their slots moved earlier if the
// ceiling rose since), and the rate in msgs/s it was estimated at.
// Callers hold w.mu.
func (w *worker) slotAfter(q *keyQueue, now time.Time) (time.Time, float64) {
	rate := max(q.rate, q.ceil)
	if q.parkedUntil.After(now) {
		q.parkedUntil = park.Rescale(q.parkedUntil, now, q.parkRate, rate)
	}
	q.parkRate = rate
	per := time.Duration(float64(time.Second) / rate)
	due := now.Add(time.Duration(q.size()) * per)
	if next := q.parkedUntil.Add(per); next.After(due) {
		due = next
	}
	q.parkedUntil = due
	return due, rate
}

// dispatch starts q's records while the key has fewer than its in-flight
// bound being handled (see [worker.inFlight]): high ones first, and high
// ones up to that bound of their own, so a key's normal records already
// waiting for slots never keep a high one from starting (it then takes
// the next slot: see [keypace.Key.Slot]). Callers hold w.mu.
func (w *worker) dispatch(q *keyQueue) {
	if w.stopped || len(q.high)+len(q.waiting) == 0 {
		return
	}
	n := w.inFlight(q)
	for !w.stopped && q.runHigh < n && len(q.high) > 0 {
		if !w.place(q) {
			return
		}
		r, e := q.high[0], q.highE[0]
		q.high[0], q.highE[0] = nil, nil
		q.high, q.highE = q.high[1:], q.highE[1:]
		q.running++
		q.runHigh++
		w.wg.Add(1)
		env := e.env // taken under w.mu, as push set it
		e.env = nil
		w.p.handlers.Go(func() { w.handleOne(q, r, e, env, true) })
	}
	now := time.Now()
	for !w.stopped && q.running-q.runHigh < n && len(q.waiting) > 0 {
		if !w.p.strict() && q.dues[0].After(now) && !w.rateRose(q.waiting[0]) && !w.p.resumed(q.waiting[0]) && !w.p.parkedRoom(q.waiting[0]) {
			wake := q.dues[0]
			if park.RateOf(q.waiting[0]) > 0 || envelope.Header(q.waiting[0], envelope.HeaderPaused) != "" {
				// A parked copy: its key's rate, room (or its campaign's
				// state) is looked at again each second, so a raise, room
				// (a resume) starts it early (see rateRose, parkedRoom,
				// Pacer.resumed); between, each record of the key that
				// finishes looks again.
				wake = minTime(wake, now.Add(time.Second))
			}
			w.wake(q, wake)
			return
		}
		if !w.place(q) {
			return
		}
		r, e := q.waiting[0], q.entries[0]
		q.waiting[0], q.entries[0] = nil, nil
		q.waiting, q.entries, q.dues = q.waiting[1:], q.entries[1:], q.dues[1:]
		q.running++
		w.wg.Add(1)
		env := e.env
		e.env = nil
		w.p.handlers.Go(func() { w.handleOne(q, r, e, env, false) })
	}
}

// enqueue adds r (its log entry e, fetched at now) to q's waiting records:
// at the end in strict order, else after every record due no later.
// rateRose reports whether r is a parked copy whose key's rate (adapted
// or ceiling) rose above the rate its slot was estimated at: it starts
// before its due time, and park.UntilDue moves that due time earlier.
func (w *worker) rateRose(r *kgo.Record) bool {
	was := park.RateOf(r)
	if was <= 0 {
		return false
	}
	k := string(r.Key)
	rate, ceiling := w.p.keyRates(k)
	return max(rate, ceiling) > was
}

// parkedRoom reports whether r is a parked copy (one carrying the rate its
// slot was estimated at) whose key has room for it now (see
// [Pacer.keyRoom]): it starts before its due time.
func (p *Pacer) parkedRoom(r *kgo.Record) bool {
	return park.RateOf(r) > 0 && p.keyRoom(string(r.Key))
}

// keyRoom reports whether key has room for a parked copy before its due
// time (see [park.UntilDue]): fewer of its records wait for slots in this
// process than the slots its adapted rate grants in a park.Recheck, plus
// one. Such a key would leave slots unused before the copy looks again.
func (p *Pacer) keyRoom(key string) bool {
	rate := p.keyRate(key)
	return p.keys.SlotWaiters(key) < int(math.Ceil(rate*park.Recheck.Seconds()))+1
}

// minTime returns the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func (q *keyQueue) enqueue(r *kgo.Record, e *pending, now time.Time, strict bool) {
	due := readMeta(r).due
	if due.Before(now) {
		due = now
	}
	i := len(q.dues)
	if !strict {
		for i > 0 && q.dues[i-1].After(due) {
			i--
		}
	}
	q.waiting = slices.Insert(q.waiting, i, r)
	q.entries = slices.Insert(q.entries, i, e)
	q.dues = slices.Insert(q.dues, i, due)
}

// wake dispatches q again at at, unless it is woken sooner already.
// Callers hold w.mu.
func (w *worker) wake(q *keyQueue, at time.Time) {
	if q.timer != nil && !q.timed.After(at) {
		return
	}
	if q.timer != nil {
		q.timer.Stop()
	}
	q.timed = at
	q.timer = time.AfterFunc(time.Until(at), func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if q.timed.Equal(at) {
			q.timer = nil
		}
		w.dispatch(q)
	})
}

// place takes a place in the process's bound of records handled at once
// (see [places]) for q's next record, or queues q for one; in strict order
// (no bound) it always succeeds. Callers hold w.mu.
func (w *worker) place(q *keyQueue) bool {
	return w.p.places == nil || w.p.places.take(w, q)
}

// handleOne handles r (its log entry e; env its envelope if parsed
// already, else nil) and gives its place back.
func (w *worker) handleOne(q *keyQueue, r *kgo.Record, e *pending, env *envelope.Envelope, high bool) {
	defer w.wg.Done()
	ok := w.handleCopy(r, env, &q.answers)
	if w.p.places != nil {
		// Freed once this key's queue has asked again (behind the queues
		// waiting already), so a place goes round the keys.
		defer w.p.places.put()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	q.running--
	if high {
		q.runHigh--
	}
	w.held--
	if ok {
		// Not finished (stopped first): it stays in the log, so nothing
		// past it is ever marked.
		w.finish(e)
	}
	w.dispatch(q)
	w.chainReady(string(r.Key))
	w.forget(string(r.Key), q)
	w.syncPause()
}

// handleCopy handles r as [Pacer.handle] does (answers takes its answer
// time); a strict key's chain copy
// (see [chain]) first waits until its chain is ready, is dropped unsent if
// its chain is not live, and once finished finishes its main entry.
func (w *worker) handleCopy(r *kgo.Record, env *envelope.Envelope, answers *inflight.Estimator) bool {
	if w.tp.topic == w.p.cfg.Topic {
		return w.p.handle(w, r, env, answers)
	}
	c, off, isCopy := w.p.liveChain(r)
	if !isCopy {
		return w.p.handle(w, r, env, answers)
	}
	if c != nil {
		select {
		case <-c.ready:
		case <-c.dead:
			c = nil
		case <-w.ctx.Done():
			return false
		}
	}
	if c == nil {
		w.p.qm.staleCopies.Inc()
		w.p.log.Debug("parked copy of an ended chain dropped: its record is sent or read again from the main partition",
			"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "chain", envelope.Header(r, envelope.HeaderChain))
		return true
	}
	if !w.p.handle(w, r, env, answers) {
		return false
	}
	c.w.mu.Lock()
	c.w.chainFinished(c, off)
	c.w.mu.Unlock()
	return true
}

// chainParked takes the outcome of writing e's chain copy: nothing is
// finished when the copy was written (its main entry waits for the copy,
// see [chain]); a record dead-lettered instead is finished.
func (w *worker) chainParked(c *chain, e *pending, copied, ok bool) {
	defer w.wg.Done()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.parking--
	if !copied && ok {
		w.chainFinished(c, e.offset)
	}
	w.syncPause()
}

// parked takes the outcome of parking e: finished once Kafka acknowledged
// its copy.
func (w *worker) parked(key string, e *pending, ok bool) {
	defer w.wg.Done()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.parking--
	if ok {
		w.finish(e)
	}
	if q := w.keys[key]; q != nil {
		w.forget(key, q)
	}
	w.syncPause()
}

// forget drops q once it holds nothing and its parked records' estimated
// slots have passed. Callers hold w.mu.
func (w *worker) forget(key string, q *keyQueue) {
	if q.size() == 0 && !q.parkedUntil.After(time.Now()) && w.keys[key] == q {
		delete(w.keys, key)
		if w.keysPeak >= shrinkFrom && len(w.keys) <= w.keysPeak/4 {
			m := make(map[string]*keyQueue, len(w.keys))
			for k, q := range w.keys {
				m[k] = q
			}
			w.keys, w.keysPeak = m, len(m)
		}
	}
}

// parkHeld parks the records w still holds unsent, once its handlers have
// stopped, and finishes them, so the commit of the revoke moves past every
// record fetched. Without it the commit stops at the key's oldest held
// record, and the partition's next owner reads again, and parks again,
// every record parked after it: with a backlog, most of the partition.
// Each key's held records are due one slot apart from now. Only for a main
// partition: a retry tier's held records are mostly copies not yet due,
// which the next owner reads again at no write, and the records after them
// were mostly not sent yet. Not in strict order (a held record is older
// than the key's chain), and not for a lost partition (another member may
// be handling it already).
func (w *worker) parkHeld(deadline time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	type job struct {
		e *pending
		c *kgo.Record
	}
	var jobs []job
	now := time.Now()
	n := map[string]int{}
	w.mu.Lock()
	for _, e := range w.log {
		if e.finished || e.r == nil {
			continue
		}
		k := string(e.r.Key)
		rate := w.p.keyRate(k)
		if q := w.keys[k]; q != nil && q.rate > 0 {
			rate = q.rate
		}
		due := now.Add(time.Duration(float64(n[k]) / rate * float64(time.Second)))
		n[k]++
		if d := readMeta(e.r).due; d.After(due) {
			due = d // a retry keeps its backoff
		}
		c, _ := w.p.parkCopy(e.r, due, rate)
		jobs = append(jobs, job{e, c})
	}
	w.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(len(jobs))
	for _, j := range jobs {
		w.p.cl.Produce(ctx, j.c, func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				return // not finished: read again by the next owner
			}
			w.p.qm.parked.Inc()
			w.p.wrote("park", j.c.Topic)
			w.mu.Lock()
			w.finish(j.e)
			w.mu.Unlock()
		})
	}
	wg.Wait()
}

// finish records that e's record is finished and marks for commit the
// longest run of finished records at the head of the log. Callers hold
// w.mu.
func (w *worker) finish(e *pending) {
	e.finished = true
	e.r = nil
	w.p.m.queued.WithLabelValues().Dec()
	var last *pending
	n := 0
	for n < len(w.log) && w.log[n].finished {
		last = w.log[n]
		w.log[n] = nil
		n++
	}
	w.log = w.log[n:]
	if len(w.log) == 0 {
		// Let go of the array: emptied by slicing, it stays as large as
		// the partition's largest burst (2.1 MB over 12 partitions after
		// 100,000 records).
		w.log = nil
	}
	if last != nil {
		// Marked once the ledger's marks of the records before it are
		// written: a commit never passes a delivered mark.
		w.markCommit(&kgo.Record{Topic: w.tp.topic, Partition: w.tp.partition, Offset: last.offset, LeaderEpoch: last.epoch})
	}
}

// commitMark is a worker's offset waiting for the ledger's marks to be
// written before it is marked for commit.
type commitMark struct {
	mu      sync.Mutex
	want    *kgo.Record // the latest finished head, nil once marked
	waiting bool        // a waiter of the ledger will mark it
}

// markCommit marks r's offset for commit once the ledger's marks made so
// far (those of r's records among them) are written. One waiter per
// worker at a time: when it
// fires it marks the head it was given and, if the head moved meanwhile,
// waits again for the new one, so a partition holds one closure however
// long Redis is away.
func (w *worker) markCommit(r *kgo.Record) {
	c := &w.commit
	c.mu.Lock()
	c.want = r
	if c.waiting {
		c.mu.Unlock()
		return
	}
	c.waiting = true
	c.mu.Unlock()
	w.p.afterWritten(func() { w.marked(r) })
}

// marked marks r, whose records' marks are written, and waits for the
// next head if there is one.
func (w *worker) marked(r *kgo.Record) {
	w.cl.MarkCommitRecords(r)
	c := &w.commit
	c.mu.Lock()
	next := c.want
	if next == r {
		c.want, c.waiting = nil, false
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	w.p.afterWritten(func() { w.marked(next) })
}

// commitHead returns the head waiting to be marked for commit, or nil.
func (w *worker) commitHead() *kgo.Record {
	c := &w.commit
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.want
}

func (w *worker) run() {
	defer close(w.done)
	<-w.ctx.Done()
	deadline := time.Now().Add(w.p.cfg.Drain)
	w.mu.Lock()
	w.stopped = true
	w.endChains()
	w.mu.Unlock()
	// In-flight sends finish (bounded by SendTimeout) and park copies are
	// acknowledged (bounded by Drain) before done.
	t := time.AfterFunc(w.p.cfg.Drain, w.parkCancel)
	w.wg.Wait()
	t.Stop()
	if w.handover.Load() && !w.p.strict() && w.tp.topic == w.p.cfg.Topic {
		w.parkHeld(deadline)
	}
	w.parkCancel()
	w.mu.Lock()
	unfinished := 0
	for _, e := range w.log {
		if !e.finished {
			unfinished++
		}
	}
	w.log, w.keys, w.held = nil, nil, 0
	w.mu.Unlock()
	w.p.m.queued.WithLabelValues().Sub(float64(unfinished))
}
