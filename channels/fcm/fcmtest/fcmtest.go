// Package fcmtest is a fake Firebase Cloud Messaging HTTP v1 API, with the
// OAuth2 token endpoint in front of it, for tests and the demo.
//
// A [Server] answers two endpoints the way Google documents them:
//
//   - POST /token, the JWT-bearer grant of a service account: it verifies
//     the RS256 assertion against the public half of a key pair the fake
//     generated, and its issuer, audience, scope and lifetime, then issues
//     an opaque access token ([Server.ServiceAccountJSON] is the matching
//     key file, whose token_uri points here).
//   - POST /v1/projects/{project}/messages:send: it checks the bearer token
//     (401 UNAUTHENTICATED), validates the body, data and notification
//     together at most 4,096 bytes (400 INVALID_ARGUMENT), enforces a hidden
//     token bucket per project (429 QUOTA_EXCEEDED, or the ErrorInfo-only
//     RESOURCE_EXHAUSTED of firebase-admin-go#719) and optionally per
//     registration token (429 QUOTA_EXCEEDED), answers 404 UNREGISTERED
//     for tokens registered as dead, 401 THIRD_PARTY_AUTH_ERROR for tokens
//     of iOS or web apps whose APNs or web push credentials are broken
//     ([Server.FailThirdPartyAuth]), 500 INTERNAL or 503 UNAVAILABLE while a
//     project is in an outage ([Server.SetOutage]), and otherwise accepts
//     with a unique message name.
//
// A QUOTA_EXCEEDED is the body FCM documents, the Google API error envelope
// with an FcmError detail and nothing else, the same for the project's
// quota and a device's: FCM documents no field that tells them apart
// (https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode), so
// the fake gives an adapter no hint the real API would not.
//
// As FCM does, the project quota counts messages, client errors included
// (every 4xx but 429: a body refused with 400, a dead token, a third-party
// auth failure), and not 429s or server errors.
// https://firebase.google.com/docs/cloud-messaging/throttling-and-quotas
//
// Every valid send is recorded as an [Arrival] so a test can check what the
// pacer really sent: how fast per project, how many were throttled, how many
// were sent twice. GET /_stats returns [Server.Stats] as JSON, for tests
// that run the fake in another process; [FetchStats] reads it. POST
// /_admin/rate?key=K&rate=R calls [Server.SetRate] while it runs.
//
// The fake does not model topics, fanout or the hourly device limit. A
// Server is safe for concurrent use.
package fcmtest

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pacerhq/pacer/channels/internal/fakeprovider"
	"github.com/pacerhq/pacer/internal/answertime"
)

const (
	// ProjectID is the project_id of [Server.ServiceAccountJSON]. The fake
	// accepts sends to any project.
	ProjectID = "fake-project"
	// GrantType is the only grant_type the token endpoint accepts.
	GrantType = "urn:ietf:params:oauth:grant-type:jwt-bearer"
	// DefaultTokenTTL is the lifetime of an issued access token when
	// Config.TokenTTL is 0, as Google's (expires_in 3599).
	DefaultTokenTTL = 3599 * time.Second

	// MaxPayload is the most bytes the keys and values of message.data and
	// message.notification may hold together; more is answered 400
	// INVALID_ARGUMENT. https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode
	MaxPayload = 4096

	scopeFCM   = "https://www.googleapis.com/auth/firebase.messaging"
	scopeCloud = "https://www.googleapis.com/auth/cloud-platform"
	maxBody    = 1 << 20
)

// Config configures a [Server]. The zero value is a fake without rate
// limits that accepts only the tokens it issued.
type Config struct {
	// Rate is how many messages per second one project may send; 0 (or
	// less) is unlimited. The real quota is 600,000 per minute
	// (fcm.DefaultLimit).
	Rate float64
	// Burst is the project bucket capacity in messages; default
	// ceil(Rate), at least 1.
	Burst int
	// DeviceRate is how many messages per second one registration token
	// may receive; 0 (or less) is unlimited. Android devices take 240 per
	// minute, that is 4.
	DeviceRate float64
	// DeviceBurst is the device bucket capacity; default ceil(DeviceRate),
	// at least 1.
	DeviceBurst int
	// RetryAfter, if positive, is sent as a Retry-After header on every 429,
	// in whole seconds rounded up.
	RetryAfter time.Duration
	// RetryAfterDate sends Retry-After as an HTTP-date (now + RetryAfter)
	// instead of delta-seconds.
	RetryAfterDate bool
	// QuotaErrorInfo makes a project throttle answer the shape seen in
	// firebase-admin-go#719: status RESOURCE_EXHAUSTED with a
	// google.rpc.ErrorInfo RATE_LIMIT_EXCEEDED and no FcmError detail.
	// Default: the documented FcmError QUOTA_EXCEEDED, as for a device.
	QuotaErrorInfo bool
	// Unregistered lists registration tokens answered 404 UNREGISTERED;
	// [Server.Unregister] adds more.
	Unregistered []string
	// Token, if set, is accepted as a bearer token besides the issued ones,
	// for clients built on a static oauth2.TokenSource.
	Token string
	// TokenTTL is the lifetime of issued access tokens, sent as expires_in
	// in whole seconds; default [DefaultTokenTTL].
	TokenTTL time.Duration
	// Latency is a fixed answer time, used when AnswerTime is zero.
	Latency time.Duration
	// AnswerTime is the time each answer takes, drawn per request after
	// the request was counted (fixed, uniform or log-normal; see
	// answertime.Parse); requests wait side by side, not in turn. Zero
	// means Latency.
	AnswerTime answertime.Dist
}

// Arrival is one valid send the fake received.
type Arrival struct {
	Key       string    // project ID from the path
	To        string    // message.token (or the topic or condition)
	ID        string    // message.data["pacer_id"]; "" if absent
	At        time.Time // when it arrived
	Status    int       // HTTP status answered: 200, 401 (THIRD_PARTY_AUTH_ERROR), 404, 429, 500 or 503
	Throttled bool      // answered 429, for the project or the device
}

// KeyStats summarises the arrivals of one project: Delivered (accepted
// sends), Throttled (sends answered 429 for the project quota), Duplicates
// (accepted sends of a (token, message) accepted before), Max1s (most
// accepted sends in any 1 s window [t, t+1s)), First and Last (first and
// last accepted send; zero if none), and the sends refused otherwise.
// Failed is always 0. Its JSON form has the fields side by side, as GET
// /_stats serves them.
type KeyStats struct {
	fakeprovider.KeyStats
	DeviceThrottled int `json:"device_throttled"` // sends answered 429 for a device rate
	Unregistered    int `json:"unregistered"`     // sends answered 404 UNREGISTERED
	ThirdPartyAuth  int `json:"third_party_auth"` // sends answered 401 THIRD_PARTY_AUTH_ERROR
	Invalid         int `json:"invalid"`          // sends answered 400 INVALID_ARGUMENT (counted against the quota)
	ServerErrors    int `json:"server_errors"`    // sends answered 500 or 503 during an outage
}

// Server is a fake FCM. Build it with [New] to mount [Server.Handler]
// yourself, or with [NewServer] to get a listening httptest server. Its
// URL, Client, Close, Handler, ServeHTTP and Arrivals are the methods
// every fake provider shares.
type Server struct {
	fakeprovider.Fake[Arrival]
	cfg     Config
	answer  answertime.Dist // of cfg
	prefix  string          // random, keeps message names unique across servers
	keyID   string
	email   string
	key     *rsa.PrivateKey
	tokenTT time.Duration

	mu        sync.Mutex
	projects  *fakeprovider.Limiter // one bucket per project
	devices   *fakeprovider.Limiter // by project + "\x00" + token; used if Config.DeviceRate > 0
	stats     fakeprovider.Stats    // by project; Duplicates by message digest
	refused   map[string]*refusals  // by project; has every project seen
	dead      map[string]bool
	noAuth    map[string]bool      // registration tokens answered THIRD_PARTY_AUTH_ERROR
	outage    map[string]int       // project -> HTTP status answered (500 or 503)
	issued    map[string]time.Time // access token -> expiry
	audiences map[string]bool      // token_uri values handed out
	tokenReqs int
	seq       uint64
}

// refusals counts the sends of one project that [fakeprovider.Stats] does
// not: refused for the device, a dead token, third-party auth, an invalid
// body or an outage.
type refusals struct {
	device         int // answered 429 for a device rate
	unregistered   int // answered 404 UNREGISTERED
	thirdPartyAuth int // answered 401 THIRD_PARTY_AUTH_ERROR
	invalid        int // answered 400 INVALID_ARGUMENT
	serverErrors   int // answered 500 or 503
}

// signingKey is generated once per process: RSA key generation takes long
// enough to slow down tests that build many servers. Each server still has
// its own key id and client email, so it refuses another server's
// assertions.
var signingKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic("fcmtest: generate RSA key: " + err.Error())
	}
	return k
})

// New returns a Server for cfg without a listener: serve [Server.Handler]
// on an address of your choice and get the key file with
// [Server.ServiceAccountJSONAt]. Close is a no-op for it.
func New(cfg Config) *Server {
	s := &Server{
		answer:    fakeprovider.AnswerTime(cfg.AnswerTime, cfg.Latency),
		cfg:       cfg,
		prefix:    fakeprovider.RandHex(8),
		keyID:     fakeprovider.RandHex(20),
		key:       signingKey(),
		tokenTT:   cfg.TokenTTL,
		projects:  fakeprovider.NewLimiter(cfg.Rate, cfg.Burst),
		devices:   fakeprovider.NewLimiter(cfg.DeviceRate, cfg.DeviceBurst),
		refused:   map[string]*refusals{},
		dead:      map[string]bool{},
		noAuth:    map[string]bool{},
		outage:    map[string]int{},
		issued:    map[string]time.Time{},
		audiences: map[string]bool{},
	}
	s.email = "pacer-fake-" + s.prefix + "@" + ProjectID + ".iam.gserviceaccount.com"
	if s.tokenTT <= 0 {
		s.tokenTT = DefaultTokenTTL
	}
	for _, t := range cfg.Unregistered {
		s.dead[t] = true
	}
	fakeprovider.Setup(&s.Fake, s.Stats, s.SetRate, map[string]http.Handler{
		"POST /token": http.HandlerFunc(s.token),
		"POST /v1/projects/{project}/messages:send": http.HandlerFunc(s.send),
	}, func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "NOT_FOUND", "Requested entity was not found.")
	})
	return s
}

// NewServer returns a Server for cfg listening on a local httptest server
// (its URL is fcm.Config.BaseURL). Call Close when done.
func NewServer(cfg Config) *Server { return fakeprovider.Listen(New(cfg)) }

// ServiceAccountJSON returns a service-account key file for a server built
// by [NewServer], whose token_uri is this server's /token. Use it as
// fcm.Config.CredentialsJSON.
func (s *Server) ServiceAccountJSON() []byte {
	return s.ServiceAccountJSONAt(s.URL())
}

// ServiceAccountJSONAt returns a service-account key file whose token_uri
// is baseURL + "/token": use it for a server built by [New] and served at
// baseURL. The token endpoint accepts assertions only for audiences handed
// out this way.
func (s *Server) ServiceAccountJSONAt(baseURL string) []byte {
	tokenURI := strings.TrimRight(baseURL, "/") + "/token"
	s.mu.Lock()
	s.audiences[tokenURI] = true
	s.mu.Unlock()
	der, err := x509.MarshalPKCS8PrivateKey(s.key)
	if err != nil {
		panic("fcmtest: marshal key: " + err.Error()) // an RSA key always marshals
	}
	b, _ := json.MarshalIndent(map[string]string{
		"type":                        "service_account",
		"project_id":                  ProjectID,
		"private_key_id":              s.keyID,
		"private_key":                 string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email":                s.email,
		"client_id":                   "100000000000000000001",
		"auth_uri":                    "https://accounts.google.com/o/oauth2/auth",
		"token_uri":                   tokenURI,
		"auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
		"client_x509_cert_url":        "https://www.googleapis.com/robot/v1/metadata/x509/" + url.PathEscape(s.email),
		"universe_domain":             "googleapis.com",
	}, "", "  ")
	return b
}

// SetRate sets the rate of project in messages per second, or of every
// project (current and future, dropping per-project rates) if project is
// "". A rate of 0 or less is unlimited. The burst becomes Config.Burst, or
// ceil(rate) if that was 0. Tokens already earned at the old rate are kept,
// up to the new burst.
func (s *Server) SetRate(project string, rate float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.projects.SetRate(project, rate, time.Now())
}

// Unregister marks registration tokens as dead: sends to them are answered
// 404 UNREGISTERED from now on.
func (s *Server) Unregister(tokens ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range tokens {
		s.dead[t] = true
	}
}

// FailThirdPartyAuth marks registration tokens as belonging to iOS or web
// app instances whose project's APNs key or certificate, or web push key,
// is invalid: sends to them are answered 401 THIRD_PARTY_AUTH_ERROR (with
// an ApnsError InvalidProviderToken detail) from now on, while other tokens
// of the same project are served as before, as FCM does.
// https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode
func (s *Server) FailThirdPartyAuth(tokens ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range tokens {
		s.noAuth[t] = true
	}
}

// SetOutage makes every valid send to project answer status, 500 INTERNAL
// or 503 UNAVAILABLE (with Config.RetryAfter, if set), until it is called
// again with status 0. It panics on any other status. Sends during an
// outage do not count against the project's quota.
func (s *Server) SetOutage(project string, status int) {
	if status != 0 && status != http.StatusInternalServerError && status != http.StatusServiceUnavailable {
		panic("fcmtest: SetOutage status must be 0, 500 or 503")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if status == 0 {
		delete(s.outage, project)
		return
	}
	s.outage[project] = status
}

// RevokeTokens forgets every access token issued so far: sends carrying
// one are answered 401 UNAUTHENTICATED, as after a key is disabled or a
// token expires early. Config.Token stays valid.
func (s *Server) RevokeTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.issued)
}

// TokenRequests returns how many requests the token endpoint received,
// granted or not.
func (s *Server) TokenRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokenReqs
}

// Stats returns the statistics of every project seen so far.
func (s *Server) Stats() map[string]KeyStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fakeprovider.Extend(&s.stats, s.refused, func(k fakeprovider.KeyStats, r *refusals) KeyStats {
		return KeyStats{KeyStats: k, DeviceThrottled: r.device, Unregistered: r.unregistered,
			ThirdPartyAuth: r.thirdPartyAuth, Invalid: r.invalid, ServerErrors: r.serverErrors}
	})
}

// FetchStats reads GET {baseURL}/_stats from a fake running elsewhere.
func FetchStats(ctx context.Context, hc *http.Client, baseURL string) (map[string]KeyStats, error) {
	return fakeprovider.FetchStats[map[string]KeyStats](ctx, hc, baseURL, "fcmtest")
}

// outcome is what the fake answers a valid send.
type outcome int

const (
	accepted outcome = iota
	throttledProject
	throttledDevice
	unregistered
	thirdPartyAuth
	serverError
)

// refusalsOf returns the refusal counts of project key, creating them.
// s.mu must be held.
func (s *Server) refusalsOf(key string) *refusals {
	r, ok := s.refused[key]
	if !ok {
		r = &refusals{}
		s.refused[key] = r
	}
	return r
}

// invalid counts a send to project key refused with 400 INVALID_ARGUMENT:
// a client error, which takes a message of the project's quota like an
// accepted one [F-TQ].
func (s *Server) invalid(key string, clock func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := clock()
	s.projects.Bucket(key, now).Take(now)
	s.refusalsOf(key).invalid++
}

// arrive records a valid send to target of project and decides its
// outcome. It reads the time from clock under the lock, so arrival times
// never go backwards. A send during an outage takes no project token, one
// refused for the device gives its token back (429s do not count against
// the quota); one to a dead token or failing third-party auth keeps it
// (client errors do).
func (s *Server) arrive(key, target string, device bool, id string, digest [32]byte, clock func() time.Time) outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := clock()
	r := s.refusalsOf(key)
	a := Arrival{Key: key, To: target, ID: id, At: now, Status: http.StatusOK}
	if st := s.outage[key]; st != 0 {
		r.serverErrors++
		a.Status = st
		fakeprovider.Add(&s.Fake, a)
		return serverError
	}
	p := s.projects.Bucket(key, now)
	out := accepted
	switch {
	case !p.Take(now):
		out = throttledProject
	case device && s.cfg.DeviceRate > 0 && !s.devices.Take(key+"\x00"+target, now):
		p.Refund()
		out = throttledDevice
	case device && s.dead[target]:
		out = unregistered
	case device && s.noAuth[target]:
		out = thirdPartyAuth
	}
	switch out {
	case throttledProject:
		a.Status, a.Throttled = http.StatusTooManyRequests, true
	case throttledDevice:
		r.device++
		a.Status, a.Throttled = http.StatusTooManyRequests, true
	case unregistered:
		r.unregistered++
		a.Status = http.StatusNotFound
	case thirdPartyAuth:
		r.thirdPartyAuth++
		a.Status = http.StatusUnauthorized
	}
	fakeprovider.Add(&s.Fake, a)
	if out == accepted || out == throttledProject {
		s.stats.Record(key, string(digest[:]), now, out == throttledProject)
	}
	return out
}

// send serves POST /v1/projects/{project}/messages:send.
func (s *Server) send(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(r.Header.Get("Authorization"), time.Now()) {
		writeError(w, http.StatusUnauthorized, "UNAUTHENTICATED",
			"Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.")
		return
	}
	key := r.PathValue("project")
	m, bad := parseSend(http.MaxBytesReader(w, r.Body, maxBody))
	if bad != nil {
		s.invalid(key, time.Now)
	}
	if bad == tooBig {
		// The answer recorded from the live API for a payload over the
		// limit: no details (bloomberg/pushiko docs/fcm_responses.md).
		writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "Request contains an invalid argument.")
		return
	}
	if bad != nil {
		writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", bad.msg,
			fcmError("INVALID_ARGUMENT"),
			map[string]any{"@type": "type.googleapis.com/google.rpc.BadRequest",
				"fieldViolations": []map[string]string{{"field": bad.field, "description": bad.msg}}})
		return
	}
	if m.validateOnly {
		writeJSON(w, http.StatusOK, map[string]string{"name": "projects/" + key + "/messages/fake_message_id"})
		return
	}

	out := s.arrive(key, m.target, m.token, m.id, m.digest, time.Now)
	if !fakeprovider.Sleep(r.Context(), s.answer.Draw()) {
		return
	}
	switch out {
	case throttledProject:
		s.retryAfter(w)
		if s.cfg.QuotaErrorInfo {
			writeError(w, http.StatusTooManyRequests, "RESOURCE_EXHAUSTED",
				"Quota exceeded for quota metric 'Send requests' and limit 'Send requests per minute' of service 'fcm.googleapis.com' for consumer 'project_number:"+key+"'.",
				map[string]any{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED",
					"domain": "googleapis.com", "metadata": map[string]string{
						"quota_limit_value": strconv.FormatFloat(s.currentRate(key)*60, 'f', -1, 64),
						"consumer":          "projects/" + key,
						"quota_metric":      "fcm.googleapis.com/send_requests",
						"quota_unit":        "1/min/{project}",
						"service":           "fcm.googleapis.com",
						"quota_location":    "global",
						"quota_limit":       "SendsPerMinutePerProject",
					}},
				map[string]any{"@type": "type.googleapis.com/google.rpc.Help", "links": []map[string]string{{
					"description": "Request a higher quota limit.",
					"url":         "https://cloud.google.com/docs/quotas/help/request_increase"}}})
			return
		}
		quotaExceeded(w)
	case throttledDevice:
		s.retryAfter(w)
		quotaExceeded(w)
	case thirdPartyAuth:
		writeError(w, http.StatusUnauthorized, "UNAUTHENTICATED", "Auth error from APNS or Web Push Service",
			fcmError("THIRD_PARTY_AUTH_ERROR"),
			map[string]any{"@type": "type.googleapis.com/google.firebase.fcm.v1.ApnsError", "statusCode": 403, "reason": "InvalidProviderToken"})
	case serverError:
		s.mu.Lock()
		st := s.outage[key]
		s.mu.Unlock()
		if st == http.StatusServiceUnavailable {
			s.retryAfter(w)
			writeError(w, st, "UNAVAILABLE", "The service is currently unavailable.", fcmError("UNAVAILABLE"))
			return
		}
		writeError(w, http.StatusInternalServerError, "INTERNAL", "Internal error encountered.", fcmError("INTERNAL"))
	case unregistered:
		writeError(w, http.StatusNotFound, "NOT_FOUND", "Requested entity was not found.", fcmError("UNREGISTERED"))
	default:
		s.mu.Lock()
		s.seq++
		name := fmt.Sprintf("projects/%s/messages/0:%d%%%s", key, s.seq, s.prefix)
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]string{"name": name})
	}
}

// currentRate returns the rate of project in messages per second.
func (s *Server) currentRate(key string) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.projects.Rate(key)
}

// retryAfter sets the Retry-After header of a 429, if configured.
func (s *Server) retryAfter(w http.ResponseWriter) {
	d := s.cfg.RetryAfter
	if d <= 0 {
		return
	}
	secs := int64(math.Ceil(d.Seconds()))
	if s.cfg.RetryAfterDate {
		w.Header().Set("Retry-After", time.Now().Add(time.Duration(secs+1)*time.Second).UTC().Format(http.TimeFormat))
		return
	}
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
}

// authorized reports whether header carries a bearer token this fake
// issued and that has not expired, or Config.Token.
func (s *Server) authorized(header string, now time.Time) bool {
	tok, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || tok == "" {
		return false
	}
	if s.cfg.Token != "" && tok == s.cfg.Token {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.issued[tok]
	return ok && now.Before(exp)
}

// sendRequest is what the fake reads from a valid send body.
type sendRequest struct {
	validateOnly bool
	target       string   // token, topic or condition
	token        bool     // target is a registration token
	id           string   // data["pacer_id"]
	digest       [32]byte // of target and the canonical message
}

// badRequest is a validation failure: the field and what is wrong.
type badRequest struct{ field, msg string }

// tooBig is the badRequest of a payload over [MaxPayload].
var tooBig = &badRequest{"message", "message too big"}

// Message fields of the FCM v1 Message resource, in both JSON spellings
// Google accepts. https://firebase.google.com/docs/reference/fcm/rest/v1/projects.messages
var messageFields = map[string]bool{
	"name": true, "data": true, "notification": true, "android": true, "webpush": true, "apns": true,
	"fcm_options": true, "fcmOptions": true, "token": true, "topic": true, "condition": true,
}

// parseSend validates a send body the way FCM does for the parts the fake
// models: a JSON object with a message object and no unknown fields,
// exactly one target, data as a map of strings, and the message parts as
// objects.
func parseSend(r io.Reader) (sendRequest, *badRequest) {
	var req sendRequest
	var body map[string]json.RawMessage
	dec := json.NewDecoder(r)
	dec.UseNumber()
	if err := dec.Decode(&body); err != nil || body == nil {
		return req, &badRequest{"", "Invalid JSON payload received. The request body is not a JSON object."}
	}
	for k := range body {
		if k != "message" && k != "validate_only" && k != "validateOnly" {
			return req, &badRequest{k, fmt.Sprintf("Invalid JSON payload received. Unknown name %q: Cannot find field.", k)}
		}
	}
	for _, k := range []string{"validate_only", "validateOnly"} {
		if v, ok := body[k]; ok && json.Unmarshal(v, &req.validateOnly) != nil {
			return req, &badRequest{k, "Invalid value at '" + k + "' (TYPE_BOOL)."}
		}
	}
	var msg map[string]json.RawMessage
	if err := json.Unmarshal(body["message"], &msg); err != nil || msg == nil {
		return req, &badRequest{"message", "Invalid value at 'message': a message object is required."}
	}
	for k, v := range msg {
		if !messageFields[k] {
			return req, &badRequest{"message." + k, fmt.Sprintf("Invalid JSON payload received. Unknown name %q at 'message': Cannot find field.", k)}
		}
		switch k {
		case "notification", "android", "webpush", "apns", "fcm_options", "fcmOptions":
			var o map[string]any
			if json.Unmarshal(v, &o) != nil || o == nil {
				return req, &badRequest{"message." + k, "Invalid value at 'message." + k + "': not an object."}
			}
		}
	}
	targets := 0
	for _, k := range []string{"token", "topic", "condition"} {
		v, ok := msg[k]
		if !ok {
			continue
		}
		var t string
		if json.Unmarshal(v, &t) != nil {
			return req, &badRequest{"message." + k, "Invalid value at 'message." + k + "' (TYPE_STRING)."}
		}
		if t == "" {
			return req, &badRequest{"message." + k, "Invalid value at 'message." + k + "': must not be empty."}
		}
		targets++
		req.target, req.token = t, k == "token"
	}
	if targets != 1 {
		return req, &badRequest{"message", "Exactly one of message.token, message.topic or message.condition must be set."}
	}
	if v, ok := msg["data"]; ok {
		var data map[string]string
		if json.Unmarshal(v, &data) != nil {
			return req, &badRequest{"message.data", "Invalid value at 'message.data': values must be strings."}
		}
		req.id = data["pacer_id"]
	}
	size := 0
	for _, part := range []string{"data", "notification"} {
		var fields map[string]json.RawMessage
		if json.Unmarshal(msg[part], &fields) != nil {
			continue
		}
		for k, v := range fields {
			var str string
			if json.Unmarshal(v, &str) == nil {
				size += len(k) + len(str)
			} else {
				size += len(k) + len(bytes.TrimSpace(v))
			}
		}
	}
	if size > MaxPayload {
		return req, tooBig
	}
	// The digest of the canonical message: json.Marshal sorts map keys,
	// and UseNumber keeps numbers as written.
	var canon any
	cd := json.NewDecoder(bytes.NewReader(body["message"]))
	cd.UseNumber()
	_ = cd.Decode(&canon) // decoded once already
	cb, _ := json.Marshal(canon)
	h := sha256.New()
	h.Write([]byte(req.target))
	h.Write([]byte{0})
	h.Write(cb)
	copy(req.digest[:], h.Sum(nil))
	return req, nil
}

// token serves POST /token: the JWT-bearer grant of RFC 7523 as Google
// runs it for service accounts.
func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.tokenReqs++
	s.mu.Unlock()
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	if err := r.ParseForm(); err != nil {
		tokenError(w, http.StatusBadRequest, "invalid_request", "Malformed form body.")
		return
	}
	if g := r.PostForm.Get("grant_type"); g != GrantType {
		tokenError(w, http.StatusBadRequest, "unsupported_grant_type", "Invalid grant_type: "+g)
		return
	}
	if code, desc := s.verify(r.PostForm.Get("assertion"), time.Now()); code != "" {
		tokenError(w, http.StatusBadRequest, code, desc)
		return
	}
	access := "ya29.fake-" + fakeprovider.RandHex(24)
	s.mu.Lock()
	s.issued[access] = time.Now().Add(s.tokenTT)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"access_token": access,
		"expires_in":   int64(s.tokenTT / time.Second),
		"token_type":   "Bearer",
	})
}

// verify checks a signed JWT assertion and returns an OAuth2 error code and
// description, or "" if it is good. The wording follows Google's token
// endpoint.
func (s *Server) verify(assertion string, now time.Time) (code, desc string) {
	const badSig = "Invalid JWT Signature."
	parts := strings.Split(assertion, ".")
	if len(parts) != 3 {
		return "invalid_grant", "Invalid JWT: not a compact JWS."
	}
	var header struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	if decodeSegment(parts[0], &header) != nil || header.Alg != "RS256" {
		return "invalid_grant", "Invalid JWT: header is not an RS256 JWS header."
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return "invalid_grant", badSig
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if rsa.VerifyPKCS1v15(&s.key.PublicKey, crypto.SHA256, sum[:], sig) != nil {
		return "invalid_grant", badSig
	}
	var claims struct {
		Iss   string `json:"iss"`
		Scope string `json:"scope"`
		Aud   string `json:"aud"`
		Exp   int64  `json:"exp"`
		Iat   int64  `json:"iat"`
	}
	if decodeSegment(parts[1], &claims) != nil {
		return "invalid_grant", "Invalid JWT: claim set is not JSON."
	}
	if (header.Kid != "" && header.Kid != s.keyID) || claims.Iss != s.email {
		return "invalid_grant", "Invalid grant: account not found"
	}
	s.mu.Lock()
	audOK := s.audiences[claims.Aud]
	s.mu.Unlock()
	if !audOK {
		return "invalid_grant", "Invalid JWT: Failed audience check."
	}
	iat, exp := time.Unix(claims.Iat, 0), time.Unix(claims.Exp, 0)
	if iat.After(now.Add(time.Minute)) || !exp.After(now) || exp.Sub(iat) > time.Hour {
		return "invalid_grant", "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim."
	}
	scopes := strings.Fields(claims.Scope)
	ok := false
	for _, sc := range scopes {
		ok = ok || sc == scopeFCM || sc == scopeCloud
	}
	if !ok {
		return "invalid_scope", "Invalid OAuth scope or ID token audience provided."
	}
	return "", ""
}

// decodeSegment decodes one base64url JWS segment as JSON into v.
func decodeSegment(seg string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// ErrorBody is the Google API error envelope the fake answers sends with.
// Tests can decode an answer into it.
type ErrorBody struct {
	Error struct {
		Code    int              `json:"code"`
		Message string           `json:"message"`
		Status  string           `json:"status"`
		Details []map[string]any `json:"details,omitempty"`
	} `json:"error"`
}

// fcmError is the google.firebase.fcm.v1.FcmError detail.
func fcmError(code string) map[string]any {
	return map[string]any{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": code}
}

// quotaExceeded answers FCM's documented 429 QUOTA_EXCEEDED: the Google
// API error envelope with the canonical RESOURCE_EXHAUSTED message and an
// FcmError, whichever quota (project or device) was exceeded.
func quotaExceeded(w http.ResponseWriter) {
	writeError(w, http.StatusTooManyRequests, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota).",
		fcmError("QUOTA_EXCEEDED"))
}

// writeError answers with the Google API error envelope.
func writeError(w http.ResponseWriter, code int, status, msg string, details ...map[string]any) {
	var b ErrorBody
	b.Error.Code, b.Error.Status, b.Error.Message, b.Error.Details = code, status, msg, details
	writeJSON(w, code, b)
}

// tokenError answers the token endpoint's OAuth2 error body.
func tokenError(w http.ResponseWriter, code int, errCode, desc string) {
	writeJSON(w, code, map[string]string{"error": errCode, "error_description": desc})
}

// writeJSON answers code with v as JSON, in Google's Content-Type.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	fakeprovider.WriteJSON(w, code, v)
}
