package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/internal/tick"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/redis/go-redis/v9"
)

// limitKey holds a channel's configured limit as the running pacers see it,
// so `pacer status` shows theirs rather than its own shell's.
func limitKey(prefix, channel string) string { return prefix + ":channel:" + channel + ":limit" }

// The channel's limit record lives limitTTL past its last write, and each
// running pacer writes it again every limitRefresh: it outlives a pacer
// that stopped or crashed by at most limitTTL, and one refresh lost to a
// slow Redis does not let it expire while pacers run.
const (
	limitTTL     = time.Minute
	limitRefresh = 20 * time.Second
)

// keepLimit records the channel's limit for `pacer status` (publishLimit)
// and writes it again every `every`, each write expiring after ttl, until
// ctx ends. The record is then left to expire: other replicas of the
// channel may still run and refresh it. Call it only once the pacer has
// started (its start-up checks passed), so a run that fails them records
// nothing.
func keepLimit(ctx context.Context, rdb redis.UniversalClient, prefix, channel string, lim bucket.Limit, log *slog.Logger, every, ttl time.Duration) {
	publishLimit(ctx, rdb, prefix, channel, lim, ttl, log)
	tick.Every(ctx, every, func(time.Time) {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := writeLimit(wctx, rdb, prefix, channel, lim, ttl); err != nil && ctx.Err() == nil {
			log.Debug("could not refresh the channel limit for pacer status", "err", err)
		}
	})
}

// publishLimit records the channel's configured limit in Redis, expiring
// after ttl (best effort: Redis may be down; keepLimit writes it again).
//
// A different limit recorded already (by another running replica, or a run
// that stopped less than ttl ago) is logged as a warning: the replicas of
// one channel share its buckets, and each paces them at the limit it was
// started with, so replicas started with different PACER_<CHANNEL>_RATE or
// _BURST pace at neither.
func publishLimit(ctx context.Context, rdb redis.UniversalClient, prefix, channel string, lim bucket.Limit, ttl time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if was, ok := publishedLimit(ctx, rdb, prefix, channel); ok && was != lim {
		log.Warn("the channel's limit recorded in Redis (by another replica, or a run before a change) differs from this one's: every replica of a channel should run with the same rate and burst",
			"recorded_rate", was.PerSecond, "recorded_burst", was.Burst, "rate", lim.PerSecond, "burst", lim.Burst)
	}
	if err := writeLimit(ctx, rdb, prefix, channel, lim, ttl); err != nil {
		log.Debug("could not record the channel limit for pacer status", "err", err)
	}
}

// writeLimit sets the limit record (hash: rate in msgs/s, burst) and its
// expiry of ttl in one transaction.
func writeLimit(ctx context.Context, rdb redis.UniversalClient, prefix, channel string, lim bucket.Limit, ttl time.Duration) error {
	k := limitKey(prefix, channel)
	_, err := rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.HSet(ctx, k, "rate", strconv.FormatFloat(lim.PerSecond, 'g', -1, 64), "burst", lim.Burst)
		pipe.PExpire(ctx, k, ttl)
		return nil
	})
	return err
}

// publishedLimit reads the limit the running pacers recorded; ok is false
// when there is none.
func publishedLimit(ctx context.Context, rdb redis.UniversalClient, prefix, channel string) (bucket.Limit, bool) {
	m, err := rdb.HGetAll(ctx, limitKey(prefix, channel)).Result()
	if err != nil || len(m) == 0 {
		return bucket.Limit{}, false
	}
	rate, err1 := strconv.ParseFloat(m["rate"], 64)
	burst, err2 := strconv.Atoi(m["burst"])
	lim := bucket.Limit{PerSecond: rate, Burst: burst}
	if err1 != nil || err2 != nil || lim.Validate() != nil {
		return bucket.Limit{}, false
	}
	return lim, true
}

// maxStatusKeys bounds the keys `pacer status` lists without --key.
const maxStatusKeys = 1000

func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) error {
	fs, channel := commandFlags("pacer status", "channel", stderr)
	key := fs.String("key", "", "one pacing key; default: every key with state in Redis (cooldown, adapted rate, breaker, bucket)")
	ch, err := parseChannelFlags(fs, args, channel)
	if err != nil {
		return err
	}
	cfg, err := loadConfig(lookup, ch)
	if err != nil {
		return fmt.Errorf("%w: %w", errConfig, err)
	}
	// Answer plainly when Redis cannot be read, before printing anything.
	rdb, ping, err := pingRedis(ctx, cfg, 3*time.Second)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if ping != nil {
		if r := redisRefusal(ping); r != "" {
			return fmt.Errorf("status: redis: %s: %v", r, ping)
		}
		if h := redisHint(cfg, ping); h != "" {
			return fmt.Errorf("status: cannot read Redis: %s: %v", h, ping)
		}
		return fmt.Errorf("status: cannot read Redis (%s): %v", redisSetting(cfg), ping)
	}
	ad := adapt.New(rdb, bucket.Config{Prefix: cfg.RedisPrefix})
	names := ad.Keys()
	pc := cfg.pacerConfig(ch)
	ceiling, from := pc.Limit, "this shell's PACER_* settings, as no running pacer recorded one"
	if pub, ok := publishedLimit(ctx, rdb, cfg.RedisPrefix, *channel); ok {
		ceiling, from = pub, "the running pacers"
	}
	// This shell's floor was checked against this shell's rate; the
	// running pacers' may be lower.
	aimd := pc.AIMD
	aimd.Floor = min(aimd.Floor, ceiling.PerSecond)
	fmt.Fprintf(stdout, "channel %s: limit %.4g msgs/s, burst %d per key (LIMIT/S), from %s\n", *channel, ceiling.PerSecond, ceiling.Burst, from)

	keys := []string{*key}
	if *key == "" {
		if keys, err = scanKeys(ctx, rdb, cfg.RedisPrefix, *channel); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
	}
	// A key's own limit (`pacer limit set`) is its ceiling, as the pacers
	// apply it: one pipelined read for every key shown.
	overrides, _, err := control.New(rdb, names).LimitsOf(ctx, *channel, keys)
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tRATE/S\tLIMIT/S\tACHIEVED/S\tUTIL\tTOKENS\tCOOLDOWN\tBREAKER\tREASON")
	for _, k := range keys {
		ceiling, aimd, set := keyCeiling(ceiling, aimd, overrides[k])
		n, err := rdb.Exists(ctx, names.Bucket(*channel, k), names.Cooldown(*channel, k),
			names.AIMD(*channel, k), names.Breaker(*channel, k), names.Achieved(*channel, k)).Result()
		if err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		if n == 0 {
			// State expires once it says nothing a fresh key would not:
			// a full bucket, no cooldown, the rate not adapted, nothing
			// accepted lately.
			fmt.Fprintf(tw, "%s\t%.4g\t%.4g%s\t-\t-\t%d\t0s\tclosed\tidle (no state kept: bucket full, not throttled lately)\n",
				quoteText(k), ceiling.PerSecond, ceiling.PerSecond, set, ceiling.Burst)
			continue
		}
		s, err := ad.Snapshot(ctx, *channel, k, ceiling, aimd)
		if err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		br := s.Breaker.State.String()
		if s.Breaker.OpenLeft > 0 {
			br += " " + s.Breaker.OpenLeft.Round(time.Second).String()
		}
		floor := ""
		if s.Adapted.AtFloor {
			floor = " (floor)"
		}
		// Utilization: what every replica saw accepted over the last 5 s or
		// more, over the rate the key is paced at.
		achieved, util := "-", "-"
		if r, err := ad.Achieved(ctx, *channel, k); err != nil {
			return fmt.Errorf("redis: %w", err)
		} else if r.WarmingUp {
			achieved = "warming up"
		} else if r.Known {
			achieved = strconv.FormatFloat(r.PerSecond, 'f', 1, 64)
			util = fmt.Sprintf("%.0f%%", 100*r.PerSecond/s.Limit.PerSecond)
		}
		fmt.Fprintf(tw, "%s\t%.4g%s\t%.4g%s\t%s\t%s\t%.1f\t%s\t%s\t%s\n", quoteText(k), s.Limit.PerSecond, floor, ceiling.PerSecond, set,
			achieved, util, s.Tokens, s.Adapted.CooldownLeft.Round(time.Millisecond), br, s.Breaker.Reason)
	}
	tw.Flush()
	if *key == "" {
		more := ""
		if len(keys) >= maxStatusKeys {
			more = fmt.Sprintf(" (the first %d; use --key for others)", maxStatusKeys)
		}
		fmt.Fprintf(stdout, "%d key(s) of channel %s seen in Redis (bucket, cooldown, rate, breaker or delivered ids)%s\n", len(keys), *channel, more)
		return printBacklog(ctx, stdout, rdb, cfg.RedisPrefix, *channel, 10)
	}
	return nil
}

// keyCeiling returns the ceiling and AIMD a key is paced with: the
// channel's, or the key's own limit l when one is set and a pacer would
// apply it (burst 0: the channel's; the AIMD floor lowered to a lower rate,
// as control.OverridePolicy does); set is " (key)" then, else "".
func keyCeiling(channel bucket.Limit, aimd adapt.AIMD, l control.KeyLimit) (bucket.Limit, adapt.AIMD, string) {
	if l.Key == "" {
		return channel, aimd, ""
	}
	lim := bucket.Limit{PerSecond: l.PerSecond, Burst: l.Burst}
	if lim.Burst == 0 {
		lim.Burst = channel.Burst
	}
	a := aimd
	a.Floor = min(a.Floor, lim.PerSecond)
	if a.Validate(lim) != nil { // refused by the pacers, which keep the channel's
		return channel, aimd, ""
	}
	return lim, a, " (key)"
}

// scanKeys lists the pacing keys of channel that have any state in Redis
// (on every master of a cluster).
func scanKeys(ctx context.Context, rdb redis.UniversalClient, prefix, channel string) ([]string, error) {
	pattern := prefix + ":{" + channel + ":*}:*"
	var mu sync.Mutex
	seen := map[string]bool{}
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			// The pacing key is the hash tag's tail: the first "}" ends it
			// (a ledger id after it may hold braces).
			open := strings.Index(k, "{"+channel+":")
			if open < 0 {
				continue
			}
			tag := k[open+len(channel)+2:]
			end := strings.IndexByte(tag, '}')
			if end < 0 {
				continue
			}
			mu.Lock()
			full := len(seen) >= maxStatusKeys
			if !full {
				seen[tag[:end]] = true
			}
			mu.Unlock()
			if full {
				break
			}
		}
		return iter.Err()
	}
	if err := onEachServer(ctx, rdb, scan); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out, nil
}

// quietRedis drops go-redis's internal log lines (dial retries), which
// would interleave with status output; errors reach the caller anyway.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// redisSetting names the setting that chose the Redis server, never its
// value (a URL may hold a password).
func redisSetting(cfg config) string {
	switch {
	case cfg.RedisClusterAddrs != "":
		return "PACER_REDIS_CLUSTER_ADDRS=" + cfg.RedisClusterAddrs
	case cfg.RedisSentinelAddrs != "":
		return "PACER_REDIS_SENTINEL_ADDRS=" + cfg.RedisSentinelAddrs
	}
	if u, err := url.Parse(cfg.RedisURL); err == nil {
		return "PACER_REDIS_URL host " + u.Host
	}
	return "PACER_REDIS_URL"
}
