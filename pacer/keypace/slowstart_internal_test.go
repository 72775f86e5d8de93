package keypace

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/pacer/keypace/keypacetest"
)

// activeAdapter is a keypacetest.Adapter whose keys have been active since
// start (on the bubble's clock), or since the last call after a gap of idle.
type activeAdapter struct {
	keypacetest.Adapter
	start, seen time.Time
}

func (a *activeAdapter) Active(_ context.Context, _, _ string, s adapt.SlowStart) (time.Duration, error) {
	now := time.Now()
	if a.seen.IsZero() || now.Sub(a.seen) >= s.Idle {
		a.start = now
	}
	a.seen = now
	return now.Sub(a.start), nil
}

// TestSlowStartRamps: a key back from idle is paced at a straight ramp of
// its rate and burst, from the first second's share to the whole at
// Ramp, then at its rate; one idle for Idle ramps again. Without a slow
// start the key starts at its rate.
func TestSlowStartRamps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		ceiling := bucket.Limit{PerSecond: 6000, Burst: 6000}
		ks := New(Config{Channel: "fcm", MaxTokenWait: 5 * time.Second, Bucket: bucket.NewLocal(bucket.LocalConfig{}),
			Adapter: &activeAdapter{}, Default: KeyPolicy{Limit: ceiling},
			SlowStart: adapt.SlowStart{Ramp: time.Minute, Idle: 5 * time.Minute}})
		k := ks.Get("project", "token")
		defer k.Done()
		for _, c := range []struct {
			after time.Duration // sleep before the read
			rate  float64
		}{
			{0, 100},                 // 1/60 of the rate
			{30 * time.Second, 3000}, // 30 s of 60
			{30 * time.Second, 6000}, // the ramp is over
			{4 * time.Minute, 6000},  // active within Idle: no new ramp
			{6 * time.Minute, 100},   // idle for 6 min: ramps again
		} {
			time.Sleep(c.after)
			lim := k.Limit(ctx, time.Now(), testLog)
			if lim.PerSecond != c.rate || lim.Burst > int(c.rate) {
				t.Fatalf("after %v more: limit %+v, want %v/s with a burst no larger", c.after, lim, c.rate)
			}
		}

		off := New(Config{Channel: "fcm", MaxTokenWait: 5 * time.Second, Bucket: bucket.NewLocal(bucket.LocalConfig{}),
			Adapter: &activeAdapter{}, Default: KeyPolicy{Limit: ceiling}}).Get("project", "token")
		defer off.Done()
		if lim := off.Limit(ctx, time.Now(), testLog); lim.PerSecond != 6000 {
			t.Errorf("without a slow start: limit %+v, want the rate", lim)
		}
	})
}
