package fakeprovider

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// KeyStats summarises the requests of one key.
type KeyStats struct {
	Delivered  int       `json:"delivered"`  // accepted requests
	Throttled  int       `json:"throttled"`  // requests refused by the key's bucket
	Failed     int       `json:"failed"`     // requests answered with an injected server error (HTTP 500), not a throttle
	Duplicates int       `json:"duplicates"` // accepted requests whose non-empty ID had been accepted before
	Max1s      int       `json:"max_1s"`     // most accepted requests in any 1 s window [t, t+1s)
	First      time.Time `json:"first"`      // first accepted request; zero if none
	Last       time.Time `json:"last"`       // last accepted request; zero if none
}

// Common returns k. A fake whose statistics hold more than KeyStats embeds
// it, so Common gives the statistics every fake keeps out of any of them.
func (k KeyStats) Common() KeyStats { return k }

// Stats records requests per key and sums them up as [KeyStats]. The zero
// value is empty and ready to use. Stats is safe for concurrent use; it
// expects Record's times in non-decreasing order, which the fakes keep by
// reading the time and recording under their own lock.
type Stats struct {
	mu   sync.Mutex
	keys map[string]*keyStats
}

// keyStats is the running statistics of one key.
type keyStats struct {
	KeyStats
	seen     map[string]bool // accepted IDs
	window   []time.Time     // accepted requests within the last second
	windowAt int             // index of the oldest entry of window still in it
}

// maxStale is how many entries that left the window are kept before the
// window is compacted.
const maxStale = 1024

// Record records a request of key at time at: throttled (refused by the
// key's bucket) or accepted. An accepted request whose id is not "" and
// was accepted before counts as a duplicate. Max1s counts accepted requests
// only.
func (s *Stats) Record(key, id string, at time.Time, throttled bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.key(key)
	if throttled {
		k.Throttled++
		return
	}
	k.Delivered++
	if id != "" {
		if k.seen[id] {
			k.Duplicates++
		}
		k.seen[id] = true
	}
	if k.First.IsZero() {
		k.First = at
	}
	k.Last = at
	// Sliding window: drop requests at least 1 s older than at.
	for k.windowAt < len(k.window) && at.Sub(k.window[k.windowAt]) >= time.Second {
		k.windowAt++
	}
	if k.windowAt > maxStale && k.windowAt*2 > len(k.window) {
		k.window = append(k.window[:0], k.window[k.windowAt:]...)
		k.windowAt = 0
	}
	k.window = append(k.window, at)
	k.Max1s = max(k.Max1s, len(k.window)-k.windowAt)
}

// RecordFailed records a request of key answered with an injected server
// error (HTTP 500): neither delivered nor throttled.
func (s *Stats) RecordFailed(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.key(key).Failed++
}

// key returns the running statistics of key, created empty if new. s.mu
// must be held.
func (s *Stats) key(key string) *keyStats {
	if s.keys == nil {
		s.keys = map[string]*keyStats{}
	}
	k, ok := s.keys[key]
	if !ok {
		k = &keyStats{seen: map[string]bool{}}
		s.keys[key] = k
	}
	return k
}

// Has reports whether a request of key was recorded.
func (s *Stats) Has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.keys[key]
	return ok
}

// Snapshot returns the statistics of every key recorded so far; a new,
// non-nil map.
func (s *Stats) Snapshot() map[string]KeyStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]KeyStats, len(s.keys))
	for key, k := range s.keys {
		m[key] = k.KeyStats
	}
	return m
}

// Extend returns the statistics of each key of extra: the key's
// [KeyStats] in s joined with its extra counts by join, for a fake whose
// own KeyStats embeds KeyStats. Keys s has and extra lacks are left out.
func Extend[E, K any](s *Stats, extra map[string]E, join func(KeyStats, E) K) map[string]K {
	shared := s.Snapshot()
	m := make(map[string]K, len(extra))
	for key, e := range extra {
		m[key] = join(shared[key], e)
	}
	return m
}

// StatsHandler returns a handler that answers every request with stats()
// encoded as JSON (HTTP 200, Content-Type application/json). [Setup]
// mounts it at GET /_stats.
func StatsHandler[T any](stats func() T) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		WriteJSON(w, http.StatusOK, stats())
	})
}

// FetchStats reads GET {baseURL}/_stats and decodes its JSON body into a T.
// A nil hc means http.DefaultClient. It returns an error for a transport
// failure, a status other than 200 or a body that does not decode, its
// text starting with pkg, the fake's package name ("whatsapptest: fetch
// stats: HTTP 500"); transport and decode errors are wrapped.
func FetchStats[T any](ctx context.Context, hc *http.Client, baseURL, pkg string) (T, error) {
	var zero T
	v, err := fetchStats[T](ctx, hc, baseURL)
	if err != nil {
		return zero, fmt.Errorf("%s: fetch stats: %w", pkg, err)
	}
	return v, nil
}

func fetchStats[T any](ctx context.Context, hc *http.Client, baseURL string) (T, error) {
	var v T
	if hc == nil {
		hc = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(baseURL, "/")+"/_stats", nil)
	if err != nil {
		return v, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}
