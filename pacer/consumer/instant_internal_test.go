package consumer

import (
	"math"
	"testing"
	"testing/synctest"
	"time"
)

// An instant compares, subtracts and converts back as the time.Time it
// was made from, the zero one included, in and out of a synctest bubble.
func TestInstantAsTime(t *testing.T) {
	check := func(t *testing.T, base time.Time) {
		t.Helper()
		times := []time.Time{{}, base, base.Add(time.Nanosecond), base.Add(-time.Second),
			base.Add(5 * time.Minute), base.Add(-5 * time.Minute), clockBase}
		for _, a := range times {
			ia := instantOf(a)
			if ia.IsZero() != a.IsZero() {
				t.Errorf("instantOf(%v).IsZero() = %v, want %v", a, ia.IsZero(), a.IsZero())
			}
			if back := ia.Time(); !a.IsZero() && (back.Sub(a) > time.Nanosecond || back.Sub(a) < 0) || a.IsZero() && !back.IsZero() {
				t.Errorf("instantOf(%v).Time() = %v", a, back)
			}
			for _, b := range times {
				ib := instantOf(b)
				want, got := a.Sub(b), ia.Sub(ib)
				if a.Equal(clockBase) || b.Equal(clockBase) { // taken 1 ns later
					if d := got - want; d < -time.Nanosecond || d > time.Nanosecond {
						t.Errorf("%v.Sub(%v) = %v, want %v ± 1ns", a, b, got, want)
					}
					continue
				}
				if got != want {
					t.Errorf("%v.Sub(%v) = %v, want %v", a, b, got, want)
				}
				if got, want := ia.After(ib), a.After(b); got != want {
					t.Errorf("%v.After(%v) = %v, want %v", a, b, got, want)
				}
			}
		}
		// A key never read is due for a read; a cooldown never set is over.
		if d := instantOf(base).Sub(0); d < refreshEvery {
			t.Errorf("now - never = %v, want at least refreshEvery", d)
		}
		if instant(0).After(instantOf(base)) {
			t.Error("the zero instant is after now")
		}
	}
	t.Run("process clock", func(t *testing.T) { check(t, time.Now()) })
	t.Run("synctest bubble", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			start := nowInstant()
			check(t, time.Now())
			time.Sleep(7 * time.Minute)
			if d := nowInstant().Sub(start); d != 7*time.Minute {
				t.Errorf("7 minutes of the bubble's clock: %v between instants", d)
			}
		})
	})
	t.Run("saturates", func(t *testing.T) {
		if d := instant(math.MaxInt64).Sub(instant(-1)); d != math.MaxInt64 {
			t.Errorf("max - (-1) = %v, want the largest duration", d)
		}
		if d := instant(math.MinInt64 + 1).Sub(instant(2)); d != math.MinInt64 {
			t.Errorf("min+1 - 2 = %v, want the smallest duration", d)
		}
	})
}
