package adapt

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/wire"
	"github.com/pacerhq/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// ErrInvalidBreaker is returned, wrapped with what is wrong, for a
// [Breaker] that [Breaker.Validate] rejects, and by
// [Adapter.BreakerAllow] for an empty owner. Test for it with errors.Is.
var ErrInvalidBreaker = errors.New("adapt: invalid breaker")

var (
	breakerAllowScript  = redis.NewScript(lua.BreakerAllow)
	breakerResultScript = redis.NewScript(lua.BreakerResult)
	breakerStatusScript = redis.NewScript(lua.BreakerStatus)
)

// breakerMaxReason is the longest reason stored, in bytes.
const breakerMaxReason = 200

// Breaker configures the circuit breaker of a pacing key: a key whose
// provider refuses everything (bad credentials, a blocked account) or keeps
// throttling it at its floor rate is opened instead of trickling forever.
// Its records then wait (the pacer requeues them: never dropped, never
// counted as attempts) until a probe succeeds. The zero value means all
// defaults; each field's doc names its default.
//
// The breaker lives in Redis, in the hash "<prefix>:{<channel>:<key>}:breaker"
// ([bucket.Keys].Breaker), shared by every replica. No hash means closed.
// It expires max(1h, 2*MaxOpenFor) after its open period or probe lease
// ends, so a breaker nobody probes closes by itself.
//
// # States
//
//   - Closed: every send may go ([Adapter.BreakerAllow] allows).
//   - Open, for OpenFor after a halt, doubled for each failed probe in a
//     row up to MaxOpenFor: every send is refused.
//   - Half-open, once the open period is over: one owner (a replica) at a
//     time gets a probe lease of ProbeTTL and sends one record; the others
//     are refused. The probe's success closes the breaker; its halt reopens
//     it for twice as long. An owner that crashes mid-probe loses its lease
//     after ProbeTTL and another owner gets the probe.
type Breaker struct {
	// OpenFor is the first open period. From 1ms to 10 years. Default 30s.
	OpenFor time.Duration
	// MaxOpenFor caps the open period, which doubles after each failed
	// probe. From OpenFor to 10 years. Default 10m, or OpenFor if longer.
	MaxOpenFor time.Duration
	// ProbeTTL is the lifetime of a half-open probe lease: how long the
	// other replicas wait for a probe that never reports. From 1ms to 10
	// years. Default 30s.
	ProbeTTL time.Duration
	// FloorThrottles is the [Adapted].FloorStreak at which the pacer treats
	// a key as refusing everything ([Breaker.FloorTripped]): that many
	// counted throttles in a row at the floor rate. >= 0. Default 5.
	FloorThrottles int
}

// breakerArgs is a Breaker with its defaults filled in, in the scripts' units.
type breakerArgs struct {
	openMs, maxOpenMs, probeMs, idleMs int64
}

// Validate returns nil if b is usable, else every problem found, joined
// (errors.Join), each a *[FieldError] naming the field and wrapping
// [ErrInvalidBreaker], such as "bucket: invalid breaker: open for -1s must
// be in [1ms, 87600h0m0s]" (Field "OpenFor").
func (b Breaker) Validate() error {
	_, err := b.args()
	return err
}

func (b Breaker) args() (breakerArgs, error) {
	var errs []error // every problem, joined
	period := func(field, name string, d, def time.Duration) time.Duration {
		if d == 0 {
			d = def
		}
		if d < time.Millisecond || d > adaptMaxPeriod {
			errs = append(errs, fieldErr(field, fmt.Errorf("%w: %s %v must be in [%v, %v]", ErrInvalidBreaker, name, d, time.Millisecond, adaptMaxPeriod)))
		}
		return d
	}
	open := period("OpenFor", "open for", b.OpenFor, 30*time.Second)
	maxOpen := period("MaxOpenFor", "max open for", b.MaxOpenFor, max(10*time.Minute, open))
	if len(errs) == 0 && maxOpen < open {
		errs = append(errs, fieldErr("MaxOpenFor", fmt.Errorf("%w: max open for %v must be >= open for %v", ErrInvalidBreaker, maxOpen, open)))
	}
	probe := period("ProbeTTL", "probe ttl", b.ProbeTTL, 30*time.Second)
	if b.FloorThrottles < 0 {
		errs = append(errs, fieldErr("FloorThrottles", fmt.Errorf("%w: floor throttles %d must be >= 0", ErrInvalidBreaker, b.FloorThrottles)))
	}
	if len(errs) > 0 {
		return breakerArgs{}, errors.Join(errs...)
	}
	return breakerArgs{
		openMs:    roundUp(open, time.Millisecond),
		maxOpenMs: roundUp(maxOpen, time.Millisecond),
		probeMs:   roundUp(probe, time.Millisecond),
		idleMs:    roundUp(max(adaptMinIdle, 2*maxOpen), time.Millisecond),
	}, nil
}

// FloorTripped reports whether a, the reply of [Adapter.Throttled], shows
// the key throttled at its floor often enough in a row (a.FloorStreak >=
// b.FloorThrottles, default 5) that the pacer should open its breaker with
// [Adapter.BreakerResult](ok false). Reporting it again while the breaker
// is open changes nothing.
func (b Breaker) FloorTripped(a Adapted) bool {
	n := b.FloorThrottles
	if n == 0 {
		n = 5
	}
	return a.FloorStreak >= n
}

// BreakerState is the state of a pacing key's breaker.
type BreakerState int

// The breaker states; see [Breaker].
const (
	BreakerClosed BreakerState = iota
	BreakerOpen
	BreakerHalfOpen
)

// String returns "closed", "open" or "half-open".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("BreakerState(%d)", int(s))
}

// BreakerAllow asks the breaker of (channel, key) whether owner (a name
// unique to the calling replica, such as host and pid) may send.
//
// Closed: allowed. Open: refused, and wait is the open period left.
// Half-open: allowed with probe set if no other owner holds a live probe
// lease; the lease, granted for b.ProbeTTL, is not renewed by asking again.
// The owner must then report the probe's outcome with
// [Adapter.BreakerResult]. While another owner's lease is live, refused
// with wait the lease left (its result may close the breaker sooner). A
// refused record is to be requeued, not counted as an attempt.
//
// BreakerAllow returns, without calling Redis, an error wrapping
// [ErrInvalidBreaker] if b is invalid or owner is empty. Other errors wrap
// the Redis error. It is one Lua script on the Redis clock, safe for
// concurrent use by any number of replicas.
func (l *Adapter) BreakerAllow(ctx context.Context, channel, key string, b Breaker, owner string) (allowed, probe bool, wait time.Duration, err error) {
	p, err := b.args()
	if err != nil {
		return false, false, 0, err
	}
	if owner == "" {
		return false, false, 0, fmt.Errorf("%w: owner must not be empty", ErrInvalidBreaker)
	}
	bk := l.keys.Breaker(channel, key)
	v, err := breakerAllowScript.Run(ctx, l.rdb, []string{bk}, owner, p.probeMs, p.idleMs).Result()
	if err != nil {
		return false, false, 0, fmt.Errorf("adapt: breaker allow %q: %w", bk, err)
	}
	var r [4]int64
	if !wire.Ints(v, r[:]) || r[0] < 0 || r[0] > 1 || r[1] < 0 || r[1] > r[0] || r[2] < 0 ||
		(r[0] == 1) == (r[2] > 0) || r[3] < 0 || r[3] > 2 || (r[1] == 1) != (r[0] == 1 && r[3] == 2) {
		return false, false, 0, fmt.Errorf("adapt: breaker allow %q: unexpected reply %s", bk, wire.Describe(v))
	}
	return r[0] == 1, r[1] == 1, wire.Duration(r[2], time.Microsecond), nil
}

// BreakerResult reports the outcome of a send for (channel, key) to its
// breaker and returns the state after it. ok is true for a success, false
// for a halt: the provider refuses everything from this key (credentials,
// account blocked), or [Breaker.FloorTripped]. reason (such as "halt:401"
// or "throttled at floor") is kept for [Adapter.BreakerStatus], cut to 200
// bytes; it must not hold secrets or recipients.
//
// A halt opens a closed breaker for b.OpenFor, and reopens a half-open one
// (the probe failed) for twice its last open period, at most b.MaxOpenFor.
// A success closes a half-open breaker. While the breaker is open, results
// come from sends that left before it opened and change nothing, and a
// success on a closed breaker changes nothing either, so calling it after
// every send is harmless; the pacer must call it after a probe.
//
// BreakerResult returns, without calling Redis, an error wrapping
// [ErrInvalidBreaker] if b is invalid. Other errors wrap the Redis error.
// It is safe for concurrent use.
func (l *Adapter) BreakerResult(ctx context.Context, channel, key string, b Breaker, ok bool, reason string) (BreakerState, error) {
	p, err := b.args()
	if err != nil {
		return 0, err
	}
	okArg := "0"
	if ok {
		okArg, reason = "1", ""
	}
	if len(reason) > breakerMaxReason {
		reason = strings.ToValidUTF8(reason[:breakerMaxReason], "")
	}
	bk := l.keys.Breaker(channel, key)
	v, err := breakerResultScript.Run(ctx, l.rdb, []string{bk}, okArg, p.openMs, p.maxOpenMs, p.idleMs, reason).Result()
	if err != nil {
		return 0, fmt.Errorf("adapt: breaker result %q: %w", bk, err)
	}
	var r [3]int64
	if !wire.Ints(v, r[:]) || r[0] < 0 || r[0] > 2 || r[1] < 0 || r[2] < 0 || (r[0] == 0) != (r[1] == 0) ||
		(r[0] == 1) != (r[2] > 0) || (!ok && r[0] != 1) {
		return 0, fmt.Errorf("adapt: breaker result %q: unexpected reply %s", bk, wire.Describe(v))
	}
	return BreakerState(r[0]), nil
}

// breakerCloseScript deletes a breaker hash: a closed breaker has none
// (breaker_result.lua closes with DEL). A script, as every call of the
// package is: the client it is given runs scripts only.
var breakerCloseScript = redis.NewScript("return redis.call('DEL', KEYS[1])")

// BreakerClose closes the breaker of (channel, key) whatever its state,
// for when the cause of the halt that opened it is gone (the key's
// credential was replaced): the key's messages go again at once instead of
// at the next half-open probe. Errors wrap the Redis error. It is safe for
// concurrent use.
func (l *Adapter) BreakerClose(ctx context.Context, channel, key string) error {
	bk := l.keys.Breaker(channel, key)
	if err := breakerCloseScript.Run(ctx, l.rdb, []string{bk}).Err(); err != nil {
		return fmt.Errorf("adapt: breaker close %q: %w", bk, err)
	}
	return nil
}

// BreakerStatus is a read-only view of one breaker, for `pacer status`.
type BreakerStatus struct {
	State BreakerState
	// OpenLeft is the time left of the open period, to the microsecond;
	// 0 unless State is BreakerOpen.
	OpenLeft time.Duration
	// Reason is the reason given to the halt that opened the breaker; ""
	// when closed.
	Reason string
	// Opens is the number of opens in a row (the first halt, then each
	// failed probe); 0 when closed.
	Opens int
	// Prober is the owner holding a live half-open probe lease, and
	// ProbeLeft the time left of that lease; "" and 0 when none.
	Prober    string
	ProbeLeft time.Duration
}

// BreakerStatus reads the breaker of (channel, key) without changing it.
// A key with no breaker state (or a corrupt one) is closed. Errors wrap the
// Redis error. BreakerStatus is safe for concurrent use.
func (l *Adapter) BreakerStatus(ctx context.Context, channel, key string) (BreakerStatus, error) {
	bk := l.keys.Breaker(channel, key)
	v, err := breakerStatusScript.Run(ctx, l.rdb, []string{bk}).Result()
	return parseBreakerStatus(bk, v, err)
}

// parseBreakerStatus checks breaker_status.lua's reply v (or err) on the
// breaker key bk.
func parseBreakerStatus(bk string, v any, err error) (BreakerStatus, error) {
	if err != nil {
		return BreakerStatus{}, fmt.Errorf("adapt: breaker status %q: %w", bk, err)
	}
	var r [4]int64
	var prober, reason string
	a, ok := v.([]any)
	ok = ok && len(a) == 6 && wire.Ints(a[:4], r[:])
	if ok {
		prober, ok = a[4].(string)
	}
	if ok {
		reason, ok = a[5].(string)
	}
	if !ok || r[0] < 0 || r[0] > 2 || r[1] < 0 || r[2] < 0 || r[3] < 0 || (r[0] == 0) != (r[1] == 0) ||
		(r[0] == 1) != (r[2] > 0) || (prober == "") != (r[3] == 0) {
		return BreakerStatus{}, fmt.Errorf("adapt: breaker status %q: unexpected reply %s", bk, wire.Describe(v))
	}
	return BreakerStatus{
		State:     BreakerState(r[0]),
		OpenLeft:  wire.Duration(r[2], time.Microsecond),
		Reason:    reason,
		Opens:     int(min(r[1], math.MaxInt32)),
		Prober:    prober,
		ProbeLeft: wire.Duration(r[3], time.Microsecond),
	}, nil
}

// Snapshot is everything `pacer status --channel C --key K` shows about
// one pacing key.
type Snapshot struct {
	// Adapted is the adaptive state, as from [Adapter.Adapted]; its
	// CooldownLeft is the key's cooldown.
	Adapted Adapted
	// Limit is the limit the pacer takes tokens under: Adapted.Limit(ceiling).
	Limit bucket.Limit
	// Tokens is the bucket's tokens now under Limit, as from [bucket.Limiter.State].
	Tokens float64
	// Breaker is the breaker's state, as from [Adapter.BreakerStatus].
	Breaker BreakerStatus
}

// Snapshot reads the adaptive state, bucket, cooldown and breaker of
// (channel, key) without changing them, in three scripts (so not at one
// instant). Errors are those of [Adapter.Adapted], [bucket.Limiter.State] and
// [Adapter.BreakerStatus]. Snapshot is safe for concurrent use.
func (l *Adapter) Snapshot(ctx context.Context, channel, key string, ceiling bucket.Limit, a AIMD) (Snapshot, error) {
	ad, err := l.Adapted(ctx, channel, key, ceiling, a)
	if err != nil {
		return Snapshot{}, err
	}
	lim := ad.Limit(ceiling)
	st, err := l.bucket.State(ctx, channel, key, lim)
	if err != nil {
		return Snapshot{}, err
	}
	br, err := l.BreakerStatus(ctx, channel, key)
	if err != nil {
		return Snapshot{}, err
	}
	return Snapshot{Adapted: ad, Limit: lim, Tokens: st.Tokens, Breaker: br}, nil
}
