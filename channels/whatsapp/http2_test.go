package whatsapp

import (
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/internal/channeltest"
	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
)

// TestHTTP2: 300 sends at once to a Graph API that answers after 100 ms
// go over HTTP/2, multiplexed: over TLS with a test CA (the Graph API
// offers HTTP/2 in its TLS handshake, as the server here) and in h2c to
// the fake at an http:// URL with a Pool made for it, on at most 3
// connections at 250 streams each (not one connection per send, as over
// HTTP/1.1), all counted by Connections.
func TestHTTP2(t *testing.T) {
	fake := whatsapptest.New(whatsapptest.Config{Latency: 100 * time.Millisecond})
	var mu sync.Mutex
	protos := map[string]int{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		protos[r.Proto]++
		mu.Unlock()
		fake.ServeHTTP(w, r)
	})
	for _, tls := range []bool{true, false} {
		var conns atomic.Int64
		ts := channeltest.ServeHTTP2(t, h, tls, 250, &conns)
		pool := NewPool(0, true)
		if tls {
			pool = newPool(0, false, channeltest.Trust(ts))
		}
		c, err := New(Config{BaseURL: ts.URL, Token: "t", Pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		opened := Connections().Opened()
		var wg sync.WaitGroup
		var failed atomic.Int64
		for i := range 300 {
			wg.Go(func() {
				m := channels.Message{Key: "106540352242922", To: "+16505551234", Payload: json.RawMessage(`{"type":"text","text":{"body":"hi"}}`)}
				m.ID = "env-" + string(rune('a'+i%26))
				if _, err := c.Send(t.Context(), m); err != nil && failed.Add(1) == 1 {
					t.Errorf("send: %v", err)
				}
			})
		}
		wg.Wait()
		pool.CloseIdleConnections()
		mu.Lock()
		if protos["HTTP/2.0"] != 300 || len(protos) != 1 {
			t.Errorf("TLS %v: requests by protocol %v; want 300 HTTP/2.0", tls, protos)
		}
		clear(protos)
		mu.Unlock()
		if n := conns.Load(); n < 1 || n > 3 || Connections().Opened()-opened != n {
			t.Errorf("TLS %v: %d connections (counted %d) for 300 sends at once; want 1 to 3", tls, n, Connections().Opened()-opened)
		}
	}
}
