package pacer

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// An idle process returns its free memory once per idle period, idleRelease
// after it last finished a record, and never while records are finished.
func TestReleaseLoopOncePerIdlePeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &Pacer{}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		released := 0
		go p.releaseLoop(ctx, func() { released++ })
		// Idle from the start: nothing was finished, nothing to give back.
		time.Sleep(2 * idleRelease)
		synctest.Wait()
		if released != 0 {
			t.Fatalf("released %d times before any record finished, want 0", released)
		}
		// Busy for a minute: a record finished every 5 s.
		for range 12 {
			p.tally.count(delivered)
			time.Sleep(5 * time.Second)
			synctest.Wait()
		}
		if released != 0 {
			t.Fatalf("released %d times while records were finished, want 0", released)
		}
		// Then idle (the last record finished 5 s ago): released once,
		// between idleRelease and idleRelease and a tick (10 s) after it.
		time.Sleep(idleRelease - 10*time.Second)
		synctest.Wait()
		if released != 0 {
			t.Fatalf("released %d times %v after the last finished record, want 0", released, idleRelease-5*time.Second)
		}
		time.Sleep(20 * time.Second)
		synctest.Wait()
		if released != 1 {
			t.Fatalf("released %d times %v after the last finished record, want 1", released, idleRelease+15*time.Second)
		}
		time.Sleep(5 * idleRelease)
		synctest.Wait()
		if released != 1 {
			t.Fatalf("released %d times in one idle period, want 1", released)
		}
		// A new campaign and its idle period: once more.
		p.tally.count(delivered)
		time.Sleep(3 * idleRelease)
		synctest.Wait()
		if released != 2 {
			t.Fatalf("released %d times after a second idle period, want 2", released)
		}
	})
}
