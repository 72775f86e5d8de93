package testenv

import "time"

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
