package window_test

import (
	"errors"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/redistest"
	"github.com/pacerhq/pacer/pacer/ingest/window"
)

const ms = time.Millisecond

// counter returns a Counter on e, and e.
func counter(e *redistest.Env) (*window.Counter, *redistest.Env) {
	return window.New(e.RDB, bucket.NewKeys(e.Prefix)), e
}

// TestAdmitSteps checks the sliding-window counter on miniredis's clock
// (windows aligned to whole seconds since the epoch, as t0 is).
func TestAdmitSteps(t *testing.T) {
	t.Parallel()
	c, e := counter(redistest.Mini(t))
	w := window.Window{Max: 10, Period: time.Second}
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
		e.At(s.at)
		d, err := c.Admit(t.Context(), "tenant", "acme", w, s.n)
		if err != nil || d.Allowed != s.allowed || d.Remaining != s.remaining || d.Wait != s.wait {
			t.Fatalf("step %d (at %v, n %d): got %+v, %v; want allowed=%v remaining=%d wait=%v",
				i, s.at, s.n, d, err, s.allowed, s.remaining, s.wait)
		}
	}
	// Set at 3 s by the last grant, read at 3.999 s.
	if ttl := e.RDB.PTTL(t.Context(), bucket.Keys{}.Window("tenant", "acme")).Val(); ttl != 2*time.Second+ms-999*ms {
		t.Fatalf("PTTL = %v, want the end of the next window + 1 ms", ttl)
	}
}

// TestAdmitClockSteppedBack checks that a window stamped ahead of TIME keeps
// its counts (no quota minted) and is re-based.
func TestAdmitClockSteppedBack(t *testing.T) {
	t.Parallel()
	c, e := counter(redistest.Mini(t))
	w := window.Window{Max: 10, Period: time.Second}
	e.At(10 * time.Second)
	if d, err := c.Admit(t.Context(), "ip", "10.0.0.1", w, 8); err != nil || !d.Allowed {
		t.Fatalf("Admit: %+v, %v", d, err)
	}
	e.At(9500 * ms)
	if d, err := c.Admit(t.Context(), "ip", "10.0.0.1", w, 3); err != nil || d.Allowed || d.Remaining != 2 {
		t.Fatalf("Admit after the step back: %+v, %v; want refused with 2 left", d, err)
	}
	if d, err := c.Admit(t.Context(), "ip", "10.0.0.1", w, 2); err != nil || !d.Allowed {
		t.Fatalf("Admit after the step back: %+v, %v; want allowed", d, err)
	}
}

// TestAdmitRealServer checks the counter on redis-server: a full window
// refuses with a wait of at most two periods, and concurrent calls never
// admit more than Max.
func TestAdmitRealServer(t *testing.T) {
	t.Parallel()
	c, _ := counter(redistest.Real(t))
	ctx := t.Context()
	w := window.Window{Max: 10, Period: time.Second}
	if d, err := c.Admit(ctx, "tenant", "a", w, 10); err != nil || !d.Allowed {
		t.Fatalf("Admit(10) = %+v, %v", d, err)
	}
	if d, err := c.Admit(ctx, "tenant", "a", w, 1); err != nil || d.Allowed || d.Wait <= 0 || d.Wait > 2*time.Second {
		t.Fatalf("Admit(1) = %+v, %v; want refused within 2 s", d, err)
	}
	hour := window.Window{Max: 50, Period: time.Hour}
	admitted := redistest.CountConcurrent(t, 20, 5, func() (bool, error) {
		d, err := c.Admit(ctx, "tenant", "b", hour, 1)
		return d.Allowed, err
	})
	if admitted != 50 {
		t.Fatalf("admitted %d of 100 concurrent events, want 50", admitted)
	}
}

func TestAdmitInvalid(t *testing.T) {
	t.Parallel()
	c := window.New(nil, bucket.Keys{}) // a nil Scripter: any Redis call panics
	for _, tc := range []struct {
		w window.Window
		n int
	}{
		{window.Window{}, 1},
		{window.Window{Max: 10}, 1},
		{window.Window{Max: 10, Period: time.Microsecond}, 1},
		{window.Window{Max: 10, Period: time.Second + 1}, 1},
		{window.Window{Max: 0, Period: time.Second}, 1},
		{window.Window{Max: 2e9, Period: time.Second}, 1},
		{window.Window{Max: 10, Period: time.Second}, 11},
		{window.Window{Max: 10, Period: time.Second}, 0},
	} {
		if _, err := c.Admit(t.Context(), "tenant", "a", tc.w, tc.n); !errors.Is(err, window.ErrInvalid) {
			t.Errorf("Admit(%+v, %d): %v, want ErrInvalid", tc.w, tc.n, err)
		}
	}
}
