package ledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Partition names one Kafka partition of a consumer group.
type Partition struct {
	Group, Topic string
	Partition    int32
}

// Horizons reads the horizon of each partition of channel: one more than
// the highest offset its owners may have handled (claimed, so possibly
// sent), as the last owner set it with [Ledger.SetHorizons] before it
// handled any record at or past it; -1 where none is recorded (no owner
// handled a record of it within the ledger's TTL, or one that did ran
// without horizons). A partition's next owner reads again the records
// past its last commit: only those below the horizon can be in the ledger
// already. One round trip (a pipeline of GETs). The answer has one value
// per partition, in order; on an error (wrapping Redis's) every value is
// -1 and the caller cannot tell which records were handled.
func (l *Ledger) Horizons(ctx context.Context, channel string, ps []Partition) ([]int64, error) {
	return l.offsets(ctx, ps, "horizon", func(pipe redis.Pipeliner, p Partition) *redis.StringCmd {
		return pipe.Get(ctx, l.keys.Horizon(channel, p.Group, p.Topic, p.Partition))
	})
}

// SetHorizons records the horizon offs[i] (an offset, >= 0) of each
// partition ps[i] of channel, kept for the ledger's TTL (the entries it
// guards live no longer): an owner sets it above a record's offset before
// it handles that record. One round trip (a pipeline of SETs). Errors
// wrap Redis's.
func (l *Ledger) SetHorizons(ctx context.Context, channel string, ps []Partition, offs []int64) error {
	return l.setOffsets(ctx, "horizons", l.keys.Horizon, channel, ps, offs)
}

// setOffsets sets the key of channel and each partition ps[i] to offs[i]
// for the ledger's TTL, in one pipeline; what ("horizons") names them in
// errors.
func (l *Ledger) setOffsets(ctx context.Context, what string, key func(channel, group, topic string, partition int32) string,
	channel string, ps []Partition, offs []int64) error {
	if len(ps) != len(offs) {
		return fmt.Errorf("ledger: %d %s for %d partitions", len(offs), what, len(ps))
	}
	if len(ps) == 0 {
		return nil
	}
	pipe := l.rdb.Pipeline()
	for i, p := range ps {
		pipe.Set(ctx, key(channel, p.Group, p.Topic, p.Partition), offs[i], l.ttl)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("ledger: set %s: %w", what, err)
	}
	return nil
}

// SetStopHorizons records the stop horizon offs[i] (an offset, >= 0) of
// each partition ps[i] of channel, kept for the ledger's TTL: an owner that
// stopped cleanly, after its last commit, sets it to one more than the
// highest offset it fetched (at least what it knew a previous owner may
// have handled), a tighter bound than the horizon, which runs ahead. One
// round trip (a pipeline of SETs). Errors wrap Redis's.
func (l *Ledger) SetStopHorizons(ctx context.Context, channel string, ps []Partition, offs []int64) error {
	return l.setOffsets(ctx, "stop horizons", l.keys.StopHorizon, channel, ps, offs)
}

// TakeStopHorizons reads and removes the stop horizon of each partition of
// channel ([Ledger.SetStopHorizons]), so that it bounds only the records
// of the owner that set it: a partition's next owner takes it before it
// handles anything, and a crash of that owner leaves none. -1 where none
// is recorded. One round trip (a pipeline of a GET and a DEL per
// partition). The answer has one value per partition, in order; on an
// error (wrapping Redis's) every value is -1.
func (l *Ledger) TakeStopHorizons(ctx context.Context, channel string, ps []Partition) ([]int64, error) {
	return l.offsets(ctx, ps, "stop horizon", func(pipe redis.Pipeliner, p Partition) *redis.StringCmd {
		k := l.keys.StopHorizon(channel, p.Group, p.Topic, p.Partition)
		get := pipe.Get(ctx, k)
		pipe.Del(ctx, k)
		return get
	})
}

// offsets reads one offset (a decimal integer >= 0) per partition of ps in
// one pipeline, whose commands add queues for each partition, returning
// the GET that answers it: -1 where the key is missing. what names the
// value in errors (wrapping Redis's, or naming the partition whose value
// is not an offset); on an error every value is -1.
func (l *Ledger) offsets(ctx context.Context, ps []Partition, what string, add func(redis.Pipeliner, Partition) *redis.StringCmd) ([]int64, error) {
	out := make([]int64, len(ps))
	for i := range out {
		out[i] = -1
	}
	if len(ps) == 0 {
		return out, nil
	}
	pipe := l.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(ps))
	for i, p := range ps {
		cmds[i] = add(pipe, p)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return out, fmt.Errorf("ledger: %ss: %w", what, err)
	}
	for i, c := range cmds {
		s, err := c.Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		n, perr := strconv.ParseInt(s, 10, 64)
		if err != nil || perr != nil || n < 0 {
			for j := range out {
				out[j] = -1
			}
			return out, fmt.Errorf("ledger: %s of %s/%d: %q %v", what, ps[i].Topic, ps[i].Partition, s, errors.Join(err, perr))
		}
		out[i] = n
	}
	return out, nil
}

// SetStopHorizons is [Ledger.SetStopHorizons], written at once.
func (b *Batcher) SetStopHorizons(ctx context.Context, channel string, ps []Partition, offs []int64) error {
	return b.l.SetStopHorizons(ctx, channel, ps, offs)
}

// TakeStopHorizons is [Ledger.TakeStopHorizons], at once.
func (b *Batcher) TakeStopHorizons(ctx context.Context, channel string, ps []Partition) ([]int64, error) {
	return b.l.TakeStopHorizons(ctx, channel, ps)
}

// Horizons is [Ledger.Horizons], read at once (not batched).
func (b *Batcher) Horizons(ctx context.Context, channel string, ps []Partition) ([]int64, error) {
	return b.l.Horizons(ctx, channel, ps)
}

// SetHorizons is [Ledger.SetHorizons], written at once (not batched).
func (b *Batcher) SetHorizons(ctx context.Context, channel string, ps []Partition, offs []int64) error {
	return b.l.SetHorizons(ctx, channel, ps, offs)
}
