package bucket

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrInvalidLimit is returned, wrapped with what is wrong, for a limit that
// can never be met or that the bucket cannot represent: see [Limit.Validate].
// Every call of [Limiter] and [Local] returns it without calling Redis, and
// so do Reserve and ReserveMulti for a cost outside [1, Burst]. Test for it
// with errors.Is.
var ErrInvalidLimit = errors.New("bucket: invalid limit")

// Bounds checked by [Limit.Validate]. The scripts count tokens in millionths
// and time in microseconds, both exact in a Lua number (float64) only below
// 2^53, and a wait must fit in a time.Duration.
const (
	maxBurst  = 1_000_000_000              // tokens; 10^15 millionths
	maxRefill = 100 * 365 * 24 * time.Hour // Burst / PerSecond; about 3.2*10^15 µs
	maxDebtU  = 1_000_000_000_000_000      // deepest debt in millionths (10^9 tokens), as in the scripts
	maxWaitUS = 1 << 52                    // longest maximum wait in µs (about 142 years), as in reserve.lua
)

// Limit is the (rate, burst) of one bucket.
//
// The zero Limit is invalid: a bucket that never refills would refuse
// forever, so [Limit.Validate] rejects it instead of waiting forever.
type Limit struct {
	// PerSecond is the refill rate in tokens per second: finite and > 0.
	// Fractions are fine: 0.1 is one token every 10 seconds.
	PerSecond float64
	// Burst is the capacity in tokens, from 1 to 10^9: the most that can be
	// taken at once, and what an idle bucket refills to.
	Burst int
}

// Validate returns nil if the limit can be met, else an error wrapping
// [ErrInvalidLimit] that names the field and its bad value, such as
// "bucket: invalid limit: rate 0 must be > 0". A limit is valid when
// PerSecond is finite and > 0, Burst is in [1, 10^9], and the time to
// refill from empty, Burst / PerSecond seconds, is at most 100 years.
func (l Limit) Validate() error {
	switch {
	case !(l.PerSecond > 0): // also NaN
		return fieldErr("PerSecond", fmt.Errorf("%w: rate %v must be > 0", ErrInvalidLimit, l.PerSecond))
	case math.IsInf(l.PerSecond, 1):
		return fieldErr("PerSecond", fmt.Errorf("%w: rate %v must be finite", ErrInvalidLimit, l.PerSecond))
	case l.Burst < 1:
		return fieldErr("Burst", fmt.Errorf("%w: burst %d must be >= 1", ErrInvalidLimit, l.Burst))
	case l.Burst > maxBurst:
		return fieldErr("Burst", fmt.Errorf("%w: burst %d must be <= %d", ErrInvalidLimit, l.Burst, maxBurst))
	case float64(l.Burst)/l.PerSecond > maxRefill.Seconds():
		return fieldErr("Burst", fmt.Errorf("%w: refill time burst/rate = %d/%v s must be <= %v",
			ErrInvalidLimit, l.Burst, l.PerSecond, maxRefill))
	}
	return nil
}

// FieldError is what [Limit.Validate] returns, and each of the problems
// [AIMD.Validate] and [Breaker.Validate] return joined: Field is the Go name of the field at fault
// ("PerSecond", "Floor", "MaxOpenFor"), or "ceiling" for the ceiling
// [AIMD.Validate] was given; Err wraps [ErrInvalidLimit], [ErrInvalidAIMD]
// or [ErrInvalidBreaker] and says what is wrong. Callers that configure
// these values from elsewhere (environment variables, flags) read Field to
// name their own setting; the rules themselves stay here.
type FieldError struct {
	Field string
	Err   error
}

func fieldErr(field string, err error) error { return &FieldError{Field: field, Err: err} }

// Error returns Err's text, such as "bucket: invalid aimd: floor 5 must be <= ceiling 2".
func (e *FieldError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *FieldError) Unwrap() error { return e.Err }

// ValidateCost returns nil if the limit is valid ([Limit.Validate]) and a
// request of cost tokens can ever be granted: 1 <= cost <= Burst. Otherwise
// it returns an error wrapping [ErrInvalidLimit], such as "bucket: invalid
// limit: cost 6 must be between 1 and burst 5". Check it where limits and
// costs are configured: every call refuses such a request this way, without
// calling Redis, rather than waiting forever.
func (l Limit) ValidateCost(cost int) error {
	return validateCost(l, cost)
}

// validateCost checks lim and 1 <= cost <= lim.Burst.
func validateCost(lim Limit, cost int) error {
	if err := lim.Validate(); err != nil {
		return err
	}
	if cost < 1 || cost > lim.Burst {
		return fmt.Errorf("%w: cost %d must be between 1 and burst %d", ErrInvalidLimit, cost, lim.Burst)
	}
	return nil
}

// waitUS converts a maximum wait to whole microseconds for reserve.lua:
// rounded down (a slot is never later than asked), negative as 0, and at
// most maxWaitUS.
func waitUS(d time.Duration) int64 {
	switch {
	case d <= 0:
		return 0
	case d/time.Microsecond > maxWaitUS:
		return maxWaitUS
	}
	return int64(d / time.Microsecond)
}
