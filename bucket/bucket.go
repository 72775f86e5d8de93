// Package bucket is a token bucket per pacing key, kept in Redis so that
// every pacer replica shares it, plus an in-process stand-in ([Local]) for
// when Redis is unreachable and a sliding-window counter for quotas.
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
//     anything, and the record is requeued.
//   - [Limiter.Lease] grants up to n slots in one call, spent locally one
//     after the other ([Lease.Slot]), so at high per-key rates Redis sees
//     one call per n messages. Slots not used lapse unless given back with
//     [Limiter.Return] before they start.
//   - [Dispenser] shares the leases of one pacing key among the goroutines
//     of a process: Next is a drop-in for Reserve at a fraction of a Redis
//     call per message (0.11 in the accuracy soak of BENCHMARKS.md).
//   - [Limiter.ReserveMulti] and [Limiter.TakeMulti] take several buckets of
//     one message at once, all or nothing: a WhatsApp phone number and the
//     number->recipient pair, or an FCM project and device. The extra
//     buckets are sub-buckets of the pacing key ([Limiter.SubBucketKey]), in
//     its Redis Cluster slot.
//   - [Limiter.ReserveMany] reserves for many pacing keys in one round trip
//     (a pipeline).
//   - [Limiter.Take] takes tokens only if they are there now (it is Reserve
//     with no wait, with the reply shape of the seed).
//   - [Limiter.Admit] counts events against a sliding-window quota
//     ([Window]), for ingestion limits per tenant or per IP.
//   - [Local] has the same methods on in-process buckets at a share of each
//     limit, for when Redis is unreachable and the operator chose to keep
//     sending (PACER_REDIS_FAILURE=local) rather than stop.
//
// # Redis keys
//
// For channel "whatsapp" and pacing key "106540352242922", with the default
// prefix:
//
//	pacer:{whatsapp:106540352242922}:bucket             hash: utokens, ts_us
//	pacer:{whatsapp:106540352242922}:cooldown           string: end in µs of Redis TIME
//	pacer:{whatsapp:106540352242922}:sub:<sub>:bucket   a sub-bucket, e.g. sub = recipient
//	pacer:{whatsapp:106540352242922}:sub:<sub>:cooldown its cooldown
//	pacer:{<scope>:<key>}:window                        hash: start_us, cur, prev (see Window)
//
// The braces are a Redis Cluster hash tag: every key of a pacing key lives
// in one slot, as a script touching several requires (a "}" inside the
// channel or key ends the tag early, but the keys still share it). The
// bucket hash holds utokens, the tokens at the time stamp in millionths of
// a token, and ts_us, the stamp in microseconds of Redis TIME, both as
// decimal integers. utokens is negative while slots granted ahead (by
// Reserve or Lease) have not been refilled yet: the bucket is in debt, by
// at most the tokens the longest maximum wait refills (and never more than
// 10^9 tokens). The hash expires after the time the bucket needs to refill
// to Burst (at least from empty, plus 1 ms), so an idle bucket disappears
// only when it would be full anyway, and a slow bucket (0.1 token/s) never
// loses an unfinished refill to its TTL. A missing or corrupt hash (wrong
// type, a field missing, not a finite number, ts_us < 0, a debt beyond 10^9
// tokens) reads as a full bucket. The cooldown key's TTL only cleans it up:
// its value, an absolute end on the Redis clock, decides.
//
// # Maths and clock
//
// Each call refills floor((now - ts_us) * PerSecond) millionths, capped at
// Burst (so lowering a limit below the tokens held clamps at once), where
// now is Redis TIME read inside the script. Integer costs are thus exact, a
// wait or slot is rounded up to the next microsecond (never to 0), and the
// refill loses less than a millionth of a token per grant. Thirty idle
// days at 10^12 tokens/s refill 2.6*10^24 millionths, well inside a Lua
// number, and are capped at Burst. If the Redis clock steps back (a
// failover to a server with a slower clock), stored state is ahead of now:
// it gets no refill, so no tokens appear from the step, and the next call
// re-stamps it to now, so the bucket does not stall until the clock
// catches up.
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
// Call [Limiter.Load] at start-up. A single call runs EVALSHA and falls back
// to EVAL when Redis lost its script cache (SCRIPT FLUSH, a restart, a
// failover): the call that meets NOSCRIPT still succeeds. A pipeline cannot
// fall back by itself, so [Limiter.ReserveMany] reloads the script (on
// every master of a Cluster) and retries the calls that met NOSCRIPT, once.
package bucket

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/pacerhq/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// One redis.Script per script: Run sends EVALSHA and falls back to EVAL
// when the server does not know the script yet.
var (
	takeScript        = redis.NewScript(lua.Take)
	stateScript       = redis.NewScript(lua.State)
	cooldownScript    = redis.NewScript(lua.Cooldown)
	reserveScript     = redis.NewScript(lua.Reserve)
	leaseReturnScript = redis.NewScript(lua.LeaseReturn)
	windowScript      = redis.NewScript(lua.Window)
)

// limiterScripts are the scripts of [Limiter.Load], by name.
var limiterScripts = []struct {
	name   string
	script *redis.Script
}{
	{"take", takeScript},
	{"state", stateScript},
	{"cooldown", cooldownScript},
	{"reserve", reserveScript},
	{"lease_return", leaseReturnScript},
	{"window", windowScript},
}

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
	pipe   pipeliner // nil if rdb cannot pipeline
	prefix string
	reload sync.Mutex // one script reload at a time (batch.go)
}

// pipeliner is the part of *redis.Client, *redis.ClusterClient, *redis.Ring
// and redis.UniversalClient that [Limiter.ReserveMany] uses.
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// New returns a Limiter that runs its scripts on rdb: a *redis.Client
// (single node, or Sentinel through redis.NewFailoverClient),
// *redis.ClusterClient, *redis.Ring or any redis.UniversalClient. It does
// not contact Redis; call [Limiter.Load] to check the connection and load
// the scripts up front.
func New(rdb redis.Scripter, cfg Config) *Limiter {
	if cfg.Prefix == "" {
		cfg.Prefix = defaultPrefix
	}
	l := &Limiter{rdb: rdb, prefix: cfg.Prefix}
	l.pipe, _ = rdb.(pipeliner)
	return l
}

// BucketKey returns the Redis key of the bucket hash of one pacing key:
// "<prefix>:{<channel>:<key>}:bucket".
func (l *Limiter) BucketKey(channel, key string) string {
	return stateKey(l.prefix, channel, key, "bucket")
}

// stateKey names one piece of a pacing key's state:
// "<prefix>:{<channel>:<key>}:<kind>". The hash tag keeps every piece of one
// pacing key in one Redis Cluster slot, so each script call stays in it.
func stateKey(prefix, channel, key, kind string) string {
	return prefix + ":{" + channel + ":" + key + "}:" + kind
}

// CooldownKey returns the Redis key of the cooldown of one pacing key:
// "<prefix>:{<channel>:<key>}:cooldown", in the same Cluster slot as
// [Limiter.BucketKey].
func (l *Limiter) CooldownKey(channel, key string) string {
	return stateKey(l.prefix, channel, key, "cooldown")
}

// SubBucketKey returns the Redis key of a sub-bucket of one pacing key:
// "<prefix>:{<channel>:<key>}:sub:<sub>:bucket", in the same Cluster slot as
// [Limiter.BucketKey], so that [Limiter.ReserveMulti] can take both in one
// script. For WhatsApp's pair limit, sub is the recipient.
func (l *Limiter) SubBucketKey(channel, key, sub string) string {
	return stateKey(l.prefix, channel, key, "sub:"+sub+":bucket")
}

// SubCooldownKey returns the Redis key of the cooldown of a sub-bucket:
// "<prefix>:{<channel>:<key>}:sub:<sub>:cooldown".
func (l *Limiter) SubCooldownKey(channel, key, sub string) string {
	return stateKey(l.prefix, channel, key, "sub:"+sub+":cooldown")
}

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

// Decision is the answer of [Limiter.Take].
type Decision struct {
	// Allowed reports whether cost tokens were taken. When false, nothing
	// was taken.
	Allowed bool
	// Remaining is the number of whole tokens in the bucket after the call,
	// from 0 to Burst (in cooldown too; 0 while the bucket is in debt). For
	// [Limiter.TakeMulti] it is the fewest left in any of the buckets.
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
// refills at lim.PerSecond tokens per second up to lim.Burst tokens, now: it
// never grants a later slot (see [Limiter.Reserve] for that). Slots that
// Reserve and Lease granted ahead count: while the bucket is in debt, Take
// refuses with the wait until the debt and cost are refilled.
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

// Cooldown makes (channel, key) refuse every [Limiter.Take], Reserve, Lease
// and multi-bucket call for at least d, rounded up to the millisecond: it
// sets the cooldown to d unless a longer one is already set, which it keeps.
// d <= 0 does nothing and does not call Redis. The check and the write are
// one Lua script, so concurrent calls keep the longest cooldown. Errors wrap
// the Redis error. Cooldown is safe for concurrent use.
func (l *Limiter) Cooldown(ctx context.Context, channel, key string, d time.Duration) error {
	return l.cooldown(ctx, l.CooldownKey(channel, key), d)
}

// CooldownSub is [Limiter.Cooldown] for one sub-bucket of a pacing key (a
// WhatsApp pair after error 131056): multi-bucket calls that include the
// sub-bucket are refused until it ends; calls for the pacing key alone are
// not.
func (l *Limiter) CooldownSub(ctx context.Context, channel, key, sub string, d time.Duration) error {
	return l.cooldown(ctx, l.SubCooldownKey(channel, key, sub), d)
}

func (l *Limiter) cooldown(ctx context.Context, ck string, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	ms := d / time.Millisecond
	if d%time.Millisecond != 0 {
		ms++ // round up without overflowing near the longest Duration
	}
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
	if !ints(v, r[:]) || r[0] < -maxDebtU || r[0] > int64(lim.Burst)*1e6 || r[1] < 0 {
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
