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
