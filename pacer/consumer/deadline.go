package consumer

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// deadlines hands out contexts that end between d and d + grain after they
// are asked for (or with parent), one context for every caller within one
// grain. A send's timeout (and a finished record's drain bound) is then a
// lookup, not a context, a timer and a registration with the parent per
// record: at thousands of records a second those were a twentieth of the
// process's CPU and an eighth of its allocations.
//
// The contexts are never cancelled early: each ends at its deadline, which
// also frees its timer and its place in the parent.
type deadlines struct {
	parent   context.Context
	d, grain time.Duration
	mu       sync.Mutex // held to make the next context
	cur      atomic.Pointer[deadline]
}

type deadline struct {
	ctx    context.Context
	cancel context.CancelFunc // called by the context's own deadline (kept for vet)
	until  time.Time          // handed out to callers asking before until
}

// newDeadlines returns deadlines of d under parent, in grains of d/16 (at
// most 100ms).
func newDeadlines(parent context.Context, d time.Duration) *deadlines {
	return &deadlines{parent: parent, d: d, grain: min(d/16, 100*time.Millisecond)}
}

// ctx returns a context that ends between d and d + grain after now (now is
// the caller's time.Now()), or when the parent ends.
func (s *deadlines) ctx(now time.Time) context.Context {
	if c := s.cur.Load(); c != nil && now.Before(c.until) {
		return c.ctx
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.cur.Load(); c != nil && now.Before(c.until) {
		return c.ctx
	}
	ctx, cancel := context.WithDeadline(s.parent, now.Add(s.d+s.grain))
	s.cur.Store(&deadline{ctx: ctx, cancel: cancel, until: now.Add(s.grain)})
	return ctx
}
