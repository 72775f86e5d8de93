package sendgrid_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/internal/channeltest"
	"github.com/pacerhq/pacer/channels/sendgrid"
	"github.com/pacerhq/pacer/channels/sendgrid/sendgridtest"
)

const (
	secret    = "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"
	secret2   = "SG.second-key-secret.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	keyName   = "marketing"
	recipient = "ada.lovelace@example.com"
)

// t0 is the test clock: 30 s before the X-RateLimit-Reset of SendGrid's
// documented 429 (1392815263).
var t0 = time.Unix(1392815263-30, 0)

func keys() map[string]string { return map[string]string{keyName: secret, "transactional": secret2} }

func newClient(t *testing.T, baseURL string) *sendgrid.Client {
	t.Helper()
	c, err := sendgrid.New(sendgrid.Config{BaseURL: baseURL, APIKeys: keys(), Now: func() time.Time { return t0 }})
	return channeltest.Must(t, c, err)
}

func message() channels.Message {
	return channeltest.Message("env-1", keyName, recipient, `{"from":{"email":"news@example.org"},"subject":"Hi",
			"content":[{"type":"text/plain","value":"Hello"}]}`)
}

// secrets must stay out of error text, in any case.
var secrets = []string{secret, secret2, recipient, "ada.lovelace"}

// sendErr sends message() through a client of ts and returns the *channels.Error.
func sendErr(t *testing.T, ts *httptest.Server) *channels.Error {
	t.Helper()
	return sendErrWith(t, newClient(t, ts.URL), message())
}

func sendErrWith(t *testing.T, c *sendgrid.Client, m channels.Message) *channels.Error {
	t.Helper()
	e := channeltest.SendError(t, "sendgrid", c.Send, m, secrets...)
	if e.Class == channels.Success {
		t.Errorf("Class = success in an error")
	}
	return e
}

// TestSendClassification runs every row of providers.md §4.3 (but 202, see
// TestSendSuccess) through the adapter with the bodies in testdata.
func TestSendClassification(t *testing.T) {
	rl := []string{"X-RateLimit-Limit", "150", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1392815263"}
	const (
		throttle  = channels.Throttle
		transient = channels.Transient
		permanent = channels.Permanent
		halt      = channels.Halt
	)
	for _, c := range []struct {
		file   string
		status int
		header []string
		class  channels.Class
		retry  time.Duration
		detail string // want Detail to start with this
		hasErr bool   // the body is not a SendGrid error body
	}{
		{"429.json", 429, rl, throttle, 30 * time.Second, "too many requests", false},
		{"429-docs.txt", 429, rl, throttle, 30 * time.Second, "", true},
		{"500.json", 500, nil, transient, 0, "Internal server error", false},
		{"502.html", 502, nil, transient, 0, "", true},
		{"503.html", 503, []string{"Retry-After", "7"}, transient, 7 * time.Second, "", true},
		{"504.html", 504, nil, transient, 0, "", true},
		{"400.json", 400, nil, permanent, 0, "from.email: The from object must be provided for every email send.", false},
		{"400-duplicate.json", 400, nil, permanent, 0,
			"personalizations.0: Each email address in the personalization block should be unique between to, cc, and bcc. " +
				"We found the first duplicate instance of [[recipient]] in the personalizations.0.cc field.", false},
		{"400-template.json", 400, nil, permanent, 0, "template_id: The template_id must be a valid GUID", false},
		{"401.json", 401, nil, halt, 0, "The provided authorization grant is invalid, expired, or revoked", false},
		{"401-missing.json", 401, nil, halt, 0, "authorization required", false},
		{"401-credits.json", 401, nil, halt, 0, "Maximum credits exceeded", false},
		{"403-identity.json", 403, nil, permanent, 0, "from: The from address does not match a verified Sender Identity.", false},
		{"403-scope.json", 403, nil, halt, 0, "access forbidden", false},
		{"403-blocked.json", 403, nil, throttle, sendgrid.BlockCooldown,
			"You are temporarily blocked from sending emails due to repeated bad requests.", false},
		{"403-blocked-old.json", 403, nil, throttle, sendgrid.BlockCooldown, "Too many bad requests. Temporary block", false},
		{"406.json", 406, nil, permanent, 0, "Missing the Accept header.", false},
		{"413.json", 413, nil, permanent, 0, "The JSON payload you have included in your request is too large.", false},
	} {
		t.Run(c.file, func(t *testing.T) {
			body := channeltest.ReadTestdata(t, c.file)
			e := sendErr(t, channeltest.Respond(t, c.status, body, c.header...))
			// The sender-identity 403 is about one mail's from address: it
			// has a code of its own, so it is dead-lettered, not a halt.
			code := ""
			if c.file == "403-identity.json" {
				code = sendgrid.CodeSenderIdentity
			}
			if e.Status != c.status || e.Class != c.class || e.Scope != channels.ScopeKey || e.Code != code {
				t.Errorf("got status=%d class=%v scope=%v code=%q; want %d %v key, code %q",
					e.Status, e.Class, e.Scope, e.Code, c.status, c.class, code)
			}
			if e.RetryAfter != c.retry {
				t.Errorf("RetryAfter = %v, want %v", e.RetryAfter, c.retry)
			}
			if !strings.HasPrefix(e.Detail, c.detail) || (c.detail == "" && e.Detail != "") {
				t.Errorf("Detail = %q, want it to start with %q", e.Detail, c.detail)
			}
			if len(e.Detail) > 200 || strings.Contains(e.Detail, "@") {
				t.Errorf("Detail = %q: over 200 bytes or holds an address", e.Detail)
			}
			if (e.Err != nil) != c.hasErr {
				t.Errorf("Err = %v, want an Err: %v", e.Err, c.hasErr)
			}
			if got := channels.ClassOf(error(e)); got != c.class {
				t.Errorf("channels.ClassOf = %v", got)
			}
		})
	}
}

// TestSendDetailJoinsErrors: every entry of errors[] is in Detail, "field:
// message" joined by "; ", and a null field leaves the message alone.
func TestSendDetailJoinsErrors(t *testing.T) {
	body := `{"errors":[{"field":"subject","message":"The subject is required."},{"field":null,"message":"second"},{"field":"x"}]}`
	e := sendErr(t, channeltest.Respond(t, 400, body))
	if want := "subject: The subject is required.; second; x"; e.Detail != want {
		t.Errorf("Detail = %q, want %q", e.Detail, want)
	}
}

// TestSendUnlistedStatus: a status outside §4.3 is classified by its range.
func TestSendUnlistedStatus(t *testing.T) {
	for _, c := range []struct {
		status int
		class  channels.Class
	}{
		{404, channels.Permanent},
		{405, channels.Permanent},
		{415, channels.Permanent},
		{501, channels.Transient},
		{505, channels.Transient},
		{302, channels.Transient}, // a redirect without Location is returned as is
	} {
		t.Run(strconv.Itoa(c.status), func(t *testing.T) {
			e := sendErr(t, channeltest.Respond(t, c.status, `{"errors":[{"field":null,"message":"nope"}]}`))
			if e.Class != c.class || e.Status != c.status || e.Detail != "nope" {
				t.Errorf("got class=%v status=%d detail=%q; want %v", e.Class, e.Status, e.Detail, c.class)
			}
		})
	}
	t.Run("403 without a body", func(t *testing.T) {
		e := sendErr(t, channeltest.Respond(t, 403, ""))
		if e.Class != channels.Halt || e.Err == nil {
			t.Errorf("got class=%v err=%v; want halt with Err", e.Class, e.Err)
		}
	})
	t.Run("json without errors", func(t *testing.T) {
		e := sendErr(t, channeltest.Respond(t, 400, `{"message":"x"}`))
		if e.Class != channels.Permanent || e.Err == nil || e.Detail != "" {
			t.Errorf("got class=%v err=%v detail=%q", e.Class, e.Err, e.Detail)
		}
	})
}

func TestSendSuccess(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		header []string
		body   string
		id     string
	}{
		{"202", 202, []string{"X-Message-Id", "W_9qHD2LQKSR6ucD1A2R_w"}, "", "W_9qHD2LQKSR6ucD1A2R_w"},
		{"202 with a body", 202, []string{"X-Message-Id", "abc"}, "not json", "abc"},
		{"202 without an id", 202, nil, "", ""},
		{"200 sandbox mode", 200, nil, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := newClient(t, channeltest.Respond(t, c.status, c.body, c.header...).URL).Send(t.Context(), message())
			if err != nil || res.ProviderID != c.id {
				t.Fatalf("Send = %+v, %v; want ProviderID %q", res, err, c.id)
			}
		})
	}
}

// TestSendRequestShape checks method, path, headers and the built body.
func TestSendRequestShape(t *testing.T) {
	ts, got := channeltest.Capture(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Message-Id", "m1")
		w.WriteHeader(202)
	})

	for _, c := range []struct {
		name    string
		base    string
		key     string
		id      string
		camp    string
		payload string
		want    map[string]string // JSON text of each top-level field
		p0      map[string]string // JSON text of each field of personalizations[0]
		auth    string
		obo     string
		path    string
	}{
		{
			name: "payload kept, personalization merged, ours win",
			key:  keyName, id: "env-1",
			payload: `{"from":{"email":"news@example.org","name":"News"},"subject":"Hi \u00e9",
				"content":[{"type":"text/html","value":"<p>a & b</p>"}],"categories":["c1"],"x":[1,2.50],
				"personalization":{"dynamic_template_data":{"name":"Ada"},"cc":[{"email":"cc@example.org"}],
				"to":[{"email":"other@example.org"}],"custom_args":{"campaign":"c9","pacer_id":"theirs"}}}`,
			want: map[string]string{
				"from":       `{"email":"news@example.org","name":"News"}`,
				"subject":    `"Hi \u00e9"`,
				"content":    `[{"type":"text/html","value":"<p>a & b</p>"}]`,
				"categories": `["c1"]`,
				"x":          `[1,2.50]`,
			},
			p0: map[string]string{
				"to":                    `[{"email":"ada.lovelace@example.com"}]`,
				"dynamic_template_data": `{"name":"Ada"}`,
				"cc":                    `[{"email":"cc@example.org"}]`,
				"custom_args":           `{"campaign":"c9","pacer_id":"env-1"}`,
			},
			auth: "Bearer " + secret, path: "/v3/mail/send",
		},
		{
			name: "nil payload, other key, On-Behalf-Of, base path, campaign",
			base: "/proxy/", key: "transactional", id: "env-2", camp: "spring:26",
			want: map[string]string{},
			p0: map[string]string{
				"to":          `[{"email":"ada.lovelace@example.com"}]`,
				"custom_args": `{"pacer_campaign":"spring:26","pacer_id":"env-2"}`,
			},
			auth: "Bearer " + secret2, obo: "sub-eu", path: "/proxy/v3/mail/send",
		},
		{
			name: "null payload and personalization, no id: no custom_args",
			key:  keyName, payload: ` {"template_id":"d-1","personalization":null} `,
			want: map[string]string{"template_id": `"d-1"`},
			p0:   map[string]string{"to": `[{"email":"ada.lovelace@example.com"}]`},
			auth: "Bearer " + secret, path: "/v3/mail/send",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl, err := sendgrid.New(sendgrid.Config{BaseURL: ts.URL + c.base, APIKeys: keys(),
				OnBehalfOf: map[string]string{"transactional": "sub-eu"}})
			if err != nil {
				t.Fatal(err)
			}
			m := channels.Message{ID: c.id, Key: c.key, To: recipient, Payload: json.RawMessage(c.payload), Campaign: c.camp}
			res, err := cl.Send(t.Context(), m)
			if err != nil || res.ProviderID != "m1" {
				t.Fatalf("Send = %+v, %v", res, err)
			}
			rq := <-got
			h := rq.Header
			_, hasOBO := h["On-Behalf-Of"]
			if rq.Method != "POST" || rq.Path != c.path || h.Get("Authorization") != c.auth || h.Get("Content-Type") != "application/json" ||
				h.Get("Accept") != "application/json" || h.Get("On-Behalf-Of") != c.obo || hasOBO != (c.obo != "") {
				t.Errorf("got %s %s auth=%q type=%q accept=%q obo=%q; want POST %s %q application/json twice, obo %q",
					rq.Method, rq.Path, h.Get("Authorization"), h.Get("Content-Type"), h.Get("Accept"), h.Get("On-Behalf-Of"), c.path, c.auth, c.obo)
			}
			if strings.Contains(c.payload, "<p>") && !strings.Contains(string(rq.Body), `"<p>a & b</p>"`) {
				t.Errorf("HTML was escaped: %s", rq.Body)
			}
			var body map[string]json.RawMessage
			if err := json.Unmarshal(rq.Body, &body); err != nil {
				t.Fatal(err)
			}
			var ps []map[string]json.RawMessage
			if err := json.Unmarshal(body["personalizations"], &ps); err != nil || len(ps) != 1 {
				t.Fatalf("personalizations = %s, %v; want one", body["personalizations"], err)
			}
			delete(body, "personalizations")
			channeltest.CheckFields(t, "body", body, c.want)
			channeltest.CheckFields(t, "personalizations[0]", ps[0], c.p0)
		})
	}
}

// TestSendInvalidRequest: unknown keys, empty recipients, bad and oversized
// payloads fail without a request.
func TestSendInvalidRequest(t *testing.T) {
	var hits channeltest.Counter
	ts := httptest.NewServer(&hits)
	defer ts.Close()
	c := newClient(t, ts.URL)

	big := `{"content":[{"type":"text/plain","value":"` + strings.Repeat("a", sendgrid.MaxBodyBytes-60) + `"}]}`
	for _, tc := range []struct {
		name  string
		edit  func(*channels.Message)
		class channels.Class
		code  string
	}{
		{"unknown key", func(m *channels.Message) { m.Key = "nobody" }, channels.Halt, "unknown-api-key"},
		{"secret as key", func(m *channels.Message) { m.Key = secret }, channels.Halt, "unknown-api-key"},
		{"empty key", func(m *channels.Message) { m.Key = "" }, channels.Halt, "unknown-api-key"},
		{"empty recipient", func(m *channels.Message) { m.To = "" }, channels.Permanent, "invalid-recipient"},
		{"array", func(m *channels.Message) { m.Payload = json.RawMessage(`[1,2]`) }, channels.Permanent, "invalid-payload"},
		{"string", func(m *channels.Message) { m.Payload = json.RawMessage(`"text"`) }, channels.Permanent, "invalid-payload"},
		{"number", func(m *channels.Message) { m.Payload = json.RawMessage(`42`) }, channels.Permanent, "invalid-payload"},
		{"truncated", func(m *channels.Message) { m.Payload = json.RawMessage(`{"a":`) }, channels.Permanent, "invalid-payload"},
		{"trailing", func(m *channels.Message) { m.Payload = json.RawMessage(`{"a":1}x`) }, channels.Permanent, "invalid-payload"},
		{"personalizations", func(m *channels.Message) {
			m.Payload = json.RawMessage(`{"personalizations":[{"to":[{"email":"x@example.org"}]}]}`)
		}, channels.Permanent, "invalid-payload"},
		{"personalization not an object", func(m *channels.Message) { m.Payload = json.RawMessage(`{"personalization":[1]}`) },
			channels.Permanent, "invalid-payload"},
		{"custom_args not an object", func(m *channels.Message) {
			m.Payload = json.RawMessage(`{"personalization":{"custom_args":"x"}}`)
		}, channels.Permanent, "invalid-payload"},
		{"payload over 30 MB", func(m *channels.Message) {
			m.Payload = json.RawMessage(`{"x":"` + strings.Repeat("a", sendgrid.MaxBodyBytes) + `"}`)
		}, channels.Permanent, "payload-too-large"},
		{"body over 30 MB", func(m *channels.Message) { m.Payload = json.RawMessage(big) }, channels.Permanent, "payload-too-large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && strings.Contains(tc.name, "30 MB") {
				t.Skip("decodes 30 MB")
			}
			m := message()
			tc.edit(&m)
			e := sendErrWith(t, c, m)
			if e.Class != tc.class || e.Code != tc.code || e.Status != 0 || e.Detail == "" {
				t.Errorf("got class=%v code=%q status=%d detail=%q; want %v %q", e.Class, e.Code, e.Status, e.Detail, tc.class, tc.code)
			}
		})
	}
	if len(big) > sendgrid.MaxBodyBytes {
		t.Fatalf("the body-over case has a payload over the limit already")
	}
	hits.CheckNone(t)
}

// TestSendResetEpoch: X-RateLimit-Reset is Unix epoch seconds, found under
// any spelling of the header, and Retry-After is the fallback.
func TestSendResetEpoch(t *testing.T) {
	now := time.Unix(2_000_000_000, 0)
	epoch := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).Unix(), 10) }
	for _, c := range []struct {
		name   string
		header map[string]string // written with these exact spellings
		want   time.Duration
	}{
		{"documented spelling", map[string]string{"X-RateLimit-Reset": epoch(42 * time.Second)}, 42 * time.Second},
		{"lower case", map[string]string{"x-ratelimit-reset": epoch(42 * time.Second)}, 42 * time.Second},
		{"Go canonical", map[string]string{"X-Ratelimit-Reset": epoch(time.Hour)}, time.Hour},
		{"reset wins over Retry-After", map[string]string{"X-RateLimit-Reset": epoch(9 * time.Second), "Retry-After": "120"}, 9 * time.Second},
		{"past reset, Retry-After seconds", map[string]string{"X-RateLimit-Reset": epoch(-time.Minute), "Retry-After": "5"}, 5 * time.Second},
		{"reset now, Retry-After", map[string]string{"X-RateLimit-Reset": epoch(0), "Retry-After": "5"}, 5 * time.Second},
		{"garbage reset, Retry-After date", map[string]string{"X-RateLimit-Reset": "soon",
			"Retry-After": now.Add(90 * time.Second).UTC().Format(http.TimeFormat)}, 90 * time.Second},
		{"a delta is not an epoch", map[string]string{"X-RateLimit-Reset": "60"}, 0},
		{"neither", nil, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range c.header {
					w.Header()[k] = []string{v} // bypasses canonicalisation: sent as spelled
				}
				w.WriteHeader(429)
				io.WriteString(w, `{"errors":[{"field":null,"message":"too many requests"}]}`)
			}))
			defer ts.Close()
			if _, ok := c.header["X-RateLimit-Reset"]; ok { // the sendgrid-go bug, providers.md §4.4
				resp, err := http.Get(ts.URL)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if _, found := resp.Header["X-RateLimit-Reset"]; found || resp.Header.Get("X-RateLimit-Reset") == "" {
					t.Fatalf("header map = %v; want the value under X-Ratelimit-Reset only", resp.Header)
				}
			}
			cl, err := sendgrid.New(sendgrid.Config{BaseURL: ts.URL, APIKeys: keys(), Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			e := sendErrWith(t, cl, message())
			if e.Class != channels.Throttle || e.RetryAfter != c.want {
				t.Errorf("class=%v RetryAfter=%v; want throttle %v", e.Class, e.RetryAfter, c.want)
			}
		})
	}
	t.Run("the 403 block takes a later reset", func(t *testing.T) {
		ts := channeltest.Respond(t, 403, channeltest.ReadTestdata(t, "403-blocked.json"), "X-RateLimit-Reset", epoch(time.Hour))
		cl, _ := sendgrid.New(sendgrid.Config{BaseURL: ts.URL, APIKeys: keys(), Now: func() time.Time { return now }})
		if e := sendErrWith(t, cl, message()); e.RetryAfter != time.Hour || e.Class != channels.Throttle {
			t.Errorf("RetryAfter = %v, class %v; want 1h throttle", e.RetryAfter, e.Class)
		}
	})
	t.Run("default clock", func(t *testing.T) {
		ts := channeltest.Respond(t, 429, "", "X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10))
		cl, _ := sendgrid.New(sendgrid.Config{BaseURL: ts.URL, APIKeys: keys()})
		if e := sendErrWith(t, cl, message()); e.RetryAfter < 58*time.Minute || e.RetryAfter > time.Hour {
			t.Errorf("RetryAfter = %v, want about 1h", e.RetryAfter)
		}
	})
}

func TestNew(t *testing.T) {
	for _, c := range []struct {
		name  string
		cfg   sendgrid.Config
		field string // "" means no error
	}{
		{"defaults", sendgrid.Config{APIKeys: keys()}, ""},
		{"EU", sendgrid.Config{APIKeys: keys(), BaseURL: sendgrid.EUBaseURL}, ""},
		{"subuser by account id", sendgrid.Config{APIKeys: keys(), OnBehalfOf: map[string]string{keyName: "account-id 123"}}, ""},
		{"no keys", sendgrid.Config{}, "Config.APIKeys"},
		{"empty name", sendgrid.Config{APIKeys: map[string]string{"": secret}}, "Config.APIKeys"},
		{"empty secret", sendgrid.Config{APIKeys: map[string]string{keyName: ""}}, `Config.APIKeys["marketing"]`},
		{"secret with a newline", sendgrid.Config{APIKeys: map[string]string{keyName: secret + "\n"}}, `Config.APIKeys["marketing"]`},
		{"secret with a space", sendgrid.Config{APIKeys: map[string]string{keyName: "SG.a b"}}, `Config.APIKeys["marketing"]`},
		{"subuser of no key", sendgrid.Config{APIKeys: keys(), OnBehalfOf: map[string]string{"other": "sub"}}, `Config.OnBehalfOf["other"]`},
		{"empty subuser", sendgrid.Config{APIKeys: keys(), OnBehalfOf: map[string]string{keyName: ""}}, `Config.OnBehalfOf["marketing"]`},
		{"subuser with CR", sendgrid.Config{APIKeys: keys(), OnBehalfOf: map[string]string{keyName: "a\rb"}}, `Config.OnBehalfOf["marketing"]`},
		{"relative base", sendgrid.Config{APIKeys: keys(), BaseURL: "api.sendgrid.com"}, "Config.BaseURL"},
		{"bad scheme", sendgrid.Config{APIKeys: keys(), BaseURL: "ftp://api.sendgrid.com"}, "Config.BaseURL"},
		{"unparseable base with a secret", sendgrid.Config{APIKeys: keys(), BaseURL: "http://%zz/" + secret}, "Config.BaseURL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := sendgrid.New(c.cfg)
			channeltest.CheckNewErr(t, err, c.field)
			switch {
			case err != nil:
				channeltest.NoSecrets(t, err, secrets...)
			}
		})
	}
}

// TestNewCopiesMaps: changing the config maps after New changes nothing.
func TestNewCopiesMaps(t *testing.T) {
	got := make(chan string, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization") + "|" + r.Header.Get("On-Behalf-Of")
		w.WriteHeader(202)
	}))
	defer ts.Close()
	k, obo := keys(), map[string]string{keyName: "sub"}
	c, err := sendgrid.New(sendgrid.Config{BaseURL: ts.URL, APIKeys: k, OnBehalfOf: obo})
	if err != nil {
		t.Fatal(err)
	}
	k[keyName], obo[keyName] = "changed", "changed"
	if _, err := c.Send(t.Context(), message()); err != nil {
		t.Fatal(err)
	}
	if h := <-got; h != "Bearer "+secret+"|sub" {
		t.Errorf("headers = %q", h)
	}
}

// TestNoSecretsInErrors: API keys and addresses stay out of error text even
// when the provider echoes them.
func TestNoSecretsInErrors(t *testing.T) {
	upper := strings.ToUpper(recipient)
	for _, c := range []struct {
		name string
		ts   *httptest.Server
	}{
		{"errors echoing all", channeltest.Respond(t, 400, `{"errors":[{"field":"personalizations.0.to.0.email","message":"bad `+
			recipient+` `+upper+` key `+secret+` and `+secret2+` <bcc@example.net>"}]}`)},
		{"field echoing the recipient", channeltest.Respond(t, 400, `{"errors":[{"field":"`+recipient+`","message":"x"}]}`)},
		{"html echoing all", channeltest.Respond(t, 502, "<p>"+secret+" "+recipient+"</p>")},
		{"401 echoing the key", channeltest.Respond(t, 401, `{"errors":[{"field":null,"message":"bad key `+secret+`"}]}`)},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := sendErr(t, c.ts) // checks the error text
			if strings.Contains(e.Detail, "@") {
				t.Errorf("Detail %q holds an address", e.Detail)
			}
		})
	}
	t.Run("transport", func(t *testing.T) {
		sendErr(t, channeltest.Closed()) // checks the error text
	})
}

func TestDetailTruncated(t *testing.T) {
	e := sendErr(t, channeltest.Respond(t, 400, `{"errors":[{"field":null,"message":"`+channeltest.LongMessage+`"}]}`))
	channeltest.CheckTruncated(t, e.Detail)
}

func TestSendTransportError(t *testing.T) {
	channeltest.CheckTransportError(t, func(ts *httptest.Server) error { return sendErr(t, ts) })
}

func TestSendContext(t *testing.T) {
	channeltest.CheckContext(t, channeltest.SendOf(newClient(t, channeltest.Hanging(t).URL).Send, message()))
}

func TestDefaultLimit(t *testing.T) {
	l := sendgrid.DefaultLimit
	if l.PerSecond <= 0 || l.Burst < 1 || float64(l.Burst) < l.PerSecond/10 ||
		!strings.Contains(l.Source, "providers.md") || !strings.Contains(l.Source, "https://") {
		t.Errorf("DefaultLimit = %+v", l)
	}
}

// TestSendAgainstFake runs the adapter against sendgridtest: the fake's
// answers classify as documented and it sees the keys, subusers and ids.
func TestSendAgainstFake(t *testing.T) {
	fake := sendgridtest.NewServer(sendgridtest.Config{Rate: 0.001, Burst: 3, APIKeys: keys()})
	defer fake.Close()
	c, err := sendgrid.New(sendgrid.Config{BaseURL: fake.URL(), APIKeys: keys(),
		OnBehalfOf: map[string]string{keyName: "sub1"}})
	if err != nil {
		t.Fatal(err)
	}
	ok, throttled := channeltest.CountAnswers(t, 5, channeltest.Numbered(message()), channeltest.Bound(t.Context(), c.Send),
		func(res channels.Result) bool { return len(res.ProviderID) == 22 },
		// Rate 0.001/s: the next token is 1000 s away, and the epoch rounds up;
		// the wait is measured on the client's clock, later on a loaded machine.
		func(e *channels.Error) bool {
			return e.Status == 429 && e.Scope == channels.ScopeKey && e.Detail == "too many requests" &&
				e.RetryAfter >= 970*time.Second && e.RetryAfter <= 1001*time.Second
		})
	if ok != 3 || throttled != 2 {
		t.Errorf("accepted %d, throttled %d; want 3, 2", ok, throttled)
	}
	arr := fake.Arrivals()
	if len(arr) != 5 || arr[0].ID != "env-0" || arr[4].ID != "env-4" || arr[0].Key != keyName ||
		arr[0].To != recipient || arr[0].OnBehalfOf != "sub1" || arr[0].MessageID == "" || !arr[4].Throttled {
		t.Errorf("arrivals = %+v", arr)
	}
	if st := fake.Stats()[keyName]; st.Delivered != 3 || st.Throttled != 2 || st.Duplicates != 0 {
		t.Errorf("stats = %+v", st)
	}

	// The other key has its own bucket.
	m := message()
	m.Key = "transactional"
	if _, err := c.Send(t.Context(), m); err != nil {
		t.Errorf("other key: %v", err)
	}

	// A body the fake refuses: 400 with the field named.
	m = message()
	m.Key = "transactional"
	m.Payload = json.RawMessage(`{"subject":"x","content":[{"type":"text/plain","value":"y"}]}`)
	e := sendErrWith(t, c, m)
	if e.Class != channels.Permanent || e.Status != 400 || !strings.HasPrefix(e.Detail, "from.email: The from object") {
		t.Errorf("no from: %+v", e)
	}

	// A key the fake does not know: 401, halt.
	bad, err := sendgrid.New(sendgrid.Config{BaseURL: fake.URL(), APIKeys: map[string]string{keyName: "SG.revoked"}})
	if err != nil {
		t.Fatal(err)
	}
	e = sendErrWith(t, bad, message())
	if e.Class != channels.Halt || e.Status != 401 || e.Detail != sendgridtest.MsgAuthInvalid {
		t.Errorf("wrong key: %+v; want halt 401", e)
	}
}

// TestConnectionReuse: the adapter's own client (its pool bounded to
// channeltest.ReusePool connections) reuses its connections, at most 1 new
// one per 1,000 messages after warm-up.
func TestConnectionReuse(t *testing.T) {
	h := channeltest.Responder(202, "", "X-Message-Id", "W_9qHD2LQKSR6ucD1A2R_w")
	channeltest.CheckReuse(t, h, func(baseURL string, pool int) func(context.Context) error {
		c, err := sendgrid.New(sendgrid.Config{BaseURL: baseURL, APIKeys: keys(), Now: func() time.Time { return t0 }, MaxIdleConnsPerHost: pool})
		return channeltest.SendOf(channeltest.Must(t, c, err).Send, message())
	})
}

// TestSenderIdentityHaltsOnlyARun: a mail whose from address is not a
// verified Sender Identity is dead-lettered (Permanent) alone; only
// SenderIdentityHalt of them in a row for one API key, with no other
// answer between, halt the key (most of its mail is misconfigured), and
// an accepted mail starts the count again.
func TestSenderIdentityHaltsOnlyARun(t *testing.T) {
	identity := channeltest.ReadTestdata(t, "403-identity.json")
	var fail atomic.Bool
	fail.Store(true)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(403)
			io.WriteString(w, identity)
			return
		}
		w.WriteHeader(202)
	}))
	defer ts.Close()
	c := newClient(t, ts.URL)
	send := func() channels.Class {
		_, err := c.Send(t.Context(), message())
		return channels.ClassOf(err)
	}
	for i := 1; i < sendgrid.SenderIdentityHalt; i++ {
		if got := send(); got != channels.Permanent {
			t.Fatalf("sender-identity 403 number %d in a row: %v, want permanent", i, got)
		}
	}
	fail.Store(false)
	if got := send(); got != channels.Success {
		t.Fatalf("accepted mail: %v", got)
	}
	fail.Store(true)
	for i := 1; i < sendgrid.SenderIdentityHalt; i++ {
		if got := send(); got != channels.Permanent {
			t.Fatalf("after an accepted mail, sender-identity 403 number %d: %v, want permanent (the run starts again)", i, got)
		}
	}
	if got := send(); got != channels.Halt {
		t.Errorf("sender-identity 403 number %d in a row: %v, want halt", sendgrid.SenderIdentityHalt, got)
	}
}
