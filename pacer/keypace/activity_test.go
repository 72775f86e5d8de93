package keypace

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/channels"
)

// throttleAdapter is a verbAdapter that takes a key's throttle: its rate
// stays as it is.
type throttleAdapter struct{ verbAdapter }

func (*throttleAdapter) ThrottledAfter(_ context.Context, _, _ string, lim bucket.Limit, _ adapt.AIMD, _ time.Duration, _ int, _ float64) (adapt.Adapted, error) {
	return adapt.Adapted{Rate: lim.PerSecond}, nil
}

// AppendActive gives each active key's deliveries and its provider
// throttles of every scope (key, pair, account) through this process, for
// the status page's history; a key swept and seen again counts both from
// 0, and a key never throttled reads 0.
func TestActivityCountsThrottles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		ks := testKeys(t, bucket.NewLocal(bucket.LocalConfig{}), &throttleAdapter{verbAdapter{pairLeft: time.Second}}, nil)
		activity := func() string {
			var out string
			for _, k := range []string{"k", "quiet"} {
				for _, a := range ks.AppendActive(nil) {
					if a.Key == k {
						out += fmt.Sprintf("%s delivered %d throttled %d; ", a.Key, a.Delivered, a.Throttled)
					}
				}
			}
			return out
		}
		k := ks.Get("k", "to")
		q := ks.Get("quiet", "to")
		q.Report(ctx, time.Now(), Result{Class: channels.Success}, testLog)
		for _, err := range []error{
			nil, // a key throttle without a body
			&channels.Error{Class: channels.Throttle, Scope: channels.ScopeKey, Code: "130429"},
			&channels.Error{Class: channels.Throttle, Scope: channels.ScopePair, Code: "131056"},
			&channels.Error{Class: channels.Throttle, Scope: channels.ScopeAccount, Code: "80007", RetryAfter: time.Second},
		} {
			k.Report(ctx, time.Now(), Result{Class: channels.Throttle, Err: err}, testLog)
		}
		k.Report(ctx, time.Now(), Result{Class: channels.Success}, testLog)
		k.Report(ctx, time.Now(), Result{Class: channels.Success}, testLog)
		if got, want := activity(), "k delivered 2 throttled 4; quiet delivered 1 throttled 0; "; got != want {
			t.Fatalf("activity %q, want %q", got, want)
		}
		k.Done()
		q.Done()
		if n := ks.Sweep(ctx, time.Now().Add(activeFor+time.Second)); n != 2 {
			t.Fatalf("Sweep freed %d keys, want 2", n)
		}
		k = ks.Get("k", "to")
		defer k.Done()
		k.Report(ctx, time.Now(), Result{Class: channels.Throttle, Err: &channels.Error{Class: channels.Throttle, Scope: channels.ScopeKey}}, testLog)
		if got, want := activity(), "k delivered 0 throttled 1; "; got != want {
			t.Fatalf("after a sweep: activity %q, want %q", got, want)
		}
	})
}
