package adapt_test

import (
	"errors"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
)

// TestSlowStartActive: a key's active spell starts at its first mark and
// lasts while any replica marks it within Idle; a key unmarked for Idle
// starts a new one.
func TestSlowStartActive(t *testing.T) {
	const ms = time.Millisecond
	s := adapt.SlowStart{Ramp: time.Minute, Idle: time.Second}
	each(t, func(t *testing.T, e *env) {
		other := adapt.New(e.rdb, bucket.Config{Prefix: e.Prefix}) // a second replica
		for i, c := range []struct {
			at   time.Duration
			l    *adapt.Adapter
			want time.Duration
		}{
			{0, e.l, 0},
			{600 * ms, other, 600 * ms},
			{1200 * ms, e.l, 1200 * ms}, // marked 600 ms ago: still active
			{2400 * ms, other, 0},       // unmarked for 1.2 s: idle, a new spell
			{2900 * ms, e.l, 500 * ms},
		} {
			e.at(c.at)
			got, err := c.l.Active(t.Context(), "test", "k", s)
			e.mark()
			if err != nil || !e.near(got, c.want) {
				t.Fatalf("mark %d at %v: active %v, %v; want %v", i, c.at, got, err, c.want)
			}
		}
	})
}

// TestSlowStartFactor: the ramp is a straight line from the first
// second's share of the rate to the whole rate at Ramp; none without a
// Ramp.
func TestSlowStartFactor(t *testing.T) {
	s := adapt.SlowStart{Ramp: time.Minute}
	for _, c := range []struct {
		elapsed time.Duration
		want    float64
	}{
		{0, 1.0 / 60}, {time.Second, 1.0 / 60}, {30 * time.Second, 0.5}, {time.Minute, 1}, {time.Hour, 1},
	} {
		if got := s.Factor(c.elapsed); got != c.want {
			t.Errorf("Factor(%v) = %v, want %v", c.elapsed, got, c.want)
		}
	}
	if got := (adapt.SlowStart{}).Factor(0); got != 1 {
		t.Errorf("no ramp: Factor(0) = %v, want 1", got)
	}
	for _, bad := range []adapt.SlowStart{{Ramp: -time.Second}, {Ramp: 2 * time.Hour}, {Ramp: time.Minute, Idle: time.Millisecond}} {
		if err := bad.Validate(); !errors.Is(err, adapt.ErrInvalidSlowStart) {
			t.Errorf("%+v: Validate = %v, want ErrInvalidSlowStart", bad, err)
		}
	}
}
