package tick_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pacerhq/pacer/internal/tick"
)

// Every calls f once per interval with the tick's time, the first a whole
// interval after the start, and returns once ctx ends.
func TestEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		start := time.Now()
		var got []time.Duration
		done := make(chan struct{})
		go func() {
			defer close(done)
			tick.Every(ctx, 3*time.Second, func(now time.Time) {
				got = append(got, now.Sub(start))
				if len(got) == 3 {
					cancel()
				}
			})
		}()
		<-done
		want := []time.Duration{3 * time.Second, 6 * time.Second, 9 * time.Second}
		if len(got) != len(want) {
			t.Fatalf("f called at %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("f called at %v, want %v", got, want)
			}
		}
		if el := time.Since(start); el != 9*time.Second {
			t.Fatalf("Every returned %v after the start, want 9s (at once when ctx ends)", el)
		}
	})
}

// Sleep waits the whole d and reports true, returns false as soon as ctx
// ends, and does not wait for a d of 0 or less.
func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if !tick.Sleep(t.Context(), 2*time.Second) || time.Since(start) != 2*time.Second {
			t.Fatalf("Sleep(2s) returned false or after %v, want true after 2s", time.Since(start))
		}
		if !tick.Sleep(t.Context(), -time.Second) || time.Since(start) != 2*time.Second {
			t.Fatal("Sleep(-1s) on a live context: want true at once")
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start = time.Now()
		if tick.Sleep(ctx, time.Hour) || time.Since(start) != time.Second {
			t.Fatalf("Sleep(1h) with ctx ending after 1s: want false after 1s, returned after %v", time.Since(start))
		}
		if tick.Sleep(ctx, 0) {
			t.Fatal("Sleep(0) on an ended context: want false")
		}
	})
}
