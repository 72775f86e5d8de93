// Package apnstest is a fake Apple Push Notification service for tests and
// the demo.
//
// A [Server] answers POST /3/device/{device token} the way APNs documents
// (see apns's package doc for the sources):
//   - it checks the provider token: 403 MissingProviderToken without one,
//     403 InvalidProviderToken if it is not an ES256 JWT with kid, iss and
//     iat, fails [Config.PublicKey], or names another key or team, 403
//     ExpiredProviderToken if its iat is more than 1 h old by the fake's
//     clock;
//   - it counts token rotations per team and answers 429
//     TooManyProviderTokenUpdates to a new token seen less than 20 minutes
//     after the previous new one (APNs counts per connection; the fake, per
//     team, is stricter). A request still carrying an older token the fake
//     accepted before is let through;
//   - it validates the request: 400 MissingTopic, BadPriority,
//     BadExpirationDate, BadCollapseId, InvalidPushType, BadMessageId,
//     DuplicateHeaders, MissingDeviceToken, BadDeviceToken (not hex),
//     PayloadEmpty, 413 PayloadTooLarge (over 4096 bytes, 5120 for voip),
//     404 BadPath and 405 MethodNotAllowed;
//   - it answers 410 Unregistered, with a timestamp, for device tokens
//     registered as dead ([Config.Unregistered], [Server.Unregister]);
//   - it optionally enforces a hidden token bucket per device token
//     ([Config.DeviceRate]), answering 429 TooManyRequests beyond it: APNs
//     sends TooManyRequests when "too many requests were made consecutively
//     to the same device token", and publishes no limit per apns-topic, so
//     the fake has none either (a topic is never throttled as a whole);
//   - otherwise it answers 200 with an apns-id header (the request's, or a
//     new UUID) and an empty body.
//
// Every request that passed the token and validation checks is recorded as
// an [Arrival], and summarised per apns-topic in [KeyStats]: how fast, how
// many throttled, how many duplicates (the same device token and body
// accepted twice). GET /_stats returns [Server.Stats] as JSON; [FetchStats]
// reads it. POST /_admin/rate?key=K&rate=R calls [Server.SetDeviceRate]
// while it runs.
//
// [NewServer] serves over TLS and, like APNs, takes notifications over
// HTTP/2 only (505 over HTTP/1.1); give the adapter
// [Server.Client] so that it trusts the test certificate. `pacer
// fake-provider --channel apns` serves [Server.HTTP2Handler] over cleartext
// HTTP/2 instead, which the adapter speaks to an http:// base URL. A Server
// is safe for concurrent use.
package apnstest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/pacerhq/pacer/channels/internal/fakeprovider"
	"github.com/pacerhq/pacer/internal/answertime"
)

// Limits APNs documents, in bytes and durations.
const (
	MaxPayload      = 4096             // notification body
	MaxVoIPPayload  = 5120             // notification body for apns-push-type voip
	MaxCollapseID   = 64               // apns-collapse-id
	TokenLifetime   = time.Hour        // a provider token older than this is expired
	MinTokenRefresh = 20 * time.Minute // a new provider token sooner than this is refused
)

// Config configures a [Server]. The zero value is an unlimited fake that
// accepts any well-formed ES256 provider token.
type Config struct {
	// DeviceRate is how many notifications per second one device token may
	// receive, across topics; 0 (or less) is unlimited. Beyond it the fake
	// answers 429 TooManyRequests. Apple publishes no number.
	// https://developer.apple.com/documentation/usernotifications/handling-notification-responses-from-apns
	DeviceRate float64
	// DeviceBurst is the device bucket capacity; default ceil(DeviceRate),
	// at least 1.
	DeviceBurst int
	// PublicKey, if set, verifies the signature of provider tokens; [NewKey]
	// makes a pair. If nil, signatures are not checked.
	PublicKey *ecdsa.PublicKey
	// KeyID and TeamID, if set, are the only kid and iss accepted.
	KeyID, TeamID string
	// Unregistered lists device tokens answered 410 Unregistered, with the
	// fake's start time as timestamp.
	Unregistered map[string]bool
	// Latency is a fixed answer time, used when AnswerTime is zero.
	Latency time.Duration
	// AnswerTime is the time each answer takes, drawn per request after
	// the request was counted (fixed, uniform or log-normal; see
	// answertime.Parse); requests wait side by side, not in turn. Zero
	// means Latency.
	AnswerTime answertime.Dist
	// Now is the fake's clock, for token ages, rotations, buckets and
	// arrival times; default time.Now.
	Now func() time.Time
}

// Arrival is one request that passed the token and validation checks.
type Arrival struct {
	Key       string    // apns-topic
	To        string    // device token from the path
	Body      string    // hex SHA-256 of the body
	PushType  string    // apns-push-type; "" if absent
	ApnsID    string    // apns-id answered; "" unless Status is 200
	At        time.Time // when it arrived, by the fake's clock
	Status    int       // 200, 410 (Unregistered) or 429 (TooManyRequests)
	Throttled bool      // Status is 429
}

// KeyStats summarises the arrivals of one apns-topic: Delivered (accepted
// requests), Throttled (requests answered 429 TooManyRequests), Duplicates
// (accepted requests whose device token and body had been accepted
// before), Max1s (most accepted requests in any 1 s window [t, t+1s)),
// First and Last (first and last accepted request; zero if none), and
// Unregistered. Failed is always 0. Its JSON form has the fields side by
// side, as GET /_stats serves them.
type KeyStats struct {
	fakeprovider.KeyStats
	Unregistered int `json:"unregistered"` // requests answered 410 Unregistered
}

// TokenStats counts what the fake made of provider tokens.
type TokenStats struct {
	Tokens         int // distinct tokens accepted: the first of each team, then each rotation
	TooManyUpdates int // requests answered 429 TooManyProviderTokenUpdates
	Expired        int // requests answered 403 ExpiredProviderToken
	Invalid        int // requests answered 403 InvalidProviderToken or MissingProviderToken
}

// Server is a fake APNs. Build it with [New] to mount [Server.Handler] or
// [Server.HTTP2Handler] yourself, or with [NewServer] to get a listening
// HTTP/2 TLS server. Its URL, Client, Close, Handler, ServeHTTP and
// Arrivals are the methods every fake provider shares.
type Server struct {
	fakeprovider.Fake[Arrival]
	cfg    Config
	answer answertime.Dist // of cfg
	now    func() time.Time

	mu      sync.Mutex
	devices *fakeprovider.Limiter // one bucket per device token; used if Config.DeviceRate > 0
	stats   fakeprovider.Stats    // by apns-topic; Duplicates by device token and body
	unreg   map[string]int        // apns-topic -> requests answered 410; has every topic seen
	dead    map[string]time.Time  // device token -> when unregistered
	teams   map[string]*teamState
	tokens  TokenStats
}

// teamState is the provider-token history of one team (iss).
type teamState struct {
	current string          // the newest token accepted
	adopted time.Time       // when current was first accepted
	seen    map[string]bool // every token accepted
}

// New returns a Server for cfg without a listener: serve [Server.Handler]
// on an address of your choice. Close is a no-op for it.
func New(cfg Config) *Server {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{
		answer:  fakeprovider.AnswerTime(cfg.AnswerTime, cfg.Latency),
		cfg:     cfg,
		now:     cfg.Now,
		devices: fakeprovider.NewLimiter(cfg.DeviceRate, cfg.DeviceBurst),
		unreg:   map[string]int{},
		dead:    map[string]time.Time{},
		teams:   map[string]*teamState{},
	}
	start := s.now()
	for tok, ok := range cfg.Unregistered {
		if ok {
			s.dead[tok] = start
		}
	}
	fakeprovider.Setup(&s.Fake, s.Stats, s.SetDeviceRate, nil, s.route)
	return s
}

// NewServer returns a Server for cfg listening on a local TLS server that
// serves [Server.HTTP2Handler]: its URL is apns.Config.BaseURL and its
// Client apns.Config.HTTPClient. Call Close when done.
func NewServer(cfg Config) *Server {
	s := New(cfg)
	return fakeprovider.ListenTLS(s, s.HTTP2Handler())
}

// HTTP2Handler returns the fake as an http.Handler that, like APNs, takes
// notifications over HTTP/2 only: over HTTP/1.1 they get 505 (Handler
// serves any protocol). Serve it over TLS, or over cleartext HTTP/2 (h2c)
// for an apns.Client whose BaseURL is http://.
func (s *Server) HTTP2Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 && strings.HasPrefix(r.URL.Path, "/3/") {
			http.Error(w, "APNs speaks HTTP/2 only", http.StatusHTTPVersionNotSupported)
			return
		}
		s.ServeHTTP(w, r)
	})
}

// route serves the fake APNs: POST /3/device/{token}, and BadPath for
// anything else.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	p, ok := strings.CutPrefix(r.URL.Path, "/3/device/")
	switch {
	case !ok:
		writeReason(w, http.StatusNotFound, "BadPath")
	case r.Method != http.MethodPost:
		writeReason(w, http.StatusMethodNotAllowed, "MethodNotAllowed")
	default:
		s.device(w, r, p)
	}
}

// SetDeviceRate sets the rate of device token to in notifications per
// second, or of every device token (current and future) if to is "". A
// rate of 0 or less is unlimited. The burst becomes Config.DeviceBurst, or
// ceil(rate) if that was 0.
func (s *Server) SetDeviceRate(to string, rate float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg.DeviceRate = max(s.cfg.DeviceRate, rate) // turns the device buckets on
	s.devices.SetRate(to, rate, s.now())
}

// Unregister makes the fake answer 410 Unregistered for device token,
// with the fake's current time as timestamp.
func (s *Server) Unregister(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dead[token] = s.now()
}

// Stats returns the statistics of every apns-topic seen so far.
func (s *Server) Stats() map[string]KeyStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fakeprovider.Extend(&s.stats, s.unreg, func(k fakeprovider.KeyStats, unreg int) KeyStats {
		return KeyStats{KeyStats: k, Unregistered: unreg}
	})
}

// Tokens returns what the fake made of provider tokens so far.
func (s *Server) Tokens() TokenStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokens
}

// FetchStats reads GET {baseURL}/_stats from a fake running elsewhere. For
// a [NewServer] fake, pass its [Server.Client].
func FetchStats(ctx context.Context, hc *http.Client, baseURL string) (map[string]KeyStats, error) {
	return fakeprovider.FetchStats[map[string]KeyStats](ctx, hc, baseURL, "apnstest")
}

// NewKey returns a new P-256 signing key as the contents of a .p8 file
// (PEM "PRIVATE KEY", PKCS#8), for apns.Config.PrivateKey, and its public
// half, for Config.PublicKey.
func NewKey() (p8 []byte, public *ecdsa.PublicKey, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("apnstest: new key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, nil, fmt.Errorf("apnstest: new key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), &k.PublicKey, nil
}

// pushTypes are the apns-push-type values Apple documents.
var pushTypes = map[string]bool{
	"alert": true, "background": true, "voip": true, "complication": true, "fileprovider": true,
	"mdm": true, "liveactivity": true, "controls": true, "location": true, "pushtotalk": true, "widgets": true,
}

// device serves POST /3/device/{token}.
func (s *Server) device(w http.ResponseWriter, r *http.Request, token string) {
	if status, reason := s.authorize(r.Header.Get("Authorization")); status != 0 {
		writeReason(w, status, reason)
		return
	}
	if reason := checkHeaders(r.Header); reason != "" {
		writeReason(w, http.StatusBadRequest, reason)
		return
	}
	switch {
	case token == "":
		writeReason(w, http.StatusBadRequest, "MissingDeviceToken")
		return
	case !isHex(token):
		writeReason(w, http.StatusBadRequest, "BadDeviceToken")
		return
	}
	pushType := r.Header.Get("apns-push-type")
	limit := MaxPayload
	if pushType == "voip" {
		limit = MaxVoIPPayload
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, int64(limit)+1))
	switch {
	case err != nil:
		return // the client went away
	case len(body) > limit:
		writeReason(w, http.StatusRequestEntityTooLarge, "PayloadTooLarge")
		return
	case len(body) == 0:
		writeReason(w, http.StatusBadRequest, "PayloadEmpty")
		return
	}
	sum := sha256.Sum256(body)
	a := Arrival{
		Key:      r.Header.Get("apns-topic"),
		To:       token,
		Body:     hex.EncodeToString(sum[:]),
		PushType: pushType,
		ApnsID:   r.Header.Get("apns-id"),
		Status:   http.StatusOK,
	}
	if a.ApnsID == "" {
		a.ApnsID = uuid.NewString() // version 4, lowercase, as APNs makes them
	}
	deadSince := s.arrive(&a)
	if !fakeprovider.Sleep(r.Context(), s.answer.Draw()) {
		return
	}
	switch a.Status {
	case http.StatusGone:
		fakeprovider.WriteJSON(w, http.StatusGone, struct {
			Reason    string `json:"reason"`
			Timestamp int64  `json:"timestamp"`
		}{"Unregistered", deadSince.UnixMilli()})
	case http.StatusTooManyRequests:
		writeReason(w, http.StatusTooManyRequests, "TooManyRequests")
	default:
		w.Header().Set("apns-id", a.ApnsID)
		w.WriteHeader(http.StatusOK)
	}
}

// authorize checks the provider token in an Authorization header value. It
// returns 0 if the token is accepted, or the status and reason to answer.
func (s *Server) authorize(auth string) (int, string) {
	scheme, tok, _ := strings.Cut(auth, " ")
	if auth == "" || tok == "" || !strings.EqualFold(scheme, "bearer") {
		s.count(func(t *TokenStats) { t.Invalid++ })
		return http.StatusForbidden, "MissingProviderToken"
	}
	iss, iat, ok := s.verify(tok)
	if !ok {
		s.count(func(t *TokenStats) { t.Invalid++ })
		return http.StatusForbidden, "InvalidProviderToken"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if now.Sub(iat) > TokenLifetime {
		s.tokens.Expired++
		return http.StatusForbidden, "ExpiredProviderToken"
	}
	t, ok := s.teams[iss]
	if !ok {
		t = &teamState{seen: map[string]bool{}}
		s.teams[iss] = t
	}
	switch {
	case t.seen[tok]:
		return 0, "" // the current token, or a straggler with an older one
	case t.current != "" && now.Sub(t.adopted) < MinTokenRefresh:
		s.tokens.TooManyUpdates++
		return http.StatusTooManyRequests, "TooManyProviderTokenUpdates"
	}
	t.current, t.adopted, t.seen[tok] = tok, now, true
	s.tokens.Tokens++
	return 0, ""
}

func (s *Server) count(f func(*TokenStats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.tokens)
}

// verify parses an ES256 provider token and returns its iss and iat. The
// signature is checked if Config.PublicKey is set; kid and iss must match
// Config.KeyID and Config.TeamID if those are set.
func (s *Server) verify(tok string) (iss string, iat time.Time, ok bool) {
	var claims jwt.MapClaims
	var t *jwt.Token
	var err error
	if s.cfg.PublicKey != nil {
		t, err = jwt.ParseWithClaims(tok, &claims, func(*jwt.Token) (any, error) { return s.cfg.PublicKey, nil },
			jwt.WithValidMethods([]string{"ES256"}), jwt.WithoutClaimsValidation())
	} else {
		t, _, err = jwt.NewParser().ParseUnverified(tok, &claims)
		if err == nil && t.Method.Alg() != "ES256" {
			return "", time.Time{}, false
		}
	}
	if err != nil {
		return "", time.Time{}, false
	}
	kid, _ := t.Header["kid"].(string)
	iss, _ = claims["iss"].(string)
	n, isNum := claims["iat"].(float64)
	if kid == "" || iss == "" || !isNum ||
		(s.cfg.KeyID != "" && kid != s.cfg.KeyID) || (s.cfg.TeamID != "" && iss != s.cfg.TeamID) {
		return "", time.Time{}, false
	}
	return iss, time.Unix(int64(n), 0), true
}

// checkHeaders returns the reason APNs gives for a bad apns-* header, or "".
func checkHeaders(h http.Header) string {
	for k, v := range h {
		if strings.HasPrefix(strings.ToLower(k), "apns-") && len(v) > 1 {
			return "DuplicateHeaders"
		}
	}
	if h.Get("apns-topic") == "" {
		return "MissingTopic"
	}
	if p, ok := h["Apns-Priority"]; ok && p[0] != "10" && p[0] != "5" && p[0] != "1" {
		return "BadPriority"
	}
	if e, ok := h["Apns-Expiration"]; ok {
		if _, err := strconv.ParseUint(e[0], 10, 63); err != nil {
			return "BadExpirationDate"
		}
	}
	if c, ok := h["Apns-Collapse-Id"]; ok && len(c[0]) > MaxCollapseID {
		return "BadCollapseId"
	}
	if t, ok := h["Apns-Push-Type"]; ok && !pushTypes[t[0]] {
		return "InvalidPushType"
	}
	if id, ok := h["Apns-Id"]; ok && !isUUID(id[0]) {
		return "BadMessageId"
	}
	return ""
}

// arrive records a valid request and sets a.At and, for a refusal,
// a.Status and a.Throttled (clearing a.ApnsID). For a dead device token it
// returns when it was unregistered.
func (s *Server) arrive(a *Arrival) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	a.At = now
	if _, seen := s.unreg[a.Key]; !seen {
		s.unreg[a.Key] = 0 // Stats lists every topic seen
	}
	defer func() { fakeprovider.Add(&s.Fake, *a) }()

	if since, dead := s.dead[a.To]; dead {
		a.Status, a.ApnsID = http.StatusGone, ""
		s.unreg[a.Key]++
		return since
	}
	var d *fakeprovider.Bucket
	if s.cfg.DeviceRate > 0 {
		d = s.devices.Bucket(a.To, now)
	}
	if d != nil && !d.Take(now) {
		a.Status, a.Throttled, a.ApnsID = http.StatusTooManyRequests, true, ""
		s.stats.Record(a.Key, "", now, true)
		return time.Time{}
	}
	s.stats.Record(a.Key, a.To+" "+a.Body, now, false)
	return time.Time{}
}

// writeReason answers with an APNs error body, {"reason":"..."}.
func writeReason(w http.ResponseWriter, status int, reason string) {
	fakeprovider.WriteJSON(w, status, struct {
		Reason string `json:"reason"`
	}{reason})
}

// isUUID reports whether s is a canonical lowercase UUID, as APNs makes
// apns-id values.
func isUUID(s string) bool {
	u, err := uuid.Parse(s)
	return err == nil && u.String() == s
}

// isHex reports whether s is an even number of hex digits.
func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil && s != ""
}
