package pacer

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// worker owns one partition: a queue of fetched records, up to
// Config.InFlight of them handled at once. Offsets are marked for commit
// only up to the lowest record not yet finished, so a crash re-delivers
// and never skips.
type worker struct {
	p      *Pacer
	cl     *kgo.Client
	tp     tp
	ctx    context.Context // ends when the partition is revoked or the pacer stops
	cancel context.CancelFunc
	done   chan struct{}
	wake   chan struct{}

	mu       sync.Mutex
	queue    []*kgo.Record
	full     bool       // fetching paused: MaxQueued records wait
	notDue   int        // records holding for their due time (fetching paused while > 0)
	paused   bool       // the partition is paused at the client
	inflight []*pending // records being handled, in offset order
}

// pending is one record being handled.
type pending struct {
	r        *kgo.Record
	finished bool
}

func newWorker(p *Pacer, cl *kgo.Client, k tp) *worker {
	ctx, cancel := context.WithCancel(context.Background())
	return &worker{p: p, cl: cl, tp: k, ctx: ctx, cancel: cancel, done: make(chan struct{}), wake: make(chan struct{}, 1)}
}

// syncPause pauses or resumes fetching the partition to match full and
// notDue. Callers hold w.mu.
func (w *worker) syncPause() {
	want := w.full || w.notDue > 0
	if want == w.paused {
		return
	}
	w.paused = want
	parts := map[string][]int32{w.tp.topic: {w.tp.partition}}
	if want {
		w.cl.PauseFetchPartitions(parts)
	} else {
		w.cl.ResumeFetchPartitions(parts)
	}
}

func (w *worker) push(rs []*kgo.Record) {
	w.mu.Lock()
	w.queue = append(w.queue, rs...)
	if len(w.queue) >= w.p.cfg.MaxQueued {
		w.full = true
		w.syncPause()
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
	if w.full && len(w.queue) <= w.p.cfg.MaxQueued/2 {
		w.full = false
		w.syncPause()
	}
	return r
}

// waitDue holds a record until due: fetching the partition pauses
// meanwhile, and the poll loop goes on serving other partitions. It reports
// false if the worker was stopped first.
func (w *worker) waitDue(due time.Time) bool {
	d := time.Until(due)
	if d <= 0 {
		return true
	}
	w.mu.Lock()
	w.notDue++
	w.syncPause()
	w.mu.Unlock()
	ok := sleep(w.ctx, d)
	w.mu.Lock()
	w.notDue--
	w.syncPause()
	w.mu.Unlock()
	return ok
}

// finish records that e's record is finished and marks for commit the
// longest run of finished records at the head of the in-flight list.
func (w *worker) finish(e *pending) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e.finished = true
	var last *kgo.Record
	for len(w.inflight) > 0 && w.inflight[0].finished {
		last = w.inflight[0].r
		w.inflight[0] = nil
		w.inflight = w.inflight[1:]
	}
	if last != nil {
		w.cl.MarkCommitRecords(last)
	}
}

func (w *worker) run() {
	var wg sync.WaitGroup
	defer close(w.done)
	defer wg.Wait() // in-flight sends finish (bounded by SendTimeout) before done
	defer func() {
		w.mu.Lock()
		n := len(w.queue)
		w.queue = nil
		w.mu.Unlock()
		w.p.m.queued.WithLabelValues().Sub(float64(n))
	}()
	slots := make(chan struct{}, w.p.cfg.InFlight)
	for {
		select {
		case slots <- struct{}{}:
		case <-w.ctx.Done():
			return
		}
		var r *kgo.Record
		for r == nil {
			if r = w.pop(); r != nil {
				break
			}
			select {
			case <-w.ctx.Done():
				return
			case <-w.wake:
			}
		}
		w.p.m.queued.WithLabelValues().Dec()
		e := &pending{r: r}
		w.mu.Lock()
		w.inflight = append(w.inflight, e)
		w.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			if w.p.handle(w, r) {
				w.finish(e)
			}
			// Not finished (stopped first): it stays at or after the head
			// of the in-flight list, so nothing past it is ever marked.
		}()
	}
}
