// Package portfolio guards WhatsApp's messaging limit: the number of
// unique users a business portfolio may send business-initiated messages
// (marketing, utility and authentication templates) in a moving 24 h
// window, shared by all of the portfolio's phone numbers, in tiers of
// 250, 2,000, 10,000, 100,000 or unlimited
// (developers.facebook.com/documentation/business-messaging/whatsapp/messaging-limits).
// WhatsApp refuses nothing synchronously past it: messages fail later and
// the portfolio's quality suffers, so Pacer keeps the count itself.
//
// A pacing key (a phone-number ID) belongs to a portfolio when an
// operator said so ([Store.Set], `pacer portfolio set`); the map and the
// tier live in Redis, so a change (or a tier learned from a webhook)
// reaches every replica at its next message. A key without a portfolio
// is not guarded.
//
// The window is a sorted set per portfolio (recipient [suppress.Hash] ->
// Redis TIME in ms of its last business-initiated message), changed only
// by one Lua script on the server's clock, so it is exact across
// replicas. Memory: see [BytesPerRecipient]. [Store.Admit] is one script
// call and one round trip per message; a [Batch] puts the admissions that
// wait in the pipeline another store sends anyway (the ledger's flush),
// one script call per portfolio per flush.
package portfolio

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// Window is WhatsApp's messaging-limit window: unique users over a moving
// 24 hours.
const Window = 24 * time.Hour

// Unlimited is the tier of a portfolio without a messaging limit.
const Unlimited = -1

// BytesPerRecipient is the Redis memory one recipient in a portfolio's
// window takes (MEMORY USAGE of the sorted set over 100,000 entries,
// redis-server 7.0: 119.8 bytes; TestBytesPerRecipient measures it).
const BytesPerRecipient = 120

// ErrInvalid is wrapped by the errors about a bad portfolio name or tier.
var ErrInvalid = errors.New("portfolio: invalid value")

var script = redis.NewScript(lua.Portfolio)

// Store keeps the portfolio map, tiers and windows in Redis. It is safe
// for concurrent use.
type Store struct {
	rdb    redis.Cmdable
	keys   bucket.Keys
	window time.Duration
}

// NewStore returns a Store over rdb naming its keys with keys, with
// WhatsApp's 24 h window.
func NewStore(rdb redis.Cmdable, keys bucket.Keys) *Store {
	return &Store{rdb: rdb, keys: keys, window: Window}
}

// WithWindow returns a copy of s whose window is d (at least 1 ms): for
// tests and demonstrations that cannot wait a day.
func (s *Store) WithWindow(d time.Duration) *Store {
	c := *s
	c.window = max(d, time.Millisecond)
	return &c
}

// ParseTier reads a tier: a positive number of recipients ("250",
// "2000"), WhatsApp's names ("TIER_250", "TIER_2K", "TIER_10K",
// "TIER_100K", "TIER_UNLIMITED", also without "TIER_"; any "TIER_<n>K" is
// n thousand) or "unlimited".
// Anything else is an error wrapping [ErrInvalid].
func ParseTier(s string) (int, error) {
	u := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(s)), "TIER_")
	switch u {
	case "UNLIMITED":
		return Unlimited, nil
	case "2K":
		return 2000, nil
	case "10K":
		return 10000, nil
	case "100K":
		return 100000, nil
	}
	mult := 1
	if k, ok := strings.CutSuffix(u, "K"); ok { // TIER_1K and names Meta adds later
		u, mult = k, 1000
	}
	n, err := strconv.Atoi(u)
	n *= mult
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%w: tier %q is not a positive number of recipients, TIER_250 ... TIER_100K or unlimited", ErrInvalid, s)
	}
	return n, nil
}

// TierString writes tier as `pacer portfolio status` shows it.
func TierString(tier int) string {
	if tier < 0 {
		return "unlimited"
	}
	return strconv.Itoa(tier)
}

func validName(p string) error {
	if p == "" || len(p) > maxName || strings.ContainsAny(p, "{}: ") || strings.ContainsFunc(p, unicode.IsControl) {
		return fmt.Errorf("%w: portfolio %q must be 1 to %d bytes, without spaces, braces, colons or control characters", ErrInvalid, p, maxName)
	}
	return nil
}

// maxName is the longest portfolio name, in bytes (a Meta business ID is
// about 16 digits).
const maxName = 128

// Set puts channel's pacing key key in portfolio (moving it out of any
// other) and, when tier is not 0, sets the portfolio's tier (a number of
// recipients, or [Unlimited]).
func (s *Store) Set(ctx context.Context, channel, key, portfolio string, tier int) error {
	if err := validName(portfolio); err != nil {
		return err
	}
	if key == "" {
		return fmt.Errorf("%w: the pacing key is empty", ErrInvalid)
	}
	old, _, err := s.Of(ctx, channel, key)
	if err != nil {
		return err
	}
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if old != "" && old != portfolio {
			p.SRem(ctx, s.keys.PortfolioKeys(channel, old), key)
		}
		p.HSet(ctx, s.keys.Portfolio(channel, key), "portfolio", portfolio)
		p.SAdd(ctx, s.keys.PortfolioKeys(channel, portfolio), key)
		p.SAdd(ctx, s.keys.Portfolios(channel), portfolio)
		if tier != 0 {
			p.HSet(ctx, s.keys.PortfolioMeta(channel, portfolio), "tier", tier)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("portfolio: set %s/%s in %s: %w", channel, key, portfolio, err)
	}
	return nil
}

// SetTier sets portfolio's tier (a number of recipients, or [Unlimited]),
// as a business_capability_update webhook announces it.
func (s *Store) SetTier(ctx context.Context, channel, portfolio string, tier int) error {
	if err := validName(portfolio); err != nil {
		return err
	}
	if tier == 0 || tier < Unlimited {
		return fmt.Errorf("%w: tier %d", ErrInvalid, tier)
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, s.keys.PortfolioMeta(channel, portfolio), "tier", tier)
		p.SAdd(ctx, s.keys.Portfolios(channel), portfolio)
		return nil
	})
	if err != nil {
		return fmt.Errorf("portfolio: set the tier of %s: %w", portfolio, err)
	}
	return nil
}

// SetAccount names portfolio the business portfolio of channel's provider
// account (a WhatsApp Business Account ID): what a tier announced by an
// account webhook (business_capability_update) is applied to.
func (s *Store) SetAccount(ctx context.Context, channel, account, portfolio string) error {
	if err := validName(portfolio); err != nil {
		return err
	}
	if account == "" {
		return fmt.Errorf("%w: the account is empty", ErrInvalid)
	}
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, s.keys.PortfolioAccounts(channel), account, portfolio)
		p.SAdd(ctx, s.keys.Portfolios(channel), portfolio)
		return nil
	}); err != nil {
		return fmt.Errorf("portfolio: set account %s in %s: %w", account, portfolio, err)
	}
	return nil
}

// OfAccount returns the portfolio of channel's provider account; ok is
// false when none was set.
func (s *Store) OfAccount(ctx context.Context, channel, account string) (portfolio string, ok bool, err error) {
	return s.hget(ctx, s.keys.PortfolioAccounts(channel), account, "the portfolio of account "+account)
}

// hget reads field of the hash at key; ok is false when the field is not
// set. An error names what was read (what).
func (s *Store) hget(ctx context.Context, key, field, what string) (v string, ok bool, err error) {
	v, err = s.rdb.HGet(ctx, key, field).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("portfolio: read %s: %w", what, err)
	}
	return v, true, nil
}

// Of returns the portfolio of channel's pacing key key; ok is false when
// it has none (the key is not guarded).
func (s *Store) Of(ctx context.Context, channel, key string) (portfolio string, ok bool, err error) {
	p, err := s.rdb.HGet(ctx, s.keys.Portfolio(channel, key), "portfolio").Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("portfolio: read the portfolio of %s/%s: %w", channel, key, err)
	}
	return p, true, nil
}

// Verdict is what the guard answered for one message.
type Verdict int

const (
	// New: the recipient entered the window; give it back with
	// [Store.GiveBack] if the send fails permanently.
	New Verdict = iota + 1
	// Seen: the recipient was in the window already (its last-seen time is
	// refreshed: a moving window counts a user until 24 h after its last
	// business-initiated message). Nothing to give back.
	Seen
	// Deferred: the window is full and the recipient new. Park the message
	// until [Admission.Wait] has passed; nothing was reserved.
	Deferred
	// Paused: a marketing message of a portfolio whose marketing is paused
	// after a quality downgrade ([Store.SetQuality]); nothing was reserved.
	// Park it until the operator ([Store.Resume]) or an upgrade webhook
	// resumes marketing; Wait is 0.
	Paused
)

func (v Verdict) String() string {
	return map[Verdict]string{New: "new", Seen: "seen", Deferred: "deferred", Paused: "paused"}[v]
}

// Admission is the guard's answer for one message.
type Admission struct {
	Verdict Verdict
	Hash    string        // the recipient's hash
	Score   int64         // New and Seen: the entry's last-seen time, Unix ms of Redis TIME
	Wait    time.Duration // Deferred: until the oldest recipient leaves the window
	Used    int           // recipients in the window after the call
	Tier    int           // the tier read, [Unlimited] when none is set
}

// Admit checks the recipient hash (suppress.Hash of the address) of a
// business-initiated message of portfolio against its window and tier, in
// one script call on Redis TIME: New and Seen reserve or refresh it,
// Deferred reserves nothing and counts the deferral. marketing is true
// for a message of category marketing: while the portfolio's marketing is
// paused it is Paused (counted as deferred), whatever the window holds.
func (s *Store) Admit(ctx context.Context, channel, portfolio, hash string, marketing bool) (Admission, error) {
	m := ""
	if marketing {
		m = "m"
	}
	v, err := script.Run(ctx, s.rdb, s.windowKeys(channel, portfolio), "a", hash, s.window.Milliseconds(), m).Slice()
	if err != nil {
		return Admission{}, fmt.Errorf("portfolio: admit to %s: %w", portfolio, err)
	}
	return parseAdmission(portfolio, hash, v)
}

// windowKeys are the keys of portfolio.lua's calls for portfolio: its
// window and its hash (one slot: the portfolio's hash tag).
func (s *Store) windowKeys(channel, portfolio string) []string {
	return []string{s.keys.PortfolioWindow(channel, portfolio), s.keys.PortfolioMeta(channel, portfolio)}
}

// parseAdmission reads v, portfolio.lua's answer for one admission of
// hash: {verdict, score_or_wait_ms, used, tier}.
func parseAdmission(portfolio, hash string, v []any) (Admission, error) {
	if len(v) != 4 {
		return Admission{}, fmt.Errorf("portfolio: admit to %s: unexpected reply %v", portfolio, v)
	}
	verdict, _ := v[0].(string)
	n, _ := v[1].(int64)
	used, _ := v[2].(int64)
	tier, _ := v[3].(int64)
	a := Admission{Hash: hash, Used: int(used), Tier: int(tier)}
	switch verdict {
	case "new":
		a.Verdict, a.Score = New, n
	case "seen":
		a.Verdict, a.Score = Seen, n
	case "deferred":
		a.Verdict, a.Wait = Deferred, time.Duration(n)*time.Millisecond
	case "paused":
		a.Verdict = Paused
	default:
		return Admission{}, fmt.Errorf("portfolio: admit to %s: unexpected verdict %q", portfolio, verdict)
	}
	return a, nil
}

// GiveBack removes a's recipient from portfolio's window when a reserved
// it (New) and no later message refreshed it since: a message whose send
// failed permanently reached no user. It reports whether it was removed.
func (s *Store) GiveBack(ctx context.Context, channel, portfolio string, a Admission) (bool, error) {
	if a.Verdict != New {
		return false, nil
	}
	n, err := script.Run(ctx, s.rdb, s.windowKeys(channel, portfolio), "r", a.Hash, a.Score).Int()
	if err != nil {
		return false, fmt.Errorf("portfolio: give back to %s: %w", portfolio, err)
	}
	return n == 1, nil
}

// Status is one portfolio as `pacer portfolio status` shows it.
type Status struct {
	Portfolio string
	Keys      []string  // its pacing keys, sorted
	Tier      int       // [Unlimited] when none is set
	Used      int       // recipients in the window now
	Oldest    time.Time // when the oldest recipient leaves the window; zero if empty
	Deferred  int64     // messages deferred by the guard (window full or marketing paused), ever, summed over replicas
	// Quality is the last phone_number_quality_update event applied to
	// the portfolio (FLAGGED, DOWNGRADE, UNFLAGGED, UPGRADE,
	// THROUGHPUT_UPGRADE); "" when none was.
	Quality   string
	QualityAt time.Time // when Meta sent it (the webhook entry's time); zero if none
	// Paused is the quality event that paused the portfolio's marketing;
	// "" while marketing is not paused.
	Paused string
}

// UsedRatio is Used / Tier, 0 for an unlimited portfolio.
func (st Status) UsedRatio() float64 {
	if st.Tier <= 0 {
		return 0
	}
	return float64(st.Used) / float64(st.Tier)
}

// Status reads portfolio's state (writing nothing) at Redis TIME.
func (s *Store) Status(ctx context.Context, channel, portfolio string) (Status, error) {
	st := Status{Portfolio: portfolio, Tier: Unlimited}
	now, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return st, fmt.Errorf("portfolio: status of %s: %w", portfolio, err)
	}
	from := "(" + strconv.FormatInt(now.UnixMilli()-s.window.Milliseconds(), 10)
	win := s.keys.PortfolioWindow(channel, portfolio)
	var used *redis.IntCmd
	var oldest *redis.ZSliceCmd
	var meta *redis.MapStringStringCmd
	var keys *redis.StringSliceCmd
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		used = p.ZCount(ctx, win, from, "+inf")
		oldest = p.ZRangeByScoreWithScores(ctx, win, &redis.ZRangeBy{Min: from, Max: "+inf", Count: 1})
		meta = p.HGetAll(ctx, s.keys.PortfolioMeta(channel, portfolio))
		keys = p.SMembers(ctx, s.keys.PortfolioKeys(channel, portfolio))
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("portfolio: status of %s: %w", portfolio, err)
	}
	st.Used = int(used.Val())
	if z := oldest.Val(); len(z) == 1 {
		st.Oldest = time.UnixMilli(int64(z[0].Score)).Add(s.window)
	}
	m := meta.Val()
	if t, err := strconv.Atoi(m["tier"]); err == nil {
		st.Tier = t
	}
	st.Deferred, _ = strconv.ParseInt(m["deferred"], 10, 64)
	st.Quality, st.Paused = m["quality"], m["paused"]
	if sec, err := strconv.ParseInt(m["quality_at"], 10, 64); err == nil {
		st.QualityAt = time.Unix(sec, 0).UTC()
	}
	st.Keys = keys.Val()
	slices.Sort(st.Keys)
	return st, nil
}

// Names returns channel's portfolios (those given a key, an account or a tier),
// sorted.
func (s *Store) Names(ctx context.Context, channel string) ([]string, error) {
	names, err := s.rdb.SMembers(ctx, s.keys.Portfolios(channel)).Result()
	if err != nil {
		return nil, fmt.Errorf("portfolio: list the portfolios: %w", err)
	}
	slices.Sort(names)
	return names, nil
}
