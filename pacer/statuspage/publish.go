package statuspage

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/tick"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/statuspage/history"
	"github.com/redis/go-redis/v9"
)

// DefaultInterval is how often each replica publishes its active keys and
// how often the page refreshes itself.
const DefaultInterval = 5 * time.Second

// Redis layout, for prefix "pacer" and channel "whatsapp" (the hash tag
// keeps both in one Redis Cluster slot, so one transaction writes them):
//
//	pacer:status:{whatsapp}:replicas          sorted set: replica name -> Unix ms of its last publish
//	pacer:status:{whatsapp}:replica:<name>    hash: pacing key -> "<achieved msgs/s> <backlog>"; achieved is "w" at a key's first reading
//
// A replica's hash expires after 3 intervals without a publish, and its
// entry in the set is ignored after that, so a dead replica drops out.
func replicasKey(prefix, channel string) string {
	return prefix + ":status:{" + channel + "}:replicas"
}

// overloadedKey is the sorted set of replicas that said at their last
// publish they are overloaded (Config.Overloaded): replica name -> Unix ms
// of that publish; a replica that no longer is, or stopped, leaves it.
func overloadedKey(prefix, channel string) string {
	return prefix + ":status:{" + channel + "}:overloaded"
}

func replicaKey(prefix, channel, replica string) string {
	return prefix + ":status:{" + channel + "}:replica:" + replica
}

// DefaultReplica names this process in the replica set: host-pid.
func DefaultReplica() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// Publisher writes this process's active pacing keys to Redis every
// interval, with each key's achieved rate over the last interval and its
// backlog, so that any replica's status page shows the whole
// channel. One Publisher per process and channel; Run is its only loop.
type Publisher struct {
	rdb        redis.UniversalClient
	prefix     string
	channel    string
	replica    string
	interval   time.Duration
	source     func(dst []KeyActivity) []KeyActivity
	overloaded func() bool   // Config.Overloaded
	acts       []KeyActivity // the last reading's, reused
	log        *slog.Logger

	prev    map[string]published // per active key: what the last reading (at prevAt) saw and wrote
	prevAt  time.Time
	gen     uint32 // Publish calls so far (wraps after 680 years at 5 s)
	peak    int    // the most keys prev held since it was made
	rewrite bool   // the next Publish writes the whole hash again

	hist       *history.Recorder // this replica's last hour of its keys (package history)
	histFields []any             // the last history write's, reused
}

// KeyActivity is one active pacing key as this process sees it: what a
// [Publisher] reads at each publish. 40 bytes: a publisher keeps one per
// active key between its readings.
type KeyActivity struct {
	Key string
	// Delivered counts the key's messages the provider accepted through
	// this process since the key became active here (it restarts from 0
	// when an idle key's state is freed); the page derives the achieved
	// rate from two readings.
	Delivered uint64
	// Throttled counts the provider's throttles of the key's sends
	// through this process (every scope), from the same start as
	// Delivered: the history shows those of each step.
	Throttled uint64
	// Backlog is the key's records in this process: held (fetched, not
	// yet finished: waiting for a token, being sent) plus the estimated
	// parked ones whose slots are still ahead, the figure `pacer status`
	// sums (consumer.KeyBacklog.Total).
	Backlog int
}

// NewPublisher returns a Publisher of cfg's channel that calls source at
// each publish to append this process's active keys to dst (the last
// reading's slice, to reuse) and return it: the consumer's active keys, in
// no particular order. It does not contact Redis.
func NewPublisher(rdb redis.UniversalClient, cfg Config, source func(dst []KeyActivity) []KeyActivity) *Publisher {
	cfg.setDefaults()
	return &Publisher{rdb: rdb, prefix: cfg.Prefix, channel: cfg.Channel, replica: cfg.Replica, interval: cfg.Interval,
		source: source, log: cfg.Logger, hist: history.NewRecorder(cfg.HistoryKeys), overloaded: cfg.Overloaded}
}

// Run publishes every interval until ctx ends, then removes this
// replica's entry (best effort). Failures are logged at debug level and
// retried at the next interval: the page is a view, never on the send path.
func (p *Publisher) Run(ctx context.Context) {
	publish := func(time.Time) {
		if err := p.Publish(ctx, time.Now()); err != nil && ctx.Err() == nil {
			p.log.Debug("status page: could not publish the active keys", "err", err)
		}
	}
	publish(time.Now())
	tick.Every(ctx, p.interval, publish)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	p.rdb.ZRem(cctx, replicasKey(p.prefix, p.channel), p.replica)
	p.rdb.ZRem(cctx, overloadedKey(p.prefix, p.channel), p.replica)
	p.rdb.Del(cctx, replicaKey(p.prefix, p.channel, p.replica))
	cancel()
}

// Publish writes one reading taken at now: the active keys, each with its
// achieved rate since the previous reading (messages delivered by this
// process divided by the seconds between readings; the first reading
// counts from the first one's time minus one interval) and its backlog, in
// one transaction. Only what changed since the last reading is
// written: the fields of keys whose value changed, and the keys no longer
// active removed; an idle key (rate 0, no backlog) costs nothing
// after its first zero. The whole hash is written again after a failed
// publish or when it was gone (expired, or lost by Redis). 100,000 active
// keys, rewritten whole every interval, made 20 MB of garbage and 100,000
// HSET fields every 5 s in a process with nothing to send.
func (p *Publisher) Publish(ctx context.Context, now time.Time) error {
	clear(p.acts) // drop the last reading's keys
	p.acts = p.source(p.acts[:0])
	acts := p.acts
	if p.prevAt.IsZero() {
		p.prevAt = now.Add(-p.interval)
	}
	if p.prev == nil {
		p.prev, p.rewrite = map[string]published{}, true
	}
	p.gen++
	secs := now.Sub(p.prevAt).Seconds()
	var fields []any
	for _, a := range acts {
		was, ok := p.prev[a.Key]
		d, th := a.Delivered, a.Throttled
		if ok && was.delivered <= d && was.throttled <= th {
			d -= was.delivered // else the key's state was freed and counts from 0 again
			th -= was.throttled
		}
		p.hist.Add(a.Key, p.prevAt, now, d, th, a.Backlog)
		rate, v := 0.0, warmingUp
		if !ok {
			// First seen active here: it was active for part of the
			// interval only, so d over the interval is no rate (a key at
			// 80/s that began 0.7 s before the reading read 11.5/s).
			rate = -1
		} else {
			if secs > 0 {
				rate = float64(d) / secs
			}
			v = strconv.FormatFloat(rate, 'g', 6, 64)
		}
		r := published{delivered: a.Delivered, throttled: a.Throttled, rate: rate, backlog: int32(min(a.Backlog, math.MaxInt32)), gen: p.gen}
		if p.rewrite || !ok || was.rate != rate || was.backlog != r.backlog {
			fields = append(fields, a.Key, v+" "+strconv.Itoa(a.Backlog))
		}
		p.prev[a.Key] = r
	}
	var gone []string
	for k, r := range p.prev {
		if r.gen != p.gen {
			gone = append(gone, k)
			delete(p.prev, k)
		}
	}
	if p.rewrite {
		gone = nil
	}
	if p.peak = max(p.peak, len(p.prev)); p.peak >= 1024 && len(p.prev) <= p.peak/4 {
		// A Go map keeps the space of its deleted entries.
		m := make(map[string]published, len(p.prev))
		for k, r := range p.prev {
			m[k] = r
		}
		p.prev, p.peak = m, len(m)
	}
	hk := replicaKey(p.prefix, p.channel, p.replica)
	rk := replicasKey(p.prefix, p.channel)
	var kept *redis.BoolCmd
	_, err := p.rdb.TxPipelined(ctx, func(tx redis.Pipeliner) error {
		if p.rewrite {
			tx.Del(ctx, hk)
		} else {
			// false: the hash is gone (expired, or lost by Redis), and with
			// it the fields this reading does not write.
			kept = tx.PExpire(ctx, hk, 3*p.interval)
		}
		if len(gone) > 0 {
			tx.HDel(ctx, hk, gone...)
		}
		if len(fields) > 0 {
			tx.HSet(ctx, hk, fields...)
			tx.PExpire(ctx, hk, 3*p.interval)
		}
		tx.ZAdd(ctx, rk, redis.Z{Score: float64(now.UnixMilli()), Member: p.replica})
		if p.overloaded != nil {
			ok := overloadedKey(p.prefix, p.channel)
			if p.overloaded() {
				tx.ZAdd(ctx, ok, redis.Z{Score: float64(now.UnixMilli()), Member: p.replica})
				tx.PExpire(ctx, ok, time.Hour)
			} else {
				tx.ZRem(ctx, ok, p.replica)
			}
		}
		tx.ZRemRangeByScore(ctx, rk, "-inf", strconv.FormatInt(now.Add(-time.Hour).UnixMilli(), 10))
		tx.PExpire(ctx, rk, time.Hour)
		return nil
	})
	p.prevAt = now
	herr := p.writeHistory(ctx, now)
	if err != nil {
		p.rewrite = true
		return fmt.Errorf("statuspage: publish %q: %w", hk, err)
	}
	// The hash was gone before this reading: the next one writes it whole
	// (an interval with only the changed keys shown).
	p.rewrite = kept != nil && !kept.Val() && len(p.prev) > 0
	return herr
}

// writeHistory writes the keys whose history changed at this reading
// (history.Recorder.Flush) to this replica's history hash; all of them
// again at the next reading when the write failed or the hash was gone.
func (p *Publisher) writeHistory(ctx context.Context, now time.Time) error {
	clear(p.histFields)
	fields, gone := p.hist.Flush(now, p.histFields[:0])
	p.histFields = fields
	if p.hist.Len() == 0 && len(gone) == 0 {
		return nil // nothing kept: no write
	}
	kept, err := history.Write(ctx, p.rdb, p.prefix, p.channel, p.replica, now, fields, gone)
	if err != nil || (!kept && len(fields) < 2*p.hist.Len()) {
		p.hist.Rewrite()
	}
	if err != nil {
		return fmt.Errorf("statuspage: %w", err)
	}
	return nil
}

// published is what a Publisher last published of one key: 32 bytes,
// one per active key.
type published struct {
	delivered uint64  // the key's Delivered at the reading
	throttled uint64  // the key's Throttled at the reading
	rate      float64 // msgs/s written; -1: warming up written
	backlog   int32   // backlog written
	gen       uint32  // the Publish that last saw the key active
}

// warmingUp is the achieved rate a replica publishes for a key it saw
// active for the first time at this reading: not known yet.
const warmingUp = "w"

// parseEntry reads one field value of a replica's hash: warming is true
// (and achieved 0) for a key the replica has not seen active for a whole
// interval yet.
func parseEntry(v string) (achieved float64, warming bool, backlog int, ok bool) {
	a, b, found := strings.Cut(v, " ")
	if !found {
		return 0, false, 0, false
	}
	n, err := strconv.Atoi(b)
	if err != nil || n < 0 {
		return 0, false, 0, false
	}
	if a == warmingUp {
		return 0, true, n, true
	}
	r, err := strconv.ParseFloat(a, 64)
	if err != nil || r < 0 {
		return 0, false, 0, false
	}
	return r, false, n, true
}

// Config configures a [Page] and a [Publisher] of one channel.
type Config struct {
	Channel string // channel name, e.g. "whatsapp"; required
	Prefix  string // Redis key prefix; "" = bucket.DefaultPrefix
	// Policy gives each pacing key its ceiling (configured limit) and AIMD
	// settings, as the running pacer uses them; required for a Page.
	Policy   control.Policy
	Interval time.Duration // publish and refresh interval; default DefaultInterval
	Replica  string        // this process in the replica set; default DefaultReplica()
	Logger   *slog.Logger  // default slog.Default()

	// Overloaded, if set, reports at each publish whether this process
	// gives up more than 1% of its send slots as late (consumer
	// Pacer.Overloaded, pacer_overloaded): the page names such replicas.
	Overloaded func() bool

	// HistoryKeys is how many keys a Publisher keeps the last hour of
	// (package history: the most active; history.RingBytes each);
	// default history.DefaultKeys.
	HistoryKeys int
}

func (c *Config) setDefaults() {
	if c.Prefix == "" {
		c.Prefix = bucket.DefaultPrefix
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.Replica == "" {
		c.Replica = DefaultReplica()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}
