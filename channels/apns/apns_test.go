package apns_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/apns"
	"github.com/pacerhq/pacer/channels/apns/apnstest"
	"github.com/pacerhq/pacer/channels/internal/channeltest"
)

const (
	keyID  = "ABC123DEFG"
	teamID = "DEF123GHIJ"
	topic  = "com.example.app"
	device = "7a3f0c9e1b2d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6a7b8c9d0e1f2a3b"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

var testKey = sync.OnceValues(func() (key, error) {
	p8, pub, err := apnstest.NewKey()
	return key{p8, pub}, err
})

type key struct {
	p8  []byte
	pub *ecdsa.PublicKey
}

func signingKey(t *testing.T) key {
	t.Helper()
	k, err := testKey()
	return channeltest.Must(t, k, err)
}

// newClock returns a settable clock at t0, for a client and a fake.
func newClock() *channeltest.Clock { return &channeltest.Clock{Start: t0} }

// h2 starts an HTTP/2 TLS server for h.
func h2(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	ts := httptest.NewUnstartedServer(h)
	ts.EnableHTTP2 = true
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // handshakes cut by cancelled sends
	ts.StartTLS()
	t.Cleanup(ts.Close)
	return ts
}

// respond returns an HTTP/2 server that answers every request with status,
// body and the given headers.
func respond(t *testing.T, status int, body string, header ...string) *httptest.Server {
	t.Helper()
	return h2(t, channeltest.Responder(status, body, header...))
}

func config(t *testing.T, ts *httptest.Server) apns.Config {
	t.Helper()
	return apns.Config{BaseURL: ts.URL, KeyID: keyID, TeamID: teamID, PrivateKey: signingKey(t).p8, HTTPClient: ts.Client()}
}

func newClient(t *testing.T, cfg apns.Config) *apns.Client {
	t.Helper()
	c, err := apns.New(cfg)
	return channeltest.Must(t, c, err)
}

func message() channels.Message {
	return channeltest.Message("pacer-envelope-0001", topic, device, `{"headers":{"apns-push-type":"alert","apns-priority":"10"},"aps":{"alert":"hi"}}`)
}

// sendErr sends m through c and returns the *channels.Error, checking that
// its text holds neither the device token nor the key.
func sendErr(t *testing.T, c *apns.Client, m channels.Message) *channels.Error {
	t.Helper()
	return channeltest.SendError(t, "apns", c.Send, m, append(channeltest.PEMLines(string(signingKey(t).p8)), device)...)
}

// sendAnswer sends message() to an HTTP/2 server that answers status and
// body, and returns the *channels.Error.
func sendAnswer(t *testing.T, status int, body string) *channels.Error {
	return sendErr(t, newClient(t, config(t, respond(t, status, body))), message())
}

// noSecrets fails if the text of err holds the device token or any line of
// the key.
func noSecrets(t *testing.T, err error) {
	t.Helper()
	channeltest.NoSecrets(t, err, append(channeltest.PEMLines(string(signingKey(t).p8)), device)...)
}

// TestSendClassification runs every reason of providers.md §2.3 through the
// adapter with the status Apple documents for it.
func TestSendClassification(t *testing.T) {
	channeltest.CheckDocumented(t, channeltest.Documented{
		channels.Throttle: {"TooManyRequests 429"},
		channels.Transient: {"ServiceUnavailable 503", "Shutdown 503", "InternalServerError 500",
			"IdleTimeout 400"},
		channels.Permanent: {"Unregistered 410", "ExpiredToken 410", "BadDeviceToken 400",
			"DeviceTokenNotForTopic 400", "BadCollapseId 400", "BadExpirationDate 400", "BadMessageId 400",
			"BadPriority 400", "BadTopic 400", "DuplicateHeaders 400", "InvalidPushType 400",
			"MissingDeviceToken 400", "MissingTopic 400", "PayloadEmpty 400", "TopicDisallowed 400",
			"BadPath 404", "MethodNotAllowed 405", "PayloadTooLarge 413"},
		channels.Halt: {"TooManyProviderTokenUpdates 429", "ExpiredProviderToken 403",
			"InvalidProviderToken 403", "MissingProviderToken 403", "UnrelatedKeyIdInToken 403",
			"BadEnvironmentKeyIdInToken 403", "BadCertificate 403", "BadCertificateEnvironment 403",
			"Forbidden 403"},
	}, func(t *testing.T, d channeltest.DocumentedError) *channels.Error {
		var hits atomic.Int32
		ts := h2(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("apns-id", "EABEAE54-14A8-11E5-B60B-1697F925EC7B")
			w.WriteHeader(d.Status)
			io.WriteString(w, d.Body)
		}))
		e := sendErr(t, newClient(t, config(t, ts)), message())
		scope := channels.ScopeKey
		if d.Code == "TooManyRequests" {
			scope = channels.ScopePair
		}
		if e.Scope != scope {
			t.Errorf("Scope = %v, want %v", e.Scope, scope)
		}
		if e.Detail == "" || e.RetryAfter != 0 || e.Err != nil {
			t.Errorf("Detail = %q, RetryAfter = %v, Err = %v; want a detail, 0, nil", e.Detail, e.RetryAfter, e.Err)
		}
		if n := hits.Load(); n != 1 {
			t.Errorf("%d requests, want 1 (a token under 20 min old is not renewed)", n)
		}
		// The apns-id is what Apple's support asks for: kept in the logs
		// and the DLQ record (both carry Error()).
		if want := "eabeae54-14a8-11e5-b60b-1697f925ec7b"; e.Trace != want || !strings.Contains(e.Error(), "trace="+want) {
			t.Errorf("Trace = %q, Error() = %q; want the apns-id %s in both", e.Trace, e.Error(), want)
		}
		since, ok := apns.InvalidSince(e)
		if want := d.Code == "Unregistered"; ok != want {
			t.Errorf("InvalidSince ok = %v, want %v", ok, want)
		}
		if ok && !since.Equal(time.UnixMilli(1767323045678)) {
			t.Errorf("InvalidSince = %v, want 2026-01-02T03:04:05.678Z", since.UTC())
		}
		// Only the tokens APNs documents as dead (410) are gone: a 400
		// BadDeviceToken may be our environment's or topic's mismatch.
		if want := d.Code == "Unregistered" || d.Code == "ExpiredToken"; e.Gone != want || e.GoneSince != since.UTC() && ok {
			t.Errorf("Gone = %v since %v, want %v since %v", e.Gone, e.GoneSince, want, since)
		}
		return e
	})
}

// TestSendUnknownReason: a reason in no table is classified by HTTP status;
// a 429 throttles the device token (see TestThrottleWithoutReason).
func TestSendUnknownReason(t *testing.T) {
	channeltest.CheckUnknownCode(t, channeltest.ReadTestdata(t, "unknown.json"), "SomethingNewFromApple", channeltest.Statuses{
		channels.Permanent: {400, 404, 410, 413}, channels.Halt: {403}, channels.Throttle: {429}, channels.Transient: {500, 503},
	}, sendAnswer, func(t *testing.T, status int, e *channels.Error) {
		scope := channels.ScopeKey
		if status == 429 {
			scope = channels.ScopePair
		}
		if e.Scope != scope || e.Err != nil {
			t.Errorf("got scope=%v err=%v; want %v nil", e.Scope, e.Err, scope)
		}
	})
}

// TestSendNonAPNsBody: a body without a readable reason is classified by
// status, with no code and an Err.
func TestSendNonAPNsBody(t *testing.T) {
	channeltest.CheckNonProviderBody(t, channeltest.Answers{
		channels.Transient: {"502 <html><body>Bad Gateway</body></html>", "503", "201"},
		channels.Throttle:  {"429 slow down"},
		channels.Permanent: {"400 bad request", `400 {"error":"x"}`, `400 {"reason":"Bad Device Token"}`, `410 {"reason":42}`, "401 Unauthorized"},
		channels.Halt:      {"403 Forbidden"},
	}, sendAnswer, nil)
}

func TestSendSuccess(t *testing.T) {
	const id = "eabeae54-14a8-11e5-b60b-1697f925ec7b"
	res, err := newClient(t, config(t, respond(t, 200, "", "apns-id", id))).Send(t.Context(), message())
	if err != nil || res.ProviderID != id {
		t.Fatalf("Send = %+v, %v; want ProviderID %s", res, err, id)
	}
	// 200 is APNs's word that it accepted: without apns-id it is still a success.
	res, err = newClient(t, config(t, respond(t, 200, ""))).Send(t.Context(), message())
	if err != nil || res.ProviderID != "" {
		t.Fatalf("Send without apns-id = %+v, %v; want success with no ProviderID", res, err)
	}
}

// request is what a capturing server saw.
type request struct {
	proto, method, path string
	header              http.Header
	body                []byte
}

// capture returns a server that records each request and answers 200.
func capture(t *testing.T) (*httptest.Server, chan request) {
	t.Helper()
	got := make(chan request, 10)
	ts := h2(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- request{r.Proto, r.Method, r.URL.EscapedPath(), r.Header.Clone(), b}
		w.Header().Set("apns-id", "eabeae54-14a8-11e5-b60b-1697f925ec7b")
	}))
	return ts, got
}

// TestSendRequestShape checks method, path, headers, the provider token and
// the body without its "headers" member.
func TestSendRequestShape(t *testing.T) {
	ts, got := capture(t)
	for _, c := range []struct {
		name    string
		prefix  string
		key     string
		payload string
		headers map[string]string // every apns-* header expected
		body    string            // JSON text expected
	}{
		{
			name:    "headers taken out",
			payload: `{"headers":{"apns-push-type":"alert","apns-priority":"10","apns-expiration":"0","apns-collapse-id":"score-42"},"aps":{"alert":{"title":"Goal","body":"2-1 \u00e9"},"badge":1},"match":42}`,
			headers: map[string]string{"apns-topic": topic, "apns-push-type": "alert", "apns-priority": "10",
				"apns-expiration": "0", "apns-collapse-id": "score-42"},
			body: `{"aps":{"alert":{"title":"Goal","body":"2-1 \u00e9"},"badge":1},"match":42}`,
		},
		{
			name:    "topic, id and numbers from the payload; any case",
			key:     "-",
			payload: `{"headers":{"APNS-Topic":"com.example.app.voip","apns-id":"123e4567-e89b-12d3-a456-426614174000","apns-priority":5,"apns-expiration":1767323045,"apns-push-type":"voip"},"aps":{}}`,
			headers: map[string]string{"apns-topic": "com.example.app.voip", "apns-id": "123e4567-e89b-12d3-a456-426614174000",
				"apns-priority": "5", "apns-expiration": "1767323045", "apns-push-type": "voip"},
			body: `{"aps":{}}`,
		},
		{
			name:    "no headers member: background, priority 5",
			payload: `{"aps":{"content-available":1}}`,
			headers: map[string]string{"apns-topic": topic, "apns-push-type": "background", "apns-priority": "5"},
			body:    `{"aps":{"content-available":1}}`,
		},
		{
			name:    "nil payload, base path prefix",
			prefix:  "/apns/",
			headers: map[string]string{"apns-topic": topic, "apns-push-type": "alert"},
			body:    `{}`,
		},
		{
			name:    "null payload",
			payload: ` null `,
			headers: map[string]string{"apns-topic": topic, "apns-push-type": "alert"},
			body:    `{}`,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := config(t, ts)
			cfg.BaseURL += c.prefix
			cl := newClient(t, cfg)
			m := message()
			m.Payload = nil
			if c.payload != "" {
				m.Payload = json.RawMessage(c.payload)
			}
			if c.key == "-" {
				m.Key = ""
			}
			res, err := cl.Send(t.Context(), m)
			if err != nil || res.ProviderID == "" {
				t.Fatalf("Send = %+v, %v", res, err)
			}
			rq := <-got
			wantPath := strings.TrimSuffix(c.prefix, "/") + "/3/device/" + device
			if rq.proto != "HTTP/2.0" || rq.method != "POST" || rq.path != wantPath {
				t.Errorf("got %s %s %s; want HTTP/2.0 POST %s", rq.proto, rq.method, rq.path, wantPath)
			}
			for k, v := range rq.header {
				if lk := strings.ToLower(k); strings.HasPrefix(lk, "apns-") && (len(v) != 1 || c.headers[lk] != v[0]) {
					t.Errorf("header %s = %q, want %q", lk, v, c.headers[lk])
				}
			}
			for k, v := range c.headers {
				if rq.header.Get(k) != v {
					t.Errorf("header %s = %q, want %q", k, rq.header.Get(k), v)
				}
			}
			if ct := rq.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			var want bytes.Buffer
			json.Compact(&want, []byte(c.body))
			if !jsonEqual(rq.body, want.Bytes()) {
				t.Errorf("body = %s, want %s", rq.body, want.Bytes())
			}
			checkJWT(t, rq.header.Get("Authorization"))
			// The envelope id goes nowhere.
			for k, v := range rq.header {
				if strings.Contains(strings.Join(v, " "), m.ID) {
					t.Errorf("header %s = %q holds the envelope id", k, v)
				}
			}
			if bytes.Contains(rq.body, []byte(m.ID)) {
				t.Errorf("body %s holds the envelope id", rq.body)
			}
		})
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

// checkJWT verifies an authorization header value: "bearer" and an ES256
// JWT with exactly the header {alg, kid} and the claims {iss, iat}.
func checkJWT(t *testing.T, auth string) *jwt.Token {
	t.Helper()
	tok, ok := strings.CutPrefix(auth, "bearer ")
	if !ok {
		t.Fatalf("authorization = %q, want bearer <jwt>", auth)
	}
	claims := jwt.MapClaims{}
	pt, err := jwt.ParseWithClaims(tok, &claims, func(*jwt.Token) (any, error) { return signingKey(t).pub, nil },
		jwt.WithValidMethods([]string{"ES256"}), jwt.WithoutClaimsValidation())
	if err != nil {
		t.Fatalf("provider token does not verify: %v", err)
	}
	if len(pt.Header) != 2 || pt.Header["alg"] != "ES256" || pt.Header["kid"] != keyID {
		t.Errorf("JWT header = %v, want alg ES256 and kid %s only", pt.Header, keyID)
	}
	if _, ok := claims["iat"].(float64); len(claims) != 2 || claims["iss"] != teamID || !ok {
		t.Errorf("JWT claims = %v, want iss %s and a numeric iat only", claims, teamID)
	}
	return pt
}

// TestSendInvalidRequest: bad payloads, headers, device tokens and keys fail
// as Permanent without a request.
func TestSendInvalidRequest(t *testing.T) {
	var hits channeltest.Counter
	ts := h2(t, &hits)
	c := newClient(t, config(t, ts))
	for _, p := range []string{
		`[1,2]`, `"text"`, `42`, `true`, `{"a":`, `{"a":1}x`, `{`,
		`{"headers":[1]}`,
		`{"headers":"apns-priority: 10"}`,
		`{"headers":{"authorization":"bearer x"}}`,
		`{"headers":{"apns-unique-id":"x"}}`,
		`{"headers":{"x-pacer-id":"env-1"}}`,
		`{"headers":{"Not A Header":"x"}}`,
		`{"headers":{"apns-priority":"7"}}`,
		`{"headers":{"apns-priority":true}}`,
		`{"headers":{"apns-expiration":"tomorrow"}}`,
		`{"headers":{"apns-expiration":-1}}`,
		`{"headers":{"apns-expiration":1.5}}`,
		`{"headers":{"apns-push-type":"sms"}}`,
		`{"headers":{"apns-push-type":1}}`,
		`{"headers":{"apns-collapse-id":""}}`,
		`{"headers":{"apns-collapse-id":"` + strings.Repeat("c", 65) + `"}}`,
		`{"headers":{"apns-collapse-id":"line\nbreak"}}`,
		`{"headers":{"apns-topic":""}}`,
		`{"headers":{"apns-id":"not-a-uuid"}}`,
		`{"headers":{"apns-id":"123E4567-E89B-12D3-A456-426614174000"}}`,
		`{"headers":{"apns-topic":"a","APNS-TOPIC":"b"}}`,
	} {
		m := message()
		m.Payload = json.RawMessage(p)
		e := sendErr(t, c, m)
		if e.Class != channels.Permanent || e.Code != "invalid-payload" || e.Detail == "" || e.Status != 0 {
			t.Errorf("payload %s: %v; want permanent invalid-payload with a detail", p, e)
		}
	}
	for _, to := range []string{"", "abc", "zz", "7a3f/../x", device + " ", strings.Repeat("ab", 513)} {
		m := message()
		m.To = to
		if e := sendErr(t, c, m); e.Class != channels.Permanent || e.Code != "invalid-device-token" {
			t.Errorf("device token %q: %v; want permanent invalid-device-token", to, e)
		}
	}
	m := message()
	m.Key = ""
	if e := sendErr(t, c, m); e.Class != channels.Permanent || e.Code != "invalid-key" {
		t.Errorf("empty key: %v; want permanent invalid-key", e)
	}
	hits.CheckNone(t)
	// Upper-case hex device tokens are hex too.
	m = message()
	m.To = strings.ToUpper(device)
	if _, err := c.Send(t.Context(), m); err != nil || hits.Load() != 1 {
		t.Errorf("upper-case device token: %v, %d requests", err, hits.Load())
	}
}

// TestPayloadLimits: the body, without "headers", may be 4096 bytes (5120
// for voip); one more byte fails as PayloadTooLarge without a request.
func TestPayloadLimits(t *testing.T) {
	var hits channeltest.Counter
	ts := h2(t, &hits)
	c := newClient(t, config(t, ts))
	// body of n bytes: {"aps":{},"p":"xxx..."} is 17 bytes plus the x's.
	body := func(n int) string { return `{"aps":{},"p":"` + strings.Repeat("x", n-17) + `"}` }
	if len(body(4096)) != 4096 {
		t.Fatal("body helper is off")
	}
	for _, c2 := range []struct {
		name     string
		pushType string
		size     int
		ok       bool
	}{
		{"4096 alert", "alert", 4096, true},
		{"4097 alert", "alert", 4097, false},
		{"4097 no type", "", 4097, false},
		{"5120 voip", "voip", 5120, true},
		{"5121 voip", "voip", 5121, false},
	} {
		t.Run(c2.name, func(t *testing.T) {
			b := body(c2.size)
			p := b
			if c2.pushType != "" {
				// A long "headers" member does not count towards the limit.
				p = `{"headers":{"apns-push-type":"` + c2.pushType + `","apns-collapse-id":"` + strings.Repeat("c", 64) + `"},` + b[1:]
			}
			m := message()
			m.Payload = json.RawMessage(p)
			channeltest.CheckLocalLimit(t, hits.Load, channeltest.Bound(t.Context(), c.Send), m, c2.ok, "PayloadTooLarge")
		})
	}
}

// otherKeys returns a PKCS#8 P-384 key, a PKCS#8 Ed25519 key and a SEC1 P-256 key, as PEM.
func otherKeys(t *testing.T) (p384, ed, sec1 []byte) {
	t.Helper()
	k384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	p384 = channeltest.PKCS8(t, channeltest.Must(t, k384, err))
	_, ked, err := ed25519.GenerateKey(rand.Reader)
	ed = channeltest.PKCS8(t, channeltest.Must(t, ked, err))
	k256, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.MarshalECPrivateKey(channeltest.Must(t, k256, err))
	sec1 = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: channeltest.Must(t, der, err)})
	return p384, ed, sec1
}

func TestNew(t *testing.T) {
	k := signingKey(t).p8
	p384, ed, sec1 := otherKeys(t)
	garbled := append([]byte(nil), k...)
	copy(garbled[40:], "AAAAAAAAAAAAAAAA")
	for _, c := range []struct {
		name  string
		cfg   apns.Config
		field string // "" means no error
	}{
		{"defaults", apns.Config{KeyID: keyID, TeamID: teamID, PrivateKey: k}, ""},
		{"sandbox, TTL 20m", apns.Config{BaseURL: apns.SandboxURL, KeyID: keyID, TeamID: teamID, PrivateKey: k, TokenTTL: 20 * time.Minute}, ""},
		{"TTL 60m", apns.Config{KeyID: keyID, TeamID: teamID, PrivateKey: k, TokenTTL: time.Hour}, ""},
		{"SEC1 key", apns.Config{KeyID: keyID, TeamID: teamID, PrivateKey: sec1}, ""},
		{"no key ID", apns.Config{TeamID: teamID, PrivateKey: k}, "Config.KeyID"},
		{"key ID too long", apns.Config{KeyID: keyID + "X", TeamID: teamID, PrivateKey: k}, "Config.KeyID"},
		{"key in key ID", apns.Config{KeyID: string(k), TeamID: teamID, PrivateKey: k}, "Config.KeyID"},
		{"team ID with a dash", apns.Config{KeyID: keyID, TeamID: "DEF123-HIJ", PrivateKey: k}, "Config.TeamID"},
		{"no private key", apns.Config{KeyID: keyID, TeamID: teamID}, "Config.PrivateKey"},
		{"private key not PEM", apns.Config{KeyID: keyID, TeamID: teamID, PrivateKey: bytes.TrimPrefix(k, []byte("-----BEGIN PRIVATE KEY-----"))}, "Config.PrivateKey"},
		{"private key garbled", apns.Config{KeyID: keyID, TeamID: teamID, PrivateKey: garbled}, "Config.PrivateKey"},
		{"private key P-384", apns.Config{KeyID: keyID, TeamID: teamID, PrivateKey: p384}, "Config.PrivateKey"},
		{"private key Ed25519", apns.Config{KeyID: keyID, TeamID: teamID, PrivateKey: ed}, "Config.PrivateKey"},
		{"certificate", apns.Config{KeyID: keyID, TeamID: teamID, PrivateKey: []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")}, "Config.PrivateKey"},
		{"relative base", apns.Config{BaseURL: "api.push.apple.com", KeyID: keyID, TeamID: teamID, PrivateKey: k}, "Config.BaseURL"},
		{"unparseable base", apns.Config{BaseURL: "https://%zz/" + string(k[30:60]), KeyID: keyID, TeamID: teamID, PrivateKey: k}, "Config.BaseURL"},
		{"TTL too short", apns.Config{KeyID: keyID, TeamID: teamID, PrivateKey: k, TokenTTL: 20*time.Minute - time.Second}, "Config.TokenTTL"},
		{"TTL too long", apns.Config{KeyID: keyID, TeamID: teamID, PrivateKey: k, TokenTTL: 61 * time.Minute}, "Config.TokenTTL"},
		{"TTL negative", apns.Config{KeyID: keyID, TeamID: teamID, PrivateKey: k, TokenTTL: -time.Minute}, "Config.TokenTTL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := apns.New(c.cfg)
			channeltest.CheckNewErr(t, err, c.field)
			noSecrets(t, err)
			for _, secret := range [][]byte{p384, ed, sec1, garbled} {
				channeltest.NoSecrets(t, err, channeltest.PEMLines(string(secret))...)
			}
		})
	}
}

// TestNoSecretsInErrors: the device token and the provider token stay out
// of error text even when the server echoes the request.
func TestNoSecretsInErrors(t *testing.T) {
	echo := h2(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(400)
		fmt.Fprintf(w, `{"reason":"BadDeviceToken","path":%q,"auth":%q}`, r.URL.Path, r.Header.Get("Authorization"))
	}))
	echoText := h2(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(502)
		fmt.Fprintf(w, "<p>%s %s</p>", r.URL.Path, r.Header.Get("Authorization"))
	}))
	closed := channeltest.Closed()
	for _, c := range []struct {
		name string
		base string
		hc   *http.Client
	}{
		{"json echo", echo.URL, echo.Client()},
		{"text echo", echoText.URL, echoText.Client()},
		{"transport", closed.URL, closed.Client()},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := apns.Config{BaseURL: c.base, KeyID: keyID, TeamID: teamID, PrivateKey: signingKey(t).p8, HTTPClient: c.hc}
			e := sendErr(t, newClient(t, cfg), message()) // checks the device token and key
			if s := e.Error(); strings.Contains(s, "bearer") || strings.Contains(s, "eyJ") {
				t.Errorf("error %q holds the provider token", s)
			}
		})
	}
}

func TestSendRetryAfter(t *testing.T) {
	clk := newClock()
	for _, c := range []struct {
		name   string
		status int
		body   string
		header string
		want   time.Duration
		class  channels.Class
	}{
		{"absent", 503, channeltest.ReadTestdata(t, "ServiceUnavailable.json"), "", 0, channels.Transient},
		{"seconds on 503", 503, channeltest.ReadTestdata(t, "ServiceUnavailable.json"), "120", 120 * time.Second, channels.Transient},
		{"date on 500", 500, channeltest.ReadTestdata(t, "InternalServerError.json"), t0.Add(15 * time.Minute).Format(http.TimeFormat), 15 * time.Minute, channels.Transient},
		{"past date", 503, channeltest.ReadTestdata(t, "Shutdown.json"), "Wed, 21 Oct 2015 07:28:00 GMT", 0, channels.Transient},
		{"garbage", 503, channeltest.ReadTestdata(t, "Shutdown.json"), "soon", 0, channels.Transient},
		{"on a device throttle", 429, channeltest.ReadTestdata(t, "TooManyRequests.json"), "7", 7 * time.Second, channels.Throttle},
		{"on a non-APNs 503", 503, "busy", "9", 9 * time.Second, channels.Transient},
	} {
		t.Run(c.name, func(t *testing.T) {
			var h []string
			if c.header != "" {
				h = []string{"Retry-After", c.header}
			}
			cfg := config(t, respond(t, c.status, c.body, h...))
			cfg.Now = clk.Now
			e := sendErr(t, newClient(t, cfg), message())
			if e.RetryAfter != c.want || e.Class != c.class || channels.RetryAfter(e) != c.want {
				t.Errorf("RetryAfter = %v class=%v; want %v %v", e.RetryAfter, e.Class, c.want, c.class)
			}
		})
	}
}

func TestSendTransportError(t *testing.T) {
	channeltest.CheckTransportError(t, func(ts *httptest.Server) error {
		return sendErr(t, newClient(t, config(t, ts)), message())
	})
}

func TestSendContext(t *testing.T) {
	channeltest.CheckContext(t, channeltest.SendOf(newClient(t, config(t, h2(t, channeltest.Hang(t)))).Send, message()))
}

// fake starts an apnstest server that verifies our key, sharing clk.
func fake(t *testing.T, cfg apnstest.Config, clk *channeltest.Clock) (*apnstest.Server, *apns.Client) {
	t.Helper()
	cfg.PublicKey, cfg.KeyID, cfg.TeamID = signingKey(t).pub, keyID, teamID
	if clk != nil {
		cfg.Now = clk.Now
	}
	s := apnstest.NewServer(cfg)
	t.Cleanup(s.Close)
	ac := apns.Config{BaseURL: s.URL(), KeyID: keyID, TeamID: teamID, PrivateKey: signingKey(t).p8, HTTPClient: s.Client()}
	if clk != nil {
		ac.Now = clk.Now
	}
	return s, newClient(t, ac)
}

// inProcess is an http.RoundTripper that serves each request with h in
// this process, without sockets.
type inProcess struct{ h http.Handler }

func (p inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	w := httptest.NewRecorder()
	p.h.ServeHTTP(w, r)
	return w.Result(), nil
}

// TestTokenReuse: 1000 concurrent sends share one provider token. The fake
// is called in process: a cold burst of 1000 requests over sockets would
// dial many connections at once, which is not what this test is about.
func TestTokenReuse(t *testing.T) {
	s := apnstest.New(apnstest.Config{PublicKey: signingKey(t).pub, KeyID: keyID, TeamID: teamID})
	c := newClient(t, apns.Config{BaseURL: "https://api.push.apple.com", KeyID: keyID, TeamID: teamID,
		PrivateKey: signingKey(t).p8, HTTPClient: &http.Client{Transport: inProcess{s}}})
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range 1000 {
		wg.Go(func() {
			m := message()
			m.Payload = json.RawMessage(fmt.Sprintf(`{"aps":{"alert":"n%d"}}`, i))
			if _, err := c.Send(t.Context(), m); err != nil {
				if failed.Add(1) == 1 {
					t.Errorf("Send %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	if tok := s.Tokens(); tok.Tokens != 1 || tok.TooManyUpdates != 0 || tok.Invalid != 0 {
		t.Errorf("fake saw %+v; want exactly 1 token", tok)
	}
	if st := s.Stats()[topic]; st.Delivered != 1000 || st.Duplicates != 0 {
		t.Errorf("stats = %+v; want 1000 delivered, no duplicates", st)
	}
}

// TestTokenTTL: the token is renewed when TokenTTL old, and the fake,
// which refuses rotations under 20 min and tokens over 1 h, accepts every
// send.
func TestTokenTTL(t *testing.T) {
	for _, c := range []struct {
		ttl  time.Duration
		at   []time.Duration // send times
		want int             // tokens the fake saw
	}{
		{0, []time.Duration{0, 39 * time.Minute, 40 * time.Minute, 79 * time.Minute, 80 * time.Minute, 3 * time.Hour}, 4},
		{20 * time.Minute, []time.Duration{0, 19 * time.Minute, 20 * time.Minute, 40 * time.Minute}, 3},
		{time.Hour, []time.Duration{0, 59 * time.Minute, 60 * time.Minute, 119 * time.Minute}, 2},
	} {
		t.Run(fmt.Sprint(c.ttl), func(t *testing.T) {
			clk := newClock()
			cfg := apnstest.Config{PublicKey: signingKey(t).pub, KeyID: keyID, TeamID: teamID, Now: clk.Now}
			s := apnstest.NewServer(cfg)
			defer s.Close()
			cl := newClient(t, apns.Config{BaseURL: s.URL(), KeyID: keyID, TeamID: teamID, PrivateKey: signingKey(t).p8,
				HTTPClient: s.Client(), TokenTTL: c.ttl, Now: clk.Now})
			for _, at := range c.at {
				clk.Set(at)
				if _, err := cl.Send(t.Context(), message()); err != nil {
					t.Fatalf("Send at %v: %v", at, err)
				}
			}
			if tok := s.Tokens(); tok.Tokens != c.want || tok.TooManyUpdates != 0 || tok.Expired != 0 {
				t.Errorf("fake saw %+v; want %d tokens, no refusals", tok, c.want)
			}
		})
	}
}

// expiring is a server that answers 403 ExpiredProviderToken to every token
// but the ones in ok, and records each token it saw.
type expiring struct {
	mu   sync.Mutex
	seen []string
	ok   map[string]bool
}

func (x *expiring) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok := r.Header.Get("Authorization")
	x.mu.Lock()
	x.seen = append(x.seen, tok)
	accept := x.ok[tok]
	x.mu.Unlock()
	if accept {
		return
	}
	w.WriteHeader(403)
	io.WriteString(w, `{"reason":"ExpiredProviderToken"}`)
}

func (x *expiring) tokens() (requests, distinct int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	d := map[string]bool{}
	for _, s := range x.seen {
		d[s] = true
	}
	return len(x.seen), len(d)
}

// TestNeverRenewedWithin20Minutes: APNs answering ExpiredProviderToken to
// everything makes the adapter renew at most once per 20 minutes, however
// many sends fail and however concurrently; other errors never renew.
func TestNeverRenewedWithin20Minutes(t *testing.T) {
	x := &expiring{ok: map[string]bool{}}
	ts := h2(t, x)
	clk := newClock()
	cfg := config(t, ts)
	cfg.Now = clk.Now
	c := newClient(t, cfg)
	for i, st := range []struct {
		at                 time.Duration
		requests, distinct int // totals after this step
	}{
		{0, 1, 1},                 // minted, refused, too young to renew
		{5 * time.Minute, 2, 1},   // same
		{19 * time.Minute, 3, 1},  // same
		{20 * time.Minute, 5, 2},  // renewed once, retried once, refused again
		{21 * time.Minute, 6, 2},  // the new token is 1 min old
		{39 * time.Minute, 7, 2},  // 19 min old
		{40 * time.Minute, 9, 3},  // 20 min old: renewed once more
		{59 * time.Minute, 10, 3}, // 19 min old
	} {
		clk.Set(st.at)
		e := sendErr(t, c, message())
		if e.Class != channels.Halt || e.Code != "ExpiredProviderToken" {
			t.Fatalf("step %d: %v; want halt ExpiredProviderToken", i, e)
		}
		if r, d := x.tokens(); r != st.requests || d != st.distinct {
			t.Fatalf("step %d at %v: %d requests with %d tokens; want %d and %d", i, st.at, r, d, st.requests, st.distinct)
		}
	}

	// 200 concurrent failures on a token 25 min old (under the TTL): one
	// renewal, each send retried at most once.
	clk.Set(65 * time.Minute)
	r0, d0 := x.tokens()
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			if _, err := c.Send(t.Context(), message()); channels.ClassOf(err) != channels.Halt {
				t.Errorf("concurrent Send: %v; want halt", err)
			}
		})
	}
	wg.Wait()
	r, d := x.tokens()
	if d != d0+1 || r-r0 < 201 || r-r0 > 400 {
		t.Errorf("concurrent: %d requests with %d new tokens; want 1 new token and 201 to 400 requests", r-r0, d-d0)
	}

	// Other refusals never renew, at any age below the TTL.
	for reason, status := range map[string]int{"InvalidProviderToken": 403, "TooManyProviderTokenUpdates": 429,
		"InternalServerError": 500, "TooManyRequests": 429} {
		var seen sync.Map
		srv := h2(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			seen.Store(r.Header.Get("Authorization"), true)
			w.WriteHeader(status)
			io.WriteString(w, `{"reason":"`+reason+`"}`)
		}))
		clk.Set(0)
		cfg := config(t, srv)
		cfg.Now = clk.Now
		c := newClient(t, cfg)
		for m := range 40 {
			clk.Set(time.Duration(m) * time.Minute)
			c.Send(t.Context(), message())
		}
		n := 0
		seen.Range(func(any, any) bool { n++; return true })
		if n != 1 {
			t.Errorf("%s: %d tokens in 40 min of failures; want 1", reason, n)
		}
	}
}

// TestExpiredProviderTokenRenewed: when APNs calls a token of 20 min or
// more expired, the adapter mints one anew and the send succeeds.
func TestExpiredProviderTokenRenewed(t *testing.T) {
	x := &expiring{ok: map[string]bool{}}
	var first string
	ts := h2(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		x.mu.Lock()
		if first == "" {
			first = r.Header.Get("Authorization")
		}
		// Every token but the first is good.
		x.ok[r.Header.Get("Authorization")] = r.Header.Get("Authorization") != first
		x.mu.Unlock()
		x.ServeHTTP(w, r)
	}))
	clk := newClock()
	cfg := config(t, ts)
	cfg.Now = clk.Now
	c := newClient(t, cfg)
	if _, err := c.Send(t.Context(), message()); channels.ClassOf(err) != channels.Halt {
		t.Fatalf("first send: %v; want halt", err)
	}
	clk.Set(25 * time.Minute)
	if _, err := c.Send(t.Context(), message()); err != nil {
		t.Fatalf("send after renewal: %v", err)
	}
	if r, d := x.tokens(); r != 3 || d != 2 {
		t.Errorf("%d requests with %d tokens; want 3 and 2", r, d)
	}
	if _, err := c.Send(t.Context(), message()); err != nil {
		t.Fatalf("next send: %v", err)
	}
	if r, d := x.tokens(); r != 4 || d != 2 {
		t.Errorf("%d requests with %d tokens; want 4 and 2 (the new token is kept)", r, d)
	}
}

// TestSendAgainstFake runs the adapter against apnstest: answers classify
// as documented.
func TestSendAgainstFake(t *testing.T) {
	const dead = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	clk := newClock()
	s, c := fake(t, apnstest.Config{DeviceRate: 0.001, DeviceBurst: 1}, clk)
	clk.Set(time.Minute)
	s.Unregister(dead)

	ok, throttled := channeltest.CountAnswers(t, 4, func(i int) channels.Message {
		m := message()
		m.To = fmt.Sprintf("%064x", i/2) // two sends per device
		return m
	}, channeltest.Bound(t.Context(), c.Send),
		func(channels.Result) bool { return true },
		func(e *channels.Error) bool {
			return e.Code == "TooManyRequests" && e.Scope == channels.ScopePair && e.Status == 429
		})
	if ok != 2 || throttled != 2 {
		t.Errorf("accepted %d, throttled %d; want 2 and 2 (device burst 1)", ok, throttled)
	}

	m := message()
	m.To = dead
	e := sendErr(t, c, m)
	since, found := apns.InvalidSince(e)
	if e.Class != channels.Permanent || e.Code != "Unregistered" || e.Status != 410 || !found || !since.Equal(t0.Add(time.Minute)) {
		t.Errorf("dead token: %v, since %v %v; want permanent Unregistered 410 since t0+1m", e, since, found)
	}

	clk.Set(61 * time.Minute) // past the first token's hour, on both clocks
	if _, err := c.Send(t.Context(), message()); err != nil {
		t.Errorf("after an hour: %v; want the renewed token accepted", err)
	}
	if tok := s.Tokens(); tok.Tokens != 2 || tok.Expired != 0 || tok.TooManyUpdates != 0 {
		t.Errorf("tokens = %+v; want 2, no refusals", tok)
	}

	// A client with another key gets InvalidProviderToken: Halt.
	p8, _, err := apnstest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	other := newClient(t, apns.Config{BaseURL: s.URL(), KeyID: keyID, TeamID: teamID, PrivateKey: p8, HTTPClient: s.Client(), Now: clk.Now})
	if e := sendErr(t, other, message()); e.Class != channels.Halt || e.Code != "InvalidProviderToken" || e.Status != 403 {
		t.Errorf("wrong key: %v; want halt InvalidProviderToken 403", e)
	}
}

// TestCleartextHTTP2: the default client speaks HTTP/2 without TLS (h2c,
// prior knowledge) to an http:// base URL, as to `pacer fake-provider
// --channel apns`; the fake refuses notifications over HTTP/1.1.
func TestCleartextHTTP2(t *testing.T) {
	s := apnstest.New(apnstest.Config{PublicKey: signingKey(t).pub})
	ts := httptest.NewUnstartedServer(s.HTTP2Handler())
	ts.Config.Protocols = new(http.Protocols)
	ts.Config.Protocols.SetHTTP1(true)
	ts.Config.Protocols.SetUnencryptedHTTP2(true)
	ts.Start()
	defer ts.Close()
	c := newClient(t, apns.Config{BaseURL: ts.URL, KeyID: keyID, TeamID: teamID, PrivateKey: signingKey(t).p8})
	res, err := c.Send(t.Context(), message())
	if err != nil || len(res.ProviderID) != 36 {
		t.Fatalf("Send = %+v, %v; want an apns-id", res, err)
	}
	if a := s.Arrivals(); len(a) != 1 || a[0].Status != 200 {
		t.Errorf("arrivals = %+v; want one accepted", a)
	}
}

func TestDefaultLimit(t *testing.T) {
	l := apns.DefaultLimit
	if l.PerSecond <= 0 || l.Burst < 1 || !strings.Contains(l.Source, "developer.apple.com") {
		t.Errorf("DefaultLimit = %+v", l)
	}
}
