package adapt

import (
	"context"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/wire"
	"github.com/redis/go-redis/v9"
)

// Refreshed is what [Adapter.Refresh] read of one pacing key: each part
// with its own error, as from the call it stands for.
type Refreshed struct {
	Adapted    Adapted // as from [Adapter.RecoverAfter]
	AdaptedErr error
	Breaker    BreakerStatus // as from [Adapter.BreakerStatus]
	BreakerErr error
	Pairs      map[string]Pair // as from [Adapter.Pairs]
	PairsErr   error
}

// pipeliner is a client that can send several commands in one round trip
// (*redis.Client, *redis.ClusterClient, *redis.Ring).
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// Refresh is [Adapter.RecoverAfter], [Adapter.BreakerStatus] and
// [Adapter.Pairs] of (channel, key) in one Redis round trip (a pipeline
// of the three scripts; under Redis Cluster the three keys share the
// pacing key's slot): what a replica reads of every key it sends for about
// once a second (every 100 ms while the key adapts). A script Redis does not have cached yet (NOSCRIPT) is run
// again on its own, which loads it; each part's error is its own. With a
// client that cannot pipeline, the three calls are made in turn. Refresh
// is safe for concurrent use.
func (l *Adapter) Refresh(ctx context.Context, channel, key string, ceiling bucket.Limit, a AIMD, accepted int) Refreshed {
	var out Refreshed
	pl, ok := l.rdb.(pipeliner)
	p, err := a.args(ceiling)
	if !ok || err != nil {
		out.Adapted, out.AdaptedErr = l.RecoverAfter(ctx, channel, key, ceiling, a, accepted)
		out.Breaker, out.BreakerErr = l.BreakerStatus(ctx, channel, key)
		out.Pairs, out.PairsErr = l.Pairs(ctx, channel, key)
		return out
	}
	rkeys, rargv := l.aimdCall(channel, key, p, recoverArgs(p, accepted, true))
	bk, pk := l.keys.Breaker(channel, key), l.keys.Pairs(channel, key)
	pairsArg := roundUp(pairForget, time.Microsecond)
	pipe := pl.Pipeline()
	rc := pipe.EvalSha(ctx, aimdRecoverScript.Hash(), rkeys, rargv...)
	bc := pipe.EvalSha(ctx, breakerStatusScript.Hash(), []string{bk})
	pc := pipe.EvalSha(ctx, aimdPairsScript.Hash(), []string{pk}, pairsArg)
	pipe.Exec(ctx) // each command carries its own error
	if wire.NoScript(rc.Err()) {
		rc = aimdRecoverScript.Run(ctx, l.rdb, rkeys, rargv...)
	}
	if wire.NoScript(bc.Err()) {
		bc = breakerStatusScript.Run(ctx, l.rdb, []string{bk})
	}
	if wire.NoScript(pc.Err()) {
		pc = aimdPairsScript.Run(ctx, l.rdb, []string{pk}, pairsArg)
	}
	v, err := rc.Result()
	out.Adapted, out.AdaptedErr = parseAIMD("recover", rkeys[0], v, err, ceiling, p, 0, 1)
	v, err = bc.Result()
	out.Breaker, out.BreakerErr = parseBreakerStatus(bk, v, err)
	v, err = pc.Result()
	out.Pairs, out.PairsErr = parsePairs(pk, v, err)
	return out
}
