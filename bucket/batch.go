package bucket

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Item is one pacing key of [Limiter.ReserveMany].
type Item struct {
	Channel, Key string
	Limit        Limit
	// Cost is the tokens to take, 1 to Limit.Burst.
	Cost int
	// MaxWait is the latest slot to accept, as for [Limiter.Reserve]; 0
	// takes only tokens that are there now, like [Limiter.Take].
	MaxWait time.Duration
}

// ReserveMany is [Limiter.Reserve] for many pacing keys in one round trip:
// one pipeline of EVALSHA, one per item, each atomic on its own (items are
// independent; on a Redis Cluster the pipeline is split per master). The
// i-th Reservation answers items[i].
//
// A pipeline cannot fall back to EVAL when Redis has lost its scripts
// (SCRIPT FLUSH, a restart, a failover to a replica that never loaded
// them): the items that met NOSCRIPT did not run, so ReserveMany loads the
// script again (on every master of a Cluster) and sends them once more, in
// one more round trip. The caller never sees NOSCRIPT unless the reload
// itself fails. Call [Limiter.Load] at start-up so that the first pipeline
// does not pay for it.
//
// It returns an error wrapping [ErrInvalidLimit], without calling Redis, if
// any item has an invalid limit or cost. If Redis fails some items, the
// error joins their errors (each naming the item's index and bucket key),
// their Reservations are zero (not OK, Wait 0), and the other items'
// Reservations stand: their slots are taken. With no items it returns nil,
// nil. ReserveMany is safe for concurrent use.
func (l *Limiter) ReserveMany(ctx context.Context, items []Item) ([]Reservation, error) {
	if len(items) == 0 {
		return nil, nil
	}
	calls := make([]scriptCall, len(items))
	for i, it := range items {
		keys, args, err := l.multiCall(it.Channel, it.Key, []Request{{Limit: it.Limit, Cost: it.Cost}}, 1, it.MaxWait)
		if err != nil {
			return nil, fmt.Errorf("%w (item %d)", err, i)
		}
		calls[i] = scriptCall{keys: keys, args: args}
	}
	l.runMany(ctx, reserveScript, calls)
	out := make([]Reservation, len(items))
	var errs []error
	for i, c := range calls {
		if c.err != nil {
			errs = append(errs, fmt.Errorf("bucket: reserve item %d %q: %w", i, c.keys[0], c.err))
			continue
		}
		rep, ok := parseReserve(c.val, 1, waitUS(items[i].MaxWait), items[i].Limit.Burst)
		if !ok {
			errs = append(errs, fmt.Errorf("bucket: reserve item %d %q: unexpected reply %s", i, c.keys[0], describe(c.val)))
			continue
		}
		out[i] = rep.reservation(c.recv)
	}
	return out, errors.Join(errs...)
}

// scriptCall is one script call of a pipeline, and its outcome.
type scriptCall struct {
	keys []string
	args []any
	val  any
	err  error
	recv time.Time // when the reply arrived
}

// runMany runs script once per call, pipelined, filling in each call's
// outcome. Calls that meet NOSCRIPT are retried once, after SCRIPT LOAD.
// Without a pipelining client the calls run one by one through Script.Run.
func (l *Limiter) runMany(ctx context.Context, script *redis.Script, calls []scriptCall) {
	if l.pipe == nil {
		for i := range calls {
			c := &calls[i]
			c.val, c.err = script.Run(ctx, l.rdb, c.keys, c.args...).Result()
			c.recv = time.Now()
		}
		return
	}
	l.pipeline(ctx, script, calls, nil)
	var retry []int
	for i, c := range calls {
		if isNoScript(c.err) {
			retry = append(retry, i)
		}
	}
	if len(retry) == 0 {
		return
	}
	if err := l.loadScript(ctx, script); err != nil {
		for _, i := range retry {
			calls[i].err = fmt.Errorf("%w (reload: %w)", calls[i].err, err)
		}
		return
	}
	l.pipeline(ctx, script, calls, retry)
}

// pipeline sends EVALSHA for calls[only...] (all calls if only is nil) in
// one pipeline.
func (l *Limiter) pipeline(ctx context.Context, script *redis.Script, calls []scriptCall, only []int) {
	if only == nil {
		only = make([]int, len(calls))
		for i := range only {
			only[i] = i
		}
	}
	p := l.pipe.Pipeline()
	cmds := make([]*redis.Cmd, len(only))
	for j, i := range only {
		cmds[j] = script.EvalSha(ctx, p, calls[i].keys, calls[i].args...)
	}
	_, _ = p.Exec(ctx) // each command carries its own error
	recv := time.Now()
	for j, i := range only {
		calls[i].val, calls[i].err = cmds[j].Result()
		calls[i].recv = recv
	}
}

// loadScript loads script into every master, one reload at a time.
func (l *Limiter) loadScript(ctx context.Context, script *redis.Script) error {
	l.reload.Lock()
	defer l.reload.Unlock()
	return script.Load(ctx, l.rdb).Err()
}

func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}
