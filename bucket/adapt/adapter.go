// Package adapt is the adaptive state of a pacing key, kept in Redis beside
// its token bucket (package bucket) and shared by every replica: the AIMD
// rate the pacer takes tokens under ([AIMD], [Adapter.Throttled],
// [Adapter.Recover]) and the circuit breaker that stops a key whose
// provider refuses everything ([Breaker], [Adapter.BreakerAllow],
// [Adapter.BreakerResult]).
package adapt

import (
	"github.com/pacerhq/pacer/bucket"
	"github.com/redis/go-redis/v9"
)

// Adapter runs the AIMD and breaker scripts of many pacing keys. It keeps
// no state of its own besides its configuration: every replica's Adapter
// sees the same state. An Adapter is safe for concurrent use.
type Adapter struct {
	rdb    redis.Scripter
	keys   bucket.Keys
	bucket *bucket.Limiter // for the tokens of a Snapshot
}

// New returns an Adapter that runs its scripts on rdb (any client
// [bucket.New] takes) and names its keys as a [bucket.Limiter] of cfg
// does, so a throttle's cooldown is that limiter's. It does not contact
// Redis.
func New(rdb redis.Scripter, cfg bucket.Config) *Adapter {
	l := bucket.New(rdb, cfg)
	return &Adapter{rdb: rdb, keys: l.Keys(), bucket: l}
}

// Keys returns the names of the Redis keys this Adapter uses.
func (l *Adapter) Keys() bucket.Keys { return l.keys }

func fieldErr(field string, err error) error { return &bucket.FieldError{Field: field, Err: err} }
