package testenv

import (
	"context"
	"testing"
	"time"
)

// WaitFor calls cond every poll until it returns true (WaitFor returns
// true) or within has passed since the first call (false). cond runs at
// least once. For a test waiting on real servers or processes, where
// testing/synctest cannot stand in for the clock.
func WaitFor(within, poll time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(poll)
	}
	return true
}

// CloseWithin calls closeFn with a context that ends after within, and
// fails the test (naming what) if it returns an error: a Close that
// writes what waits must finish, and not hang the test.
func CloseWithin(t testing.TB, within time.Duration, what string, closeFn func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := closeFn(ctx); err != nil {
		t.Errorf("%s: %v", what, err)
	}
}
