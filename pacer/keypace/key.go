// Package keypace paces the sends of each pacing key: its adapted rate
// (AIMD) and breaker as shared through Redis, the cooldowns of the key, of
// its account and of its pairs (key, recipient), and its send slots (the
// lease dispenser, the priority handoff). A record takes its key with
// [Keys.Get] and then calls one verb per step of its path: [Key.Gate]
// before it waits (breaker and cooldowns), [Key.Slot] to wait for its send
// slot, and [Key.Report] with the provider's answer; [Key.Done] when it is
// finished. The pacer that calls it passes what it needs in [Config].
package keypace

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/prometheus/client_golang/prometheus"
)

// Bucket is what keypace needs of the token buckets (the pacer's Bucket):
// reservations of slots, leases of several, and cooldowns.
// *bucket.Limiter and *bucket.Local implement it. Methods are safe for
// concurrent use.
type Bucket interface {
	// Reserve grants the next send slot of (channel, key) within maxWait,
	// or says how long until one could be granted; see bucket.Limiter.Reserve.
	Reserve(ctx context.Context, channel, key string, lim bucket.Limit, cost int, maxWait time.Duration) (bucket.Reservation, error)
	// ReserveMulti grants one slot in several buckets of key at once (the
	// key's own and a recipient's), all or nothing.
	ReserveMulti(ctx context.Context, channel, key string, reqs []bucket.Request, maxWait time.Duration) (bucket.Reservation, error)
	// Lease and Return serve a bucket.Dispenser: up to n slots per call.
	bucket.Leaser
	// Cooldown stops every caller from being granted slots for (channel,
	// key) for at least d.
	Cooldown(ctx context.Context, channel, key string, d time.Duration) error
}

// Metrics are the pacer's collectors that keypace counts in; New makes
// unregistered ones for those left nil.
type Metrics struct {
	BucketCalls prometheus.Counter  // pacer_bucket_calls_total: Reserve, ReserveMulti and Lease calls
	TakeLatency prometheus.Observer // seconds one bucket call took
	Lateness    prometheus.Observer // seconds a sender woke after its slot started
	LateSlots   prometheus.Counter  // slots given up because their sender woke too late
	Handoffs    prometheus.Counter  // slots a normal-priority sender passed to a high-priority one
}

// ErrRedisDown is what Config.Redis returns in local failure mode when
// Redis does not answer: the caller goes on without it.
var ErrRedisDown = errors.New("pacer: redis unavailable (local failure mode)")

// Config is what keypace needs of the pacer that uses it.
type Config struct {
	Channel      string        // the channel, the first part of every bucket and state key
	Owner        string        // this process, as the breaker's half-open probe is held by
	MaxTokenWait time.Duration // the longest wait for a slot in place; longer ones requeue
	LeaseSize    int           // slots per lease, 0 = automatic (see leaseSize)

	Bucket   Bucket  // the key buckets in Redis
	Fallback Bucket  // the in-process buckets of local failure mode; nil without it
	Adapter  Adapter // the shared adaptive state (AIMD, breaker, pairs)
	Policy   Policy  // each key's policy
	// Default is the channel's policy: a key's policy until its first read
	// of Policy.
	Default KeyPolicy
	// CredentialVersion returns the version of a key's credential (see the
	// pacer's CredentialVersioner); nil when the sender has none.
	CredentialVersion func(key string) uint64
	// AccountOf names the account of a pacing key: the keys an
	// account-scoped throttle (WhatsApp 80007, per business account, and 4,
	// per app) cools down together are those of one name. nil, or "" for a
	// key: the channel's single account (one credential for every key).
	AccountOf func(key string) string
	// SlowStart ramps the rate of a key back from idle (see
	// adapt.SlowStart); zero: off.
	SlowStart adapt.SlowStart
	// Redis runs op against Redis: in closed failure mode it retries until
	// op succeeds or ctx ends (ctx.Err()); in local mode it returns
	// ErrRedisDown when Redis does not answer.
	Redis   func(ctx context.Context, log *slog.Logger, op func() error) error
	Metrics Metrics
}

// New returns the (empty) set of pacing keys of cfg's channel.
func New(cfg Config) *Keys {
	m := cfg.Metrics
	if m.BucketCalls == nil {
		m.BucketCalls = prometheus.NewCounter(prometheus.CounterOpts{Name: "bucket_calls"})
	}
	if m.TakeLatency == nil {
		m.TakeLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "take_latency"})
	}
	if m.Lateness == nil {
		m.Lateness = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lateness"})
	}
	if m.LateSlots == nil {
		m.LateSlots = prometheus.NewCounter(prometheus.CounterOpts{Name: "late_slots"})
	}
	if m.Handoffs == nil {
		m.Handoffs = prometheus.NewCounter(prometheus.CounterOpts{Name: "handoffs"})
	}
	if cfg.Redis == nil {
		cfg.Redis = func(_ context.Context, _ *slog.Logger, op func() error) error { return op() }
	}
	p := &Keys{m: map[string]*keyState{}, cfg: cfg, bucket: cfg.Bucket, fallback: cfg.Fallback, adapter: cfg.Adapter, policy: cfg.Policy,
		mt: m, policyDefault: StaticPolicy(cfg.Default)}
	if p.policy == nil {
		p.policy = p.policyDefault
	}
	return p
}

// redis runs op through Config.Redis.
func (p *Keys) redis(ctx context.Context, log *slog.Logger, op func() error) error {
	return p.cfg.Redis(ctx, log, op)
}

// Key is one record's hold on its pacing key: the key's state in this
// process (one per key, shared by its records, kept by [Keys]) and what
// the record's gates learned of it (its policy and adapted limit at the
// last gate, whether its send is the breaker's probe, the rate its slot
// was paced at). A record gets it from [Keys.Get], calls Gate, Slot and
// Report as it goes, and Done once finished. Not safe for concurrent use
// (one record); the key's state it holds is.
type Key struct {
	ks   *Keys
	st   *keyState // nil for the zero Key
	name string
	to   string // the recipient, for the pair's cooldown and bucket

	pol           KeyPolicy    // the key's policy at the last gate
	lim           bucket.Limit // the key's adapted limit at the last gate
	probe         bool         // this send is the breaker's half-open probe
	paced         float64      // msgs/s: the key's adapted rate this process knew when the slot started
	pairThrottles int          // pair-scoped throttles of this record so far
}

// Held reports whether k holds a key (it is not the zero Key).
func (k *Key) Held() bool { return k.st != nil }

// Done counts k's record as no longer in hand (see Get).
func (k *Key) Done() { k.ks.done(k.st) }

// Alone reports whether k's record is the only record of its key in hand
// in this process (see Get): none other uses the key's slots while it
// waits.
func (k *Key) Alone() bool {
	k.st.mu.Lock()
	defer k.st.mu.Unlock()
	return k.st.users == 1
}

// Kind is what a verb decided for the record.
type Kind int

const (
	Pass    Kind = iota // on to the next step
	Wait                // sleep Verdict.Wait, then on (after Gate) or back to the first gate (after Report)
	Again               // back to the first gate
	Requeue             // put back for Verdict.Wait, for Verdict.Reason
	Stop                // ctx ended (the worker stopped) or Redis failed for good
)

// Verdict is what a verb decided for the record.
type Verdict struct {
	Kind   Kind
	Reason string        // Requeue: why ("breaker", "cooldown", "token-wait", "account-cooldown", "pair-cooldown", "pair-throttle")
	Wait   time.Duration // Wait, Requeue: how long
}

func requeue(reason string, d time.Duration) Verdict {
	return Verdict{Kind: Requeue, Reason: reason, Wait: d}
}

// Shut reports whether the record, whose slot came, is held back by its
// key's breaker opened meanwhile (see breakerShut): back to the gates.
func (k *Key) Shut() bool { return k.ks.breakerShut(k) }

// LateSlot is how late after its slot the record's sender may still send
// (see lateSlot), at the limit its slot was paced at.
func (k *Key) LateSlot() time.Duration { return lateSlot(k.pol.Limit, k.lim) }

// CooldownLeft is how long the key's cooldown lasts after now, as this
// process last saw it; 0 when it is over.
func (k *Key) CooldownLeft(now time.Time) time.Duration {
	k.st.mu.Lock()
	cool := k.st.cooldownUntil.Time().Sub(now)
	k.st.mu.Unlock()
	return cool
}

// Limit returns the key's adapted limit as its senders read it (see
// limitFor), for a record that does not send yet.
func (k *Key) Limit(ctx context.Context, now time.Time, log *slog.Logger) bucket.Limit {
	lim, _ := k.ks.limitFor(ctx, now, k.name, k.st, log)
	return lim
}
