// Package whatsapptest is a fake WhatsApp Cloud API for tests and the demo.
//
// A [Server] answers POST /{version}/{phone-number-id}/messages the way the
// Cloud API documents: it checks the bearer token (401, code 190), validates
// the body (400, code 100), enforces its own token bucket per phone-number ID
// (429, code 130429) and otherwise accepts with a unique wamid. It records
// every valid request as an [Arrival] so a test can check what the pacer
// really sent: how fast per key, how many were throttled, how many were sent
// twice (by biz_opaque_callback_data, where the pacer puts the envelope id).
//
// GET /_stats returns [Server.Stats] as JSON, for tests that run the fake in
// another process; [FetchStats] reads it.
//
// The fake does not model the pair rate limit (131056), the account limits
// (80007, 4) or inbound traffic. A Server is safe for concurrent use.
package whatsapptest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacerhq/pacer/channels/internal/fakeprovider"
)

// Config configures a [Server]. The zero value is an unlimited fake that
// accepts any token.
type Config struct {
	// Rate is how many messages per second one phone-number ID may send;
	// 0 (or less) is unlimited. The real default is 80 (whatsapp.DefaultRate).
	Rate float64
	// Burst is the bucket capacity in messages; default ceil(Rate), at least 1.
	Burst int
	// Token, if set, is the only bearer token accepted; any other gets
	// HTTP 401 with error code 190.
	Token string
	// Latency is added before each answer, after the request was counted.
	Latency time.Duration
	// ThrottleStatus is the HTTP status of a 130429 answer; default 429, as
	// third parties observe. Meta's own table says 400: set it to test both.
	ThrottleStatus int
}

// Arrival is one valid request the fake received.
type Arrival struct {
	Key       string    // phone-number ID from the path
	To        string    // the request's "to"
	ID        string    // the request's "biz_opaque_callback_data"; "" if absent
	At        time.Time // when it arrived
	Throttled bool      // answered 130429 instead of accepted
}

// KeyStats summarises the arrivals of one phone-number ID: Delivered
// (accepted requests), Throttled (requests answered 130429), Duplicates
// (accepted requests whose non-empty ID had been accepted before), Max1s
// (most accepted requests in any 1 s window [t, t+1s)), First and Last
// (first and last accepted request; zero if none).
type KeyStats = fakeprovider.KeyStats

// Server is a fake Cloud API. Build it with [New] to mount [Server.Handler]
// yourself, or with [NewServer] to get a listening httptest server.
type Server struct {
	ts      *httptest.Server // nil when built by New
	mux     *http.ServeMux
	latency time.Duration
	token   string
	status  int    // of a 130429 answer
	prefix  string // random, keeps wamids unique across servers

	inflight atomic.Int64 // requests being answered

	mu       sync.Mutex
	limits   *fakeprovider.Limiter // one bucket per phone-number ID
	stats    fakeprovider.Stats    // by phone-number ID
	forced   map[string]int        // ThrottleNext(key, seconds)
	arrivals []Arrival
	seq      uint64
}

// New returns a Server for cfg without a listener: serve [Server.Handler]
// on an address of your choice. Close is a no-op for it.
func New(cfg Config) *Server {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	s := &Server{
		mux:     http.NewServeMux(),
		latency: cfg.Latency,
		token:   cfg.Token,
		status:  cfg.ThrottleStatus,
		prefix:  hex.EncodeToString(b[:]),
		limits:  fakeprovider.NewLimiter(cfg.Rate, cfg.Burst),
		forced:  map[string]int{},
	}
	if s.status == 0 {
		s.status = http.StatusTooManyRequests
	}
	s.mux.HandleFunc("POST /{version}/{key}/messages", s.messages)
	s.mux.Handle("GET /_stats", fakeprovider.StatsHandler(s.Stats))
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusBadRequest, 100, "Unsupported request", r.Method+" "+r.URL.Path+" is not served by the fake")
	})
	return s
}

// NewServer returns a Server for cfg listening on a local httptest server.
// Call Close when done.
func NewServer(cfg Config) *Server {
	s := New(cfg)
	s.ts = httptest.NewServer(s)
	return s
}

// URL returns the base URL of a server built by [NewServer] (use it as
// whatsapp.Config.BaseURL), or "" for one built by [New].
func (s *Server) URL() string {
	if s.ts == nil {
		return ""
	}
	return s.ts.URL
}

// Close shuts down a server built by [NewServer] and waits for its
// requests to finish. It does nothing for a server built by [New].
func (s *Server) Close() {
	if s.ts != nil {
		s.ts.Close()
	}
}

// ThrottleNext makes the next request for key answer 130429 with a
// Retry-After header of seconds, whatever the bucket holds (Meta documents
// no Retry-After for /messages; this is for testing cooldown handling).
func (s *Server) ThrottleNext(key string, seconds int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forced[key] = seconds
}

// InFlight returns how many requests the fake is answering right now
// (received, answer not yet written).
func (s *Server) InFlight() int { return int(s.inflight.Load()) }

// Handler returns the fake as an http.Handler.
func (s *Server) Handler() http.Handler { return s }

// ServeHTTP serves the fake Cloud API and GET /_stats.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// SetRate sets the rate of phone-number ID key in messages per second, or
// of every key (current and future, dropping per-key rates) if key is "".
// A rate of 0 or less is unlimited. The burst becomes Config.Burst, or
// ceil(rate) if that was 0. Tokens already earned at the old rate are kept,
// up to the new burst.
func (s *Server) SetRate(key string, rate float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits.SetRate(key, rate, time.Now())
}

// arrive records a valid request for key and reports whether the bucket let
// it through. It reads the time from clock under the lock, so arrival times
// never go backwards.
func (s *Server) arrive(key, to, id string, clock func() time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := clock()
	allowed := s.limits.Take(key, now)
	s.arrivals = append(s.arrivals, Arrival{Key: key, To: to, ID: id, At: now, Throttled: !allowed})
	s.stats.Record(key, id, now, !allowed)
	return allowed
}

// Arrivals returns a copy of every valid request received so far, in
// arrival order. Requests refused for their token or body are not in it.
func (s *Server) Arrivals() []Arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Arrival(nil), s.arrivals...)
}

// Stats returns the statistics of every phone-number ID seen so far.
func (s *Server) Stats() map[string]KeyStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats.Snapshot()
}

// FetchStats reads GET {baseURL}/_stats from a fake running elsewhere, such
// as in `pacer fake-provider whatsapp --addr`.
func FetchStats(ctx context.Context, hc *http.Client, baseURL string) (map[string]KeyStats, error) {
	m, err := fakeprovider.FetchStats[map[string]KeyStats](ctx, hc, baseURL)
	if err != nil {
		return nil, fmt.Errorf("whatsapptest: %w", err)
	}
	return m, nil
}

// messages serves POST /{version}/{key}/messages.
func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	if s.token != "" && r.Header.Get("Authorization") != "Bearer "+s.token {
		writeError(w, http.StatusUnauthorized, 190, "Invalid OAuth access token - Cannot parse access token", "")
		return
	}
	var body map[string]any
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	if err := dec.Decode(&body); err != nil || body == nil {
		writeError(w, http.StatusBadRequest, 100, "(#100) Invalid parameter", "request body is not a JSON object")
		return
	}
	if p, _ := body["messaging_product"].(string); p != "whatsapp" {
		writeError(w, http.StatusBadRequest, 100, "(#100) Invalid parameter",
			`messaging_product is required and must be "whatsapp"`)
		return
	}
	to, _ := body["to"].(string)
	if to == "" {
		writeError(w, http.StatusBadRequest, 100, "(#100) Invalid parameter", "to is required")
		return
	}
	id, _ := body["biz_opaque_callback_data"].(string)
	key := r.PathValue("key")

	s.mu.Lock()
	secs, forced := s.forced[key]
	if forced {
		delete(s.forced, key)
		s.arrivals = append(s.arrivals, Arrival{Key: key, To: to, ID: id, At: time.Now(), Throttled: true})
		if s.stats.Has(key) { // a key never seen stays unknown
			s.stats.Record(key, id, time.Now(), true)
		}
	}
	s.mu.Unlock()
	if forced {
		w.Header().Set("Retry-After", fmt.Sprint(secs))
		writeError(w, s.status, 130429, "(#130429) Rate limit hit", "Cloud API message throughput has been reached.")
		return
	}
	ok := s.arrive(key, to, id, time.Now)
	if !fakeprovider.Sleep(r.Context(), s.latency) {
		return
	}
	if !ok {
		writeError(w, s.status, 130429, "(#130429) Rate limit hit", "Cloud API message throughput has been reached.")
		return
	}
	s.mu.Lock()
	s.seq++
	wamid := fmt.Sprintf("wamid.FAKE%s%012d", s.prefix, s.seq)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(success{
		MessagingProduct: "whatsapp",
		Contacts:         []contact{{Input: to, WaID: strings.TrimPrefix(to, "+")}},
		Messages:         []message{{ID: wamid, MessageStatus: "accepted"}},
	})
}

// success is the documented HTTP 200 body of /messages.
type success struct {
	MessagingProduct string    `json:"messaging_product"`
	Contacts         []contact `json:"contacts"`
	Messages         []message `json:"messages"`
}

type contact struct {
	Input string `json:"input"`
	WaID  string `json:"wa_id"`
}

type message struct {
	ID            string `json:"id"`
	MessageStatus string `json:"message_status"`
}

// ErrorBody is the Graph API error body the fake answers with, in the shape
// Meta documents. Tests can decode an answer into it.
type ErrorBody struct {
	Error struct {
		Message   string `json:"message"`
		Type      string `json:"type"`
		Code      int    `json:"code"`
		ErrorData *struct {
			MessagingProduct string `json:"messaging_product"`
			Details          string `json:"details"`
		} `json:"error_data,omitempty"`
		FBTraceID string `json:"fbtrace_id"`
	} `json:"error"`
}

// writeError answers with a Graph API error body. error_subcode is left
// out: Meta no longer sends it from v16.0 on.
func writeError(w http.ResponseWriter, status, code int, msg, details string) {
	var b ErrorBody
	b.Error.Message, b.Error.Type, b.Error.Code = msg, "OAuthException", code
	if details != "" {
		b.Error.ErrorData = &struct {
			MessagingProduct string `json:"messaging_product"`
			Details          string `json:"details"`
		}{"whatsapp", details}
	}
	var t [8]byte
	_, _ = rand.Read(t[:])
	b.Error.FBTraceID = "A" + hex.EncodeToString(t[:])
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(b)
}
