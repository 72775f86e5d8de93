package consumer

import "sync"

// places bounds the records one process handles at once, over every
// partition and pacing key ([Config.ProcessInFlight]): each record being
// handled holds a goroutine (waiting for its slot, its claim, the
// provider's answer) and its stack, so 200 keys x PACER_INFLIGHT 32 held
// 6,400 goroutines where the HTTP pool sends at most 1,024 requests at
// once, and 100,000 keys held one each: their stacks were most of the
// process's memory and its garbage collector's work (a cycle scans every
// stack).
//
// A record that finds no place stays in its key's queue, holding no
// goroutine, and its queue waits in a FIFO of queues: a freed place goes
// to the queue that has waited longest, so a key with a long backlog and
// many records ready cannot keep the places of the keys behind it (each
// queue waits once in the FIFO however many records it has ready, and is
// put back at its end once it took a place).
//
// Lock order: a worker's mu, then places.mu; places never calls a worker
// while it holds mu.
type places struct {
	mu      sync.Mutex
	free    int
	waiting []placeWaiter // FIFO of queues with a record ready and no place
}

// placeWaiter is one key queue waiting for a place.
type placeWaiter struct {
	w *worker
	q *keyQueue
}

func newPlaces(n int) *places { return &places{free: n} }

// take gives q's next record a place and returns true, or queues q (once)
// to be dispatched again when a place is freed and returns false.
// Callers hold w.mu.
func (s *places) take(w *worker, q *keyQueue) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free > 0 && (len(s.waiting) == 0 || q.placeServed) {
		s.free--
		return true
	}
	if !q.placeQueued {
		q.placeQueued = true
		s.waiting = append(s.waiting, placeWaiter{w, q})
	}
	return false
}

// put frees a place and dispatches the queues waiting longest while places
// are free. Callers hold no worker's mu.
func (s *places) put() {
	s.mu.Lock()
	s.free++
	s.mu.Unlock()
	for {
		s.mu.Lock()
		if s.free == 0 || len(s.waiting) == 0 {
			s.mu.Unlock()
			return
		}
		pw := s.waiting[0]
		s.waiting[0] = placeWaiter{}
		s.waiting = s.waiting[1:]
		if len(s.waiting) == 0 {
			s.waiting = nil // let the backing array go
		}
		s.mu.Unlock()
		pw.w.mu.Lock()
		pw.q.placeQueued, pw.q.placeServed = false, true
		pw.w.dispatch(pw.q) // takes places, queues again, or has nothing ready now
		pw.q.placeServed = false
		pw.w.mu.Unlock()
	}
}

// inUse returns how many of the n places are taken; 0 for nil (strict
// order: no bound).
func (s *places) inUse(n int) int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return n - s.free
}
