package adapt

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/wire"
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

// MaxRate is the highest ceiling [AIMD.Validate] accepts, in msgs/s: 10^15
// millionths, the most the scripts keep exactly. A per-key limit above it
// (pacer/control) would be refused by every pacer, so control refuses it
// when it is set.
const MaxRate = 1e9

// Bounds checked by [AIMD.Validate] and [Breaker.Validate]. The scripts
// keep rates in millionths of a message per second and times in
// microseconds, exact in a Lua number (float64) only below 2^53.
const (
	adaptMinRate   = 1e-6 // msgs/s: one millionth, the stored resolution
	adaptMaxRate   = MaxRate
	adaptMaxPeriod = 10 * 365 * 24 * time.Hour // longest Window, Coalesce, cooldown or open period
	adaptMinIdle   = time.Hour                 // shortest time before idle state expires
)

// AIMD configures the adaptive rate of a pacing key between a floor and the
// configured rate, the ceiling, against a provider that counts at its own
// ingress with a strict token bucket. The zero value means all defaults;
// each field's doc names its default. The defaults aim at the targets of
// the scenario bench (`make bench-pacing`; its figures are in
// BENCHMARKS.md): >= 97% of a provider limit equal to the ceiling with
// <= 0.5% throttled, and settling within 15 s to 90-100% of a hidden lower
// limit.
//
// The parts, each a field below:
//   - Headroom where it costs no rate ([AIMD].Jitter): the pacer takes
//     tokens with a burst smaller than the provider's by what Jitter lets
//     through, so that sends bunched on their way (connections, scheduler,
//     network) still fit the provider's bucket. Only a burst of 1 costs
//     rate, the least that keeps slots Jitter apart.
//   - A lone throttle cuts nothing ([AIMD].Persist): it only sets the
//     cooldown (one token interval by default). Only throttles that persist
//     lower the rate.
//   - A decrease goes to what the provider accepts: the sends every replica
//     saw accepted over the throttle episode (from the throttle that began
//     it, a refill pause included), per second ([Adapter.ThrottledAfter]),
//     once the episode lasts [AIMD].MinEpisode, estimate the capacity of a
//     provider that keeps refusing, and the rate goes to [AIMD].Backoff of that estimate,
//     cutting at most to [AIMD].Decrease of the rate at once. An estimate
//     within -20%..+25% of the last one meets the same capacity: the two
//     are averaged (the replicas' reports arrive up to a second late).
//     An episode whose refusals are 10% of its requests or fewer lowers a
//     capacity found by Backoff at most, and the rate goes to it, or to
//     Backoff of the rate less the refusals per second if that is higher:
//     a provider that refused so few was not saturated, and what it
//     accepted is what the pacer sent, short of its rate after a cut (the
//     pause, the slots taken anew), as the replicas reported it (late).
//     Throttles that persist while the rate is below the estimate cut
//     nothing: they come from the provider's bucket, emptied moments ago
//     by a probe or bunched sends, and the refill pause (below) is the
//     remedy, not a rate under the capacity; such an estimate more than
//     1.25 times the capacity found raises it to the rate at most.
//   - Probing up starts gently and accelerates ([AIMD].Factor, Step,
//     Accelerate, Window): the increase doubles with each clean window in a
//     row, so a rate cut by a passing dip is back at its ceiling in seconds,
//     and the next throttle stops the acceleration. A rate below the last
//     estimated capacity returns to it after one clean window. A capacity
//     found is probed rarely: at or above it, the first increase after a
//     throttle waits 4 windows (the rate cruises there), and each probe
//     step needs 90% of its rate accepted over the window less a quarter
//     of a second (below it, less a second) and doubles the next one only once
//     the sends accepted over the window average halfway from the capacity
//     to the rate, so a probe does not climb far past what the replicas
//     really send.
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
// [Adapted.Limit]: bucket.Limit{PerSecond: adapted rate, Burst: the ceiling's
// burst scaled by the same ratio}.
type AIMD struct {
	// Decrease is the deepest single decrease, as a factor of the rate, in
	// (0, 1): however few messages the provider seems to accept, one
	// decrease leaves at least Decrease * rate. Default 0.8.
	Decrease float64
	// Backoff is the fraction of the estimated capacity a decrease goes to,
	// in (0, 1]: room below it for the probe to climb through before it
	// meets the limit again. Default 0.95.
	Backoff float64
	// Persist is how close a counted throttle must follow the one before it
	// for throttles to count as persistent and lower the rate; a throttle
	// later than that is a lone one (a refusal at the edge of the provider's
	// burst) and only sets the cooldown, unless a capacity has been found:
	// then it lowers the capacity by one probe step if the rate is at or
	// above it, never below what the provider accepted since the last
	// throttle, per second, when that lasted 2 * Persist or more with the
	// pacer busy (which raises it too), takes a rate above it there and
	// pauses as a decrease does. From 1ms to 10 years. Default 4 token
	// intervals at the ceiling (4 / ceiling s), at least 2s.
	Persist time.Duration
	// MinEpisode is the shortest throttle episode (from the throttle that
	// began it) whose accepted sends estimate the provider's capacity: in
	// a shorter one, one report more or less per replica moves the
	// estimate by 20% and more, so a persistent throttle there is counted
	// and the episode goes on, unless its refusals are a fifth of its
	// requests or more (the rate is 1.25 times the capacity or more: the
	// cut is Decrease's whatever the error, but a probe above a capacity
	// found is cut no lower than Backoff of that capacity). From 1ms to
	// Persist; default Persist / 2.
	MinEpisode time.Duration
	// Floor is the lowest rate in messages per second: > 0 (at least 10^-6,
	// the stored resolution) and <= the ceiling. Default 1, or the ceiling
	// if that is lower.
	Floor float64
	// Window is how long a key must go without a counted throttle, from
	// the end of its cooldown or from its last increase, before
	// [Adapter.Recover] raises its rate. From 1ms to 10 years. Default 2s
	// (the pacer reads the state about once a second per replica).
	Window time.Duration
	// Step, when > 0 and Factor is 0, makes the first increase after a
	// throttle additive: Step messages per second. Default 0 (Factor).
	Step float64
	// Factor makes the first increase after a throttle multiplicative: the
	// rate is multiplied by Factor. A number > 1; default 1.02 when Step is
	// 0, else 0 (Step). Values in (0, 1] are invalid.
	Factor float64
	// Accelerate multiplies each increase in a row by this over the one
	// before, in [1, 1000]: with the defaults a rate rises by 2%, 4%, 8%, ...
	// per clean window until a throttle, which starts over at Factor.
	// 1 keeps the increase constant (classic AIMD). Default 2.
	Accelerate float64
	// NoRefillPause turns off the pause after a decrease (or a persistent
	// throttle below the estimated capacity). By default it sets a
	// cooldown until the provider has earned the burst the pacer takes at
	// the new rate (the ceiling's Burst scaled by rate / ceiling, at least
	// one token: Burst / ceiling s, 125ms at 80/s burst 10): a provider
	// that kept refusing has spent its burst, and sends at once, even below
	// its rate, would meet its edge again. Earning its whole burst back
	// would cost that many sends below the capacity at every cut.
	NoRefillPause bool
	// Jitter is how much sooner than its slot a send may reach the
	// provider, relative to the sends before it, without being refused by a
	// provider whose bucket is exactly the ceiling: the pacing headroom
	// [Adapted.Limit] leaves. From 0 (no headroom) to 1s. Default 25ms. A
	// negative value means 0.
	Jitter time.Duration
	// Coalesce is how long after a counted throttle further throttles are
	// taken as replies to the same burst of in-flight requests: they set
	// the cooldown but do not lower the rate again (they count for the
	// estimate). The cooldown a throttle sets extends this too, since
	// nothing new is sent during it. From 1ns (rounded up to the
	// microsecond) to 10 years. Default 500ms, about a round trip to a
	// distant provider.
	Coalesce time.Duration
	// MinCooldown and MaxCooldown clamp the provider's hint (Retry-After)
	// into the cooldown a throttle sets; a hint <= 0 means MinCooldown.
	// Both from 1ms to 10 years, MinCooldown <= MaxCooldown, rounded up to
	// the millisecond. Default for MinCooldown: one token interval at the
	// ceiling (1 / ceiling s) within [10ms, 1s], enough for the provider's
	// bucket to earn the token it lacked ([AIMD.CooldownFor], which knows no
	// ceiling, uses 1s), and never above MaxCooldown; for MaxCooldown 1h (or
	// MinCooldown if that is higher).
	MinCooldown, MaxCooldown time.Duration
	// ServerErrors is how many server errors (HTTP 5xx answers, reported
	// by [Adapter.ServerError]) of a key within ServerErrorWindow lower its
	// rate, once, by ServerErrorDecrease: a provider that answers 5xx in
	// bursts is overloaded, and FCM asks senders to slow down then
	// (https://firebase.google.com/docs/cloud-messaging/scale-fcm). At
	// least 1; 0 means the default 20; a negative value turns the cut off
	// (5xx answers are then retried and nothing else).
	ServerErrors int
	// ServerErrorWindow is the window ServerErrors counts in, from the
	// first error after the last window or cut. From 1ms to 10 years;
	// default 10s.
	ServerErrorWindow time.Duration
	// ServerErrorDecrease multiplies the rate at a burst of server errors,
	// in (0, 1), never below Floor: a mild cut, since a 5xx is not a rate
	// limit. Default 0.9.
	ServerErrorDecrease float64
}

// aimdArgs is an AIMD with its defaults filled in for one ceiling, in the
// scripts' units.
type aimdArgs struct {
	ceilU, floorU, stepU int64   // millionths of a message per second
	decrease, factor     float64 // factor 0: additive increase
	backoff, accel       float64
	windowUs, coalesceUs int64
	persistUs            int64
	minEpisodeUs         int64
	jitter               float64 // seconds
	minCooldown          time.Duration
	maxCooldown          time.Duration
	idleMs               int64
	storm                int     // ServerErrors; < 0: off
	stormWindowUs        int64   // ServerErrorWindow in µs
	stormDecrease        float64 // ServerErrorDecrease
}

// Validate returns nil if a applies to ceiling, else every problem found,
// joined (errors.Join), each a *[bucket.FieldError]: with
// Field "ceiling" and wrapping [bucket.ErrInvalidLimit] if ceiling itself is
// invalid ([bucket.Limit.Validate]), or naming the AIMD field and wrapping
// [ErrInvalidAIMD], such as "adapt: invalid aimd: floor 5 must be <=
// ceiling 2" (Field "Floor"). The ceiling's rate must also be in [10^-6,
// 10^9] messages per second (Field "ceiling"). MinCooldown above
// MaxCooldown is reported on MaxCooldown.
func (a AIMD) Validate(ceiling bucket.Limit) error {
	_, err := a.args(ceiling)
	return err
}

func (a AIMD) args(ceiling bucket.Limit) (aimdArgs, error) {
	// Every problem is collected: the checks that do not need the ceiling
	// run even when it is invalid.
	var errs []error
	bad := func(field, format string, v ...any) {
		errs = append(errs, fieldErr(field, fmt.Errorf("%w: "+format, append([]any{ErrInvalidAIMD}, v...)...)))
	}
	c := ceiling.PerSecond
	ceilOK := true
	if err := ceiling.Validate(); err != nil {
		errs, ceilOK = append(errs, fieldErr("ceiling", err)), false
	} else if c < adaptMinRate || c > adaptMaxRate {
		bad("ceiling", "ceiling %v msgs/s must be in [%v, %v]", c, adaptMinRate, adaptMaxRate)
		ceilOK = false
	}
	if !ceilOK {
		c = 1 // a stand-in for the defaults that follow the ceiling
	}
	p := aimdArgs{ceilU: int64(math.Round(c * 1e6))}

	p.decrease = a.Decrease
	if p.decrease == 0 {
		p.decrease = 0.8
	}
	if !(p.decrease > 0 && p.decrease < 1) { // also NaN
		bad("Decrease", "decrease %v must be in (0, 1)", a.Decrease)
	}
	p.backoff = a.Backoff
	if p.backoff == 0 {
		p.backoff = 0.95
	}
	if !(p.backoff > 0 && p.backoff <= 1) {
		bad("Backoff", "backoff %v must be in (0, 1]", a.Backoff)
	}
	p.accel = a.Accelerate
	if p.accel == 0 {
		p.accel = 2
	}
	if !(p.accel >= 1 && p.accel <= 1000) {
		bad("Accelerate", "accelerate %v must be in [1, 1000]", a.Accelerate)
	}
	if !(a.Jitter <= time.Second) {
		bad("Jitter", "jitter %v must be <= 1s", a.Jitter)
	}
	p.jitter = max(a.Jitter, 0).Seconds()
	if a.Jitter == 0 {
		p.jitter = defaultJitter.Seconds()
	}

	floor := a.Floor
	if floor == 0 {
		floor = min(1, c)
	}
	switch {
	case !(floor >= adaptMinRate): // also NaN and negative
		bad("Floor", "floor %v must be >= %v", a.Floor, adaptMinRate)
	case ceilOK && floor > c:
		bad("Floor", "floor %v must be <= ceiling %v", floor, c)
	}
	p.floorU = min(max(1, int64(math.Round(floor*1e6))), p.ceilU)

	switch {
	case a.Factor == 0 && a.Step == 0:
		p.factor, p.stepU = 1.02, 1
	case a.Factor == 0:
		step := a.Step
		if !(step > 0) || math.IsInf(step, 1) {
			bad("Step", "step %v must be finite and > 0", a.Step)
		} else {
			p.stepU = max(1, int64(math.Round(min(step, adaptMaxRate)*1e6)))
		}
	case a.Factor > 1 && !math.IsInf(a.Factor, 1):
		p.factor, p.stepU = a.Factor, 1
	default:
		bad("Factor", "factor %v must be 0 or a finite number > 1", a.Factor)
	}

	period := func(field, name string, d, def, least time.Duration) time.Duration {
		d, err := adaptPeriod(field, name, d, def, least)
		if err != nil {
			errs = append(errs, err)
		}
		return d
	}
	window := period("Window", "window", a.Window, 2*time.Second, time.Millisecond)
	coalesce := period("Coalesce", "coalesce", a.Coalesce, 500*time.Millisecond, time.Nanosecond)
	interval := time.Duration(min(1/c, adaptMaxPeriod.Seconds()) * float64(time.Second)) // one token at the ceiling
	persist := period("Persist", "persist", a.Persist, min(max(4*interval, 2*time.Second), adaptMaxPeriod), time.Millisecond)
	p.windowUs, p.coalesceUs = roundUp(window, time.Microsecond), roundUp(coalesce, time.Microsecond)
	p.persistUs = roundUp(persist, time.Microsecond)
	minEp := period("MinEpisode", "minimum episode", a.MinEpisode, persist/2, time.Millisecond)
	if minEp > persist {
		bad("MinEpisode", "minimum episode %v must be <= Persist (%v)", minEp, persist)
	}
	p.minEpisodeUs = roundUp(minEp, time.Microsecond)
	p.idleMs = roundUp(max(4*window, 4*persist, adaptMinIdle), time.Millisecond)
	p.storm = a.ServerErrors
	if p.storm == 0 {
		p.storm = defaultServerErrors
	}
	p.stormWindowUs = roundUp(period("ServerErrorWindow", "server error window", a.ServerErrorWindow, 10*time.Second, time.Millisecond), time.Microsecond)
	p.stormDecrease = a.ServerErrorDecrease
	if p.stormDecrease == 0 {
		p.stormDecrease = 0.9
	}
	if !(p.stormDecrease > 0 && p.stormDecrease < 1) {
		bad("ServerErrorDecrease", "server error decrease %v must be in (0, 1)", a.ServerErrorDecrease)
	}

	var err error
	if p.minCooldown, p.maxCooldown, err = a.cooldownsAt(min(max(interval, 10*time.Millisecond), time.Second)); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return aimdArgs{}, errors.Join(errs...)
	}
	return p, nil
}

// pauseTokens is the pause_tokens of aimd_throttle.lua for a and ceiling.
func pauseTokens(a AIMD, ceiling bucket.Limit) int {
	if a.NoRefillPause {
		return 0
	}
	return ceiling.Burst
}

// pacedU is paced (msgs/s) in millionths for aimd_throttle.lua, 0 when
// unknown, NaN or not positive.
func pacedU(paced float64) int64 {
	if !(paced > 0) {
		return 0
	}
	return int64(math.Round(min(paced, adaptMaxRate) * 1e6))
}

// defaultJitter is the default [AIMD].Jitter.
const defaultJitter = 25 * time.Millisecond

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

// cooldowns returns MinCooldown and MaxCooldown with their defaults, 1s
// for MinCooldown.
func (a AIMD) cooldowns() (lo, hi time.Duration, err error) {
	return a.cooldownsAt(time.Second)
}

// cooldownsAt returns MinCooldown and MaxCooldown with their defaults,
// loDef for MinCooldown.
func (a AIMD) cooldownsAt(loDef time.Duration) (lo, hi time.Duration, err error) {
	hiDef := time.Hour
	if a.MaxCooldown > 0 {
		loDef = min(loDef, a.MaxCooldown)
	}
	if a.MinCooldown > 0 {
		hiDef = max(hiDef, a.MinCooldown)
	}
	hi, hiErr := adaptPeriod("MaxCooldown", "max cooldown", a.MaxCooldown, hiDef, time.Millisecond)
	lo, loErr := adaptPeriod("MinCooldown", "min cooldown", a.MinCooldown, loDef, time.Millisecond)
	if a.MinCooldown == 0 && hiErr != nil {
		loErr = nil // its default follows the bad MaxCooldown: one problem
	}
	if err := errors.Join(hiErr, loErr); err != nil {
		return 0, 0, err
	}
	if lo > hi {
		return 0, 0, fieldErr("MaxCooldown", fmt.Errorf("%w: min cooldown %v must be <= max cooldown %v", ErrInvalidAIMD, lo, hi))
	}
	return lo, hi, nil
}

// PersistFor returns [AIMD].Persist as a throttle of a key of ceiling
// ceiling uses it, its default filled in (4 token intervals at the
// ceiling, at least 2s), rounded up to the microsecond; an error as
// [AIMD.Validate]'s when a does not apply to ceiling.
func (a AIMD) PersistFor(ceiling bucket.Limit) (time.Duration, error) {
	p, err := a.args(ceiling)
	if err != nil {
		return 0, err
	}
	return time.Duration(p.persistUs) * time.Microsecond, nil
}

// CooldownBounds returns MinCooldown and MaxCooldown with their defaults
// as [AIMD.CooldownFor] knows them (no ceiling: MinCooldown 1s), or 1s and
// 1h if they are invalid.
func (a AIMD) CooldownBounds() (lo, hi time.Duration) {
	lo, hi, err := a.cooldowns()
	if err != nil {
		return time.Second, time.Hour
	}
	return lo, hi
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
	// CooldownLeft is the time left of the key's cooldown ([bucket.Limiter.Cooldown]
	// and throttles share it), rounded up to the millisecond; 0 when none.
	CooldownLeft time.Duration
	// FloorStreak is the number of counted throttles in a row that found
	// the key already at its floor: throttles coalesced into one count once,
	// and an increase resets it to 0. The pacer opens the key's breaker when
	// it reaches [Breaker].FloorThrottles (see [Breaker.FloorTripped]).
	FloorStreak int
	// SinceDecrease is how long before the call the key's rate was last
	// lowered (by any replica, on the Redis clock), rounded down to the
	// microsecond; -1 when no decrease is recorded (no adaptive state). A
	// decrease clears the slots granted ahead at the old rate, so a replica
	// that learns of it at a refresh gives up only the slots granted
	// before it: those granted since are the new schedule.
	SinceDecrease time.Duration

	jitter float64 // seconds: the headroom Limit leaves, from [AIMD].Jitter

	// The flags last, together: a pacer keeps one Adapted per active key
	// (48 bytes; 56 with the flags between the 8-byte fields).

	// AtFloor reports that Rate is at the floor: throttles no longer lower it.
	AtFloor bool
	// Decreased reports that this call lowered Rate (a counted throttle not
	// already at the floor). Only [Adapter.Throttled] sets it.
	Decreased bool
	// Increased reports that this call raised Rate (a clean window had
	// passed). Only [Adapter.Recover] sets it.
	Increased bool
}

// Limit returns the limit under which the pacer takes tokens for a key with
// adapted state a and configured limit ceiling (the provider's limit): the
// adapted limit r = a.Rate (at most ceiling.PerSecond), b =
// ceiling.Burst * r / ceiling.PerSecond rounded down and at least 1, less
// the headroom of the [AIMD].Jitter j that a was read with.
//
// Sends paced at (r, b - d) that reach the provider up to j early relative
// to each other still fit its bucket (r, b) when d >= r * j, so Limit takes
// d = ceil(r * j) from the burst, at most half of it, which costs no rate.
// When that is not enough and a slot interval is longer than j (r * j < 1:
// low rates, burst 1), slots move apart by what is left, r*j - d tokens,
// but by at most [maxJitterCost] of the rate: rate r / (1 + min(r*j - d,
// maxJitterCost)). Jitter beyond that, or of more than one slot interval
// on top of half the burst, is left to the lone-throttle rule (a rate cut
// there would cost more than the throttles it saves: 20/s burst 1 paced
// 25ms further apart ran at 13.3/s). So 80/s burst 10 with j = 25ms paces
// at 80/s burst 8, 0.5/s burst 1 at 0.4938/s, 20/s burst 1 at 19.51/s, and
// 1,000/s burst 10 at 1,000/s burst 5.
//
// It returns ceiling itself when a.Rate is 0 (the zero Adapted) and, with
// no headroom (a zero jitter), when a.Rate is not below
// ceiling.PerSecond. For a ceiling valid with an [AIMD], the result passes
// [bucket.Limit.Validate].
func (a Adapted) Limit(ceiling bucket.Limit) bucket.Limit {
	if !(a.Rate > 0) {
		return ceiling
	}
	r, b := ceiling.PerSecond, ceiling.Burst
	if a.Rate < r {
		r = a.Rate
		b = max(int(float64(ceiling.Burst)*(a.Rate/ceiling.PerSecond)), 1)
	}
	x := r * a.jitter // tokens that jitter can bunch
	if !(x > 0) {
		return bucket.Limit{PerSecond: r, Burst: b}
	}
	d := int(min(math.Ceil(x), float64(b/2)))
	if float64(d) >= x || x >= 1 {
		return bucket.Limit{PerSecond: r, Burst: b - d}
	}
	return bucket.Limit{PerSecond: r / (1 + min(x-float64(d), maxJitterCost)), Burst: b - d}
}

// maxJitterCost is the most of a key's rate [Adapted.Limit] gives up for
// jitter headroom (a burst of 1): 2.5%, so a key still paces at 97.5% of
// its limit, within the pacing target of 97% or more (see [AIMD]).
const maxJitterCost = 0.025

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
	return l.ThrottledAfter(ctx, channel, key, ceiling, a, hint, 0, 0)
}

// ThrottledAfter is [Adapter.Throttled] that also reports accepted, the
// sends of (channel, key) the caller saw the provider accept since it last
// reported them (to ThrottledAfter or [Adapter.RecoverAfter]). Throttles
// that persist lower the rate to what every replica reported accepted over
// the throttle episode, per second: what a saturated provider really
// takes; an episode shorter than [AIMD].MinEpisode goes on instead, unless
// a fifth of its requests were refused. Without reports, the refusals per
// second stand in for it. A rate at or above a capacity found and cut
// without a measured estimate goes no lower than [AIMD].Backoff of that
// capacity. A lone throttle of a key with a capacity found corrects the
// capacity (see [AIMD].Persist). An accepted < 0 counts as 0.
//
// paced is the adapted rate (msgs/s) the caller knew when it started the
// throttled send's slot, 0 if unknown. A send paced above the current
// adapted rate was started by a replica that had not yet seen the last
// decrease (each learns of it within its next refresh, about a second): its
// throttle is the tail of the decrease already made, and it sets the
// cooldown without counting as a new one. Without it, every replica's
// slots granted at the old rate would cut the rate again.
func (l *Adapter) ThrottledAfter(ctx context.Context, channel, key string, ceiling bucket.Limit, a AIMD, hint time.Duration, accepted int, paced float64) (Adapted, error) {
	p, err := a.args(ceiling)
	if err != nil {
		return Adapted{}, err
	}
	cd := clampCooldown(hint, p.minCooldown, p.maxCooldown)
	ad, err := l.runAIMD(ctx, "throttled", aimdThrottleScript, channel, key, ceiling, p, -1, 0,
		wire.Rate(p.decrease), p.coalesceUs, int64(cd/time.Millisecond), p.idleMs, p.persistUs,
		wire.Rate(p.backoff), max(accepted, 0), pauseTokens(a, ceiling), pacedU(paced), p.minEpisodeUs,
		wire.Rate(p.factor), p.stepU)
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
	return l.recover(ctx, channel, key, ceiling, a, 0, false)
}

// RecoverAfter is [Adapter.Recover] for callers that report the sends they
// saw accepted, as [Adapter.ThrottledAfter] does (every replica, with
// every call, 0 when none). They estimate the provider's capacity and
// the key's achieved rate ([Adapter.Achieved]), and they gate the probe:
// only a rate in use is raised, when the sends accepted since the window
// began reach 90% of the rate over the window less a second (the reports
// of other replicas arrive up to a second late). A probe that outran what
// the replicas really send (slots granted ahead at an older rate, a key
// short of messages) would climb blind. A rate below the capacity the last
// decrease estimated returns to it after one clean window, and the probe
// starts over gently from there.
func (l *Adapter) RecoverAfter(ctx context.Context, channel, key string, ceiling bucket.Limit, a AIMD, accepted int) (Adapted, error) {
	return l.recover(ctx, channel, key, ceiling, a, accepted, true)
}

func (l *Adapter) recover(ctx context.Context, channel, key string, ceiling bucket.Limit, a AIMD, accepted int, inUse bool) (Adapted, error) {
	p, err := a.args(ceiling)
	if err != nil {
		return Adapted{}, err
	}
	return l.runAIMD(ctx, "recover", aimdRecoverScript, channel, key, ceiling, p, 0, 1, recoverArgs(p, accepted, inUse)...)
}

// recoverArgs are aimd_recover.lua's own arguments.
func recoverArgs(p aimdArgs, accepted int, inUse bool) []any {
	use := 0
	if inUse {
		use = 1
	}
	return []any{p.stepU, wire.Rate(p.factor), p.windowUs, p.idleMs, wire.Rate(p.accel), max(accepted, 0), use}
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
// and floor_u and whose reply is {urate, change, cooldown_ms, streak,
// since_us} with change in [minChange, maxChange] and since_us >= -1.
func (l *Adapter) runAIMD(ctx context.Context, op string, s *redis.Script, channel, key string,
	ceiling bucket.Limit, p aimdArgs, minChange, maxChange int64, args ...any) (Adapted, error) {
	keys, argv := l.aimdCall(channel, key, p, args)
	v, err := s.Run(ctx, l.rdb, keys, argv...).Result()
	return parseAIMD(op, keys[0], v, err, ceiling, p, minChange, maxChange)
}

// aimdCall returns the KEYS and ARGV of an aimd script's call for
// (channel, key) with p and the script's own args.
func (l *Adapter) aimdCall(channel, key string, p aimdArgs, args []any) ([]string, []any) {
	return []string{l.keys.AIMD(channel, key), l.keys.Cooldown(channel, key), l.keys.Bucket(channel, key), l.keys.Achieved(channel, key)},
		append([]any{p.ceilU, p.floorU}, args...)
}

// parseAIMD checks the reply v (or err) of an aimd script's call on the
// aimd key ak and returns its Adapted.
func parseAIMD(op, ak string, v any, err error, ceiling bucket.Limit, p aimdArgs, minChange, maxChange int64) (Adapted, error) {
	if err != nil {
		return Adapted{}, fmt.Errorf("adapt: %s %q: %w", op, ak, err)
	}
	var r [5]int64
	if !wire.Ints(v, r[:]) || r[0] < p.floorU || r[0] > p.ceilU || r[1] < minChange || r[1] > maxChange ||
		r[2] < 0 || r[3] < 0 || r[4] < -1 {
		return Adapted{}, fmt.Errorf("adapt: %s %q: unexpected reply %s", op, ak, wire.Describe(v))
	}
	rate := float64(r[0]) / 1e6
	if r[0] == p.ceilU {
		rate = ceiling.PerSecond // exact, not rounded to the millionth
	}
	ad := Adapted{
		Rate:          rate,
		Ceiling:       ceiling.PerSecond,
		AtFloor:       r[0] <= p.floorU,
		CooldownLeft:  wire.Duration(r[2], time.Millisecond),
		Decreased:     r[1] < 0,
		Increased:     r[1] > 0,
		FloorStreak:   int(min(r[3], math.MaxInt32)),
		SinceDecrease: -1,
		jitter:        p.jitter,
	}
	if r[4] >= 0 {
		ad.SinceDecrease = wire.Duration(r[4], time.Microsecond)
	}
	return ad, nil
}

var (
	aimdPairScript     = redis.NewScript(lua.AIMDPair)
	aimdPairsScript    = redis.NewScript(lua.AIMDPairs)
	aimdAchievedScript = redis.NewScript(lua.AIMDAchieved)
)

// Pair cooldowns, see [Adapter.PairThrottled].
const (
	// PairAgain is the least cooldown of a pair's throttles after its
	// first: a pair throttled once is throttled at most once more a minute.
	PairAgain = time.Minute
	// pairForget is how long a quiet pair keeps its count of throttles.
	pairForget = 10 * time.Minute
)

// Achieved is a pacing key's achieved rate, as [Adapter.Achieved] reads it.
type Achieved struct {
	// PerSecond is the accepted sends per second, summed over every
	// replica's reports, over the last window of at least 5 s; 0 unless
	// Known.
	PerSecond float64
	// Known is true when such a window has closed in the last 5 minutes.
	Known bool
	// WarmingUp is true while the replicas report the key but no full
	// window has closed since it became active (or since a window in which
	// it sat idle for over 5 s, which is no measure of its pace).
	WarmingUp bool
}

// Achieved returns the achieved rate of (channel, key) ([Adapter.RecoverAfter]
// and [Adapter.ThrottledAfter] report it): neither Known nor WarmingUp
// when no replica reported the key in the last 5 minutes. Errors wrap the
// Redis error.
func (l *Adapter) Achieved(ctx context.Context, channel, key string) (Achieved, error) {
	v, err := aimdAchievedScript.Run(ctx, l.rdb, []string{l.keys.Achieved(channel, key)}).Result()
	if err != nil {
		return Achieved{}, fmt.Errorf("adapt: achieved %q: %w", l.keys.Achieved(channel, key), err)
	}
	n, isInt := v.(int64)
	if !isInt || n < -2 {
		return Achieved{}, fmt.Errorf("adapt: achieved %q: unexpected reply %s", l.keys.Achieved(channel, key), wire.Describe(v))
	}
	switch n {
	case -1:
		return Achieved{}, nil
	case -2:
		return Achieved{WarmingUp: true}, nil
	}
	return Achieved{PerSecond: float64(n) / 1000, Known: true}, nil
}

// Pair is the shared state of one throttled pair (key, recipient).
type Pair struct {
	Left      time.Duration // cooldown left, >= 0, rounded up to the millisecond
	Rate      float64       // the pair's learned rate, msgs/s; 0: none
	Throttles int           // throttles counted since the pair was last quiet for 10 minutes
}

// PairMinRate is the least rate a pair's halving reaches: one message a
// minute, the pace its cooldowns allow anyway.
const PairMinRate = 1.0 / 60

// PairThrottled records that the provider throttled one pair of (channel,
// key): one recipient, named by sub (a hash of the address, never the
// address), as WhatsApp 131056 or a per-device limit does. It sets the
// pair's cooldown and learned rate in Redis, shared by every replica
// ([Adapter.Pairs]), and returns them with the number of throttles of the
// pair counted (a pair quiet for 10 minutes counts anew).
//
// The first throttle sets the cooldown base (the provider's hint, or the
// pair's token interval) and the pair's rate to rate (msgs/s, e.g. the
// provider's documented pair rate); each later one a cooldown of
// max([PairAgain], base) and half the rate, never below min(rate,
// [PairMinRate]), so that a pair is throttled at most once more a minute
// (retries further apart than WhatsApp's 4^X s for X <= 2) and, once the
// cooldown ends, its waiting messages go at the learned rate rather than
// at once into the provider's emptied pair bucket. Cooldowns are never
// above maxCooldown nor shortened, and do not grow further: the pair's
// provider bucket refills while it waits. The key's own rate and other
// recipients are untouched.
//
// It returns an error without calling Redis for an empty sub, base or
// maxCooldown outside [1ms, 10 years] with base <= maxCooldown, or a rate
// not in (0, 1e9]; other errors wrap the Redis error. PairThrottled is safe
// for concurrent use.
func (l *Adapter) PairThrottled(ctx context.Context, channel, key, sub string, base, maxCooldown time.Duration, rate float64) (Pair, error) {
	if sub == "" || base < time.Millisecond || base > maxCooldown || maxCooldown > adaptMaxPeriod || !(rate > 0 && rate <= adaptMaxRate) {
		return Pair{}, fmt.Errorf("%w: pair throttle: sub %q, base %v, max %v, rate %v", ErrInvalidAIMD, sub, base, maxCooldown, rate)
	}
	pk := l.keys.Pairs(channel, key)
	first := max(int64(math.Round(rate*1e6)), 1)
	least := min(first, int64(math.Round(PairMinRate*1e6)))
	v, err := aimdPairScript.Run(ctx, l.rdb, []string{pk}, sub, roundUp(base, time.Microsecond),
		roundUp(min(max(PairAgain, base), maxCooldown), time.Microsecond), roundUp(maxCooldown, time.Microsecond),
		roundUp(pairForget, time.Microsecond), first, least).Result()
	if err != nil {
		return Pair{}, fmt.Errorf("adapt: pair throttled %q: %w", pk, err)
	}
	var r [3]int64
	if !wire.Ints(v, r[:]) || r[0] < 1 || r[1] < 1 || r[2] < 1 {
		return Pair{}, fmt.Errorf("adapt: pair throttled %q: unexpected reply %s", pk, wire.Describe(v))
	}
	return Pair{Left: wire.Duration(r[0], time.Millisecond), Rate: float64(r[2]) / 1e6, Throttles: int(min(r[1], math.MaxInt32))}, nil
}

// Pairs returns the throttled pairs of (channel, key) set by
// [Adapter.PairThrottled], by sub: those in cooldown and those throttled in
// the last 10 minutes (with their learned rate; Throttles is not read and
// stays 0); an empty map when there are none. The pacer reads it about
// once a second per key it sends for. Errors wrap the Redis error.
func (l *Adapter) Pairs(ctx context.Context, channel, key string) (map[string]Pair, error) {
	pk := l.keys.Pairs(channel, key)
	v, err := aimdPairsScript.Run(ctx, l.rdb, []string{pk}, roundUp(pairForget, time.Microsecond)).Result()
	return parsePairs(pk, v, err)
}

// parsePairs checks aimd_pairs.lua's reply v (or err) on the pairs key pk.
func parsePairs(pk string, v any, err error) (map[string]Pair, error) {
	if err != nil {
		return nil, fmt.Errorf("adapt: pairs %q: %w", pk, err)
	}
	a, ok := v.([]any)
	if !ok || len(a)%3 != 0 {
		return nil, fmt.Errorf("adapt: pairs %q: unexpected reply %s", pk, wire.Describe(v))
	}
	out := make(map[string]Pair, len(a)/3)
	for i := 0; i < len(a); i += 3 {
		sub, ok1 := a[i].(string)
		ms, ok2 := a[i+1].(int64)
		ru, ok3 := a[i+2].(int64)
		if !ok1 || !ok2 || !ok3 || ms < 0 || ru < 0 {
			return nil, fmt.Errorf("adapt: pairs %q: unexpected reply %s", pk, wire.Describe(v))
		}
		out[sub] = Pair{Left: wire.Duration(ms, time.Millisecond), Rate: float64(ru) / 1e6}
	}
	return out, nil
}
