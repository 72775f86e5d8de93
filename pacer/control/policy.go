package control

import (
	"context"
	"fmt"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
)

// Policy answers each pacing key's limits and adaptation settings. The
// consumer asks it when a key is first seen and then at most once per
// second while the key sends, so a policy change reaches every
// replica within about a second without touching the loop. Implementations
// must be safe for concurrent use; an error keeps the key's last policy.
type Policy interface {
	KeyPolicy(ctx context.Context, key string) (KeyPolicy, error)
}

// KeyPolicy is one pacing key's policy.
type KeyPolicy struct {
	Limit          bucket.Limit  // the key's ceiling: rate in msgs/s and burst; the AIMD never goes above it
	RecipientLimit bucket.Limit  // a second bucket per (key, recipient); zero = none
	AIMD           adapt.AIMD    // adaptation on throttles; zero fields mean bucket's defaults
	Breaker        adapt.Breaker // breaker on halts; zero fields mean bucket's defaults
}

// Validate reports the first reason kp cannot pace a key (an error naming
// the field), or nil.
func (kp KeyPolicy) Validate() error {
	if err := kp.Limit.Validate(); err != nil {
		return fmt.Errorf("Limit: %w", err)
	}
	if kp.RecipientLimit != (bucket.Limit{}) {
		if err := kp.RecipientLimit.Validate(); err != nil {
			return fmt.Errorf("RecipientLimit: %w", err)
		}
	}
	if err := kp.AIMD.Validate(kp.Limit); err != nil {
		return err
	}
	return kp.Breaker.Validate()
}

// StaticPolicy gives every key the same policy: the channel's configured
// one, what the consumer uses when it is given no Policy.
type StaticPolicy KeyPolicy

// KeyPolicy returns s for every key; it never fails.
func (s StaticPolicy) KeyPolicy(context.Context, string) (KeyPolicy, error) { return KeyPolicy(s), nil }

// LimitStore answers the limit set at run time for one pacing key;
// *[Store] implements it.
type LimitStore interface {
	Limit(ctx context.Context, channel, key string) (KeyLimit, bool, error)
}

// OverridePolicy is a [Policy]: Base for every key, with the limit an
// operator set for the key (`pacer limit set`) as its ceiling when there is
// one. Burst 0 in the stored limit means Base's burst; an AIMD floor above
// a lowered rate is lowered to it. One Redis read per key per refresh (at
// most once per second per key and replica).
type OverridePolicy struct {
	Base    KeyPolicy
	Channel string
	Store   LimitStore
}

// KeyPolicy returns key's policy; the store's error when it cannot be read
// (the consumer then keeps the key's last policy).
func (o OverridePolicy) KeyPolicy(ctx context.Context, key string) (KeyPolicy, error) {
	l, ok, err := o.Store.Limit(ctx, o.Channel, key)
	if err != nil || !ok {
		return o.Base, err
	}
	kp := o.Base
	kp.Limit = bucket.Limit{PerSecond: l.PerSecond, Burst: l.Burst}
	if kp.Limit.Burst == 0 {
		kp.Limit.Burst = o.Base.Limit.Burst
	}
	if kp.AIMD.Floor > l.PerSecond {
		kp.AIMD.Floor = l.PerSecond
	}
	return kp, nil
}

// PairThrottle returns what a pair-scoped throttle of a key of policy pol
// with the provider's hint (its Retry-After; 0 if none) sets through
// adapt.Adapter.PairThrottled: the pair's first cooldown base (the hint,
// or one token interval of the recipient bucket, at least a second, at
// most maxCooldown; later ones a minute or more, adapt.PairAgain),
// maxCooldown (pol's MaxCooldown), and the pair's rate after its first
// throttle in msgs/s (the configured recipient rate, else one message per
// base; halved by each later throttle). The pacer's answer path (package
// keypace) and the status webhooks' (package webhook) both use it.
func (pol KeyPolicy) PairThrottle(hint time.Duration) (base, maxCooldown time.Duration, rate float64) {
	base = max(hint, time.Second)
	if rl := pol.RecipientLimit; rl.PerSecond > 0 {
		base = max(base, time.Duration(float64(time.Second)/rl.PerSecond))
	}
	_, maxCooldown = pol.AIMD.CooldownBounds()
	base = min(base, maxCooldown)
	rate = 1 / base.Seconds()
	if rl := pol.RecipientLimit; rl.PerSecond > 0 {
		rate = min(rate, rl.PerSecond)
	}
	return base, maxCooldown, rate
}
