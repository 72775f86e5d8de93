package park

import (
	"testing"
	"time"
)

// TestLanesPick: a lane takes only copies due no earlier than its horizon
// less the slack, so each lane partition's copies fall due in the order
// they are written; a second backlog written behind a deeper one goes to
// another lane, the best fit first; an unknown lane takes nothing until it
// is known empty or read to its end, and a revoked one nothing at all.
func TestLanesPick(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	l := NewLanes(5 * time.Second)
	for n := 1; n <= LaneCount; n++ {
		l.Assigned(n, 3)
	}
	if n, ok := l.Pick(3, at(100)); ok {
		t.Fatalf("an unknown lane took a copy: lane %d", n)
	}
	if !l.Unknown(1, 3) || l.Unknown(1, 4) {
		t.Errorf("Unknown(1, 3) %v, Unknown(1, 4) %v: want true (assigned, not known), false (not assigned)", l.Unknown(1, 3), l.Unknown(1, 4))
	}
	l.Empty(1, 3)
	l.Empty(2, 3)
	if l.Unknown(1, 3) {
		t.Error("lane 1 of partition 3 still unknown once known empty")
	}
	l.Fetched(3, 3, at(50), false) // read, not to its end: still unknown
	for i, c := range []struct {
		due  int
		want int // 0: none takes it
	}{
		{100, 1},  // a first backlog's copies, in slot order
		{1300, 1}, //
		{1296, 1}, // within the slack of lane 1's horizon
		{10, 2},   // a second backlog behind it, due sooner
		{400, 2},  // lane 2 (horizon 10) fits better than lane 1 (1300)
		{200, 0},  // before both horizons: a retry tier
	} {
		n, ok := l.Pick(3, at(c.due))
		if got := map[bool]int{true: n, false: 0}[ok]; got != c.want {
			t.Errorf("copy %d due at %d s: lane %d, want %d", i, c.due, got, c.want)
		}
	}
	l.Fetched(3, 3, at(150), true) // read to its end: known, horizon 150
	if n, ok := l.Pick(3, at(200)); !ok || n != 3 {
		t.Errorf("copy due at 200 s after lane 3 was read to its end (latest due 150 s): lane %d %v, want 3", n, ok)
	}
	if n, ok := l.Pick(4, at(200)); ok {
		t.Errorf("a partition with no lane assigned took a copy: lane %d", n)
	}
	// Best fit: of lane 1 (empty) and lane 2 (horizon 1300 s), a copy due
	// at 1400 s takes lane 2, leaving lane 1 to copies due sooner.
	b := NewLanes(5 * time.Second)
	b.Assigned(1, 0)
	b.Assigned(2, 0)
	b.Empty(2, 0)
	b.Pick(0, at(1300))
	b.Empty(1, 0)
	if n, ok := b.Pick(0, at(1400)); !ok || n != 2 {
		t.Errorf("copy due at 1400 s with lane 1 empty and lane 2 at 1300 s: lane %d %v, want 2", n, ok)
	}
	for n := 1; n <= LaneCount; n++ {
		l.Revoked(n, 3)
	}
	if n, ok := l.Pick(3, at(5000)); ok {
		t.Errorf("a revoked lane took a copy: lane %d", n)
	}
}
