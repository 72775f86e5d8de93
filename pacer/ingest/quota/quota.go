// Package quota is the ingest gateway's tiered quota: one request is
// checked against every tier that applies to it (token buckets and
// sliding-window counters: per client IP, per tenant, per tenant per day,
// per channel) and the envelope ids it carries are claimed, all in one Redis
// script on the Redis clock. Either every tier grants and every new id is
// claimed, or nothing is written: a request one tier refuses takes nothing
// from the others. [Local] answers the same questions in-process when Redis
// is down (PACER_REDIS_FAILURE=local).
package quota

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/wire"
	"github.com/pacerhq/pacer/lua"
	"github.com/pacerhq/pacer/pacer/ingest/window"
	"github.com/redis/go-redis/v9"
)

// ErrInvalid is returned, wrapped with what is wrong, for a request that
// can never be checked (no tiers, a tier with neither or both of Bucket and
// Window, an invalid limit). Test for it with errors.Is.
var ErrInvalid = errors.New("quota: invalid request")

// Unit says what a tier counts.
type Unit int

const (
	// PerRequest tiers cost 1 per request.
	PerRequest Unit = iota
	// PerMessage tiers cost the number of new envelope ids in the request
	// (ids neither claimed nor done already): a retried request costs its
	// messages once.
	PerMessage
)

// Tier is one quota a request is checked against.
type Tier struct {
	// Name is the policy's name in the RateLimit fields ("ip", "tenant", ...).
	Name string
	// Key is the Redis key of the tier's state, from bucket.Keys.Ingest.
	Key  string
	Unit Unit
	// Exactly one of Bucket and Window is set: a token bucket (rate in
	// units per second, burst in units) or a sliding-window counter.
	Bucket *bucket.Limit
	Window *window.Window
}

// Capacity is the most units the tier can ever grant at once: the
// bucket's burst or the window's max.
func (t Tier) Capacity() int {
	if t.Bucket != nil {
		return t.Bucket.Burst
	}
	if t.Window != nil {
		return t.Window.Max
	}
	return 0
}

func (t Tier) validate() error {
	switch {
	case (t.Bucket == nil) == (t.Window == nil):
		return fmt.Errorf("%w: tier %q needs exactly one of a bucket and a window", ErrInvalid, t.Name)
	case t.Bucket != nil:
		if err := t.Bucket.Validate(); err != nil {
			return fmt.Errorf("%w: tier %q: %w", ErrInvalid, t.Name, err)
		}
	case t.Window != nil:
		if err := t.Window.Validate(); err != nil {
			return fmt.Errorf("%w: tier %q: %w", ErrInvalid, t.Name, err)
		}
	}
	if t.Key == "" {
		return fmt.Errorf("%w: tier %q has no key", ErrInvalid, t.Name)
	}
	return nil
}

// Request is what [Limiter.Take] checks and claims.
type Request struct {
	Tiers []Tier // 1 to 16
	// IDs are the Redis keys of the request's distinct envelope ids
	// (bucket.Keys.Ingest("id", tenant+":"+id)); may be empty.
	IDs []string
	// IdemKey is the Redis key of the request's Idempotency-Key record; ""
	// when the request has none.
	IdemKey string
	// ClaimTTL is how long a claim holds if the request never finishes
	// (the process died while producing); at least 1 ms.
	ClaimTTL time.Duration
}

// IDState is what Take found for one envelope id.
type IDState int

const (
	IDNew     IDState = iota // unknown: claimed by this request when granted
	IDPending                // claimed by another request that is producing it
	IDDone                   // accepted (acknowledged by Kafka) earlier
)

// TierState is one tier's answer.
type TierState struct {
	// Remaining is the units the tier could still grant now (after this
	// request when it was granted), >= 0.
	Remaining int
	// Wait is how long until the tier could grant this request's cost if
	// nothing else is counted; 0 if it can now; -1 if it never can (the
	// cost is above the tier's capacity).
	Wait time.Duration
	// Reset is how long until the tier gains quota (after this request
	// when it was granted): a bucket its next whole unit (0 when full), a
	// window the time until Remaining+1 units fit (0 when it counts
	// nothing), which is the Wait a request of that many would get. A
	// sliding window's count falls gradually, as the previous fixed
	// window's share leaves it, so this is not the end of the fixed window:
	// a day used up in its last hours may only recover hours into the next.
	Reset time.Duration
}

// Result is the answer of [Limiter.Take].
type Result struct {
	// Granted reports whether every tier granted and the new ids are
	// claimed. When false nothing was written.
	Granted bool
	// Refused is the index in Request.Tiers of the tier with the longest
	// wait when refused; -1 when granted or when Stored is set.
	Refused int
	// Counted is the number of new ids: the cost of PerMessage tiers.
	Counted int
	// Known is true when the request's Idempotency-Key record exists:
	// Stored is its value and nothing was written (Tiers and IDs are as
	// they stand).
	Known  bool
	Stored string
	Tiers  []TierState // one per Request.Tiers
	IDs    []IDState   // one per Request.IDs
	// Token is the claim token to give to Finish.
	Token string
}

// Finish settles a granted request's claims.
type Finish struct {
	Token   string   // Result.Token
	IdemKey string   // Request.IdemKey; "" when none
	Done    []string // id keys Kafka acknowledged: kept as done records for DoneTTL
	// DoneKeys, when not nil, has one pacing key per id of Done, in
	// order: its done record holds "d:<pacing key>" rather than "d", so
	// the tenant's own message lookup finds the ledger entry.
	DoneKeys []string
	Release  []string // id keys claimed but not produced: released for a retry
	// Stored is kept in the Idempotency-Key record for DoneTTL (the answer
	// to replay); "" releases the record.
	Stored  string
	DoneTTL time.Duration
}

// Quota is what the ingest gateway needs from a quota store: [Limiter]
// (Redis) and [Local] (in-process) both are one.
type Quota interface {
	Take(ctx context.Context, r Request) (Result, error)
	Finish(ctx context.Context, f Finish) error
}

// Limiter runs the quota scripts on Redis. It keeps no state of its own:
// every replica's Limiter sees the same counts. A Limiter is safe for
// concurrent use.
type Limiter struct {
	rdb redis.Scripter
}

var (
	takeScript   = redis.NewScript(lua.Quota)
	finishScript = redis.NewScript(lua.QuotaFinish)
)

// New returns a Limiter that runs its scripts on rdb.
func New(rdb redis.Scripter) *Limiter { return &Limiter{rdb: rdb} }

// Load loads the scripts into Redis, so that the first calls need no EVAL.
func (l *Limiter) Load(ctx context.Context) error {
	for _, s := range []*redis.Script{takeScript, finishScript} {
		if err := s.Load(ctx, l.rdb).Err(); err != nil {
			return fmt.Errorf("quota: load script: %w", err)
		}
	}
	return nil
}

func newToken() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (r Request) validate() error {
	if len(r.Tiers) < 1 || len(r.Tiers) > 16 {
		return fmt.Errorf("%w: %d tiers, 1 to 16 allowed", ErrInvalid, len(r.Tiers))
	}
	for _, t := range r.Tiers {
		if err := t.validate(); err != nil {
			return err
		}
	}
	if r.ClaimTTL < time.Millisecond {
		return fmt.Errorf("%w: claim TTL %v must be >= 1ms", ErrInvalid, r.ClaimTTL)
	}
	return nil
}

// Take checks r against every tier and claims its new ids, in one script
// on the Redis clock (see quota.lua). Every refusal writes nothing.
//
// Take returns an error wrapping [ErrInvalid], without calling Redis, for
// an invalid r; other errors wrap the Redis error. Take is safe for
// concurrent use.
func (l *Limiter) Take(ctx context.Context, r Request) (Result, error) {
	if err := r.validate(); err != nil {
		return Result{}, err
	}
	token := newToken()
	keys := make([]string, 0, len(r.Tiers)+1+len(r.IDs))
	args := make([]any, 0, 5+4*len(r.Tiers))
	hasIdem := 0
	for _, t := range r.Tiers {
		keys = append(keys, t.Key)
	}
	if r.IdemKey != "" {
		hasIdem = 1
		keys = append(keys, r.IdemKey)
	}
	keys = append(keys, r.IDs...)
	args = append(args, len(r.Tiers), len(r.IDs), hasIdem, token, r.ClaimTTL.Milliseconds())
	for _, t := range r.Tiers {
		unit := "request"
		if t.Unit == PerMessage {
			unit = "message"
		}
		if t.Bucket != nil {
			args = append(args, "bucket", wire.Rate(t.Bucket.PerSecond), t.Bucket.Burst, unit)
		} else {
			args = append(args, "window", t.Window.Max, int64(t.Window.Period/time.Microsecond), unit)
		}
	}
	v, err := takeScript.Run(ctx, l.rdb, keys, args...).Result()
	if err != nil {
		return Result{}, fmt.Errorf("quota: take: %w", err)
	}
	res, ok := parseTake(v, len(r.Tiers), len(r.IDs))
	if !ok {
		return Result{}, fmt.Errorf("quota: take: unexpected reply %s", wire.Describe(v))
	}
	res.Token = token
	return res, nil
}

func parseTake(v any, tiers, ids int) (Result, bool) {
	a, ok := v.([]any)
	if !ok || len(a) < 4 {
		return Result{}, false
	}
	status, ok1 := a[0].(int64)
	tier, ok2 := a[1].(int64)
	counted, ok3 := a[2].(int64)
	stored, ok4 := a[3].(string)
	if !ok1 || !ok2 || !ok3 || !ok4 || status < 0 || status > 2 {
		return Result{}, false
	}
	if len(a) != 4+3*tiers+ids || tier < 0 || tier > int64(tiers) || (status == 1) != (tier > 0) ||
		counted < 0 || counted > int64(ids) {
		return Result{}, false
	}
	res := Result{Granted: status == 0, Refused: int(tier) - 1, Counted: int(counted),
		Known: status == 2, Stored: stored, Tiers: make([]TierState, tiers), IDs: make([]IDState, ids)}
	for i := range tiers {
		var n [3]int64
		if !wire.Ints(a[4+3*i:7+3*i], n[:]) || n[0] < 0 || n[1] < -1 || n[2] < 0 {
			return Result{}, false
		}
		wait := wire.Duration(n[1], time.Microsecond)
		if n[1] == -1 {
			wait = -1
		}
		res.Tiers[i] = TierState{Remaining: int(n[0]), Wait: wait, Reset: wire.Duration(n[2], time.Microsecond)}
	}
	for k := range ids {
		s, ok := a[4+3*tiers+k].(int64)
		if !ok || s < 0 || s > 2 {
			return Result{}, false
		}
		res.IDs[k] = IDState(s)
	}
	return res, true
}

// Finish marks f.Done as done records and releases f.Release and, when
// f.Stored is "", the Idempotency-Key record (see quota_finish.lua).
// Errors wrap the Redis error. Finish is safe for concurrent use.
func (l *Limiter) Finish(ctx context.Context, f Finish) error {
	if f.DoneTTL < time.Millisecond || f.Token == "" {
		return fmt.Errorf("%w: finish needs a token and a done TTL >= 1ms", ErrInvalid)
	}
	keys := make([]string, 0, 1+len(f.Done)+len(f.Release))
	hasIdem := 0
	if f.IdemKey != "" {
		hasIdem = 1
		keys = append(keys, f.IdemKey)
	}
	keys = append(keys, f.Done...)
	keys = append(keys, f.Release...)
	if len(keys) == 0 {
		return nil
	}
	if f.DoneKeys != nil && len(f.DoneKeys) != len(f.Done) {
		return fmt.Errorf("%w: finish: %d pacing keys for %d done ids", ErrInvalid, len(f.DoneKeys), len(f.Done))
	}
	args := make([]any, 0, 5+len(f.DoneKeys))
	args = append(args, hasIdem, f.Token, len(f.Done), f.DoneTTL.Milliseconds(), f.Stored)
	for _, k := range f.DoneKeys {
		args = append(args, k)
	}
	err := finishScript.Run(ctx, l.rdb, keys, args...).Err()
	if err != nil {
		return fmt.Errorf("quota: finish: %w", err)
	}
	return nil
}
