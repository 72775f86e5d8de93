package consumer

import (
	"context"
	"errors"
	"time"

	"github.com/pacerhq/pacer/pacer/park"
	"github.com/twmb/franz-go/pkg/kgo"
)

// parkCopy returns the copy of r that parks it until slot, the estimated
// start of its slot (the caller passes the slot a copy already carries to
// park it again for the same), or sooner: on the park lane or retry tier
// [Pacer.parkTopic] picks. A copy that comes back due before its slot is
// within the lookahead is parked again, due at the same slot (one Kafka
// write and read per hop: on a lane one hop, on the default 5s,30s,5m
// tiers 4 for a record 20 minutes behind its key's backlog). The attempt and requeue counts are
// unchanged; pacer-parks counts the hops. rate, if > 0, is the key's rate
// in msgs/s slot was estimated at (envelope.HeaderParkRate), so a raise of
// the key's rate takes the copy early (see [park.UntilDue]); 0 writes none.
func (p *Pacer) parkCopy(r *kgo.Record, slot time.Time, rate float64) (*kgo.Record, meta) {
	m := readMeta(r)
	topic, after := p.parkTopic(r, slot, rate)
	m.due = time.Now().Add(after)
	h := park.Headers(m.parks+1, slot)
	if rate > 0 {
		h = append(h, park.RateHeader(rate))
	}
	return &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value,
		Headers: m.headers(r, h...)}, m
}

// park writes r's park copy (see parkCopy) and returns true once Kafka
// acknowledged it (or its DLQ copy, if too large for the retry topic),
// false if ctx ended first. rate is parkCopy's.
func (p *Pacer) park(ctx context.Context, r *kgo.Record, due time.Time, rate float64) bool {
	log := p.log.With("topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
	c, m := p.parkCopy(r, due, rate)
	if err := p.produce(ctx, c, log); err != nil {
		if errors.Is(err, errTooLarge) {
			return p.deadLetter(ctx, r, m, "too-large", "the parked copy exceeds the broker's message size", log)
		}
		return false
	}
	p.qm.parked.Inc()
	kind := "defer" // not_before, a paused campaign
	if rate > 0 {
		kind = "park"
	}
	p.wrote(kind, c.Topic)
	return true
}

// parkAsync is park without waiting: the copy joins the client's produce
// batches (a backlog of 100,000 records is parked in seconds, not one
// round trip each), and done(ok) is called once it is acknowledged; a copy
// that failed is written again by park, in a goroutine. It may block while
// the client's produce buffer is full, so callers hold no lock.
//
// The copy carries rate, the key's rate in msgs/s its due time was
// estimated at (its ceiling, or its adapted rate if higher), so a raise of
// the key's rate takes it early (see [park.UntilDue]). It is the rate the
// estimate used, not the key's rate when the copy is written: a key whose
// limit was loaded meanwhile would otherwise carry a slot spaced at the
// channel's default under its own higher rate, and never be taken early.
func (p *Pacer) parkAsync(ctx context.Context, r *kgo.Record, due time.Time, rate float64, done func(ok bool)) {
	c, _ := p.parkCopy(r, due, rate)
	p.cl.Produce(ctx, c, func(_ *kgo.Record, err error) {
		if err == nil {
			p.qm.parked.Inc()
			p.wrote("park", c.Topic)
			done(true)
			return
		}
		go func() { done(p.park(ctx, r, due, rate)) }()
	})
}

// chain is a strict-order key's parked records from one main partition
// worker, kept in the key's offset order:
//
//   - It starts when the key holds its lookahead bound; from then on every
//     record of the key the worker reads is parked too (none is held), all
//     to the last retry tier, in offset order. The client writes one
//     partition's records in the order produced (idempotent writes), so the
//     copies sit in the tier partition in the key's offset order.
//   - The tier's worker sends the copies one at a time (InFlight 1) in
//     that order, and none before ready: once the main worker holds no
//     record of the key (those read before the chain started were sent).
//     Copies are never parked again, so their order never changes.
//   - A parked record's main entry is finished only when its copy is
//     (sent, retried, requeued or dead-lettered), not when the copy is
//     written: the main partition's commit stays below the oldest unsent
//     copy. When the chain is empty it ends, and the key's next records
//     are held in the main partition again.
//   - A copy whose token names no live chain in this process (the main
//     worker stopped: a crash, a revoke, a restart) is dropped unsent: its
//     record was either sent already (the ledger says so), or its main
//     entry was not finished, so the commit is below it and the next owner
//     of the main partition reads it again and parks it in a new chain, in
//     order behind the records before it.
//
// So the key's sends follow its offset order across crashes and
// rebalances; the cost is one Kafka write and read per parked record, and
// a main partition whose commit waits for the key's chain (a crash then
// re-reads the partition from the chain's oldest unsent record: the ledger
// skips what was sent).
type chain struct {
	token string
	key   string
	w     *worker       // the main partition's worker: it parks and finishes
	ready chan struct{} // closed once w holds no record of key
	dead  chan struct{} // closed when w stops: every copy is stale
	// Under w.mu:
	pend    map[int64]*pending // main entries whose copies are not finished, by offset
	isReady bool
}

// startChain starts key's chain in w (see [chain]). Callers hold w.mu.
func (w *worker) startChain(key string) *chain {
	c := &chain{token: park.NewToken(w.p.cfg.Owner), key: key, w: w,
		ready: make(chan struct{}), dead: make(chan struct{}), pend: map[int64]*pending{}}
	w.chains[key] = c
	w.p.chains.Store(key, c)
	w.chainReady(key)
	return c
}

// chainReady lets key's chain copies be sent once w holds no record of key.
// Callers hold w.mu.
func (w *worker) chainReady(key string) {
	c := w.chains[key]
	if c == nil || c.isReady {
		return
	}
	if q := w.keys[key]; q != nil && q.size() > 0 {
		return
	}
	c.isReady = true
	close(c.ready)
}

// chainFinished finishes the main entry at offset once its copy is
// finished, and ends the chain when none is left. Callers hold w.mu.
func (w *worker) chainFinished(c *chain, offset int64) {
	if w.stopped || w.chains[c.key] != c {
		return
	}
	e := c.pend[offset]
	if e == nil {
		return
	}
	delete(c.pend, offset)
	w.finish(e)
	if len(c.pend) == 0 {
		delete(w.chains, c.key)
		w.p.chains.CompareAndDelete(c.key, c)
	}
}

// endChains marks w's chains stale at its stop. Callers hold w.mu.
func (w *worker) endChains() {
	for k, c := range w.chains {
		close(c.dead)
		w.p.chains.CompareAndDelete(k, c)
	}
	w.chains = map[string]*chain{}
}

// chainCopy returns the copy of r parked in chain c: the last retry tier,
// no due time (the tier's worker holds it until the chain is ready), the
// chain header naming c and r's main offset.
func (p *Pacer) chainCopy(r *kgo.Record, c *chain) *kgo.Record {
	m := readMeta(r)
	m.due = time.Time{}
	return &kgo.Record{Topic: p.cfg.retryTopic(len(p.cfg.RetryDelays)), Key: r.Key, Value: r.Value,
		Headers: m.headers(r, park.ChainHeaders(m.parks+1, c.token, r.Offset)...)}
}

// parkChained writes r's chain copy without waiting, in the order of the
// calls (see parkAsync). done(copied) follows Kafka's acknowledgement;
// copied is false when the record was dead-lettered instead (too large).
// A write that failed is retried by produce, in a goroutine; it is the only
// way a copy can land behind a later one (Kafka refusing one copy and
// taking the next), and done is not called if ctx ends first.
func (p *Pacer) parkChained(ctx context.Context, r *kgo.Record, c *chain, done func(copied, ok bool)) {
	cp := p.chainCopy(r, c)
	p.cl.Produce(ctx, cp, func(_ *kgo.Record, err error) {
		if err == nil {
			p.qm.parked.Inc()
			p.wrote("chain", cp.Topic)
			done(true, true)
			return
		}
		go func() {
			log := p.log.With("topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
			err := p.produce(ctx, cp, log)
			switch {
			case err == nil:
				p.qm.parked.Inc()
				p.wrote("chain", cp.Topic)
				done(true, true)
			case errors.Is(err, errTooLarge):
				done(false, p.deadLetter(ctx, r, readMeta(r), "too-large", "the parked copy exceeds the broker's message size", log))
			default:
				done(false, false)
			}
		}()
	})
}

// liveChain returns the live chain a chain copy's header names, and the
// copy's main offset; nil when the chain is not live in this process.
func (p *Pacer) liveChain(r *kgo.Record) (*chain, int64, bool) {
	token, off, isCopy := park.ChainOf(r)
	if token == "" {
		return nil, 0, isCopy
	}
	c, _ := p.chains.Load(string(r.Key))
	if ch, _ := c.(*chain); ch != nil && ch.token == token {
		return ch, off, true
	}
	return nil, 0, true
}
