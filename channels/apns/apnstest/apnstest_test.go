package apnstest_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/pacerhq/pacer/channels/apns/apnstest"
	"github.com/pacerhq/pacer/channels/internal/channeltest"
)

const (
	keyID  = "ABC123DEFG"
	teamID = "DEF123GHIJ"
	topic  = "com.example.app"
	device = "7a3f0c9e1b2d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6a7b8c9d0e1f2a3b"
	body   = `{"aps":{"alert":"hi"}}`
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// newClock returns a settable clock at t0, for a client and a fake.
func newClock() *channeltest.Clock { return &channeltest.Clock{Start: t0} }

// keys returns a fresh key pair: the private key and its public half.
func keys(t *testing.T) (*ecdsa.PrivateKey, *ecdsa.PublicKey) {
	t.Helper()
	p8, pub, err := apnstest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	k, err := jwt.ParseECPrivateKeyFromPEM(p8)
	if err != nil {
		t.Fatal(err)
	}
	return k, pub
}

// sign returns an ES256 provider token.
func sign(t *testing.T, k *ecdsa.PrivateKey, kid, iss string, iat time.Time) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": iss, "iat": iat.Unix()})
	tok.Header["kid"] = kid
	s, err := tok.SignedString(k)
	return channeltest.Must(t, s, err)
}

// req builds a valid notification request for device with token jwt.
func req(jwt, to, payload string) *http.Request {
	auth := ""
	if jwt != "" {
		auth = "bearer " + jwt // APNs takes the scheme in any case
	}
	return channeltest.Request("POST", "/3/device/"+to, payload, "Authorization", auth, "apns-topic", topic, "apns-push-type", "alert")
}

// serve is channeltest.Serve.
var serve = channeltest.Serve

// reason decodes an APNs error body.
func reason(t *testing.T, w *httptest.ResponseRecorder) (string, *int64) {
	t.Helper()
	var b struct {
		Reason    string `json:"reason"`
		Timestamp *int64 `json:"timestamp"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil {
		t.Fatalf("error body %q: %v", w.Body, err)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	return b.Reason, b.Timestamp
}

// fixture is a fake with our key and a clock, plus a valid token.
type fixture struct {
	s   *apnstest.Server
	clk *channeltest.Clock
	key *ecdsa.PrivateKey
	jwt string
}

func newFixture(t *testing.T, cfg apnstest.Config) *fixture {
	t.Helper()
	k, pub := keys(t)
	clk := newClock()
	cfg.PublicKey, cfg.KeyID, cfg.TeamID, cfg.Now = pub, keyID, teamID, clk.Now
	return &fixture{s: apnstest.New(cfg), clk: clk, key: k, jwt: sign(t, k, keyID, teamID, t0)}
}

func (f *fixture) post(to, payload string) *httptest.ResponseRecorder {
	return serve(f.s, req(f.jwt, to, payload))
}

// TestFake runs the checks every fake passes on the device buckets, each
// key being a device token and an apns-topic of its own, with APNs's
// answers: a 200 with a new apns-id and no body, a 429 TooManyRequests.
func TestFake(t *testing.T) {
	var n atomic.Int64 // numbers the requests without an id
	k, pub := keys(t)
	tok := sign(t, k, keyID, teamID, time.Now())
	channeltest.CheckFake(t, channeltest.Fake[apnstest.Config, *apnstest.Server, apnstest.KeyStats, apnstest.Arrival]{
		Config: func(c channeltest.FakeConfig) apnstest.Config {
			return apnstest.Config{DeviceRate: c.Rate, DeviceBurst: c.Burst, Latency: c.Latency, AnswerTime: c.AnswerTime, PublicKey: pub}
		},
		New: apnstest.New, NewServer: apnstest.NewServer, FetchStats: apnstest.FetchStats,
		Request: func(key, id string) *http.Request {
			if id == "" { // a body of its own, not a duplicate
				id = fmt.Sprint("n-", n.Add(1))
			}
			r := req(tok, key, fmt.Sprintf(`{"aps":{"alert":"hi"},"id":%q}`, id))
			r.Header.Set("apns-topic", key)
			return r
		},
		Accepted: http.StatusOK, Throttled: http.StatusTooManyRequests,
		Arrival: func(a apnstest.Arrival) (string, bool) { return a.Key, a.Throttled },
		Check: func(t testing.TB, status int, h http.Header, body []byte) {
			id := h.Get("apns-id")
			if (status == 200 && (len(body) != 0 || len(id) != 36)) ||
				(status == 429 && (string(body) != `{"reason":"TooManyRequests"}`+"\n" || id != "" ||
					h.Get("Content-Type") != "application/json")) {
				t.Errorf("HTTP %d apns-id %q body %q", status, id, body)
			}
		},
		StatsFields: []string{"delivered", "throttled", "unregistered", "duplicates", "max_1s", "first", "last"},
	})
}

// TestDeviceAcrossTopics: over HTTP/2, a device token's bucket spans its
// topics, another device token has its own, and one provider token serves
// every request.
func TestDeviceAcrossTopics(t *testing.T) {
	k, pub := keys(t)
	s := apnstest.NewServer(apnstest.Config{DeviceRate: 0.001, DeviceBurst: 1, PublicKey: pub})
	defer s.Close()
	tok := sign(t, k, keyID, teamID, time.Now())
	var got []string
	for _, c := range []struct{ to, topic string }{{device, topic}, {device, "com.example.other"}, {"00ff", topic}} {
		r, _ := http.NewRequest("POST", s.URL()+"/3/device/"+c.to, strings.NewReader(body))
		r.Header = req(tok, c.to, "").Header
		r.Header.Set("apns-topic", c.topic)
		resp, err := s.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got = append(got, fmt.Sprint(resp.StatusCode, " ", resp.Proto))
	}
	if want := "[200 HTTP/2.0 429 HTTP/2.0 200 HTTP/2.0]"; fmt.Sprint(got) != want {
		t.Errorf("answers = %v, want %s", got, want)
	}
	if tok := s.Tokens(); tok.Tokens != 1 {
		t.Errorf("tokens = %+v, want 1", tok)
	}
}

// TestNoTopicLimit: APNs publishes no limit per apns-topic and answers
// TooManyRequests only for "too many requests ... made consecutively to the
// same device token", so the fake never throttles a topic as a whole: a
// thousand notifications of one topic to a thousand devices all pass, even
// with a device limit of one.
// Source: https://developer.apple.com/documentation/usernotifications/handling-notification-responses-from-apns
func TestNoTopicLimit(t *testing.T) {
	f := newFixture(t, apnstest.Config{DeviceRate: 0.001, DeviceBurst: 1})
	for i := range 1000 {
		if w := f.post(fmt.Sprintf("%064x", i), body); w.Code != 200 {
			t.Fatalf("device %d: HTTP %d %s", i, w.Code, w.Body)
		}
	}
	if st := f.s.Stats()[topic]; st.Delivered != 1000 || st.Throttled != 0 {
		t.Errorf("stats = %+v; want 1000 delivered, none throttled", st)
	}
}

// TestBucketRefills steps the device bucket through the fake's clock.
func TestBucketRefills(t *testing.T) {
	f := newFixture(t, apnstest.Config{DeviceRate: 2, DeviceBurst: 3})
	ms := time.Millisecond
	for i, st := range []struct {
		at time.Duration
		ok bool
	}{
		{0, true}, {0, true}, {0, true}, {0, false},
		{499 * ms, false}, {500 * ms, true}, {500 * ms, false},
		{10 * time.Second, true}, {10 * time.Second, true}, {10 * time.Second, true}, {10 * time.Second, false},
	} {
		f.clk.Set(st.at)
		w := f.post(device, fmt.Sprintf(`{"n":%d}`, i))
		if (w.Code == 200) != st.ok {
			t.Fatalf("step %d at %v: HTTP %d %s, want ok=%v", i, st.at, w.Code, w.Body, st.ok)
		}
	}
	if st := f.s.Stats()[topic]; st.Delivered != 7 || st.Throttled != 4 || !st.First.Equal(t0) ||
		!st.Last.Equal(t0.Add(10*time.Second)) || st.Max1s != 4 {
		t.Errorf("stats = %+v", st) // Max1s: 3 at 0 and 1 at 500ms
	}
}

func TestDeviceRate(t *testing.T) {
	f := newFixture(t, apnstest.Config{DeviceRate: 0.001, DeviceBurst: 2})
	const other = "00ff"
	codes := []int{}
	for i, to := range []string{device, device, device, other} {
		codes = append(codes, f.post(to, fmt.Sprintf(`{"n":%d}`, i)).Code)
	}
	r := req(f.jwt, other, body) // the device bucket spans topics
	r.Header.Set("apns-topic", "com.example.other")
	codes = append(codes, serve(f.s, r).Code, serve(f.s, req(f.jwt, other, body)).Code)
	if fmt.Sprint(codes) != "[200 200 429 200 200 429]" {
		t.Errorf("statuses = %v; want [200 200 429 200 200 429]", codes)
	}
	w := f.post(device, body)
	if rs, _ := reason(t, w); w.Code != 429 || rs != "TooManyRequests" {
		t.Errorf("HTTP %d %s; want 429 TooManyRequests", w.Code, w.Body)
	}
}

func TestSuccess(t *testing.T) {
	f := newFixture(t, apnstest.Config{})
	ids := map[string]bool{}
	for range 100 {
		w := f.post(device, body)
		id := w.Header().Get("apns-id")
		if w.Code != 200 || w.Body.Len() != 0 || len(id) != 36 || id != strings.ToLower(id) || id[14] != '4' || ids[id] {
			t.Fatalf("HTTP %d apns-id %q body %q; want 200, a new lowercase v4 UUID, no body", w.Code, id, w.Body)
		}
		ids[id] = true
	}
	r := req(f.jwt, device, body)
	r.Header.Set("apns-id", "123e4567-e89b-12d3-a456-426614174000")
	if w := serve(f.s, r); w.Header().Get("apns-id") != "123e4567-e89b-12d3-a456-426614174000" {
		t.Errorf("apns-id %q; want the request's echoed", w.Header().Get("apns-id"))
	}
	a := f.s.Arrivals()
	last := a[len(a)-1]
	if len(a) != 101 || last.Key != topic || last.To != device || last.PushType != "alert" || last.Status != 200 ||
		last.ApnsID != "123e4567-e89b-12d3-a456-426614174000" || len(last.Body) != 64 || !last.At.Equal(t0) {
		t.Errorf("last arrival = %+v", last)
	}
}

// TestProviderToken: the fake checks the JWT like APNs.
func TestProviderToken(t *testing.T) {
	other, _ := keys(t)
	f := newFixture(t, apnstest.Config{})
	f.clk.Set(2 * time.Hour)
	now := t0.Add(2 * time.Hour)
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": teamID, "iat": now.Unix()})
	hs.Header["kid"] = keyID
	hsTok, _ := hs.SignedString([]byte("secret"))
	noIat := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": teamID})
	noIat.Header["kid"] = keyID
	noIatTok, _ := noIat.SignedString(f.key)
	// Each Authorization header (none for "") under the reason APNs refuses
	// it with, with a 403; under "" the one it accepts, with a 200.
	auths := map[string]map[string]string{
		"MissingProviderToken": {
			"none":        "",
			"basic":       "Basic eDp5",
			"bearer only": "bearer",
		},
		"InvalidProviderToken": {
			"garbage":    "bearer not.a.jwt",
			"other key":  "bearer " + sign(t, other, keyID, teamID, now),
			"other kid":  "bearer " + sign(t, f.key, "ZZZ123DEFG", teamID, now),
			"other team": "bearer " + sign(t, f.key, keyID, "ZZZ123GHIJ", now),
			"HS256":      "bearer " + hsTok,
			"no iat":     "bearer " + noIatTok,
		},
		"ExpiredProviderToken": {
			"61 min old": "bearer " + sign(t, f.key, keyID, teamID, now.Add(-61*time.Minute)),
		},
		"": {
			"60 min old": "Bearer " + sign(t, f.key, keyID, teamID, now.Add(-time.Hour)),
		},
	}
	for _, want := range []string{"MissingProviderToken", "InvalidProviderToken", "ExpiredProviderToken", ""} {
		for name, auth := range auths[want] {
			t.Run(name, func(t *testing.T) {
				r := req("", device, body)
				if auth != "" {
					r.Header.Set("Authorization", auth)
				}
				status := http.StatusForbidden
				if want == "" {
					status = http.StatusOK
				}
				w := serve(f.s, r)
				if w.Code != status {
					t.Fatalf("HTTP %d %s; want %d %s", w.Code, w.Body, status, want)
				}
				if want != "" {
					if rs, _ := reason(t, w); rs != want {
						t.Errorf("reason %q, want %q", rs, want)
					}
				}
			})
		}
	}
	if tok := f.s.Tokens(); tok.Tokens != 1 || tok.Invalid != 9 || tok.Expired != 1 {
		t.Errorf("tokens = %+v; want 1 accepted, 9 invalid, 1 expired", tok)
	}
	if n := len(f.s.Arrivals()); n != 1 {
		t.Errorf("%d arrivals; want 1 (refused tokens are not recorded)", n)
	}
}

// TestUnverifiedTokens: without Config.PublicKey any well-formed ES256
// token is accepted, but not an unsigned one.
func TestUnverifiedTokens(t *testing.T) {
	k, _ := keys(t)
	s := apnstest.New(apnstest.Config{})
	if w := serve(s, req(sign(t, k, "ANYKEY0000", "ANYTEAM000", time.Now()), device, body)); w.Code != 200 {
		t.Errorf("HTTP %d %s; want 200", w.Code, w.Body)
	}
	none := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"iss": teamID, "iat": time.Now().Unix()})
	none.Header["kid"] = keyID
	tok, _ := none.SignedString(jwt.UnsafeAllowNoneSignatureType)
	if w := serve(s, req(tok, device, body)); w.Code != 403 {
		t.Errorf("alg none: HTTP %d %s; want 403", w.Code, w.Body)
	}
}

// TestRotation: a new token sooner than 20 min after the previous new one
// is refused; stragglers with an older token pass.
func TestRotation(t *testing.T) {
	f := newFixture(t, apnstest.Config{})
	a := f.jwt
	b := sign(t, f.key, keyID, teamID, t0.Add(10*time.Minute))
	c := sign(t, f.key, keyID, teamID, t0.Add(30*time.Minute))
	for i, st := range []struct {
		at     time.Duration
		tok    string
		status int
	}{
		{0, a, 200},
		{10 * time.Minute, b, 429},
		{10 * time.Minute, a, 200},
		{19*time.Minute + 59*time.Second, b, 429},
		{20 * time.Minute, b, 200}, // 20 min after a was first seen
		{25 * time.Minute, a, 200}, // straggler
		{30 * time.Minute, c, 429}, // 10 min after b
		{40 * time.Minute, c, 200},
		{40 * time.Minute, b, 200},
	} {
		f.clk.Set(st.at)
		w := serve(f.s, req(st.tok, device, fmt.Sprintf(`{"n":%d}`, i)))
		if w.Code != st.status {
			t.Fatalf("step %d at %v: HTTP %d %s; want %d", i, st.at, w.Code, w.Body, st.status)
		}
		if w.Code == 429 {
			if rs, _ := reason(t, w); rs != "TooManyProviderTokenUpdates" {
				t.Fatalf("step %d: reason %q", i, rs)
			}
		}
	}
	if tok := f.s.Tokens(); tok != (apnstest.TokenStats{Tokens: 3, TooManyUpdates: 3}) {
		t.Errorf("tokens = %+v; want 3 accepted, 3 refused", tok)
	}
	if st := f.s.Stats()[topic]; st.Delivered != 6 || st.Throttled != 0 {
		t.Errorf("stats = %+v; token refusals are not arrivals", st)
	}
}

func TestUnregistered(t *testing.T) {
	const dead1, dead2 = "dead01", "dead02"
	f := newFixture(t, apnstest.Config{Unregistered: map[string]bool{dead1: true, "ignored": false}})
	f.clk.Set(5 * time.Minute)
	f.s.Unregister(dead2)
	f.clk.Set(time.Hour)
	for to, since := range map[string]time.Time{dead1: t0, dead2: t0.Add(5 * time.Minute)} {
		w := f.post(to, body)
		rs, ts := reason(t, w)
		if w.Code != 410 || rs != "Unregistered" || ts == nil || *ts != since.UnixMilli() {
			t.Errorf("%s: HTTP %d %s; want 410 Unregistered with timestamp %d", to, w.Code, w.Body, since.UnixMilli())
		}
	}
	if w := f.post("ba5e", body); w.Code != 200 {
		t.Errorf("live token: HTTP %d", w.Code)
	}
	if st := f.s.Stats()[topic]; st.Unregistered != 2 || st.Delivered != 1 {
		t.Errorf("stats = %+v; want 2 unregistered, 1 delivered", st)
	}
	if a := f.s.Arrivals(); len(a) != 3 || a[0].Status != 410 || a[0].ApnsID != "" || a[2].Status != 200 {
		t.Errorf("arrivals = %+v", a)
	}
}

// TestValidation: each documented request error, and nothing recorded.
func TestValidation(t *testing.T) {
	f := newFixture(t, apnstest.Config{})
	big := func(n int) string { return `{"p":"` + strings.Repeat("x", n-8) + `"}` }
	for _, c := range []struct {
		name   string
		mod    func(r *http.Request) *http.Request
		status int
		reason string
	}{
		{"no topic", func(r *http.Request) *http.Request { r.Header.Del("apns-topic"); return r }, 400, "MissingTopic"},
		{"priority 7", func(r *http.Request) *http.Request { r.Header.Set("apns-priority", "7"); return r }, 400, "BadPriority"},
		{"expiration word", func(r *http.Request) *http.Request { r.Header.Set("apns-expiration", "soon"); return r }, 400, "BadExpirationDate"},
		{"collapse id 65", func(r *http.Request) *http.Request {
			r.Header.Set("apns-collapse-id", strings.Repeat("c", 65))
			return r
		}, 400, "BadCollapseId"},
		{"push type sms", func(r *http.Request) *http.Request { r.Header.Set("apns-push-type", "sms"); return r }, 400, "InvalidPushType"},
		{"apns-id", func(r *http.Request) *http.Request { r.Header.Set("apns-id", "abc"); return r }, 400, "BadMessageId"},
		{"two topics", func(r *http.Request) *http.Request { r.Header.Add("apns-topic", "x"); return r }, 400, "DuplicateHeaders"},
		{"no device", func(*http.Request) *http.Request { return req(f.jwt, "", body) }, 400, "MissingDeviceToken"},
		{"device not hex", func(*http.Request) *http.Request { return req(f.jwt, "xyz1", body) }, 400, "BadDeviceToken"},
		{"device odd", func(*http.Request) *http.Request { return req(f.jwt, "abc", body) }, 400, "BadDeviceToken"},
		{"empty body", func(*http.Request) *http.Request { return req(f.jwt, device, "") }, 400, "PayloadEmpty"},
		{"4097 bytes", func(*http.Request) *http.Request { return req(f.jwt, device, big(4097)) }, 413, "PayloadTooLarge"},
		{"5121 bytes voip", func(*http.Request) *http.Request {
			r := req(f.jwt, device, big(5121))
			r.Header.Set("apns-push-type", "voip")
			return r
		}, 413, "PayloadTooLarge"},
		{"bad path", func(*http.Request) *http.Request { return httptest.NewRequest("POST", "/3/devices/ab", nil) }, 404, "BadPath"},
		{"root", func(*http.Request) *http.Request { return httptest.NewRequest("GET", "/", nil) }, 404, "BadPath"},
		{"GET device", func(*http.Request) *http.Request { return httptest.NewRequest("GET", "/3/device/ab", nil) }, 405, "MethodNotAllowed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := serve(f.s, c.mod(req(f.jwt, device, body)))
			if rs, _ := reason(t, w); w.Code != c.status || rs != c.reason {
				t.Errorf("HTTP %d %s; want %d %s", w.Code, w.Body, c.status, c.reason)
			}
		})
	}
	if n := len(f.s.Arrivals()); n != 0 {
		t.Errorf("%d arrivals, want 0", n)
	}
	// The limits themselves pass.
	r := req(f.jwt, device, big(5120))
	r.Header.Set("apns-push-type", "voip")
	for _, r := range []*http.Request{req(f.jwt, device, big(4096)), r} {
		if w := serve(f.s, r); w.Code != 200 {
			t.Errorf("at the limit: HTTP %d %s", w.Code, w.Body)
		}
	}
}

// TestDuplicates: the same device token and body accepted twice counts
// once; a throttled request never does, and topics count separately.
func TestDuplicates(t *testing.T) {
	f := newFixture(t, apnstest.Config{DeviceRate: 0.001, DeviceBurst: 3})
	for _, p := range []struct{ to, body string }{
		{device, `{"a":1}`}, {device, `{"a":2}`}, {device, `{"a":1}`}, {"00ff", `{"a":1}`},
		{device, `{"a":1}`}, // throttled: the device's burst of 3 is spent
	} {
		f.post(p.to, p.body)
	}
	r := req(f.jwt, "0abc", `{"a":1}`)
	r.Header.Set("apns-topic", "com.example.other")
	serve(f.s, r)
	st := f.s.Stats()
	if k := st[topic]; k.Delivered != 4 || k.Throttled != 1 || k.Duplicates != 1 {
		t.Errorf("%s: %+v; want 4 delivered, 1 throttled, 1 duplicate", topic, k)
	}
	if o := st["com.example.other"]; o.Delivered != 1 || o.Duplicates != 0 {
		t.Errorf("other: %+v; want 1 delivered, 0 duplicates", o)
	}
	a := f.s.Arrivals()
	if len(a) != 6 || a[0].Body != a[2].Body || a[0].Body == a[1].Body || !a[4].Throttled || a[4].Status != 429 || a[4].ApnsID != "" {
		t.Errorf("arrivals = %+v", a)
	}
}

func TestMax1s(t *testing.T) {
	ms := time.Millisecond
	f := newFixture(t, apnstest.Config{})
	for i, at := range []time.Duration{0, 100 * ms, 900 * ms, 1050 * ms, 1099 * ms, 1100 * ms, 5 * time.Second} {
		f.clk.Set(at)
		f.post(device, fmt.Sprintf(`{"n":%d}`, i))
	}
	if got := f.s.Stats()[topic].Max1s; got != 4 { // 100, 900, 1050, 1099 ms
		t.Errorf("Max1s = %d, want 4", got)
	}
}

// TestHTTP2Only: NewServer refuses notifications over HTTP/1.1.
func TestHTTP2Only(t *testing.T) {
	k, _ := keys(t)
	s := apnstest.NewServer(apnstest.Config{})
	defer s.Close()
	tr := s.Client().Transport.(*http.Transport).Clone()
	tr.ForceAttemptHTTP2 = false
	tr.TLSClientConfig = tr.TLSClientConfig.Clone()
	tr.TLSClientConfig.NextProtos = nil
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP1(true)
	tr.HTTP2 = nil
	r, _ := http.NewRequest("POST", s.URL()+"/3/device/"+device, strings.NewReader(body))
	r.Header = req(sign(t, k, keyID, teamID, time.Now()), device, "").Header
	resp, err := (&http.Client{Transport: tr}).Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 1 || resp.StatusCode != http.StatusHTTPVersionNotSupported {
		t.Errorf("%s %d; want HTTP/1.1 505", resp.Proto, resp.StatusCode)
	}
	if n := len(s.Arrivals()); n != 0 {
		t.Errorf("%d arrivals, want 0", n)
	}
	if s.URL() == "" || s.Client() == nil || apnstest.New(apnstest.Config{}).URL() != "" || apnstest.New(apnstest.Config{}).Client() != nil {
		t.Error("URL and Client: set for NewServer only")
	}
}

func TestNewKey(t *testing.T) {
	p8, pub, err := apnstest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(p8)
	if b == nil || b.Type != "PRIVATE KEY" {
		t.Fatalf("not a PEM PRIVATE KEY: %s", p8)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ec, ok := k.(*ecdsa.PrivateKey)
	if !ok || ec.Curve != elliptic.P256() || !ec.PublicKey.Equal(pub) {
		t.Errorf("key %T; want a P-256 ECDSA key matching the public key", k)
	}
	p8b, _, _ := apnstest.NewKey()
	if string(p8b) == string(p8) {
		t.Error("NewKey repeated a key")
	}
}
