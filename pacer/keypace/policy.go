package keypace

import (
	"context"
	"fmt"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
)

// Adapter is the shared adaptive state of pacing keys (AIMD rate, breaker);
// *adapt.Adapter implements it. Methods are safe for concurrent use.
type Adapter interface {
	// ThrottledAfter and RecoverAfter also report the sends of the key this
	// process saw accepted since it last reported them: the estimate of the
	// provider's capacity when throttles persist.
	ThrottledAfter(ctx context.Context, channel, key string, ceiling bucket.Limit, a adapt.AIMD, hint time.Duration, accepted int, paced float64) (adapt.Adapted, error)
	RecoverAfter(ctx context.Context, channel, key string, ceiling bucket.Limit, a adapt.AIMD, accepted int) (adapt.Adapted, error)
	// Adapted reads a key's adaptive state and cooldown without changing them.
	Adapted(ctx context.Context, channel, key string, ceiling bucket.Limit, a adapt.AIMD) (adapt.Adapted, error)
	// PairThrottled sets the shared cooldown of one pair (key, recipient)
	// and learned rate after a pair-scoped throttle; Pairs reads a key's
	// throttled pairs (see adapt.Adapter.PairThrottled).
	PairThrottled(ctx context.Context, channel, key, sub string, base, maxCooldown time.Duration, rate float64) (adapt.Pair, error)
	Pairs(ctx context.Context, channel, key string) (map[string]adapt.Pair, error)
	BreakerAllow(ctx context.Context, channel, key string, b adapt.Breaker, owner string) (allowed, probe bool, wait time.Duration, err error)
	BreakerResult(ctx context.Context, channel, key string, b adapt.Breaker, ok bool, reason string) (adapt.BreakerState, error)
	BreakerStatus(ctx context.Context, channel, key string) (adapt.BreakerStatus, error)
}

// refresher is an Adapter that reads what [Keys.limitFor] refreshes of a
// key (RecoverAfter, BreakerStatus and Pairs) in one Redis round trip, as
// [adapt.Adapter.Refresh] does.
type refresher interface {
	Refresh(ctx context.Context, channel, key string, ceiling bucket.Limit, a adapt.AIMD, accepted int) adapt.Refreshed
}

// Policy answers each pacing key's limits and adaptation settings. The
// pacer asks it when a key is first seen and then at most once per
// refreshEvery while the key sends, so a policy change reaches every
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
// one, the default when [Config.Policy] is nil.
type StaticPolicy KeyPolicy

// KeyPolicy returns s for every key; it never fails.
func (s StaticPolicy) KeyPolicy(context.Context, string) (KeyPolicy, error) { return KeyPolicy(s), nil }
