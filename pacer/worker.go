package pacer

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Reasons a worker pauses fetching its partition.
const (
	pauseQueueFull = 1 << iota // MaxQueued records are waiting
	pauseNotDue                // the head retry record is not due yet
)

// worker owns one partition: a queue of fetched records handled in order,
// so the commit point is always just past the last finished record.
type worker struct {
	p      *Pacer
	cl     *kgo.Client
	tp     tp
	ctx    context.Context // ends when the partition is revoked or the pacer stops
	cancel context.CancelFunc
	done   chan struct{}
	wake   chan struct{}

	mu     sync.Mutex
	queue  []*kgo.Record
	paused int // pause reasons
}

func newWorker(p *Pacer, cl *kgo.Client, k tp) *worker {
	ctx, cancel := context.WithCancel(context.Background())
	return &worker{p: p, cl: cl, tp: k, ctx: ctx, cancel: cancel, done: make(chan struct{}), wake: make(chan struct{}, 1)}
}

// setPause adds (on) or removes a pause reason and pauses or resumes the
// partition when the set becomes non-empty or empty. Callers hold w.mu.
func (w *worker) setPause(reason int, on bool) {
	was := w.paused != 0
	if on {
		w.paused |= reason
	} else {
		w.paused &^= reason
	}
	parts := map[string][]int32{w.tp.topic: {w.tp.partition}}
	switch is := w.paused != 0; {
	case is && !was:
		w.cl.PauseFetchPartitions(parts)
	case !is && was:
		w.cl.ResumeFetchPartitions(parts)
	}
}

func (w *worker) push(rs []*kgo.Record) {
	w.mu.Lock()
	w.queue = append(w.queue, rs...)
	if len(w.queue) >= w.p.cfg.MaxQueued {
		w.setPause(pauseQueueFull, true)
	}
	w.mu.Unlock()
	w.p.m.queued.WithLabelValues().Add(float64(len(rs)))
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *worker) pop() *kgo.Record {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queue) == 0 {
		return nil
	}
	r := w.queue[0]
	w.queue[0] = nil
	w.queue = w.queue[1:]
	if len(w.queue) <= w.p.cfg.MaxQueued/2 {
		w.setPause(pauseQueueFull, false)
	}
	return r
}

// waitDue holds the partition's head record until due: fetching pauses
// meanwhile, and the poll loop goes on serving other partitions. It reports
// false if the worker was stopped first.
func (w *worker) waitDue(due time.Time) bool {
	d := time.Until(due)
	if d <= 0 {
		return true
	}
	w.mu.Lock()
	w.setPause(pauseNotDue, true)
	w.mu.Unlock()
	ok := sleep(w.ctx, d)
	w.mu.Lock()
	w.setPause(pauseNotDue, false)
	w.mu.Unlock()
	return ok
}

func (w *worker) run() {
	defer close(w.done)
	defer func() {
		w.mu.Lock()
		n := len(w.queue)
		w.queue = nil
		w.mu.Unlock()
		w.p.m.queued.WithLabelValues().Sub(float64(n))
	}()
	for {
		r := w.pop()
		if r == nil {
			select {
			case <-w.ctx.Done():
				return
			case <-w.wake:
				continue
			}
		}
		w.p.m.queued.WithLabelValues().Dec()
		if !w.p.handle(w, r) {
			return // stopped before the record finished: not marked, re-delivered
		}
		w.cl.MarkCommitRecords(r)
	}
}
