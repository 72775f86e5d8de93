package fakeprovider

import (
	"math"
	"time"
)

// Bucket is the token bucket of one key: it holds up to Burst tokens and
// earns Rate tokens per second, bringing itself up to date at the now each
// method is given. A rate of 0 is unlimited: every request is allowed and
// nothing is counted. The zero value is an unlimited bucket. A Bucket is
// not safe for concurrent use.
type Bucket struct {
	rate, burst, tokens float64
	last                time.Time // when tokens was last brought up to date
}

// NewBucket returns a full bucket of burst tokens that earns rate tokens
// per second from now on. A rate of 0 or less is unlimited.
func NewBucket(rate, burst float64, now time.Time) *Bucket {
	return &Bucket{rate: max(rate, 0), burst: burst, tokens: burst, last: now}
}

// Rate returns the rate of b in tokens per second; 0 is unlimited.
func (b *Bucket) Rate() float64 { return b.rate }

// Burst returns the capacity of b in tokens.
func (b *Bucket) Burst() float64 { return b.burst }

// refill adds the tokens earned since b.last, up to b.burst. A now before
// b.last changes nothing.
func (b *Bucket) refill(now time.Time) {
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(b.burst, b.tokens+d.Seconds()*b.rate)
		b.last = now
	}
}

// Allow reports whether b holds a whole token at now, without taking it.
// An unlimited bucket always does. Use it with [Bucket.Take] when a request
// needs a token from several buckets: check them all, then take from each.
func (b *Bucket) Allow(now time.Time) bool {
	if b.rate <= 0 {
		return true
	}
	b.refill(now)
	return b.tokens >= 1
}

// Take removes one token from b at now and reports whether there was one
// to take. An unlimited bucket always has one.
func (b *Bucket) Take(now time.Time) bool {
	if !b.Allow(now) {
		return false
	}
	if b.rate > 0 {
		b.tokens--
	}
	return true
}

// Refund gives back one token, up to the burst: for a request the
// provider does not count after all. It does nothing to an unlimited
// bucket.
func (b *Bucket) Refund() {
	if b.rate > 0 {
		b.tokens = min(b.burst, b.tokens+1)
	}
}

// Wait returns how long after now b will hold a whole token: 0 if it holds
// one already or is unlimited.
func (b *Bucket) Wait(now time.Time) time.Duration {
	if b.Allow(now) {
		return 0
	}
	return time.Duration((1 - b.tokens) / b.rate * float64(time.Second))
}

// SetRate moves b to rate tokens per second and a capacity of burst at
// now. Tokens earned at the old rate up to now are kept, up to the new
// burst. A rate of 0 or less is unlimited.
func (b *Bucket) SetRate(rate, burst float64, now time.Time) {
	b.refill(now)
	b.rate, b.burst = max(rate, 0), burst
	b.tokens = min(b.tokens, b.burst)
}

// Limiter is a set of [Bucket]s, one per key, made on first use. Each key
// earns a default rate unless [Limiter.SetRate] gave it its own. The
// capacity is the configured burst, or ceil(rate) and at least 1 if that
// is 0. A Limiter is not safe for concurrent use.
type Limiter struct {
	rate     float64            // default in tokens per second, for keys without an override
	burst    int                // configured capacity; 0 means ceil(rate)
	override map[string]float64 // SetRate(key, r)
	buckets  map[string]*Bucket
}

// NewLimiter returns a Limiter whose keys earn rate tokens per second
// (0 or less is unlimited) and hold burst tokens (0 or less means
// ceil(rate), at least 1).
func NewLimiter(rate float64, burst int) *Limiter {
	return &Limiter{
		rate:     max(rate, 0),
		burst:    max(burst, 0),
		override: map[string]float64{},
		buckets:  map[string]*Bucket{},
	}
}

// BurstFor returns the capacity of a bucket at rate tokens per second.
func (l *Limiter) BurstFor(rate float64) float64 {
	if l.burst > 0 {
		return float64(l.burst)
	}
	return max(math.Ceil(rate), 1)
}

// Bucket returns the bucket of key, first making it full at now at the
// key's rate.
func (l *Limiter) Bucket(key string, now time.Time) *Bucket {
	b, ok := l.buckets[key]
	if !ok {
		r := l.Rate(key)
		b = NewBucket(r, l.BurstFor(r), now)
		l.buckets[key] = b
	}
	return b
}

// Take removes one token from the bucket of key at now and reports whether
// there was one; it is shorthand for l.Bucket(key, now).Take(now).
func (l *Limiter) Take(key string, now time.Time) bool {
	return l.Bucket(key, now).Take(now)
}

// Rate returns the rate of key in tokens per second: its bucket's, or the
// rate its bucket will get; 0 is unlimited.
func (l *Limiter) Rate(key string) float64 {
	if b, ok := l.buckets[key]; ok {
		return b.rate
	}
	if r, ok := l.override[key]; ok {
		return r
	}
	return l.rate
}

// SetRate sets the rate of key in tokens per second, or of every key
// (current and future, dropping per-key rates) if key is "". A rate of 0
// or less is unlimited. The burst becomes the configured one, or
// ceil(rate). Tokens a bucket earned at the old rate up to now are kept,
// up to the new burst.
func (l *Limiter) SetRate(key string, rate float64, now time.Time) {
	rate = max(rate, 0)
	if key == "" {
		l.rate = rate
		clear(l.override)
		for _, b := range l.buckets {
			b.SetRate(rate, l.BurstFor(rate), now)
		}
		return
	}
	l.override[key] = rate
	if b, ok := l.buckets[key]; ok {
		b.SetRate(rate, l.BurstFor(rate), now)
	}
}

// Len returns how many buckets l has made.
func (l *Limiter) Len() int { return len(l.buckets) }
