// Package bucket is a token bucket per pacing key, kept in Redis so that
// every pacer replica shares it, plus an in-process stand-in ([Local]) for
// when Redis is unreachable. Its subpackages hold the rest of a pacing
// key's state in Redis: adapt (AIMD and the breaker), ledger (the
// idempotency ledger) and window (a sliding-window quota); [Keys] names
// every key of all of them.
//
// A bucket holds up to [Limit].Burst tokens and refills at
// [Limit].PerSecond tokens per second; one message costs one token unless a
// send costs more. All maths runs inside one Lua script per call (package
// lua), on the Redis server's clock (TIME), so replicas with skewed clocks
// still share one bucket and concurrent calls never race. A key-wide
// cooldown ([Limiter.Cooldown], for a provider's Retry-After) refuses every
// call until it ends.
//
// # Which call
//
//   - [Limiter.Reserve] grants the next free slot, up to a maximum wait, and
//     says when it starts: sleep once, then send. This is the pacer's path:
//     waiters queue in Redis, not in a polling loop, and wake one slot apart.
//     A slot further away than the maximum wait is refused without changing
//     anything, and the record is requeued. A maximum wait of 0 takes only
//     tokens that are there now.
//   - [Limiter.Lease] grants up to n slots in one call, spent locally one
//     after the other ([Lease.Slot]), so at high per-key rates Redis sees
//     one call per n messages. Slots not used lapse unless given back with
//     [Limiter.Return] before they start.
//   - [Dispenser] shares the leases of one pacing key among the goroutines
//     of a process: Next is a drop-in for Reserve at a fraction of a Redis
//     call per message (BENCHMARKS.md, "Accuracy").
//   - [Limiter.ReserveMulti] takes several buckets of one message at once,
//     all or nothing: a WhatsApp phone number and the number->recipient
//     pair, or an FCM project and device. The extra buckets are sub-buckets
//     of the pacing key ([Keys.SubBucket]), in its Redis Cluster slot.
//   - [Local] has the same methods on in-process buckets at a share of each
//     limit, for when Redis is unreachable and the operator chose to keep
//     sending (PACER_REDIS_FAILURE=local) rather than stop.
//
// # Redis keys
//
// [Keys] names them all. The bucket hash holds utokens, the tokens at the
// time stamp in millionths of a token, and ts_us, the stamp in
// microseconds of Redis TIME, both as decimal integers. utokens is negative
// while slots granted ahead (by Reserve or Lease) have not been refilled
// yet: the bucket is in debt, by at most the tokens the longest maximum
// wait refills (and never more than 10^9 tokens). The hash expires after
// the time the bucket needs to refill to Burst (at least from empty, plus
// 1 ms), so an idle bucket disappears only when it would be full anyway,
// and a slow bucket (0.1 token/s) never loses an unfinished refill to its
// TTL. A missing or corrupt hash (wrong type, a field missing, not a finite
// number, ts_us < 0, a debt beyond 10^9 tokens) reads as a full bucket. The
// cooldown key holds the cooldown's end in µs of Redis TIME; its TTL only
// cleans it up: its value decides.
//
// # Maths and clock
//
// Each call refills floor((now - ts_us) * PerSecond) millionths, capped at
// Burst (so lowering a limit below the tokens held clamps at once), where
// now is Redis TIME read inside the script. That refill is written once in
// Lua (lua/refill.lua, spliced into every script that reads a bucket) and
// once in Go (refill.go, for [Local] and the slots of a [Lease]). Integer
// costs are thus exact, a wait or slot is rounded up to the next
// microsecond (never to 0), and the refill loses less than a millionth of
// a token per grant. Thirty idle days at 10^12 tokens/s refill 2.6*10^24
// millionths, well inside a Lua number, and are capped at Burst. If the
// Redis clock steps back (a failover to a server with a slower clock),
// stored state is ahead of now: it gets no refill, so no tokens appear
// from the step, and the next call re-stamps it to now, so the bucket does
// not stall until the clock catches up.
//
// A slot is an instant on the Redis clock. Replies give it as a delay from
// the script's now; this package turns it into the local clock by adding
// it to the time the reply arrived, which is later than the script ran, so
// local slots are never early. Sent at their slots, messages conform to the
// bucket: in any window of T seconds at most Burst + PerSecond * T tokens.
// A message sent later than its slot (a slow provider call) may bunch with
// the next one; the pacer sends at the slot.
//
// Scripts reply with integers only: Redis truncates a Lua float to an
// integer on the wire. They need Redis 5 or later (effects replication of
// scripts that read TIME) or a compatible server; tests run them on
// redis-server (single node and a three-master Redis Cluster) and on
// miniredis.
//
// # Scripts and NOSCRIPT
//
// Call [Limiter.Load] at start-up. Every call runs EVALSHA and falls back
// to EVAL when Redis lost its script cache (SCRIPT FLUSH, a restart, a
// failover): the call that meets NOSCRIPT still succeeds.
package bucket

import (
	"context"
	"fmt"
	"time"

	"github.com/pacerhq/pacer/internal/wire"
	"github.com/pacerhq/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// One redis.Script per script: Run sends EVALSHA and falls back to EVAL
// when the server does not know the script yet.
var (
	stateScript       = redis.NewScript(lua.State)
	cooldownScript    = redis.NewScript(lua.Cooldown)
	reserveScript     = redis.NewScript(lua.Reserve)
	leaseReturnScript = redis.NewScript(lua.LeaseReturn)
)

// limiterScripts are the scripts of [Limiter.Load], by name.
var limiterScripts = []struct {
	name   string
	script *redis.Script
}{
	{"state", stateScript},
	{"cooldown", cooldownScript},
	{"reserve", reserveScript},
	{"lease_return", leaseReturnScript},
}

// Config configures a [Limiter]. The zero value means all defaults.
type Config struct {
	// Prefix starts every Redis key, before ":{channel:key}:...".
	// Default [DefaultPrefix], "pacer".
	Prefix string
}

// Limiter takes tokens from the Redis buckets of many pacing keys. It keeps
// no state of its own besides its configuration: every replica's Limiter
// sees the same buckets. A Limiter is safe for concurrent use.
type Limiter struct {
	rdb  redis.Scripter
	keys Keys
}

// New returns a Limiter that runs its scripts on rdb: a *redis.Client
// (single node, or Sentinel through redis.NewFailoverClient),
// *redis.ClusterClient, *redis.Ring or any redis.UniversalClient. It does
// not contact Redis; call [Limiter.Load] to check the connection and load
// the scripts up front.
func New(rdb redis.Scripter, cfg Config) *Limiter {
	return &Limiter{rdb: rdb, keys: NewKeys(cfg.Prefix)}
}

// Keys returns the names of the Redis keys this Limiter uses. Build the
// adapter and the ledger of the same pacing keys from it, so that they read
// this Limiter's cooldowns.
func (l *Limiter) Keys() Keys { return l.keys }

// Load loads every script into Redis's script cache (SCRIPT LOAD; on a
// Cluster, into every master), so that later calls need only EVALSHA. Call
// it at start-up; it also serves as a readiness check, since it fails when
// Redis cannot run scripts. It returns the first error, wrapped with the
// script's name.
func (l *Limiter) Load(ctx context.Context) error {
	for _, s := range limiterScripts {
		if err := s.script.Load(ctx, l.rdb).Err(); err != nil {
			return fmt.Errorf("bucket: load %s script: %w", s.name, err)
		}
	}
	return nil
}

// Cooldown makes (channel, key) refuse every Reserve, Lease and
// multi-bucket call for at least d, rounded up to the millisecond: it sets
// the cooldown to d unless a longer one is already set, which it keeps.
// d <= 0 does nothing and does not call Redis. The check and the write are
// one Lua script, so concurrent calls keep the longest cooldown. Errors wrap
// the Redis error. Cooldown is safe for concurrent use.
func (l *Limiter) Cooldown(ctx context.Context, channel, key string, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	ck := l.keys.Cooldown(channel, key)
	ms := cooldownMS(d)
	v, err := cooldownScript.Run(ctx, l.rdb, []string{ck}, ms).Result()
	if err != nil {
		return fmt.Errorf("bucket: cooldown %q: %w", ck, err)
	}
	if left, ok := v.(int64); !ok || left < ms {
		return fmt.Errorf("bucket: cooldown %q: unexpected reply %s", ck, wire.Describe(v))
	}
	return nil
}

// cooldownMS is d > 0 in milliseconds, rounded up without overflowing near
// the longest Duration.
func cooldownMS(d time.Duration) int64 {
	ms := d / time.Millisecond
	if d%time.Millisecond != 0 {
		ms++
	}
	return int64(ms)
}

// State is a read-only view of one bucket, for `pacer status`.
type State struct {
	// Tokens is the number of tokens in the bucket now, at most Burst,
	// with a resolution of 10^-6 token. It is negative while the bucket is
	// in debt (slots granted ahead by Reserve or Lease that have not been
	// refilled yet). A bucket never used (or expired) reads as full.
	Tokens float64
	// CooldownLeft is the time left of the key's cooldown, to the
	// millisecond; 0 when there is none.
	CooldownLeft time.Duration
}

// State reads the bucket and cooldown of (channel, key) under lim without
// changing them. Tokens are computed on the Redis clock with the same
// refill maths as [Limiter.Reserve]. State returns an error wrapping
// [ErrInvalidLimit], without calling Redis, if lim is invalid; other errors
// wrap the Redis error. State is safe for concurrent use.
func (l *Limiter) State(ctx context.Context, channel, key string, lim Limit) (State, error) {
	if err := lim.Validate(); err != nil {
		return State{}, err
	}
	bk := l.keys.Bucket(channel, key)
	v, err := stateScript.Run(ctx, l.rdb, []string{bk, l.keys.Cooldown(channel, key)},
		wire.Rate(lim.PerSecond), lim.Burst).Result()
	if err != nil {
		return State{}, fmt.Errorf("bucket: state %q: %w", bk, err)
	}
	var r [2]int64
	if !wire.Ints(v, r[:]) || r[0] < -maxDebtU || r[0] > int64(lim.Burst)*1e6 || r[1] < 0 {
		return State{}, fmt.Errorf("bucket: state %q: unexpected reply %s", bk, wire.Describe(v))
	}
	return State{
		Tokens:       float64(r[0]) / 1e6,
		CooldownLeft: wire.Duration(r[1], time.Millisecond),
	}, nil
}
