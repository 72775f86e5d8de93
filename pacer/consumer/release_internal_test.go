package consumer

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// An idle process returns its free memory at each of idleReleases after it
// last finished a record (within a tick), never while records are
// finished, and not again until it finished more.
func TestReleaseLoopWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &Pacer{}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var released atomic.Int32
		go p.releaseLoop(ctx, func() { released.Add(1) })
		check := func(want int32, when string) {
			t.Helper()
			synctest.Wait()
			if got := released.Load(); got != want {
				t.Fatalf("released %d times %s, want %d", got, when, want)
			}
		}
		// Idle from the start: nothing was finished, nothing to give back.
		time.Sleep(5 * time.Minute)
		check(0, "before any record finished")
		// Busy for a minute: a record finished every 5 s.
		for range 12 {
			p.tally.count(delivered)
			time.Sleep(5 * time.Second)
			check(0, "while records were finished")
		}
		// Then idle (the last record finished 5 s ago): released at 30 s
		// and at 2 minutes, each within a tick (10 s).
		time.Sleep(idleReleases[0] - 10*time.Second)
		check(0, "25 s after the last finished record")
		time.Sleep(20 * time.Second)
		check(1, "45 s after the last finished record")
		time.Sleep(idleReleases[1] - idleReleases[0] - 20*time.Second)
		check(1, "115 s after the last finished record")
		time.Sleep(20 * time.Second)
		check(2, "135 s after the last finished record")
		time.Sleep(10 * time.Minute)
		check(2, "in one idle period")
		// A new campaign and its idle period: the same again.
		p.tally.count(delivered)
		time.Sleep(3 * time.Minute)
		check(4, "after a second idle period")
	})
}
