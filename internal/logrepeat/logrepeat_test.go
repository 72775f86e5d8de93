package logrepeat

import (
	"testing"
	"time"
)

// TestGate: a failure every 0.6 s for three minutes logs its first
// occurrence and then one line a minute, each counting the ones left out;
// its end is reported once; a failure that flaps within the minute logs
// nothing new.
func TestGate(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	g := &Gate{Now: func() time.Time { return now }}
	var logged []time.Duration
	var skippedSum int
	n := 0
	for ; now.Sub(t0) < 3*time.Minute; now = now.Add(600 * time.Millisecond) {
		n++
		if log, skipped := g.Fail(); log {
			logged = append(logged, now.Sub(t0))
			skippedSum += skipped
		}
	}
	want := []time.Duration{0, time.Minute, 2 * time.Minute}
	if len(logged) != len(want) {
		t.Fatalf("%d failures logged at %v, want at %v", n, logged, want)
	}
	for i := range want {
		if logged[i] != want[i] {
			t.Errorf("line %d logged at %v, want %v", i, logged[i], want[i])
		}
	}
	// Lines 2 and 3 counted the failures between them: all but the three
	// logged, less those after the last line.
	if unlogged := n - 3 - int((3*time.Minute-2*time.Minute)/(600*time.Millisecond)) + 1; skippedSum != unlogged {
		t.Errorf("lines counted %d failures left out, want %d", skippedSum, unlogged)
	}
	rec, failures, lasted := g.OK()
	if !rec || failures != n || lasted != 3*time.Minute {
		t.Errorf("OK() = %v, %d, %v; want true, %d, 3m", rec, failures, lasted, n)
	}
	if rec, _, _ := g.OK(); rec {
		t.Error("a second OK reported a recovery again")
	}
}

// TestGateFlapping: a failure that stops and starts again within the
// minute of the last line logs nothing new, nor a recovery of a run that
// logged nothing; a minute on, it logs again, counting the one left out.
func TestGateFlapping(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	g := &Gate{Now: func() time.Time { return now }}
	if log, _ := g.Fail(); !log {
		t.Fatal("the first failure was not logged")
	}
	now = now.Add(time.Second)
	if rec, failures, _ := g.OK(); !rec || failures != 1 {
		t.Errorf("OK after one logged failure: %v, %d; want true, 1", rec, failures)
	}
	now = now.Add(time.Second)
	if log, _ := g.Fail(); log {
		t.Error("a failure 1 s after a recovery was logged")
	}
	if rec, _, _ := g.OK(); rec {
		t.Error("the recovery of a run that logged nothing was reported")
	}
	now = now.Add(time.Minute)
	if log, skipped := g.Fail(); !log || skipped != 1 {
		t.Errorf("a failure a minute later: log %v, skipped %d; want true, 1", log, skipped)
	}
}
