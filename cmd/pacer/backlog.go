package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/pacerhq/pacer/internal/tick"
	"github.com/pacerhq/pacer/pacer/consumer"
	"github.com/redis/go-redis/v9"
)

// Backlog publication for `pacer status`: every backlogEvery each running
// pacer replaces its sorted set <prefix>:channel:<channel>:backlog:<owner>
// (member: pacing key, score: records held plus estimated parked) with its
// top backlogTop keys, expiring after 3 periods so a dead process's entry
// goes away.
const (
	backlogEvery = 5 * time.Second
	backlogTop   = 20
)

func backlogKey(prefix, channel, owner string) string {
	return prefix + ":channel:" + channel + ":backlog:" + owner
}

// publishBacklog runs until ctx ends; failures are logged at debug (status
// then shows older or no figures).
func publishBacklog(ctx context.Context, rdb redis.UniversalClient, prefix, channel, owner string, p *consumer.Pacer, log *slog.Logger) {
	key := backlogKey(prefix, channel, owner)
	tick.Every(ctx, backlogEvery, func(time.Time) {
		top := p.Backlog(backlogTop)
		pipe := rdb.TxPipeline()
		pipe.Del(ctx, key)
		if len(top) > 0 {
			zs := make([]redis.Z, len(top))
			for i, b := range top {
				zs[i] = redis.Z{Score: float64(b.Total()), Member: b.Key}
			}
			pipe.ZAdd(ctx, key, zs...)
			pipe.Expire(ctx, key, 3*backlogEvery)
		}
		if _, err := pipe.Exec(ctx); err != nil && ctx.Err() == nil {
			log.Debug("could not record the backlog for pacer status", "err", err)
		}
	})
}

// printBacklog writes the n keys with the largest backlog over every
// running pacer of channel (summed across processes), or a line saying
// there is none.
func printBacklog(ctx context.Context, w io.Writer, rdb redis.UniversalClient, prefix, channel string, n int) error {
	pattern := backlogKey(prefix, channel, "*")
	var mu sync.Mutex
	sum := map[string]float64{}
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, pattern, 100).Iterator()
		for iter.Next(ctx) {
			zs, err := c.ZRangeWithScores(ctx, iter.Val(), 0, -1).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			for _, z := range zs {
				sum[z.Member.(string)] += z.Score
			}
			mu.Unlock()
		}
		return iter.Err()
	}
	if err := onEachServer(ctx, rdb, scan); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	if len(sum) == 0 {
		fmt.Fprintln(w, "no backlog: no running pacer holds or parked records of any key")
		return nil
	}
	keys := make([]string, 0, len(sum))
	for k := range sum {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if sum[keys[i]] != sum[keys[j]] {
			return sum[keys[i]] > sum[keys[j]]
		}
		return strings.Compare(keys[i], keys[j]) < 0
	})
	fmt.Fprintf(w, "top keys by backlog (records held plus estimated parked, every running pacer, as of the last %v):\n", backlogEvery)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tBACKLOG")
	for i, k := range keys {
		if i == n {
			break
		}
		fmt.Fprintf(tw, "%s\t%.0f\n", quoteText(k), sum[k])
	}
	return tw.Flush()
}
