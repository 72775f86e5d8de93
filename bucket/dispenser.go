package bucket

import (
	"context"
	"sync"
	"time"
)

// Leaser is what a [Dispenser] draws on: *[Limiter] and *[Local] both
// implement it.
type Leaser interface {
	Lease(ctx context.Context, channel, key string, lim Limit, n int, maxWait time.Duration) (Lease, error)
	Return(ctx context.Context, lease Lease, used int) (int, error)
}

// Dispenser hands the slots of successive leases of one pacing key to the
// goroutines of one process, one slot per message, in order: one Lease
// call serves up to N sends, so Redis sees a fraction of a call per
// message however many goroutines send for the key. Leases taken by one
// goroutine at a time would each find the others' debt ahead of them and
// get few slots; one Dispenser per key and process avoids that.
//
// Next is a drop-in for [Limiter.Reserve] with cost 1. A Dispenser is safe
// for concurrent use; Close it when the key's queue is done (partition
// revoked, shutdown) to give back the slots that have not started.
type Dispenser struct {
	l            Leaser
	channel, key string
	lim          Limit
	n            int
	maxWait      time.Duration
	late         time.Duration // a slot older than this (at least Interval) lapses

	mu     sync.Mutex
	cur    Lease
	next   int  // next slot of cur to hand out
	lapsed bool // a slot of cur lapsed unused
}

// NewDispenser returns a Dispenser of (channel, key) under lim that leases
// up to n slots at a time, each lease within maxWait (see [Limiter.Lease]).
// It does not call l. Invalid arguments surface as the errors of Next.
func NewDispenser(l Leaser, channel, key string, lim Limit, n int, maxWait time.Duration) *Dispenser {
	return &Dispenser{l: l, channel: channel, key: key, lim: lim, n: n, maxWait: maxWait}
}

// WithLate sets how long after its start an unused slot may still be
// handed out (see Next): the lateness a caller accepts at its send. Below
// one slot interval, or 0 (the default), one slot interval. It returns d,
// and is meant to be called before d is shared.
func (d *Dispenser) WithLate(late time.Duration) *Dispenser {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.late = late
	return d
}

// Next returns the next slot, as a Reservation: OK with At (local clock)
// and Delay (from now) when a slot was handed out; when the bucket refuses
// a new lease, not OK with Wait and Cooldown as [Limiter.Lease] reported
// them. A slot that started more than one slot interval (or the lateness
// set by WithLate, if longer) ago while unused is skipped (it lapsed); one
// that started less long ago is handed out, as late as a sleep that
// overshot (see the package doc on late sends).
// Errors are those of [Limiter.Lease]. Next is safe for concurrent use.
func (d *Dispenser) Next(ctx context.Context) (Reservation, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if r, ok := d.held(time.Now()); ok {
		return r, nil
	}
	ls, err := d.l.Lease(ctx, d.channel, d.key, d.lim, d.n, d.maxWait)
	if err != nil {
		return Reservation{}, err
	}
	if ls.Granted == 0 {
		return Reservation{Remaining: ls.Remaining, Cooldown: ls.Cooldown, Wait: ls.Wait}, nil
	}
	d.cur, d.next, d.lapsed = ls, 1, false
	return reservationAt(ls.Start, time.Now(), ls, 0), nil
}

// Held returns the next slot of the current lease that has not lapsed, as
// Next does, but never leases anew: false when none is left. A Dispenser
// replaced by one of a higher rate hands out the slots it holds this way
// (see the pacer's keyState.dispenser).
func (d *Dispenser) Held() (Reservation, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.held(time.Now())
}

// held hands out the next slot of the current lease that has not lapsed
// at now. Callers hold d.mu.
func (d *Dispenser) held(now time.Time) (Reservation, bool) {
	for d.next < d.cur.Granted {
		at := d.cur.Slot(d.next)
		d.next++
		// A slot up to one interval (or d.late) old is still usable;
		// older ones lapsed (the bucket has moved on and counted them).
		if !at.Before(now.Add(-max(d.cur.Interval, d.late))) {
			return reservationAt(at, now, d.cur, d.next-1), true
		}
		d.lapsed = true
	}
	return Reservation{}, false
}

// reservationAt is slot i of ls, at at, handed out at now.
func reservationAt(at, now time.Time, ls Lease, i int) Reservation {
	return Reservation{OK: true, At: at, Delay: max(at.Sub(now), 0), Granted: ls.src.base, redisSlot: ls.redisSlot(i)}
}

// Limit returns the limit d leases under, as given to [NewDispenser].
func (d *Dispenser) Limit() Limit { return d.lim }

// Late returns the lateness set by [Dispenser.WithLate] (0 when none).
func (d *Dispenser) Late() time.Duration { return d.late } // set before d is shared

// Spent reports whether d holds no slot it could still hand out at now:
// every slot of its lease was handed out or has lapsed (started more than
// one slot interval before now, as [Dispenser.Next] skips them). A spent
// Dispenser can be dropped without [Dispenser.Close]: there is nothing to
// give back.
func (d *Dispenser) Spent(now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.next >= d.cur.Granted {
		return true
	}
	return d.cur.Slot(d.cur.Granted - 1).Before(now.Add(-d.cur.Interval))
}

// UsedUp reports whether every slot of d's current lease was handed out,
// none lapsed, and the last of them started within the last within before
// now: the senders kept up with the lease, so a next one would be used
// too. False before the first lease.
func (d *Dispenser) UsedUp(now time.Time, within time.Duration) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cur.Granted == 0 || d.next < d.cur.Granted || d.lapsed {
		return false
	}
	return !d.cur.Slot(d.cur.Granted - 1).Before(now.Add(-within))
}

// Close gives back the slots of the current lease that were not handed out
// and have not started ([Limiter.Return]), and reports how many. Next may
// be called again afterwards; it leases anew.
func (d *Dispenser) Close(ctx context.Context) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ls, used := d.cur, d.next
	d.cur, d.next, d.lapsed = Lease{}, 0, false
	if used >= ls.Granted {
		return 0, nil
	}
	return d.l.Return(ctx, ls, used)
}
