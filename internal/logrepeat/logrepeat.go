// Package logrepeat keeps a failure that repeats from flooding the log: a
// [Gate] lets its first occurrence be logged at once, then at most one
// line per interval while it lasts (saying how many occurrences went
// unlogged), and one line when it ends.
package logrepeat

import (
	"sync"
	"time"
)

// DefaultEvery is the interval of a Gate whose Every is 0.
const DefaultEvery = time.Minute

// Gate decides which occurrences of one repeating failure are logged. The
// zero value is ready to use, with an interval of [DefaultEvery]; a Gate is
// safe for concurrent use.
type Gate struct {
	Every time.Duration    // at most one failure line per Every; 0 = DefaultEvery
	Now   func() time.Time // the clock; nil = time.Now

	mu      sync.Mutex
	failing bool      // the last report was a failure
	since   time.Time // first failure of the current run
	count   int       // failures of the current run
	shown   bool      // a line of the current run was logged
	logged  time.Time // when the last failure line was logged
	skipped int       // failures not logged since the last failure line
}

func (g *Gate) now() time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

// Fail records one occurrence of the failure and reports whether to log
// it: the first ever, and then one at least Every after the last line
// logged (a failure that stops and starts again within Every is not
// logged anew). skipped is how many occurrences were not logged since the
// last line.
func (g *Gate) Fail() (log bool, skipped int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if !g.failing {
		g.failing, g.since, g.count, g.shown = true, now, 0, false
	}
	g.count++
	every := g.Every
	if every <= 0 {
		every = DefaultEvery
	}
	if !g.logged.IsZero() && now.Sub(g.logged) < every {
		g.skipped++
		return false, 0
	}
	skipped, g.skipped, g.logged, g.shown = g.skipped, 0, now, true
	return true, skipped
}

// OK records a success and reports whether to log a recovery: true once
// after a run of failures of which a line was logged, with how many
// failures the run had and how long it lasted (from its first failure).
func (g *Gate) OK() (recovered bool, failures int, lasted time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.failing {
		return false, 0, 0
	}
	g.failing = false
	if !g.shown {
		return false, 0, 0
	}
	return true, g.count, g.now().Sub(g.since)
}
