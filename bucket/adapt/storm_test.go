package adapt_test

import (
	"errors"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
)

// TestServerErrorBurst: the ServerErrors-th server error within a window,
// counted across replicas, cuts the rate once by ServerErrorDecrease; the
// count starts again after the cut and after a window without a burst;
// the next increase waits a clean window from the cut; no cooldown is
// set; a negative ServerErrors turns it off.
func TestServerErrorBurst(t *testing.T) {
	const ms = time.Millisecond
	a := adapt.AIMD{ServerErrors: 3, ServerErrorWindow: time.Second, ServerErrorDecrease: 0.9, Window: 2 * time.Second,
		Accelerate: 1}
	each(t, func(t *testing.T, e *env) {
		other := adapt.New(e.rdb, bucket.Config{Prefix: e.Prefix}) // a second replica
		for i, s := range []struct {
			at     time.Duration
			l      *adapt.Adapter
			rate   float64
			change bool
		}{
			{0, e.l, 100, false},
			{100 * ms, other, 100, false},
			{200 * ms, e.l, 90, true}, // the third of two replicas within the window
			{300 * ms, other, 90, false},
			{400 * ms, e.l, 90, false},
			{1500 * ms, e.l, 90, false}, // the window of 300 ms is over: counted anew
			{1600 * ms, other, 90, false},
			{1700 * ms, e.l, 81, true},
		} {
			e.at(s.at)
			ad, err := s.l.ServerError(t.Context(), "test", "k", lim100, a)
			e.mark()
			if err != nil || ad.Rate != s.rate || ad.Decreased != s.change || ad.CooldownLeft != 0 {
				t.Fatalf("error %d at %v: %+v, %v; want rate %v, decreased %v, no cooldown", i, s.at, ad, err, s.rate, s.change)
			}
		}
		e.adapts(t, "k", lim100, a, []aimdStep{
			{at: 3500 * ms, op: opRecover, rate: 81},               // the clean window runs from the cut at 1.7 s
			{at: 3900 * ms, op: opRecover, rate: 82.62, change: 1}, // then up by Factor 1.02
		})

		off := a
		off.ServerErrors = -1
		for range 5 {
			if ad, err := e.l.ServerError(t.Context(), "test", "off", lim100, off); err != nil || ad != (adapt.Adapted{}) {
				t.Fatalf("turned off: %+v, %v; want nothing", ad, err)
			}
		}
		if ad, err := e.l.Adapted(t.Context(), "test", "off", lim100, off); err != nil || ad.Rate != 100 {
			t.Errorf("turned off: rate %v, %v; want 100", ad.Rate, err)
		}
	})
}

// TestServerErrorValidate: the server-error settings are checked with the
// rest of the AIMD, each naming its field.
func TestServerErrorValidate(t *testing.T) {
	for _, c := range []struct {
		a     adapt.AIMD
		field string
	}{
		{adapt.AIMD{ServerErrorDecrease: 1}, "ServerErrorDecrease"},
		{adapt.AIMD{ServerErrorDecrease: -0.5}, "ServerErrorDecrease"},
		{adapt.AIMD{ServerErrorWindow: -time.Second}, "ServerErrorWindow"},
	} {
		err := c.a.Validate(lim100)
		fe, ok := errors.AsType[*bucket.FieldError](err)
		if !ok || fe.Field != c.field || !errors.Is(err, adapt.ErrInvalidAIMD) {
			t.Errorf("%+v: %v; want a field error on %s", c.a, err, c.field)
		}
	}
	if err := (adapt.AIMD{ServerErrors: -1}).Validate(lim100); err != nil {
		t.Errorf("turned off: %v", err)
	}
}
