package apns_test

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/apns"
	"github.com/pacerhq/pacer/channels/internal/channeltest"
)

// streamServer is an HTTP/2 TLS server that allows streams concurrent
// streams per connection and counts the TLS connections it accepts and the
// most requests it held at once.
type streamServer struct {
	*httptest.Server
	conns   atomic.Int64
	active  atomic.Int64
	maxSeen atomic.Int64
}

func newStreamServer(t *testing.T, streams int) *streamServer {
	t.Helper()
	s := &streamServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.active.Add(1)
		defer s.active.Add(-1)
		for m := s.maxSeen.Load(); n > m && !s.maxSeen.CompareAndSwap(m, n); m = s.maxSeen.Load() {
		}
		io.Copy(io.Discard, r.Body)
		time.Sleep(time.Millisecond) // let sends pile up behind the stream limit
		w.Header().Set("apns-id", "3f1c2b4a-0000-4000-8000-000000000001")
	}))
	s.EnableHTTP2 = true
	s.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: streams}
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// sendAll makes n concurrent sends through c and returns how many failed
// and the first error. It fails the test if they are not all back within a
// minute (a send stuck).
func sendAll(t *testing.T, c *apns.Client, n int) (int64, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var failed atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if _, err := c.Send(ctx, message()); err != nil && failed.Add(1) == 1 {
				first.Store(err)
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("%d sends not done within a minute", n)
	}
	err, _ := first.Load().(error)
	return failed.Load(), err
}

// TestConnectionBound: 1,000 concurrent sends open at most
// Config.Connections TLS connections, whether APNs allows 1 stream per
// connection (as until a valid provider token is posted) or 1,000 (as
// seen afterwards), and every send is answered (providers.md §2.1: "APNs
// treats rapid connection and disconnection as a denial-of-service
// attack"; https://developer.apple.com/documentation/usernotifications/sending-notification-requests-to-apns).
// Go's HTTP/2 server cannot change its SETTINGS mid-connection, so the two
// limits are two servers.
func TestConnectionBound(t *testing.T) {
	for _, c := range []struct {
		streams, conns int
	}{
		{1, 0}, {1000, 0}, {1, 4}, {1000, 4},
	} {
		s := newStreamServer(t, c.streams)
		cfg := config(t, s.Server)
		cfg.HTTPClient, cfg.TLSConfig, cfg.Connections = nil, channeltest.Trust(s.Server), c.conns
		bound := int64(max(c.conns, apns.DefaultConnections))
		failed, err := sendAll(t, newClient(t, cfg), 1000)
		if failed > 0 {
			t.Errorf("streams %d, bound %d: %d of 1000 sends failed, first: %v", c.streams, bound, failed, err)
		}
		if n := s.conns.Load(); n > bound || n < 1 {
			t.Errorf("streams %d, bound %d: %d TLS connections for 1000 sends", c.streams, bound, n)
		}
		if m := s.maxSeen.Load(); m > int64(c.streams)*bound {
			t.Errorf("streams %d, bound %d: %d requests held at once", c.streams, bound, m)
		}
		t.Logf("streams %d, bound %d: %d TLS connections, at most %d requests at once", c.streams, bound, s.conns.Load(), s.maxSeen.Load())
	}
}

// TestConnectionsConfig: Config.Connections outside [1, MaxConnections] is
// refused by New, naming the field.
func TestConnectionsConfig(t *testing.T) {
	for _, n := range []int{-1, apns.MaxConnections + 1} {
		cfg := apns.Config{KeyID: keyID, TeamID: teamID, PrivateKey: signingKey(t).p8, Connections: n}
		if _, err := apns.New(cfg); err == nil || !strings.Contains(err.Error(), "Config.Connections") {
			t.Errorf("Connections %d: New error %v, want one naming Config.Connections", n, err)
		}
	}
	cfg := apns.Config{KeyID: keyID, TeamID: teamID, PrivateKey: signingKey(t).p8, Connections: apns.MaxConnections}
	if _, err := apns.New(cfg); err != nil {
		t.Errorf("Connections %d: %v", apns.MaxConnections, err)
	}
}
