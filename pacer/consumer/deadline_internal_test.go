package consumer

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestDeadlines: callers within one grain share a context ending d to
// d + grain after each asked; a caller after the grain gets a new one; the
// parent's end ends them.
func TestDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithCancel(context.Background())
		const d = 10 * time.Second
		s := newDeadlines(parent, d)
		if s.grain != min(d/16, 100*time.Millisecond) {
			t.Fatalf("grain %v, want %v", s.grain, min(d/16, 100*time.Millisecond))
		}
		check := func(ctx context.Context, asked time.Time) {
			t.Helper()
			dl, ok := ctx.Deadline()
			if left := dl.Sub(asked); !ok || left < d || left > d+s.grain {
				t.Errorf("deadline %v after asking, want %v to %v", left, d, d+s.grain)
			}
		}
		t0 := time.Now()
		a := s.ctx(t0)
		check(a, t0)
		time.Sleep(s.grain / 2)
		b := s.ctx(time.Now())
		check(b, time.Now())
		if a != b {
			t.Error("two callers within one grain got two contexts")
		}
		time.Sleep(s.grain)
		c := s.ctx(time.Now())
		check(c, time.Now())
		if c == a {
			t.Error("a caller after the grain got the old context")
		}
		time.Sleep(d + s.grain)
		if a.Err() != context.DeadlineExceeded {
			t.Errorf("after its deadline: %v", a.Err())
		}
		e := s.ctx(time.Now())
		cancel()
		if e.Err() != context.Canceled {
			t.Errorf("after the parent's end: %v", e.Err())
		}
	})
}

// TestGoPool: a function given while a pool goroutine waits runs on it (no
// new goroutine); a goroutine idle for goIdle ends.
func TestGoPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The pool's own count, not runtime.NumGoroutine: that counts every
		// goroutine of the process, and one left by an earlier test ending
		// meanwhile made it -1 (a CI failure).
		g := newGoPool()
		ran := 0
		g.Go(func() { ran++ })
		synctest.Wait()
		if n := int(g.live.Load()); n != 1 {
			t.Fatalf("%d goroutines after the first Go, want 1", n)
		}
		for range 5 {
			g.Go(func() { ran++ })
			synctest.Wait()
		}
		if n := int(g.live.Load()); n != 1 || ran != 6 {
			t.Errorf("%d goroutines after six Go one after the other, %d ran; want 1 and 6", n, ran)
		}
		time.Sleep(goIdle + time.Second)
		synctest.Wait()
		if n := int(g.live.Load()); n != 0 {
			t.Errorf("%d goroutines %v after the last function, want 0", n, goIdle)
		}
	})
}
