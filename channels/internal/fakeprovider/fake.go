package fakeprovider

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	"github.com/pacerhq/pacer/internal/answertime"
)

// Fake is the part of a fake provider's Server that every fake shares: its
// routes, the local server [Listen] or [ListenTLS] starts for NewServer,
// and the arrivals in order. A fake's Server embeds it, so that the
// methods of Fake are the fake's own API; the functions of this package
// that take a fake ([Setup], [Add], [Listen], [ListenTLS]) are for the
// fake's code only. The methods of Fake are safe for concurrent use; A is
// the fake's arrival type.
type Fake[A any] struct {
	mux *http.ServeMux
	srv local

	mu       sync.Mutex
	arrivals []A
}

// Setup gives f its routes: GET /_stats answers stats() as JSON
// ([StatsHandler]), POST /_admin/rate calls setRate ([AdminRate]), each
// pattern of routes (http.ServeMux syntax) its handler, and every other
// request goes to other.
func Setup[A, T any](f *Fake[A], stats func() T, setRate func(key string, rate float64),
	routes map[string]http.Handler, other http.HandlerFunc) {
	f.mux = http.NewServeMux()
	f.mux.Handle("GET /_stats", StatsHandler(stats))
	f.mux.Handle("POST /_admin/rate", AdminRate(setRate))
	for p, h := range routes {
		f.mux.Handle(p, h)
	}
	f.mux.Handle("/", other)
}

// local is the httptest server of a fake built by NewServer.
type local struct {
	ts *httptest.Server // nil unless listening
	hc *http.Client     // nil unless listening
}

// served is a fake's Server: a handler embedding a [Fake].
type served interface {
	http.Handler
	local() *local
}

func (f *Fake[A]) local() *local { return &f.srv }

// Listen serves s on a local httptest server (HTTP/1.1, and HTTP/2
// without TLS with prior knowledge: h2c) and returns it: a fake's
// NewServer(cfg) is Listen(New(cfg)).
func Listen[S served](s S) S {
	l := s.local()
	l.ts = httptest.NewUnstartedServer(s)
	l.ts.Config.Protocols = new(http.Protocols)
	l.ts.Config.Protocols.SetHTTP1(true)
	l.ts.Config.Protocols.SetUnencryptedHTTP2(true)
	l.ts.Start()
	l.hc = l.ts.Client()
	return s
}

// ListenTLS serves h, s's handler for the protocols it takes (or s itself),
// on a local httptest server over TLS with HTTP/2 and HTTP/1.1, and returns
// s, whose Client then trusts the certificate and speaks HTTP/2 only.
func ListenTLS[S served](s S, h http.Handler) S {
	l := s.local()
	l.ts = httptest.NewUnstartedServer(h)
	l.ts.EnableHTTP2 = true
	l.ts.StartTLS()
	tr := l.ts.Client().Transport.(*http.Transport).Clone()
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP2(true)
	l.hc = &http.Client{Transport: tr}
	return s
}

// Add appends a to the arrivals of f. Call it in arrival order, under the
// lock that orders the fake's requests.
func Add[A any](f *Fake[A], a A) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.arrivals = append(f.arrivals, a)
}

// URL returns the base URL of a fake built by NewServer (use it as the
// adapter's Config.BaseURL), or "" for one built by New.
func (f *Fake[A]) URL() string {
	if f.srv.ts == nil {
		return ""
	}
	return f.srv.ts.URL
}

// Client returns a client for a fake built by NewServer, or nil for one
// built by New. For a fake served over TLS it trusts the test certificate
// and speaks HTTP/2 only: give it to the adapter as Config.HTTPClient.
// Close closes its connections.
func (f *Fake[A]) Client() *http.Client { return f.srv.hc }

// Close shuts down a fake built by NewServer and waits for its requests
// to finish. It does nothing for a fake built by New.
func (f *Fake[A]) Close() {
	if f.srv.ts != nil {
		f.srv.hc.CloseIdleConnections()
		f.srv.ts.Close()
	}
}

// Handler returns the fake as an http.Handler: serve it on an address of
// your choice.
func (f *Fake[A]) Handler() http.Handler { return f.mux }

// ServeHTTP serves the fake API, GET /_stats and POST /_admin/rate.
func (f *Fake[A]) ServeHTTP(w http.ResponseWriter, r *http.Request) { f.mux.ServeHTTP(w, r) }

// Arrivals returns a copy of the requests the fake recorded so far, in
// arrival order: those that passed its authentication and validation.
func (f *Fake[A]) Arrivals() []A {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]A(nil), f.arrivals...)
}

// AdminRate returns the handler of POST /_admin/rate?key=K&rate=R: it
// calls setRate(K, R), K empty or absent meaning every key, and answers
// 204, or 400 naming a rate that is not a finite number.
func AdminRate(setRate func(key string, rate float64)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rate, err := strconv.ParseFloat(r.FormValue("rate"), 64)
		if err != nil || math.IsNaN(rate) || math.IsInf(rate, 0) {
			http.Error(w, "rate must be a number of requests per second (0 = unlimited)", http.StatusBadRequest)
			return
		}
		setRate(r.FormValue("key"), rate)
		w.WriteHeader(http.StatusNoContent)
	})
}

// WriteJSON answers status with v encoded as JSON. Its Content-Type is
// application/json unless the caller set one.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// RandHex returns n random bytes in hex: the fakes' ids, unique across
// servers.
func RandHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// AnswerTime returns a fake's answer-time distribution from its Config:
// d (Config.AnswerTime) unless it is zero, else latency (Config.Latency)
// as a fixed answer time.
func AnswerTime(d answertime.Dist, latency time.Duration) answertime.Dist {
	if d.IsZero() {
		return answertime.Fixed(latency)
	}
	return d
}

// Sleep waits d, or until ctx is done, and reports whether the whole of d
// passed. It returns true at once if d <= 0. The fakes call it with a
// time drawn from their [AnswerTime] after a request was counted and
// without holding a lock, so that requests wait side by side.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
