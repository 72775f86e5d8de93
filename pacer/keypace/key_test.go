package keypace

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/pacer/keypace/keypacetest"
)

// verbAdapter is a keypacetest.Adapter whose pair throttles set a cooldown of
// pairLeft and whose breaker, once a halt opened it, refuses for
// breakerWait.
type verbAdapter struct {
	keypacetest.Adapter
	pairLeft    time.Duration
	breakerWait time.Duration
	open        bool
}

func (a *verbAdapter) PairThrottled(context.Context, string, string, string, time.Duration, time.Duration, float64) (adapt.Pair, error) {
	return adapt.Pair{Left: a.pairLeft, Rate: 0.5, Throttles: 1}, nil
}

func (a *verbAdapter) BreakerResult(_ context.Context, _, _ string, _ adapt.Breaker, ok bool, _ string) (adapt.BreakerState, error) {
	a.open = !ok
	if a.open {
		return adapt.BreakerOpen, nil
	}
	return adapt.BreakerClosed, nil
}

func (a *verbAdapter) BreakerStatus(context.Context, string, string) (adapt.BreakerStatus, error) {
	if a.open {
		return adapt.BreakerStatus{State: adapt.BreakerOpen}, nil
	}
	return adapt.BreakerStatus{}, nil
}

func (a *verbAdapter) BreakerAllow(context.Context, string, string, adapt.Breaker, string) (bool, bool, time.Duration, error) {
	return !a.open, false, a.breakerWait, nil
}

// Each verb's verdict, as the record's steps act on it: Gate lets a key
// with nothing against it pass; Report sends a throttled or halted record
// back to the gates (a pair throttle has it wait out the pair's cooldown
// first); and the next Gate holds the record for the cooldown or the
// breaker that answer set: a wait within MaxTokenWait, a requeue beyond
// it, named by its reason.
func TestVerbsVerdicts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		a := &verbAdapter{pairLeft: 2 * time.Second, breakerWait: 30 * time.Second}
		ks := testKeys(t, bucket.NewLocal(bucket.LocalConfig{}), a, nil)
		k := ks.Get("k", "to")
		defer k.Done()
		other := ks.Get("k", "someone else")
		defer other.Done()

		if v := k.Gate(ctx, time.Now(), testLog); v.Kind != Pass {
			t.Fatalf("Gate of a fresh key: %+v, want Pass", v)
		}
		if v := k.Slot(ctx, false, 0, nil, testLog); v.Kind != Pass {
			t.Fatalf("Slot of a fresh key: %+v, want Pass", v)
		}
		if v := k.Report(ctx, time.Now(), Result{Class: channels.Success}, testLog); v.Kind != Pass {
			t.Fatalf("Report of an accepted send: %+v, want Pass", v)
		}

		// A pair throttle: this recipient waits out the pair's cooldown,
		// the key's other recipients do not.
		pair := &channels.Error{Class: channels.Throttle, Scope: channels.ScopePair, RetryAfter: time.Second}
		if v := k.Report(ctx, time.Now(), Result{Class: channels.Throttle, Err: pair}, testLog); v.Kind != Wait || v.Wait != 2*time.Second {
			t.Fatalf("Report of a pair throttle: %+v, want Wait 2s", v)
		}
		if v := k.Gate(ctx, time.Now(), testLog); v.Kind != Wait || v.Wait < 2*time.Second || v.Wait > 2200*time.Millisecond {
			t.Fatalf("Gate in the pair's cooldown: %+v, want Wait 2s plus up to 10%%", v)
		}
		if v := other.Gate(ctx, time.Now(), testLog); v.Kind != Pass {
			t.Fatalf("Gate of another recipient of the key: %+v, want Pass", v)
		}

		// An account throttle of a minute: every key of the channel is
		// requeued, longer than MaxTokenWait (5 s).
		account := &channels.Error{Class: channels.Throttle, Scope: channels.ScopeAccount, RetryAfter: time.Minute}
		if v := other.Report(ctx, time.Now(), Result{Class: channels.Throttle, Err: account}, testLog); v.Kind != Again {
			t.Fatalf("Report of an account throttle: %+v, want Again", v)
		}
		if v := other.Gate(ctx, time.Now(), testLog); v.Kind != Requeue || v.Reason != "account-cooldown" || v.Wait != time.Minute {
			t.Fatalf("Gate in the account's cooldown: %+v, want Requeue account-cooldown 1m", v)
		}
		time.Sleep(time.Minute)

		// A halt opens the key's breaker: back to the gates, where the
		// breaker requeues the record.
		halt := &channels.Error{Class: channels.Halt, Code: "190"}
		if v := other.Report(ctx, time.Now(), Result{Class: channels.Halt, Err: halt}, testLog); v.Kind != Again {
			t.Fatalf("Report of a halt: %+v, want Again", v)
		}
		if !other.Shut() {
			t.Error("Shut after a halt: false, want the breaker to hold back the key's slots")
		}
		if v := other.Gate(ctx, time.Now(), testLog); v.Kind != Requeue || v.Reason != "breaker" || v.Wait != 30*time.Second {
			t.Fatalf("Gate with the breaker open: %+v, want Requeue breaker 30s", v)
		}
	})
}

// Alone says whether a record is its key's only one in hand in this
// process: another record of the key (not of another key) makes it false
// until that one is Done.
func TestKeyAlone(t *testing.T) {
	ks := testKeys(t, bucket.NewLocal(bucket.LocalConfig{}), &keypacetest.Adapter{}, nil)
	a := ks.Get("k", "to")
	defer a.Done()
	other := ks.Get("other", "to")
	defer other.Done()
	if !a.Alone() {
		t.Fatalf("the key's only record, another key's beside it: Alone false, want true")
	}
	b := ks.Get("k", "to2")
	if a.Alone() || b.Alone() {
		t.Errorf("two records of the key in hand: Alone %v, %v; want false, false", a.Alone(), b.Alone())
	}
	b.Done()
	if !a.Alone() {
		t.Errorf("the other record Done: Alone false, want true")
	}
}
