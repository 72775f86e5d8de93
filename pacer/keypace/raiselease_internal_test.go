package keypace

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pacerhq/pacer/bucket"
)

// TestRaiseKeepsLeasedSlots: when the key's rate rises, the slots this
// process leased at the old rate are handed out, in order, not given back:
// given back, they would leave a gap where they were, and the next lease
// (the bucket counts tokens, not slots) would land on top of slots other
// replicas leased after them. A decrease drops them (it cleared the
// bucket's debt).
func TestRaiseKeepsLeasedSlots(t *testing.T) {
	// In a bubble: the slots are times on the clock, and a stall of the
	// test past one would make it lapse.
	synctest.Test(t, testRaiseKeepsLeasedSlots)
}

func testRaiseKeepsLeasedSlots(t *testing.T) {
	ctx := context.Background()
	p := localKeys(t, nil)
	st := p.keyState("k")
	defer p.done(st)
	ceiling := bucket.Limit{PerSecond: 80, Burst: 10}
	next := func(lim bucket.Limit) bucket.Reservation {
		t.Helper()
		r, err := st.take(ctx, p, "k", ceiling, lim, 10)
		if err != nil || !r.OK {
			t.Fatalf("reservation: %+v, %v", r, err)
		}
		return r
	}
	// Ten slots at 20/s, burst 2: two at once, then 50 ms apart (0, 0,
	// 50, ..., 400 ms); five handed out.
	slow := bucket.Limit{PerSecond: 20, Burst: 2}
	first := next(slow)
	for range 4 {
		next(slow)
	}
	// The rate rises: the first reservation leases at the new rate (in
	// production after the old slots: the raise scales the bucket's debt);
	// the next five are the old lease's, at 200..400 ms, in order.
	fast := bucket.Limit{PerSecond: 25, Burst: 2}
	next(fast)
	for i := range 5 {
		want := time.Duration(200+50*i) * time.Millisecond
		if got := next(fast).At.Sub(first.At); got != want {
			t.Fatalf("reservation %d after the raise at %v from the first slot, want the old lease's slot at %v", i+2, got, want)
		}
	}
	if r, ok := st.rare.prev.Held(); ok {
		t.Fatalf("a held slot after the old lease's ten: %+v", r)
	}

	// A decrease drops what is left of the lease before it.
	st.dispenser(ctx, p, "k", ceiling, fast, 10) // held: a lease at 25/s
	faster := bucket.Limit{PerSecond: 30, Burst: 2}
	next(faster) // the 25/s lease is kept
	st.dispenser(ctx, p, "k", ceiling, slow, 10)
	if st.rare != nil && st.rare.prev != nil {
		t.Fatal("the faster lease's slots are kept after a decrease")
	}
}
