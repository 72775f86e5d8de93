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
// [Server.SendWebhooks] makes it send signed status webhooks for what it
// accepted, late, twice and out of order, with failures (131026, 131049)
// the synchronous answer did not show, as Meta does.
//
// GET /_stats returns [Server.Stats] as JSON, for tests that run the fake in
// another process; [FetchStats] reads it. POST /_admin/rate and
// POST /_admin/fail change the fake while it runs ([Server.SetRate],
// [Server.FailNext]): a hidden limit below the configured rate, as inbound
// traffic takes Meta's throughput away from a number mid-campaign.
//
// Every limit is counted at the fake's own ingress, when the request body has
// been read, with no slack: a token bucket of exactly Rate and Burst per
// phone-number ID, started full at its first request; with PairRate, a token
// bucket per (phone-number ID, recipient) answering 131056; with
// AccountLimit, at most AccountLimit requests per AccountWindow (rolling)
// per account answering 80007. A request refused by one limit takes no token
// of the others. With MessagingLimit, the messaging limit of a business
// portfolio: a template to a recipient new to a full window is accepted
// (HTTP 200, a wamid) and fails later by status webhook with
// [MessagingLimitCode], as WhatsApp refuses nothing synchronously past it.
// A Server is safe for concurrent use.
package whatsapptest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/internal/fakeprovider"
	"github.com/pacerhq/pacer/internal/answertime"
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
	// Latency is a fixed answer time, used when AnswerTime is zero.
	Latency time.Duration
	// AnswerTime is the time each answer takes, drawn per request after
	// the request was counted (fixed, uniform or log-normal; see
	// answertime.Parse); requests wait side by side, not in turn. Zero
	// means Latency.
	AnswerTime answertime.Dist
	// ThrottleStatus is the HTTP status of a 130429 answer; default 429, as
	// third parties observe. Meta's own table says 400: set it to test both.
	ThrottleStatus int
	// PairRate is how many messages per second one phone-number ID may send
	// to one recipient ("to"), answered 131056 beyond it; 0 (or less) is
	// unlimited. Meta documents 1 per 6 s with bursts of up to 45
	// ([PairRate], [PairBurst]; providers.md §1.4 [W-AP]).
	PairRate float64
	// PairBurst is the pair bucket's capacity; default ceil(PairRate), at
	// least 1.
	PairBurst int
	// AccountLimit is how many requests the phone-number IDs of one account
	// may make in any AccountWindow, answered 80007 beyond it; 0 (or less)
	// is unlimited. Meta's WABA budget is 200 or 5,000 per rolling hour
	// (providers.md §1.4 [W-AP]).
	AccountLimit int
	// AccountWindow is the rolling window of AccountLimit; default 1h.
	AccountWindow time.Duration
	// Accounts maps a phone-number ID to its account (WABA) ID; an ID not
	// in it is an account of its own.
	Accounts map[string]string
	// MessagingLimit is the tier of every business portfolio: how many
	// unique recipients its numbers may send business-initiated messages
	// (templates) in any MessagingWindow; 0 (or less) is unlimited. A
	// recipient counts from an accepted template until MessagingWindow after
	// its last one; a template to a new recipient past the tier is accepted
	// and fails by webhook with MessagingLimitCode (providers.md §1.1, §8.2
	// [W-ML]: 250, 2,000, 10,000, 100,000 or unlimited per portfolio, moving
	// 24 h, shared by its numbers, no synchronous error).
	MessagingLimit int
	// MessagingWindow is the moving window of MessagingLimit; default 24h.
	MessagingWindow time.Duration
	// Portfolios maps a phone-number ID to its business portfolio; an ID
	// not in it is a portfolio of its own.
	Portfolios map[string]string
}

// MessagingLimitCode is the error code of the failed status of a template
// past the portfolio's messaging limit. WhatsApp documents no code of its
// own for it (providers.md §1.1: "No dedicated synchronous code found");
// 131048 is the documented one whose text says it: "Message failed to send
// because there are restrictions on how many messages can be sent from this
// phone number" (providers.md §1.4 [W-EC]).
const MessagingLimitCode = 131048

// The pair limit Meta documents for a business number and one user
// (providers.md §1.4 [W-AP]): one message per 6 s, bursts of up to 45.
const (
	PairRate  = 1.0 / 6
	PairBurst = 45
)

// Arrival is one valid request the fake received.
type Arrival struct {
	Key       string    // phone-number ID from the path
	To        string    // the request's "to"
	ID        string    // the envelope id of the request's "biz_opaque_callback_data" (channels.ParseCallbackData); "" if absent
	At        time.Time // when it arrived
	Throttled bool      // answered a throttle (Code) instead of accepted
	Code      int       // 0 when accepted; 130429, 131056, 80007, or 131000 (a 500 from FailNext)
	// Template: the request was a template (business-initiated).
	Template bool
	// OverLimit: accepted, but past its portfolio's messaging limit: its
	// status webhook says failed with MessagingLimitCode.
	OverLimit bool
}

// KeyStats summarises the arrivals of one phone-number ID: Delivered
// (accepted requests), Throttled (requests answered a throttle: 130429,
// 131056 or 80007), Failed (requests answered HTTP 500 by
// [Server.FailNext]), Duplicates
// (accepted requests whose non-empty ID had been accepted before), Max1s
// (most accepted requests in any 1 s window [t, t+1s)), First and Last
// (first and last accepted request; zero if none).
type KeyStats = fakeprovider.KeyStats

// Server is a fake Cloud API. Build it with [New] to mount [Server.Handler]
// yourself, or with [NewServer] to get a listening httptest server. Its
// URL, Client, Close, Handler, ServeHTTP and Arrivals are the methods
// every fake provider shares.
type Server struct {
	fakeprovider.Fake[Arrival]
	answer answertime.Dist
	token  string
	status int    // of a 130429 answer
	prefix string // random, keeps wamids unique across servers

	inflight atomic.Int64 // requests being answered

	mu       sync.Mutex
	limits   *fakeprovider.Limiter // one bucket per phone-number ID
	pairs    *fakeprovider.Limiter // one bucket per phone-number ID and recipient
	accounts map[string]string     // Config.Accounts
	acctMax  int                   // Config.AccountLimit
	acctWin  time.Duration         // Config.AccountWindow
	acctLog  map[string][]time.Time
	stats    fakeprovider.Stats // by phone-number ID
	forced   map[string]int     // ThrottleNext(key, seconds)
	fail     map[string]int     // FailNext(key, n)
	seq      uint64
	hooks    fakeprovider.Installed[webhookSender] // SendWebhooks
	msgLimit int                                   // Config.MessagingLimit
	msgWin   time.Duration                         // Config.MessagingWindow
	folios   map[string]string                     // Config.Portfolios
	windows  map[string]map[string]time.Time       // portfolio -> recipient -> its last counted template
	over     map[string]int                        // portfolio -> templates past its limit
}

// New returns a Server for cfg without a listener: serve [Server.Handler]
// on an address of your choice. Close is a no-op for it.
func New(cfg Config) *Server {
	s := &Server{
		answer:   fakeprovider.AnswerTime(cfg.AnswerTime, cfg.Latency),
		token:    cfg.Token,
		status:   cfg.ThrottleStatus,
		prefix:   fakeprovider.RandHex(6),
		limits:   fakeprovider.NewLimiter(cfg.Rate, cfg.Burst),
		pairs:    fakeprovider.NewLimiter(cfg.PairRate, cfg.PairBurst),
		accounts: maps.Clone(cfg.Accounts),
		acctMax:  cfg.AccountLimit,
		acctWin:  cfg.AccountWindow,
		acctLog:  map[string][]time.Time{},
		forced:   map[string]int{},
		fail:     map[string]int{},
		msgLimit: cfg.MessagingLimit,
		msgWin:   cfg.MessagingWindow,
		folios:   maps.Clone(cfg.Portfolios),
		windows:  map[string]map[string]time.Time{},
		over:     map[string]int{},
	}
	if s.msgWin <= 0 {
		s.msgWin = 24 * time.Hour
	}
	if s.status == 0 {
		s.status = http.StatusTooManyRequests
	}
	if s.acctWin <= 0 {
		s.acctWin = time.Hour
	}
	fakeprovider.Setup(&s.Fake, s.Stats, s.SetRate, map[string]http.Handler{
		"POST /{version}/{key}/messages": http.HandlerFunc(s.messages),
		"POST /_admin/fail":              http.HandlerFunc(s.adminFail),
	}, func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusBadRequest, 100, "Unsupported request", r.Method+" "+r.URL.Path+" is not served by the fake")
	})
	return s
}

// NewServer returns a Server for cfg listening on a local httptest server
// (its URL is whatsapp.Config.BaseURL). Call Close when done.
func NewServer(cfg Config) *Server { return fakeprovider.Listen(New(cfg)) }

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

// FailNext makes the next n requests for key answer HTTP 500 with code
// 131000 ("Something went wrong", a transient error), after they were
// counted by every limit: the provider took them and failed.
func (s *Server) FailNext(key string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail[key] += n
}

// adminFail serves POST /_admin/fail?key=K&n=N: [Server.FailNext](K, N).
func (s *Server) adminFail(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.FormValue("n"))
	if err != nil || n < 0 || r.FormValue("key") == "" {
		http.Error(w, "key must be a phone-number ID and n a count >= 0", http.StatusBadRequest)
		return
	}
	s.FailNext(r.FormValue("key"), n)
	w.WriteHeader(http.StatusNoContent)
}

// account returns the account of phone-number ID key.
func (s *Server) account(key string) string {
	if a, ok := s.accounts[key]; ok {
		return a
	}
	return "number:" + key
}

// portfolio returns the business portfolio of phone-number ID key.
func (s *Server) portfolio(key string) string {
	if p, ok := s.folios[key]; ok {
		return p
	}
	return "number:" + key
}

// countTemplate counts an accepted template of key to to in its
// portfolio's window at now and reports whether it is past the messaging
// limit. Called with s.mu held.
func (s *Server) countTemplate(key, to string, now time.Time) (over bool) {
	if s.msgLimit <= 0 {
		return false
	}
	p := s.portfolio(key)
	w := s.windows[p]
	if w == nil {
		w = map[string]time.Time{}
		s.windows[p] = w
	}
	for r, at := range w {
		if now.Sub(at) >= s.msgWin {
			delete(w, r)
		}
	}
	if _, ok := w[to]; !ok && len(w) >= s.msgLimit {
		s.over[p]++
		return true
	}
	w[to] = now
	return false
}

// MessagingLimitStats is one portfolio's messaging limit as the fake
// counted it: Recipients in its window now (unique "to" of accepted
// templates within the last MessagingWindow, at most the tier), and
// OverLimit, the templates accepted past the tier, ever (each fails by
// webhook with [MessagingLimitCode]).
type MessagingLimitStats struct {
	Recipients int
	OverLimit  int
}

// MessagingLimit returns the messaging-limit counts of portfolio (a name
// of Config.Portfolios, or "number:<id>" for a number without one).
func (s *Server) MessagingLimit(portfolio string) MessagingLimitStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	n := 0
	for _, at := range s.windows[portfolio] {
		if now.Sub(at) < s.msgWin {
			n++
		}
	}
	return MessagingLimitStats{Recipients: n, OverLimit: s.over[portfolio]}
}

// arrive records a valid request for key and returns the code of its
// answer: 0 to accept, 130429 (the number's bucket), 131056 (the pair's
// bucket), 80007 (the account's budget) or 131000 (FailNext); over is true
// when an accepted template is past its portfolio's messaging limit. It
// reads the time from clock under the lock, so arrival times never go
// backwards.
func (s *Server) arrive(key, to, id string, template bool, clock func() time.Time) (code int, over bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := clock()
	acct := s.account(key)
	if s.acctMax > 0 {
		log := s.acctLog[acct]
		i := 0
		for i < len(log) && now.Sub(log[i]) >= s.acctWin {
			i++
		}
		log = log[i:]
		if len(log) >= s.acctMax {
			code = 80007
		}
		s.acctLog[acct] = log
	}
	pb := s.pairs.Bucket(key+"\x00"+to, now)
	switch {
	case code != 0:
	case !s.limits.Bucket(key, now).Allow(now):
		code = 130429
	case !pb.Allow(now):
		code = 131056
	default:
		s.limits.Take(key, now)
		pb.Take(now)
		if s.acctMax > 0 {
			s.acctLog[acct] = append(s.acctLog[acct], now)
		}
		if s.fail[key] > 0 {
			s.fail[key]--
			code = 131000
		} else if template {
			over = s.countTemplate(key, to, now)
		}
	}
	throttled := code != 0 && code != 131000
	fakeprovider.Add(&s.Fake, Arrival{Key: key, To: to, ID: id, At: now, Throttled: throttled, Code: code, Template: template, OverLimit: over})
	if code == 131000 {
		s.stats.RecordFailed(key) // injected by FailNext: a failure, not a throttle
	} else {
		s.stats.Record(key, id, now, code != 0)
	}
	return code, over
}

// Stats returns the statistics of every phone-number ID seen so far.
func (s *Server) Stats() map[string]KeyStats { return s.stats.Snapshot() }

// FetchStats reads GET {baseURL}/_stats from a fake running elsewhere, such
// as in `pacer fake-provider --channel whatsapp`.
func FetchStats(ctx context.Context, hc *http.Client, baseURL string) (map[string]KeyStats, error) {
	return fakeprovider.FetchStats[map[string]KeyStats](ctx, hc, baseURL, "whatsapptest")
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
	cb, _ := body["biz_opaque_callback_data"].(string)
	id, _ := channels.ParseCallbackData(cb)
	key := r.PathValue("key")

	s.mu.Lock()
	secs, forced := s.forced[key]
	if forced {
		delete(s.forced, key)
		fakeprovider.Add(&s.Fake, Arrival{Key: key, To: to, ID: id, At: time.Now(), Throttled: true})
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
	typ, _ := body["type"].(string)
	code, over := s.arrive(key, to, id, typ == "template", time.Now)
	if !fakeprovider.Sleep(r.Context(), s.answer.Draw()) {
		// The client hung up (its process died, its deadline passed) after
		// the request arrived whole: Meta still takes the message and its
		// status webhooks tell (only the answer is lost).
		if code == 0 {
			s.accept(key, to, cb, over)
		}
		return
	}
	switch code {
	case 130429:
		writeError(w, s.status, 130429, "(#130429) Rate limit hit", "Cloud API message throughput has been reached.")
		return
	case 131056:
		writeError(w, s.status, 131056, "(#131056) (Business Account, Consumer Account) pair rate limit hit",
			"Message failed to send because there were too many messages sent from this phone number to the same phone number in a short period of time.")
		return
	case 80007:
		writeError(w, http.StatusBadRequest, 80007, "(#80007) Rate limit issues",
			"The WhatsApp Business Account has reached its rate limit.")
		return
	case 131000:
		writeError(w, http.StatusInternalServerError, 131000, "(#131000) Something went wrong",
			"Message failed to send due to an unknown error.")
		return
	}
	wamid := s.accept(key, to, cb, over)
	fakeprovider.WriteJSON(w, http.StatusOK, success{
		MessagingProduct: "whatsapp",
		Contacts:         []contact{{Input: to, WaID: strings.TrimPrefix(to, "+")}},
		Messages:         []message{{ID: wamid, MessageStatus: "accepted"}},
	})
}

// accept takes an arrived message: it returns its new wamid and
// schedules its status webhooks, if any are sent.
func (s *Server) accept(key, to, cb string, over bool) string {
	s.mu.Lock()
	s.seq++
	wamid := fmt.Sprintf("wamid.FAKE%s%012d", s.prefix, s.seq)
	s.mu.Unlock()
	if hooks := s.hooks.Sender(); hooks != nil {
		hooks.accepted(key, to, cb, wamid, over, time.Now())
	}
	return wamid
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
	b.Error.FBTraceID = "A" + fakeprovider.RandHex(8)
	fakeprovider.WriteJSON(w, status, b)
}
