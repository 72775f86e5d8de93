package pacer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/channels"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Record headers the pacer reads and writes. Producers may set none of them.
const (
	hAttempt   = "pacer-attempt"  // failed requests so far (transient or unknown outcome)
	hRequeues  = "pacer-requeues" // times the record was put back without an attempt
	hDue       = "pacer-due"      // Unix ms before which the record must not be sent
	hOrigin    = "pacer-origin"   // topic/partition/offset of the first copy
	hReplayed  = "pacer-replayed" // "1": put back from the DLQ by an operator
	hReason    = "pacer-reason"   // DLQ: why
	hDetail    = "pacer-detail"   // DLQ: the last provider response or parse error
	hChannel   = "pacer-channel"  // DLQ: the channel
	hOrigTopic = "pacer-original-topic"
	hOrigPart  = "pacer-original-partition"
	hOrigOff   = "pacer-original-offset"
	hTruncated = "pacer-truncated" // DLQ: the value was cut; the original size in bytes
)

// meta is the pacer's bookkeeping carried in a record's headers.
type meta struct {
	attempt  int
	requeues int
	due      time.Time
	replayed bool
	origin   string // "topic/partition/offset"
}

func readMeta(r *kgo.Record) meta {
	m := meta{origin: fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)}
	for _, h := range r.Headers {
		v := string(h.Value)
		switch h.Key {
		case hAttempt:
			m.attempt, _ = strconv.Atoi(v)
		case hRequeues:
			m.requeues, _ = strconv.Atoi(v)
		case hDue:
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 0 {
				m.due = time.UnixMilli(ms)
			}
		case hOrigin:
			if v != "" {
				m.origin = v
			}
		case hReplayed:
			m.replayed = v == "1"
		}
	}
	return m
}

// headers returns r's headers without the pacer's, plus m's and extra.
func (m meta) headers(r *kgo.Record, extra ...kgo.RecordHeader) []kgo.RecordHeader {
	var hs []kgo.RecordHeader
	for _, h := range r.Headers {
		if !strings.HasPrefix(h.Key, "pacer-") {
			hs = append(hs, h)
		}
	}
	hs = append(hs,
		kgo.RecordHeader{Key: hAttempt, Value: []byte(strconv.Itoa(m.attempt))},
		kgo.RecordHeader{Key: hRequeues, Value: []byte(strconv.Itoa(m.requeues))},
		kgo.RecordHeader{Key: hOrigin, Value: []byte(m.origin)},
	)
	if !m.due.IsZero() {
		hs = append(hs, kgo.RecordHeader{Key: hDue, Value: []byte(strconv.FormatInt(m.due.UnixMilli(), 10))})
	}
	if m.replayed {
		hs = append(hs, kgo.RecordHeader{Key: hReplayed, Value: []byte("1")})
	}
	return append(hs, extra...)
}

// handle takes one record to a finished state and returns true, or returns
// false when the worker stopped first (the record is then re-delivered to
// the partition's next owner).
func (p *Pacer) handle(w *worker, r *kgo.Record) bool {
	ctx := w.ctx
	log := p.log.With("topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
	m := readMeta(r)
	if !w.waitDue(m.due) {
		return false
	}
	env, err := ParseEnvelope(r.Value)
	if err != nil {
		return p.deadLetter(ctx, r, m, "malformed", err.Error(), log)
	}
	log = log.With("id", env.ID)
	// Two copies of one id in this process are handled one after the other,
	// so the second finds the first's outcome in the ledger.
	if !p.lockID(ctx, env.Key, env.ID) {
		return false
	}
	defer p.unlockID(env.Key, env.ID)
	if env.Expired(time.Now()) {
		return p.deadLetter(ctx, r, m, "expired", "expires_at "+env.ExpiresAt.Format(time.RFC3339)+" passed before a send", log)
	}

	force := m.replayed || p.cfg.UnknownOutcome == UnknownOutcomeResend
	msg := channels.Message{ID: env.ID, Key: env.Key, To: env.To, Payload: env.Payload}
	st := p.keyState(env.Key)
	// claimed is whether this handle holds the id's claim in the ledger;
	// drop gives it back, and costs nothing when there is none.
	claimed := false
	drop := func() {
		if claimed {
			p.release(ctx, env, log)
			claimed = false
		}
	}
	pairThrottles := 0
	waitStart := time.Now()
	for {
		allowed, probe, bwait, ok := p.breakerGate(ctx, env.Key, st, log)
		if !ok {
			drop()
			return false
		}
		if !allowed {
			drop()
			return p.requeue(ctx, r, m, "breaker", max(bwait, time.Second), log)
		}
		lim := p.limitFor(ctx, env.Key, st, log)
		wait, reason, ok := p.acquire(ctx, env.Key, env.To, st, lim, log)
		if !ok {
			drop()
			return false
		}
		if wait > 0 {
			drop()
			return p.requeue(ctx, r, m, reason, wait, log)
		}
		p.m.bucketWait.WithLabelValues().Observe(time.Since(waitStart).Seconds())

		// Claim the id only now, right before the request: a process that
		// dies while waiting for a token leaves no claim behind.
		var claim bucket.ClaimResult
		var cool time.Duration
		err := p.redis(ctx, log, func() (err error) {
			claim, cool, err = p.ledger.Claim(ctx, p.cfg.Channel, env.Key, env.ID, p.cfg.Owner, p.cfg.IdempotencyTTL, force)
			return err
		})
		if err != nil && !errors.Is(err, errRedisDown) {
			drop()
			return false
		}
		claimed = err == nil && claim == bucket.Claimed
		switch claim {
		case bucket.CoolingDown:
			// A cooldown began while this message slept on its slot.
			if cool > p.cfg.MaxTokenWait {
				drop()
				return p.requeue(ctx, r, m, "cooldown", cool, log)
			}
			if !sleep(ctx, cool+time.Duration(rand.Int64N(int64(cool)/10+1))) {
				drop()
				return false
			}
			continue
		case bucket.Delivered:
			p.m.duplicates.WithLabelValues().Inc()
			log.Debug("already delivered; skipped")
			return true
		case bucket.Abandoned:
			return p.deadLetter(ctx, r, m, "unknown-outcome",
				"another process claimed this id and stopped before recording an outcome; the provider may have the message", log)
		}

		sctx, cancel := context.WithTimeout(p.sendCtx, p.cfg.SendTimeout)
		start := time.Now()
		res, err := p.sender.Send(sctx, msg)
		cancel()
		p.m.sendLatency.WithLabelValues().Observe(time.Since(start).Seconds())
		class := channels.ClassOf(err)
		var perr *channels.Error
		errors.As(err, &perr)

		if err != nil && channels.MaybeAccepted(err) {
			// No answer: the provider may have the message.
			p.m.sends.WithLabelValues("unknown").Inc()
			if p.sendCtx.Err() != nil {
				log.Warn("send cut at the drain deadline; outcome unknown, claim kept", "err", err)
				return false
			}
			m.attempt++
			if p.cfg.UnknownOutcome == UnknownOutcomeDLQ {
				return p.deadLetter(ctx, r, m, "unknown-outcome", "no answer from the provider: "+err.Error(), log)
			}
			drop()
			return p.retry(ctx, r, m, err, log)
		}
		p.m.sends.WithLabelValues(class.String()).Inc()
		p.m.response(class.String(), perr)
		if probe {
			p.breakerResult(ctx, env.Key, st, class == channels.Success || class == channels.Permanent,
				"probe answered "+class.String()+" "+codeOf(perr), log)
		}
		switch class {
		case channels.Success:
			p.delivered(ctx, env, res, log)
			return true
		case channels.Throttle:
			// Our pace, not the message, was at fault: no attempt counted.
			if perr != nil && perr.Scope == channels.ScopePair {
				// Only this recipient is limited: hold this message, not the
				// key (WhatsApp 131056 asks for 4^n s between tries).
				pairThrottles++
				d := perr.RetryAfter
				if d <= 0 {
					d = time.Second << min(2*(pairThrottles-1), 12)
				}
				log.Info("pair throttled; retrying this message later", "code", codeOf(perr), "after", d)
				if d > p.cfg.MaxTokenWait {
					drop()
					return p.requeue(ctx, r, m, "pair-throttle", d, log)
				}
				if !sleep(ctx, d) {
					drop()
					return false
				}
			} else {
				p.throttled(ctx, env.Key, st, perr, log)
			}
			waitStart = time.Now()
		case channels.Transient:
			m.attempt++
			drop()
			return p.retry(ctx, r, m, err, log)
		case channels.Permanent:
			drop()
			return p.deadLetter(ctx, r, m, "permanent:"+codeOf(perr), err.Error(), log)
		case channels.Halt:
			log.Error("provider refuses this pacing key (credentials or account); opening its breaker, nothing dropped",
				"code", codeOf(perr), "err", err)
			drop()
			p.breakerResult(ctx, env.Key, st, false, "halt: "+codeOf(perr), log)
			waitStart = time.Now()
		}
	}
}

// lockID waits until no other goroutine of this process handles the
// envelope id (of pacing key key), then takes it. It reports false if ctx
// ended first.
func (p *Pacer) lockID(ctx context.Context, key, id string) bool {
	k := key + "\x00" + id
	for {
		p.idsMu.Lock()
		busy, ok := p.ids[k]
		if !ok {
			p.ids[k] = make(chan struct{})
			p.idsMu.Unlock()
			return true
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
	k := key + "\x00" + id
	p.idsMu.Lock()
	close(p.ids[k])
	delete(p.ids, k)
	p.idsMu.Unlock()
}

func codeOf(e *channels.Error) string {
	if e == nil || e.Code == "" {
		return "none"
	}
	return e.Code
}

// errRedisDown is what [Pacer.redis] returns in local failure mode when
// Redis does not answer: the caller goes on without it.
var errRedisDown = errors.New("pacer: redis unavailable (local failure mode)")

// redis runs op. In closed failure mode (the default) it retries Redis
// errors with back-off until op succeeds (nil) or ctx ends (ctx.Err()):
// sends stop meanwhile and /readyz says so. In local mode it tries once and
// returns errRedisDown on failure, so the caller can pace in-process.
func (p *Pacer) redis(ctx context.Context, log *slog.Logger, op func() error) error {
	fail := backoff.NewExponentialBackOff()
	fail.InitialInterval = 100 * time.Millisecond
	fail.MaxInterval = 5 * time.Second
	for {
		err := op()
		if err == nil {
			if !p.redisOK.Swap(true) {
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
		if !sleep(ctx, fail.NextBackOff()) {
			return ctx.Err()
		}
	}
}

// acquire waits for a send slot of key under lim: one reservation (or a
// slot of a lease shared by this process's senders for the key) and one
// sleep until it starts. It returns (0, "", true) once the slot started; or,
// when no slot is to be had within MaxTokenWait, the wait and why
// ("cooldown" or "token-wait") without waiting. ok is false when ctx ended.
func (p *Pacer) acquire(ctx context.Context, key, to string, st *keyState, lim bucket.Limit, log *slog.Logger) (wait time.Duration, reason string, ok bool) {
	for {
		var res bucket.Reservation
		start := time.Now()
		err := p.redis(ctx, log, func() (err error) {
			res, err = p.reserve(ctx, p.bucket, key, to, st, lim)
			return err
		})
		if errors.Is(err, errRedisDown) {
			res, err = p.reserve(ctx, p.fallback, key, to, nil, lim)
		}
		if err != nil {
			return 0, "", false
		}
		p.m.takeLatency.WithLabelValues().Observe(time.Since(start).Seconds())
		if res.OK {
			if !sleep(ctx, res.Delay) {
				return 0, "", false
			}
			// A sender woken late (a stall, a busy CPU) would send its slot
			// next to later ones and crowd the provider's window: past
			// lateSlot, the slot lapses and a new one is taken.
			if late := time.Since(res.At); late > lateSlot(lim) {
				p.m.lateSlots.WithLabelValues().Inc()
				continue
			}
			return 0, "", true
		}
		if res.Wait > p.cfg.MaxTokenWait {
			if res.Cooldown {
				return res.Wait, "cooldown", true
			}
			return res.Wait, "token-wait", true
		}
		// Spread cooldown wake-ups by up to 10% so waiters on one key do not
		// all return in the same instant.
		w := res.Wait
		if res.Cooldown {
			w += time.Duration(rand.Int64N(int64(w)/10 + 1))
		}
		if !sleep(ctx, w) {
			return 0, "", false
		}
	}
}

// lateSlot is how late a sender may use its slot: half a slot interval,
// and no more than a quarter of the time the burst takes to refill (the
// rest is left for the trip to the provider), at least 1 ms. A send that
// late can push at most about one message into the next second.
func lateSlot(lim bucket.Limit) time.Duration {
	d := min(float64(lim.Burst)/4, 0.5) / lim.PerSecond
	return max(time.Duration(d*float64(time.Second)), time.Millisecond)
}

// reserve asks b for one slot of key: with a recipient bucket, one
// all-or-nothing reservation of both; else through the key's Dispenser (one
// Redis call per LeaseSize slots) when leases are on (st != nil); else one
// reservation.
func (p *Pacer) reserve(ctx context.Context, b Bucket, key, to string, st *keyState, lim bucket.Limit) (bucket.Reservation, error) {
	if p.cfg.RecipientLimit != (bucket.Limit{}) {
		// A slot far ahead for a busy recipient would charge the key's
		// bucket at that slot too and hold other recipients behind it, so
		// a multi reservation looks no further ahead than the key's burst
		// lasts; a busy recipient's message waits and asks again.
		reach := time.Duration(float64(lim.Burst) / lim.PerSecond * float64(time.Second))
		p.m.bucketCalls.WithLabelValues().Inc()
		return b.ReserveMulti(ctx, p.cfg.Channel, key, []bucket.Request{
			{Limit: lim, Cost: 1},
			{Sub: recipientSub(to), Limit: p.cfg.RecipientLimit, Cost: 1},
		}, max(min(p.cfg.MaxTokenWait, reach), time.Millisecond))
	}
	if p.cfg.LeaseSize <= 1 || st == nil {
		p.m.bucketCalls.WithLabelValues().Inc()
		return b.Reserve(ctx, p.cfg.Channel, key, lim, 1, p.cfg.MaxTokenWait)
	}
	d := st.dispenser(ctx, p, key, lim)
	return d.Next(ctx)
}

// recipientSub names a recipient's sub-bucket by a hash, so no address or
// device token is written into a Redis key.
func recipientSub(to string) string {
	h := sha256.Sum256([]byte(to))
	return "to:" + hex.EncodeToString(h[:12])
}

// release drops this process's claim on env.ID after the provider refused
// the message (or before any send), so a later copy can claim it. Failure
// is logged: the copy then counts as unknown-outcome, never as delivered.
func (p *Pacer) release(ctx context.Context, env Envelope, log *slog.Logger) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := p.ledger.Release(rctx, p.cfg.Channel, env.Key, env.ID, p.cfg.Owner); err != nil {
		log.Warn("could not release the idempotency claim", "err", err)
	}
}

// delivered records a successful send. The record is finished whatever
// happens here: the provider has the message.
func (p *Pacer) delivered(ctx context.Context, env Envelope, res channels.Result, log *slog.Logger) {
	p.m.delivered.WithLabelValues().Inc()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := p.redis(dctx, log, func() error {
		return p.ledger.Delivered(dctx, p.cfg.Channel, env.Key, env.ID, res.ProviderID, p.cfg.IdempotencyTTL)
	}); err != nil {
		log.Error("delivered, but the idempotency record could not be written; a re-delivered copy will count as unknown-outcome")
	}
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
	m.due = time.Now().Add(d)
	log.Warn("transient failure; retrying later", "attempt", m.attempt, "after", d, "err", cause)
	if err := p.produce(ctx, &kgo.Record{Topic: p.cfg.retryTopic(tier), Key: r.Key, Value: r.Value, Headers: m.headers(r)}, log); err != nil {
		if errors.Is(err, errTooLarge) {
			return p.deadLetter(ctx, r, m, "too-large", "the retry copy exceeds the broker's message size; last: "+cause.Error(), log)
		}
		return false
	}
	p.m.retries.WithLabelValues().Inc()
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
	ot, op, oo := m.origin, "", ""
	if parts := strings.Split(m.origin, "/"); len(parts) == 3 {
		ot, op, oo = parts[0], parts[1], parts[2]
	}
	m.due = time.Time{}
	dr := &kgo.Record{Topic: p.cfg.DLQTopic, Key: r.Key, Value: r.Value, Headers: m.headers(r,
		kgo.RecordHeader{Key: hReason, Value: []byte(reason)},
		kgo.RecordHeader{Key: hDetail, Value: []byte(detail)},
		kgo.RecordHeader{Key: hChannel, Value: []byte(p.cfg.Channel)},
		kgo.RecordHeader{Key: hOrigTopic, Value: []byte(ot)},
		kgo.RecordHeader{Key: hOrigPart, Value: []byte(op)},
		kgo.RecordHeader{Key: hOrigOff, Value: []byte(oo)},
	)}
	err := p.produce(ctx, dr, log)
	if errors.Is(err, errTooLarge) {
		// Keep the reason and origin, drop the rest; then, if still too
		// large, cut the value (the original stays in its topic at the
		// offset named, until retention).
		keep := []kgo.RecordHeader{}
		for _, h := range dr.Headers {
			switch h.Key {
			case hReason, hChannel, hOrigTopic, hOrigPart, hOrigOff:
				keep = append(keep, h)
			}
		}
		dr.Headers = keep
		if err = p.produce(ctx, dr, log); errors.Is(err, errTooLarge) {
			n := min(len(dr.Value), 512<<10)
			dr.Value = dr.Value[:n]
			dr.Headers = append(dr.Headers, kgo.RecordHeader{Key: hTruncated, Value: []byte(strconv.Itoa(len(r.Value)))})
			err = p.produce(ctx, dr, log)
		}
		log.Warn("DLQ copy too large for the broker: headers dropped and value cut if needed", "bytes", len(r.Value))
	}
	if err != nil {
		return false
	}
	p.m.dlq.WithLabelValues(label).Inc()
	log.Warn("dead-lettered", "reason", reason, "detail", detail)
	return true
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
