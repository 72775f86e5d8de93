package history

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

func setKey(prefix, channel string) string { return prefix + ":status:{" + channel + "}:history" }

func hashKey(prefix, channel, replica string) string {
	return prefix + ":status:{" + channel + "}:history:" + replica
}

// Write writes one replica's Flush to Redis in one transaction: fields
// (key, encoding pairs) set and gone removed in its hash, which then
// expires Span after this write, and the replica's entry in the channel's
// set of replicas with history at now (entries older than Span removed).
// A replica whose Write failed calls Recorder.Rewrite, as after a false
// kept: the hash was gone (expired or lost by Redis) before this write,
// with the fields it does not write.
func Write(ctx context.Context, rdb redis.UniversalClient, prefix, channel, replica string, now time.Time, fields []any, gone []string) (kept bool, err error) {
	hk, sk := hashKey(prefix, channel, replica), setKey(prefix, channel)
	var exists *redis.IntCmd
	_, err = rdb.TxPipelined(ctx, func(tx redis.Pipeliner) error {
		exists = tx.Exists(ctx, hk)
		if len(gone) > 0 {
			tx.HDel(ctx, hk, gone...)
		}
		if len(fields) > 0 {
			tx.HSet(ctx, hk, fields...)
		}
		tx.PExpire(ctx, hk, Span)
		tx.ZAdd(ctx, sk, redis.Z{Score: float64(now.UnixMilli()), Member: replica})
		tx.ZRemRangeByScore(ctx, sk, "-inf", strconv.FormatInt(now.Add(-Span).UnixMilli(), 10))
		tx.PExpire(ctx, sk, Span)
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("history: write %q: %w", hk, err)
	}
	return exists.Val() == 1, nil
}

// Series is one pacing key's last hour, summed over every replica that
// kept it: Points steps of Step, oldest first, the last one ending at
// least a publish interval before the reading (so each replica's
// reading of it is in).
type Series struct {
	Start       time.Time `json:"start"`        // when the first step began (UTC)
	StepSeconds float64   `json:"step_seconds"` // length of a step: 10
	// Achieved is the messages delivered in each step divided by its
	// length, msgs/s, to 0.01.
	Achieved  []float64 `json:"achieved"`
	Throttles []int64   `json:"throttles"` // provider throttles of the key in each step
	Backlog   []int64   `json:"backlog"`   // the key's backlog at each step's end
	Replicas  int       `json:"replicas"`  // replicas whose history of the key was read
}

// Merge adds up the points of one key that several replicas wrote
// (Encode, each read by Decode) into the Series of the Points steps
// ending with slot end. Steps a replica has no point of count 0 for it.
// An entry that does not decode is an error naming what is wrong.
func Merge(end int64, entries []string) (*Series, error) {
	first := end - Points + 1
	del := make([]float64, Points)
	s := &Series{Start: SlotStart(first), StepSeconds: Step.Seconds(), Achieved: make([]float64, Points),
		Throttles: make([]int64, Points), Backlog: make([]int64, Points)}
	for _, e := range entries {
		newest, pts, err := Decode(e)
		if err != nil {
			return nil, err
		}
		s.Replicas++
		for i, p := range pts {
			slot := newest - int64(len(pts)-1-i)
			if slot < first || slot > end {
				continue
			}
			j := slot - first
			del[j] += float64(p.Delivered)
			s.Throttles[j] += int64(p.Throttles)
			s.Backlog[j] += int64(p.Backlog)
		}
	}
	for i, d := range del {
		s.Achieved[i] = math.Round(100*d/Step.Seconds()) / 100
	}
	return s, nil
}

// Read returns the Series of keys (the steps up to the last one that
// ended lag before now: a replica's publish interval, so that each has
// written its part), from every replica that wrote history in the last
// Span: one sorted-set read and one pipelined HMGET per replica. A key
// no replica kept has no entry in the map. The error is Redis's, or an
// entry that does not decode (named).
func Read(ctx context.Context, rdb redis.UniversalClient, prefix, channel string, keys []string, now time.Time, lag time.Duration) (map[string]*Series, error) {
	out := map[string]*Series{}
	if len(keys) == 0 {
		return out, nil
	}
	sk := setKey(prefix, channel)
	replicas, err := rdb.ZRangeByScore(ctx, sk, &redis.ZRangeBy{Min: strconv.FormatInt(now.Add(-Span).UnixMilli(), 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("history: read %q: %w", sk, err)
	}
	if len(replicas) == 0 {
		return out, nil
	}
	cmds := make([]*redis.SliceCmd, len(replicas))
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range replicas {
			cmds[i] = p.HMGet(ctx, hashKey(prefix, channel, r), keys...)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("history: read the replicas' history: %w", err)
	}
	end := Slot(now.Add(-lag)) - 1
	for i, k := range keys {
		var entries []string
		for _, c := range cmds {
			if v, ok := c.Val()[i].(string); ok {
				entries = append(entries, v)
			}
		}
		if len(entries) == 0 {
			continue
		}
		s, err := Merge(end, entries)
		if err != nil {
			return nil, fmt.Errorf("history of %q: %w", k, err)
		}
		out[k] = s
	}
	return out, nil
}
