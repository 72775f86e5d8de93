package bucket_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
)

// TestAdmitSteps checks the sliding-window counter on miniredis's clock
// (windows aligned to whole seconds since the epoch, as t0 is).
func TestAdmitSteps(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	w := bucket.Window{Max: 10, Period: time.Second}
	for i, s := range []struct {
		at        time.Duration
		n         int
		allowed   bool
		remaining int
		wait      time.Duration
	}{
		{0, 10, true, 0, 0},
		{0, 1, false, 0, 1100 * ms}, // next window, once 10 * 0.9 rounds up to 9
		{1100*ms - time.Microsecond, 1, false, 0, time.Microsecond},
		{1100 * ms, 1, true, 0, 0},
		{1500 * ms, 3, true, 1, 0}, // 1 + 10 * 0.5 = 6 counted before
		{1500 * ms, 2, false, 1, 100 * ms},
		{1600 * ms, 2, true, 0, 0},
		{3 * time.Second, 10, true, 0, 0},  // two windows later: all forgotten
		{3999 * ms, 1, false, 0, 101 * ms}, // 1 ms to the next window, then 100 ms
	} {
		e.at(s.at)
		d, err := e.l.Admit(t.Context(), "tenant", "acme", w, s.n)
		if err != nil || d.Allowed != s.allowed || d.Remaining != s.remaining || d.Wait != s.wait || d.Cooldown {
			t.Fatalf("step %d (at %v, n %d): got %+v, %v; want allowed=%v remaining=%d wait=%v",
				i, s.at, s.n, d, err, s.allowed, s.remaining, s.wait)
		}
	}
	// Set at 3 s by the last grant, read at 3.999 s.
	if ttl := e.rdb.PTTL(t.Context(), e.l.WindowKey("tenant", "acme")).Val(); ttl != 2*time.Second+ms-999*ms {
		t.Fatalf("PTTL = %v, want the end of the next window + 1 ms", ttl)
	}
}

// TestAdmitClockSteppedBack checks that a window stamped ahead of TIME keeps
// its counts (no quota minted) and is re-based.
func TestAdmitClockSteppedBack(t *testing.T) {
	t.Parallel()
	e := newMini(t)
	w := bucket.Window{Max: 10, Period: time.Second}
	e.at(10 * time.Second)
	if d, err := e.l.Admit(t.Context(), "ip", "10.0.0.1", w, 8); err != nil || !d.Allowed {
		t.Fatalf("Admit: %+v, %v", d, err)
	}
	e.at(9500 * ms)
	if d, err := e.l.Admit(t.Context(), "ip", "10.0.0.1", w, 3); err != nil || d.Allowed || d.Remaining != 2 {
		t.Fatalf("Admit after the step back: %+v, %v; want refused with 2 left", d, err)
	}
	if d, err := e.l.Admit(t.Context(), "ip", "10.0.0.1", w, 2); err != nil || !d.Allowed {
		t.Fatalf("Admit after the step back: %+v, %v; want allowed", d, err)
	}
}

// TestAdmitRealServer checks the counter on redis-server: a full window
// refuses with a wait of at most two periods, and concurrent calls never
// admit more than Max.
func TestAdmitRealServer(t *testing.T) {
	t.Parallel()
	e := newReal(t)
	ctx := t.Context()
	w := bucket.Window{Max: 10, Period: time.Second}
	if d, err := e.l.Admit(ctx, "tenant", "a", w, 10); err != nil || !d.Allowed {
		t.Fatalf("Admit(10) = %+v, %v", d, err)
	}
	if d, err := e.l.Admit(ctx, "tenant", "a", w, 1); err != nil || d.Allowed || d.Wait <= 0 || d.Wait > 2*time.Second {
		t.Fatalf("Admit(1) = %+v, %v; want refused within 2 s", d, err)
	}
	hour := bucket.Window{Max: 50, Period: time.Hour}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			for range 5 {
				d, err := e.l.Admit(ctx, "tenant", "b", hour, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := admitted.Load(); n != 50 {
		t.Fatalf("admitted %d of 100 concurrent events, want 50", n)
	}
}

func TestAdmitInvalid(t *testing.T) {
	t.Parallel()
	l := bucket.New(noRedis{}, bucket.Config{})
	for _, tc := range []struct {
		w bucket.Window
		n int
	}{
		{bucket.Window{}, 1},
		{bucket.Window{Max: 10}, 1},
		{bucket.Window{Max: 10, Period: time.Microsecond}, 1},
		{bucket.Window{Max: 10, Period: time.Second + 1}, 1},
		{bucket.Window{Max: 0, Period: time.Second}, 1},
		{bucket.Window{Max: 2e9, Period: time.Second}, 1},
		{bucket.Window{Max: 10, Period: time.Second}, 11},
		{bucket.Window{Max: 10, Period: time.Second}, 0},
	} {
		if _, err := l.Admit(t.Context(), "tenant", "a", tc.w, tc.n); !errors.Is(err, bucket.ErrInvalidLimit) {
			t.Errorf("Admit(%+v, %d): %v, want ErrInvalidLimit", tc.w, tc.n, err)
		}
	}
}
