package park

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

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
				var marks Marks
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
					return marks.Seen("k", r, was, time.Now())
				}
				// Other parked records of the key watch it from the start.
				watch, stop := context.WithCancel(context.Background())
				defer stop()
				go waitRescaled(watch, start.Add(time.Hour), 50, rate, nil)
				time.Sleep(c.startAt)
				if !waitRescaled(context.Background(), start.Add(20*time.Second), 50, rate, nil) {
					t.Fatal("waitRescaled reported a cancelled context")
				}
				got := time.Since(start)
				if got < c.want || got > c.want+Recheck {
					t.Errorf("taken after %v, want %v (within %v)", got, c.want, Recheck)
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
		if waitRescaled(ctx, time.Now().Add(time.Minute), 50, func(float64) (float64, time.Time) { return 50, time.Now() }, nil) {
			t.Errorf("a wait cut by its context reported true")
		}
	})
}

// TestWaitTakenWhenKeyHasRoom: a copy parked 20 s ahead is taken within a
// Recheck of its key having room (here from 3 s on), its rate unchanged;
// without room it waits its whole 20 s; a copy parked without a rate (a
// deferral, not_before) never looks at the room.
func TestWaitTakenWhenKeyHasRoom(t *testing.T) {
	same := func(was float64) (float64, time.Time) { return was, time.Time{} }
	for _, c := range []struct {
		name   string
		roomAt time.Duration // when the key has room, 0 never
		want   time.Duration
	}{
		{"room from 3 s", 3 * time.Second, 3 * time.Second},
		{"never room", 0, 20 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				free := func() bool { return c.roomAt > 0 && time.Since(start) >= c.roomAt }
				if !waitRescaled(context.Background(), start.Add(20*time.Second), 50, same, free) {
					t.Fatal("waitRescaled reported a cancelled context")
				}
				if got := time.Since(start); got < c.want || got > c.want+Recheck {
					t.Errorf("taken after %v, want %v (within %v)", got, c.want, Recheck)
				}
			})
		})
	}
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		r := &kgo.Record{Key: []byte("k")} // no park rate: a deferral
		asked := false
		room := func(string) bool { asked = true; return true }
		if !UntilDue(context.Background(), r, start.Add(5*time.Second), nil, room) {
			t.Fatal("UntilDue reported a cancelled context")
		}
		if got := time.Since(start); got != 5*time.Second || asked {
			t.Errorf("a deferred copy taken after %v (room asked: %v), want 5s, never asked", got, asked)
		}
	})
}
