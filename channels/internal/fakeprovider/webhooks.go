package fakeprovider

import (
	"bytes"
	"context"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Share maps a recipient onto [0, 1) by a hash, the same for every
// message to it: a fake gives a configured share of its recipients a fate
// (a failure, a bounce) and all their messages share it.
func Share(to string) float64 {
	f := fnv.New64a()
	f.Write([]byte(to))
	return float64(f.Sum64()%1_000_000) / 1_000_000
}

// Hooks sends a fake's webhooks: each POST in a goroutine of its own,
// retried until answered 2xx as providers retry, with a wait of Retry
// doubling up to 2 s, for up to Attempts. Wait waits for all of them.
type Hooks struct {
	URL      string
	Retry    time.Duration // default 100 ms
	Attempts int           // default 50
	Client   *http.Client  // default http.DefaultClient

	wg      sync.WaitGroup
	rmu     sync.Mutex
	rnd     *rand.Rand
	posts   atomic.Int64
	retries atomic.Int64
	dropped atomic.Int64
}

// Installed holds a fake's webhook sender S, nil until the fake's
// SendWebhooks installs one, and the [Hooks] it sends through. Its methods
// are safe for concurrent use.
type Installed[S any] struct {
	mu     sync.Mutex
	sender *S
	hooks  *Hooks
}

// Install initialises hooks ([Hooks.Init]) and makes sender, which sends
// through them, the one [Installed.Sender] returns from now on.
func (in *Installed[S]) Install(sender *S, hooks *Hooks) {
	hooks.Init()
	in.mu.Lock()
	in.sender, in.hooks = sender, hooks
	in.mu.Unlock()
}

// Sender returns the installed sender, nil if none.
func (in *Installed[S]) Sender() *S {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.sender
}

// Wait waits for the installed sender's webhooks as [Hooks.Wait] does and
// returns the sender with the counts; with none installed it returns nil
// and zeros at once.
func (in *Installed[S]) Wait(ctx context.Context) (sender *S, posts, retries, dropped int64, err error) {
	in.mu.Lock()
	sender, hooks := in.sender, in.hooks
	in.mu.Unlock()
	if sender == nil {
		return nil, 0, 0, 0, nil
	}
	posts, retries, dropped, err = hooks.Wait(ctx)
	return sender, posts, retries, dropped, err
}

// Init sets the defaults; call it once before Go.
func (h *Hooks) Init() {
	if h.Retry <= 0 {
		h.Retry = 100 * time.Millisecond
	}
	if h.Attempts <= 0 {
		h.Attempts = 50
	}
	if h.Client == nil {
		h.Client = http.DefaultClient
	}
	h.rnd = rand.New(rand.NewPCG(1, 2))
}

// Chance reports true with probability p (a seeded source: runs repeat).
func (h *Hooks) Chance(p float64) bool {
	h.rmu.Lock()
	defer h.rmu.Unlock()
	return h.rnd.Float64() < p
}

// Go runs fn in a goroutine that Wait waits for.
func (h *Hooks) Go(fn func()) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		fn()
	}()
}

// Post sends body to URL with the headers sign returns (called again for
// each attempt: a signature over a timestamp is made anew) until answered
// 2xx or Attempts run out; it reports whether it was answered 2xx.
func (h *Hooks) Post(body []byte, sign func() http.Header) bool {
	wait := h.Retry
	for range h.Attempts {
		req, _ := http.NewRequest(http.MethodPost, h.URL, bytes.NewReader(body))
		req.Header = sign()
		req.Header.Set("Content-Type", "application/json")
		if resp, err := h.Client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				h.posts.Add(1)
				return true
			}
		}
		h.retries.Add(1)
		time.Sleep(wait)
		wait = min(2*wait, 2*time.Second)
	}
	h.dropped.Add(1)
	return false
}

// Wait waits until every webhook due so far was answered or given up, or
// ctx ends; it returns the POSTs answered 2xx, the attempts not answered
// 2xx, and the webhooks given up.
func (h *Hooks) Wait(ctx context.Context) (posts, retries, dropped int64, err error) {
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	return h.posts.Load(), h.retries.Load(), h.dropped.Load(), err
}
