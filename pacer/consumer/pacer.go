// Package consumer is the consume-pace-send loop: it reads envelopes from a
// channel's Kafka topics as one consumer-group member, takes a token from
// the Redis token bucket of each envelope's pacing key, sends through the
// channel's [channels.Sender], and commits a partition's offset only past
// records that are finished.
//
// # Every record ends in exactly one state
//
//   - delivered: the provider accepted it; its id is recorded in the
//     idempotency ledger, so a re-delivered copy is skipped, never re-sent.
//   - requeued: it could not get a token within [Config.MaxTokenWait] (a
//     long cooldown, an open breaker): it is written to a retry topic with
//     its due time and its attempt count unchanged. A requeue is not an
//     attempt and never exhausts a budget.
//   - retrying: a transient failure: written to retry topic
//     <topic>.retry.<n> with attempt+1 and a back-off delay with jitter.
//   - dead-lettered: written to <topic>.dlq with a reason header:
//     malformed, expired, permanent:<provider code>, attempts-exhausted,
//     unknown-outcome.
//
// A record is finished once the provider accepted it or Kafka acknowledged
// its copy on the retry or DLQ topic; offsets are committed only up to the
// lowest unfinished record, so a crash re-delivers and never skips.
// With [Deps].Outcomes, the final outcome of a record whose envelope names
// a tenant is written to the outcomes topic (without waiting), and its
// offset also waits for Kafka's acknowledgement of that record
// (outcomes.go): the tenants' callbacks never miss an outcome.
//
// # Outcomes
//
//   - throttle: AIMD in Redis, shared by every replica: the key's rate is
//     multiplied by [adapt.AIMD] Decrease (once per burst of throttles,
//     never below the floor) and the key cools down for the provider's
//     Retry-After (clamped to AIMD MinCooldown..MaxCooldown). A clean window
//     raises the rate again toward [Config.Limit], never above it. A
//     pair-scoped throttle (WhatsApp 131056) holds only that message. The
//     message waits, or is requeued; a throttle is never an attempt.
//   - transient: retry topic, up to [Config.MaxAttempts] requests in all.
//   - permanent: DLQ.
//   - halt (credentials, account blocked), or throttles again and again at
//     the floor: the key's breaker opens ([adapt.Breaker]); its messages
//     are requeued (never attempts, never dropped) until one replica's
//     half-open probe succeeds.
//   - no answer (timeout, connection cut after the request left): the
//     provider may have the message. [Config.UnknownOutcome] decides:
//     "dlq" (default) dead-letters it as unknown-outcome for an operator,
//     "resend" retries it. The same applies to a claim left in the ledger by
//     a process that died mid-send. Once its DLQ copy is written the ledger
//     records the id dead-lettered, so a copy Kafka delivers again (a crash
//     before the commit) is skipped as a duplicate, not dead-lettered again.
//
// After a crash or a rebalance, the records of a partition's backlog when
// assigned are read in the ledger once per poll before they are queued
// (see [Pacer.skipKnown]): those delivered or dead-lettered are finished as
// duplicates without a send slot.
//
// # Queues per key
//
// A partition's records are dispatched into one FIFO queue per pacing key
// (the Kafka record key); each key has up to its in-flight bound of
// records handled at once and waits only for its own slots, so a key's
// backlog never holds back the other keys of its partition. The bound
// follows Little's law: the key's rate x its provider's answer time (a
// high estimate of it, with headroom), plus its burst and a few records
// waiting for their slots (package inflight), at most [Config.InFlight];
// so a provider that answers slowly does not lower a key's rate while the
// process has places. A key holds at most [Config.Lookahead] of its rate
// in memory per partition (at least its in-flight bound); its further records are parked: copied to a retry topic due at
// their estimated slot (one Kafka write per hop, never an attempt), and
// finished once Kafka acknowledged the copy. A partition holding
// [Config.MaxQueued] records pauses fetching; a fetch asked for before
// that is held whole, and records are parked for a full partition only
// once it holds twice MaxQueued. The process handles at most
// [Config.ProcessInFlight] records at once over all its keys (see
// [places]): the others wait in their queues. With InFlight 1 a key's
// records go out in offset order: once it parks, all its later records are
// parked in one chain, sent in order before the key is held again (see
// [chain]). A revoked partition parks the records it still holds before
// its commit. See worker.go and park.go.
//
// # Retry topics
//
// A retry record carries pacer-due (Unix ms). It waits in its key's queue
// until due; the other keys of its partition go on, and the poll loop
// itself never sleeps, so the member keeps its place in the group.
//
// # Metrics
//
// All carry the label channel.
//
//	pacer_sends_total{class}            requests sent, by response class
//	pacer_delivered_total               messages the provider accepted
//	pacer_duplicates_skipped_total      re-delivered records already delivered (or dead-lettered)
//	pacer_requeued_total{reason}        records put back for later (cooldown, token-wait, halt)
//	pacer_retries_total                 records sent to a retry topic after a transient failure
//	pacer_dlq_total{reason}             records dead-lettered, by reason (suppressed: see below)
//	pacer_suppressed_total{reason}      records dead-lettered at their claim: recipient suppressed, by suppression reason
//	pacer_suppressions_added_total{reason} suppressions written from answers (a recipient gone)
//	pacer_portfolio_used_ratio{portfolio} a WhatsApp portfolio's window over its tier, as this process last saw it
//	pacer_portfolio_deferred_total      business-initiated messages deferred by the messaging-limit guard
//	pacer_bucket_wait_seconds           histogram: token wait per message
//	pacer_take_duration_seconds         histogram: one bucket call to Redis
//	pacer_send_duration_seconds         histogram: one provider request
//	pacer_slot_lateness_seconds         histogram: how long after its slot a sender woke
//	pacer_late_slots_total              slots given up: the sender woke later than half the pacing headroom allows
//	pacer_overloaded                    1 while over 1% of the last minute's slots were given up as late
//	pacer_redis_errors_total            failed Redis calls (the record waits)
//	pacer_partitions_assigned           partitions owned by this process
//	pacer_records_queued                fetched records not yet finished
//	pacer_parked_total                  records parked beyond their key's lookahead or at a revoke (Kafka writes)
//	pacer_parked_stale_total            strict order: parked copies of an ended chain dropped unsent
//	pacer_key_backlog_keys{class}       keys with records waiting, by backlog class (1-9 .. 10000+)
//	pacer_lookahead_records             records held in the per-key queues
//	pacer_lookahead_fill                held records over partitions x MaxQueued, 0..2 (fetching pauses at 1)
//	pacer_ready                         1 when Kafka and Redis answer
//	pacer_redis_fallback                1 while pacing in-process (PACER_REDIS_FAILURE=local, Redis down)
//	pacer_responses_total{class,code}   provider answers by class and provider code
//	pacer_keys_active                   pacing keys sent for in the last 5 minutes
//	pacer_rate_current                  adapted rate summed over active keys (msgs/s)
//	pacer_rate_configured               configured rate summed over active keys (msgs/s)
//	pacer_keys_cooldown                 active keys in a cooldown
//	pacer_keys_at_floor                 active keys at the AIMD floor
//	pacer_breakers_open                 active keys whose breaker is open or half-open
//	pacer_consumer_lag_records{topic}   the group's records past its commits, per topic (every replica reports it: use max)
package consumer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/internal/logrepeat"
	"github.com/pacerhq/pacer/internal/tick"
	"github.com/pacerhq/pacer/pacer/campaign"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/keypace"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/pacerhq/pacer/pacer/outcomes"
	"github.com/pacerhq/pacer/pacer/park"
	"github.com/pacerhq/pacer/pacer/portfolio"
	"github.com/pacerhq/pacer/pacer/produce"
	"github.com/pacerhq/pacer/pacer/suppress"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Bucket is the token bucket the pacer draws from: *bucket.Limiter (in
// Redis, shared by every replica) and *bucket.Local (in-process, for the
// local failure mode) implement it; defined in package keypace, which
// paces each key with it.
type Bucket = keypace.Bucket

// Deps are the services a Pacer uses.
type Deps struct {
	Bucket  Bucket  // required
	Adapter Adapter // required; *adapt.Adapter, built with the Bucket's bucket.Config
	// Ledger is the idempotency ledger of envelope ids; required. Its
	// claims go to Redis in batches, started a flush interval before their
	// send slots (claim-ahead); its marks are written after they are made,
	// so a record's offset is marked for commit only once its mark is
	// written (write-behind; see [Pacer.marksWritten]); with a
	// [ledger.BatchConfig].Count (see [CampaignCounts]) and Campaigns set,
	// campaigns are counted in the flush that writes their records' marks.
	Ledger *ledger.Batcher
	Sender channels.Sender // required
	// RedisPing, if set, is called once as Run begins and then every 5 s,
	// so /readyz reflects Redis even while no message needs it: the pacer
	// is not ready until a ping or another Redis call has succeeded, and a
	// failed first ping counts in pacer_redis_errors_total. nil leaves that
	// to the calls made (the pacer is taken to reach Redis until one fails).
	RedisPing func(ctx context.Context) error
	// Fallback paces while Redis is down in RedisFailure "local" mode
	// (*bucket.Local, at rate / expected replicas); required then, else unused.
	Fallback Bucket
	// Policy gives each pacing key its limits and adaptation settings; nil
	// gives every key the channel's (Config.Limit, RecipientLimit, AIMD,
	// Breaker) as a [control.StaticPolicy].
	Policy control.Policy
	// Campaigns holds campaign states (paused, cancelled) and counters
	// (*control.Store); nil: no campaign control, nothing counted.
	Campaigns campaign.Store
	// Suppress holds the recipients each pacing key must not send to; nil:
	// none. With it, every claim checks its recipient in the same ledger
	// call (a suppressed one is dead-lettered "suppressed:<reason>"
	// without a request), and an answer that says the recipient is gone
	// ([channels.Error].Gone: APNs 410, FCM UNREGISTERED) suppresses it.
	// It must name its keys as the Ledger does.
	Suppress *suppress.Store
	// Portfolios guards WhatsApp's messaging limit; nil: no guard. With
	// it, a business-initiated message (envelope.BusinessInitiated) of a
	// key in a portfolio is admitted by the portfolio's window, in one
	// script call per portfolio per ledger flush (the admissions ride in
	// Ledger's pipeline: no round trip of their own), or deferred
	// ("portfolio-limit") until its oldest recipient leaves it; a
	// reserved recipient whose message is dead-lettered without an
	// unknown outcome is given back.
	Portfolios *portfolio.Store
	// Outcomes, when set, receives the final outcome of every record
	// whose envelope names a tenant (delivered, failed, suppressed,
	// dead-lettered; outcomes.go), for the tenants' callbacks; a
	// record's offset is committed only once its outcome is in Kafka.
	Outcomes *outcomes.Writer
}

// Redis failure modes for [Config.RedisFailure].
const (
	RedisFailureClosed = "closed"
	RedisFailureLocal  = "local"
)

// Unknown-outcome policies for [Config.UnknownOutcome].
const (
	UnknownOutcomeDLQ    = "dlq"
	UnknownOutcomeResend = "resend"
)

// Config configures a [Pacer]. Zero values mean the documented default;
// Channel and Limit are required. [Config.Validate] holds every rule.
type Config struct {
	Channel        string          // channel name, e.g. "whatsapp"; required
	Topic          string          // topic to consume; default "pacer.<Channel>"
	Group          string          // consumer group; default "pacer-<Channel>"
	DLQTopic       string          // dead-letter topic; default "<Topic>.dlq"
	RetryDelays    []time.Duration // one retry topic "<Topic>.retry.<n>" per delay, each > 0 and none shorter than the one before; default 5s, 30s, 5m
	Limit          bucket.Limit    // rate and burst per pacing key: the AIMD ceiling; required
	RecipientLimit bucket.Limit    // a second bucket per (pacing key, recipient), e.g. FCM's per-device limit; zero = none
	// Pair is the pair limit each message's ledger claim takes a turn of,
	// per (pacing key, recipient), in the claim's own script call (no
	// Redis round trip of its own): WhatsApp's 1 per 6 s, burst 45. A
	// message whose pair has no turn free is deferred ("pair-limit",
	// parked, no attempt) until the pair's next turn. Zero = none.
	Pair ledger.Pair
	// AIMD is the adaptation on throttles; zero fields mean adapt's
	// defaults. Its MaxCooldown also caps every delay the pacer itself
	// sets: a retry's wait for a provider's Retry-After, and a requeue's.
	AIMD adapt.AIMD
	// ServerRetry is the least delay before a message the provider
	// answered with a server error (HTTP 5xx) is retried, when its provider
	// asks for one (FCM 10 s, APNs 15 min: the channels' defaults in `pacer
	// run`); the retry waits up to a fifth longer still (jitter), and a
	// longer Retry-After or retry tier wins. >= 0; 0: none.
	ServerRetry time.Duration
	// SlowStart ramps the rate of a pacing key back from idle, shared by
	// every replica (adapt.SlowStart: FCM asks for a ramp of at least 60 s);
	// zero: off.
	SlowStart      adapt.SlowStart
	Breaker        adapt.Breaker // per-key breaker on halts; zero fields mean adapt's defaults
	MaxAttempts    int           // requests per record before DLQ on transient failures; >= 0; default 5
	MaxTokenWait   time.Duration // longest wait for a token or cooldown in place; longer requeues; default 5s
	Drain          time.Duration // on shutdown or revoke, how long in-flight sends may finish; default 30s
	SendTimeout    time.Duration // one provider request; default 30s
	UnknownOutcome string        // "dlq" (default) or "resend"; see the package doc
	RedisFailure   string        // "closed" (default: sends stop while Redis is down) or "local" (pace with Deps.Fallback)
	IdempotencyTTL time.Duration // how long the ledger must keep a claim or delivered mark: it must outlive the record's offset commit (see [MinLedgerTTL]); default 7m; New refuses a Deps.Ledger with a TTL() below it
	MaxQueued      int           // records one partition holds in its per-key queues before fetching pauses; default 2000
	// InFlight is the upper bound of the records of one pacing key handled
	// at once in a partition, 0..65536; default 1024. Below it a key's bound
	// follows its rate x its answer time (see the package doc). 1 keeps
	// strict order per key (one record at a time, in offset order).
	InFlight int
	// ProcessInFlight bounds the records handled at once by the process
	// over every partition and key (each holds a goroutine while it waits
	// for its slot, its claim and the provider's answer, and a request on
	// the wire its connection or stream), 0..65536; default 8192: 4,000
	// msgs/s over 50 keys at 250-350 ms. Each key's own bound is 1.2 x
	// rate x a high answer time on the wire + burst + 32 waiting for slots,
	// about 80 at 80/s, so 50 keys fill 4096 places: the records on the wire
	// then left a key fewer senders waiting than a lease holds, and it
	// reserved slot by slot (Redis commands per message 1.3-2.3 against
	// 0.78 with an instant provider) and fell short of its rate (min 75-90%);
	// with 8192, 97.4% and 0.74 (BENCHMARKS.md, bench-e2e).
	// Records
	// beyond it wait in their key's queue, and a freed place goes to the key
	// waiting longest. Not applied with InFlight 1 (strict order).
	ProcessInFlight int
	Lookahead       time.Duration // a key holds at most Lookahead x its rate records per partition (at least its in-flight bound); more are parked; >= 0; default 5s
	// ParkLanes parks those records on the park lanes (one write each,
	// due at their estimated slot less Lookahead), not the retry tiers.
	// Off by default: a copy then comes back at its estimated slot
	// exactly, and a key whose estimate counted a campaign paused since
	// runs at the estimate's pace, not its rate (decision 0032).
	ParkLanes      bool
	LeaseSize      int           // slots per Redis lease, 0..256; 0 (default) = per key, its adapted rate/5 (200 ms of slots) when that is >= 2, else 1 (one reservation per message), not capped by the burst; an automatic lease under 20 slots is taken only while the key has as many senders waiting
	StartupTimeout time.Duration // Run fails if the topics cannot be checked (no broker answers) within this; default 1m
	ProgressEvery  time.Duration // interval of the INFO progress line (delivered, dead-lettered, requeued, retried); default 30s, < 0 = none
	Owner          string        // this process in ledger claims; default host-pid-random
	Logger         *slog.Logger  // default slog.Default()
	RedisName      string        // the Redis server's setting and host, never a password (e.g. "PACER_REDIS_URL host r:6379"), named in the log when it does not answer at start-up; optional
}

// Bounds checked by [Config.Validate].
const (
	maxInFlight        = 65536                // records of one pacing key of a partition at once
	maxProcessInFlight = 65536                // records of the process at once
	maxLeaseSize       = keypace.MaxLeaseSize // slots per lease: a lease is one Lua call holding the key's slot
)

// FieldError is one problem [Config.Validate] found. Field is the path of
// the Config field at fault, as written in Go: "Drain", "Limit.PerSecond",
// "AIMD.Floor", "Breaker.MaxOpenFor", "RetryDelays". Err says what is wrong;
// for Limit, RecipientLimit, AIMD and Breaker it is bucket's error (a
// *bucket.FieldError).
type FieldError struct {
	Field string
	Err   error
}

// Error returns "pacer: config: <Field>: <Err>", such as "pacer: config:
// Drain: -1s must be > 0".
func (e *FieldError) Error() string { return "pacer: config: " + e.Field + ": " + e.Err.Error() }

// Unwrap returns Err.
func (e *FieldError) Unwrap() error { return e.Err }

// joined returns the errors joined in err (errors.Join), or err alone.
func joined(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// Validate returns nil if [New] accepts c, else every problem found,
// joined (errors.Join), each a *[FieldError] naming the field. Zero fields
// stand for their defaults; negative durations and counts are errors. An
// AIMD whose ceiling (Limit) is out of bucket's range is reported on
// Limit.PerSecond; an AIMD Floor above Limit.PerSecond on AIMD.Floor.
func (c Config) Validate() error {
	var errs []error
	bad := func(field string, err error) { errs = append(errs, &FieldError{Field: field, Err: err}) }
	badf := func(field, format string, v ...any) { bad(field, fmt.Errorf(format, v...)) }
	// sub reports each problem of a bucket validation error (they may be
	// joined) under prefix + its field; skip drops those of a field.
	var sub func(prefix string, err error)
	skip := map[string]bool{}
	sub = func(prefix string, err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				sub(prefix, e)
			}
			return
		}
		var fe *bucket.FieldError
		switch {
		case err == nil:
		case errors.As(err, &fe) && skip[prefix+fe.Field]:
		case errors.As(err, &fe):
			bad(prefix+fe.Field, err)
		default:
			bad(strings.TrimSuffix(prefix, "."), err)
		}
	}
	if c.Channel == "" {
		badf("Channel", "is required")
	}
	limitOK := c.Limit.Validate() == nil
	sub("Limit.", c.Limit.Validate())
	if c.RecipientLimit != (bucket.Limit{}) {
		sub("RecipientLimit.", c.RecipientLimit.Validate())
	}
	if err := c.Pair.Validate(); err != nil {
		bad("Pair", err)
	}
	// The AIMD's own checks run whatever the limit: a bad rate does not
	// hide a bad AIMD setting. The ceiling's problems are the limit's: said
	// once, under Limit (already said when the limit itself is invalid).
	if limitOK {
		for _, e := range joined(c.AIMD.Validate(c.Limit)) {
			if fe := (*bucket.FieldError)(nil); errors.As(e, &fe) && fe.Field == "ceiling" {
				bad("Limit.PerSecond", e)
			} else {
				sub("AIMD.", e)
			}
		}
	} else {
		skip["AIMD.ceiling"] = true
		sub("AIMD.", c.AIMD.Validate(c.Limit))
	}
	sub("Breaker.", c.Breaker.Validate())
	switch c.RedisFailure {
	case "", RedisFailureClosed, RedisFailureLocal:
	default:
		badf("RedisFailure", "%q is not closed or local", c.RedisFailure)
	}
	switch c.UnknownOutcome {
	case "", UnknownOutcomeDLQ, UnknownOutcomeResend:
	default:
		badf("UnknownOutcome", "%q is not dlq or resend", c.UnknownOutcome)
	}
	if c.ServerRetry < 0 {
		badf("ServerRetry", "%v must be >= 0", c.ServerRetry)
	}
	sub("SlowStart.", c.SlowStart.Validate())
	for i, d := range c.RetryDelays {
		if d <= 0 {
			badf("RetryDelays", "entry %d is %v; each delay must be > 0", i+1, d)
			break
		}
		// The tiers back off: a later attempt waiting less than an
		// earlier one is a list out of order (30s,5s meant 5s,30s).
		if i > 0 && d < c.RetryDelays[i-1] {
			badf("RetryDelays", "entry %d (%v) is shorter than entry %d (%v); the delays must not decrease", i+1, d, i, c.RetryDelays[i-1])
			break
		}
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"Drain", c.Drain}, {"SendTimeout", c.SendTimeout}, {"MaxTokenWait", c.MaxTokenWait}, {"IdempotencyTTL", c.IdempotencyTTL},
		{"StartupTimeout", c.StartupTimeout},
	} {
		if d.v < 0 {
			badf(d.field, "%v must be > 0", d.v)
		}
	}
	// Floors below which a setting defeats its purpose: the ledger must
	// remember a delivered id at least as long as its record can stay
	// uncommitted and come back (a record held until due on a retry topic
	// holds the commits behind it up to a tier's delay and jitter; a
	// rebalance; MaxTokenWait, SendTimeout and Drain are far shorter): the
	// longest retry delay with its +20% jitter, plus a minute for those, and
	// 5 minutes at least (7m with the default delays). Past that, the ledger keeps
	// nothing of a delivered record, so its Redis memory follows the rate
	// (rate x IdempotencyTTL), not the day's volume; a producer that
	// publishes the same envelope id again later is a separate question
	// (pacer ingest answers it for PACER_IDEMPOTENCY_TTL). A send needs time for
	// one round trip, and a progress line more often than every second is
	// noise.
	// A server error's retry (ServerRetry) is a retry delay like the tiers'.
	if minTTL := MinLedgerTTL(append(slices.Clone(c.RetryDelays), c.ServerRetry)); c.IdempotencyTTL != 0 && c.IdempotencyTTL < minTTL {
		badf("IdempotencyTTL", "%v is too short: delivered ids must be remembered at least %v (1.2 x the longest retry delay or server-error retry + 1m, 5m at least), or re-delivered copies are sent again", c.IdempotencyTTL, minTTL)
	}
	if c.SendTimeout > 0 && c.SendTimeout < 100*time.Millisecond { // a negative one is said above
		badf("SendTimeout", "%v must be >= 100ms: no provider answers faster", c.SendTimeout)
	}
	if c.ProgressEvery > 0 && c.ProgressEvery < time.Second {
		badf("ProgressEvery", "%v must be >= 1s", c.ProgressEvery)
	}
	if c.MaxAttempts < 0 {
		badf("MaxAttempts", "%d must be >= 1", c.MaxAttempts)
	}
	if c.MaxQueued < 0 {
		badf("MaxQueued", "%d must be >= 1", c.MaxQueued)
	}
	if c.Lookahead < 0 {
		badf("Lookahead", "%v must be > 0", c.Lookahead)
	}
	if c.InFlight < 0 || c.InFlight > maxInFlight {
		badf("InFlight", "%d must be in 1..%d", c.InFlight, maxInFlight)
	}
	if c.ProcessInFlight < 0 || c.ProcessInFlight > maxProcessInFlight {
		badf("ProcessInFlight", "%d must be in 1..%d", c.ProcessInFlight, maxProcessInFlight)
	}
	if c.LeaseSize < 0 || c.LeaseSize > maxLeaseSize {
		badf("LeaseSize", "%d must be in 0..%d (0 = automatic)", c.LeaseSize, maxLeaseSize)
	}
	return errors.Join(errs...)
}

// setDefaults fills in the zero fields of a valid c ([Config.Validate]).
func (c *Config) setDefaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.RedisFailure, RedisFailureClosed)
	def(&c.UnknownOutcome, UnknownOutcomeDLQ)
	def(&c.Topic, "pacer."+c.Channel)
	def(&c.Group, "pacer-"+c.Channel)
	def(&c.DLQTopic, c.Topic+".dlq")
	if len(c.RetryDelays) == 0 {
		c.RetryDelays = []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}
	}
	defd := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	defd(&c.Drain, 30*time.Second)
	defd(&c.StartupTimeout, time.Minute)
	if c.ProgressEvery == 0 {
		c.ProgressEvery = 30 * time.Second
	}
	defd(&c.SendTimeout, 30*time.Second)
	// The longest cooldown bucket would set, its default included: the cap
	// of retry and requeue delays too.
	defd(&c.AIMD.MaxCooldown, c.AIMD.CooldownFor(math.MaxInt64))
	defd(&c.MaxTokenWait, 5*time.Second)
	defd(&c.IdempotencyTTL, 7*time.Minute)
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 5
	}
	if c.MaxQueued == 0 {
		c.MaxQueued = 2000
	}
	if c.InFlight == 0 {
		c.InFlight = 1024
	}
	if c.ProcessInFlight == 0 {
		c.ProcessInFlight = 8192
	}
	if c.Lookahead == 0 {
		c.Lookahead = 5 * time.Second
	}
	if c.Owner == "" {
		host, _ := os.Hostname()
		var b [4]byte
		rand.Read(b[:])
		c.Owner = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// retryTopic returns the name of retry tier n (1-based).
func (c *Config) retryTopic(n int) string { return fmt.Sprintf("%s.retry.%d", c.Topic, n) }

// Pacer consumes one channel's topics and paces its sends. Create it with
// [New] and call [Pacer.Run] once.
type Pacer struct {
	cfg          Config
	isOverloaded atomic.Bool // the last overload look's verdict (see Overloaded)
	kopts        []kgo.Opt
	bucket       Bucket
	ledger       *ledger.Batcher
	suppress     *suppress.Store  // nil: no suppression
	portfolios   *portfolio.Store // nil: no messaging-limit guard
	outcomes     *outcomes.Writer // nil: no outcome records
	admissions   *portfolio.Batch // the guard's admissions, in the ledger's flushes
	portfolioMap portfolioMap
	adapter      Adapter
	fallback     Bucket
	ping         func(ctx context.Context) error
	sender       channels.Sender
	places       *places // the bound of records handled at once; nil in strict order
	handlers     *goPool // the goroutines that handle records
	policy       control.Policy
	// policyDefault is the channel's policy from Config: a key's policy
	// until its first read of Policy.
	policyDefault control.StaticPolicy
	camps         *campaign.Live // nil without Deps.Campaigns
	parkMarks     park.Marks     // keys' rates as parked records saw them
	lanes         *park.Lanes    // the park lanes' horizons, per partition owned
	usedReadings  sync.Map       // portfolio name -> *usedReading (see portfolioUsed)
	keys          *keypace.Keys  // the pacing keys: their state, gates, slots and adaptation
	m             *metrics
	qm            *queueMetrics
	log           *slog.Logger
	// retryLog keeps transient failures (a provider refusing connections:
	// thousands a second at full pace) to one line per RetryLogEvery;
	// pacer_retries_total counts them all.
	retryLog logrepeat.Gate

	consuming atomic.Bool
	assigned1 atomic.Bool // partitions were assigned at least once
	kafkaOK   atomic.Bool
	redisOK   atomic.Bool
	// redisSeen: a Redis call or ping has succeeded since New (true from
	// New without Deps.RedisPing). Not ready until it is.
	redisSeen atomic.Bool
	// started is closed once Run consumes (see Started).
	started1 sync.Once
	startedC chan struct{}

	idsMu sync.Mutex
	// ids are the envelope ids being handled, by pacing key and id; the
	// value is nil until a second handler of the same id waits, then a
	// channel closed when the first is done.
	ids map[idRef]chan struct{}
	// idsPeak is the most ids held since ids was made (see shrinkFrom).
	idsPeak int

	lag     *prometheus.GaugeVec // pacer_consumer_lag_records{topic}
	tally   tally                // records finished, by how, for the progress log
	started time.Time            // when Run began

	// chains holds the live chains of strict-order keys (pacing key ->
	// *chain): a chain copy names one, see park.go.
	chains sync.Map

	mu      sync.Mutex
	workers map[tp]*worker
	cl      *kgo.Client
	// sendCtx ends when the drain deadline passes after shutdown began.
	sendCtx context.Context
	// sendBy gives a request its SendTimeout under sendCtx; drainBy a
	// record whose request left its Drain to write the outcome, revoke or
	// not (see [deadlines]).
	sendBy, drainBy *deadlines
	// markBy bounds the write of a delivered mark: 30 s, whatever ends the
	// record's context.
	markBy *deadlines
}

type tp struct {
	topic     string
	partition int32
}

// New returns a Pacer for cfg. kopts carry the connection settings (at least
// kgo.SeedBrokers); New adds the consumer group, topics and commit options.
// reg receives the metrics listed in the package doc. New returns
// [Config.Validate]'s error when cfg is invalid, or the registration error.
func New(cfg Config, kopts []kgo.Opt, deps Deps, reg prometheus.Registerer) (*Pacer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if deps.Bucket == nil || deps.Adapter == nil || deps.Ledger == nil || deps.Sender == nil {
		return nil, errors.New("pacer: New needs a Bucket, an Adapter, a Ledger and a Sender")
	}
	if cfg.RedisFailure == RedisFailureLocal && deps.Fallback == nil {
		return nil, errors.New("pacer: RedisFailure local needs Deps.Fallback")
	}
	// The ledger keeps ids for the TTL it was built with: it must be at
	// least IdempotencyTTL, or re-delivered copies are sent again.
	if ttl := deps.Ledger.TTL(); ttl < cfg.IdempotencyTTL {
		return nil, fmt.Errorf("pacer: the ledger keeps ids %v, less than IdempotencyTTL %v", ttl, cfg.IdempotencyTTL)
	}
	wrapped := prometheus.WrapRegistererWith(prometheus.Labels{"channel": cfg.Channel}, reg)
	m, err := newMetrics(wrapped)
	if err != nil {
		return nil, fmt.Errorf("pacer: metrics: %w", err)
	}
	p := &Pacer{cfg: cfg, kopts: kopts, bucket: deps.Bucket, adapter: deps.Adapter, fallback: deps.Fallback, ping: deps.RedisPing, ledger: deps.Ledger, suppress: deps.Suppress, portfolios: deps.Portfolios, outcomes: deps.Outcomes, sender: deps.Sender, m: m,
		log: newLazyLogger(cfg.Logger).With("channel", cfg.Channel), workers: map[tp]*worker{},
		ids: map[idRef]chan struct{}{}, handlers: newGoPool(), markBy: newDeadlines(context.Background(), 30*time.Second)}
	p.retryLog.Every = RetryLogEvery
	if deps.Portfolios != nil {
		p.admissions = deps.Portfolios.Batched(deps.Ledger)
	}
	if !p.strict() && cfg.ParkLanes {
		p.lanes = park.NewLanes(cfg.Lookahead)
	}
	if !p.strict() {
		p.places = newPlaces(cfg.ProcessInFlight)
	}
	if p.lag, err = newLagGauge(wrapped); err != nil {
		return nil, fmt.Errorf("pacer: metrics: %w", err)
	}
	p.policyDefault = control.StaticPolicy{Limit: cfg.Limit, RecipientLimit: cfg.RecipientLimit, AIMD: cfg.AIMD, Breaker: cfg.Breaker}
	p.policy = deps.Policy
	if p.policy == nil {
		p.policy = p.policyDefault
	}
	p.keys = p.newKeys()
	p.qm = newQueueMetrics(p)
	for _, c := range append(p.keys.Gauges(), prometheus.Collector(p.qm)) {
		if err := wrapped.Register(c); err != nil {
			return nil, fmt.Errorf("pacer: metrics: %w", err)
		}
	}
	if deps.Campaigns != nil {
		p.camps = campaign.New(deps.Campaigns, cfg.Channel, p.log)
	}
	p.redisOK.Store(true)
	p.redisSeen.Store(deps.RedisPing == nil)
	p.kafkaOK.Store(true)
	p.startedC = make(chan struct{})
	return p, nil
}

// Ready reports whether the pacer is consuming, Kafka answers, a Redis
// call has succeeded since New and the last one did. It backs /readyz.
func (p *Pacer) Ready() bool {
	return p.consuming.Load() && p.kafkaOK.Load() && p.redisSeen.Load() && p.redisOK.Load()
}

// Started returns a channel closed once Run has passed its start-up checks
// (the topics exist, the consumer is made) and consumes; never closed when
// Run fails before that.
func (p *Pacer) Started() <-chan struct{} { return p.startedC }

// redisAnswered notes that a Redis call or ping succeeded: the first one
// makes the pacer ready as far as Redis goes.
func (p *Pacer) redisAnswered() {
	if p.redisSeen.Load() { // every call after the first: a read, no write to a shared line
		return
	}
	if !p.redisSeen.Swap(true) {
		p.publishReady()
	}
}

// checkRedis pings Redis once (Deps.RedisPing) as Run begins: success makes
// the pacer ready as far as Redis goes at once, rather than at the first
// 5 s ping; a failure is counted in pacer_redis_errors_total and logged,
// and the pacer stays not ready until a call or ping succeeds.
func (p *Pacer) checkRedis(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := p.ping(pctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		p.m.redisErrors.WithLabelValues().Inc()
		p.log.Warn("redis not answering at start-up; not ready until it does", "redis", p.cfg.RedisName, "err", err)
		return
	}
	p.redisAnswered()
}

// Run consumes until ctx ends, then stops fetching, lets in-flight sends
// finish within Config.Drain, commits finished offsets and leaves the group.
// It returns nil after a clean shutdown, or the error that stopped it.
func (p *Pacer) Run(ctx context.Context) error {
	p.started = time.Now()
	sendCtx, cancelSends := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSends()
	p.sendCtx = sendCtx
	p.sendBy = newDeadlines(sendCtx, p.cfg.SendTimeout)
	if p.ping != nil {
		go p.checkRedis(sendCtx)
	}
	p.drainBy = newDeadlines(context.WithoutCancel(ctx), p.cfg.Drain)
	if p.camps != nil {
		p.camps.Start(sendCtx)
	}

	topics := []string{p.cfg.Topic}
	for i := range p.cfg.RetryDelays {
		topics = append(topics, p.cfg.retryTopic(i+1))
	}
	if p.lanes != nil {
		for n := 1; n <= park.LaneCount; n++ {
			topics = append(topics, p.cfg.laneTopic(n))
		}
	}
	opts := append([]kgo.Opt{}, p.kopts...)
	opts = append(opts,
		kgo.ConsumerGroup(p.cfg.Group),
		kgo.ConsumeTopics(topics...),
		// Range balances each topic on its own: every member gets its share
		// of the main topic (cooperative-sticky evens out the count over
		// the main and retry topics together, and could leave one member
		// all of the main topic and another only retry partitions). The
		// same partition numbers of the main and retry topics go to one
		// member, so a key's retries come back to the replica that paces it.
		kgo.Balancers(kgo.RangeBalancer()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(time.Second),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(p.assigned),
		kgo.OnPartitionsRevoked(p.revoked),
		kgo.OnPartitionsLost(p.lost),
		// 128 KiB per partition and fetch (about 1,300 envelopes of 100
		// bytes): what the fetches on their way when a full partition
		// pauses bring stays within maxHeld, rather than parked. A fetch
		// takes a few ms, so this still reads tens of MB/s per partition.
		kgo.FetchMaxPartitionBytes(128<<10),
		// A resumed partition joins the next fetch request: waiting 500 ms
		// for data, not 5 s, keeps a pause short.
		kgo.FetchMaxWait(500*time.Millisecond),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	)
	// The topics exist before the group is joined: a topic that appears
	// after the join makes the group rebalance, and the range balancer
	// revokes every partition to do so.
	admin, err := kgo.NewClient(p.kopts...)
	if err != nil {
		return fmt.Errorf("pacer: kafka client: %w", err)
	}
	err = p.ensureTopics(ctx, admin)
	admin.Close()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("pacer: kafka client: %w", err)
	}
	p.mu.Lock()
	p.cl = cl
	p.mu.Unlock()
	p.log.Info("pacer started", "topic", p.cfg.Topic, "group", p.cfg.Group,
		"rate", p.cfg.Limit.PerSecond, "burst", p.cfg.Limit.Burst, "owner", p.cfg.Owner,
		"redis_failure", p.cfg.RedisFailure, "unknown_outcome", p.cfg.UnknownOutcome)
	p.m.fallback.WithLabelValues().Set(0)
	go p.watch(ctx, "kafka", &p.kafkaOK, cl.Ping, nil)
	if p.ping != nil {
		ping := func(ctx context.Context) error {
			err := p.ping(ctx)
			if err == nil {
				p.redisAnswered()
			}
			return err
		}
		go p.watch(ctx, "redis", &p.redisOK, ping, func() { p.m.fallback.WithLabelValues().Set(0) })
	}
	go p.sweepLoop(ctx)
	go p.waitingLog(ctx)
	go p.overloadLoop(ctx)
	go p.releaseLoop(ctx, debug.FreeOSMemory)
	go p.lagLoop(ctx, cl, topics)
	if p.cfg.ProgressEvery > 0 {
		go p.progressLoop(ctx)
	}

	// Consuming from here: a replica whose partitions hold nothing (or that
	// has none) waits in PollRecords, and is ready all the same.
	p.setConsuming(true)
	p.started1.Do(func() { close(p.startedC) })
	for {
		fetches := cl.PollRecords(ctx, 10000)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			cl.AllowRebalance()
			break
		}
		fetches.EachError(func(t string, part int32, err error) {
			if !errors.Is(err, context.Canceled) {
				p.log.Warn("fetch error", "topic", t, "partition", part, "err", err)
			}
		})
		var fs []*fetched
		fetches.EachPartition(func(f kgo.FetchTopicPartition) {
			if len(f.Records) == 0 {
				return
			}
			if p.lanes != nil {
				p.lanesFetched(f)
			}
			p.mu.Lock()
			w := p.workers[tp{f.Topic, f.Partition}]
			p.mu.Unlock()
			if w != nil {
				fs = append(fs, &fetched{w: w, rs: f.Records, hwm: f.HighWatermark})
			}
		})
		p.horizons(ctx, fs)
		p.skipKnown(ctx, fs)
		for _, f := range fs {
			f.w.push(f.rs, f.skip, f.envs)
		}
		cl.AllowRebalance()
	}

	// Shutdown: stop fetching (done), let sends finish within Drain, commit.
	p.setConsuming(false)
	p.log.Info("shutting down: draining in-flight sends", "drain", p.cfg.Drain)
	ws := p.stopAll()
	commitCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.Drain)
	defer cancel()
	if p.camps != nil {
		p.camps.Flush(commitCtx)
	}
	p.marksWritten(commitCtx, ws)
	if err := cl.CommitMarkedOffsets(commitCtx); err != nil {
		p.log.Error("final commit failed; finished records will be re-delivered (the ledger skips delivered ones)", "err", err)
	} else {
		p.tightenHorizons(commitCtx, cl, ws)
	}
	cl.Close()
	p.log.Info("pacer stopped", p.tally.summary(time.Since(p.started))...)
	return nil
}

// ensureTopics creates the DLQ and retry topics when missing (a produce to
// a missing topic would stall the partition behind it). It retries until
// Config.StartupTimeout has passed, then returns a [*KafkaError] saying
// whether the seed brokers' names do not resolve, nothing listens there, or
// what else failed; ctx.Err() when ctx ends first.
func (p *Pacer) ensureTopics(ctx context.Context, cl *kgo.Client) error {
	deadline := time.Now().Add(p.cfg.StartupTimeout)
	for {
		n, err := produce.EnsureTopic(ctx, cl, p.cfg.Topic, 12)
		if err == nil {
			_, err = produce.EnsureTopic(ctx, cl, p.cfg.DLQTopic, 1)
		}
		for i := range p.cfg.RetryDelays {
			if err == nil {
				_, err = produce.EnsureTopic(ctx, cl, p.cfg.retryTopic(i+1), n)
			}
		}
		for i := 1; p.lanes != nil && i <= park.LaneCount; i++ {
			if err == nil {
				_, err = produce.EnsureTopic(ctx, cl, p.cfg.laneTopic(i), n)
			}
		}
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		cause, permanent := produce.KafkaCause(err)
		kerr := &KafkaError{Err: err, Cause: cause}
		if permanent { // credentials or certificates: retrying cannot help
			return kerr
		}
		if time.Now().After(deadline) {
			kerr.After = p.cfg.StartupTimeout
			return kerr
		}
		p.kafkaOK.Store(false)
		p.publishReady()
		p.log.Error("cannot reach Kafka to check the pacer's topics; retrying", "cause", kerr.Cause, "err", err,
			"gives_up_in", time.Until(deadline).Round(time.Second))
		if !tick.Sleep(ctx, 5*time.Second) {
			return ctx.Err()
		}
	}
}

// KafkaError is what [Pacer.Run] returns when Kafka could not be used at
// start-up within Config.StartupTimeout, or at once when [produce.KafkaCause] finds
// the failure permanent.
type KafkaError struct {
	Cause string        // from [produce.KafkaCause]: "a seed broker's host name does not resolve", "authentication failed", ...
	After time.Duration // how long Run tried; 0: not retried
	Err   error         // the last error
}

func (e *KafkaError) Error() string {
	if e.After == 0 {
		return fmt.Sprintf("pacer: kafka: %s: %s", e.Cause, strings.TrimPrefix(e.Err.Error(), "pacer: "))
	}
	return fmt.Sprintf("pacer: kafka: %s (gave up after %v): %s", e.Cause, e.After, strings.TrimPrefix(e.Err.Error(), "pacer: "))
}

func (e *KafkaError) Unwrap() error { return e.Err }

// watch pings a service every 5 s until ctx ends and keeps ok (and so
// /readyz) in step with the answers, logging each change once; up, if not
// nil, runs when the service answers again.
func (p *Pacer) watch(ctx context.Context, name string, ok *atomic.Bool, ping func(context.Context) error, up func()) {
	tick.Every(ctx, 5*time.Second, func(time.Time) {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if answered := err == nil; ok.Swap(answered) != answered {
			if answered {
				p.log.Info(name + " reachable again")
				if up != nil {
					up()
				}
			} else {
				p.log.Error(name+" unreachable; sends stop until it answers, nothing is dropped", "err", err)
			}
			p.publishReady()
		}
	})
}

func (p *Pacer) setConsuming(v bool) {
	p.consuming.Store(v)
	p.publishReady()
}

func (p *Pacer) publishReady() {
	v := 0.0
	if p.Ready() {
		v = 1
	}
	p.m.ready.WithLabelValues().Set(v)
}

// AssignWait is how long after start a pacer with no partitions yet says
// why it waits (see waitingLog).
const AssignWait = 10 * time.Second

// waitingLog logs once, AssignWait after start, that the consumer group has
// not assigned this process any partition yet, and the usual cause: a
// replica that stopped without leaving the group (a crash, a SIGKILL)
// holds its partitions until the group's session timeout, during which
// nothing of them is consumed.
func (p *Pacer) waitingLog(ctx context.Context) {
	if !tick.Sleep(ctx, AssignWait) || p.assigned1.Load() {
		return
	}
	p.log.Info("waiting for the consumer group to assign partitions: a replica that stopped without leaving (killed) keeps its partitions until its session timeout (PACER_KAFKA_SESSION_TIMEOUT); with more replicas than partitions some get none",
		"group", p.cfg.Group, "waited", AssignWait)
}

func (p *Pacer) assigned(_ context.Context, cl *kgo.Client, parts map[string][]int32) {
	if p.lanes != nil {
		// After p.mu is let go (deferred first, run last), before the
		// first fetch of parts.
		defer p.lanesAssigned(cl, parts)
	}
	p.assigned1.Store(true)
	p.mu.Lock()
	defer p.mu.Unlock()
	for topic, ps := range parts {
		for _, part := range ps {
			k := tp{topic, part}
			if p.workers[k] != nil {
				continue
			}
			w := newWorker(p, cl, k)
			p.workers[k] = w
			go w.run()
		}
	}
	// A partition paused by an earlier owner in this client must not stay
	// paused: franz-go keeps pause state across rebalances.
	cl.ResumeFetchPartitions(parts)
	p.m.partitions.WithLabelValues().Set(float64(len(p.workers)))
	p.log.Info("partitions assigned", "partitions", fmt.Sprint(parts))
}

func (p *Pacer) revoked(ctx context.Context, cl *kgo.Client, parts map[string][]int32) {
	ws := p.stop(parts, true) // parks held records, on lanes too
	if p.lanes != nil {
		p.lanesRevoked(parts)
	}
	p.marksWritten(ctx, ws)
	if err := cl.CommitMarkedOffsets(ctx); err != nil {
		p.log.Warn("commit on revoke failed; finished records will be re-delivered", "err", err)
	} else {
		p.tightenHorizons(ctx, cl, ws)
	}
	p.log.Info("partitions revoked", "partitions", fmt.Sprint(parts))
}

// marksWait bounds how long a revoke or a shutdown waits for the ledger's
// marks before its commit: a flush takes a round trip (20 ms apart by
// default).
const marksWait = time.Second

// marksWritten waits until the ledger's marks made so far are written and
// marks the heads of ws, stopped workers, for commit: a commit must not
// pass a delivered mark still waiting for its flush, or a crash then would
// leave the record committed, never read again, with no mark (its
// campaign never reaches remaining 0).
// It waits marksWait at most (less if ctx ends first): a record whose mark
// is not written by then is left out of the commit that follows, and read
// again by the partition's next owner, which skips it once the mark is
// written (the ledger writes what waits at exit). So a Redis that does not
// answer costs a shutdown or a rebalance marksWait, not PACER_DRAIN more.
func (p *Pacer) marksWritten(ctx context.Context, ws []*worker) {
	if len(ws) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, marksWait)
	defer cancel()
	// The heads as they are now: their marks were made before Written
	// (a worker past its drain may finish more meanwhile).
	heads := make([]*kgo.Record, len(ws))
	for i, w := range ws {
		heads[i] = w.commitHead()
	}
	if err := p.ledger.Written(ctx); err != nil {
		p.log.Warn("idempotency ledger: marks not written before the commit; their records will be read again", "err", err)
		return
	}
	if err := p.outcomesAcked(ctx); err != nil {
		p.log.Warn("outcome records not acknowledged before the commit; their records will be read again", "err", err)
		return
	}
	for i, w := range ws {
		if heads[i] != nil {
			w.cl.MarkCommitRecords(heads[i])
		}
	}
}

func (p *Pacer) lost(_ context.Context, _ *kgo.Client, parts map[string][]int32) {
	p.stop(parts, false)
	if p.lanes != nil {
		p.lanesRevoked(parts)
	}
	p.log.Warn("partitions lost", "partitions", fmt.Sprint(parts))
}

// stop ends the workers of parts, waits for them and returns them; an
// in-flight send finishes (bounded by SendTimeout and Drain). With handover
// (a revoke: the partitions are still ours until it returns) their held
// records are parked first, see [worker.parkHeld].
func (p *Pacer) stop(parts map[string][]int32, handover bool) []*worker {
	var ws []*worker
	p.mu.Lock()
	for topic, ps := range parts {
		for _, part := range ps {
			if w := p.workers[tp{topic, part}]; w != nil {
				ws = append(ws, w)
				delete(p.workers, tp{topic, part})
			}
		}
	}
	p.m.partitions.WithLabelValues().Set(float64(len(p.workers)))
	p.mu.Unlock()
	p.waitWorkers(ws, handover)
	return ws
}

// stopAll stops every worker as [Pacer.stop] does (with handover) and
// returns them.
func (p *Pacer) stopAll() []*worker {
	p.mu.Lock()
	ws := make([]*worker, 0, len(p.workers))
	for k, w := range p.workers {
		ws = append(ws, w)
		delete(p.workers, k)
	}
	p.m.partitions.WithLabelValues().Set(0)
	p.mu.Unlock()
	p.waitWorkers(ws, true)
	return ws
}

func (p *Pacer) waitWorkers(ws []*worker, handover bool) {
	for _, w := range ws {
		w.handover.Store(handover)
		w.cancel()
	}
	deadline := time.NewTimer(p.cfg.Drain)
	defer deadline.Stop()
	for _, w := range ws {
		select {
		case <-w.done:
		case <-deadline.C:
			p.log.Warn("drain timeout: abandoning in-flight sends; their records will be re-delivered")
			return
		}
	}
}

// MinLedgerTTL is the shortest IdempotencyTTL that delays allows: a
// delivered record stays uncommitted, and may be read again after a crash,
// while a record ahead of it on a retry topic waits out its delay (the
// longest, +20% jitter); a minute more covers a rebalance, MaxTokenWait,
// SendTimeout and Drain; 5 minutes at least. 7m for the default delays
// (5s, 30s, 5m).
func MinLedgerTTL(delays []time.Duration) time.Duration {
	longest := time.Duration(0)
	for _, d := range delays {
		longest = max(longest, d)
	}
	return max(5*time.Minute, longest*6/5+time.Minute)
}
