package adapt

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/internal/wire"
	"github.com/pacerhq/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// ErrInvalidAIMD is returned, wrapped with what is wrong, for an [AIMD]
// that cannot be applied to a ceiling: see [AIMD.Validate]. Test for it
// with errors.Is.
var ErrInvalidAIMD = errors.New("adapt: invalid aimd")

var (
	aimdThrottleScript = redis.NewScript(lua.AIMDThrottle)
	aimdRecoverScript  = redis.NewScript(lua.AIMDRecover)
	aimdStateScript    = redis.NewScript(lua.AIMDState)
)

// Bounds checked by [AIMD.Validate] and [Breaker.Validate]. The scripts
// keep rates in millionths of a message per second and times in
// microseconds, exact in a Lua number (float64) only below 2^53.
const (
	adaptMinRate   = 1e-6                      // msgs/s: one millionth, the stored resolution
	adaptMaxRate   = 1e9                       // msgs/s: 10^15 millionths
	adaptMaxPeriod = 10 * 365 * 24 * time.Hour // longest Window, Coalesce, cooldown or open period
	adaptMinIdle   = time.Hour                 // shortest time before idle state expires
)

// AIMD configures the adaptive rate of a pacing key: additive (or
// multiplicative) increase, multiplicative decrease, between a floor and the
// configured rate, the ceiling. The zero value means all defaults; each
// field's doc names its default.
//
// The adapted rate lives in Redis, in the hash
// "<prefix>:{<channel>:<key>}:aimd" ([bucket.Keys].AIMD), so every replica
// shares it: a throttle seen by one replica slows them all. A key with no
// hash is at its ceiling. The hash expires max(4*Window, 1h) after its last
// write (counted from the end of a cooldown), so an idle key forgets its
// throttles and comes back at its ceiling; it is also deleted as soon as
// the rate is back at the ceiling.
//
// The pacer applies the adapted rate by taking tokens under
// [Adapted.Limit]: Limit{PerSecond: adapted rate, Burst: the ceiling's
// burst scaled by the same ratio}.
type AIMD struct {
	// Decrease is the factor applied to the rate on a throttle, in (0, 1).
	// Default 0.5: a throttle halves the rate.
	Decrease float64
	// Floor is the lowest rate in messages per second: > 0 (at least 10^-6,
	// the stored resolution) and <= the ceiling. Default 1, or the ceiling
	// if that is lower.
	Floor float64
	// Window is how long a key must go without a counted throttle, from
	// the end of its cooldown or from its last increase, before
	// [Adapter.Recover] raises its rate. From 1ms to 10 years. Default 60s.
	Window time.Duration
	// Step is the additive increase per clean window, in messages per
	// second, > 0. Default a tenth of the ceiling. Ignored when Factor > 1.
	Step float64
	// Factor, when > 1, makes the increase multiplicative: the rate is
	// multiplied by Factor per clean window instead of gaining Step.
	// Default 0 (additive). Values in (0, 1] are invalid.
	Factor float64
	// Coalesce is how long after a counted throttle further throttles are
	// taken as replies to the same burst of in-flight requests: they set
	// the cooldown but do not lower the rate again. The cooldown a throttle
	// sets extends this too, since nothing new is sent during it. From 1ns
	// (rounded up to the microsecond) to 10 years. Default 1s.
	Coalesce time.Duration
	// MinCooldown and MaxCooldown clamp the provider's hint (Retry-After)
	// into the cooldown a throttle sets; a hint <= 0 means MinCooldown.
	// Both from 1ms to 10 years, MinCooldown <= MaxCooldown, rounded up to
	// the millisecond. Default 1s (or MaxCooldown if that is lower) and 1h
	// (or MinCooldown if that is higher).
	MinCooldown, MaxCooldown time.Duration
}

// aimdArgs is an AIMD with its defaults filled in for one ceiling, in the
// scripts' units.
type aimdArgs struct {
	ceilU, floorU, stepU int64   // millionths of a message per second
	decrease, factor     float64 // factor 0: additive increase
	windowUs, coalesceUs int64
	minCooldown          time.Duration
	maxCooldown          time.Duration
	idleMs               int64
}

// Validate returns nil if a applies to ceiling, else a *[bucket.FieldError]: with
// Field "ceiling" and wrapping [bucket.ErrInvalidLimit] if ceiling itself is
// invalid ([bucket.Limit.Validate]), or naming the AIMD field and wrapping
// [ErrInvalidAIMD], such as "bucket: invalid aimd: floor 5 must be <=
// ceiling 2" (Field "Floor"). The ceiling's rate must also be in [10^-6,
// 10^9] messages per second (Field "ceiling"). MinCooldown above
// MaxCooldown is reported on MaxCooldown.
func (a AIMD) Validate(ceiling bucket.Limit) error {
	_, err := a.args(ceiling)
	return err
}

func (a AIMD) args(ceiling bucket.Limit) (aimdArgs, error) {
	if err := ceiling.Validate(); err != nil {
		return aimdArgs{}, fieldErr("ceiling", err)
	}
	c := ceiling.PerSecond
	bad := func(field, format string, v ...any) (aimdArgs, error) {
		return aimdArgs{}, fieldErr(field, fmt.Errorf("%w: "+format, append([]any{ErrInvalidAIMD}, v...)...))
	}
	if c < adaptMinRate || c > adaptMaxRate {
		return bad("ceiling", "ceiling %v msgs/s must be in [%v, %v]", c, adaptMinRate, adaptMaxRate)
	}
	p := aimdArgs{ceilU: int64(math.Round(c * 1e6))}

	p.decrease = a.Decrease
	if p.decrease == 0 {
		p.decrease = 0.5
	}
	if !(p.decrease > 0 && p.decrease < 1) { // also NaN
		return bad("Decrease", "decrease %v must be in (0, 1)", a.Decrease)
	}

	floor := a.Floor
	if floor == 0 {
		floor = min(1, c)
	}
	switch {
	case !(floor >= adaptMinRate): // also NaN and negative
		return bad("Floor", "floor %v must be >= %v", a.Floor, adaptMinRate)
	case floor > c:
		return bad("Floor", "floor %v must be <= ceiling %v", floor, c)
	}
	p.floorU = min(max(1, int64(math.Round(floor*1e6))), p.ceilU)

	switch {
	case a.Factor == 0:
		step := a.Step
		if step == 0 {
			step = c / 10
		}
		if !(step > 0) || math.IsInf(step, 1) {
			return bad("Step", "step %v must be finite and > 0", a.Step)
		}
		p.stepU = max(1, int64(math.Round(min(step, adaptMaxRate)*1e6)))
	case a.Factor > 1 && !math.IsInf(a.Factor, 1):
		p.factor, p.stepU = a.Factor, 1
	default:
		return bad("Factor", "factor %v must be 0 or a finite number > 1", a.Factor)
	}

	window, err := adaptPeriod("Window", "window", a.Window, 60*time.Second, time.Millisecond)
	if err != nil {
		return aimdArgs{}, err
	}
	coalesce, err := adaptPeriod("Coalesce", "coalesce", a.Coalesce, time.Second, time.Nanosecond)
	if err != nil {
		return aimdArgs{}, err
	}
	p.windowUs, p.coalesceUs = roundUp(window, time.Microsecond), roundUp(coalesce, time.Microsecond)
	p.idleMs = roundUp(max(4*window, adaptMinIdle), time.Millisecond)

	if p.minCooldown, p.maxCooldown, err = a.cooldowns(); err != nil {
		return aimdArgs{}, err
	}
	return p, nil
}

// adaptPeriod returns d, or def when d is 0, after checking that it is in
// [least, adaptMaxPeriod]. Its error is a *FieldError naming field and
// wrapping ErrInvalidAIMD.
func adaptPeriod(field, name string, d, def, least time.Duration) (time.Duration, error) {
	if d == 0 {
		d = def
	}
	if d < least || d > adaptMaxPeriod {
		return 0, fieldErr(field, fmt.Errorf("%w: %s %v must be in [%v, %v]", ErrInvalidAIMD, name, d, least, adaptMaxPeriod))
	}
	return d, nil
}

// cooldowns returns MinCooldown and MaxCooldown with their defaults.
func (a AIMD) cooldowns() (lo, hi time.Duration, err error) {
	loDef, hiDef := time.Second, time.Hour
	if a.MaxCooldown > 0 {
		loDef = min(loDef, a.MaxCooldown)
	}
	if a.MinCooldown > 0 {
		hiDef = max(hiDef, a.MinCooldown)
	}
	if hi, err = adaptPeriod("MaxCooldown", "max cooldown", a.MaxCooldown, hiDef, time.Millisecond); err != nil {
		return 0, 0, err
	}
	if lo, err = adaptPeriod("MinCooldown", "min cooldown", a.MinCooldown, loDef, time.Millisecond); err != nil {
		return 0, 0, err
	}
	if lo > hi {
		return 0, 0, fieldErr("MaxCooldown", fmt.Errorf("%w: min cooldown %v must be <= max cooldown %v", ErrInvalidAIMD, lo, hi))
	}
	return lo, hi, nil
}

// CooldownFor returns the cooldown that [Adapter.Throttled] sets for a
// provider's hint: hint clamped to [MinCooldown, MaxCooldown] (defaults
// filled in), MinCooldown when hint <= 0, rounded up to the millisecond.
// It returns 0 if MinCooldown or MaxCooldown is invalid ([AIMD.Validate]).
func (a AIMD) CooldownFor(hint time.Duration) time.Duration {
	lo, hi, err := a.cooldowns()
	if err != nil {
		return 0
	}
	return clampCooldown(hint, lo, hi)
}

// clampCooldown clamps hint to [lo, hi] and rounds it up to the millisecond.
func clampCooldown(hint, lo, hi time.Duration) time.Duration {
	d := min(max(hint, lo), hi)
	return time.Duration(roundUp(d, time.Millisecond)) * time.Millisecond
}

// roundUp returns d in units, rounded up, without overflowing near the
// longest Duration.
func roundUp(d, unit time.Duration) int64 {
	n := d / unit
	if d%unit > 0 {
		n++
	}
	return int64(n)
}

// Adapted is the adaptive state of one pacing key, as returned by
// [Adapter.Throttled], [Adapter.Recover] and [Adapter.Adapted].
type Adapted struct {
	// Rate is the adapted rate in messages per second, between the floor
	// and Ceiling, with a resolution of 10^-6; exactly Ceiling when the key
	// has no adaptive state.
	Rate float64
	// Ceiling is the configured rate the call was given, in messages per
	// second.
	Ceiling float64
	// AtFloor reports that Rate is at the floor: throttles no longer lower it.
	AtFloor bool
	// CooldownLeft is the time left of the key's cooldown ([bucket.Limiter.Cooldown]
	// and throttles share it), rounded up to the millisecond; 0 when none.
	CooldownLeft time.Duration
	// Decreased reports that this call lowered Rate (a counted throttle not
	// already at the floor). Only [Adapter.Throttled] sets it.
	Decreased bool
	// Increased reports that this call raised Rate (a clean window had
	// passed). Only [Adapter.Recover] sets it.
	Increased bool
	// FloorStreak is the number of counted throttles in a row that found
	// the key already at its floor: throttles coalesced into one count once,
	// and an increase resets it to 0. The pacer opens the key's breaker when
	// it reaches [Breaker].FloorThrottles (see [Breaker.FloorTripped]).
	FloorStreak int
}

// Limit returns the limit under which the pacer takes tokens for a key with
// adapted state a and configured limit ceiling: Limit{PerSecond: a.Rate,
// Burst: ceiling.Burst * a.Rate / ceiling.PerSecond rounded down, at least
// 1}. It returns ceiling itself when a.Rate is 0 (the zero Adapted) or not
// below ceiling.PerSecond. For a ceiling valid with an [AIMD], the result
// passes [bucket.Limit.Validate].
func (a Adapted) Limit(ceiling bucket.Limit) bucket.Limit {
	if !(a.Rate > 0) || a.Rate >= ceiling.PerSecond {
		return ceiling
	}
	burst := int(float64(ceiling.Burst) * (a.Rate / ceiling.PerSecond))
	return bucket.Limit{PerSecond: a.Rate, Burst: max(burst, 1)}
}

// Throttled records that the provider throttled a send for (channel, key)
// (HTTP 429 or its equivalent), with hint the delay it asked for (0 if
// none), and returns the state after the throttle.
//
// Throttled sets the key's cooldown (the one [bucket.Limiter.Reserve] honours) to
// [AIMD.CooldownFor](hint) unless a longer one is set already, which it
// keeps. Then, unless the throttle belongs to the burst of an earlier
// counted one (within a.Coalesce of it, or before the cooldown that one set
// ended), it multiplies the rate by a.Decrease, never below a.Floor, and
// restarts the clean window at the end of the cooldown: Adapted.Decreased
// reports it. A counted throttle that finds the key at its floor already
// adds one to Adapted.FloorStreak. All of it is one Lua script on the Redis
// clock, so throttles seen at once by many replicas count once.
//
// Throttled returns, without calling Redis, an error wrapping
// [bucket.ErrInvalidLimit] or [ErrInvalidAIMD] if a does not apply to ceiling
// ([AIMD.Validate]). Other errors wrap the Redis error. Throttled is safe
// for concurrent use.
func (l *Adapter) Throttled(ctx context.Context, channel, key string, ceiling bucket.Limit, a AIMD, hint time.Duration) (Adapted, error) {
	p, err := a.args(ceiling)
	if err != nil {
		return Adapted{}, err
	}
	cd := clampCooldown(hint, p.minCooldown, p.maxCooldown)
	ad, err := l.runAIMD(ctx, "throttled", aimdThrottleScript, channel, key, ceiling, p, -1, 0,
		wire.Rate(p.decrease), p.coalesceUs, int64(cd/time.Millisecond), p.idleMs)
	if err != nil {
		return Adapted{}, err
	}
	if ad.CooldownLeft < cd {
		return Adapted{}, fmt.Errorf("adapt: throttled %q: unexpected reply: cooldown left %v < %v",
			l.keys.AIMD(channel, key), ad.CooldownLeft, cd)
	}
	return ad, nil
}

// Recover tells the adaptive state of (channel, key) that sends succeed,
// and returns the state after the call. The pacer calls it after successful
// sends, at most about once per second per key: it is one cheap script that
// writes only when it raises the rate.
//
// If a full a.Window has passed since the end of the last counted
// throttle's cooldown, or since the last increase, Recover raises the rate
// by a.Step (or multiplies it by a.Factor), never above ceiling.PerSecond,
// and starts a new window: Adapted.Increased reports it, and
// Adapted.FloorStreak is back to 0. One call raises the rate once, however
// long the key was idle. A rate back at the ceiling deletes the key's
// adaptive state.
//
// Errors are as for [Adapter.Throttled]. Recover is safe for concurrent use.
func (l *Adapter) Recover(ctx context.Context, channel, key string, ceiling bucket.Limit, a AIMD) (Adapted, error) {
	p, err := a.args(ceiling)
	if err != nil {
		return Adapted{}, err
	}
	return l.runAIMD(ctx, "recover", aimdRecoverScript, channel, key, ceiling, p, 0, 1,
		p.stepU, wire.Rate(p.factor), p.windowUs, p.idleMs)
}

// Adapted returns the adaptive state of (channel, key) without changing
// it: Rate is ceiling.PerSecond when the key has no state, and a stored
// rate above a lowered ceiling reads as the ceiling. Each replica may
// cache the result for about a second.
//
// Errors are as for [Adapter.Throttled]. Adapted is safe for concurrent use.
func (l *Adapter) Adapted(ctx context.Context, channel, key string, ceiling bucket.Limit, a AIMD) (Adapted, error) {
	p, err := a.args(ceiling)
	if err != nil {
		return Adapted{}, err
	}
	return l.runAIMD(ctx, "adapted", aimdStateScript, channel, key, ceiling, p, 0, 0)
}

// runAIMD runs one of the aimd scripts, whose arguments start with ceil_u
// and floor_u and whose reply is {urate, change, cooldown_ms, streak} with
// change in [minChange, maxChange].
func (l *Adapter) runAIMD(ctx context.Context, op string, s *redis.Script, channel, key string,
	ceiling bucket.Limit, p aimdArgs, minChange, maxChange int64, args ...any) (Adapted, error) {
	ak := l.keys.AIMD(channel, key)
	v, err := s.Run(ctx, l.rdb, []string{ak, l.keys.Cooldown(channel, key)},
		append([]any{p.ceilU, p.floorU}, args...)...).Result()
	if err != nil {
		return Adapted{}, fmt.Errorf("adapt: %s %q: %w", op, ak, err)
	}
	var r [4]int64
	if !wire.Ints(v, r[:]) || r[0] < p.floorU || r[0] > p.ceilU || r[1] < minChange || r[1] > maxChange ||
		r[2] < 0 || r[3] < 0 {
		return Adapted{}, fmt.Errorf("adapt: %s %q: unexpected reply %s", op, ak, wire.Describe(v))
	}
	rate := float64(r[0]) / 1e6
	if r[0] == p.ceilU {
		rate = ceiling.PerSecond // exact, not rounded to the millionth
	}
	return Adapted{
		Rate:         rate,
		Ceiling:      ceiling.PerSecond,
		AtFloor:      r[0] <= p.floorU,
		CooldownLeft: wire.Duration(r[2], time.Millisecond),
		Decreased:    r[1] < 0,
		Increased:    r[1] > 0,
		FloorStreak:  int(min(r[3], math.MaxInt32)),
	}, nil
}
