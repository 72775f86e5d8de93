package portfolio

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/pacerhq/pacer/internal/wire"
	"github.com/pacerhq/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// Flusher is a pipeline that goes to Redis at intervals with the work of
// several stores: admissions ride in it rather than in a round trip of
// their own. [ledger.Batcher] is one (its flush of claims and delivered
// marks, every 20 ms by default).
type Flusher interface {
	// Ride queues write for the next flush: write adds its commands to
	// pipe and returns answered, called once pipe ran (both on the
	// flushing goroutine). After the Flusher closed, write runs at once
	// in a pipeline of its own.
	Ride(write func(ctx context.Context, pipe redis.Pipeliner) (answered func()))
	// FlushBy has the next flush start by t at the latest (at once when t
	// is not after now).
	FlushBy(t time.Time)
}

// maxBatch bounds the admissions of one script call, so one call does not
// hold Redis long (a call of 1,000 runs about 2,000 commands).
const maxBatch = 1000

// Batch admits business-initiated messages as [Store.Admit] does, but in
// the flushes of a [Flusher] rather than in a round trip each: the
// admissions that wait for a flush go in it as one script call per
// portfolio (up to 1,000 admissions each; under Redis Cluster in the
// portfolio's slot, as Admit's), run in the order they were made, on
// Redis TIME read once for the call. Each answers what Admit would have
// answered for it called in that order at that time: the window and tier
// are as exact across replicas as Admit's. Script calls per message fall
// to 1 / (admissions per portfolio per flush), and no round trip is added
// to the Flusher's.
//
// The admissions of one call share one score (its TIME): a recipient
// admitted New and then Seen in the same call keeps the New's score, so
// [Store.GiveBack] of the first removes it, as two Admits within one
// millisecond would.
//
// A Batch is safe for concurrent use.
type Batch struct {
	s *Store
	f Flusher

	mu      sync.Mutex
	waiting []*pendingAdmit
	queued  bool // a write for waiting is queued with f
}

type pendingAdmit struct {
	channel, portfolio, hash string
	marketing                bool

	taken bool // under Batch.mu: a flush took it (it may be written)
	done  chan struct{}
	a     Admission
	err   error
}

// Batched returns a Batch that admits with s's keys and window in f's
// flushes; with a nil f, its Admit is s's (a script call each).
func (s *Store) Batched(f Flusher) *Batch {
	return &Batch{s: s, f: f}
}

// Admit queues the admission of hash (suppress.Hash of the recipient) to
// portfolio for the Flusher's next flush and waits for its answer: the
// Admission, as [Store.Admit] answers it, or an error wrapping Redis's
// (the flush failed or timed out: the admission may have been written or
// not, as a lost answer of Admit's). The flush starts by by at the latest
// (zero: the Flusher's interval, 20 ms for the ledger's), so a message
// that has nothing else to wait for can have it at once. If ctx ends
// before a flush took the admission, nothing is written and Admit returns
// ctx.Err() wrapped; once taken, it waits for the flush (one round trip,
// bounded by the Flusher's timeout). An empty hash is an error at once.
func (b *Batch) Admit(ctx context.Context, channel, portfolio, hash string, marketing bool, by time.Time) (Admission, error) {
	if b.f == nil {
		return b.s.Admit(ctx, channel, portfolio, hash, marketing)
	}
	if hash == "" {
		return Admission{}, fmt.Errorf("portfolio: admit to %s: the recipient hash is empty", portfolio)
	}
	p := &pendingAdmit{channel: channel, portfolio: portfolio, hash: hash, marketing: marketing, done: make(chan struct{})}
	b.mu.Lock()
	b.waiting = append(b.waiting, p)
	ride := !b.queued
	b.queued = true
	b.mu.Unlock()
	if ride {
		b.f.Ride(b.write)
	}
	if !by.IsZero() {
		b.f.FlushBy(by)
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		if b.cancel(p) {
			return Admission{}, fmt.Errorf("portfolio: admit to %s: %w", portfolio, ctx.Err())
		}
		<-p.done
	}
	return p.a, p.err
}

// cancel takes p out of the waiting admissions unless a flush took it,
// and reports whether it did.
func (b *Batch) cancel(p *pendingAdmit) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p.taken {
		return false
	}
	for i, q := range b.waiting {
		if q == p {
			b.waiting = append(b.waiting[:i], b.waiting[i+1:]...)
			break
		}
	}
	p.taken = true
	return true
}

// batchCall is one script call of a flush: admissions of one portfolio,
// in the order they were made.
type batchCall struct {
	keys []string
	args []any
	ps   []*pendingAdmit
	cmd  *redis.Cmd
}

// write adds the admissions that wait to pipe, one "b" call of
// portfolio.lua per portfolio (and per 1,000), and returns what answers
// them once pipe ran. A call Redis answers NOSCRIPT (its script cache was
// emptied: a restart, SCRIPT FLUSH) is sent again with the script's text,
// in one more pipeline.
func (b *Batch) write(ctx context.Context, pipe redis.Pipeliner) func() {
	b.mu.Lock()
	ps := b.waiting
	b.waiting, b.queued = nil, false
	for _, p := range ps {
		p.taken = true
	}
	b.mu.Unlock()
	var calls []*batchCall
	open := map[[2]string]*batchCall{}
	for _, p := range ps {
		g := [2]string{p.channel, p.portfolio}
		c := open[g]
		if c == nil || len(c.ps) == maxBatch {
			c = &batchCall{keys: b.s.windowKeys(p.channel, p.portfolio), args: []any{"b", b.s.window.Milliseconds()}}
			open[g] = c
			calls = append(calls, c)
		}
		m := ""
		if p.marketing {
			m = "m"
		}
		c.ps = append(c.ps, p)
		c.args = append(c.args, p.hash, m)
	}
	for _, c := range calls {
		c.cmd = pipe.EvalSha(ctx, script.Hash(), c.keys, c.args...)
	}
	return func() {
		wire.EvalAgain(calls, func(c *batchCall) error { return c.cmd.Err() }, func(again []*batchCall) {
			pipe := b.s.rdb.Pipeline()
			for _, c := range again {
				c.cmd = pipe.Eval(ctx, lua.Portfolio, c.keys, c.args...)
			}
			_, _ = pipe.Exec(ctx)
		})
		for _, c := range calls {
			c.answer()
		}
	}
}

// answer hands each admission of c its verdict, or c's error.
func (c *batchCall) answer() {
	v, err := c.cmd.Slice()
	if err == nil && len(v) != len(c.ps) {
		err = fmt.Errorf("%d replies for %d admissions", len(v), len(c.ps))
	}
	for i, p := range c.ps {
		if err != nil {
			p.err = fmt.Errorf("portfolio: admit to %s: %w", p.portfolio, err)
		} else {
			r, _ := v[i].([]any)
			p.a, p.err = parseAdmission(p.portfolio, p.hash, r)
		}
		close(p.done)
	}
}
