package adapt

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pacerhq/pacer/internal/wire"
	"github.com/pacerhq/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// SlowStart ramps the rate of a pacing key that comes back from idle,
// instead of sending at once at its full rate and burst: FCM asks senders
// to ramp a sending job up "from 0 to the target rate over at least 60
// seconds" (https://firebase.google.com/docs/cloud-messaging/scale-fcm;
// providers.md §8.4), where a cold FCM key would start with a burst of
// 10,000. The zero value is off.
//
// A key is idle once no replica has sent for it for Idle; its next active
// spell starts then, shared by every replica through Redis
// ([Adapter.Active]). For Ramp from that start the key is paced at no
// more than [SlowStart.Factor] of its rate (and burst): a straight line
// from 1/Ramp-in-seconds of the rate (the first second's share) to the
// whole rate at Ramp.
type SlowStart struct {
	// Ramp is how long the ramp from idle to the full rate lasts; 0: no
	// slow start. At most 1h.
	Ramp time.Duration
	// Idle is how long a key must go unsent before its next message starts
	// a ramp; from 1s to 24h, default 5m.
	Idle time.Duration
}

// ErrInvalidSlowStart is returned, wrapped with what is wrong, by
// [SlowStart.Validate].
var ErrInvalidSlowStart = errors.New("adapt: invalid slow start")

// Validate returns nil if s is usable, else an error wrapping
// [ErrInvalidSlowStart] that names the field.
func (s SlowStart) Validate() error {
	var errs []error
	if s.Ramp < 0 || s.Ramp > time.Hour {
		errs = append(errs, fieldErr("Ramp", fmt.Errorf("%w: ramp %v must be in [0, 1h]", ErrInvalidSlowStart, s.Ramp)))
	}
	if s.Idle != 0 && (s.Idle < time.Second || s.Idle > 24*time.Hour) {
		errs = append(errs, fieldErr("Idle", fmt.Errorf("%w: idle %v must be in [1s, 24h]", ErrInvalidSlowStart, s.Idle)))
	}
	return errors.Join(errs...)
}

// idle returns Idle or its default.
func (s SlowStart) idle() time.Duration {
	if s.Idle == 0 {
		return 5 * time.Minute
	}
	return s.Idle
}

// Factor returns the share of its rate a key active for elapsed may be
// paced at: 1 without a ramp or once elapsed reaches Ramp, else
// max(elapsed, 1s) / Ramp.
func (s SlowStart) Factor(elapsed time.Duration) float64 {
	if s.Ramp <= 0 || elapsed >= s.Ramp {
		return 1
	}
	return min(1, max(elapsed, time.Second).Seconds()/s.Ramp.Seconds())
}

var slowStartScript = redis.NewScript(lua.SlowStart)

// Active marks (channel, key) active now, on the Redis clock and for
// every replica, and returns how long it has been active: since the first
// mark after it went unmarked for s.Idle (0 when this call starts the
// spell). The pacer calls it at each refresh of a key it sends for when
// s.Ramp > 0. Errors wrap [ErrInvalidSlowStart] for an invalid s (without
// calling Redis) or the Redis error.
func (l *Adapter) Active(ctx context.Context, channel, key string, s SlowStart) (time.Duration, error) {
	if err := s.Validate(); err != nil {
		return 0, err
	}
	k := l.keys.Start(channel, key)
	v, err := slowStartScript.Run(ctx, l.rdb, []string{k}, roundUp(s.idle(), time.Millisecond)).Result()
	if err != nil {
		return 0, fmt.Errorf("adapt: slow start %q: %w", k, err)
	}
	us, ok := v.(int64)
	if !ok || us < 0 {
		return 0, fmt.Errorf("adapt: slow start %q: unexpected reply %s", k, wire.Describe(v))
	}
	return time.Duration(us) * time.Microsecond, nil
}
