package adapt

import (
	"context"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/wire"
	"github.com/pacerhq/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// defaultServerErrors is the default [AIMD].ServerErrors.
const defaultServerErrors = 20

var aimdStormScript = redis.NewScript(lua.AIMDStorm)

// ServerError records that the provider answered a send of (channel, key)
// with a server error (HTTP 5xx), and returns the key's state after it.
// The errors of every replica count together in Redis, on the Redis
// clock: the [AIMD].ServerErrors-th within [AIMD].ServerErrorWindow
// multiplies the adapted rate by [AIMD].ServerErrorDecrease (never below
// the floor), as a decrease of the AIMD: Adapted.Decreased reports it, the
// next increase waits a clean window and starts gently, and the replicas
// drop the slots granted before it. The count then starts again, so a
// storm lowers the rate at most once per window. It sets no cooldown and
// leaves the capacity estimated from throttles alone.
//
// With ServerErrors < 0 it returns the zero Adapted without calling Redis.
// Errors are as for [Adapter.Throttled]. ServerError is safe for
// concurrent use.
func (l *Adapter) ServerError(ctx context.Context, channel, key string, ceiling bucket.Limit, a AIMD) (Adapted, error) {
	p, err := a.args(ceiling)
	if err != nil {
		return Adapted{}, err
	}
	if p.storm < 0 {
		return Adapted{}, nil
	}
	keys, argv := l.aimdCall(channel, key, p, []any{p.storm, p.stormWindowUs, wire.Rate(p.stormDecrease), p.idleMs})
	keys = append(keys, l.keys.ServerErrors(channel, key))
	v, err := aimdStormScript.Run(ctx, l.rdb, keys, argv...).Result()
	return parseAIMD("server error", keys[0], v, err, ceiling, p, -1, 0)
}
