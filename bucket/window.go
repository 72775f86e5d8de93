package bucket

import (
	"context"
	"fmt"
	"time"
)

// Window is a sliding-window quota: at most Max events in any Period, for
// ingestion limits per tenant or per IP ([Limiter.Admit]).
//
// It is a sliding-window counter, not a log: Redis keeps two counts per
// key, this fixed window's and the previous one's, and the count at now is
// this window's plus the part of the previous one still inside the sliding
// window, taken as spread evenly and rounded up. Every fixed window (aligned
// to multiples of Period since the Unix epoch) holds at most Max events; a
// sliding window holds more only when the previous window's events
// bunched at its end (at most 2*Max in the worst case). For a limit that
// must hold in every window, use a token bucket ([Limiter.Take]).
type Window struct {
	// Max is the number of events allowed per Period, 1 to 10^9.
	Max int
	// Period is the window's length, from 1 ms to 2^48 µs (about 8.9
	// years), in whole microseconds.
	Period time.Duration
}

// Validate returns nil if the window can be counted, else an error wrapping
// [ErrInvalidLimit] that names the field and its bad value.
func (w Window) Validate() error {
	switch {
	case w.Max < 1 || w.Max > maxBurst:
		return fmt.Errorf("%w: window max %d must be between 1 and %d", ErrInvalidLimit, w.Max, maxBurst)
	case w.Period < time.Millisecond || w.Period > (1<<48)*time.Microsecond:
		return fmt.Errorf("%w: window period %v must be between 1ms and %v", ErrInvalidLimit, w.Period, (1<<48)*time.Microsecond)
	case w.Period%time.Microsecond != 0:
		return fmt.Errorf("%w: window period %v must be whole microseconds", ErrInvalidLimit, w.Period)
	}
	return nil
}

// WindowKey returns the Redis key of the window counter of (scope, key):
// "<prefix>:{<scope>:<key>}:window", e.g. scope "tenant" or "ip".
func (l *Limiter) WindowKey(scope, key string) string {
	return stateKey(l.prefix, scope, key, "window")
}

// Admit counts n events of (scope, key) against the sliding-window quota w
// if that keeps the count within w.Max, and reports whether it did.
// Decision.Remaining is how many more events the window admits now; when
// refused, nothing was counted and Decision.Wait is how long until n events
// would be admitted if nothing else is counted (rounded up to the
// microsecond, never 0). Decision.Cooldown is always false. Time is Redis
// TIME; the whole call is one script, so concurrent calls are atomic.
//
// Admit returns an error wrapping [ErrInvalidLimit], without calling Redis,
// if w is invalid or n is not in [1, w.Max]. Other errors wrap the Redis
// error. Admit is safe for concurrent use.
func (l *Limiter) Admit(ctx context.Context, scope, key string, w Window, n int) (Decision, error) {
	if err := w.Validate(); err != nil {
		return Decision{}, err
	}
	if n < 1 || n > w.Max {
		return Decision{}, fmt.Errorf("%w: %d events must be between 1 and window max %d", ErrInvalidLimit, n, w.Max)
	}
	wk := l.WindowKey(scope, key)
	v, err := windowScript.Run(ctx, l.rdb, []string{wk}, w.Max, int64(w.Period/time.Microsecond), n).Result()
	if err != nil {
		return Decision{}, fmt.Errorf("bucket: admit %q: %w", wk, err)
	}
	var r [3]int64
	if !ints(v, r[:]) || r[0] < 0 || r[0] > 1 || r[1] < 0 || r[1] > int64(w.Max) ||
		(r[0] == 1) == (r[2] > 0) || r[2] < 0 {
		return Decision{}, fmt.Errorf("bucket: admit %q: unexpected reply %s", wk, describe(v))
	}
	return Decision{Allowed: r[0] == 1, Remaining: int(r[1]), Wait: duration(r[2], time.Microsecond)}, nil
}
