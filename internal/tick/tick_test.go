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
