package consumer

// Tests of the process's plumbing under the record steps: shared send
// deadlines (deadline.go), one handler per envelope id (handle.go's
// lockID), and the release of free memory when idle (adapt.go).

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
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

// One handler of an envelope id at a time in a process: a second waits
// until the first is done; another id, or the same id of another key, does
// not wait; a waiter whose context ends gives up; no entry stays behind.
func TestLockID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &Pacer{ids: map[idRef]chan struct{}{}}
		ctx := t.Context()
		if !p.lockID(ctx, "k", "a") {
			t.Fatal("a free id was not taken")
		}
		if !p.lockID(ctx, "k", "b") || !p.lockID(ctx, "k2", "a") {
			t.Fatal("another id, or the same id of another key, waited")
		}
		var order []string
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, who := range []string{"second", "third"} {
			wg.Go(func() {
				if !p.lockID(ctx, "k", "a") {
					t.Errorf("%s: gave up", who)
					return
				}
				mu.Lock()
				order = append(order, who)
				mu.Unlock()
				time.Sleep(time.Second)
				p.unlockID("k", "a")
			})
		}
		synctest.Wait()
		if len(order) != 0 {
			t.Fatalf("took a held id: %v", order)
		}
		cctx, cancel := context.WithCancel(ctx)
		gaveUp := make(chan bool)
		go func() { gaveUp <- !p.lockID(cctx, "k", "a") }()
		synctest.Wait()
		cancel()
		if !<-gaveUp {
			t.Fatal("a waiter whose context ended took the id")
		}
		p.unlockID("k", "a")
		synctest.Wait()
		mu.Lock()
		if len(order) != 1 {
			t.Fatalf("after the first was done: %v holders; want 1", order)
		}
		mu.Unlock()
		wg.Wait()
		if len(order) != 2 {
			t.Fatalf("holders %v; want both, one after the other", order)
		}
		p.unlockID("k", "b")
		p.unlockID("k2", "a")
		if len(p.ids) != 0 {
			t.Fatalf("%d ids left held", len(p.ids))
		}
	})
}

// An idle process returns its free memory at each of idleReleases after it
// last finished a record (within a tick), never while records are
// finished, and not again until it finished more.
func TestReleaseLoopWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &Pacer{}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var released atomic.Int32
		go p.releaseLoop(ctx, func() { released.Add(1) })
		check := func(want int32, when string) {
			t.Helper()
			synctest.Wait()
			if got := released.Load(); got != want {
				t.Fatalf("released %d times %s, want %d", got, when, want)
			}
		}
		// Idle from the start: nothing was finished, nothing to give back.
		time.Sleep(5 * time.Minute)
		check(0, "before any record finished")
		// Busy for a minute: a record finished every 5 s.
		for range 12 {
			p.tally.count(delivered)
			time.Sleep(5 * time.Second)
			check(0, "while records were finished")
		}
		// Then idle (the last record finished 5 s ago): released at 30 s
		// and at 2 minutes, each within a tick (10 s).
		time.Sleep(idleReleases[0] - 10*time.Second)
		check(0, "25 s after the last finished record")
		time.Sleep(20 * time.Second)
		check(1, "45 s after the last finished record")
		time.Sleep(idleReleases[1] - idleReleases[0] - 20*time.Second)
		check(1, "115 s after the last finished record")
		time.Sleep(20 * time.Second)
		check(2, "135 s after the last finished record")
		time.Sleep(10 * time.Minute)
		check(2, "in one idle period")
		// A new campaign and its idle period: the same again.
		p.tally.count(delivered)
		time.Sleep(3 * time.Minute)
		check(4, "after a second idle period")
	})
}

// TestWaitingForPartitionsLogged: a pacer with no partitions AssignWait
// after start says once why it waits; one assigned before then says
// nothing.
func TestWaitingForPartitionsLogged(t *testing.T) {
	for _, assigned := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			var buf SyncBuffer
			p := &Pacer{cfg: Config{Group: "g"}, log: slog.New(slog.NewTextHandler(&buf, nil))}
			if assigned {
				time.AfterFunc(AssignWait/2, func() { p.assigned1.Store(true) })
			}
			go p.waitingLog(t.Context())
			time.Sleep(AssignWait - time.Millisecond)
			synctest.Wait()
			if buf.String() != "" {
				t.Fatalf("logged before %v: %s", AssignWait, buf.String())
			}
			time.Sleep(time.Minute)
			synctest.Wait()
			want := 1
			if assigned {
				want = 0
			}
			if n := strings.Count(buf.String(), "waiting for the consumer group to assign partitions"); n != want {
				t.Errorf("assigned at %v: %d waiting lines, want %d: %s", AssignWait/2, n, want, buf.String())
			}
		})
	}
}
