package bucket

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/pacerhq/pacer/internal/wire"
)

// Reservation is the answer of [Limiter.Reserve], [Limiter.ReserveMulti]
// and [Dispenser.Next].
type Reservation struct {
	// OK reports that a slot was granted: its tokens are taken, and the
	// message may go at At. When false, nothing was taken.
	OK bool
	// Delay is how long from the reply until the slot starts: sleep this
	// long (once), then send. 0 means now. Whole microseconds, rounded up:
	// a slot a fraction of a millisecond away is never reported as 0. At
	// most the maxWait asked for. 0 when !OK.
	Delay time.Duration
	// At is the slot on the local clock: the time the reply arrived plus
	// Delay. It is never earlier than the slot on the Redis clock, since the
	// reply arrives after the script ran. Zero when !OK.
	At time.Time
	// Remaining is the fewest whole tokens left in any of the buckets after
	// the call: 0 while one is in debt (slots granted ahead).
	Remaining int
	// Cooldown reports that the call was refused because the pacing key, or
	// a sub-bucket asked for, is in cooldown ([Limiter.Cooldown]).
	Cooldown bool
	// Wait is 0 when OK. When refused it is how long until a retry could be
	// granted if nobody else takes the tokens first: until the cooldown
	// ends, or until the next free slot is within maxWait. It is never 0
	// for a refusal: requeue the message for Wait (a requeue, not an
	// attempt).
	Wait time.Duration
	// Granted is when the reply that granted the slot arrived, on the
	// local clock: for a slot of a lease ([Dispenser]), the lease's reply.
	// A slot granted after a decrease of the key's adapted rate belongs to
	// the schedule at the new rate (the decrease cleared the debt of the
	// slots granted before it). Zero when !OK.
	Granted time.Time

	redisSlot int64 // the slot in µs of Redis TIME; for the accuracy test
}

// Request is one bucket of a multi-bucket call ([Limiter.ReserveMulti]).
type Request struct {
	// Sub names the bucket under the call's pacing key: "" is the pacing
	// key's own bucket ([Keys.Bucket]); any other value is the
	// sub-bucket [Keys.SubBucket](channel, key, Sub), e.g. the
	// recipient for WhatsApp's number->recipient pair limit. Every bucket of
	// a call lives in the pacing key's Redis Cluster slot.
	Sub string
	// Limit is the bucket's (rate, burst).
	Limit Limit
	// Cost is the tokens taken from this bucket, 1 to Limit.Burst.
	Cost int
}

// Reserve grants cost tokens of the bucket of (channel, key) at the next free
// slot, if that slot starts within maxWait, and says when it starts: sleep
// Reservation.Delay once, then send. Tokens not there yet are taken ahead:
// the bucket goes into debt, so the next caller's slot comes after this
// one's. Waiters are thus spaced in Redis, one slot apart, with no polling
// and no herd waking at once.
//
// If the slot would start later than maxWait from now (Redis clock), or the
// key is in cooldown, Reserve refuses without changing the bucket and
// Reservation.Wait says when to try again; the pacer requeues the message
// (not an attempt). maxWait 0 grants only tokens that are there now; a
// negative maxWait is 0, and maxWait is capped at 2^52 µs
// (about 142 years).
//
// Reserve returns an error wrapping [ErrInvalidLimit], without calling
// Redis, if lim is invalid or cost is not in [1, lim.Burst] (a request
// larger than the burst is refused, never made to wait forever). Other
// errors wrap the Redis error. Reserve is safe for concurrent use.
func (l *Limiter) Reserve(ctx context.Context, channel, key string, lim Limit, cost int, maxWait time.Duration) (Reservation, error) {
	return l.ReserveMulti(ctx, channel, key, []Request{{Limit: lim, Cost: cost}}, maxWait)
}

// ReserveMulti is [Limiter.Reserve] over several buckets of one pacing key,
// all or nothing, in one script: the slot is the first at which every
// bucket has its cost (and no cooldown of the key or of a sub-bucket asked
// for runs), and every bucket is debited as if its tokens were taken at
// that slot. So a bucket whose own slot came sooner does not hand its
// unused refill to a later caller: each bucket still conforms when the
// message goes at the common slot.
//
// Typical use, WhatsApp (Meta error 131056 is the pair limit):
//
//	r, err := l.ReserveMulti(ctx, "whatsapp", phoneID, []bucket.Request{
//		{Limit: bucket.Limit{PerSecond: 80, Burst: 80}, Cost: 1},
//		{Sub: recipient, Limit: bucket.Limit{PerSecond: 1.0 / 6, Burst: 45}, Cost: 1},
//	}, 5*time.Second)
//
// It returns an error wrapping [ErrInvalidLimit], without calling Redis, if
// reqs is empty or longer than 32, names a bucket twice, or has an invalid
// limit or cost. Other errors wrap the Redis error. ReserveMulti is safe
// for concurrent use.
func (l *Limiter) ReserveMulti(ctx context.Context, channel, key string, reqs []Request, maxWait time.Duration) (Reservation, error) {
	keys, args, err := l.multiCall(channel, key, reqs, 1, maxWait)
	if err != nil {
		return Reservation{}, err
	}
	rep, recv, err := l.runReserve(ctx, "reserve", keys, args, 1, maxWait, reqs[0].Limit.Burst)
	if err != nil {
		return Reservation{}, err
	}
	return rep.reservation(recv), nil
}

// runReserve runs reserve.lua with keys and args built by multiCall for up
// to n slots, bucket 1 having burst1 tokens, and returns its checked reply
// and when it was received. Its errors name op ("reserve", "lease") and
// the first key, and wrap the Redis error or describe a reply out of shape.
func (l *Limiter) runReserve(ctx context.Context, op string, keys []string, args []any, n int, maxWait time.Duration, burst1 int) (reserveReply, time.Time, error) {
	v, err := reserveScript.Run(ctx, l.rdb, keys, args...).Result()
	recv := time.Now()
	if err != nil {
		return reserveReply{}, recv, fmt.Errorf("bucket: %s %q: %w", op, keys[0], err)
	}
	rep, ok := parseReserve(v, n, waitUS(maxWait), burst1)
	if !ok {
		return reserveReply{}, recv, fmt.Errorf("bucket: %s %q: unexpected reply %s", op, keys[0], wire.Describe(v))
	}
	return rep, recv, nil
}

// maxRequests is the most buckets one multi-bucket call takes.
const maxRequests = 32

// multiCall builds the KEYS and ARGV of reserve.lua, checking reqs.
func (l *Limiter) multiCall(channel, key string, reqs []Request, n int, maxWait time.Duration) ([]string, []any, error) {
	if len(reqs) == 0 || len(reqs) > maxRequests {
		return nil, nil, fmt.Errorf("%w: %d buckets, want 1 to %d", ErrInvalidLimit, len(reqs), maxRequests)
	}
	keys := make([]string, 0, 2*len(reqs))
	args := make([]any, 0, 2+3*len(reqs))
	args = append(args, waitUS(maxWait), n)
	for i, r := range reqs {
		if err := validateCost(r.Limit, r.Cost); err != nil {
			return nil, nil, err
		}
		for _, o := range reqs[:i] {
			if o.Sub == r.Sub {
				return nil, nil, fmt.Errorf("%w: bucket %q asked for twice", ErrInvalidLimit, r.Sub)
			}
		}
		if r.Sub == "" {
			keys = append(keys, l.keys.Bucket(channel, key), l.keys.Cooldown(channel, key))
		} else {
			keys = append(keys, l.keys.SubBucket(channel, key, r.Sub), l.keys.SubCooldown(channel, key, r.Sub))
		}
		args = append(args, wire.Rate(r.Limit.PerSecond), r.Limit.Burst, r.Cost)
	}
	return keys, args, nil
}

// reserveReply is reserve.lua's reply.
type reserveReply struct {
	granted, delay, wait, cooldown, remaining, u0, now int64
}

// parseReserve checks reserve.lua's reply to a call for up to n slots with
// a maximum wait of maxWait µs, bucket 1 having burst1 tokens.
func parseReserve(v any, n int, maxWait int64, burst1 int) (reserveReply, bool) {
	var r [7]int64
	if !wire.Ints(v, r[:]) {
		return reserveReply{}, false
	}
	rep := reserveReply{r[0], r[1], r[2], r[3], r[4], r[5], r[6]}
	ok := rep.granted >= 0 && rep.granted <= int64(n) &&
		rep.cooldown >= 0 && rep.cooldown <= 1 &&
		rep.remaining >= 0 && rep.remaining <= maxBurst &&
		rep.u0 >= -maxDebtU && rep.u0 <= int64(burst1)*1e6 && rep.now >= 0
	if rep.granted > 0 {
		ok = ok && rep.delay >= 0 && rep.delay <= maxWait && rep.wait == 0 && rep.cooldown == 0
	} else {
		ok = ok && rep.delay == 0 && rep.wait >= 1
	}
	return rep, ok
}

// reservation turns a reply received at recv into a Reservation.
func (rep reserveReply) reservation(recv time.Time) Reservation {
	if rep.granted == 0 {
		return Reservation{
			Remaining: int(rep.remaining),
			Cooldown:  rep.cooldown == 1,
			Wait:      wire.Duration(rep.wait, time.Microsecond),
		}
	}
	d := wire.Duration(rep.delay, time.Microsecond)
	return Reservation{OK: true, Delay: d, At: recv.Add(d), Remaining: int(rep.remaining), Granted: recv,
		redisSlot: rep.now + rep.delay}
}

// maxLease is the most slots one lease asks for.
const maxLease = 1_000_000_000

// Lease is the answer of [Limiter.Lease]: up to n slots of one token each,
// taken in one call and spent locally, one message per slot, in order.
type Lease struct {
	// Granted is the number of slots granted, 0 (refused) to n. Their
	// tokens are taken: slot i (0 <= i < Granted) may carry one message at
	// [Lease.Slot](i).
	Granted int
	// Start is Slot(0) on the local clock; zero when refused.
	Start time.Time
	// Interval is the time between slots once the tokens that were there
	// at the call are spent: 1 / PerSecond (slots are whole microseconds,
	// rounded up, so single gaps may be 1 µs longer or shorter).
	Interval time.Duration
	// Remaining is the whole tokens left in the bucket after the call (0
	// while it is in debt).
	Remaining int
	// Cooldown reports a refusal because the pacing key is in cooldown.
	Cooldown bool
	// Wait is 0 when granted; when refused, how long until a retry could be
	// granted (never 0), as [Reservation].Wait.
	Wait time.Duration

	src *leaseSource // nil when refused
}

// leaseSource is what a Lease needs to compute its slots and to be
// returned.
type leaseSource struct {
	channel, key string
	lim          Limit
	base         time.Time // local time of the reply: slot offsets start here
	u0           int64     // millionths in the bucket at the call, before the lease
	now0         int64     // Redis TIME of the call, µs
	local        *Local    // set for a lease of a Local
	returned     atomic.Bool
}

// Slot returns the start of slot i (0 <= i < Granted) on the local clock:
// the time the lease's reply arrived plus the slot's offset from the
// script's now, rounded up to the microsecond, so it is never earlier than
// the slot on the Redis clock. Slots that the bucket held at the call all
// start at once; the others follow 1 / PerSecond apart. Slot returns the
// zero Time for an i out of range. Slot is safe for concurrent use.
func (ls Lease) Slot(i int) time.Time {
	if ls.src == nil || i < 0 || i >= ls.Granted {
		return time.Time{}
	}
	return ls.src.base.Add(wire.Duration(ls.offsetUS(i), time.Microsecond))
}

// offsetUS is the start of slot i in µs after the lease's call.
func (ls Lease) offsetUS(i int) int64 {
	s := ls.src
	return slotUS(float64(float64(i+1)*1e6)-float64(s.u0), s.lim.PerSecond) // no FMA: the scripts round each step
}

// returning starts the Return of ls's slots from used on to owner (the
// Local that granted it; nil: a Limiter): its source and used (at least
// 0), or a nil source when there is nothing to give back, with an error
// for a lease of another owner or one returned before (ErrReturned).
func (ls Lease) returning(owner *Local, used int) (*leaseSource, int, error) {
	s := ls.src
	switch {
	case s == nil || used >= ls.Granted:
		return nil, 0, nil
	case s.local != owner && owner == nil:
		return nil, 0, fmt.Errorf("bucket: return of a lease of a Local to a Limiter")
	case s.local != owner:
		return nil, 0, fmt.Errorf("bucket: return of a lease to a limiter that did not grant it")
	case !s.returned.CompareAndSwap(false, true):
		return nil, 0, ErrReturned
	}
	return s, max(used, 0), nil
}

// redisSlot is the start of slot i in µs of Redis TIME.
func (ls Lease) redisSlot(i int) int64 { return ls.src.now0 + ls.offsetUS(i) }

// Lease takes up to n slots of one token each from the bucket of (channel,
// key) in one call: all the slots that start within maxWait from now, at
// most n. Spend them locally, one message per slot, in order, at
// [Lease.Slot](i): at high per-key rates Redis then sees one call per
// Granted messages instead of one per message. Like [Limiter.Reserve], the
// tokens are taken now (the bucket may go into debt), so other callers'
// slots come after the lease's.
//
// If not even the first slot starts within maxWait, or the key is in
// cooldown, Lease refuses (Granted 0) without changing the bucket, and
// Lease.Wait says when to try again. maxWait is treated as by Reserve.
//
// Slots not used lapse: the key never exceeds its limit through them, but
// their tokens are lost. Give back those that have not started yet with
// [Limiter.Return] (at shutdown, or when the queue runs dry) to lose
// nothing but the started ones. Keep n to what the caller has to send
// within maxWait.
//
// Lease returns an error wrapping [ErrInvalidLimit], without calling Redis,
// if lim is invalid or n is not in [1, 10^9]. Other errors wrap the Redis
// error. Lease is safe for concurrent use.
func (l *Limiter) Lease(ctx context.Context, channel, key string, lim Limit, n int, maxWait time.Duration) (Lease, error) {
	if err := validateLease(lim, n); err != nil {
		return Lease{}, err
	}
	keys, args, err := l.multiCall(channel, key, []Request{{Limit: lim, Cost: 1}}, n, maxWait)
	if err != nil {
		return Lease{}, err
	}
	rep, recv, err := l.runReserve(ctx, "lease", keys, args, n, maxWait, lim.Burst)
	if err != nil {
		return Lease{}, err
	}
	return rep.lease(recv, &leaseSource{channel: channel, key: key, lim: lim}), nil
}

func validateLease(lim Limit, n int) error {
	if err := lim.Validate(); err != nil {
		return err
	}
	if n < 1 || n > maxLease {
		return fmt.Errorf("%w: lease of %d slots, want 1 to %d", ErrInvalidLimit, n, maxLease)
	}
	return nil
}

// lease turns a reply received at recv into a Lease drawing on src.
func (rep reserveReply) lease(recv time.Time, src *leaseSource) Lease {
	ls := Lease{
		Granted:   int(rep.granted),
		Interval:  interval(src.lim.PerSecond),
		Remaining: int(rep.remaining),
		Cooldown:  rep.cooldown == 1,
		Wait:      wire.Duration(rep.wait, time.Microsecond),
	}
	if rep.granted == 0 {
		return ls
	}
	src.base, src.u0, src.now0 = recv, rep.u0, rep.now
	ls.src = src
	ls.Start = ls.Slot(0)
	return ls
}

// interval is 1 / perSecond as a Duration, saturating.
func interval(perSecond float64) time.Duration {
	d := 1e9 / perSecond
	if d >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(math.Ceil(d))
}

// ErrReturned is returned by [Limiter.Return] for a lease that was already
// returned: a second return would give back tokens twice.
var ErrReturned = errors.New("bucket: lease already returned")

// Return gives back the slots of lease after the first used that have not
// started yet (on the Redis clock), and reports how many it gave back.
// Slots that have started lapse. The bucket is left exactly as if the
// given-back slots had never been granted, so the key cannot exceed its
// limit through them, and later callers get them.
//
// Call it at most once per lease, with used the number of slots the caller
// used or still will (the first ones, in order); later calls return
// [ErrReturned]. A refused lease, or used >= Granted, returns 0 without
// calling Redis. used < 0 counts as 0. Other errors wrap the Redis error.
// Return is safe for concurrent use.
func (l *Limiter) Return(ctx context.Context, lease Lease, used int) (int, error) {
	s, used, err := lease.returning(nil, used)
	if s == nil {
		return 0, err
	}
	bk := l.keys.Bucket(s.channel, s.key)
	v, err := leaseReturnScript.Run(ctx, l.rdb, []string{bk},
		wire.Rate(s.lim.PerSecond), s.lim.Burst, 1, s.now0, s.u0, lease.Granted, used).Result()
	if err != nil {
		return 0, fmt.Errorf("bucket: return %q: %w", bk, err)
	}
	n, ok := v.(int64)
	if !ok || n < 0 || n > int64(lease.Granted-used) {
		return 0, fmt.Errorf("bucket: return %q: unexpected reply %s", bk, wire.Describe(v))
	}
	return int(n), nil
}
