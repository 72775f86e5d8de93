package fakeprovider

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// Share spreads recipients over [0, 1) evenly and gives one recipient
// one value; Hooks.Post retries until 2xx, signing each attempt anew, and
// gives up after Attempts.
func TestHooks(t *testing.T) {
	if Share("+15550001") != Share("+15550001") {
		t.Fatal("Share differs for one recipient")
	}
	below := 0
	for i := range 10000 {
		if Share(string(rune('a'+i%26))+time.Duration(i).String()) < 0.2 {
			below++
		}
	}
	if below < 1700 || below > 2300 {
		t.Errorf("%d of 10000 recipients below 0.2, want about 2000", below)
	}

	var calls, signed atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Sig") == "" {
			t.Error("attempt not signed")
		}
		if calls.Add(1) <= 2 {
			w.WriteHeader(503)
		}
	}))
	t.Cleanup(srv.Close)
	h := Hooks{URL: srv.URL, Retry: time.Millisecond, Attempts: 3}
	h.Init()
	h.Go(func() {
		h.Post([]byte(`{}`), func() http.Header { signed.Add(1); return http.Header{"X-Sig": {"s"}} })
	})
	posts, retries, dropped, err := h.Wait(context.Background())
	if err != nil || posts != 1 || retries != 2 || dropped != 0 || signed.Load() != 3 {
		t.Errorf("posts %d retries %d dropped %d signed %d (%v), want 1, 2, 0, 3", posts, retries, dropped, signed.Load(), err)
	}
	calls.Store(-10) // every attempt refused now
	h.Go(func() { h.Post([]byte(`{}`), func() http.Header { return http.Header{"X-Sig": {"s"}} }) })
	if _, _, dropped, _ := h.Wait(context.Background()); dropped != 1 {
		t.Errorf("dropped %d after 3 refused attempts, want 1", dropped)
	}
}
