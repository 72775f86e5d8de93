// Package window is a sliding-window quota in Redis: at most Max events
// of a (scope, key) in any Period, for ingestion limits per tenant or per
// IP. It is not a token bucket: see package bucket for pacing.
package window

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/wire"
	"github.com/pacerhq/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// ErrInvalid is returned, wrapped with what is wrong, for a [Window] that
// [Window.Validate] rejects and for a count outside [1, Max]. Test for it
// with errors.Is.
var ErrInvalid = errors.New("window: invalid window")

var script = redis.NewScript(lua.Window)

// maxEvents is the largest Window.Max, as window.lua checks it.
const maxEvents = 1_000_000_000

// Window is a sliding-window quota: at most Max events in any Period, for
// ingestion limits per tenant or per IP ([Counter.Admit]).
//
// It is a sliding-window counter, not a log: Redis keeps two counts per
// key, this fixed window's and the previous one's, and the count at now is
// this window's plus the part of the previous one still inside the sliding
// window, taken as spread evenly and rounded up. Every fixed window (aligned
// to multiples of Period since the Unix epoch) holds at most Max events; a
// sliding window holds more only when the previous window's events
// bunched at its end (at most 2*Max in the worst case). For a limit that
// must hold in every window, use a token bucket (package bucket).
type Window struct {
	// Max is the number of events allowed per Period, 1 to 10^9.
	Max int
	// Period is the window's length, from 1 ms to 2^48 µs (about 8.9
	// years), in whole microseconds.
	Period time.Duration
}

// Validate returns nil if the window can be counted, else an error wrapping
// [ErrInvalid] that names the field and its bad value.
func (w Window) Validate() error {
	switch {
	case w.Max < 1 || w.Max > maxEvents:
		return fmt.Errorf("%w: window max %d must be between 1 and %d", ErrInvalid, w.Max, maxEvents)
	case w.Period < time.Millisecond || w.Period > (1<<48)*time.Microsecond:
		return fmt.Errorf("%w: window period %v must be between 1ms and %v", ErrInvalid, w.Period, (1<<48)*time.Microsecond)
	case w.Period%time.Microsecond != 0:
		return fmt.Errorf("%w: window period %v must be whole microseconds", ErrInvalid, w.Period)
	}
	return nil
}

// Counter counts events of many (scope, key) pairs against their
// windows. It keeps no state of its own: every replica's Counter sees the
// same counts. A Counter is safe for concurrent use.
type Counter struct {
	rdb  redis.Scripter
	keys bucket.Keys
}

// New returns a Counter that runs its script on rdb and keeps each count at
// keys.Window(scope, key).
func New(rdb redis.Scripter, keys bucket.Keys) *Counter {
	return &Counter{rdb: rdb, keys: keys}
}

// Decision is the answer of [Counter.Admit].
type Decision struct {
	// Allowed reports whether the events were counted. When false, nothing
	// was counted.
	Allowed bool
	// Remaining is how many more events the window admits now.
	Remaining int
	// Wait is 0 when allowed. When refused it is how long until the events
	// would be admitted if nothing else is counted, rounded up to the
	// microsecond, never 0.
	Wait time.Duration
}

// Admit counts n events of (scope, key) against the sliding-window quota w
// if that keeps the count within w.Max, and reports whether it did. Time is
// Redis TIME; the whole call is one script, so concurrent calls are atomic.
//
// Admit returns an error wrapping [ErrInvalid], without calling Redis, if w
// is invalid or n is not in [1, w.Max]. Other errors wrap the Redis error.
// Admit is safe for concurrent use.
func (c *Counter) Admit(ctx context.Context, scope, key string, w Window, n int) (Decision, error) {
	if err := w.Validate(); err != nil {
		return Decision{}, err
	}
	if n < 1 || n > w.Max {
		return Decision{}, fmt.Errorf("%w: %d events must be between 1 and window max %d", ErrInvalid, n, w.Max)
	}
	wk := c.keys.Window(scope, key)
	v, err := script.Run(ctx, c.rdb, []string{wk}, w.Max, int64(w.Period/time.Microsecond), n).Result()
	if err != nil {
		return Decision{}, fmt.Errorf("window: admit %q: %w", wk, err)
	}
	var r [3]int64
	if !wire.Ints(v, r[:]) || r[0] < 0 || r[0] > 1 || r[1] < 0 || r[1] > int64(w.Max) ||
		(r[0] == 1) == (r[2] > 0) || r[2] < 0 {
		return Decision{}, fmt.Errorf("window: admit %q: unexpected reply %s", wk, wire.Describe(v))
	}
	return Decision{Allowed: r[0] == 1, Remaining: int(r[1]), Wait: wire.Duration(r[2], time.Microsecond)}, nil
}
