// Package ledger is the idempotency ledger of envelope ids, kept in Redis
// beside the pacing key's bucket: an id is claimed before its send and
// marked delivered after it, so a record Kafka delivers again is not sent
// twice; an id whose outcome is unknown (a claim left by a process that
// died mid-send) is marked dead-lettered once its DLQ copy is written, so
// it is not dead-lettered again. Its keys come from the [bucket.Keys] of
// the limiter, so a claim always reads that limiter's cooldown.
package ledger

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/wire"
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
	// DeadLettered: the id was dead-lettered while claimed (its DLQ copy
	// is written, [Ledger.DeadLettered]); do not send it, and do not
	// dead-letter it again. A forced claim takes it over instead.
	DeadLettered
	// Suppressed: the claim's recipient ([Recipient]) is suppressed for
	// its pacing key (package suppress); nothing was claimed. Do not send:
	// dead-letter it with the reason ([PendingClaim.Suppression]).
	Suppressed
	// PairLimited: the claim's pair ([Recipient].Pair) has no turn free;
	// nothing was claimed. The duration answered is the wait for the
	// pair's next turn: claim again no sooner.
	PairLimited
)

var claimNames = [...]string{ClaimUnknown: "unknown", Claimed: "claimed", Delivered: "delivered",
	Abandoned: "abandoned", CoolingDown: "cooldown", DeadLettered: "dead-lettered", Suppressed: "suppressed", PairLimited: "pair-limited"}

func (c ClaimResult) String() string { return enumName(claimNames[:], int(c), "claim") }

// State is what the ledger holds for an id ([Ledger.Lookup]). The zero
// value, [StateUnknown], is what a failed read answers.
type State int

const (
	// StateUnknown: the read failed; nothing is known of the id.
	StateUnknown State = iota
	// StateNone: the ledger holds nothing for the id.
	StateNone
	// StateClaimed: claimed, no outcome recorded.
	StateClaimed
	// StateDelivered: delivered; final.
	StateDelivered
	// StateDeadLettered: dead-lettered while claimed (see [DeadLettered]).
	StateDeadLettered
)

var stateNames = [...]string{StateUnknown: "unknown", StateNone: "none", StateClaimed: "claimed",
	StateDelivered: "delivered", StateDeadLettered: "dead-lettered"}

func (s State) String() string { return enumName(stateNames[:], int(s), "state") }

// enumName is names[i], or "kind(i)" for an i it has no name for.
func enumName(names []string, i int, kind string) string {
	if i >= 0 && i < len(names) {
		return names[i]
	}
	return fmt.Sprintf("%s(%d)", kind, i)
}

// parseState reads ledger.lua's reply s to a read ("q").
func parseState(s string) State {
	switch s {
	case "none":
		return StateNone
	case "claimed":
		return StateClaimed
	case "delivered":
		return StateDelivered
	case "deadlettered":
		return StateDeadLettered
	}
	return StateUnknown
}

// Ref names one id of [Ledger.Lookup]: its channel, pacing key and
// envelope id.
type Ref struct{ Channel, Key, ID string }

var ledgerScript = redis.NewScript(lua.Ledger)

// DefaultTTL is how long a ledger entry is seen when no TTL is given.
const DefaultTTL = 7 * time.Minute

// generations is how many generations a TTL spans: an entry is written to
// the current generation's hash and read from it and the generations
// before it, so it is seen for at least TTL and kept at most TTL + one
// generation (1.25 x TTL).
const generations = 4

// Ledger is the idempotency record of envelope ids: claimed before a send,
// marked delivered after it, so a record Kafka delivers again is not sent
// twice. A Ledger is safe for concurrent use.
//
// Layout (lua/ledger.lua): ids are fields of one Redis hash per generation
// of TTL/4 of Redis TIME; an entry goes to the current generation's hash,
// which expires when the fourth generation after it ends, and is read from
// the current hash and the 4 before it. So an entry is seen for at least
// TTL and its memory is freed at most TTL + TTL/4 after it was written,
// with no per-id key and no per-id command: a flush of many operations
// writes one HSET and one PEXPIREAT per hash, whatever its size. Without
// Redis Cluster the hash is the channel's ([bucket.Keys].ChannelIDs, field
// "<pacing key>\n<id>": a pacing key holds no control character); under
// Redis Cluster it is the pacing key's ([bucket.Keys].IDs, field "<id>"),
// in the slot of the cooldown a claim reads.
type Ledger struct {
	rdb     redis.Cmdable
	keys    bucket.Keys
	ttl     time.Duration
	genMs   int64
	cluster bool
}

// New returns a Ledger over rdb whose entries are seen for ttl at least
// (0 or less means [DefaultTTL]; generations of ttl/4 rounded up to a
// millisecond) and freed at most ttl + ttl/4 (plus 4 ms of rounding) after
// they were written. It names its keys, and reads the pacing key's
// cooldown, with keys: pass the [bucket.Limiter.Keys] of the limiter whose
// cooldowns a claim must honour.
func New(rdb redis.Cmdable, keys bucket.Keys, ttl time.Duration) *Ledger {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	_, cluster := rdb.(*redis.ClusterClient)
	return &Ledger{rdb: rdb, keys: keys, ttl: ttl, genMs: max((ttl.Milliseconds()+generations-1)/generations, 1), cluster: cluster}
}

// TTL returns how long an entry is seen at least.
func (l *Ledger) TTL() time.Duration { return l.ttl }

// op is one operation of ledger.lua: kind 'd' (delivered, arg the provider
// id), 'x' (dead-lettered, arg the reason), 'r' (release, arg the owner), 'c' or 'f' (claim, forced claim, arg
// the owner), 'q' (read), 'a' (an attempt, arg "<outcome> <code>", see
// history.go) or 'h' (read with the attempts).
type op struct {
	kind             byte
	channel, key, id string
	arg              string
	to               Recipient // 'c' and 'f': the recipient checked for suppression
	campaign         string    // 'd': the id's campaign, kept with its provider id ("" none)
}

// Recipient is the recipient a claim checks in its pacing key's
// suppressions ([bucket.Keys].Suppressed), and whose pair limit it takes a
// turn of, in the same script call: Hash is the recipient's hash as
// package suppress names it ("" checks nothing), Marketing whether the
// message is a marketing one (entries for marketing messages only apply to
// it). Pair, if not the zero [Pair], is the limit of the pair (pacing key,
// Hash) a new claim or a takeover takes a turn of ([bucket.Keys].PairLimit,
// answered [PairLimited] when none is free); NoSuppression leaves the
// suppressions unread (the pair limit alone).
type Recipient struct {
	Hash          string
	Marketing     bool
	Pair          Pair
	NoSuppression bool
}

// arg is the recipient's operation argument in ledger.lua: what its
// suppression check reads.
func (r Recipient) arg() string {
	switch {
	case r.Hash == "" || r.NoSuppression:
		return ""
	case r.Marketing:
		return "m" + r.Hash
	}
	return r.Hash
}

// paired reports whether a claim for r takes a pair turn.
func (r Recipient) paired() bool { return r.Hash != "" && !r.Pair.Off() }

// group names the hash family of channel and key: the channel's, or the
// pacing key's under Redis Cluster. Operations of one group go in one call.
func (l *Ledger) group(channel, key string) string {
	if l.cluster {
		return channel + "\n" + key
	}
	return channel
}

// field is the hash field of an id.
func (l *Ledger) field(key, id string) string {
	if l.cluster {
		return id
	}
	return key + "\n" + id
}

// providerField is the hash field that holds the envelope id of
// providerID: an envelope id holds no control character, so "\x01" before
// it names no id's field.
func (l *Ledger) providerField(key, providerID string) string { return l.field(key, "\x01"+providerID) }

// args returns the KEYS and ARGV of one ledger.lua call of ops, all of one
// group, at now: the cooldown keys of the claims' pacing keys, their
// suppression hashes in the same order, the pair keys of the claims'
// pairs, then the generation hashes.
func (l *Ledger) args(ops []op, now time.Time) ([]string, []any) {
	ch, key := ops[0].channel, ops[0].key
	coolIdx, pairIdx := map[string]int{}, map[string]int{}
	var keys, sup, pairKeys []string
	var limits []any
	opv := make([]any, 0, 6*len(ops))
	for _, o := range ops {
		ci, to, pi := 0, "", 0
		if o.kind == 'c' || o.kind == 'f' {
			ck := l.keys.Cooldown(o.channel, o.key)
			i, ok := coolIdx[ck]
			if !ok {
				keys = append(keys, ck)
				sup = append(sup, l.keys.Suppressed(o.channel, o.key))
				i = len(keys)
				coolIdx[ck] = i
			}
			ci, to = i, o.to.arg()
			if o.to.paired() {
				pk := l.keys.PairLimit(o.channel, o.key, o.to.Hash)
				if pi, ok = pairIdx[pk]; !ok {
					pairKeys = append(pairKeys, pk)
					every, burst := o.to.Pair.args()
					limits = append(limits, every, burst)
					pi = len(pairKeys)
					pairIdx[pk] = pi
				}
			}
		}
		if o.kind == 'd' && o.arg != "" {
			// The provider-id field and its value (ledger.lua, op "d").
			v := o.id
			if o.campaign != "" {
				v += "\n" + o.campaign
			}
			opv = append(opv, "d", l.field(o.key, o.id), o.arg, l.providerField(o.key, o.arg), v, 0)
			continue
		}
		opv = append(opv, string(o.kind), l.field(o.key, o.id), o.arg, ci, to, pi)
	}
	keys = append(keys, sup...)
	keys = append(keys, pairKeys...)
	argv := make([]any, 4, 4+len(limits)+len(opv))
	argv = append(append(argv, limits...), opv...)
	base := now.UnixMilli()/l.genMs - 5
	for g := base; g < base+7; g++ {
		if l.cluster {
			keys = append(keys, l.keys.IDs(ch, key, g))
		} else {
			keys = append(keys, l.keys.ChannelIDs(ch, g))
		}
	}
	argv[0], argv[1], argv[2], argv[3] = l.genMs, base, len(coolIdx), len(pairKeys)
	return keys, argv
}

// run makes one ledger.lua call of one operation and returns its reply.
func (l *Ledger) run(ctx context.Context, o op) (string, error) {
	keys, argv := l.args([]op{o}, time.Now())
	v, err := ledgerScript.Run(ctx, l.rdb, keys, argv...).Result()
	if err != nil {
		return "", err
	}
	out, _ := v.([]any)
	if len(out) != 1 {
		return "", fmt.Errorf("%d replies for 1 operation", len(out))
	}
	s, _ := out[0].(string)
	return s, nil
}

// name is how errors name the id of channel and key.
func name(channel, key, id string) string { return channel + ":" + key + ":" + id }

// Claim claims id for owner (non-empty), right before its request; the
// claim is seen for the ledger's TTL. With force, a claim left by another
// owner is taken over (the caller has decided to send again); without it,
// such a claim answers [Abandoned]. If the pacing key is in cooldown
// ([bucket.Limiter.Cooldown], [bucket.Keys].Cooldown), Claim answers
// [CoolingDown] and the time left, claiming nothing: a sender that slept on
// a reservation while a cooldown began does not send. On an error (which
// wraps the Redis error, or names an unexpected reply) it answers
// [ClaimUnknown].
func (l *Ledger) Claim(ctx context.Context, channel, key, id, owner string, force bool) (ClaimResult, time.Duration, error) {
	res, cool, _, err := l.claim(ctx, channel, key, id, owner, force, Recipient{})
	return res, cool, err
}

// claim is Claim with the recipient's suppression checked; it also
// returns the suppression's reason when it answers [Suppressed].
func (l *Ledger) claim(ctx context.Context, channel, key, id, owner string, force bool, to Recipient) (ClaimResult, time.Duration, string, error) {
	o := op{kind: 'c', channel: channel, key: key, id: id, arg: owner, to: to}
	if force {
		o.kind = 'f'
	}
	s, err := l.run(ctx, o)
	if err != nil {
		return ClaimUnknown, 0, "", fmt.Errorf("ledger: claim %q: %w", name(channel, key, id), err)
	}
	return parseClaim(name(channel, key, id), s)
}

// parseClaim reads ledger.lua's reply s to a claim of id k; reason is the
// suppression's when it answers [Suppressed].
func parseClaim(k, s string) (res ClaimResult, cool time.Duration, reason string, err error) {
	switch {
	case s == "claimed":
		return Claimed, 0, "", nil
	case s == "delivered":
		return Delivered, 0, "", nil
	case s == "abandoned":
		return Abandoned, 0, "", nil
	case s == "deadlettered":
		return DeadLettered, 0, "", nil
	case strings.HasPrefix(s, "pair:"):
		us, err := strconv.ParseInt(s[len("pair:"):], 10, 64)
		if err == nil && us > 0 {
			return PairLimited, pairWait(us), "", nil
		}
	case strings.HasPrefix(s, "suppressed:") && len(s) > len("suppressed:"):
		return Suppressed, 0, s[len("suppressed:"):], nil
	case strings.HasPrefix(s, "cooldown:"):
		us, err := strconv.ParseInt(s[len("cooldown:"):], 10, 64)
		if err == nil && us > 0 {
			return CoolingDown, time.Duration(us) * time.Microsecond, "", nil
		}
	}
	return ClaimUnknown, 0, "", fmt.Errorf("ledger: claim %q: unexpected reply %q", k, s)
}

// IsDelivered reports whether id was recorded delivered: one script call
// that writes nothing. A caller can skip a copy it knows may be a duplicate
// before it spends a send slot on it; Claim still decides before a send.
// Errors wrap the Redis error.
func (l *Ledger) IsDelivered(ctx context.Context, channel, key, id string) (bool, error) {
	s, err := l.run(ctx, op{kind: 'q', channel: channel, key: key, id: id})
	if err != nil {
		return false, fmt.Errorf("ledger: read %q: %w", name(channel, key, id), err)
	}
	return s == "delivered", nil
}

// Delivered records that id was accepted by the provider (providerID, may
// be empty), for the ledger's TTL; with a providerID, [Ledger.ByProvider]
// finds id by it as long. Errors wrap the Redis error.
func (l *Ledger) Delivered(ctx context.Context, channel, key, id, providerID string) error {
	return l.DeliveredIn(ctx, channel, key, id, providerID, "")
}

// DeliveredIn is [Ledger.Delivered] of an id of campaign ("" none), which
// [Ledger.ByProvider] answers with it.
func (l *Ledger) DeliveredIn(ctx context.Context, channel, key, id, providerID, campaign string) error {
	if _, err := l.run(ctx, op{kind: 'd', channel: channel, key: key, id: id, arg: providerID, campaign: campaign}); err != nil {
		return fmt.Errorf("ledger: deliver %q: %w", name(channel, key, id), err)
	}
	return nil
}

// Release drops owner's claim on id (the provider refused the message, so
// a retry may claim it again). Releasing a claim one does not hold does
// nothing. Errors wrap the Redis error.
func (l *Ledger) Release(ctx context.Context, channel, key, id, owner string) error {
	if _, err := l.run(ctx, op{kind: 'r', channel: channel, key: key, id: id, arg: owner}); err != nil {
		return fmt.Errorf("ledger: release %q: %w", name(channel, key, id), err)
	}
	return nil
}

// DeadLettered records that id, claimed (by this process, or by one that
// died: [Abandoned]), was dead-lettered with reason (its DLQ copy
// written), for the ledger's TTL: a later claim answers [DeadLettered],
// so a copy Kafka delivers again is skipped rather than dead-lettered
// again; a forced claim (a record replayed from the DLQ) takes it over.
// A delivered id stays delivered. Errors wrap the Redis error.
func (l *Ledger) DeadLettered(ctx context.Context, channel, key, id, reason string) error {
	if _, err := l.run(ctx, op{kind: 'x', channel: channel, key: key, id: id, arg: reason}); err != nil {
		return fmt.Errorf("ledger: dead-letter %q: %w", name(channel, key, id), err)
	}
	return nil
}

// Lookup reads the state of each id of refs, writing nothing: one
// ledger.lua call per channel (per pacing key under Redis Cluster) of at
// most 1,000 ids, all in one pipeline (one round trip per Redis node). The
// answer has one [State] per ref, in order; an id whose call failed reads
// [StateUnknown], and the first such error is returned (wrapping the Redis
// error).
func (l *Ledger) Lookup(ctx context.Context, refs []Ref) ([]State, error) {
	out := make([]State, len(refs))
	if len(refs) == 0 {
		return out, nil
	}
	type call struct {
		idx []int
		ops []op
		cmd *redis.Cmd
	}
	var calls []*call
	open := map[string]*call{}
	for i, r := range refs {
		g := l.group(r.Channel, r.Key)
		c := open[g]
		if c == nil || len(c.ops) >= maxOps {
			c = &call{}
			open[g] = c
			calls = append(calls, c)
		}
		c.idx = append(c.idx, i)
		c.ops = append(c.ops, op{kind: 'q', channel: r.Channel, key: r.Key, id: r.ID})
	}
	now := time.Now()
	run := func(eval func(p redis.Pipeliner, keys []string, argv []any) *redis.Cmd, cs []*call) {
		pipe := l.rdb.Pipeline()
		for _, c := range cs {
			keys, argv := l.args(c.ops, now)
			c.cmd = eval(pipe, keys, argv)
		}
		_, _ = pipe.Exec(ctx) // each command's error is read below
	}
	run(func(p redis.Pipeliner, keys []string, argv []any) *redis.Cmd {
		return p.EvalSha(ctx, ledgerScript.Hash(), keys, argv...)
	}, calls)
	wire.EvalAgain(calls, func(c *call) error { return c.cmd.Err() }, func(again []*call) {
		run(func(p redis.Pipeliner, keys []string, argv []any) *redis.Cmd {
			return p.Eval(ctx, lua.Ledger, keys, argv...)
		}, again)
	})
	var first error
	for _, c := range calls {
		v, err := c.cmd.Result()
		replies, _ := v.([]any)
		if err == nil && len(replies) != len(c.ops) {
			err = fmt.Errorf("%d replies for %d operations", len(replies), len(c.ops))
		}
		if err != nil {
			first = cmp(first, fmt.Errorf("ledger: read %d ids: %w", len(c.ops), err))
			continue
		}
		for j, i := range c.idx {
			s, _ := replies[j].(string)
			out[i] = parseState(s)
		}
	}
	return out, first
}
