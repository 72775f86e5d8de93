package testenv

import (
	"testing"
	"time"
)

// TestWaitFor: true once cond holds (polled until then), false once within
// has passed with cond never holding; cond runs at least once even with
// nothing left of within.
func TestWaitFor(t *testing.T) {
	calls := 0
	if !WaitFor(10*time.Second, time.Millisecond, func() bool { calls++; return calls == 3 }) {
		t.Fatal("WaitFor = false for a cond that holds at its third call")
	}
	if calls != 3 {
		t.Errorf("cond called %d times, want 3 (until it holds)", calls)
	}
	calls = 0
	start := time.Now()
	if WaitFor(50*time.Millisecond, 5*time.Millisecond, func() bool { calls++; return false }) {
		t.Fatal("WaitFor = true for a cond that never holds")
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Errorf("gave up after %v, want at least within (50ms)", took)
	}
	if calls < 2 {
		t.Errorf("cond called %d times in 50ms polled every 5ms, want it called again", calls)
	}
	calls = 0
	if !WaitFor(0, time.Millisecond, func() bool { calls++; return true }) || calls != 1 {
		t.Errorf("within 0: cond called %d times, want once and true", calls)
	}
}
