package bucket_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/pacerhq/pacer/bucket"
)

// A Dispenser hands out a slot that started up to WithLate ago (the
// lateness its caller accepts) and skips older ones; without WithLate, one
// slot interval.
func TestDispenserWithLate(t *testing.T) {
	for _, c := range []struct {
		name string
		late time.Duration
		want time.Duration // the slot handed out 5 ms after the first, from the first
	}{
		{"one interval by default", 0, 4 * time.Millisecond},
		{"shorter than an interval: one interval", 500 * time.Microsecond, 4 * time.Millisecond},
		{"2.5 ms", 2500 * time.Microsecond, 3 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				// Burst 1 at 1,000/s: the lease's slots lie 1 ms apart.
				d := bucket.NewDispenser(bucket.NewLocal(bucket.LocalConfig{}), "test", "k", bucket.Limit{PerSecond: 1000, Burst: 1}, 10, time.Second)
				if c.late > 0 {
					d = d.WithLate(c.late)
				}
				first, err := d.Next(ctx)
				if err != nil || !first.OK {
					t.Fatalf("Next = %+v, %v", first, err)
				}
				time.Sleep(5 * time.Millisecond)
				r, err := d.Next(ctx)
				if err != nil || !r.OK {
					t.Fatalf("Next = %+v, %v", r, err)
				}
				if got := r.At.Sub(first.At); got != c.want {
					t.Fatalf("5 ms on, the slot handed out starts %v after the first, want %v", got, c.want)
				}
			})
		})
	}
}

// UsedUp: a lease whose every slot was handed out, none lapsed, and whose
// last slot started within the span asked about; not one with a slot
// left, one whose slot lapsed, nor one used up longer ago.
func TestDispenserUsedUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		lim := bucket.Limit{PerSecond: 1000, Burst: 1} // slots 1 ms apart
		next := func(d *bucket.Dispenser) {
			t.Helper()
			if r, err := d.Next(ctx); err != nil || !r.OK {
				t.Fatalf("Next = %+v, %v", r, err)
			}
		}
		whole := bucket.NewDispenser(bucket.NewLocal(bucket.LocalConfig{}), "test", "whole", lim, 4, time.Second)
		if whole.UsedUp(time.Now(), time.Second) {
			t.Error("UsedUp before the first lease")
		}
		for range 3 {
			next(whole)
		}
		if whole.UsedUp(time.Now(), time.Second) {
			t.Error("UsedUp with a slot of the lease left")
		}
		next(whole)
		if !whole.UsedUp(time.Now(), time.Second) {
			t.Error("not UsedUp with every slot handed out at once")
		}
		time.Sleep(2 * time.Second)
		if whole.UsedUp(time.Now(), time.Second) {
			t.Error("UsedUp 2 s after the lease's last slot, asked within 1 s")
		}

		gap := bucket.NewDispenser(bucket.NewLocal(bucket.LocalConfig{}), "test", "gap", lim, 4, time.Second)
		next(gap)
		time.Sleep(2500 * time.Microsecond) // slot 1 (at 1 ms) lapses; 2 (2 ms) is still usable
		next(gap)
		next(gap)
		if gap.UsedUp(time.Now(), time.Second) {
			t.Error("UsedUp though a slot of the lease lapsed")
		}
	})
}
