// Package statuspage is the live status page of one channel, served by
// `pacer run` on its metrics listener: /status (HTML, no external assets,
// refreshing itself) and /status.json (the same data). Who may read it
// and act from it, and the actions' API, are package statuspage/actions'.
//
// Every replica publishes its active pacing keys to Redis ([Publisher]),
// with each key's achieved rate and backlog; the [Page] of any
// replica reads the union, then each key's shared state (adapted rate,
// tokens, cooldown, breaker) as `pacer status` does
// ([adapt.Adapter.Snapshot]), so every replica shows the whole channel.
//
// # Scale
//
// A reading of N keys costs one sorted-set read, one HGETALL per live
// replica and 3 N read-only scripts (run 16 at a time), plus one
// sorted-set read and one HGETALL per campaign of the last week (at most
// 200, pipelined) for the campaigns' progress, and on WhatsApp one set
// read plus one TIME and one pipelined read per business portfolio (at
// most 200) for the messaging-limit guards; it is cached for
// half an interval, so any number of viewers cost one reading per 2.5 s
// at most, and none while nobody looks. The page shows the top N keys
// (default 100, at most 1000) under a sort order, and a search box that
// filters every active key by substring on the server: the browser never
// receives 10,000 rows.
package statuspage

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/portfolio"
	"github.com/pacerhq/pacer/pacer/statuspage/history"
	"github.com/redis/go-redis/v9"
)

// Bounds of the rows one answer holds.
const (
	DefaultRows = 100
	MaxRows     = 1000
	maxErrors   = 20 // key errors listed in one answer
	readers     = 16 // keys read from Redis at once
)

// Key is one active pacing key's row. Rates are in messages per second.
type Key struct {
	Key      string  `json:"key"`
	Limit    float64 `json:"limit"`    // configured rate: the AIMD ceiling
	Burst    int     `json:"burst"`    // configured burst
	Rate     float64 `json:"rate"`     // adapted rate the pacers take tokens under
	Achieved float64 `json:"achieved"` // delivered over the last publish interval, summed over replicas; 0 while WarmingUp
	// Utilization is Achieved / Rate (the share of the allowed rate used);
	// low is expected for a key without a backlog; 0 while WarmingUp.
	Utilization float64 `json:"utilization"`
	// WarmingUp is true while a replica has not seen the key active for a
	// whole publish interval yet (it became active since its last
	// reading): its rate over the interval is not known, and Achieved and
	// Utilization are not given.
	WarmingUp     bool    `json:"warming_up"`
	Tokens        float64 `json:"tokens"`      // tokens in the bucket under Rate; negative while slots are granted ahead
	CooldownMS    int64   `json:"cooldown_ms"` // cooldown left, ms; 0 = none
	AtFloor       bool    `json:"at_floor"`    // adapted rate at the AIMD floor
	Breaker       string  `json:"breaker"`     // closed, open, half-open
	BreakerLeftMS int64   `json:"breaker_left_ms"`
	BreakerReason string  `json:"breaker_reason,omitempty"`
	// Backlog is the key's records the replicas hold (fetched, not
	// finished: waiting for a token or being sent) plus those they parked
	// whose estimated slots are still ahead, summed over them: the figure
	// `pacer status` shows (consumer.KeyBacklog.Total, from the same
	// reading of each process, published at different ticks).
	Backlog  int    `json:"backlog"`
	Replicas int    `json:"replicas"`        // replicas that handled the key in the last 5 minutes
	Error    string `json:"error,omitempty"` // its state could not be read
	// History is the key's last hour, summed over the replicas (package
	// history); on the first HistoryRows rows of an answer, and absent
	// when no replica kept it.
	History *history.Series `json:"history,omitempty"`
}

// Campaign is one active campaign's progress, from the counters the
// pacers, `pacer publish` and the ingest API keep in Redis (package
// control).
type Campaign struct {
	Name         string           `json:"name"`
	State        string           `json:"state"`     // running, paused, cancelled or done (see control.Status)
	Published    int64            `json:"published"` // records; an id published again counts again; -1 (JSON null) when unknown (not published through pacer publish or the ingest API)
	Messages     int64            `json:"messages"`  // distinct ids: published less duplicates, exact once remaining is 0 (control.Status); -1 (JSON null) when published is unknown
	Delivered    int64            `json:"delivered"`
	DeadLettered map[string]int64 `json:"dead_lettered"` // by DLQ reason
	Duplicates   int64            `json:"duplicates"`    // skipped: published again after their id was delivered or dead-lettered
	Remaining    int64            `json:"remaining"`     // published - delivered - dead-lettered - duplicates, at least 0; -1 (JSON null) when unknown
	Achieved     float64          `json:"achieved"`      // msgs/s between its first and last delivery
	ETASeconds   *float64         `json:"eta_seconds"`   // remaining at Achieved, s; null when none (control.Status.ETA)
	LastActive   time.Time        `json:"last_active"`   // last publish, count or state change
	// The outcomes providers reported after the send (control.Status),
	// each message counted once per kind: device_delivered, read, and by
	// reason failed (after acceptance), bounced and suppressed; maps are
	// {} when none.
	DeviceDelivered int64            `json:"device_delivered"`
	Read            int64            `json:"read"`
	Failed          map[string]int64 `json:"failed"`
	Bounced         map[string]int64 `json:"bounced"`
	Suppressed      map[string]int64 `json:"suppressed"`
}

// MarshalJSON writes c with published, messages and remaining null when
// unknown (-1), as `pacer campaign status --json` writes them: one
// representation of "not known" for each figure.
func (c Campaign) MarshalJSON() ([]byte, error) {
	type plain Campaign
	known := func(n int64) *int64 {
		if n < 0 {
			return nil
		}
		return &n
	}
	return json.Marshal(struct {
		plain
		Published *int64 `json:"published"`
		Messages  *int64 `json:"messages"`
		Remaining *int64 `json:"remaining"`
	}{plain(c), known(c.Published), known(c.Messages), known(c.Remaining)})
}

// UnmarshalJSON reads what MarshalJSON writes: null as -1.
func (c *Campaign) UnmarshalJSON(b []byte) error {
	type plain Campaign
	var v struct {
		plain
		Published *int64 `json:"published"`
		Messages  *int64 `json:"messages"`
		Remaining *int64 `json:"remaining"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*c = Campaign(v.plain)
	c.Published, c.Messages, c.Remaining = unknownAsMinus1(v.Published), unknownAsMinus1(v.Messages), unknownAsMinus1(v.Remaining)
	return nil
}

func unknownAsMinus1(p *int64) int64 {
	if p == nil {
		return -1
	}
	return *p
}

// Which campaigns the page shows: those unfinished (remaining above 0) or
// paused, and those active in the last campaignRecent, among
// the campaignsRead most recently active in the last campaignHorizon.
const (
	campaignRecent  = time.Hour
	campaignHorizon = 7 * 24 * time.Hour
	campaignsRead   = 200
)

// Totals add up every active key (not only the rows shown).
type Totals struct {
	Keys        int     `json:"keys"`
	Limit       float64 `json:"limit"`
	Rate        float64 `json:"rate"`
	Achieved    float64 `json:"achieved"`
	Utilization float64 `json:"utilization"` // Achieved / Rate over keys with a backlog, not warming up; 0 when none
	WarmingUp   int     `json:"warming_up"`  // keys warming up (Key.WarmingUp), left out of Achieved and Utilization
	Backlog     int     `json:"backlog"`
	Cooldown    int     `json:"cooldown"`
	AtFloor     int     `json:"at_floor"`
	BreakerOpen int     `json:"breaker_open"` // open or half-open
	Errors      int     `json:"errors"`
}

// Status is the answer of /status.json.
type Status struct {
	Channel        string    `json:"channel"`
	CollectedAt    time.Time `json:"collected_at"`
	CollectMS      float64   `json:"collect_ms"` // how long the Redis reading took
	RefreshSeconds float64   `json:"refresh_seconds"`
	Replicas       []string  `json:"replicas"` // replicas that published within 3 intervals
	// Overloaded are the replicas among Replicas that said at their last
	// publish they give up more than 1% of their send slots as late
	// (pacer_overloaded): asked for more than they carry.
	Overloaded []string   `json:"overloaded"`
	Totals     Totals     `json:"totals"`
	Query      string     `json:"query"`
	Sort       string     `json:"sort"`
	Matched    int        `json:"matched"`   // active keys matching Query
	Keys       []Key      `json:"keys"`      // the first rows of the matches under Sort
	Campaigns  []Campaign `json:"campaigns"` // unfinished first, then by last activity
	// Portfolios are the channel's WhatsApp business portfolios (package
	// portfolio), by name; empty on other channels.
	Portfolios []Portfolio `json:"portfolios"`
	Errors     []string    `json:"errors,omitempty"`
}

// Portfolio is one WhatsApp business portfolio's messaging-limit guard,
// as `pacer portfolio status` shows it (portfolio.Status).
type Portfolio struct {
	Name string   `json:"name"`
	Keys []string `json:"keys"` // its pacing keys, sorted
	// Tier is its messaging limit in unique recipients per 24 h; -1
	// unlimited (or none set).
	Tier int `json:"tier"`
	Used int `json:"used"` // unique recipients in the window now
	// OldestExpiry is when the oldest recipient leaves the window; null
	// when the window is empty.
	OldestExpiry *time.Time `json:"oldest_expiry"`
	// Deferred is its messages deferred by the guard (window full, or
	// marketing paused), ever, summed over every replica (a Redis counter).
	Deferred int64 `json:"deferred"`
	// Quality is the last phone_number_quality_update event applied
	// (FLAGGED, DOWNGRADE, UNFLAGGED, UPGRADE, THROUGHPUT_UPGRADE); ""
	// when none was.
	Quality   string     `json:"quality"`
	QualityAt *time.Time `json:"quality_at"` // when Meta sent it; null when none
	// MarketingPaused is the quality event that paused its marketing
	// messages; "" when they are not paused.
	MarketingPaused string `json:"marketing_paused"`
}

// maxPortfolios bounds the portfolios one reading shows.
const maxPortfolios = 200

// Sort orders of the rows.
var sorts = map[string]func(a, b *Key) int{
	// attention: open breakers, then cooldowns, then keys at the floor,
	// then the largest backlogs.
	"attention": func(a, b *Key) int {
		return cmp.Or(-cmp.Compare(brRank(a), brRank(b)), -cmp.Compare(a.CooldownMS, b.CooldownMS),
			-cmp.Compare(b2i(a.AtFloor), b2i(b.AtFloor)), -cmp.Compare(a.Backlog, b.Backlog),
			-cmp.Compare(a.Achieved, b.Achieved), strings.Compare(a.Key, b.Key))
	},
	"backlog": func(a, b *Key) int { return cmp.Or(-cmp.Compare(a.Backlog, b.Backlog), strings.Compare(a.Key, b.Key)) },
	"achieved": func(a, b *Key) int {
		return cmp.Or(-cmp.Compare(a.Achieved, b.Achieved), strings.Compare(a.Key, b.Key))
	},
	"utilization": func(a, b *Key) int {
		// Keys warming up have no utilization yet: after the others.
		return cmp.Or(cmp.Compare(b2i(a.WarmingUp), b2i(b.WarmingUp)), cmp.Compare(a.Utilization, b.Utilization), strings.Compare(a.Key, b.Key))
	},
	"key": func(a, b *Key) int { return strings.Compare(a.Key, b.Key) },
}

func brRank(k *Key) int {
	switch k.Breaker {
	case "open":
		return 2
	case "half-open":
		return 1
	}
	return 0
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}

// reading is one collection of every active key.
type reading struct {
	at       time.Time
	took     time.Duration
	replicas []string
	overload []string // of replicas, those overloaded at their last publish
	keys     []Key    // sorted by key
	camps    []Campaign
	ports    []Portfolio
	errors   []string
	totals   Totals
}

// Page collects and serves the status of one channel. It is safe for
// concurrent use.
type Page struct {
	rdb  redis.UniversalClient
	ad   *adapt.Adapter
	ctl  *control.Store
	port *portfolio.Store
	cfg  Config

	collectMu sync.Mutex // one reading at a time
	mu        sync.Mutex
	last      *reading
}

// New returns the Page of cfg's channel reading rdb. It does not contact
// Redis.
func New(rdb redis.UniversalClient, cfg Config) *Page {
	cfg.setDefaults()
	if cfg.Policy == nil {
		panic("statuspage: Config.Policy is required")
	}
	return &Page{rdb: rdb, ad: adapt.New(rdb, bucket.Config{Prefix: cfg.Prefix}),
		ctl: control.New(rdb, bucket.NewKeys(cfg.Prefix)), port: portfolio.NewStore(rdb, bucket.NewKeys(cfg.Prefix)), cfg: cfg}
}

// maxAge is how long a reading is served before the next request reads again.
func (pg *Page) maxAge() time.Duration { return pg.cfg.Interval / 2 }

// current returns a reading no older than maxAge, reading Redis if needed
// (concurrent callers share one reading).
func (pg *Page) current(ctx context.Context) (*reading, error) {
	fresh := func() *reading {
		pg.mu.Lock()
		defer pg.mu.Unlock()
		if pg.last != nil && time.Since(pg.last.at) < pg.maxAge() {
			return pg.last
		}
		return nil
	}
	if r := fresh(); r != nil {
		return r, nil
	}
	pg.collectMu.Lock()
	defer pg.collectMu.Unlock()
	if r := fresh(); r != nil {
		return r, nil
	}
	r, err := pg.collect(ctx)
	if err != nil {
		return nil, err
	}
	pg.mu.Lock()
	pg.last = r
	pg.mu.Unlock()
	return r, nil
}

// collect reads the live replicas' active keys and each key's state.
func (pg *Page) collect(ctx context.Context) (*reading, error) {
	start := time.Now()
	rk := replicasKey(pg.cfg.Prefix, pg.cfg.Channel)
	since := start.Add(-3 * pg.cfg.Interval).UnixMilli()
	replicas, err := pg.rdb.ZRangeByScore(ctx, rk, &redis.ZRangeBy{Min: strconv.FormatInt(since, 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("statuspage: read %q: %w", rk, err)
	}
	slices.Sort(replicas)
	ok := overloadedKey(pg.cfg.Prefix, pg.cfg.Channel)
	overloaded, err := pg.rdb.ZRangeByScore(ctx, ok, &redis.ZRangeBy{Min: strconv.FormatInt(since, 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("statuspage: read %q: %w", ok, err)
	}
	overloaded = slices.DeleteFunc(overloaded, func(r string) bool { _, live := slices.BinarySearch(replicas, r); return !live })
	slices.Sort(overloaded)
	cmds := make([]*redis.MapStringStringCmd, len(replicas))
	if len(replicas) > 0 {
		_, err = pg.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, r := range replicas {
				cmds[i] = p.HGetAll(ctx, replicaKey(pg.cfg.Prefix, pg.cfg.Channel, r))
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("statuspage: read the replicas' keys: %w", err)
		}
	}
	byKey := map[string]*Key{}
	for _, c := range cmds {
		for k, v := range c.Val() {
			ach, warming, backlog, ok := parseEntry(v)
			if !ok {
				continue
			}
			row := byKey[k]
			if row == nil {
				row = &Key{Key: k}
				byKey[k] = row
			}
			row.Achieved += ach
			row.WarmingUp = row.WarmingUp || warming
			row.Backlog += backlog
			row.Replicas++
		}
	}
	keys := make([]Key, 0, len(byKey))
	for _, row := range byKey {
		if row.WarmingUp {
			row.Achieved = 0 // some replicas' part only
		}
		keys = append(keys, *row)
	}
	slices.SortFunc(keys, func(a, b Key) int { return strings.Compare(a.Key, b.Key) })

	// Each key's shared state, readers at a time.
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(readers, len(keys)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				pg.fill(ctx, &keys[i])
			}
		}()
	}
	for i := range keys {
		next <- i
	}
	close(next)
	wg.Wait()

	camps, err := pg.campaigns(ctx, start)
	if err != nil {
		return nil, err
	}
	ports, err := pg.portfolios(ctx)
	if err != nil {
		return nil, err
	}
	r := &reading{at: time.Now(), replicas: replicas, overload: overloaded, keys: keys, camps: camps, ports: ports}
	t := &r.totals
	var backlogAch, backlogRate float64
	for i := range keys {
		k := &keys[i]
		t.Keys++
		t.Limit += k.Limit
		t.Rate += k.Rate
		t.Achieved += k.Achieved
		t.Backlog += k.Backlog
		t.WarmingUp += b2i(k.WarmingUp)
		if k.Backlog > 0 && !k.WarmingUp {
			backlogAch += k.Achieved
			backlogRate += k.Rate
		}
		t.Cooldown += b2i(k.CooldownMS > 0)
		t.AtFloor += b2i(k.AtFloor)
		t.BreakerOpen += b2i(k.Breaker == "open" || k.Breaker == "half-open")
		if k.Error != "" {
			t.Errors++
			if len(r.errors) < maxErrors {
				r.errors = append(r.errors, k.Key+": "+k.Error)
			}
		}
	}
	if backlogRate > 0 {
		t.Utilization = backlogAch / backlogRate
	}
	r.took = time.Since(start)
	return r, nil
}

// portfolios reads the channel's WhatsApp business portfolios (at most
// maxPortfolios, by name): one SMEMBERS, then per portfolio one TIME and
// one pipelined read of its window, hash and keys. None on other
// channels.
func (pg *Page) portfolios(ctx context.Context) ([]Portfolio, error) {
	out := []Portfolio{}
	if pg.cfg.Channel != "whatsapp" {
		return out, nil
	}
	names, err := pg.port.Names(ctx, pg.cfg.Channel)
	if err != nil {
		return nil, fmt.Errorf("statuspage: %w", err)
	}
	for _, n := range names[:min(len(names), maxPortfolios)] {
		st, err := pg.port.Status(ctx, pg.cfg.Channel, n)
		if err != nil {
			return nil, fmt.Errorf("statuspage: %w", err)
		}
		p := Portfolio{Name: n, Keys: st.Keys, Tier: st.Tier, Used: st.Used, Deferred: st.Deferred, Quality: st.Quality, MarketingPaused: st.Paused}
		if p.Keys == nil {
			p.Keys = []string{}
		}
		if !st.Oldest.IsZero() {
			o := st.Oldest.UTC()
			p.OldestExpiry = &o
		}
		if !st.QualityAt.IsZero() {
			q := st.QualityAt
			p.QualityAt = &q
		}
		out = append(out, p)
	}
	return out, nil
}

// campaigns reads the channel's campaigns to show at now (see
// campaignRecent): one sorted-set read and one pipelined HGETALL each.
func (pg *Page) campaigns(ctx context.Context, now time.Time) ([]Campaign, error) {
	sts, err := pg.ctl.Recent(ctx, pg.cfg.Channel, now.Add(-campaignHorizon), campaignsRead)
	if err != nil {
		return nil, fmt.Errorf("statuspage: read the campaigns: %w", err)
	}
	out := []Campaign{}
	for _, st := range sts {
		unfinished := st.Remaining > 0 || st.State == string(control.Paused)
		if !unfinished && now.Sub(st.LastActive) > campaignRecent {
			continue
		}
		out = append(out, Campaign{Name: st.Campaign, State: st.State, Published: st.Published, Messages: st.Messages, Delivered: st.Delivered,
			DeadLettered: st.DeadLetters, Duplicates: st.Duplicates, Remaining: st.Remaining, Achieved: st.Rate, ETASeconds: st.ETASeconds,
			LastActive: st.LastActive, DeviceDelivered: st.DeviceDelivered, Read: st.Read, Failed: st.Failed, Bounced: st.Bounced,
			Suppressed: st.Suppressed})
	}
	// Unfinished first; Recent gave them most recently active first.
	slices.SortStableFunc(out, func(a, b Campaign) int { return -cmp.Compare(b2i(a.Remaining > 0), b2i(b.Remaining > 0)) })
	return out, nil
}

// fill reads k's policy and shared state into k.
func (pg *Page) fill(ctx context.Context, k *Key) {
	pol, err := pg.cfg.Policy.KeyPolicy(ctx, k.Key)
	if err != nil {
		k.Error = "policy: " + err.Error()
		return
	}
	aimd := pol.AIMD
	aimd.Floor = min(aimd.Floor, pol.Limit.PerSecond)
	k.Limit, k.Burst = pol.Limit.PerSecond, pol.Limit.Burst
	s, err := pg.ad.Snapshot(ctx, pg.cfg.Channel, k.Key, pol.Limit, aimd)
	if err != nil {
		k.Error = err.Error()
		k.Breaker = "unknown"
		return
	}
	k.Rate = s.Limit.PerSecond
	k.Tokens = s.Tokens
	k.CooldownMS = s.Adapted.CooldownLeft.Milliseconds()
	k.AtFloor = s.Adapted.AtFloor
	k.Breaker = s.Breaker.State.String()
	k.BreakerLeftMS = s.Breaker.OpenLeft.Milliseconds()
	k.BreakerReason = s.Breaker.Reason
	if k.Rate > 0 && !k.WarmingUp {
		k.Utilization = k.Achieved / k.Rate
	}
}

// Status returns the status with the rows matching query (a substring of
// the pacing key, case-insensitive; "" = all), ordered by sortBy
// ("attention", "backlog", "achieved", "utilization", "key"; "" =
// attention), at most rows of them (0 = DefaultRows, capped at MaxRows).
// Errors are Redis's (the whole reading failed); a key whose state could
// not be read has its Error set instead.
func (pg *Page) Status(ctx context.Context, query, sortBy string, rows int) (*Status, error) {
	r, err := pg.current(ctx)
	if err != nil {
		return nil, err
	}
	order, ok := sorts[sortBy]
	if !ok {
		sortBy, order = "attention", sorts["attention"]
	}
	if rows <= 0 {
		rows = DefaultRows
	}
	rows = min(rows, MaxRows)
	q := strings.ToLower(query)
	matched := make([]*Key, 0, len(r.keys))
	for i := range r.keys {
		if q == "" || strings.Contains(strings.ToLower(r.keys[i].Key), q) {
			matched = append(matched, &r.keys[i])
		}
	}
	top := topN(matched, rows, order)
	st := &Status{
		Channel: pg.cfg.Channel, CollectedAt: r.at, CollectMS: float64(r.took.Microseconds()) / 1000,
		RefreshSeconds: pg.cfg.Interval.Seconds(), Replicas: r.replicas, Overloaded: r.overload, Totals: r.totals,
		Query: query, Sort: sortBy, Matched: len(matched), Keys: make([]Key, len(top)),
		Campaigns:  r.camps,
		Portfolios: r.ports,
		Errors:     r.errors,
	}
	for i, k := range top {
		st.Keys[i] = *k
	}
	pg.addHistory(ctx, st)
	if st.Overloaded == nil {
		st.Overloaded = []string{}
	}
	if st.Replicas == nil {
		st.Replicas = []string{}
	}
	return st, nil
}

// topN returns the first n of ks under order: a full sort of the matches
// (10,000 keys sort in about a millisecond).
func topN(ks []*Key, n int, order func(a, b *Key) int) []*Key {
	slices.SortFunc(ks, order)
	return ks[:min(n, len(ks))]
}

//go:embed status.html
var assets embed.FS

// Register adds GET /status and GET /status.json to mux.
func (pg *Page) Register(mux *http.ServeMux) {
	html, err := assets.ReadFile("status.html")
	if err != nil {
		panic(err) // embedded at build time
	}
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		// Nothing from elsewhere: scripts and styles are inline, data from this origin.
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:")
		w.Write(html)
	})
	mux.HandleFunc("GET /status.json", func(w http.ResponseWriter, req *http.Request) {
		q := req.URL.Query()
		rows := 0
		if v := q.Get("n"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				http.Error(w, "n: want a number of rows, 1.."+strconv.Itoa(MaxRows), http.StatusBadRequest)
				return
			}
			rows = n
		}
		if s := q.Get("sort"); s != "" {
			if _, ok := sorts[s]; !ok {
				http.Error(w, "sort: want attention, backlog, achieved, utilization or key", http.StatusBadRequest)
				return
			}
		}
		ctx, cancel := context.WithTimeout(req.Context(), 10*time.Second)
		defer cancel()
		st, err := pg.Status(ctx, q.Get("q"), q.Get("sort"), rows)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
			return
		}
		json.NewEncoder(w).Encode(st)
	})
}
