// Package tick holds the waits Pacer's loops share: [Every] runs a function
// at a fixed interval until a context ends (health watches, progress logs,
// sweeps, refreshes, publishes), [Sleep] waits unless the context ends
// first (backoffs, cooldowns, slot waits).
package tick

import (
	"context"
	"time"
)

// Every calls f with the tick's time every d until ctx ends, then returns;
// the first call comes d after Every is called. f runs on the caller's
// goroutine, so a slow f delays the next tick (a ticker drops the ticks it
// misses) and never overlaps itself. d must be positive (time.NewTicker
// panics otherwise).
func Every(ctx context.Context, d time.Duration, f func(now time.Time)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			f(now)
		}
	}
}

// Sleep waits d and reports true, or returns false as soon as ctx ends.
// A d of 0 or less does not wait: it reports whether ctx is still live.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
