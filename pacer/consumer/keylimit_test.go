package consumer

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/keypace/keypacetest"
	"github.com/prometheus/client_golang/prometheus"
)

// A partition's map of key queues is made anew once a burst of keys has
// drained (a Go map keeps the space of deleted entries): the heap it held
// for the burst's keys is given back.
func TestForgetShrinksTheKeyMap(t *testing.T) {
	const n = 20_000
	w := &worker{keys: map[string]*keyQueue{}}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("2065%07d", i)
	}
	before := keypacetest.HeapAfterGC()
	for _, k := range keys {
		w.keys[k] = &keyQueue{}
		w.keysPeak = max(w.keysPeak, len(w.keys))
	}
	w.mu.Lock()
	for _, k := range keys {
		w.forget(k, w.keys[k])
	}
	w.mu.Unlock()
	left := (float64(keypacetest.HeapAfterGC()) - float64(before)) / n
	t.Logf("after the burst drained: %.1f bytes per key still held", left)
	if len(w.keys) != 0 || left > 8 {
		t.Errorf("after the burst drained: %d queues, %.1f bytes per key still held, want 0 and <= 8", len(w.keys), left)
	}
	runtime.KeepAlive(w)
	runtime.KeepAlive(keys)
}

// A stored key limit a pacer cannot pace (a rate above the AIMD's highest
// ceiling, written before `pacer limit set` refused it) is refused, the key
// keeps its last limit, and the refusal is logged once as a warning naming
// the key and the value, not at every refresh; a new bad value is logged
// again.
func TestRefusedKeyLimitLoggedOnce(t *testing.T) {
	store := limitMap{"k": {Key: "k", PerSecond: 1e12}}
	base := control.KeyPolicy{Limit: bucket.Limit{PerSecond: 100, Burst: 20}}
	pol := &switchPolicy{p: control.OverridePolicy{Base: base, Channel: "test", Store: store}}
	p := testPacer(t, bucket.NewLocal(bucket.LocalConfig{}), &keypacetest.Adapter{}, pol)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	k := p.keys.Get("k", "")
	defer k.Done()
	// Each refresh is asked 2 s after the one before: due for a read of
	// the key's policy and state.
	at := time.Now()
	refresh := func() bucket.Limit {
		at = at.Add(2 * time.Second)
		return k.Limit(t.Context(), at, log)
	}
	for range 3 {
		if lim := refresh(); lim.PerSecond != 100 {
			t.Fatalf("limit = %v, want the channel's 100/s kept", lim)
		}
	}
	warns := func() []string {
		var out []string
		for _, l := range strings.Split(buf.String(), "\n") {
			if strings.Contains(l, "key limit refused") {
				out = append(out, l)
			}
		}
		return out
	}
	w := warns()
	if len(w) != 1 || !strings.Contains(w[0], "level=WARN") || !strings.Contains(w[0], "key=k") || !strings.Contains(w[0], "rate=1e+12") {
		t.Fatalf("refusal logged %d times: %q; want once, a warning with key=k rate=1e+12", len(w), w)
	}
	store["k"] = control.KeyLimit{Key: "k", PerSecond: 50}
	if lim := refresh(); lim.PerSecond != 50 {
		t.Fatalf("limit = %v after a valid one was stored, want 50/s", lim)
	}
	store["k"] = control.KeyLimit{Key: "k", PerSecond: 5e9}
	refresh()
	refresh()
	if w := warns(); len(w) != 2 || !strings.Contains(w[1], "rate=5e+09") {
		t.Fatalf("refusals logged: %q; want a second one for 5e+09", w)
	}
	// A stored limit that does not parse: the same, once.
	pol.set(control.OverridePolicy{Base: base, Channel: "test", Store: badStore{}})
	for range 3 {
		if lim := refresh(); lim.PerSecond != 50 {
			t.Fatalf("limit = %v with an unreadable stored limit, want the last one kept, 50/s", lim)
		}
	}
	if w := warns(); len(w) != 3 || !strings.Contains(w[2], "key=k") || !strings.Contains(w[2], "fast") {
		t.Fatalf("refusals logged: %q; want a third, once, naming key k and the stored value", w)
	}
}

// badStore holds a stored limit that does not parse, as control.Store
// reports it.
type badStore struct{}

func (badStore) Limit(_ context.Context, _, key string) (control.KeyLimit, bool, error) {
	return control.KeyLimit{}, false, fmt.Errorf("%w: stored limit of %s: rate %q is not a number", control.ErrInvalid, key, "fast")
}

// switchPolicy is a Policy that a test replaces while the pacer runs.
type switchPolicy struct {
	mu sync.Mutex
	p  control.Policy
}

func (s *switchPolicy) set(p control.Policy) {
	s.mu.Lock()
	s.p = p
	s.mu.Unlock()
}

func (s *switchPolicy) KeyPolicy(ctx context.Context, key string) (control.KeyPolicy, error) {
	s.mu.Lock()
	p := s.p
	s.mu.Unlock()
	return p.KeyPolicy(ctx, key)
}

// testPacer returns a pacer of channel "test" at 100 msgs/s burst 20 on b
// and a, with policy pol (the channel's when nil), that consumes nothing.
func testPacer(t *testing.T, b Bucket, a Adapter, pol control.Policy) *Pacer {
	t.Helper()
	lim := bucket.Limit{PerSecond: 100, Burst: 20}
	p := &Pacer{
		cfg:           Config{Channel: "test", Limit: lim, MaxTokenWait: 5 * time.Second},
		bucket:        b,
		adapter:       a,
		log:           slog.New(slog.NewTextHandler(io.Discard, nil)),
		policyDefault: control.StaticPolicy{Limit: lim},
	}
	p.policy = pol
	if pol == nil {
		p.policy = p.policyDefault
	}
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	p.m = m
	p.keys = p.newKeys()
	return p
}

// limitMap serves stored key limits from a map, as control.Store does.
type limitMap map[string]control.KeyLimit

func (m limitMap) Limit(_ context.Context, _, key string) (control.KeyLimit, bool, error) {
	l, ok := m[key]
	return l, ok, nil
}
