package fcmtest_test

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"

	"github.com/golang-jwt/jwt/v5"

	"github.com/pacerhq/pacer/channels/fcm/fcmtest"
	"github.com/pacerhq/pacer/channels/internal/channeltest"
)

const bearer = "static-test-token"

// request returns a request of body to /v1/projects/{project}/messages:send
// with the bearer token (none if ""), as the fcm adapter sends it.
func request(project, token, body string) *http.Request {
	return channeltest.PostJSON("/v1/projects/"+project+"/messages:send", token, body)
}

// post sends body to /v1/projects/{project}/messages:send on h and returns
// the recorded answer.
func post(h http.Handler, project, token, body string) *httptest.ResponseRecorder {
	return channeltest.Serve(h, request(project, token, body))
}

func msg(token, id string) string {
	return fmt.Sprintf(`{"message":{"token":%q,"notification":{"title":"hi"},"data":{"pacer_id":%q}}}`, token, id)
}

func decodeError(t *testing.T, w *httptest.ResponseRecorder) fcmtest.ErrorBody {
	t.Helper()
	return channeltest.DecodeBody[fcmtest.ErrorBody](t, w)
}

// detail returns the first detail of b with @type ending in suffix.
func detail(b fcmtest.ErrorBody, suffix string) map[string]any {
	for _, d := range b.Error.Details {
		if s, _ := d["@type"].(string); strings.HasSuffix(s, suffix) {
			return d
		}
	}
	return nil
}

// TestTokenWithOAuth2: the key file works with golang.org/x/oauth2/google,
// and the token it gets is accepted.
func TestTokenWithOAuth2(t *testing.T) {
	s := fcmtest.NewServer(fcmtest.Config{})
	defer s.Close()
	creds, err := google.CredentialsFromJSONWithType(t.Context(), s.ServiceAccountJSON(), google.ServiceAccount,
		"https://www.googleapis.com/auth/firebase.messaging")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := creds.TokenSource.Token()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok.AccessToken, "ya29.") || time.Until(tok.Expiry) < 59*time.Minute || creds.ProjectID != fcmtest.ProjectID {
		t.Errorf("token = %+v, project %q", tok, creds.ProjectID)
	}
	if w := post(s, "p", tok.AccessToken, msg("dev", "1")); w.Code != 200 {
		t.Errorf("send with the issued token: HTTP %d %s", w.Code, w.Body)
	}
	if n := s.TokenRequests(); n != 1 {
		t.Errorf("TokenRequests = %d, want 1", n)
	}
	s.RevokeTokens()
	if w := post(s, "p", tok.AccessToken, msg("dev", "1")); w.Code != 401 || decodeError(t, w).Error.Status != "UNAUTHENTICATED" {
		t.Errorf("send with a revoked token: HTTP %d %s; want 401 UNAUTHENTICATED", w.Code, w.Body)
	}
}

// keyOf returns the private key of a key file.
func keyOf(t *testing.T, keyFile []byte) (*rsa.PrivateKey, map[string]string) {
	t.Helper()
	var sa map[string]string
	if err := json.Unmarshal(keyFile, &sa); err != nil {
		t.Fatal(err)
	}
	k, err := jwt.ParseRSAPrivateKeyFromPEM([]byte(sa["private_key"]))
	if err != nil {
		t.Fatal(err)
	}
	return k, sa
}

// sign returns a compact RS256 JWS of header (as given, whatever its alg
// says) and claims.
func sign(t *testing.T, key *rsa.PrivateKey, header, claims map[string]any) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims(claims))
	tok.Header = header
	s, err := tok.SignedString(key)
	return channeltest.Must(t, s, err)
}

// TestTokenEndpointRefusals: every part of the assertion is checked.
func TestTokenEndpointRefusals(t *testing.T) {
	s := fcmtest.NewServer(fcmtest.Config{})
	defer s.Close()
	key, sa := keyOf(t, s.ServiceAccountJSON())
	other, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Unix()
	header := func() map[string]any {
		return map[string]any{"alg": "RS256", "typ": "JWT", "kid": sa["private_key_id"]}
	}
	claims := func() map[string]any {
		return map[string]any{"iss": sa["client_email"], "aud": sa["token_uri"], "iat": now, "exp": now + 3600,
			"scope": "https://www.googleapis.com/auth/firebase.messaging"}
	}
	with := func(m map[string]any, k string, v any) map[string]any { m[k] = v; return m }
	for _, c := range []struct {
		name      string
		grant     string
		assertion string
		code      string // "" means granted
	}{
		{"good", fcmtest.GrantType, sign(t, key, header(), claims()), ""},
		{"cloud-platform scope", fcmtest.GrantType, sign(t, key, header(), with(claims(), "scope", "https://www.googleapis.com/auth/cloud-platform")), ""},
		{"grant type", "client_credentials", sign(t, key, header(), claims()), "unsupported_grant_type"},
		{"not a jws", fcmtest.GrantType, "abc", "invalid_grant"},
		{"other key", fcmtest.GrantType, sign(t, other, header(), claims()), "invalid_grant"},
		{"tampered", fcmtest.GrantType, strings.Replace(sign(t, key, header(), claims()), ".", ".e30", 1), "invalid_grant"},
		{"alg", fcmtest.GrantType, sign(t, key, with(header(), "alg", "HS256"), claims()), "invalid_grant"},
		{"kid", fcmtest.GrantType, sign(t, key, with(header(), "kid", "0123"), claims()), "invalid_grant"},
		{"issuer", fcmtest.GrantType, sign(t, key, header(), with(claims(), "iss", "x@y.iam.gserviceaccount.com")), "invalid_grant"},
		{"audience", fcmtest.GrantType, sign(t, key, header(), with(claims(), "aud", "https://oauth2.googleapis.com/token")), "invalid_grant"},
		{"expired", fcmtest.GrantType, sign(t, key, header(), with(with(claims(), "iat", now-7200), "exp", now-3600)), "invalid_grant"},
		{"too long", fcmtest.GrantType, sign(t, key, header(), with(claims(), "exp", now+7200)), "invalid_grant"},
		{"from the future", fcmtest.GrantType, sign(t, key, header(), with(with(claims(), "iat", now+600), "exp", now+1200)), "invalid_grant"},
		{"scope", fcmtest.GrantType, sign(t, key, header(), with(claims(), "scope", "https://www.googleapis.com/auth/userinfo.email")), "invalid_scope"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, err := http.PostForm(s.URL()+"/token", url.Values{"grant_type": {c.grant}, "assertion": {c.assertion}})
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var b struct {
				AccessToken string `json:"access_token"`
				ExpiresIn   int    `json:"expires_in"`
				TokenType   string `json:"token_type"`
				Error       string `json:"error"`
				Description string `json:"error_description"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
				t.Fatal(err)
			}
			switch {
			case c.code == "" && (resp.StatusCode != 200 || b.AccessToken == "" || b.ExpiresIn != 3599 || b.TokenType != "Bearer"):
				t.Errorf("HTTP %d %+v; want a token", resp.StatusCode, b)
			case c.code != "" && (resp.StatusCode != 400 || b.Error != c.code || b.Description == "" || b.AccessToken != ""):
				t.Errorf("HTTP %d %+v; want 400 %s", resp.StatusCode, b, c.code)
			}
		})
	}
}

// TestTokenTTL: Config.TokenTTL sets expires_in, and an expired token is refused.
func TestTokenTTL(t *testing.T) {
	s := fcmtest.NewServer(fcmtest.Config{TokenTTL: time.Second})
	defer s.Close()
	creds, err := google.CredentialsFromJSONWithType(t.Context(), s.ServiceAccountJSON(), google.ServiceAccount,
		"https://www.googleapis.com/auth/firebase.messaging")
	if err != nil {
		t.Fatal(err)
	}
	asked := time.Now()
	tok, err := creds.TokenSource.Token()
	if err != nil {
		t.Fatal(err)
	}
	// expires_in is 1 s after the answer, which came between asked and now.
	if tok.Expiry.Before(asked.Add(time.Second)) || tok.Expiry.After(time.Now().Add(time.Second)) {
		t.Errorf("token expires %v after the request, want 1s", tok.Expiry.Sub(asked))
	}
	time.Sleep(1100 * time.Millisecond)
	if w := post(s, "p", tok.AccessToken, msg("dev", "")); w.Code != 401 {
		t.Errorf("expired token: HTTP %d, want 401", w.Code)
	}
}

func TestServiceAccountJSONAt(t *testing.T) {
	s := fcmtest.New(fcmtest.Config{})
	ts := httptest.NewServer(s)
	defer ts.Close()
	src, err := google.CredentialsFromJSONWithType(t.Context(), s.ServiceAccountJSONAt(ts.URL+"/"), google.ServiceAccount,
		"https://www.googleapis.com/auth/firebase.messaging")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := oauth2.ReuseTokenSource(nil, src.TokenSource).Token()
	if err != nil {
		t.Fatal(err)
	}
	if w := post(s, "p", tok.AccessToken, msg("dev", "")); w.Code != 200 {
		t.Errorf("HTTP %d %s", w.Code, w.Body)
	}
	if s.URL() != "" {
		t.Errorf("URL of a server built by New = %q, want empty", s.URL())
	}
}

func TestAuth(t *testing.T) {
	s := fcmtest.New(fcmtest.Config{Token: bearer})
	for _, tok := range []string{"", "bad", bearer + " "} {
		w := post(s, "p", tok, msg("dev", ""))
		b := decodeError(t, w)
		if w.Code != 401 || b.Error.Status != "UNAUTHENTICATED" || b.Error.Code != 401 || b.Error.Message == "" {
			t.Errorf("token %q: HTTP %d %s; want 401 UNAUTHENTICATED", tok, w.Code, w.Body)
		}
	}
	if w := post(s, "p", bearer, msg("dev", "")); w.Code != 200 {
		t.Errorf("Config.Token: HTTP %d %s", w.Code, w.Body)
	}
	s.RevokeTokens() // Config.Token stays valid
	if w := post(s, "p", bearer, msg("dev", "")); w.Code != 200 {
		t.Errorf("Config.Token after RevokeTokens: HTTP %d %s", w.Code, w.Body)
	}
	if n := len(s.Arrivals()); n != 2 {
		t.Errorf("%d arrivals, want 2 (refused requests are not recorded)", n)
	}
}

func TestValidation(t *testing.T) {
	s := fcmtest.New(fcmtest.Config{Token: bearer})
	for _, body := range []string{
		``,
		`not json`,
		`[1]`,
		`null`,
		`{}`,
		`{"message":null}`,
		`{"message":[]}`,
		`{"message":{}}`,
		`{"message":{"token":""}}`,
		`{"message":{"token":42}}`,
		`{"message":{"token":"a","topic":"b"}}`,
		`{"message":{"token":"a","bogus":1}}`,
		`{"message":{"token":"a"},"extra":1}`,
		`{"message":{"token":"a","data":{"n":1}}}`,
		`{"message":{"token":"a","data":"x"}}`,
		`{"message":{"token":"a","notification":"x"}}`,
		`{"message":{"token":"a","android":[1]}}`,
		`{"message":{"token":"a"},"validate_only":"yes"}`,
	} {
		w := post(s, "p", bearer, body)
		b := decodeError(t, w)
		if w.Code != 400 || b.Error.Status != "INVALID_ARGUMENT" || detail(b, "FcmError")["errorCode"] != "INVALID_ARGUMENT" ||
			detail(b, "google.rpc.BadRequest") == nil {
			t.Errorf("body %q: HTTP %d %s; want 400 INVALID_ARGUMENT with FcmError and BadRequest", body, w.Code, w.Body)
		}
	}
	for _, body := range []string{
		`{"message":{"token":"a"}}`,
		`{"message":{"topic":"news"}}`,
		`{"message":{"condition":"'a' in topics"}}`,
		`{"message":{"token":"a","data":{"k":"v"},"notification":{"title":"t"},"android":{},"apns":{"payload":{}},"webpush":{},"fcm_options":{},"name":"x"}}`,
		`{"message":{"token":"a","fcmOptions":{"analyticsLabel":"x"}}}`,
	} {
		if w := post(s, "p", bearer, body); w.Code != 200 {
			t.Errorf("body %s: HTTP %d %s; want 200", body, w.Code, w.Body)
		}
	}
	if n := len(s.Arrivals()); n != 5 {
		t.Errorf("%d arrivals, want 5", n)
	}
	w := post(s, "p", bearer, `{"validate_only":true,"message":{"token":"a"}}`)
	if w.Code != 200 || len(s.Arrivals()) != 5 {
		t.Errorf("validate_only: HTTP %d, %d arrivals; want 200 and nothing recorded", w.Code, len(s.Arrivals()))
	}
	r := httptest.NewRequest("GET", "/v1/projects/p/messages:send", nil)
	rw := httptest.NewRecorder()
	s.ServeHTTP(rw, r)
	if rw.Code != 404 || decodeError(t, rw).Error.Status != "NOT_FOUND" {
		t.Errorf("GET messages:send: HTTP %d %s; want 404 NOT_FOUND", rw.Code, rw.Body)
	}
}

// TestFake runs the checks every fake passes, with FCM's answers: a 200
// naming the message, a 429 RESOURCE_EXHAUSTED with the FcmError
// QUOTA_EXCEEDED.
func TestFake(t *testing.T) {
	var n atomic.Int64
	channeltest.CheckFake(t, channeltest.Fake[fcmtest.Config, *fcmtest.Server, fcmtest.KeyStats, fcmtest.Arrival]{
		Config: func(c channeltest.FakeConfig) fcmtest.Config {
			return fcmtest.Config{Rate: c.Rate, Burst: c.Burst, Latency: c.Latency, AnswerTime: c.AnswerTime, Token: bearer}
		},
		New: fcmtest.New, NewServer: fcmtest.NewServer, FetchStats: fcmtest.FetchStats,
		Request: func(key, id string) *http.Request {
			body := msg("dev", id)
			if id == "" { // a message of its own, not a duplicate
				body = fmt.Sprintf(`{"message":{"token":"dev","notification":{"title":"hi %d"}}}`, n.Add(1))
			}
			return request(key, bearer, body)
		},
		Accepted: http.StatusOK, Throttled: http.StatusTooManyRequests,
		Arrival: func(a fcmtest.Arrival) (string, bool) { return a.Key, a.Throttled },
		Check: func(t testing.TB, status int, h http.Header, body []byte) {
			var ok struct{ Name string }
			var b fcmtest.ErrorBody
			if h.Get("Content-Type") != "application/json; charset=UTF-8" || json.Unmarshal(body, &ok) != nil ||
				json.Unmarshal(body, &b) != nil || (status == 200 && !strings.Contains(ok.Name, "/messages/")) ||
				(status == 429 && (b.Error.Status != "RESOURCE_EXHAUSTED" ||
					detail(b, "FcmError")["errorCode"] != "QUOTA_EXCEEDED" || len(b.Error.Details) != 1)) {
				t.Errorf("HTTP %d %q %s: want a message name for a 200, QUOTA_EXCEEDED for a 429", status, h.Get("Content-Type"), body)
			}
		},
		StatsFields: []string{"delivered", "throttled", "device_throttled", "unregistered", "third_party_auth", "invalid",
			"server_errors", "duplicates", "max_1s", "first", "last"},
	})
}

// TestThrottleBodies: the project throttle in both shapes, the device
// throttle (the documented body, the same as the project's), and
// Retry-After in both forms.
func TestThrottleBodies(t *testing.T) {
	for _, c := range []struct {
		name   string
		cfg    fcmtest.Config
		device bool
	}{
		{"project", fcmtest.Config{Rate: 0.001, Burst: 1}, false},
		{"project #719", fcmtest.Config{Rate: 0.001, Burst: 1, QuotaErrorInfo: true, RetryAfter: 30 * time.Second}, false},
		{"project, http date", fcmtest.Config{Rate: 0.001, Burst: 1, RetryAfter: 90 * time.Second, RetryAfterDate: true}, false},
		{"device", fcmtest.Config{DeviceRate: 0.001, DeviceBurst: 1, RetryAfter: 1500 * time.Millisecond}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Token = bearer
			s := fcmtest.New(c.cfg)
			post(s, "p", bearer, msg("dev", "a"))
			sent := time.Now()
			w := post(s, "p", bearer, msg("dev", "b"))
			b := decodeError(t, w)
			if w.Code != 429 || b.Error.Code != 429 || b.Error.Status != "RESOURCE_EXHAUSTED" || b.Error.Message == "" ||
				!strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
				t.Fatalf("HTTP %d %s", w.Code, w.Body)
			}
			fcmErr, qf, info := detail(b, "FcmError"), detail(b, "QuotaFailure"), detail(b, "ErrorInfo")
			if c.cfg.QuotaErrorInfo {
				md, _ := info["metadata"].(map[string]any)
				if fcmErr != nil || qf != nil || info["reason"] != "RATE_LIMIT_EXCEEDED" || md["quota_limit"] != "SendsPerMinutePerProject" {
					t.Errorf("#719 body = %s", w.Body)
				}
			} else if want := `{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED",` +
				`"details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"QUOTA_EXCEEDED"}]}}`; strings.TrimSpace(w.Body.String()) != want {
				// FCM documents one body for the project's quota and a
				// device's: the fake answers it for both, with no QuotaFailure
				// whose fields FCM does not document.
				t.Errorf("body = %s; want FCM's documented %s", w.Body, want)
			}
			ra := w.Header().Get("Retry-After")
			switch {
			case c.cfg.RetryAfter == 0 && ra != "":
				t.Errorf("Retry-After %q, want none", ra)
			case c.cfg.RetryAfterDate:
				d, err := http.ParseTime(ra)
				// Measured from the request, not from now: a loaded machine may
				// take seconds between the answer and this line.
				if err != nil || d.Before(sent.Add(89*time.Second)) || d.After(time.Now().Add(92*time.Second)) {
					t.Errorf("Retry-After %q (%v), want an HTTP-date about 90 s ahead", ra, err)
				}
			case c.cfg.RetryAfter == 30*time.Second && ra != "30", c.cfg.RetryAfter == 1500*time.Millisecond && ra != "2":
				t.Errorf("Retry-After %q, want %v in whole seconds rounded up", ra, c.cfg.RetryAfter)
			}
			st := s.Stats()["p"]
			if st.Delivered != 1 || (st.Throttled == 1) == c.device || (st.DeviceThrottled == 1) != c.device {
				t.Errorf("stats = %+v", st)
			}
		})
	}
}

func TestUnregistered(t *testing.T) {
	s := fcmtest.New(fcmtest.Config{Token: bearer, Unregistered: []string{"gone"}})
	s.Unregister("also-gone")
	for _, tok := range []string{"gone", "also-gone"} {
		w := post(s, "p", bearer, msg(tok, ""))
		b := decodeError(t, w)
		if w.Code != 404 || b.Error.Status != "NOT_FOUND" || b.Error.Message != "Requested entity was not found." ||
			detail(b, "FcmError")["errorCode"] != "UNREGISTERED" {
			t.Errorf("%s: HTTP %d %s; want 404 UNREGISTERED", tok, w.Code, w.Body)
		}
	}
	if w := post(s, "p", bearer, msg("alive", "")); w.Code != 200 {
		t.Errorf("alive: HTTP %d", w.Code)
	}
	if st := s.Stats()["p"]; st.Unregistered != 2 || st.Delivered != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func TestSuccessBody(t *testing.T) {
	s := fcmtest.New(fcmtest.Config{Token: bearer})
	names := map[string]bool{}
	for range 100 {
		w := post(s, "my-project", bearer, msg("dev", ""))
		var b map[string]string
		if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil || w.Code != 200 || len(b) != 1 {
			t.Fatalf("HTTP %d %s: %v", w.Code, w.Body, err)
		}
		if !strings.HasPrefix(b["name"], "projects/my-project/messages/") || names[b["name"]] {
			t.Fatalf("name %q: wrong shape or repeated", b["name"])
		}
		names[b["name"]] = true
	}
	w := post(fcmtest.New(fcmtest.Config{Token: bearer}), "my-project", bearer, msg("dev", ""))
	for n := range names {
		if strings.Contains(w.Body.String(), n) {
			t.Fatalf("second server repeated name %s", n)
		}
	}
}

// TestDuplicates: the same (token, message) accepted twice counts once as a
// duplicate, whatever the key order; a throttled send never does, and
// projects count separately. Arrival.ID is data["pacer_id"].
func TestDuplicates(t *testing.T) {
	s := fcmtest.New(fcmtest.Config{Rate: 0.001, Burst: 5, Token: bearer})
	for _, body := range []string{
		msg("d1", "a"),
		msg("d1", "b"),
		`{"message":{"data":{"pacer_id":"a"},"notification":{"title":"hi"},"token":"d1"}}`, // a again, reordered
		msg("d2", "a"), // same id, other device: not a duplicate
		`{"message":{"token":"d1"}}`,
		msg("d1", "b"), // throttled
	} {
		post(s, "p", bearer, body)
	}
	post(s, "q", bearer, msg("d1", "a"))
	st := s.Stats()
	if p := st["p"]; p.Delivered != 5 || p.Throttled != 1 || p.Duplicates != 1 {
		t.Errorf("p: %+v; want 5 delivered, 1 throttled, 1 duplicate", p)
	}
	if q := st["q"]; q.Delivered != 1 || q.Duplicates != 0 {
		t.Errorf("q: %+v; want 1 delivered, 0 duplicates", q)
	}
	arr := s.Arrivals()
	if len(arr) != 7 || arr[2].ID != "a" || arr[4].ID != "" || arr[5].Status != 429 || !arr[5].Throttled ||
		arr[6].Key != "q" || arr[0].To != "d1" || arr[3].To != "d2" {
		t.Errorf("arrivals = %+v", arr)
	}
}
