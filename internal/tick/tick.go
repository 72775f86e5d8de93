// Package tick runs a function at a fixed interval until a context ends:
// the one loop that Pacer's background jobs (health watches, progress
// logs, sweeps, refreshes, publishes) share.
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
