// Package ledger is the idempotency ledger of envelope ids, kept in Redis
// beside the pacing key's bucket: an id is claimed before its send and
// marked delivered after it, so a record Kafka delivers again is not sent
// twice. Its keys come from the [bucket.Keys] of the limiter, so a claim
// always reads that limiter's cooldown.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// ClaimResult is the answer of [Ledger.Claim]. Only [Claimed] allows a
// send; the zero value, [ClaimUnknown], is what Claim answers with an
// error, so an error or a forgotten assignment never reads as a claim.
type ClaimResult int

const (
	// ClaimUnknown: no answer (Claim failed); nothing is known of the id,
	// and nothing was claimed. Do not send.
	ClaimUnknown ClaimResult = iota
	// Claimed: the caller owns the id now and may send it.
	Claimed
	// Delivered: the id was delivered before; do not send it again.
	Delivered
	// Abandoned: another process claimed the id and never recorded an
	// outcome (it crashed or was cut off mid-send). The provider may or may
	// not have the message.
	Abandoned
	// CoolingDown: the pacing key is in cooldown; nothing was claimed.
	CoolingDown
)

func (c ClaimResult) String() string {
	switch c {
	case ClaimUnknown:
		return "unknown"
	case Claimed:
		return "claimed"
	case Delivered:
		return "delivered"
	case Abandoned:
		return "abandoned"
	case CoolingDown:
		return "cooldown"
	}
	return fmt.Sprintf("claim(%d)", int(c))
}

var (
	claimScript   = redis.NewScript(lua.Claim)
	releaseScript = redis.NewScript(lua.Release)
)

// Ledger is the idempotency record of envelope ids: claimed before a send,
// marked delivered after it, so a record Kafka delivers again is not sent
// twice. Each id lives at [bucket.Keys].ID, in the Redis Cluster slot of
// its pacing key. A Ledger is safe for concurrent use.
type Ledger struct {
	rdb  redis.Cmdable
	keys bucket.Keys
}

// New returns a Ledger over rdb that names its keys, and reads the pacing
// key's cooldown, with keys: pass the [bucket.Limiter.Keys] of the limiter
// whose cooldowns a claim must honour.
func New(rdb redis.Cmdable, keys bucket.Keys) *Ledger {
	return &Ledger{rdb: rdb, keys: keys}
}

// Claim claims id for owner for ttl (rounded up to a millisecond), right
// before its request. With force, a claim left by another owner is taken
// over (the caller has decided to send again); without it, such a claim
// answers [Abandoned]. If the pacing key is in cooldown
// ([bucket.Limiter.Cooldown], [bucket.Keys].Cooldown), Claim answers
// [CoolingDown] and the time left, claiming nothing: a sender that slept on
// a reservation while a cooldown began does not send. On an error (which
// wraps the Redis error, or names an unexpected reply) it answers
// [ClaimUnknown].
func (l *Ledger) Claim(ctx context.Context, channel, key, id, owner string, ttl time.Duration, force bool) (ClaimResult, time.Duration, error) {
	k := l.keys.ID(channel, key, id)
	ck := l.keys.Cooldown(channel, key)
	f := "0"
	if force {
		f = "1"
	}
	v, err := claimScript.Run(ctx, l.rdb, []string{k, ck}, owner, ms(ttl), f).Result()
	if err != nil {
		return ClaimUnknown, 0, fmt.Errorf("ledger: claim %q: %w", k, err)
	}
	s, _ := v.(string)
	return parseClaim(k, s)
}

// parseClaim reads the reply s of claim.lua (or one of claim_many.lua's)
// for id key k.
func parseClaim(k, s string) (ClaimResult, time.Duration, error) {
	switch {
	case s == "claimed":
		return Claimed, 0, nil
	case s == "delivered":
		return Delivered, 0, nil
	case s == "abandoned":
		return Abandoned, 0, nil
	case strings.HasPrefix(s, "cooldown:"):
		us, err := strconv.ParseInt(s[len("cooldown:"):], 10, 64)
		if err == nil && us > 0 {
			return CoolingDown, time.Duration(us) * time.Microsecond, nil
		}
	}
	return ClaimUnknown, 0, fmt.Errorf("ledger: claim %q: unexpected reply %q", k, s)
}

// IsDelivered reports whether id was recorded delivered: one GET, nothing
// written. A caller can skip a copy it knows may be a duplicate before it
// spends a send slot on it; Claim still decides before a send. Errors wrap
// the Redis error.
func (l *Ledger) IsDelivered(ctx context.Context, channel, key, id string) (bool, error) {
	k := l.keys.ID(channel, key, id)
	v, err := l.rdb.Get(ctx, k).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("ledger: read %q: %w", k, err)
	}
	return strings.HasPrefix(v, "d:"), nil
}

// Delivered records that id was accepted by the provider (providerID, may
// be empty), for ttl. Errors wrap the Redis error.
func (l *Ledger) Delivered(ctx context.Context, channel, key, id, providerID string, ttl time.Duration) error {
	k := l.keys.ID(channel, key, id)
	if err := l.rdb.Set(ctx, k, "d:"+providerID, max(ttl, time.Millisecond)).Err(); err != nil {
		return fmt.Errorf("ledger: deliver %q: %w", k, err)
	}
	return nil
}

// Release drops owner's claim on id (the provider refused the message, so
// a retry may claim it again). Releasing a claim one does not hold does
// nothing. Errors wrap the Redis error.
func (l *Ledger) Release(ctx context.Context, channel, key, id, owner string) error {
	k := l.keys.ID(channel, key, id)
	if err := releaseScript.Run(ctx, l.rdb, []string{k}, owner).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("ledger: release %q: %w", k, err)
	}
	return nil
}

func ms(d time.Duration) string {
	n := (d + time.Millisecond - 1) / time.Millisecond
	if n < 1 {
		n = 1
	}
	return fmt.Sprint(int64(n))
}
