package ledger

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// A Rider is the work of another Redis store that goes in the pipeline of
// a Batcher's next flush rather than in a round trip of its own (see
// [Batcher.Ride]). It adds its commands to pipe (none is an error) and
// returns answered, called once pipe ran: it reads each command's reply
// or error (the flush's Redis error, or the command's own) and hands them
// to whoever waits. ctx is the flush's (it ends 1 s after the flush
// started); answered may use it for a further call it needs (e.g. a
// script Redis had not cached, sent again with its text). Both run on the
// flushing goroutine: they must not wait for another flush.
//
// Under Redis Cluster the pipeline goes to each node that holds a key of
// its commands, in the same round trip: a command's keys must share one
// slot, as always. Without Cluster a flush that writes counts runs in one
// MULTI/EXEC ([CountWriter]): the rider's commands are then in it too.
type Rider = func(ctx context.Context, pipe redis.Pipeliner) (answered func())

// Ride queues r for the next flush, with the claims and marks that wait,
// and returns at once: the flush starts when it would have (a
// FlushInterval after its first operation; [Batcher.FlushBy] for work
// that cannot wait that long). r is called once, in that flush, and is
// not sent again if the flush fails: its answered reads the failure.
// After Close, r runs at once, in a pipeline of its own, on the caller's
// goroutine.
//
// A store that answers many callers in one flush queues one Rider for
// all those waiting and gathers their work itself when the Rider is
// called (see portfolio.Batch), so the flush holds one Rider, not one
// per caller.
func (b *Batcher) Ride(r Rider) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		defer cancel()
		pipe := b.l.rdb.Pipeline()
		answered := r(ctx, pipe)
		_, _ = pipe.Exec(ctx)
		answered()
		return
	}
	b.riders = append(b.riders, r)
	b.signal()
	b.mu.Unlock()
}

// ride adds riders' commands to pipe and returns what answers them once
// pipe ran.
func ride(ctx context.Context, pipe redis.Pipeliner, riders []Rider) func() {
	answers := make([]func(), len(riders))
	for i, r := range riders {
		answers[i] = r(ctx, pipe)
	}
	return func() {
		for _, a := range answers {
			a()
		}
	}
}
