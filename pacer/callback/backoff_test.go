package callback

import (
	"testing"
	"time"
)

// TestBackoffCapHoldsWithJitter: MaxBackoff is the longest wait, jitter
// included: with a cap of 8s, no wait exceeds 8s, and the waits still grow
// from the first (1s ±20%).
func TestBackoffCapHoldsWithJitter(t *testing.T) {
	b := newBackoff(time.Second, 8*time.Second)
	if w := b.next(); w < 800*time.Millisecond || w > 1200*time.Millisecond {
		t.Errorf("first wait %v; want 1s ±20%%", w)
	}
	for i := range 60 {
		if w := b.next(); w > 8*time.Second {
			t.Fatalf("wait %d: %v; want at most the cap, 8s", i+2, w)
		}
	}
}
