package h2pool

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/internal/channeltest"
)

// newServer starts a server answering after wait with the protocol of the
// request: HTTP/1.1 only, or also cleartext HTTP/2 (prior knowledge)
// allowing streams streams per connection. It counts the connections it
// accepts and the most requests it held at once.
func newServer(t *testing.T, h2c bool, streams int, wait time.Duration) (*httptest.Server, *atomic.Int64, *atomic.Int64) {
	var conns, active, most atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := active.Add(1)
		defer active.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		io.Copy(io.Discard, r.Body)
		time.Sleep(wait)
		io.WriteString(w, r.Proto)
	})
	if h2c {
		return channeltest.ServeHTTP2(t, h, false, streams, &conns), &conns, &most
	}
	ts := httptest.NewUnstartedServer(h) // HTTP/1.1 only
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	ts.Start()
	t.Cleanup(ts.Close)
	return ts, &conns, &most
}

// sendAll makes n concurrent requests through p and returns how many
// were answered in each protocol.
func sendAll(t *testing.T, p *Pool, url string, n int) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	protos := map[string]int{}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, "POST", url, nil)
			resp, err := p.RoundTrip(req)
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := channels.ReadBody(resp.Body, 100)
			mu.Lock()
			protos[string(b)]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return protos
}

// TestConnectionsFollowStreams: 500 slow requests at once over HTTP/2
// open at most in-flight / SETTINGS_MAX_CONCURRENT_STREAMS connections (5
// at 100 streams; fewer when some are answered before the last start),
// each carrying many requests at once, never more than the bound; over HTTP/1.1 the bound holds with one request per
// connection. The counter sees what the server sees.
func TestConnectionsFollowStreams(t *testing.T) {
	for _, c := range []struct {
		name            string
		h2c, http2Only  bool
		streams, bound  int
		proto           string
		wantConns, most int64
	}{
		{"h2c", true, true, 100, 64, "HTTP/2.0", 5, 500},
		{"h2c bound", true, true, 100, 3, "HTTP/2.0", 3, 300},
		{"http/1.1 fallback", false, false, 0, 20, "HTTP/1.1", 20, 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts, conns, most := newServer(t, c.h2c, c.streams, 200*time.Millisecond)
			var counter channels.ConnCounter
			p := New(Config{Name: "test", MaxConns: c.bound, HTTP2Only: c.http2Only, Conns: &counter})
			defer p.CloseIdleConnections()
			if got := sendAll(t, p, ts.URL, 500); got[c.proto] != 500 {
				t.Fatalf("answers by protocol: %v; want 500 %s", got, c.proto)
			}
			if n := conns.Load(); n > c.wantConns || n < 1 || counter.Opened() != n {
				t.Errorf("%d connections (counted %d) for 500 requests at once; want 1 to %d", n, counter.Opened(), c.wantConns)
			}
			// Over HTTP/2 a connection carries many at once; over HTTP/1.1 one.
			if m := most.Load(); m > c.most || c.h2c && m <= int64(c.streams) {
				t.Errorf("the server held %d requests at once; want at most %d (and over HTTP/2 more than one connection's %d streams)", m, c.most, c.streams)
			}
			p.CloseIdleConnections()
			if n := counter.Open(); n != 0 {
				t.Errorf("%d connections open after CloseIdleConnections", n)
			}
		})
	}
}
