package park

import (
	"sync"
	"time"
)

// LaneCount is how many park lanes a channel has: topics
// "<topic>.park.<n>", n from 1, each with the main topic's partitions.
const LaneCount = 4

// Lanes keeps, per park lane partition this process owns, its horizon: the
// latest due time of the copies in it. A lane takes a copy only when the
// copy is due no earlier than the lane's horizon (less the slack), so a
// lane partition's records fall due in the order they were written, as a
// retry tier's do, whatever their wait: a record of a backlog of any depth
// is parked once, due at its slot, instead of hopping through the tiers
// (see docs/decisions/0032-park-lanes.md).
//
// A lane partition is unknown when it is assigned, and takes no copy until
// it is known: empty (nothing past the group's commit, [Lanes.Empty]) or
// read up to its end ([Lanes.Fetched]), its horizon then the latest due time
// read. The zero Lanes is not ready: make it with [NewLanes].
type Lanes struct {
	slack time.Duration
	mu    sync.Mutex
	parts map[lanePart]*lane
}

type lanePart struct {
	lane int // 1..LaneCount
	part int32
}

type lane struct {
	known   bool
	horizon time.Time // latest due written or read
}

// NewLanes returns Lanes whose copies may fall due up to slack before a
// copy written earlier to the same lane partition (a reader holds the
// records it fetched until due, so a small inversion delays nothing).
func NewLanes(slack time.Duration) *Lanes {
	return &Lanes{slack: slack, parts: map[lanePart]*lane{}}
}

// Pick returns the lane (1..LaneCount) of partition part a copy due at due
// goes to, and moves that lane's horizon to due; ok is false when no known
// lane of part takes it (each is due later than due + slack). Of those
// that take it, the one with the latest horizon: the others stay free for
// copies due sooner.
func (l *Lanes) Pick(part int32, due time.Time) (n int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var best *lane
	for i := 1; i <= LaneCount; i++ {
		ln := l.parts[lanePart{i, part}]
		if ln == nil || !ln.known || ln.horizon.After(due.Add(l.slack)) {
			continue
		}
		if best == nil || ln.horizon.After(best.horizon) {
			best, n = ln, i
		}
	}
	if best == nil {
		return 0, false
	}
	if due.After(best.horizon) {
		best.horizon = due
	}
	return n, true
}

// Assigned records that lane partition (n, part) is this process's,
// unknown until [Lanes.Empty] or [Lanes.Fetched] says what it holds.
func (l *Lanes) Assigned(n int, part int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.parts[lanePart{n, part}] = &lane{}
}

// Revoked forgets lane partition (n, part).
func (l *Lanes) Revoked(n int, part int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.parts, lanePart{n, part})
}

// Empty records that lane partition (n, part) holds nothing past the
// group's commit: it takes copies from now on. An unassigned one is left
// alone.
func (l *Lanes) Empty(n int, part int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ln := l.parts[lanePart{n, part}]; ln != nil {
		ln.known = true
	}
}

// Unknown reports whether lane partition (n, part) is assigned and not yet
// known (it takes no copy).
func (l *Lanes) Unknown(n int, part int32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ln := l.parts[lanePart{n, part}]
	return ln != nil && !ln.known
}

// Fetched records that records due up to latest were fetched from lane
// partition (n, part); end is true when they reach its end offset (the
// high watermark of the fetch): the lane is then known, its horizon the
// latest due read since it was assigned.
func (l *Lanes) Fetched(n int, part int32, latest time.Time, end bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ln := l.parts[lanePart{n, part}]
	if ln == nil {
		return
	}
	if latest.After(ln.horizon) {
		ln.horizon = latest
	}
	if end {
		ln.known = true
	}
}
