// Package inflight sizes how many records of one pacing key a process
// handles at once, by Little's law: records in flight = rate x the time
// each one holds its place. A key sending r msgs/s to a provider that
// answers in T seconds has r x T requests on the wire at any moment, so a
// fixed bound B caps its rate at B / T whatever its limit (32 records at
// 300 ms: 107 msgs/s). The bound here follows the key's answer time
// instead, measured by an [Estimator], with headroom for its variance and
// for the records waiting for their slots; an upper bound per key and the
// process's own bound (the pacer's) stay above it.
package inflight

import (
	"math"
	"sync/atomic"
	"time"
)

// Estimator follows the answer times of one key's sends: a smoothed mean
// and a smoothed mean deviation, as TCP follows round-trip times (RFC
// 6298: SRTT and RTTVAR, gains 1/8 and 1/4), and [Estimator.High], SRTT +
// 4 RTTVAR, an estimate above almost every answer time (about the 99th
// percentile of an answer time with a modest tail: uniform 250-350 ms gives
// about 400 ms; log-normal of median 300 ms and p99 2 s about 1.4 s).
// Times are kept in whole milliseconds, SRTT up to 65.5 s and RTTVAR up to
// 32.7 s (longer answers count as that long).
//
// It is 4 bytes, lock-free, and safe for concurrent use; the zero value
// holds no answer yet.
type Estimator struct {
	// v packs SRTT (high 16 bits) and RTTVAR (next 15 bits) in ms, and
	// whether an answer was seen (lowest bit).
	v atomic.Uint32
}

const (
	maxSRTT   = 1<<16 - 1 // ms
	maxRTTVAR = 1<<15 - 1 // ms
)

// Answered takes one answer time d (from the request leaving to its
// answer; negative counts as 0).
func (e *Estimator) Answered(d time.Duration) {
	ms := min(max(int64((d+time.Millisecond/2)/time.Millisecond), 0), maxSRTT)
	for {
		old := e.v.Load()
		var srtt, rttvar int64
		if old == 0 {
			// RFC 6298 2.2: the first measurement R sets SRTT = R and
			// RTTVAR = R/2.
			srtt, rttvar = ms, ms/2
		} else {
			srtt, rttvar = int64(old>>16), int64(old>>1&maxRTTVAR)
			dev := srtt - ms
			if dev < 0 {
				dev = -dev
			}
			// Rounded down, so a steady answer time leaves no deviation;
			// SRTT to the nearest, so it settles within 4 ms of a steady
			// answer time.
			rttvar = (3*rttvar + dev) / 4
			srtt = (7*srtt + ms + 4) / 8
		}
		v := uint32(min(srtt, maxSRTT))<<16 | uint32(min(rttvar, maxRTTVAR))<<1 | 1
		if e.v.CompareAndSwap(old, v) {
			return
		}
	}
}

// Mean returns the smoothed answer time, and false before the first answer.
func (e *Estimator) Mean() (time.Duration, bool) {
	v := e.v.Load()
	if v == 0 {
		return 0, false
	}
	return time.Duration(v>>16) * time.Millisecond, true
}

// High returns SRTT + 4 RTTVAR, a high estimate of the key's answer time,
// and false before the first answer.
func (e *Estimator) High() (time.Duration, bool) {
	v := e.v.Load()
	if v == 0 {
		return 0, false
	}
	return time.Duration(v>>16+4*(v>>1&maxRTTVAR)) * time.Millisecond, true
}

// Headroom multiplies rate x [Estimator.High] in [Bound]: the records on
// the wire fluctuate around rate x the mean answer time, and the rate a
// key reaches must not dip when answers slow down for a moment.
const Headroom = 1.2

// Ahead is how many records of a key [Bound] lets wait for their slots
// beyond its burst: with a provider that answers at once, the key's
// bound is about this, which the pacer's fixed bound per key was (32)
// before it followed Little's law; enough that a freed place is never what
// a slot waits for.
const Ahead = 32

// Unknown is the answer time [Bound] assumes for a key with no answer yet:
// generous, so a key's first second is not held back; its answers bring
// its bound to its own within a few dozen sends.
const Unknown = time.Second

// Bound returns how many records of a key paced at rate msgs/s with burst
// (the bucket's burst, in messages) may be in hand at once, given e's
// answer times: ceil(Headroom x rate x High) records on the wire, plus
// burst + Ahead waiting for their slots, and at most most (the pacer's
// upper bound per key); at least 1. A rate of 0 or less, or one not
// finite, gets most.
func (e *Estimator) Bound(rate float64, burst, most int) int {
	if rate <= 0 || math.IsInf(rate, 0) || math.IsNaN(rate) {
		return max(most, 1)
	}
	high, ok := e.High()
	if !ok {
		high = Unknown
	}
	wire := math.Ceil(Headroom*rate*high.Seconds() - 1e-9) // 1.2 x 500 is 600.0000000000001
	n := wire + float64(max(burst, 0)+Ahead)
	if n >= float64(most) {
		return max(most, 1)
	}
	return max(int(n), 1)
}
