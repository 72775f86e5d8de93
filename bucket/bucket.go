// Package bucket is a token bucket per pacing key, kept in Redis so that
// every pacer replica shares it.
//
// A bucket holds up to [Limit].Burst tokens and refills at
// [Limit].PerSecond tokens per second; [Limiter.Take] removes tokens, one
// per message unless a send costs more. All maths runs inside one Lua script
// per call (package lua), on the Redis server's clock (TIME), so replicas
// with skewed clocks still share one bucket and concurrent calls never race.
// A key-wide cooldown ([Limiter.Cooldown], for a provider's Retry-After)
// refuses every Take until it ends.
//
// # Redis keys
//
// For channel "whatsapp" and pacing key "106540352242922", with the default
// prefix:
//
//	pacer:{whatsapp:106540352242922}:bucket    hash: utokens, ts_us
//	pacer:{whatsapp:106540352242922}:cooldown  string with a TTL
//
// The braces are a Redis Cluster hash tag: both keys of a pacing key live in
// one slot, as a script touching both requires (a "}" inside the channel or
// key ends the tag early, but both keys still share it). The bucket hash
// holds utokens, the tokens at the time stamp in millionths of a token, and
// ts_us, the stamp in microseconds of Redis TIME, both as decimal integers.
// It expires after the time the bucket needs to refill from empty
// (Burst / PerSecond, plus 1 ms), so an idle bucket disappears only when it
// would be full anyway. A missing or corrupt hash (wrong type, a field
// missing, not a finite number >= 0) reads as a full bucket. The cooldown
// key's TTL is the cooldown left; a cooldown key without a TTL was not
// written by this package and is ignored.
//
// # Maths and clock
//
// Each call refills floor((now - ts_us) * PerSecond) millionths, capped at
// Burst, where now is Redis TIME read inside the script. Integer costs are
// thus exact, a wait is rounded up to the next microsecond, and the
// refill loses less than a millionth of a token per grant. If the Redis
// clock steps back (a failover to a server with a slower clock), stored
// state is ahead of now: it gets no refill, so no tokens appear from the
// step, and the next call re-stamps it to now, so the bucket does not stall
// until the clock catches up.
//
// Scripts reply with integers only: Redis truncates a Lua float to an
// integer on the wire. They need Redis 5 or later (effects replication of
// scripts that read TIME) or a compatible server; tests run them on
// redis-server and on miniredis.
package bucket

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/pacerhq/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// One redis.Script per script: Run sends EVALSHA and falls back to EVAL
// when the server does not know the script yet.
var (
	takeScript     = redis.NewScript(lua.Take)
	stateScript    = redis.NewScript(lua.State)
	cooldownScript = redis.NewScript(lua.Cooldown)
)

const defaultPrefix = "pacer"

// Config configures a [Limiter]. The zero value means all defaults.
type Config struct {
	// Prefix starts every Redis key, before ":{channel:key}:...".
	// Default "pacer".
	Prefix string
}

// Limiter takes tokens from the Redis buckets of many pacing keys. It keeps
// no state of its own besides its configuration: every replica's Limiter
// sees the same buckets. A Limiter is safe for concurrent use.
type Limiter struct {
	rdb    redis.Scripter
	prefix string
}

// New returns a Limiter that runs its scripts on rdb: a *redis.Client,
// *redis.Ring or *redis.ClusterClient. It does not contact Redis; call
// [Limiter.Load] to check the connection and load the scripts up front.
func New(rdb redis.Scripter, cfg Config) *Limiter {
	if cfg.Prefix == "" {
		cfg.Prefix = defaultPrefix
	}
	return &Limiter{rdb: rdb, prefix: cfg.Prefix}
}

// BucketKey returns the Redis key of the bucket hash of one pacing key:
// "<prefix>:{<channel>:<key>}:bucket".
func (l *Limiter) BucketKey(channel, key string) string {
	return l.prefix + ":{" + channel + ":" + key + "}:bucket"
}

// CooldownKey returns the Redis key of the cooldown of one pacing key:
// "<prefix>:{<channel>:<key>}:cooldown", in the same Cluster slot as
// [Limiter.BucketKey].
func (l *Limiter) CooldownKey(channel, key string) string {
	return l.prefix + ":{" + channel + ":" + key + "}:cooldown"
}

// Load loads every script into Redis's script cache (SCRIPT LOAD), so that
// later calls need only EVALSHA. Call it at start-up; it also serves as a
// readiness check, since it fails when Redis cannot run scripts. It returns
// the first error, wrapped with the script's name.
func (l *Limiter) Load(ctx context.Context) error {
	for _, s := range []struct {
		name   string
		script *redis.Script
	}{
		{"take", takeScript},
		{"state", stateScript},
		{"cooldown", cooldownScript},
	} {
		if err := s.script.Load(ctx, l.rdb).Err(); err != nil {
			return fmt.Errorf("bucket: load %s script: %w", s.name, err)
		}
	}
	return nil
}

// Decision is the answer of [Limiter.Take].
type Decision struct {
	// Allowed reports whether cost tokens were taken. When false, nothing
	// was taken.
	Allowed bool
	// Remaining is the number of whole tokens in the bucket after the call,
	// from 0 to Burst (in cooldown too).
	Remaining int
	// Wait is 0 when allowed. When refused it is how long until cost tokens
	// will be there, or, if Cooldown, until the cooldown ends: wait that
	// long, then call Take again. It is exact to the microsecond
	// (millisecond for a cooldown) and rounded up, so it is never 0 for a
	// refusal.
	Wait time.Duration
	// Cooldown reports that the call was refused because the pacing key is
	// in cooldown (see [Limiter.Cooldown]), whatever the bucket holds.
	Cooldown bool
}

// Take tries to remove cost tokens from the bucket of (channel, key), which
// refills at lim.PerSecond tokens per second up to lim.Burst tokens.
//
// If the key is in cooldown, Take refuses with Decision.Cooldown set and
// Decision.Wait the cooldown left (measured on the Redis clock).
// Otherwise it takes cost tokens if the bucket holds them. If
// Decision.Allowed is false, nothing was taken and Decision.Wait is how long
// until cost tokens will be there: wait that long, then call Take again.
//
// A refusal changes nothing in Redis, except that a bucket stamped in the
// future (the Redis clock stepped back) is re-stamped to now with the tokens
// it had, so it never gains tokens from the step and never stalls until the
// clock catches up. Time is Redis server time (TIME), so all pacer replicas
// share one clock; the whole call is one Lua script, so concurrent calls are
// atomic.
//
// Take returns an error wrapping [ErrInvalidLimit], without calling Redis,
// if lim is invalid ([Limit.Validate]) or cost is not in [1, lim.Burst].
// Other errors wrap the Redis error. Take is safe for concurrent use.
func (l *Limiter) Take(ctx context.Context, channel, key string, lim Limit, cost int) (Decision, error) {
	if err := validateCost(lim, cost); err != nil {
		return Decision{}, err
	}
	bk := l.BucketKey(channel, key)
	v, err := takeScript.Run(ctx, l.rdb, []string{bk, l.CooldownKey(channel, key)},
		formatRate(lim.PerSecond), lim.Burst, cost).Result()
	if err != nil {
		return Decision{}, fmt.Errorf("bucket: take %q: %w", bk, err)
	}
	var r [4]int64
	if !ints(v, r[:]) || r[0] < 0 || r[0] > 1 || r[1] < 0 || r[1] > int64(lim.Burst) ||
		r[2] < 0 || r[3] < 0 || r[3] > 1 || (r[0] == 1) == (r[2] > 0) {
		return Decision{}, fmt.Errorf("bucket: take %q: unexpected reply %s", bk, describe(v))
	}
	return Decision{
		Allowed:   r[0] == 1,
		Remaining: int(r[1]),
		Wait:      duration(r[2], time.Microsecond),
		Cooldown:  r[3] == 1,
	}, nil
}

// Cooldown makes (channel, key) refuse every [Limiter.Take] for at least d,
// rounded up to the millisecond: it sets the cooldown to d unless a longer
// one is already set, which it keeps. d <= 0 does nothing and does not call
// Redis. The check and the write are one Lua script, so concurrent calls
// keep the longest cooldown. Errors wrap the Redis error. Cooldown is safe
// for concurrent use.
func (l *Limiter) Cooldown(ctx context.Context, channel, key string, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	ms := d / time.Millisecond
	if d%time.Millisecond != 0 {
		ms++ // round up without overflowing near the longest Duration
	}
	ck := l.CooldownKey(channel, key)
	v, err := cooldownScript.Run(ctx, l.rdb, []string{ck}, int64(ms)).Result()
	if err != nil {
		return fmt.Errorf("bucket: cooldown %q: %w", ck, err)
	}
	if left, ok := v.(int64); !ok || left < int64(ms) {
		return fmt.Errorf("bucket: cooldown %q: unexpected reply %s", ck, describe(v))
	}
	return nil
}

// State is a read-only view of one bucket, for `pacer status`.
type State struct {
	// Tokens is the number of tokens in the bucket now, from 0 to Burst,
	// with a resolution of 10^-6 token. A bucket never used (or expired)
	// reads as full.
	Tokens float64
	// CooldownLeft is the time left of the key's cooldown, to the
	// millisecond; 0 when there is none.
	CooldownLeft time.Duration
}

// State reads the bucket and cooldown of (channel, key) under lim without
// changing them. Tokens are computed on the Redis clock with the same
// refill maths as [Limiter.Take]. State returns an error wrapping
// [ErrInvalidLimit], without calling Redis, if lim is invalid; other errors
// wrap the Redis error. State is safe for concurrent use.
func (l *Limiter) State(ctx context.Context, channel, key string, lim Limit) (State, error) {
	if err := lim.Validate(); err != nil {
		return State{}, err
	}
	bk := l.BucketKey(channel, key)
	v, err := stateScript.Run(ctx, l.rdb, []string{bk, l.CooldownKey(channel, key)},
		formatRate(lim.PerSecond), lim.Burst).Result()
	if err != nil {
		return State{}, fmt.Errorf("bucket: state %q: %w", bk, err)
	}
	var r [2]int64
	if !ints(v, r[:]) || r[0] < 0 || r[0] > int64(lim.Burst)*1e6 || r[1] < 0 {
		return State{}, fmt.Errorf("bucket: state %q: unexpected reply %s", bk, describe(v))
	}
	return State{
		Tokens:       float64(r[0]) / 1e6,
		CooldownLeft: duration(r[1], time.Millisecond),
	}, nil
}

// formatRate writes a rate so that Lua's tonumber reads back the same
// float64: the shortest decimal that round-trips, without an exponent,
// which gopher-lua (miniredis) does not parse.
func formatRate(perSecond float64) string {
	return strconv.FormatFloat(perSecond, 'f', -1, 64)
}

// duration returns n units, saturating at the longest time.Duration (a
// cooldown of nearly 292 years would overflow it in microseconds).
func duration(n int64, unit time.Duration) time.Duration {
	if n > math.MaxInt64/int64(unit) {
		return math.MaxInt64
	}
	return time.Duration(n) * unit
}

// ints copies a script reply that is an array of len(dst) integers into dst.
// It reports false for any other shape.
func ints(v any, dst []int64) bool {
	a, ok := v.([]any)
	if !ok || len(a) != len(dst) {
		return false
	}
	for i, e := range a {
		n, ok := e.(int64)
		if !ok {
			return false
		}
		dst[i] = n
	}
	return true
}

// describe names a reply's shape for an error, without its contents beyond
// a short prefix.
func describe(v any) string {
	s := fmt.Sprintf("%T %v", v, v)
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return s
}
