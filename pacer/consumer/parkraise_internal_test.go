package consumer

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestWaitRescaled: a record parked 20 s ahead at 50 msgs/s whose key is
// raised to 200 msgs/s 2 s later is taken when the records ahead of it
// would be sent at the new rate: the 18 s left after the raise shrink to a
// quarter. A record that starts waiting 3 s after the raise is moved as
// from the raise, not from its start. Without a raise, or with a lower
// rate, it waits its whole 20 s.
func TestWaitRescaled(t *testing.T) {
	for _, c := range []struct {
		name    string
		after   float64       // the key's rate from 2 s on
		startAt time.Duration // when the record starts waiting
		want    time.Duration
	}{
		{"raised to 200", 200, 0, 2*time.Second + (18*time.Second)/4},
		{"raised before its wait", 200, 5 * time.Second, 2*time.Second + 18*time.Second*50/195},
		{"unchanged", 50, 0, 20 * time.Second},
		{"lowered to 20", 20, 0, 20 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				var marks rateMarks
				var asked atomic.Int32
				rate := func(was float64) (float64, time.Time) {
					asked.Add(1)
					r := 50.0
					if time.Since(start) >= 2*time.Second {
						r = c.after
					}
					// The AIMD moves a raised rate a little after 3 s (a
					// throttle, a clean window): still from the raise.
					if e := time.Since(start); r > 50 && e >= 3*time.Second {
						r = c.after - float64(e/time.Second)
					}
					return marks.seen("k", r, was, time.Now())
				}
				// Other parked records of the key watch it from the start.
				watch, stop := context.WithCancel(context.Background())
				defer stop()
				go waitRescaled(watch, start.Add(time.Hour), 50, rate)
				time.Sleep(c.startAt)
				if !waitRescaled(context.Background(), start.Add(20*time.Second), 50, rate) {
					t.Fatal("waitRescaled reported a cancelled context")
				}
				got := time.Since(start)
				if got < c.want || got > c.want+parkedRecheck {
					t.Errorf("taken after %v, want %v (within %v)", got, c.want, parkedRecheck)
				}
				if asked.Load() == 0 {
					t.Errorf("the key's rate was never read")
				}
			})
		})
	}
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if waitRescaled(ctx, time.Now().Add(time.Minute), 50, func(float64) (float64, time.Time) { return 50, time.Now() }) {
			t.Errorf("a wait cut by its context reported true")
		}
	})
}

// TestParkRateOnlyOnParkedCopies: the rate header is read back as written,
// and a later copy of the record (a deferral, a retry: meta.headers) drops
// it, so only a copy parked for its key's lookahead is ever taken early.
func TestParkRateOnlyOnParkedCopies(t *testing.T) {
	r := &kgo.Record{Topic: "t", Key: []byte("k"), Headers: []kgo.RecordHeader{parkRateHeader(48.5), {Key: "trace", Value: []byte("x")}}}
	if got := parkRateOf(r); got != 48.5 {
		t.Fatalf("parkRateOf = %v, want 48.5", got)
	}
	p := &Pacer{cfg: Config{Topic: "t", RetryDelays: []time.Duration{5 * time.Second, 30 * time.Second}}}
	c, _ := p.parkCopy(r, time.Now().Add(5*time.Second))
	if got := parkRateOf(c); got != 0 {
		t.Errorf("a deferred copy kept the park rate %v", got)
	}
	if envelope.Header(c, "trace") != "x" {
		t.Errorf("the producer's header was dropped")
	}
	for _, v := range []string{"", "0", "-3", "fast"} {
		if got := parkRateOf(&kgo.Record{Headers: []kgo.RecordHeader{{Key: envelope.HeaderParkRate, Value: []byte(v)}}}); got != 0 {
			t.Errorf("park rate %q read as %v, want 0", v, got)
		}
	}
}

// TestSlotAfterRaise: a key at 20 msgs/s parked 200 records up to 9.95 s
// ahead; raised to 100 msgs/s, the next parked record is due after the
// earlier ones at the new rate (2 s), not after the 10 s estimated at the
// old one.
func TestSlotAfterRaise(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &worker{}
		q := &keyQueue{rate: 20}
		now := time.Now()
		for range 200 {
			w.slotAfter(q, now)
		}
		if d := q.parkedUntil.Sub(now); d != 9950*time.Millisecond {
			t.Fatalf("200 parked at 20/s: the last due in %v, want 9.95s", d)
		}
		q.rate = 100
		if d := w.slotAfter(q, now).Sub(now); d != 2*time.Second {
			t.Errorf("after the raise to 100/s: next parked due in %v, want 2s (1.99 s of records ahead, then 10 ms)", d)
		}
	})
}
