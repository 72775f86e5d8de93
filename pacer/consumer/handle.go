package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/internal/tick"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/pacerhq/pacer/pacer/inflight"
	"github.com/pacerhq/pacer/pacer/keypace"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/pacerhq/pacer/pacer/park"
	"github.com/pacerhq/pacer/pacer/portfolio"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// meta is the pacer's bookkeeping carried in a record's headers.
type meta struct {
	attempt  int
	requeues int
	due      time.Time
	replayed bool
	// reread: the record, or the record it is a copy of, was read again
	// by its partition's next owner (below the partition's backlog end:
	// a previous owner may have handled it), so a duplicate of it is not
	// counted as a campaign's publish again (see [Pacer.republished]).
	reread bool
	origin string // "topic/partition/offset" from the record's header; "" for a record read at its origin (see originOf)
	parks  int    // how many times the record was parked (envelope.HeaderParks); 0 for a record never parked
}

// readMeta reads r's pacer headers. It is on every record's path (fetch,
// handling), so it formats nothing: a record without pacer headers costs
// a loop over its headers.
func readMeta(r *kgo.Record) meta {
	var m meta
	for _, h := range r.Headers {
		switch h.Key {
		case envelope.HeaderAttempt:
			m.attempt, _ = strconv.Atoi(string(h.Value))
		case envelope.HeaderRequeues:
			m.requeues, _ = strconv.Atoi(string(h.Value))
		case envelope.HeaderDue:
			if ms, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil && ms > 0 {
				m.due = time.UnixMilli(ms)
			}
		case envelope.HeaderOrigin:
			m.origin = string(h.Value)
		case envelope.HeaderReplayed:
			m.replayed = string(h.Value) == "1"
		case envelope.HeaderReread:
			m.reread = string(h.Value) == "1"
		case envelope.HeaderParks:
			m.parks, _ = strconv.Atoi(string(h.Value))
		}
	}
	return m
}

// originOf is where r was first written, "topic/partition/offset": its
// origin header, or r's own place when it has none.
func (m meta) originOf(r *kgo.Record) string {
	if m.origin != "" {
		return m.origin
	}
	return r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "/" + strconv.FormatInt(r.Offset, 10)
}

// headers returns r's headers without the pacer's, plus m's and extra.
func (m meta) headers(r *kgo.Record, extra ...kgo.RecordHeader) []kgo.RecordHeader {
	hs := append(envelope.Foreign(r.Headers),
		kgo.RecordHeader{Key: envelope.HeaderAttempt, Value: []byte(strconv.Itoa(m.attempt))},
		kgo.RecordHeader{Key: envelope.HeaderRequeues, Value: []byte(strconv.Itoa(m.requeues))},
		kgo.RecordHeader{Key: envelope.HeaderOrigin, Value: []byte(m.originOf(r))},
	)
	if !m.due.IsZero() {
		hs = append(hs, kgo.RecordHeader{Key: envelope.HeaderDue, Value: []byte(strconv.FormatInt(m.due.UnixMilli(), 10))})
	}
	if m.replayed {
		hs = append(hs, kgo.RecordHeader{Key: envelope.HeaderReplayed, Value: []byte("1")})
	}
	if m.reread {
		hs = append(hs, kgo.RecordHeader{Key: envelope.HeaderReread, Value: []byte("1")})
	}
	return append(hs, extra...)
}

// kind is where a step left a record.
type kind int

const (
	pass         kind = iota // the step let the record through: on to the next step
	again                    // the send must be tried again: back to the first gate
	stopped                  // the worker stopped first: not finished, re-delivered to the next owner
	delivered                // the provider accepted it
	duplicate                // its id was delivered (or dead-lettered) before: skipped
	requeued                 // no slot in time: put back on a retry topic, not an attempt
	retrying                 // transient failure: retry topic with attempt + 1, or the DLQ
	deadLettered             // never to be sent: DLQ with a reason
	deferred                 // not to be sent yet (not_before, a paused campaign): parked until due, not an attempt
)

// outcome is what a step decided for a record. Only [Pacer.finish] acts on
// it, so every exit releases the claim, writes the copy, counts and marks
// the same way.
type outcome struct {
	kind      kind
	reason    string          // requeued, deadLettered: why (the pacer-reason header, the metric label)
	detail    string          // deadLettered: the provider answer or parse error
	wait      time.Duration   // requeued: how long until the record may be tried again
	err       error           // retrying: the cause (its Retry-After is honoured)
	res       channels.Result // delivered: the provider's answer
	keepClaim bool            // the provider may have the message: the claim stays (unknown outcome), and a DLQ copy marks the id dead-lettered
}

func next() outcome { return outcome{kind: pass} }
func stop() outcome { return outcome{kind: stopped} }
func requeue(reason string, d time.Duration) outcome {
	return outcome{kind: requeued, reason: reason, wait: d}
}
func deferUntil(reason string, d time.Duration) outcome {
	return outcome{kind: deferred, reason: reason, wait: d}
}
func dead(reason, detail string) outcome {
	return outcome{kind: deadLettered, reason: reason, detail: detail}
}

// flight is one record on its way through the steps: what they read and
// what finish needs.
type flight struct {
	w       *worker
	r       *kgo.Record
	m       meta
	env     envelope.Envelope
	parsed  *envelope.Envelope     // r's envelope parsed before the record was handled, until admit takes it
	st      keypace.Key            // the record's pacing key; the zero Key until the envelope is parsed
	cred    uint64                 // CredentialVersion of the key when the request left
	sent    bool                   // a request left: its outcome is written even after a revoke
	code    string                 // the last request's answer as the ledger's attempts keep it (answerCode)
	slotAt  time.Time              // when the send slot started (the slot step returned)
	claimed bool                   // this flight holds the id's claim in the ledger
	ahead   *ledger.PendingClaim   // a claim started before the slot began (see claimAhead)
	stale   []*ledger.PendingClaim // claims started for slots that lapsed, settled by finish
	locked  bool                   // this flight holds the id in this process (lockID)
	log     *slog.Logger           // &logger
	logger  slog.Logger            // its handler logh (no allocation per record)
	logh    flightLog
	answers *inflight.Estimator // takes the provider's answer time (its key queue's); may be nil

	waitStart time.Time // since when it waits for a slot

	portfolio string              // the key's portfolio when guard admitted the message
	admission portfolio.Admission // guard's answer (Verdict 0: not checked)
}

// handle takes one record to a finished state and returns true, or returns
// false when the worker stopped first (the record is then re-delivered to
// the partition's next owner). env, if not nil, is r's envelope, parsed
// already; answers, if not nil, takes the provider's answer time.
func (p *Pacer) handle(w *worker, r *kgo.Record, env *envelope.Envelope, answers *inflight.Estimator) bool {
	f := &flight{w: w, r: r, m: readMeta(r), parsed: env, answers: answers}
	f.logh = flightLog{h: p.log.Handler(), f: f}
	f.logger = *slog.New(&f.logh)
	f.log = &f.logger
	return p.finish(f, p.steps(f))
}

// steps runs the gates in order until one decides the record's outcome:
// due time, envelope, expiry; then, for each try, breaker, slot, claim,
// send. A throttle, a halt or a cooldown that began during the wait sends
// the record back to the first gate (again).
func (p *Pacer) steps(f *flight) outcome {
	if o := p.admit(f); o.kind != pass {
		return o
	}
	f.waitStart = time.Now()
	for {
		o := p.breakerGate(f)
		if o.kind == pass {
			o = p.slot(f)
		}
		if o.kind == pass {
			o = p.campaignGate(f)
		}
		if o.kind == pass {
			o = p.breakerShut(f)
		}
		if o.kind == pass {
			o = p.claim(f)
		}
		if o.kind == pass {
			o = p.send(f)
		}
		if o.kind != again {
			return o
		}
	}
}

// admit holds the record until it is due (only its key waits, the
// partition goes on; a parked copy is taken early after a raise of its
// key's rate or when its key has room, see [park.UntilDue]), parses it, takes its id in this
// process (two copies of one id are handled one after the other, so the
// second finds the first's outcome in the ledger) and checks its expiry.
func (p *Pacer) admit(f *flight) outcome {
	rates := p.parkedRates(f)
	if !p.resumed(f.r) && !park.UntilDue(f.w.ctx, f.r, f.m.due, rates, p.keyRoom) {
		return stop()
	}
	var env envelope.Envelope
	if f.parsed != nil {
		env, f.parsed = *f.parsed, nil
	} else {
		var err error
		if env, err = envelope.Parse(f.r.Value); err != nil {
			return dead("malformed", err.Error())
		}
	}
	// A record key that names another pacing key than the envelope would
	// pace by one and partition by the other: refused. A record without a
	// key is paced by the envelope's.
	if len(f.r.Key) > 0 && string(f.r.Key) != env.Key {
		return dead("malformed", fmt.Sprintf("record key %q differs from the envelope's key %q", f.r.Key, env.Key))
	}
	f.env = env
	if env.Expired(time.Now()) {
		return dead("expired", "expires_at "+env.ExpiresAt.Format(time.RFC3339)+" passed before a send")
	}
	if o := p.control(f); o.kind != pass {
		return o
	}
	if !p.lockID(f.w.ctx, env.Key, env.ID) {
		return stop()
	}
	f.locked = true
	f.st = p.keys.Get(env.Key, env.To)
	if p.parkedDuplicate(f) {
		return outcome{kind: duplicate}
	}
	if o := p.guard(f); o.kind != pass {
		return o
	}
	return next()
}

// parkedRates is how a parked copy of f's record reads its key's rate
// (see [park.UntilDue]): as the key's senders read it (its policy and
// adapted rate, from Redis at most once per second per key and process),
// so a replica that does not send for the key sees a raise too.
func (p *Pacer) parkedRates(f *flight) park.Rates {
	return func(key string, was float64) (float64, time.Time) {
		k := p.keys.Get(key, "")
		defer k.Done()
		lim := k.Limit(f.w.ctx, time.Now(), f.log)
		return p.parkMarks.Seen(key, lim.PerSecond, was, time.Now())
	}
}

// parkedDuplicate reports whether f's record is a parked copy whose id was
// delivered already: a rebalance or crash re-delivers a record parked
// before, and its second copy comes back too. Asked before the slot, so the
// duplicate does not spend one of its key's slots (the claim finds it only
// after the slot); one ledger read per parked copy. An error answers
// false: the claim still decides.
func (p *Pacer) parkedDuplicate(f *flight) bool {
	if f.m.parks == 0 {
		return false
	}
	// The read waits for the ledger's next flush, with the operations of
	// other records, while other records of its key in this process use
	// the key's slots meanwhile. The key's only record in hand (in strict
	// order, every one) would leave the key idle for that wait: its read
	// goes at once. IsDelivered counts the ledger's own marks not yet
	// written.
	var by time.Time
	if f.st.Alone() {
		by = time.Now()
	}
	var delivered bool
	err := p.redis(f.w.ctx, f.log, func() (err error) {
		delivered, err = p.ledger.IsDelivered(f.w.ctx, p.cfg.Channel, f.env.Key, f.env.ID, by)
		return err
	})
	return err == nil && delivered
}

// campaignGate looks again at the campaign's state (as cached, no Redis
// call) once the slot came: a record that waited for its slot when its
// campaign was paused or cancelled is not sent (the slot goes unused).
func (p *Pacer) campaignGate(f *flight) outcome {
	if p.camps == nil || f.env.Campaign == "" {
		return next()
	}
	switch st := p.camps.Cached(f.env.Campaign); {
	case st == control.Paused:
		return p.deferPaused()
	case st == control.Cancelled && !f.m.replayed:
		return dead("cancelled", "campaign "+f.env.Campaign+" was cancelled")
	}
	return next()
}

// notBeforeSleep is the longest wait for not_before done in place: a record
// due later is parked, so it holds none of its key's InFlight.
const notBeforeSleep = 50 * time.Millisecond

// control applies not_before and the campaign's state: a record not yet
// due, or of a paused campaign, is parked (due at not_before, or
// campaign.PausedRecheck ahead) without an attempt; one of a cancelled
// campaign is dead-lettered as cancelled, unless an operator replayed it
// from the DLQ.
func (p *Pacer) control(f *flight) outcome {
	if wait := time.Until(f.env.NotBefore); wait > notBeforeSleep {
		return deferUntil("not-before", wait)
	} else if wait > 0 && !sleep(f.w.ctx, wait) {
		return stop()
	}
	if p.camps == nil || f.env.Campaign == "" {
		return next()
	}
	st, ok := p.camps.State(f.w.ctx, f.env.Campaign)
	switch {
	case !ok:
		return stop()
	case st == control.Paused:
		return p.deferPaused()
	case st == control.Cancelled && !f.m.replayed:
		return dead("cancelled", "campaign "+f.env.Campaign+" was cancelled")
	}
	return next()
}

// breakerGate refreshes the key's policy and adapted limit and asks the
// breaker: an open breaker requeues the record; an account or pair
// cooldown holds it (see [keypace.Key.Gate]).
func (p *Pacer) breakerGate(f *flight) outcome {
	return p.verdict(f.w.ctx, f.st.Gate(f.w.ctx, time.Now(), f.log), pass)
}

// verdict carries out what a verb of the record's key decided: a wait is
// slept here, and then the record goes on as after says (pass at a gate,
// again after a throttle).
func (p *Pacer) verdict(ctx context.Context, v keypace.Verdict, after kind) outcome {
	switch v.Kind {
	case keypace.Pass:
		return next()
	case keypace.Again:
		return outcome{kind: again}
	case keypace.Requeue:
		return requeue(v.Reason, v.Wait)
	case keypace.Wait:
		if !sleep(ctx, v.Wait) {
			return stop()
		}
		return outcome{kind: after}
	}
	return stop()
}

// breakerShut sends back to the gates a record whose slot came after its
// key's breaker opened in this process (see [keypace.Key.Shut]).
func (p *Pacer) breakerShut(f *flight) outcome {
	if f.st.Shut() {
		return outcome{kind: again}
	}
	return next()
}

// slot waits for the key's next send slot; none within MaxTokenWait
// requeues the record. The record's claim starts the ledger's flush
// interval before the slot does (see [Pacer.claimAhead]).
func (p *Pacer) slot(f *flight) outcome {
	var ahead func(at time.Time)
	var lead time.Duration
	if !f.claimed {
		ahead = func(at time.Time) { p.claimAhead(f, at) }
		lead = p.ledger.FlushInterval() + claimMargin
	}
	if o := p.verdict(f.w.ctx, f.st.Slot(f.w.ctx, f.env.High(), lead, ahead, f.log), pass); o.kind != pass {
		return o
	}
	p.m.bucketWaitO.Observe(time.Since(f.waitStart).Seconds())
	f.slotAt = time.Now()
	return next()
}

// claimMargin is the time a claim is started before its slot beyond the
// ledger's flush interval: the round trip, the flush itself, and a
// sender's late wake-up on a busy machine. A claim made in time is
// answered by the flush that runs anyway (one every interval at most);
// only a sender woken later than claimMargin - claimTrip needs its flush
// started early (FlushBy), so the wider the margin, the fewer flushes
// (round trips) a second, at the cost of claims made that much earlier
// before their requests (see claimAhead's crash semantics).
const claimMargin = 10 * time.Millisecond

// claimTrip is how long before its slot a late claim's flush starts: the
// round trip to Redis.
const claimTrip = 3 * time.Millisecond

// claimAhead starts f's claim for the slot at at. The ledger's claims go
// to Redis in batches, at most its FlushInterval after they are made, so
// the claim starts that long (plus claimMargin) before the send slot: the
// batch's wait overlaps the slot's and the send is not late. A claim
// due sooner than a flush interval plus claimTrip (a sender woken
// late) has its flush start by claimTrip before the slot, and not at once:
// the claims and marks that come meanwhile share that flush's round trip.
// A claim started for an earlier slot that lapsed serves the new slot: it
// claims the same id for the same owner, so its answer holds for any slot,
// and a new claim per lapsed slot (several per message on a loaded machine)
// would only add a claim and a cancel to the ledger's batches.
//
// Crash semantics: a claim may be in Redis up to FlushInterval +
// claimMargin before its request leaves (plus the slots of its record that
// lapsed meanwhile, each at most lateSlot and one slot interval), so a
// process that dies holds, on top of its sends in flight, the claims of
// the slots of that last span; Kafka re-delivers their records, which then
// read as abandoned (unknown outcome), never as sent twice.
func (p *Pacer) claimAhead(f *flight, at time.Time) {
	if f.ahead == nil {
		f.ahead = p.claimAsync(f)
	}
	if time.Until(at) < p.ledger.FlushInterval()+claimTrip {
		p.ledger.FlushBy(at.Add(-claimTrip))
	}
}

// claimAsync starts the ledger claim of f's id, with its recipient's
// suppression checked in the same call. A replayed record, or any record
// when unknown outcomes are resent, claims by force (see [ledger.Ledger.Claim]).
func (p *Pacer) claimAsync(f *flight) *ledger.PendingClaim {
	force := f.m.replayed || p.cfg.UnknownOutcome == UnknownOutcomeResend
	return p.ledger.ClaimForAsync(p.cfg.Channel, f.env.Key, f.env.ID, p.cfg.Owner, force, p.recipient(f))
}

// settleAhead takes back the claims started ahead that were not used:
// cancelled when no flush took them yet, else waited for and, if one
// claimed, held (f.claimed) so finish releases it.
func (p *Pacer) settleAhead(f *flight) {
	if f.ahead != nil {
		if !f.ahead.Cancel() {
			f.stale = append(f.stale, f.ahead)
		}
		f.ahead = nil
	}
	for _, pc := range f.stale {
		if res, _, _ := pc.Wait(context.Background()); res == ledger.Claimed {
			f.claimed = true
		}
	}
	f.stale = nil
}

// claim takes the id in the ledger right before the request (or takes the
// answer of the claim started ahead of the slot), so a process that dies
// while waiting for a token leaves no claim behind.
//
// A record that holds its claim already (its slot was given up after the
// claim came, see below) keeps it for the new slot and does not claim
// again: a second claim would wait for Redis again, and under load come
// as late as the first, slot after slot (each wait a batch of the ledger,
// each lapsed slot one more claim in the next batch, until nothing is
// sent). The claim's cooldown check is then this process's view of the
// key's cooldown (refreshed with its adapted rate, and set at once by its
// own throttles); the new slot itself was granted by the bucket, which
// refuses slots in a cooldown.
func (p *Pacer) claim(f *flight) outcome {
	ctx := f.w.ctx
	if f.claimed && f.ahead == nil {
		cool := f.st.CooldownLeft(time.Now())
		if cool <= 0 {
			return next()
		}
		return p.coolDown(ctx, cool)
	}
	var res ledger.ClaimResult
	var cool time.Duration
	var err error
	var why string // res Suppressed: the suppression's reason
	if pc := f.ahead; pc != nil {
		f.ahead = nil
		res, cool, err = pc.Wait(ctx)
		why = pc.Suppression()
		if err != nil && ctx.Err() == nil {
			p.m.redisErrors.WithLabelValues().Inc()
			f.log.Debug("claim started ahead failed; claiming again", "err", err)
		}
		// Held from its answer on, even when the worker stops meanwhile:
		// finish then releases it, and the next owner does not read it as
		// a claim its process left mid-send (unknown outcome).
		f.claimed = f.claimed || res == ledger.Claimed
	}
	if res == ledger.ClaimUnknown && ctx.Err() == nil {
		err = p.redis(ctx, f.log, func() (err error) {
			pc := p.claimAsync(f)
			res, cool, err = pc.Wait(ctx)
			why = pc.Suppression()
			return err
		})
	} else if ctx.Err() != nil {
		err = ctx.Err()
	}
	switch {
	case errors.Is(err, errRedisDown):
		return next() // local failure mode: no ledger, send anyway
	case err != nil:
		return stop()
	}
	switch res {
	case ledger.Claimed:
		f.claimed = true
		// A claim held up by Redis (a stall, a failover) would send every
		// slot that lapsed meanwhile at once, a burst the provider answers
		// with throttles: a slot that started too long ago is given up and
		// a new one taken (the claim is kept for it).
		if late := time.Since(f.slotAt); late > f.st.LateSlot()+lateClaim {
			p.m.lateSlots.WithLabelValues().Inc()
			return outcome{kind: again}
		}
		return next()
	case ledger.CoolingDown:
		// A cooldown began while this message slept on its slot.
		return p.coolDown(ctx, cool)
	case ledger.Delivered:
		return outcome{kind: duplicate}
	case ledger.Suppressed:
		return p.suppressed(why)
	case ledger.PairLimited:
		return p.pairLimited(cool)
	case ledger.DeadLettered:
		// Dead-lettered already, by a process that stopped before its
		// offset commit: its DLQ copy is written.
		return outcome{kind: duplicate, reason: "dead-lettered"}
	case ledger.Abandoned:
		o := dead("unknown-outcome",
			"another process claimed this id and stopped before recording an outcome; the provider may have the message")
		o.keepClaim = true
		return o
	}
	return stop()
}

// coolDown waits out a cooldown of cool (plus up to 10% of jitter, so the
// key's records do not all wake at once) and sends the record back to the
// gates; one longer than MaxTokenWait requeues it instead.
func (p *Pacer) coolDown(ctx context.Context, cool time.Duration) outcome {
	if cool > p.cfg.MaxTokenWait {
		return requeue("cooldown", cool)
	}
	if !sleep(ctx, cool+time.Duration(rand.Int64N(int64(cool)/10+1))) {
		return stop()
	}
	return outcome{kind: again}
}

// sleep waits d, or reports false if ctx ended first: every wait of a
// record's steps, and of its Redis and Kafka retries, is this one.
func sleep(ctx context.Context, d time.Duration) bool { return tick.Sleep(ctx, d) }

// send makes one request and classifies the answer.
func (p *Pacer) send(f *flight) outcome {
	ctx := f.w.ctx
	msg := channels.Message{ID: f.env.ID, Key: f.env.Key, To: f.env.To, Payload: f.env.Payload, Campaign: f.env.Campaign}
	start := time.Now()
	f.sent = true
	f.cred = p.credentialVersion(f.env.Key)
	res, err := p.sender.Send(p.sendBy.ctx(start), msg)
	p.m.sendLatencyO.Observe(time.Since(start).Seconds())
	class := channels.ClassOf(err)
	var perr *channels.Error
	errors.As(err, &perr)
	f.code = answerCode(err)

	if err != nil && channels.MaybeAccepted(err) {
		// No answer: the provider may have the message.
		p.m.sendsByClass["unknown"].Inc()
		if p.sendCtx.Err() != nil {
			f.log.Warn("send cut at the drain deadline; outcome unknown, claim kept", "err", err)
			return outcome{kind: stopped, keepClaim: true}
		}
		f.m.attempt++
		if p.cfg.UnknownOutcome == UnknownOutcomeDLQ {
			o := dead("unknown-outcome", "no answer from the provider: "+err.Error())
			o.keepClaim = true
			return o
		}
		return outcome{kind: retrying, err: err}
	}
	cs := class.String()
	if c := p.m.sendsByClass[cs]; c != nil {
		c.Inc()
	} else {
		p.m.sends.WithLabelValues(cs).Inc()
	}
	p.m.response(cs, perr)
	if class == channels.Throttle {
		// Our pace, not the message, was at fault: no attempt counted.
		f.waitStart = time.Now()
		scope := channels.ScopeKey
		if perr != nil {
			scope = perr.Scope
		}
		p.m.throttles.WithLabelValues(scope.String()).Inc()
	}
	// The key's breaker, AIMD, cooldowns and counters take the answer.
	now := time.Now()
	if f.answers != nil {
		f.answers.Answered(now.Sub(start))
	}
	v := f.st.Report(ctx, now, keypace.Result{Class: class, Err: err, Cred: f.cred}, f.log)
	switch class {
	case channels.Success:
		return outcome{kind: delivered, res: res}
	case channels.Throttle:
		return p.verdict(ctx, v, again)
	case channels.Transient:
		f.m.attempt++
		return outcome{kind: retrying, err: err}
	case channels.Permanent:
		if perr != nil && perr.Gone {
			p.gone(ctx, f, perr)
		}
		if code := codeOf(perr); code == channels.CodeNoCredentials {
			return dead(code, err.Error()) // replayable as such once the credential exists
		}
		return dead("permanent:"+codeOf(perr), err.Error())
	default: // channels.Halt: the key's breaker opened (Report)
		f.waitStart = time.Now()
		return outcome{kind: again}
	}
}

// credentialVersion returns the sender's CredentialVersion of key, 0 when
// the sender does not have one.
func (p *Pacer) credentialVersion(key string) uint64 {
	if cv, ok := p.sender.(CredentialVersioner); ok {
		return cv.CredentialVersion(key)
	}
	return 0
}

// finish carries out o, the one place every record's path ends: the claim
// is released unless the provider has (or may have) the message, the copy
// is written, the metric counted. It reports whether the record is
// finished (its offset may be committed).
func (p *Pacer) finish(f *flight, o outcome) bool {
	ctx := f.w.ctx
	if f.sent {
		// The provider answered (or may have): the retry or DLQ copy is
		// written even if the partition is revoked meanwhile, within the
		// drain the revoke waits for; dropping it would send again.
		ctx = p.drainBy.ctx(time.Now())
	}
	if f.locked {
		defer p.unlockID(f.env.Key, f.env.ID)
	}
	if f.st.Held() {
		defer f.st.Done()
	}
	p.settleAhead(f)
	p.attempted(ctx, f, o, f.log)
	if f.claimed && o.kind != delivered && !o.keepClaim {
		p.release(ctx, f.env, f.log)
	}
	done := false
	switch o.kind {
	case delivered:
		p.delivered(f.env, o.res, f.log)
		done = true
	case duplicate:
		p.m.duplicates.WithLabelValues().Inc()
		p.tally.count(duplicate)
		if p.republished(f) {
			p.countDuplicate(f.env.Campaign)
		}
		if o.reason == "dead-lettered" {
			f.log.Debug("already dead-lettered; skipped")
		} else {
			f.log.Debug("already delivered; skipped")
			p.deliveredOutcome(&f.env) // again: it may have been lost with a crash
		}
		done = true
	case requeued:
		done = p.requeue(ctx, f.r, f.m, o.reason, o.wait, f.log)
	case retrying:
		done = p.retry(ctx, f.r, f.m, o.err, f.log)
	case deadLettered:
		done = p.deadLetter(ctx, f.r, f.m, o.reason, o.detail, f.log)
		if done && o.keepClaim {
			p.markDeadLettered(ctx, f.env, o.reason, f.log)
		}
		if done && !o.keepClaim {
			p.giveBack(f) // the provider does not have it
		}
	case deferred:
		if o.reason == "paused" && !p.strict() {
			done = p.parkPaused(ctx, f, o.wait)
		} else {
			done = p.park(ctx, f.r, time.Now().Add(o.wait), 0)
		}
		if done {
			p.m.requeued.WithLabelValues(o.reason).Inc()
			p.tally.count(requeued)
		}
	}
	if done && p.camps != nil {
		switch cl := p.countingLedger(); o.kind {
		case delivered:
			if cl == nil {
				p.camps.Count(f.env.Campaign, true, "")
			} // else counted with its mark (p.delivered)
		} // a dead letter is counted where it is written (deadLetter), whichever path wrote it
	}
	// The tally counts where the metrics do (deadLetter, retry, requeue,
	// delivered), so the progress lines add up to them.
	return done
}

// idRef names one envelope id being handled: its pacing key and id.
type idRef struct{ key, id string }

// lockID waits until no other goroutine of this process handles the
// envelope id (of pacing key key), then takes it. It reports false if ctx
// ended first. Taking a free id allocates nothing but the map's entry.
func (p *Pacer) lockID(ctx context.Context, key, id string) bool {
	k := idRef{key, id}
	for {
		p.idsMu.Lock()
		busy, ok := p.ids[k]
		if !ok {
			p.ids[k] = nil
			p.idsPeak = max(p.idsPeak, len(p.ids))
			p.idsMu.Unlock()
			return true
		}
		if busy == nil {
			busy = make(chan struct{})
			p.ids[k] = busy
		}
		p.idsMu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return false
		}
	}
}

func (p *Pacer) unlockID(key, id string) {
	k := idRef{key, id}
	p.idsMu.Lock()
	if c := p.ids[k]; c != nil {
		close(c)
	}
	delete(p.ids, k)
	if p.idsPeak >= shrinkFrom && len(p.ids) <= p.idsPeak/4 {
		m := make(map[idRef]chan struct{}, len(p.ids)) // see shrinkFrom
		for k, c := range p.ids {
			m[k] = c
		}
		p.ids, p.idsPeak = m, len(m)
	}
	p.idsMu.Unlock()
}

func codeOf(e *channels.Error) string {
	if e == nil || e.Code == "" {
		return "none"
	}
	return e.Code
}

// LedgerWriteFailed counts a failed write of the ledger that the record
// path does not wait for (a batch of delivered marks or releases, which
// the ledger tries again) in pacer_redis_errors_total and logs it: give it
// as the OnError of a *ledger.Batcher.
func (p *Pacer) LedgerWriteFailed(err error) {
	p.m.redisErrors.WithLabelValues().Inc()
	p.log.Warn("idempotency ledger: write failed; tried again", "err", err)
}

// errRedisDown is what [Pacer.redis] returns in local failure mode when
// Redis does not answer: the caller goes on without it.
var errRedisDown = keypace.ErrRedisDown

// redis runs op. In closed failure mode (the default) it retries Redis
// errors with back-off until op succeeds (nil) or ctx ends (ctx.Err()):
// sends stop meanwhile and /readyz says so. In local mode it tries once and
// returns errRedisDown on failure, so the caller can pace in-process.
func (p *Pacer) redis(ctx context.Context, log *slog.Logger, op func() error) error {
	return p.redisOp(ctx, log, op, true)
}

// redisQueued is [Pacer.redis] for an op that may only queue its write for
// a later flush (a delivered mark): its success says nothing of Redis, so
// it never ends the failure mode (with PACER_REDIS_FAILURE=local, every
// queued mark flipped the pacer back to Redis's buckets mid-outage, and the
// next call flipped it back to a fresh in-process one).
func (p *Pacer) redisQueued(ctx context.Context, log *slog.Logger, op func() error) error {
	return p.redisOp(ctx, log, op, false)
}

// redisOp is redis; proves says whether op's success means Redis answered.
func (p *Pacer) redisOp(ctx context.Context, log *slog.Logger, op func() error, proves bool) error {
	var fail *backoff.ExponentialBackOff // made at the first failure
	for {
		err := op()
		if err == nil {
			if proves {
				p.redisAnswered()
			}
			if proves && !p.redisOK.Swap(true) {
				log.Info("redis reachable again; pacing through Redis")
				p.m.fallback.WithLabelValues().Set(0)
				p.publishReady()
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		p.m.redisErrors.WithLabelValues().Inc()
		if p.redisOK.Swap(false) {
			if p.cfg.RedisFailure == RedisFailureLocal {
				log.Error("redis unavailable; PACER_REDIS_FAILURE=local: pacing in-process at rate / expected replicas, without idempotency records", "err", err)
				p.m.fallback.WithLabelValues().Set(1)
			} else {
				log.Error("redis unavailable; sends stop until it answers, nothing is dropped", "err", err)
			}
			p.publishReady()
		}
		if p.cfg.RedisFailure == RedisFailureLocal {
			return errRedisDown
		}
		if fail == nil {
			fail = backoff.NewExponentialBackOff()
			fail.InitialInterval = 100 * time.Millisecond
			fail.MaxInterval = 5 * time.Second
		}
		if !sleep(ctx, fail.NextBackOff()) {
			return ctx.Err()
		}
	}
}

// lateClaim is how long the idempotency claim may take, beyond lateSlot,
// before the slot it follows is given up: a claim is one Redis round trip
// (well under a millisecond); one slower than this waited on Redis.
const lateClaim = 20 * time.Millisecond

// release drops this process's claim on env.ID after the provider refused
// the message (or before any send), so a later copy can claim it. Failure
// is logged: the copy then counts as unknown-outcome, never as delivered.
func (p *Pacer) release(ctx context.Context, env envelope.Envelope, log *slog.Logger) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := p.ledger.Release(rctx, p.cfg.Channel, env.Key, env.ID, p.cfg.Owner); err != nil {
		log.Warn("could not release the idempotency claim", "err", err)
	}
}

// delivered records a successful send. The record is finished whatever
// happens here: the provider has the message.
func (p *Pacer) delivered(env envelope.Envelope, res channels.Result, log *slog.Logger) {
	p.m.deliveredC.Inc()
	p.tally.count(delivered)
	p.deliveredOutcome(&env)
	dctx := p.markBy.ctx(time.Now())
	if err := p.redisQueued(dctx, log, func() error {
		if cl := p.countingLedger(); cl != nil && env.Campaign != "" {
			// The campaign's count goes in the flush that writes the mark.
			return cl.DeliveredCounted(dctx, p.cfg.Channel, env.Key, env.ID, res.ProviderID,
				ledger.Count{Name: env.Campaign, Field: countDelivered, At: time.Now().UnixMilli()})
		}
		return p.ledger.Delivered(dctx, p.cfg.Channel, env.Key, env.ID, res.ProviderID)
	}); err != nil {
		log.Error("delivered, but the idempotency record could not be written; a re-delivered copy will count as unknown-outcome")
	}
}

// republished reports whether f's record, skipped as a duplicate, counts
// in its campaign's duplicates: a record of a campaign published again
// after its id was delivered or dead-lettered by another record (`pacer
// publish` or the ingest API counted both in published), rather than the
// same record read again. Not counted: a record (or a copy of one) read
// again by its partition's next owner after a crash or a rebalance (its
// first reading was counted, or never left a mark), and a record replayed
// from the DLQ (not counted in published).
func (p *Pacer) republished(f *flight) bool {
	return f.env.Campaign != "" && !f.m.reread && !f.m.replayed
}

// countDuplicate counts a record of campaign name skipped as published
// again (see [Pacer.republished]) in its campaign's duplicates: with the ledger's
// marks when it counts, else with the campaign counts added every
// [campaign.CountsEvery]; nothing without a campaign store.
func (p *Pacer) countDuplicate(name string) {
	if p.camps == nil || name == "" {
		return
	}
	if cl := p.countingLedger(); cl != nil {
		cl.AddCount(ledger.Count{Name: name, Field: countDuplicates, At: time.Now().UnixMilli()})
		return
	}
	p.camps.CountDuplicate(name)
}

// countingLedger returns the ledger when it writes campaign counts with
// its marks (a campaign store, and a ledger built with a
// [ledger.BatchConfig].Count), or nil when the campaigns' counts are
// added every [campaign.CountsEvery]. Counted with the marks, a crash
// leaves the counters as it leaves the ledger: a delivered record is counted exactly
// when its mark is written (a record Kafka delivers again after the crash
// is skipped as a duplicate and never counted, so a count lost with it
// would be lost for good).
func (p *Pacer) countingLedger() *ledger.Batcher {
	if p.camps == nil || !p.ledger.Counting() {
		return nil
	}
	return p.ledger
}

// markDeadLettered records in the ledger that env.ID, whose claim stays
// (an unknown outcome), has its DLQ copy written: a copy Kafka delivers
// again (a crash before the offset commit) then claims DeadLettered and is
// skipped, rather than dead-lettered once more. Failure is logged: such a
// copy is then dead-lettered again, never sent.
func (p *Pacer) markDeadLettered(ctx context.Context, env envelope.Envelope, reason string, log *slog.Logger) {
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := p.ledger.DeadLettered(mctx, p.cfg.Channel, env.Key, env.ID, reason); err != nil {
		p.m.redisErrors.WithLabelValues().Inc()
		log.Warn("dead-lettered, but the ledger could not record it; a re-delivered copy will be dead-lettered again", "err", err)
	}
}

// RetryLogEvery is how often at most a transient failure is logged: the
// first at once, then one line per interval while they go on, naming how
// many went unlogged before it (pacer_retries_total counts every one).
const RetryLogEvery = 10 * time.Second

// serverError reports whether err is the provider's answer with an HTTP
// 5xx status.
func serverError(err error) bool {
	var e *channels.Error
	return errors.As(err, &e) && e.Status >= 500 && e.Status < 600
}

// retry sends r to the retry tier of its attempt count, or to the DLQ once
// MaxAttempts requests failed.
func (p *Pacer) retry(ctx context.Context, r *kgo.Record, m meta, cause error, log *slog.Logger) bool {
	if m.attempt >= p.cfg.MaxAttempts {
		return p.deadLetter(ctx, r, m, "attempts-exhausted", fmt.Sprintf("%d attempts, last: %v", m.attempt, cause), log)
	}
	tier := min(m.attempt, len(p.cfg.RetryDelays))
	base := p.cfg.RetryDelays[tier-1]
	d := base*4/5 + time.Duration(rand.Int64N(int64(base)*2/5+1)) // ±20% jitter
	if ra := channels.RetryAfter(cause); ra > d {
		d = min(ra, p.cfg.AIMD.MaxCooldown)
	}
	if least := p.cfg.ServerRetry; least > 0 && d < least && serverError(cause) {
		d = min(least+time.Duration(rand.Int64N(int64(least)/5+1)), p.cfg.AIMD.MaxCooldown)
	}
	m.due = time.Now().Add(d)
	if show, unlogged := p.retryLog.Fail(); show {
		log.Warn("transient failure; retrying later", "attempt", m.attempt, "after", d, "err", cause, "unlogged_before", unlogged)
	}
	if err := p.produce(ctx, &kgo.Record{Topic: p.cfg.retryTopic(tier), Key: r.Key, Value: r.Value, Headers: m.headers(r)}, log); err != nil {
		if errors.Is(err, errTooLarge) {
			return p.deadLetter(ctx, r, m, "too-large", "the retry copy exceeds the broker's message size; last: "+cause.Error(), log)
		}
		return false
	}
	p.m.retries.WithLabelValues().Inc()
	p.tally.count(retrying)
	p.wrote("retry", p.cfg.retryTopic(tier))
	return true
}

// requeue puts r back for later, due after wait, with its attempt count
// unchanged: the record could not get a token in time.
func (p *Pacer) requeue(ctx context.Context, r *kgo.Record, m meta, reason string, wait time.Duration, log *slog.Logger) bool {
	wait = min(wait, p.cfg.AIMD.MaxCooldown)
	tier := len(p.cfg.RetryDelays)
	for i, d := range p.cfg.RetryDelays {
		if wait <= d {
			tier = i + 1
			break
		}
	}
	m.requeues++
	m.due = time.Now().Add(wait + time.Duration(rand.Int64N(int64(wait)/10+1)))
	log.Info("requeued", "reason", reason, "due_in", wait, "tier", tier)
	if err := p.produce(ctx, &kgo.Record{Topic: p.cfg.retryTopic(tier), Key: r.Key, Value: r.Value, Headers: m.headers(r)}, log); err != nil {
		if errors.Is(err, errTooLarge) {
			return p.deadLetter(ctx, r, m, "too-large", "the requeued copy exceeds the broker's message size", log)
		}
		return false
	}
	p.m.requeued.WithLabelValues(reason).Inc()
	p.tally.count(requeued)
	p.wrote("requeue", p.cfg.retryTopic(tier))
	return true
}

// deadLetter writes r to the DLQ topic with its reason and returns true once
// Kafka acknowledged it.
func (p *Pacer) deadLetter(ctx context.Context, r *kgo.Record, m meta, reason, detail string, log *slog.Logger) bool {
	if len(detail) > 512 {
		detail = detail[:512]
	}
	label := reason
	if i := strings.IndexByte(reason, ':'); i > 0 {
		label = reason[:i]
	}
	origin := m.originOf(r)
	ot, op, oo := origin, "", ""
	if parts := strings.Split(origin, "/"); len(parts) == 3 {
		ot, op, oo = parts[0], parts[1], parts[2]
	}
	m.due = time.Time{}
	dr := &kgo.Record{Topic: p.cfg.DLQTopic, Key: r.Key, Value: r.Value, Headers: m.headers(r,
		kgo.RecordHeader{Key: envelope.HeaderReason, Value: []byte(reason)},
		kgo.RecordHeader{Key: envelope.HeaderDetail, Value: []byte(detail)},
		kgo.RecordHeader{Key: envelope.HeaderChannel, Value: []byte(p.cfg.Channel)},
		kgo.RecordHeader{Key: envelope.HeaderOriginalTopic, Value: []byte(ot)},
		kgo.RecordHeader{Key: envelope.HeaderOriginalPartition, Value: []byte(op)},
		kgo.RecordHeader{Key: envelope.HeaderOriginalOffset, Value: []byte(oo)},
	)}
	err := p.produce(ctx, dr, log)
	if errors.Is(err, errTooLarge) {
		// Shrink in steps, keeping what replay selects by: first drop the
		// headers over 1 KiB (the pacer's own and a producer's campaign stay),
		// then cut the value to 512 KiB, then drop it; the original stays at
		// the offset named until retention.
		var keep []kgo.RecordHeader
		for _, h := range dr.Headers {
			if len(h.Value) <= 1<<10 {
				keep = append(keep, h)
			}
		}
		dr.Headers = keep
		if err = p.produce(ctx, dr, log); errors.Is(err, errTooLarge) {
			dr.Headers = append(dr.Headers, kgo.RecordHeader{Key: envelope.HeaderTruncated, Value: []byte(strconv.Itoa(len(r.Value)))})
			dr.Value = dr.Value[:min(len(dr.Value), 512<<10)]
			if err = p.produce(ctx, dr, log); errors.Is(err, errTooLarge) {
				dr.Value = nil
				err = p.produce(ctx, dr, log)
			}
		}
		log.Warn("DLQ copy too large for the broker: large headers dropped and the value cut if needed", "bytes", len(r.Value))
	}
	if err != nil {
		return false
	}
	p.m.dlq.WithLabelValues(label).Inc()
	p.tally.count(deadLettered)
	p.deadLetterOutcome(r, reason)
	p.countDeadLetter(r, label)
	p.wrote("dlq", p.cfg.DLQTopic)
	log.Warn("dead-lettered", "reason", reason, "detail", detail)
	return true
}

// countDeadLetter counts r's DLQ copy, whose reason's label (the part
// before any ':') is label, in r's envelope's campaign (none for a record
// that does not parse, as for one without a campaign). Every path that dead-letters counts here
// (a send's outcome, attempts exhausted on the way to a retry tier, a
// copy too large to park or requeue), so a campaign's remaining reaches 0.
func (p *Pacer) countDeadLetter(r *kgo.Record, label string) {
	if p.camps == nil {
		return
	}
	campaign := ""
	if env, err := envelope.Parse(r.Value); err == nil {
		campaign = env.Campaign
	}
	if cl := p.countingLedger(); cl != nil && campaign != "" {
		cl.AddCount(ledger.Count{Name: campaign, Field: countDLQ + label, At: time.Now().UnixMilli()})
	} else {
		p.camps.Count(campaign, false, label)
	}
}

// errTooLarge reports a copy Kafka refuses for its size (MESSAGE_TOO_LARGE):
// retrying it unchanged would hold its partition forever.
var errTooLarge = errors.New("pacer: record too large for the topic")

// produce writes rec and waits for Kafka's acknowledgement, retrying until
// ctx ends (ctx.Err()): a record is never finished without its copy. A copy
// too large for the broker returns errTooLarge at once.
func (p *Pacer) produce(ctx context.Context, rec *kgo.Record, log *slog.Logger) error {
	fail := backoff.NewExponentialBackOff()
	fail.MaxInterval = 10 * time.Second
	for {
		// A fresh copy per attempt: kgo keeps the context of the first
		// Produce of a *Record, which the previous attempt has cancelled.
		attempt := &kgo.Record{Topic: rec.Topic, Key: rec.Key, Value: rec.Value, Headers: rec.Headers}
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := p.cl.ProduceSync(pctx, attempt).FirstErr()
		cancel()
		if err == nil {
			return nil
		}
		if errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) {
			return errTooLarge
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Error("write to "+rec.Topic+" failed; retrying", "err", err)
		if !sleep(ctx, fail.NextBackOff()) {
			return ctx.Err()
		}
	}
}
