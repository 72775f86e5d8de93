// Package sendgridtest is a fake Twilio SendGrid v3 Mail Send API for tests
// and the demo.
//
// A [Server] answers POST /v3/mail/send the way SendGrid documents: it
// checks the bearer API key (401), validates the body and lists every
// problem in an errors body (400), enforces its own token bucket per API key
// (429 with X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset
// in Unix epoch seconds, or without them: Config.NoRateLimitHeaders), and otherwise answers 202 with an empty body and a
// unique X-Message-Id. It records every request that passed authentication
// and validation as an [Arrival], so a test can check what the pacer really
// sent: how fast per API key, how many were throttled, how many were sent
// twice (by personalizations[0].custom_args.pacer_id, where the sendgrid
// adapter puts the envelope id).
//
// The fake only sees secrets. Given Config.APIKeys (name to secret, the same
// map as sendgrid.Config.APIKeys) it accepts only those secrets and reports
// by name; without it, it accepts any key and reports by [KeyID].
//
// [Server.SendWebhooks] makes it send signed Event Webhook batches for
// what it accepted (processed, delivered, bounce, spamreport,
// unsubscribe), late and twice, as SendGrid does.
//
// GET /_stats returns [Server.Stats] as JSON, for tests that run the fake in
// another process; [FetchStats] reads it. POST /_admin/rate?key=K&rate=R
// calls [Server.SetRate] while it runs.
//
// Like SendGrid it also answers 406 to a request without an Accept header,
// 403 "You are temporarily blocked ..." to an API key that sent too many bad
// requests in a row (Config.BlockAfter) for Config.BlockFor, and 451
// "Unavailable due to data residency restrictions" to the keys of regional
// subusers (Config.RegionalKeys), as the global host does.
// https://www.twilio.com/docs/sendgrid/api-reference/how-to-use-the-sendgrid-v3-api/errors
// and https://www.twilio.com/docs/sendgrid/api-reference/how-to-use-the-sendgrid-v3-api/responses
//
// The fake does not model plan volume limits, sender identities,
// On-Behalf-Of permissions (it records the header) or sandbox mode. A
// Server is safe for concurrent use.
package sendgridtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pacerhq/pacer/channels/internal/fakeprovider"
	"github.com/pacerhq/pacer/internal/answertime"
)

// MaxBodyBytes is the largest request body the fake reads; a larger one is
// answered 413. SendGrid takes mails of less than 30 MB.
const MaxBodyBytes = 30 << 20

// Config configures a [Server]. The zero value is an unlimited fake that
// accepts any API key.
type Config struct {
	// Rate is how many requests per second one API key may make; 0 (or
	// less) is unlimited. SendGrid publishes no number for Mail Send.
	Rate float64
	// Burst is the bucket capacity in requests; default ceil(Rate), at least 1.
	Burst int
	// APIKeys maps an API key name to its secret, like
	// sendgrid.Config.APIKeys. If set, only these secrets are accepted (any
	// other gets HTTP 401) and arrivals and stats carry the name. If empty,
	// any non-empty key is accepted and reported as [KeyID](secret).
	APIKeys map[string]string
	// Latency is a fixed answer time, used when AnswerTime is zero.
	Latency time.Duration
	// AnswerTime is the time each answer takes, drawn per request after
	// the request was counted (fixed, uniform or log-normal; see
	// answertime.Parse); requests wait side by side, not in turn. Zero
	// means Latency.
	AnswerTime answertime.Dist
	// BlockAfter, if positive, is how many bad requests (answered 400) in
	// a row block an API key: its requests are then answered 403 "You are
	// temporarily blocked from sending emails due to repeated bad
	// requests." for BlockFor. SendGrid publishes neither number.
	BlockAfter int
	// BlockFor is how long a block lasts; default 15 minutes (SendGrid's
	// SMTP errors page calls it "a temporary block of a few minutes").
	BlockFor time.Duration
	// RegionalKeys names API keys (names, or KeyIDs without APIKeys) of
	// accounts whose data lives in a region this host does not serve, such
	// as EU regional subusers: their requests are answered 451.
	RegionalKeys []string
	// NoRateLimitHeaders answers a 429 without X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset (the body alone), as
	// Mail Send may: a SendGrid maintainer wrote that "the Rate Limit
	// information is not returned on the mail/send endpoint"
	// (https://github.com/sendgrid/sendgrid-go/issues/105, providers.md
	// §4.1 and §8.5), so an adapter must pace without them.
	NoRateLimitHeaders bool
}

// Arrival is one valid request the fake received.
type Arrival struct {
	Key        string    // API key name, or KeyID of the secret
	OnBehalfOf string    // the On-Behalf-Of header; "" if absent
	To         string    // personalizations[0].to[0].email
	ID         string    // custom_args.pacer_id of personalizations[0], else of the mail; "" if absent
	Campaign   string    // custom_args.pacer_campaign, read as ID is; "" if absent
	MessageID  string    // X-Message-Id answered; "" if throttled
	At         time.Time // when it arrived
	Throttled  bool      // answered 429 instead of accepted
}

// KeyStats summarises the arrivals of one API key: Delivered (accepted
// requests), Throttled (requests answered 429), Duplicates (accepted
// requests whose non-empty ID had been accepted before), Max1s (most
// accepted requests in any 1 s window [t, t+1s)), First and Last (first and
// last accepted request; zero if none).
type KeyStats = fakeprovider.KeyStats

// KeyID returns the name the fake reports an API key secret under when
// Config.APIKeys is empty: "key-" and 12 hex digits of its SHA-256, stable
// and not the secret.
func KeyID(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return "key-" + hex.EncodeToString(h[:6])
}

// Server is a fake Mail Send API. Build it with [New] to mount
// [Server.Handler] yourself, or with [NewServer] to get a listening
// httptest server. Its URL, Client, Close, Handler, ServeHTTP and Arrivals
// are the methods every fake provider shares.
type Server struct {
	fakeprovider.Fake[Arrival]
	answer answertime.Dist
	names  map[string]string // secret -> name; nil accepts any key
	prefix string            // random, keeps message ids unique across servers

	blockAfter int
	blockFor   time.Duration
	regional   map[string]bool
	noHeaders  bool // Config.NoRateLimitHeaders

	mu      sync.Mutex
	bad     map[string]int        // API key name -> bad requests in a row
	blocked map[string]time.Time  // API key name -> end of its block
	limits  *fakeprovider.Limiter // one bucket per API key name
	stats   fakeprovider.Stats    // by API key name
	seq     uint64
	hooks   fakeprovider.Installed[webhookSender] // SendWebhooks
}

// New returns a Server for cfg without a listener: serve [Server.Handler]
// on an address of your choice. Close is a no-op for it. If two names of
// Config.APIKeys share a secret, the fake reports it under the first name
// in sorted order.
func New(cfg Config) *Server {
	s := &Server{
		answer: fakeprovider.AnswerTime(cfg.AnswerTime, cfg.Latency),
		prefix: fakeprovider.RandHex(6),
		limits: fakeprovider.NewLimiter(cfg.Rate, cfg.Burst),

		blockAfter: cfg.BlockAfter,
		blockFor:   cfg.BlockFor,
		noHeaders:  cfg.NoRateLimitHeaders,
		regional:   map[string]bool{},
		bad:        map[string]int{},
		blocked:    map[string]time.Time{},
	}
	if s.blockFor <= 0 {
		s.blockFor = 15 * time.Minute
	}
	for _, k := range cfg.RegionalKeys {
		s.regional[k] = true
	}
	if len(cfg.APIKeys) > 0 {
		s.names = map[string]string{}
		for _, name := range slices.Backward(slices.Sorted(maps.Keys(cfg.APIKeys))) {
			s.names[cfg.APIKeys[name]] = name
		}
	}
	fakeprovider.Setup(&s.Fake, s.Stats, s.SetRate, map[string]http.Handler{
		"POST /v3/mail/send": http.HandlerFunc(s.send),
	}, func(w http.ResponseWriter, r *http.Request) {
		writeErrors(w, http.StatusNotFound, item("", "not found: "+r.Method+" "+r.URL.Path+" is not served by the fake", ""))
	})
	return s
}

// NewServer returns a Server for cfg listening on a local httptest server
// (its URL is sendgrid.Config.BaseURL). Call Close when done.
func NewServer(cfg Config) *Server { return fakeprovider.Listen(New(cfg)) }

// SetRate sets the rate of API key key (its name, or its [KeyID]) in
// requests per second, or of every key (current and future, dropping
// per-key rates) if key is "". A rate of 0 or less is unlimited. The burst
// becomes Config.Burst, or ceil(rate) if that was 0. Tokens already earned
// at the old rate are kept, up to the new burst.
func (s *Server) SetRate(key string, rate float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits.SetRate(key, rate, time.Now())
}

// verdict is what the bucket decided for one request.
type verdict struct {
	allowed   bool
	messageID string    // set when allowed
	limit     int       // bucket capacity, for X-RateLimit-Limit
	reset     time.Time // when a token is next available, for X-RateLimit-Reset; set when refused
}

// arrive records a valid request for key and returns the bucket's verdict.
// It reads the time from clock under the lock, so arrival times never go
// backwards.
func (s *Server) arrive(a Arrival, clock func() time.Time) verdict {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := clock()
	a.At = now
	b := s.limits.Bucket(a.Key, now)
	v := verdict{allowed: b.Take(now), limit: int(b.Burst())}
	s.stats.Record(a.Key, a.ID, now, !v.allowed)
	if !v.allowed {
		v.reset = now.Add(b.Wait(now))
		a.Throttled = true
		fakeprovider.Add(&s.Fake, a)
		return v
	}
	s.seq++
	// 22 characters, like SendGrid's ids (for example "W_9qHD2LQKSR6ucD1A2R_w").
	v.messageID = fmt.Sprintf("%s%010d", s.prefix, s.seq)
	a.MessageID = v.messageID
	fakeprovider.Add(&s.Fake, a)
	if h := s.hooks.Sender(); h != nil {
		h.accepted(a.To, a.ID, a.Campaign, v.messageID, now)
	}
	return v
}

// Stats returns the statistics of every API key seen so far, by name (or
// [KeyID]).
func (s *Server) Stats() map[string]KeyStats { return s.stats.Snapshot() }

// FetchStats reads GET {baseURL}/_stats from a fake running elsewhere.
func FetchStats(ctx context.Context, hc *http.Client, baseURL string) (map[string]KeyStats, error) {
	return fakeprovider.FetchStats[map[string]KeyStats](ctx, hc, baseURL, "sendgridtest")
}

// Messages of the errors the fake answers with. The 400 texts are
// SendGrid's own (https://twilio.com/docs/sendgrid/api-reference/mail-send/errors,
// as SendGrid returns them).
const (
	MsgAuthRequired  = "authorization required"
	MsgAuthInvalid   = "The provided authorization grant is invalid, expired, or revoked"
	MsgTooMany       = "too many requests"
	MsgTooLarge      = "The JSON payload you have included in your request is too large."
	MsgBadRequest    = "Bad Request"
	MsgNoPersonal    = "The personalizations field is required and must have at least one personalization."
	MsgPersonalLimit = "The personalization block is limited to 1000 personalizations per API request. You have provided %d personalizations. Please consider splitting this into multiple requests and resending your request."
	MsgNoTo          = "The to array is required for all personalization objects, and must have at least one email object with a valid email address."
	MsgBadAddress    = "Does not contain a valid address."
	MsgNoFrom        = `The from object must be provided for every email send. It is an object that requires the email parameter, but may also contain a name parameter.  e.g. {"email" : "example@example.com"}  or {"email" : "example@example.com", "name" : "Example Recipient"}.`
	MsgNoSubject     = "The subject is required. You can get around this requirement if you use a template with a subject defined or if every personalization has a subject defined."
	MsgNoContent     = "Unless a valid template_id is provided, the content parameter is required. There must be at least one defined content block. We typically suggest both text/plain and text/html blocks are included, but only one block is required."
	MsgEmptyContent  = "The content value must be a string at least one character in length."
	MsgNoAccept      = "Missing the Accept header. For example: Accept: application/json"
	MsgBlocked       = "You are temporarily blocked from sending emails due to repeated bad requests."
	MsgResidency     = "Unavailable due to data residency restrictions"
)

// Block blocks API key key (its name, or its [KeyID]) for d, as after too
// many bad requests: its requests are answered 403 [MsgBlocked] until then.
func (s *Server) Block(key string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.blocked[key] = time.Now().Add(d)
}

// isBlocked reports whether key is blocked at now.
func (s *Server) isBlocked(key string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return now.Before(s.blocked[key])
}

// badRequest counts a 400 of key and blocks it after Config.BlockAfter in a
// row; good reports a request that passed validation.
func (s *Server) badRequest(key string, good bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if good {
		s.bad[key] = 0
		return
	}
	s.bad[key]++
	if s.blockAfter > 0 && s.bad[key] >= s.blockAfter {
		s.bad[key] = 0
		s.blocked[key] = time.Now().Add(s.blockFor)
	}
}

const helpBase = "http://sendgrid.com/docs/API_Reference/Web_API_v3/Mail/errors.html"

// mail is the part of a Mail Send body the fake checks.
type mail struct {
	Personalizations []struct {
		To []struct {
			Email string `json:"email"`
		} `json:"to"`
		Subject    string         `json:"subject"`
		CustomArgs map[string]any `json:"custom_args"`
	} `json:"personalizations"`
	From *struct {
		Email string `json:"email"`
	} `json:"from"`
	Subject string `json:"subject"`
	Content []struct {
		Type  string `json:"type"`
		Value string `json:"value"`
	} `json:"content"`
	TemplateID string         `json:"template_id"`
	CustomArgs map[string]any `json:"custom_args"`
}

// send serves POST /v3/mail/send.
func (s *Server) send(w http.ResponseWriter, r *http.Request) {
	secret, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || secret == "" {
		writeErrors(w, http.StatusUnauthorized, item("", MsgAuthRequired, ""))
		return
	}
	key := KeyID(secret)
	if s.names != nil {
		if key, ok = s.names[secret]; !ok {
			writeErrors(w, http.StatusUnauthorized, item("", MsgAuthInvalid, ""))
			return
		}
	}

	if s.regional[key] {
		writeErrors(w, http.StatusUnavailableForLegalReasons, item("", MsgResidency, ""))
		return
	}
	if s.isBlocked(key, time.Now()) {
		writeErrors(w, http.StatusForbidden, item("", MsgBlocked, ""))
		return
	}
	if r.Header.Get("Accept") == "" {
		writeErrors(w, http.StatusNotAcceptable, item("", MsgNoAccept, ""))
		return
	}

	var m mail
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err := dec.Decode(&m); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeErrors(w, http.StatusRequestEntityTooLarge, item("", MsgTooLarge, ""))
			return
		}
		s.badRequest(key, false)
		writeErrors(w, http.StatusBadRequest, item("", MsgBadRequest, ""))
		return
	}
	if list := validate(&m); len(list) > 0 {
		s.badRequest(key, false)
		writeErrors(w, http.StatusBadRequest, list...)
		return
	}
	s.badRequest(key, true)

	a := Arrival{Key: key, OnBehalfOf: r.Header.Get("On-Behalf-Of"), To: m.Personalizations[0].To[0].Email}
	if id, ok := m.Personalizations[0].CustomArgs["pacer_id"].(string); ok {
		a.ID = id
	} else if id, ok := m.CustomArgs["pacer_id"].(string); ok {
		a.ID = id
	}
	if c, ok := m.Personalizations[0].CustomArgs["pacer_campaign"].(string); ok {
		a.Campaign = c
	} else if c, ok := m.CustomArgs["pacer_campaign"].(string); ok {
		a.Campaign = c
	}
	v := s.arrive(a, time.Now)
	if !fakeprovider.Sleep(r.Context(), s.answer.Draw()) {
		return
	}
	if !v.allowed {
		if !s.noHeaders {
			h := w.Header()
			h.Set("X-RateLimit-Limit", strconv.Itoa(v.limit))
			h.Set("X-RateLimit-Remaining", "0")
			// Epoch seconds, rounded up: no token is there before this second.
			h.Set("X-RateLimit-Reset", strconv.FormatInt(ceilUnix(v.reset), 10))
		}
		writeErrors(w, http.StatusTooManyRequests, item("", MsgTooMany, ""))
		return
	}
	w.Header().Set("X-Message-Id", v.messageID)
	w.WriteHeader(http.StatusAccepted)
}

// ceilUnix returns t in Unix seconds, rounded up.
func ceilUnix(t time.Time) int64 {
	sec := t.Unix()
	if t.Nanosecond() > 0 {
		sec++
	}
	return sec
}

// validate returns SendGrid's errors for m, all of them, in SendGrid's
// order; nil if m is valid.
func validate(m *mail) []ErrorItem {
	var list []ErrorItem
	switch n := len(m.Personalizations); {
	case n == 0:
		list = append(list, item("personalizations", MsgNoPersonal, "#-Personalizations-Errors"))
	case n > 1000:
		list = append(list, item("personalizations", fmt.Sprintf(MsgPersonalLimit, n), "#-Personalizations-Errors"))
	}
	everySubject := len(m.Personalizations) > 0
	for i, p := range m.Personalizations {
		if len(p.To) == 0 {
			list = append(list, item(fmt.Sprintf("personalizations.%d.to", i), MsgNoTo, "#message.personalizations.to"))
		}
		for j, t := range p.To {
			if !validAddress(t.Email) {
				list = append(list, item(fmt.Sprintf("personalizations.%d.to.%d.email", i, j), MsgBadAddress, "#-Email-Address"))
			}
		}
		everySubject = everySubject && p.Subject != ""
	}
	if m.From == nil || !validAddress(m.From.Email) {
		list = append(list, item("from.email", MsgNoFrom, "#message.from"))
	}
	if m.Subject == "" && m.TemplateID == "" && !everySubject {
		list = append(list, item("subject", MsgNoSubject, "#message.subject"))
	}
	if m.TemplateID == "" && len(m.Content) == 0 {
		list = append(list, item("content", MsgNoContent, "#message.content"))
	}
	for i, c := range m.Content {
		if c.Value == "" {
			list = append(list, item(fmt.Sprintf("content.%d.value", i), MsgEmptyContent, "#message.content.value"))
		}
	}
	return list
}

// validAddress is a loose check: one @, something on both sides, a dot in
// the domain, no spaces.
func validAddress(s string) bool {
	local, domain, ok := strings.Cut(s, "@")
	return ok && local != "" && strings.Contains(domain, ".") && !strings.ContainsAny(domain, "@") &&
		!strings.ContainsAny(s, " \t\r\n<>")
}

// ErrorBody is the SendGrid error body the fake answers with:
//
//	{"errors":[{"field":"from.email"|null,"message":"...","help":"..."}]}
//
// Tests can decode an answer into it.
type ErrorBody struct {
	Errors []ErrorItem `json:"errors"`
}

// ErrorItem is one entry of [ErrorBody]. Field is nil for an error about
// the whole request; Help is left out when the fake has no link.
type ErrorItem struct {
	Field   *string `json:"field"`
	Message string  `json:"message"`
	Help    string  `json:"help,omitempty"`
}

// item returns an ErrorItem; an empty field is null, and a non-empty help
// is an anchor on SendGrid's Mail Send errors page.
func item(field, msg, help string) ErrorItem {
	e := ErrorItem{Message: msg}
	if field != "" {
		e.Field = &field
	}
	if help != "" {
		e.Help = helpBase + help
	}
	return e
}

// writeErrors answers status with an errors body.
func writeErrors(w http.ResponseWriter, status int, list ...ErrorItem) {
	fakeprovider.WriteJSON(w, status, ErrorBody{Errors: list})
}
