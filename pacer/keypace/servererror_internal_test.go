package keypace

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/pacer/keypace/keypacetest"
)

// stormAdapter counts the server errors reported to it and answers the
// third with a decrease to half the ceiling.
type stormAdapter struct {
	keypacetest.Adapter
	errors int
}

func (a *stormAdapter) ServerError(_ context.Context, _, _ string, ceiling bucket.Limit, _ adapt.AIMD) (adapt.Adapted, error) {
	a.errors++
	if a.errors == 3 {
		return adapt.Adapted{Rate: ceiling.PerSecond / 2, Ceiling: ceiling.PerSecond, Decreased: true}, nil
	}
	return adapt.Adapted{Rate: ceiling.PerSecond, Ceiling: ceiling.PerSecond}, nil
}

// TestServerErrorsReported: Report gives the shared state every server
// error (a Transient with an HTTP 5xx status) and nothing else, and a
// decrease it answers lowers the key's limit at once; a key whose AIMD
// turns the cut off reports none.
func TestServerErrorsReported(t *testing.T) {
	ctx := t.Context()
	a := &stormAdapter{}
	ks := testKeys(t, bucket.NewLocal(bucket.LocalConfig{}), a, nil)
	k := ks.Get("k", "to")
	defer k.Done()
	if v := k.Gate(ctx, time.Now(), testLog); v.Kind != Pass {
		t.Fatalf("Gate: %+v", v)
	}
	for _, r := range []Result{
		{Class: channels.Transient, Err: &channels.Error{Class: channels.Transient, Status: 503}},
		{Class: channels.Transient, Err: errors.New("connection reset")},                          // no answer: not counted
		{Class: channels.Transient, Err: &channels.Error{Class: channels.Transient, Status: 400}}, // APNs IdleTimeout
		{Class: channels.Permanent, Err: &channels.Error{Class: channels.Permanent, Status: 500}},
		{Class: channels.Transient, Err: &channels.Error{Class: channels.Transient, Status: 500}},
	} {
		if v := k.Report(ctx, time.Now(), r, testLog); v.Kind != Pass {
			t.Fatalf("Report %+v: %+v, want Pass (the retry delay is the caller's)", r, v)
		}
	}
	if a.errors != 2 {
		t.Fatalf("%d server errors reported, want 2 (the 503 and the transient 500)", a.errors)
	}
	if lim := k.Limit(ctx, time.Now(), testLog); lim.PerSecond != 100 {
		t.Fatalf("limit before the burst: %+v", lim)
	}
	k.Report(ctx, time.Now(), Result{Class: channels.Transient, Err: &channels.Error{Class: channels.Transient, Status: 502}}, testLog)
	if lim := ks.keyState("k").limit; lim.PerSecond != 50 {
		t.Errorf("limit after the burst's decrease: %+v, want 50/s", lim)
	}

	off := &stormAdapter{}
	ks = testKeys(t, bucket.NewLocal(bucket.LocalConfig{}), off, StaticPolicy(KeyPolicy{Limit: bucket.Limit{PerSecond: 100, Burst: 20},
		AIMD: adapt.AIMD{ServerErrors: -1}}))
	k2 := ks.Get("k", "to")
	defer k2.Done()
	k2.Gate(ctx, time.Now(), testLog)
	k2.Report(ctx, time.Now(), Result{Class: channels.Transient, Err: &channels.Error{Class: channels.Transient, Status: 503}}, testLog)
	if off.errors != 0 {
		t.Errorf("cut turned off: %d server errors reported, want 0", off.errors)
	}
}
