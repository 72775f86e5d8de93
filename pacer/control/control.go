// Package control holds what an operator changes while Pacer runs, in
// Redis: per-key limits (a pacing key's ceiling) and campaign states
// (paused, cancelled) with per-campaign counters. Every running pacer reads
// them, so a change reaches every replica without a restart. Key names come
// from [bucket.Keys]: Limit and Campaign. A key's [Policy] (its limits and
// adaptation settings, as the consumer and the status page apply them) is
// here too: [OverridePolicy] is the configured one with the operator's
// per-key limit over it.
package control

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/internal/wire"
	"github.com/pacerhq/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// Store reads and writes the run-time controls of one Redis prefix. It is
// safe for concurrent use.
type Store struct {
	rdb  redis.UniversalClient
	keys bucket.Keys
}

// New returns the Store of rdb under keys (use the Limiter's, so the names
// share its prefix).
func New(rdb redis.UniversalClient, keys bucket.Keys) *Store { return &Store{rdb: rdb, keys: keys} }

// KeyLimit is a limit set for one pacing key. Burst 0 means the channel's
// configured burst.
type KeyLimit struct {
	Key       string
	PerSecond float64 // msgs/s, > 0
	Burst     int     // tokens, >= 0 (0: the channel's)
}

// MinKeyRate is the lowest per-key rate accepted, in msgs/s: one message a
// day. Anything slower is not a pace but a stop (pause the campaign).
const MinKeyRate = 1.0 / 86400

// MaxKeyRate is the highest per-key rate accepted, in msgs/s: the highest
// ceiling a pacer's AIMD accepts ([adapt.MaxRate]); a pacer refuses a
// higher one and keeps the key's last limit.
const MaxKeyRate = adapt.MaxRate

// MaxKeyBurst is the largest per-key burst accepted, in messages: the
// largest capacity a token bucket holds (package bucket's [bucket.Limit]:
// Burst 1 to 10^9, counted in millionths exact below 2^53), which is one
// second at [MaxKeyRate].
const MaxKeyBurst = 1_000_000_000

// maxKeyRefill is the longest a key's bucket may take to refill from
// empty, burst / rate: the bucket's own bound ([bucket.Limit.Validate]).
const maxKeyRefill = 100 * 365 * 24 * time.Hour

// ErrInvalid wraps the reason a limit or campaign state is refused.
var ErrInvalid = errors.New("control: invalid value")

// Validate reports what is wrong with l, naming the field (key, rate or
// burst): rate must be finite and > 0, burst 0 (the channel's) or within
// [bucket.Limit.Validate]'s bounds for the rate; and rate at least
// [MinKeyRate] and at most [MaxKeyRate].
func (l KeyLimit) Validate() error {
	if strings.TrimSpace(l.Key) == "" {
		return fmt.Errorf("%w: key is required", ErrInvalid)
	}
	if !(l.PerSecond > 0) || math.IsInf(l.PerSecond, 1) {
		return fmt.Errorf("%w: rate %v must be a finite number > 0 (msgs/s)", ErrInvalid, l.PerSecond)
	}
	if l.PerSecond < MinKeyRate {
		return fmt.Errorf("%w: rate %v is below one message a day (%.6g msgs/s)", ErrInvalid, l.PerSecond, MinKeyRate)
	}
	if l.PerSecond > MaxKeyRate {
		return fmt.Errorf("%w: rate %v is above the highest a pacer accepts (%.6g msgs/s)", ErrInvalid, l.PerSecond, MaxKeyRate)
	}
	if l.Burst < 0 {
		return fmt.Errorf("%w: burst %d must be >= 1 (or 0 for the channel's)", ErrInvalid, l.Burst)
	}
	if l.Burst > MaxKeyBurst {
		return fmt.Errorf("%w: burst %d is above the highest a pacer accepts (%d messages)", ErrInvalid, l.Burst, MaxKeyBurst)
	}
	if refill := float64(l.Burst) / l.PerSecond; refill > maxKeyRefill.Seconds() {
		return fmt.Errorf("%w: burst %d takes longer than 100 years to refill at %v msgs/s: at most %.0f at that rate", ErrInvalid, l.Burst, l.PerSecond, math.Floor(l.PerSecond*maxKeyRefill.Seconds()))
	}
	if err := (bucket.Limit{PerSecond: l.PerSecond, Burst: max(l.Burst, 1)}).Validate(); err != nil {
		return fmt.Errorf("%w: burst: %v", ErrInvalid, err)
	}
	return nil
}

// Limit returns the limit set for key of channel; ok is false when none is.
// One HGETALL.
func (s *Store) Limit(ctx context.Context, channel, key string) (l KeyLimit, ok bool, err error) {
	m, err := s.rdb.HGetAll(ctx, s.keys.Limit(channel, key)).Result()
	if err != nil || len(m) == 0 {
		return KeyLimit{}, false, err
	}
	return parseLimit(key, m)
}

func parseLimit(key string, m map[string]string) (KeyLimit, bool, error) {
	rate, err1 := strconv.ParseFloat(m["rate"], 64)
	burst, err2 := strconv.Atoi(m["burst"])
	l := KeyLimit{Key: key, PerSecond: rate, Burst: burst}
	if err := errors.Join(err1, err2); err != nil {
		return KeyLimit{}, false, fmt.Errorf("%w: stored limit of %s: %v", ErrInvalid, key, err)
	}
	return l, true, nil
}

// LimitsOf returns the limits set for keys of channel, by key (a key
// without one is absent): one pipelined HGETALL per key, one round trip (one
// per master holding some of them, on a cluster). A stored limit that cannot
// be read is absent and its error is returned in bad, by key, with the
// others; err is a Redis error.
func (s *Store) LimitsOf(ctx context.Context, channel string, keys []string) (limits map[string]KeyLimit, bad map[string]error, err error) {
	if len(keys) == 0 {
		return nil, nil, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.HGetAll(ctx, s.keys.Limit(channel, k))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, nil, err
	}
	limits = map[string]KeyLimit{}
	for i, c := range cmds {
		if len(c.Val()) == 0 {
			continue
		}
		l, _, err := parseLimit(keys[i], c.Val())
		if err != nil {
			if bad == nil {
				bad = map[string]error{}
			}
			bad[keys[i]] = err
			continue
		}
		limits[keys[i]] = l
	}
	return limits, bad, nil
}

// SetLimit stores l for its key of channel and returns the one it replaced
// (had false when none). The pacers apply it at their next refresh of the
// key (within about a second).
func (s *Store) SetLimit(ctx context.Context, channel string, l KeyLimit) (old KeyLimit, had bool, err error) {
	if err := l.Validate(); err != nil {
		return KeyLimit{}, false, err
	}
	old, had, err = s.Limit(ctx, channel, l.Key)
	if err != nil && !errors.Is(err, ErrInvalid) {
		return KeyLimit{}, false, err
	}
	err = s.rdb.HSet(ctx, s.keys.Limit(channel, l.Key), "rate", strconv.FormatFloat(l.PerSecond, 'g', -1, 64),
		"burst", l.Burst, "set_at", time.Now().UTC().Format(time.RFC3339)).Err()
	return old, had, err
}

// UnsetLimit removes key's limit; the channel's configured one applies
// again. It returns the removed one (had false when none was set).
func (s *Store) UnsetLimit(ctx context.Context, channel, key string) (old KeyLimit, had bool, err error) {
	old, had, err = s.Limit(ctx, channel, key)
	if err != nil && !errors.Is(err, ErrInvalid) {
		return KeyLimit{}, false, err
	}
	return old, had, s.rdb.Del(ctx, s.keys.Limit(channel, key)).Err()
}

// Limits lists every key of channel with a limit set, sorted by key (a SCAN
// of every master of a cluster).
func (s *Store) Limits(ctx context.Context, channel string) ([]KeyLimit, error) {
	pattern := s.keys.Limit(channel, "*")
	var names []string
	var mu sync.Mutex
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			names = append(names, it.Val())
			mu.Unlock()
		}
		return it.Err()
	}
	var err error
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		return nil, fmt.Errorf("control: cannot list keys on a %T", s.rdb)
	}
	if err != nil {
		return nil, err
	}
	prefix, suffix := s.keys.Limit(channel, "\x00"), ""
	prefix, suffix, _ = strings.Cut(prefix, "\x00")
	var out []KeyLimit
	for _, n := range names {
		key := strings.TrimSuffix(strings.TrimPrefix(n, prefix), suffix)
		l, ok, err := s.Limit(ctx, channel, key)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, l)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// State is a campaign's operator state.
type State string

const (
	Running   State = ""          // no control: its records are sent
	Paused    State = "paused"    // its records wait, without an attempt
	Cancelled State = "cancelled" // its records go to the DLQ with reason cancelled
)

// ParseState reads "running", "paused" or "cancelled".
func ParseState(s string) (State, error) {
	switch s {
	case "", "running":
		return Running, nil
	case "paused":
		return Paused, nil
	case "cancelled":
		return Cancelled, nil
	}
	return "", fmt.Errorf("%w: campaign state %q (running, paused or cancelled)", ErrInvalid, s)
}

// SetState sets campaign's state and returns the previous one. One HGET
// and one HSET.
func (s *Store) SetState(ctx context.Context, channel, campaign string, st State) (old State, err error) {
	if campaign == "" {
		return "", fmt.Errorf("%w: campaign is required", ErrInvalid)
	}
	k := s.keys.Campaign(channel, campaign)
	v, err := s.rdb.HGet(ctx, k, "state").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", err
	}
	pipe := s.rdb.Pipeline()
	if st == Running {
		pipe.HDel(ctx, k, "state")
	} else {
		pipe.HSet(ctx, k, "state", string(st))
	}
	s.touch(ctx, pipe, channel, time.Now(), campaign)
	_, err = pipe.Exec(ctx)
	return State(v), err
}

// MaxIndexed is how many campaigns a channel's index keeps (the most
// recently active); an older one keeps its counters but leaves the index
// (and the status page).
const MaxIndexed = 10_000

// touch adds to pipe the commands that mark campaigns active at now in the
// channel's index and trim it to MaxIndexed.
func (s *Store) touch(ctx context.Context, pipe redis.Pipeliner, channel string, now time.Time, campaigns ...string) {
	if len(campaigns) == 0 {
		return
	}
	idx := s.keys.Campaigns(channel)
	zs := make([]redis.Z, len(campaigns))
	for i, c := range campaigns {
		zs[i] = redis.Z{Score: float64(now.UnixMilli()), Member: c}
	}
	pipe.ZAdd(ctx, idx, zs...)
	pipe.ZRemRangeByRank(ctx, idx, 0, -MaxIndexed-1)
}

// States returns the states of campaigns, in order: one pipelined HGET per
// campaign, one round trip (one slot: the channel's hash tag).
func (s *Store) States(ctx context.Context, channel string, campaigns []string) ([]State, error) {
	if len(campaigns) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(campaigns))
	for i, c := range campaigns {
		cmds[i] = pipe.HGet(ctx, s.keys.Campaign(channel, c), "state")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]State, len(campaigns))
	for i, c := range cmds {
		out[i] = State(c.Val())
	}
	return out, nil
}

// Counts are a batch of one campaign's outcomes to add: Delivered,
// dead-lettered by reason, and Duplicates (records skipped because their
// id was delivered or dead-lettered by another record published before
// them: a publish of the same ids again); First and Last are the Unix ms of
// the batch's first and last delivery (0 when none).
type Counts struct {
	Delivered   int64
	DeadLetters map[string]int64
	Duplicates  int64
	First, Last int64
}

// Add adds batches of counts, by campaign, under a token of its own (see
// [Store.AddTo]): one round trip. A campaign refused (its key holds
// another type than a hash) is named in the error; the others are added.
func (s *Store) Add(ctx context.Context, channel string, counts map[string]*Counts) error {
	refused, err := s.AddBatch(ctx, channel, rand.Text(), counts)
	if err != nil {
		return err
	}
	if len(refused) > 0 {
		return fmt.Errorf("control: counts of campaigns %s not added: their keys hold another type than a hash", strings.Join(refused, ", "))
	}
	return nil
}

// AddBatch adds a batch of counts, by campaign, under token (see
// [Store.AddTo]): one round trip. It returns the campaigns refused (their
// key holds another type than a hash: nothing of theirs added, send them
// again under a new token) and err when the call failed or its answer was
// lost, Redis having added the batch or not: send the same batch again
// under the same token, and it is added once.
func (s *Store) AddBatch(ctx context.Context, channel, token string, counts map[string]*Counts) (refused []string, err error) {
	if len(counts) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	result := s.AddTo(ctx, pipe, channel, token, counts)
	_, _ = pipe.Exec(ctx)
	return result()
}

// CountTokenTTL is how long Redis keeps the token of a batch of counts
// added by [Store.AddTo]: the same batch sent again under its token within
// it (its answer was lost though Redis applied it) adds nothing. The
// ledger's Batcher sends a failed flush's counts again within its back-off
// of at most 1 s while Redis answers; beyond CountTokenTTL of Redis not
// answering, a batch applied before that silence may be added twice.
const CountTokenTTL = 15 * time.Minute

// AddTo adds to pipe, without running it, the writes of a batch of counts,
// by campaign: one campaign_count.lua call in the channel's slot (HINCRBY
// per counter, HSETNX first_ms, HSET last_ms unless later, and the
// campaigns' entries in the channel's index), so a pacer adding its counts
// with its idempotency ledger's flush costs Redis one call per channel per
// flush, whatever the message rate. token (non-empty, e.g. 128 random
// bits) names the batch: Redis adds a token's batch once, keeping the
// token [CountTokenTTL], so a batch whose answer was lost is sent again
// under the same token and not added twice.
//
// Once pipe ran, result returns refused, the campaigns whose key holds
// another type than a hash (nothing of theirs added: send their counts
// again in a later batch, under a new token), and err, set when the call
// failed or its answer was lost (Redis may or may not have added the
// batch: send the same batch again under the same token). After a NOSCRIPT
// (Redis restarted, or its script cache flushed) result runs the script
// with its text, which loads it: one more round trip.
func (s *Store) AddTo(ctx context.Context, pipe redis.Pipeliner, channel, token string, counts map[string]*Counts) (result func() (refused []string, err error)) {
	if len(counts) == 0 {
		return func() ([]string, error) { return nil, nil }
	}
	names := make([]string, 0, len(counts))
	for c := range counts {
		names = append(names, c)
	}
	sort.Strings(names)
	keys := []string{s.keys.CountToken(channel, token), s.keys.Campaigns(channel)}
	argv := []any{CountTokenTTL.Milliseconds(), time.Now().UnixMilli(), MaxIndexed}
	for _, c := range names {
		n := counts[c]
		keys = append(keys, s.keys.Campaign(channel, c))
		reasons := make([]string, 0, len(n.DeadLetters))
		for r := range n.DeadLetters {
			reasons = append(reasons, r)
		}
		sort.Strings(reasons)
		argv = append(argv, c, n.Delivered, n.First, n.Last, n.Duplicates, len(reasons))
		for _, r := range reasons {
			argv = append(argv, r, n.DeadLetters[r])
		}
	}
	cmd := pipe.EvalSha(ctx, countScript.Hash(), keys, argv...)
	return func() ([]string, error) {
		v, err := cmd.Result()
		if wire.NoScript(err) {
			// Not run: run it with its text, which loads it (one more
			// round trip, as the ledger's flush does).
			v, err = s.rdb.Eval(ctx, lua.CampaignCount, keys, argv...).Result()
		}
		if err != nil {
			return nil, fmt.Errorf("control: counts of %d campaigns: %w", len(names), err)
		}
		reply, _ := v.([]any)
		if len(reply) == 0 {
			return nil, fmt.Errorf("control: counts of %d campaigns: unexpected reply %v", len(names), v)
		}
		var refused []string
		for _, p := range reply[1:] {
			i, ok := p.(int64)
			if !ok || i < 1 || int(i) > len(names) {
				return nil, fmt.Errorf("control: counts of %d campaigns: unexpected reply %v", len(names), v)
			}
			refused = append(refused, names[i-1])
		}
		return refused, nil
	}
}

// countScript adds a batch of counts once per token (campaign_count.lua).
var countScript = redis.NewScript(lua.CampaignCount)

// AddPublished adds the records published per campaign (by pacer publish
// or the ingest API, once Kafka acknowledged them): one pipelined round
// trip, an HINCRBY per campaign plus the index. Campaign names must be
// non-empty; counts <= 0 are skipped.
func (s *Store) AddPublished(ctx context.Context, channel string, byCampaign map[string]int64) error {
	pipe := s.rdb.Pipeline()
	var names []string
	for c, n := range byCampaign {
		if c == "" || n <= 0 {
			continue
		}
		names = append(names, c)
		pipe.HIncrBy(ctx, s.keys.Campaign(channel, c), "published", n)
	}
	if len(names) == 0 {
		return nil
	}
	s.touch(ctx, pipe, channel, time.Now(), names...)
	_, err := pipe.Exec(ctx)
	return err
}

// Status is a campaign's progress as the pacers counted it.
type Status struct {
	Campaign  string `json:"campaign"`
	State     string `json:"state"`     // running, paused or cancelled; done: running with Published > 0 and Remaining 0
	Published int64  `json:"published"` // records written, an id written again counting again; -1 when unknown (not published through pacer publish or ingest)
	// Messages is the campaign's distinct messages (ids) as far as the
	// pacers have seen: Published less Duplicates, the records of an id
	// published again that the pacer skipped. A record published again
	// counts in Published at once and in Duplicates once the pacer reaches
	// it, so Messages is exact once Remaining is 0 (and above it until
	// then); -1 when Published is unknown.
	Messages    int64            `json:"messages"`
	Delivered   int64            `json:"delivered"`    // accepted by the provider
	DeadLetters map[string]int64 `json:"dead_letters"` // by reason
	Duplicates  int64            `json:"duplicates"`   // skipped: published again after their id was delivered or dead-lettered
	Remaining   int64            `json:"remaining"`    // published - delivered - dead-lettered - duplicates, at least 0; -1 when published is unknown
	Rate        float64          `json:"rate"`         // msgs/s between the first and the last delivery
	ETASeconds  *float64         `json:"eta_seconds"`  // remaining / rate, s; nil (JSON null) when none: see [Status.ETA]
	First       time.Time        `json:"first_delivery,omitzero"`
	Last        time.Time        `json:"last_delivery,omitzero"`
	LastActive  time.Time        `json:"last_active,omitzero"` // Recent and TenantCampaigns only: its score in the channel's index
	// Tenant is the ingest API's tenant that owns the campaign (the first
	// to publish to it); empty for one published outside the API.
	Tenant string `json:"tenant,omitempty"`

	// The outcomes providers reported after accepting its messages
	// (package webhook, [Store.CountOutcomes]), each message counted once
	// per kind: DeviceDelivered (WhatsApp delivered or read, SendGrid
	// delivered or open), Read (WhatsApp read, SendGrid open), and by
	// reason Failed (WhatsApp failed, by error code; SendGrid dropped),
	// Bounced (SendGrid bounce, by type) and Suppressed (the recipients
	// its outcomes suppressed, by suppression reason). Maps are never nil.
	DeviceDelivered int64            `json:"device_delivered"`
	Read            int64            `json:"read"`
	Failed          map[string]int64 `json:"failed"`
	Bounced         map[string]int64 `json:"bounced"`
	Suppressed      map[string]int64 `json:"suppressed"`
}

// Known reports whether Redis holds anything of campaign on channel: a
// state, a counter (published, delivered, dead-lettered, duplicates). One
// EXISTS.
func (s *Store) Known(ctx context.Context, channel, campaign string) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.keys.Campaign(channel, campaign)).Result()
	return n > 0, err
}

// CampaignStatus reads campaign's state and counters: one HGETALL.
func (s *Store) CampaignStatus(ctx context.Context, channel, campaign string) (Status, error) {
	m, err := s.rdb.HGetAll(ctx, s.keys.Campaign(channel, campaign)).Result()
	if err != nil {
		return Status{}, err
	}
	return parseStatus(campaign, m), nil
}

// Recent returns the statuses of the channel's campaigns last active at or
// after since, most recently active first, at most n of them (n <= 0: 100):
// one ZREVRANGEBYSCORE and one pipelined HGETALL per campaign, all in the
// channel's slot.
func (s *Store) Recent(ctx context.Context, channel string, since time.Time, n int) ([]Status, error) {
	if n <= 0 {
		n = 100
	}
	zs, err := s.rdb.ZRevRangeByScoreWithScores(ctx, s.keys.Campaigns(channel), &redis.ZRangeBy{
		Min: strconv.FormatInt(since.UnixMilli(), 10), Max: "+inf", Count: int64(n)}).Result()
	if err != nil || len(zs) == 0 {
		return nil, err
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(zs))
	for i, z := range zs {
		cmds[i] = pipe.HGetAll(ctx, s.keys.Campaign(channel, fmt.Sprint(z.Member)))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	out := make([]Status, len(zs))
	for i, c := range cmds {
		out[i] = parseStatus(fmt.Sprint(zs[i].Member), c.Val())
		out[i].LastActive = time.UnixMilli(int64(zs[i].Score)).UTC()
	}
	return out, nil
}

// parseStatus reads a campaign's hash.
func parseStatus(campaign string, m map[string]string) Status {
	st := Status{Campaign: campaign, State: m["state"], Tenant: m["tenant"], Published: -1, Remaining: -1, DeadLetters: map[string]int64{},
		Failed: map[string]int64{}, Bounced: map[string]int64{}, Suppressed: map[string]int64{}}
	if st.State == "" {
		st.State = "running"
	}
	num := func(f string) int64 { n, _ := strconv.ParseInt(m[f], 10, 64); return n }
	if _, ok := m["published"]; ok {
		st.Published = num("published")
	}
	st.Delivered = num("delivered")
	st.Duplicates = num("duplicates")
	st.DeviceDelivered = num(DeviceDelivered)
	st.Read = num(Read)
	dead := int64(0)
	for f := range m {
		kind, r, ok := strings.Cut(f, ":")
		if !ok {
			continue
		}
		switch kind {
		case "dlq":
			st.DeadLetters[r] = num(f)
			dead += num(f)
		case Failed:
			st.Failed[r] = num(f)
		case Bounced:
			st.Bounced[r] = num(f)
		case Suppressed:
			st.Suppressed[r] = num(f)
		}
	}
	if f, l := num("first_ms"), num("last_ms"); f > 0 && l > 0 {
		st.First, st.Last = time.UnixMilli(f).UTC(), time.UnixMilli(l).UTC()
		if l > f && st.Delivered > 1 {
			st.Rate = float64(st.Delivered-1) / (float64(l-f) / 1000)
		}
	}
	st.Messages = -1
	if st.Published >= 0 {
		st.Messages = max(st.Published-st.Duplicates, 0)
		st.Remaining = max(st.Published-st.Delivered-dead-st.Duplicates, 0)
		// Everything published is accounted for: a running campaign is done
		// (running again if more of it is published).
		if st.State == "running" && st.Remaining == 0 && st.Published > 0 {
			st.State = "done"
		}
	}
	st.ETASeconds = st.ETA()
	return st
}

// ETA returns the seconds left to deliver s's remaining records at its
// achieved rate (Remaining / Rate), 0 once nothing remains, or nil when
// there is none: published unknown, no rate yet (fewer than two
// deliveries), or the campaign paused or cancelled. It is the one source
// of a campaign's ETA: `pacer campaign status` (text and --json) and the
// status page (/status.json) show Status.ETASeconds, which it sets; nil is
// null in their JSON.
func (s Status) ETA() *float64 {
	var eta float64
	switch {
	case s.Remaining < 0:
		return nil
	case s.Remaining == 0:
	case (s.State == "running" || s.State == "") && s.Rate > 0:
		eta = float64(s.Remaining) / s.Rate
	default:
		return nil
	}
	return &eta
}
