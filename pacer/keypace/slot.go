package keypace

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/tick"
	"github.com/pacerhq/pacer/pacer/suppress"
)

// reserveAhead is how far ahead of now, at the key's adapted rate, the
// senders of one process hold slots of a key at its configured rate (its
// ceiling). Slots granted ahead were counted at the rate of their grant:
// however many senders wait (the pacer's InFlight per partition), a change of
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
func aheadSenders(lim bucket.Limit, pol KeyPolicy, maxWait time.Duration, adapting bool) int {
	if pol.RecipientLimit != (bucket.Limit{}) {
		return max(int(math.Ceil(lim.PerSecond*multiReach(lim, maxWait).Seconds()))+1, 1)
	}
	ahead := reserveAhead
	if adapting {
		ahead = reserveAheadAdapting
	}
	return max(int(math.Ceil(lim.PerSecond*ahead.Seconds()))+lim.Burst, 1)
}

// Slot waits for the key's next send slot (see acquire); none within
// MaxTokenWait requeues the record ("cooldown", "token-wait"). An account
// or pair cooldown that began while it slept on its slot sends it back to
// the gates (Again): the slot lapses. high is the record's priority (see
// acquire). ahead, if not nil, is called lead before the slot starts (see
// acquire). Slot waits, so it reads the clock, as rate.Limiter's Wait does.
func (k *Key) Slot(ctx context.Context, high bool, lead time.Duration, ahead func(at time.Time), log *slog.Logger) Verdict {
	wait, reason, paced, ok := k.ks.acquire(ctx, k.name, k.to, high, k.st, k.pol, k.lim, log, lead, ahead)
	if !ok {
		return Verdict{Kind: Stop}
	}
	// acquire paced the slot at the key's limit of its end, which may be
	// newer than the one read before: the send and its result use it too.
	k.lim, k.pol, _ = k.st.current(k.lim, k.pol, nowInstant())
	if wait > 0 {
		return requeue(reason, wait)
	}
	// An account or pair cooldown that began while this sender slept on
	// its slot: the slot lapses, and the gates hold the record.
	if left, _ := k.scopeLeft(ctx); left > 0 {
		return Verdict{Kind: Again}
	}
	k.paced = paced
	return Verdict{}
}

// acquire waits for a send slot of key under lim: one reservation (or a
// slot of a lease shared by this process's senders for the key) and one
// sleep until it starts. It returns (0, "", true) once the slot started; or,
// when no slot is to be had within MaxTokenWait, the wait and why
// ("cooldown" or "token-wait") without waiting. ok is false when ctx ended.
//
// Priority changes the order, never the rate: a high-priority record,
// while normal ones of its key wait for slots in this process, takes the
// first of their slots to start (the normal record that held it reserves
// anew, behind the slots already handed out); it reserves its own only when
// none comes within handoffWait. So the slots leased or reserved for a
// campaign's backlog hold a high record back by about one slot interval.
//
// At most rate * reserveAhead + burst senders of a key in this process hold
// a slot not yet started (aheadSenders; fewer with a recipient bucket, and
// a quarter of that ahead while the key's rate is adapted below its
// ceiling), so a change of the rate takes effect within about that long.
//
// ahead, if not nil, is called once per slot granted, lead (the ledger's
// flush interval plus the pacer's claim margin) before the slot starts (at
// once when it starts sooner): it starts the record's claim (the pacer's
// claimAhead).
//
// paced is the key's adapted rate this process knew when the slot was
// granted (see [adapt.Adapter.ThrottledAfter]): a slot granted at a rate
// since lowered, and kept (see below), was paced at the old one.
func (p *Keys) acquire(ctx context.Context, key, to string, high bool, st *keyState, pol KeyPolicy, lim bucket.Limit, log *slog.Logger, lead time.Duration, ahead func(at time.Time)) (wait time.Duration, reason string, paced float64, ok bool) {
	st.mu.Lock()
	paced = st.adapted.Rate // a slot handed off was granted at most a slot interval ago
	st.mu.Unlock()
	if high && st.normalWaiting.Load() > 0 {
		t := time.NewTimer(handoffWait(lim, p.cfg.MaxTokenWait))
		select {
		case <-st.handoffChan(true):
			t.Stop()
			return 0, "", paced, true
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return 0, "", 0, false
		}
	}
	gate := st.aheadGate(aheadSenders(lim, pol, p.cfg.MaxTokenWait, paced > 0 && paced < pol.Limit.PerSecond))
	select {
	case gate <- struct{}{}:
	case <-ctx.Done():
		return 0, "", 0, false
	}
	held := true
	defer func() {
		if held {
			<-gate
		}
	}()
	if !high {
		st.normalWaiting.Add(1)
		defer st.normalWaiting.Add(-1)
	}
	for {
		var res bucket.Reservation
		start := time.Now()
		cutAt := st.cutAt.Load()
		// The key's limit of now: one read before a wait (for the gate, a
		// slot that lapsed, a cooldown) may be that of an old rate.
		var hold time.Duration
		lim, pol, hold = st.current(lim, pol, instantOf(start))
		if hold > 0 {
			// The key's limit rose while this process held slots of the
			// old rate: the new rate starts after them.
			if !tick.Sleep(ctx, hold) {
				return 0, "", 0, false
			}
			continue
		}
		st.mu.Lock()
		paced = st.adapted.Rate
		st.mu.Unlock()
		err := p.redis(ctx, log, func() (err error) {
			res, err = p.reserve(ctx, p.bucket, key, to, st, pol, lim)
			return err
		})
		if errors.Is(err, ErrRedisDown) {
			res, err = p.reserve(ctx, p.fallback, key, to, nil, pol, lim)
		}
		if err != nil {
			return 0, "", 0, false
		}
		p.mt.TakeLatency.Observe(time.Since(start).Seconds())
		if res.OK {
			st.handedOut(res.At)
			if ahead != nil {
				if !tick.Sleep(ctx, time.Until(res.At.Add(-lead))) {
					return 0, "", 0, false
				}
				ahead(res.At)
			}
			if !tick.Sleep(ctx, time.Until(res.At)) {
				return 0, "", 0, false
			}
			// A sender woken late (a stall, a busy CPU) would send its slot
			// next to later ones and crowd the provider's window: past
			// lateSlot, the slot lapses and a new one is taken.
			late := time.Since(res.At)
			p.mt.Lateness.Observe(max(late, 0).Seconds())
			if late > lateSlot(pol.Limit, lim) {
				p.mt.LateSlots.Inc()
				continue
			}
			// The rate was lowered while this sender slept: a slot
			// granted before the decrease was granted at the old rate, and
			// the decrease cleared the debt such slots made; a new slot at
			// the new rate replaces it. A slot granted after the decrease
			// (another replica made it, and this process learned of it at
			// its refresh, up to a second later) is part of the new
			// schedule: dropping it would leave its place unused by every
			// replica, a gap of up to a second of the key's rate.
			if c := st.cutAt.Load(); c != cutAt && res.Granted.UnixNano() < c {
				st.mu.Lock()
				lim = st.limit
				st.mu.Unlock()
				continue
			}
			if !high {
				select {
				case st.handoffChan(false) <- struct{}{}:
					p.mt.Handoffs.Inc()
					continue // a high-priority record sends in this slot
				default:
				}
			}
			return 0, "", paced, true
		}
		if res.Wait > p.cfg.MaxTokenWait {
			if res.Cooldown {
				return res.Wait, "cooldown", 0, true
			}
			return res.Wait, "token-wait", 0, true
		}
		// Spread cooldown wake-ups by up to 10% so waiters on one key do not
		// all return in the same instant.
		w := res.Wait
		if res.Cooldown {
			w += time.Duration(rand.Int64N(int64(w)/10 + 1))
		}
		if res.Cooldown || w <= time.Duration(float64(time.Second)/lim.PerSecond) {
			if !tick.Sleep(ctx, w) {
				return 0, "", 0, false
			}
			continue
		}
		// No slot within reach for longer than one slot interval of the
		// key: its recipient is busy. It waits outside the gate, so it does
		// not hold a place the key's other recipients could use.
		<-gate
		held = false
		if !tick.Sleep(ctx, w) {
			return 0, "", 0, false
		}
		select {
		case gate <- struct{}{}:
			held = true
		case <-ctx.Done():
			return 0, "", 0, false
		}
	}
}

// handoffWait is how long a high-priority record waits for a normal one's
// slot before it reserves its own: two slot intervals of lim, within
// [50 ms, maxWait].
func handoffWait(lim bucket.Limit, maxWait time.Duration) time.Duration {
	d := time.Duration(2 / lim.PerSecond * float64(time.Second))
	return min(max(d, 50*time.Millisecond), maxWait)
}

// lateSlot is how late after its granted slot a sender of a key paced
// at lim (the adapted limit of ceiling, see [adapt.Adapted.Limit]) may
// still send; a sender woken later gives the slot up and takes a new one
// (pacer_late_slots_total), which wastes the slot's token.
//
// Why lateness within the pacing headroom is harmless: the slots granted
// for a key conform to lim = (r, Bp): any window of T seconds holds at
// most Bp + r*T of them (package bucket, checked by its accuracy soak).
// Sends each made between 0 and L after their slot put into a window of T
// seconds only slots of a window of T + L, so at most Bp + r*(T + L): the
// provider's r*T + B holds while L <= (B - Bp) / r, where B is the
// provider's burst at rate r (the ceiling's burst scaled down with the
// adapted rate, as Limit scales it, rounded down). That headroom, B - Bp
// tokens, is what Limit takes off the burst for the network's jitter
// ([adapt.AIMD].Jitter): sends that reach the provider early relative to
// the ones before them. A late wake-up moves a send the same way a slow
// trip does, so the two share it: a sender may use half of (B - Bp) / r,
// and the network keeps the other half.
//
// The result is never below the floor the pacer kept before counting the
// headroom: half a slot interval and at most a quarter of the burst's
// refill time, at least 1 ms (a key with no headroom, burst 1 or no jitter
// configured, gets only that). So 1,000/s burst 10 (paced at burst 5)
// allows 2.5 ms, 80/s burst 10 (paced at burst 8) 12.5 ms, 0.5/s burst 1
// (paced at 0.4938/s) 0.51 s.
//
// Senders are not made more punctual instead (a dispatcher per key, a
// spin, a nanosleep thread): see docs/decisions/0015 and 0025.
func lateSlot(ceiling, lim bucket.Limit) time.Duration {
	if !(lim.PerSecond > 0) {
		return time.Millisecond
	}
	floor := max(time.Duration(min(float64(lim.Burst)/4, 0.5)/lim.PerSecond*float64(time.Second)), time.Millisecond)
	b := ceiling.Burst // the provider's burst at the paced rate
	if ceiling.PerSecond > 0 && lim.PerSecond < ceiling.PerSecond {
		b = max(int(float64(ceiling.Burst)*lim.PerSecond/ceiling.PerSecond), 1)
	}
	if b <= lim.Burst {
		return floor
	}
	share := time.Duration(float64(b-lim.Burst) / lim.PerSecond / 2 * float64(time.Second))
	return max(share, floor)
}

// leaseBacklog is the automatic lease size from which a key leases while
// another of its senders waits for a slot besides the one asking (see
// leaseWaiters). A smaller lease (a key under 100 msgs/s) is taken only
// while the key has at least as many senders waiting for slots in this
// process, so its slots are used rather than left to lapse; with fewer,
// each sender reserves its own slot.
const leaseBacklog = 20

// leaseWaiters is how many senders of a key, the one asking included,
// must wait for slots in this process for a lease of leaseBacklog slots or
// more. A lease's slots start one interval apart whether a sender holds
// them or not: a lone sender asks for the next one only after its send was
// answered, so with answers longer than an interval it sends late or waits
// for the slot after, every message (strict order: one record in hand),
// where a reservation of its own is granted at once. A second sender
// waiting holds the next slot before it starts.
const leaseWaiters = 2

// reserve asks b for one slot of key under lim (the adapted limit of
// pol.Limit): with a recipient bucket (configured, or a pair's learned
// rate, the lower of the two), one all-or-nothing reservation of both; else
// through the key's Dispenser (one Redis call per lease) when leases are on
// for the key (see leaseBacklog) and st != nil; else one reservation.
func (p *Keys) reserve(ctx context.Context, b Bucket, key, to string, st *keyState, pol KeyPolicy, lim bucket.Limit) (bucket.Reservation, error) {
	rl := pol.RecipientLimit
	if st != nil && st.anyPairRate() {
		// A pair that learned its rate from throttles is paced at it.
		if r := st.pairRate(recipientSub(to)); r > 0 && (rl == (bucket.Limit{}) || r < rl.PerSecond) {
			rl = bucket.Limit{PerSecond: r, Burst: 1}
		}
	}
	if rl != (bucket.Limit{}) {
		// A slot far ahead for a busy recipient would charge the key's
		// bucket at that slot too and hold other recipients behind it, so
		// a multi reservation looks no further ahead than the key's burst
		// lasts; a busy recipient's message waits and asks again.
		p.mt.BucketCalls.Inc()
		return b.ReserveMulti(ctx, p.cfg.Channel, key, []bucket.Request{
			{Limit: lim, Cost: 1},
			{Sub: recipientSub(to), Limit: rl, Cost: 1},
		}, multiReach(lim, p.cfg.MaxTokenWait))
	}
	n := p.cfg.leaseSize(pol.Limit, lim)
	waiters := n
	if n >= leaseBacklog {
		waiters = leaseWaiters
	}
	if n <= 1 || st == nil || (p.cfg.LeaseSize == 0 && int(st.normalWaiting.Load()) < waiters && !st.leasing(lim)) {
		p.mt.BucketCalls.Inc()
		return b.Reserve(ctx, p.cfg.Channel, key, lim, 1, p.cfg.MaxTokenWait)
	}
	return st.take(ctx, p, key, pol.Limit, lim, n)
}

// multiReach is how far ahead a reservation of a key's and a recipient's
// buckets together looks: as long as the key's burst lasts at lim, at
// most maxWait, at least 1 ms.
func multiReach(lim bucket.Limit, maxWait time.Duration) time.Duration {
	reach := time.Duration(float64(lim.Burst) / lim.PerSecond * float64(time.Second))
	return max(min(maxWait, reach), time.Millisecond)
}

// recipientSub names a recipient's sub-bucket by a hash, so no address or
// device token is written into a Redis key: [PairSub] of its
// [suppress.Hash], which takes every spelling of one recipient alike
// ("+15551234567" and WhatsApp's "15551234567"), so a pair throttle a
// status webhook reports names the sub-bucket the pacer sends under.
func recipientSub(to string) string {
	return PairSub(suppress.Hash(to))
}

// PairSub names the pair (key, recipient) of the recipient whose
// [suppress.Hash] is hash, as the pacer keeps its cooldown and learned
// rate ([adapt.Adapter.PairThrottled]): "to:<hash>".
func PairSub(hash string) string { return "to:" + hash }

// countingLeaser counts the Lease calls a Dispenser makes in
// pacer_bucket_calls_total.
type countingLeaser struct{ p *Keys }

func (c countingLeaser) Lease(ctx context.Context, channel, key string, lim bucket.Limit, n int, maxWait time.Duration) (bucket.Lease, error) {
	c.p.mt.BucketCalls.Inc()
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
func (st *keyState) dispenser(ctx context.Context, p *Keys, key string, ceiling, lim bucket.Limit, n int) *bucket.Dispenser {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.dispenserLocked(ctx, p, key, ceiling, lim, n)
}

// dispenserLocked is dispenser for callers that hold st.mu.
func (st *keyState) dispenserLocked(ctx context.Context, p *Keys, key string, ceiling, lim bucket.Limit, n int) *bucket.Dispenser {
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

// leasing reports whether the key keeps leasing under lim whatever the
// number of its senders waiting: its dispenser still holds a slot it could
// hand out (a reservation of its own would cost a bucket call and leave
// that slot to lapse), or its senders used the last lease whole as it ran
// (none lapsed, the last slot within a lease's span ago), so they would use
// the next. With a slow provider the senders waiting dip below a lease's
// size while the records on the wire hold their places: at 50 numbers at
// 80/s reservations of their own were most of the bucket calls (about
// 20,700 of 25,100 for 80,000 messages, against 7,600 calls in all with an
// instant provider). A lease whose slots lapsed falls back to counting
// the senders waiting.
func (st *keyState) leasing(lim bucket.Limit) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.disp == nil || st.disp.Limit() != lim {
		return false
	}
	now := time.Now()
	return !st.disp.Spent(now) || st.disp.UsedUp(now, leaseSpan)
}

// take returns the key's next slot: one the dispenser a raise replaced
// still holds (see dispenser), else one of the key's dispenser for lim
// (see [bucket.Dispenser.Next]).
func (st *keyState) take(ctx context.Context, p *Keys, key string, ceiling, lim bucket.Limit, n int) (bucket.Reservation, error) {
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

// MaxLeaseSize is the most slots one lease takes (Config.LeaseSize): a
// lease is one Lua call holding the key's slot.
const MaxLeaseSize = 256

// leaseSize is how many slots one Redis lease takes for a key whose
// ceiling is ceiling and adapted limit lim: Config.LeaseSize when set, else
// leaseSpan of slots at the adapted rate when that is at least 2, else 1 (one
// reservation per message); never more than MaxLeaseSize. The burst does
// not cap it: a lease's slots are spaced at the rate (the bucket goes into
// debt for them, as for reservations made ahead), so a lease of leaseSpan of
// slots bunches nothing; it only holds other replicas' slots back by as
// much, and a throttle gives back the slots not started (dropLease).
// Below 20 slots, [Keys.reserve] leases only while the key has that many
// senders waiting (see leaseBacklog).
// leaseSpan is how much of a key's rate one automatic lease takes: one
// bucket call per 16 messages at 80 msgs/s (0.06 per message), per 200 at
// 1,000 msgs/s. At 100 ms a busy key at 80/s made 0.13 bucket calls per
// message, most of its Redis round trips.
const leaseSpan = 200 * time.Millisecond

func (c *Config) leaseSize(ceiling, lim bucket.Limit) int {
	n := c.LeaseSize
	if n <= 0 {
		n = int(min(ceiling.PerSecond, lim.PerSecond) * leaseSpan.Seconds())
		if n < 2 {
			n = 1
		}
	}
	return max(min(n, MaxLeaseSize), 1)
}
