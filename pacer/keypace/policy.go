package keypace

import (
	"context"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/pacer/control"
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

// The key's policy types are those of package control, which holds the
// live per-key limits that override them.
type (
	Policy       = control.Policy
	KeyPolicy    = control.KeyPolicy
	StaticPolicy = control.StaticPolicy
)
