// Package park holds what a parked record carries and how it waits.
//
// A record is parked when its pacing key holds its lookahead bound: the
// consumer writes a copy of it to a retry tier, due at (or before) its
// estimated send slot, and finishes the original once Kafka acknowledged
// the copy. The copy carries its slot ([envelope.HeaderSlot]) and the
// key's rate the slot was estimated at ([envelope.HeaderParkRate]). When
// it comes back, [UntilDue] holds it until it is due, taking it early when
// its key's rate rose meanwhile: its due time was an estimate at the old
// rate.
package park

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacerhq/pacer/internal/tick"
	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Recheck is how often a parked record waiting for its due time looks
// whether its key's rate rose.
const Recheck = 250 * time.Millisecond

// Tier returns where a copy parked for wait (until its estimated slot)
// goes: the retry tier (1 to len(delays)) with the longest delay not above
// wait, tier 1 when wait is shorter than every delay, and how long after
// now it is due there, the lesser of wait and that tier's delay. So the
// records of a tier stay in the order they fall due, and a copy comes back
// no later than its slot. delays are the tiers' delays, shortest first
// (at least one).
func Tier(delays []time.Duration, wait time.Duration) (tier int, due time.Duration) {
	tier = 1
	for i, d := range delays {
		if d <= wait {
			tier = i + 1
		}
	}
	return tier, min(wait, delays[tier-1])
}

// Headers returns the headers a copy parked for the parks-th time (1 for
// its first) carries beside the consumer's: the count of its hops
// (envelope.HeaderParks) and its estimated slot (envelope.HeaderSlot).
func Headers(parks int, slot time.Time) []kgo.RecordHeader {
	return []kgo.RecordHeader{
		{Key: envelope.HeaderParks, Value: []byte(strconv.Itoa(parks))},
		{Key: envelope.HeaderSlot, Value: []byte(strconv.FormatInt(slot.UnixMilli(), 10))},
	}
}

// chainSeq numbers the chains of this process: a token is owner-seq, so
// no other process or earlier run of this one can hold a live chain of it.
var chainSeq atomic.Int64

// NewToken returns the token of a new strict-order chain of this process,
// owner its consumer's owner name.
func NewToken(owner string) string {
	return fmt.Sprintf("%s-%d", owner, chainSeq.Add(1))
}

// ChainHeaders returns the headers a copy parked in the chain named token
// carries beside the consumer's, for its parks-th hop: the count of its
// hops and its chain header (envelope.HeaderChain: the token and offset,
// the record's offset in its main partition).
func ChainHeaders(parks int, token string, offset int64) []kgo.RecordHeader {
	return []kgo.RecordHeader{
		{Key: envelope.HeaderParks, Value: []byte(strconv.Itoa(parks))},
		{Key: envelope.HeaderChain, Value: []byte(token + "/" + strconv.FormatInt(offset, 10))},
	}
}

// ChainOf reads r's chain header: the chain's token and the record's main
// offset. isCopy is false when r carries none; a header that does not
// parse gives isCopy true and token "" (a copy of no live chain).
func ChainOf(r *kgo.Record) (token string, offset int64, isCopy bool) {
	v := envelope.Header(r, envelope.HeaderChain)
	if v == "" {
		return "", 0, false
	}
	i := strings.LastIndexByte(v, '/')
	if i < 0 {
		return "", 0, true
	}
	off, err := strconv.ParseInt(v[i+1:], 10, 64)
	if err != nil {
		return "", 0, true
	}
	return v[:i], off, true
}

// SlotOf returns r's estimated slot (envelope.HeaderSlot), if it has one.
func SlotOf(r *kgo.Record) (time.Time, bool) {
	ms, err := strconv.ParseInt(envelope.Header(r, envelope.HeaderSlot), 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// RateHeader returns the envelope.HeaderParkRate header for rate msgs/s.
func RateHeader(rate float64) kgo.RecordHeader {
	return kgo.RecordHeader{Key: envelope.HeaderParkRate, Value: []byte(strconv.FormatFloat(rate, 'g', 6, 64))}
}

// RateOf returns r's envelope.HeaderParkRate in msgs/s, 0 when it has none
// (or a value that is not a rate > 0).
func RateOf(r *kgo.Record) float64 {
	for _, h := range r.Headers {
		if h.Key == envelope.HeaderParkRate {
			if v, err := strconv.ParseFloat(string(h.Value), 64); err == nil && v > 0 {
				return v
			}
		}
	}
	return 0
}

// Rescale moves due, estimated at was msgs/s, to where it falls when the
// key's rate became rate msgs/s at since: the records ahead of it drain at
// rate from since on. A due at or before since, or a rate not above was,
// is kept.
func Rescale(due, since time.Time, was, rate float64) time.Time {
	left := due.Sub(since)
	if left <= 0 || !(rate > was) || !(was > 0) {
		return due
	}
	return since.Add(time.Duration(float64(left) * was / rate))
}

// Rates answers, for a parked record of key estimated at was msgs/s, the
// lowest rate the key has had since its rate rose above was, and since
// when (see [Marks.Seen]).
type Rates func(key string, was float64) (float64, time.Time)

// UntilDue holds r until due, and reports false if ctx ended first. A copy
// parked beyond its key's lookahead (it carries envelope.HeaderParkRate)
// is taken early when its key's rate rose meanwhile (`pacer limit set`, a
// clean AIMD window): at once and then every Recheck it asks rates for
// the key's lowest rate since it rose, and moves due earlier as if the
// records ahead had drained at it since then ([Rescale]). A lowered rate
// keeps due: the copy comes back early and waits for its slot in the
// bucket, as every parked copy may.
//
// Such a copy is also taken at once, at the start and at every Recheck,
// when room (may be nil) reports that its key has room for it: too few of
// its records wait for slots in this process to use the slots coming
// (see [Room]). Its due time was estimated with the records then ahead of
// it, and some of those may never be sent at their slots: a paused or
// cancelled campaign's records interleaved with its own on one key, ids
// found delivered, expired messages. Without it the key would run, from
// its parked copies alone, at the pace of the estimate: half its rate when
// half the records ahead are a paused campaign's.
func UntilDue(ctx context.Context, r *kgo.Record, due time.Time, rates Rates, room Room) bool {
	was, key := RateOf(r), string(r.Key)
	var rate func(was float64) (float64, time.Time)
	var free func() bool
	if was > 0 && key != "" {
		rate = func(was float64) (float64, time.Time) { return rates(key, was) }
		if room != nil {
			free = func() bool { return room(key) }
		}
	}
	return waitRescaled(ctx, due, was, rate, free)
}

// Room reports whether key has room for a parked copy before its due
// time: fewer of its records wait for slots in this process than it can
// send before the copy looks again (see UntilDue).
type Room func(key string) bool

// waitRescaled is UntilDue for a copy estimated at was msgs/s whose key's rate
// rate answers; a nil rate keeps due. free, if not nil, ends the wait at
// once when it reports true.
func waitRescaled(ctx context.Context, due time.Time, was float64, rate func(was float64) (float64, time.Time), free func() bool) bool {
	for {
		if free != nil && time.Now().Before(due) && free() {
			return ctx.Err() == nil
		}
		if rate != nil && time.Now().Before(due) {
			if r, since := rate(was); r > was {
				due, was = Rescale(due, since, was, r), r
			}
		}
		left := time.Until(due)
		if left <= 0 {
			return ctx.Err() == nil
		}
		if rate != nil {
			left = min(left, Recheck)
		}
		if !tick.Sleep(ctx, left) {
			return false
		}
	}
}

// Marks remembers, per pacing key, the rates this process's parked
// records saw and since when (the last marksKept changes), so a record
// that starts its wait after a raise is moved as from the raise (the
// records ahead of it have drained at the new rate since), not from its
// own start, even when the AIMD moved the rate a little since. Keys not
// seen for marksForget are dropped once more than marksMax are kept. The
// zero Marks is ready to use.
type Marks struct {
	mu sync.Mutex
	m  map[string][]mark // oldest first
}

type mark struct {
	rate  float64
	since time.Time
}

const (
	marksKept   = 32
	marksMax    = 1000
	marksForget = 10 * time.Minute
)

// Seen records rate (msgs/s) as key's at now and returns the lowest rate
// key has had since its rate last rose above was, and since when; rate
// itself and now when it is not above was.
func (rm *Marks) Seen(key string, rate, was float64, now time.Time) (float64, time.Time) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if rm.m == nil {
		rm.m = map[string][]mark{}
	}
	h := rm.m[key]
	if len(h) == 0 || h[len(h)-1].rate != rate {
		if len(rm.m) >= marksMax {
			for k, kh := range rm.m {
				if now.Sub(kh[len(kh)-1].since) > marksForget {
					delete(rm.m, k)
				}
			}
		}
		h = append(h, mark{rate: rate, since: now})
		if len(h) > marksKept {
			h = h[len(h)-marksKept:]
		}
		rm.m[key] = h
	}
	lowest, since := rate, now
	for i := len(h) - 1; i >= 0 && h[i].rate > was; i-- {
		lowest, since = min(lowest, h[i].rate), h[i].since
	}
	return lowest, since
}
