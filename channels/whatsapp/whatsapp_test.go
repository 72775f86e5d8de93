package whatsapp_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/internal/channeltest"
	"github.com/pacerhq/pacer/channels/whatsapp"
	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
)

const (
	token     = "EAAG-secret-token-0123456789"
	recipient = "+16505551234"
	phoneID   = "106540352242922"
)

func newClient(t *testing.T, baseURL string) *whatsapp.Client {
	t.Helper()
	c, err := whatsapp.New(whatsapp.Config{BaseURL: baseURL, Token: token})
	return channeltest.Must(t, c, err)
}

func message() channels.Message {
	return channeltest.Message("env-1", phoneID, recipient, `{"type":"text","text":{"preview_url":false,"body":"hi"}}`)
}

// sendErr sends message() through a client of ts and returns the *channels.Error.
func sendErr(t *testing.T, ts *httptest.Server) *channels.Error {
	t.Helper()
	return channeltest.SendError(t, "whatsapp", newClient(t, ts.URL).Send, message(), token, strings.TrimPrefix(recipient, "+"))
}

// sendAnswer is sendErr to a server that answers status and body.
func sendAnswer(t *testing.T, status int, body string) *channels.Error {
	return sendErr(t, channeltest.Respond(t, status, body))
}

// TestSendClassification runs every code of providers.md §1.4 through the
// adapter. Statuses are those of Meta's older table ([W-EC-HTTP]); throttle
// codes that third parties saw with 429 run with both, to show the class
// comes from error.code alone.
func TestSendClassification(t *testing.T) {
	scope := map[string]channels.Scope{"131056": channels.ScopePair, "80007": channels.ScopeAccount, "4": channels.ScopeAccount}
	channeltest.CheckDocumented(t, channeltest.Documented{
		channels.Throttle:  {"130429 400", "130429 429", "131056 400", "131056 429", "80007 400", "4 400", "4 429", "131048 400", "613 400"},
		channels.Transient: {"131057 500", "2 503", "131000 500", "131016 500", "1 400"},
		channels.Permanent: {"131049 400", "131026 400", "131047 400", "131021 400", "131051 400", "131053 400", "100 400",
			"131008 400", "131009 400", "33 400", "130472 400", "132000 400", "132001 404", "132005 400", "132007 400",
			"132012 400", "132015 400"},
		channels.Halt: {"0 401", "190 401", "3 500", "10 403", "200 403", "250 403", "299 403", "131005 403", "368 403",
			"131031 403", "131042 400", "131045 500", "133010 400"},
	}, func(t *testing.T, d channeltest.DocumentedError) *channels.Error {
		e := sendErr(t, channeltest.Respond(t, d.Status, d.Body, "Content-Type", "application/json"))
		if e.Scope != scope[d.Code] {
			t.Errorf("Scope = %v, want %v", e.Scope, scope[d.Code])
		}
		var g struct {
			Error struct {
				Message   string
				FBTraceID string `json:"fbtrace_id"`
			}
		}
		if err := json.Unmarshal([]byte(d.Body), &g); err != nil {
			t.Fatal(err)
		}
		if e.Detail != g.Error.Message {
			t.Errorf("Detail = %q, want error.message %q", e.Detail, g.Error.Message)
		}
		// The fbtrace_id is what Meta's support asks for: kept in the logs
		// and the DLQ record (both carry Error()).
		if tr := g.Error.FBTraceID; tr == "" || e.Trace != tr || !strings.Contains(e.Error(), "trace="+tr) {
			t.Errorf("Trace = %q, Error() = %q; want the body's fbtrace_id %q in both", e.Trace, e.Error(), tr)
		}
		// An account budget is a rolling hour (providers.md §1.4): its
		// throttles ask for a minute, not the key's 1 s; a spam rate
		// limit (131048) an hour.
		wantRetry := time.Duration(0)
		switch {
		case scope[d.Code] == channels.ScopeAccount:
			wantRetry = whatsapp.AccountCooldown
		case d.Code == "131048":
			wantRetry = whatsapp.SpamCooldown
		}
		if e.RetryAfter != wantRetry || e.Err != nil {
			t.Errorf("RetryAfter = %v, Err = %v; want %v, nil", e.RetryAfter, e.Err, wantRetry)
		}
		return e
	})
}

// TestSendUnknownCode: a code in no table is classified by HTTP status.
func TestSendUnknownCode(t *testing.T) {
	channeltest.CheckUnknownCode(t, channeltest.ReadTestdata(t, "unknown.json"), "9999999", channeltest.Statuses{
		channels.Permanent: {400, 401, 404}, channels.Transient: {500, 503}, channels.Throttle: {429},
	}, sendAnswer, func(t *testing.T, _ int, e *channels.Error) {
		if e.Scope != channels.ScopeKey {
			t.Errorf("Scope = %v, want key", e.Scope)
		}
	})
}

// TestSendNonGraphBody: a body without a Graph error is classified by status.
func TestSendNonGraphBody(t *testing.T) {
	channeltest.CheckNonProviderBody(t, channeltest.Answers{
		channels.Transient: {"502 <html><body>Bad Gateway</body></html>", "503"},
		channels.Throttle:  {"429 Too Many Requests"},
		channels.Permanent: {"400 bad request", `400 {"ok":false}`, `400 {"error":{"message":"x"}}`, "404 not found"},
		channels.Halt:      {"401 Unauthorized", "403 Forbidden"},
	}, sendAnswer, nil)
}

func TestSendSuccess(t *testing.T) {
	res, err := newClient(t, channeltest.Respond(t, 200, channeltest.ReadTestdata(t, "success.json")).URL).Send(t.Context(), message())
	if err != nil || res.ProviderID != "wamid.HBgLMTY1MDUwNzY1MjAVAgARGBI5QTNDQTVCM0Q0Q0Q2RTY3RTcA" {
		t.Fatalf("Send = %+v, %v", res, err)
	}
}

// TestSendSuccessWithoutID: a 2xx the adapter cannot read is Transient.
func TestSendSuccessWithoutID(t *testing.T) {
	for _, body := range []string{`{"messages":[]}`, `{}`, `not json`, ``} {
		e := sendErr(t, channeltest.Respond(t, 200, body))
		if e.Class != channels.Transient || e.Err == nil {
			t.Errorf("body %q: class=%v err=%v; want transient with Err", body, e.Class, e.Err)
		}
	}
}

// sent returns the JSON text of the body fields the adapter sets in every
// send, with callback as biz_opaque_callback_data, and of the more fields
// given in name, value pairs.
func sent(callback string, more ...string) map[string]string {
	m := map[string]string{"messaging_product": `"whatsapp"`, "recipient_type": `"individual"`,
		"to": `"+16505551234"`, "biz_opaque_callback_data": callback}
	for i := 0; i+1 < len(more); i += 2 {
		m[more[i]] = more[i+1]
	}
	return m
}

// TestSendRequestShape checks method, path, headers and the merged body.
func TestSendRequestShape(t *testing.T) {
	defaultPath := "/" + whatsapp.DefaultAPIVersion + "/" + phoneID + "/messages"
	ts, got := channeltest.Capture(t, func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"messages":[{"id":"wamid.1"}]}`)
	})

	for _, c := range []struct {
		name    string
		base    string
		version string
		key     string
		payload string
		want    map[string]string // JSON text of each body field
		path    string
		camp    string // the message's campaign
	}{
		{
			name:    "payload fields kept, ours win",
			payload: `{"type":"text","text":{"preview_url":false,"body":"hi \u00e9"},"to":"+1999","messaging_product":"sms","recipient_type":"group","x":[1,2.50]}`,
			want:    sent(`"env-1"`, "type", `"text"`, "text", `{"preview_url":false,"body":"hi \u00e9"}`, "x", `[1,2.50]`),
			path:    defaultPath,
		},
		{
			name: "campaign carried beside the id",
			camp: "spring:26",
			want: sent(`"pacer1:9:spring:26:env-1"`),
			path: defaultPath,
		},
		{
			name:    "payload sets biz_opaque_callback_data, campaign not carried",
			camp:    "spring",
			payload: `{"biz_opaque_callback_data":"theirs"}`,
			want:    sent(`"theirs"`),
			path:    defaultPath,
		},
		{
			name:    "nil payload, base path and version",
			base:    "/graph/",
			version: "v23.0",
			key:     "a/b",
			want:    sent(`"env-1"`),
			path:    "/graph/v23.0/a%2Fb/messages",
		},
		{
			name:    "null payload",
			payload: ` null `,
			want:    sent(`"env-1"`),
			path:    defaultPath,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl, err := whatsapp.New(whatsapp.Config{BaseURL: ts.URL + c.base, APIVersion: c.version, Token: token})
			if err != nil {
				t.Fatal(err)
			}
			send := channeltest.Bound(t.Context(), cl.Send)
			m := message()
			m.Campaign = c.camp
			rq := channeltest.SendCaptured(t, got, send, m, c.payload, c.key, "wamid.1")
			channeltest.CheckPost(t, rq, c.path, token, true)
			channeltest.CheckFields(t, "body", channeltest.JSONObject(t, rq.Body), c.want)
		})
	}
}

// TestSendInvalidRequest: bad payloads and keys fail without a request.
func TestSendInvalidRequest(t *testing.T) {
	var hits channeltest.Counter
	ts := httptest.NewServer(&hits)
	defer ts.Close()
	c := newClient(t, ts.URL)
	for _, p := range []string{`[1,2]`, `"text"`, `42`, `true`, `{"a":`, `{"a":1}x`, `{`} {
		m := message()
		m.Payload = json.RawMessage(p)
		_, err := c.Send(t.Context(), m)
		var e *channels.Error
		if !errors.As(err, &e) || e.Class != channels.Permanent || e.Code != "invalid-payload" {
			t.Errorf("payload %s: err = %v; want permanent invalid-payload", p, err)
		}
	}
	// "." and ".." would leave the path a phone-number ID makes (a URL's
	// dot segments are resolved): the request would go to another
	// endpoint, with the token.
	for _, key := range []string{"", ".", ".."} {
		m := message()
		m.Key = key
		_, err := c.Send(t.Context(), m)
		var e *channels.Error
		if !errors.As(err, &e) || e.Class != channels.Permanent || e.Code != "invalid-key" {
			t.Errorf("key %q: err = %v; want permanent invalid-key", key, err)
		}
	}
	hits.CheckNone(t)
}

func TestNew(t *testing.T) {
	for _, c := range []struct {
		name  string
		cfg   whatsapp.Config
		field string // "" means no error
	}{
		{"defaults", whatsapp.Config{Token: token}, ""},
		{"no token", whatsapp.Config{BaseURL: "http://x"}, "Config.Token"},
		{"relative base", whatsapp.Config{Token: token, BaseURL: "graph.facebook.com"}, "Config.BaseURL"},
		{"bad scheme", whatsapp.Config{Token: token, BaseURL: "ftp://graph.facebook.com"}, "Config.BaseURL"},
		{"unparseable base", whatsapp.Config{Token: token, BaseURL: "http://%zz/" + token}, "Config.BaseURL"},
		{"bad version", whatsapp.Config{Token: token, APIVersion: "v1/x"}, "Config.APIVersion"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := whatsapp.New(c.cfg)
			channeltest.CheckNewErr(t, err, c.field)
			switch {
			case err != nil && strings.Contains(err.Error(), token):
				t.Fatalf("New error %q contains the token", err)
			}
		})
	}
}

// TestNoSecretsInErrors: the token and the recipient stay out of error text
// even when the provider echoes them.
func TestNoSecretsInErrors(t *testing.T) {
	echo := `{"error":{"message":"(#131026) token ` + token + ` to ` + recipient + ` and 16505551234","code":131026}}`
	for _, c := range []struct {
		name string
		ts   *httptest.Server
	}{
		{"graph error echoing both", channeltest.Respond(t, 400, echo)},
		{"details echoing both", channeltest.Respond(t, 400, `{"error":{"code":100,"error_data":{"details":"`+token+` `+recipient+`"}}}`)},
		{"html echoing both", channeltest.Respond(t, 502, "<p>"+token+" "+recipient+"</p>")},
		{"bad success", channeltest.Respond(t, 200, token+recipient)},
	} {
		t.Run(c.name, func(t *testing.T) {
			sendErr(t, c.ts) // checks the error text
		})
	}
	t.Run("transport", func(t *testing.T) {
		sendErr(t, channeltest.Closed()) // checks the error text
	})
}

func TestDetailTruncated(t *testing.T) {
	e := sendErr(t, channeltest.Respond(t, 400, `{"error":{"message":"`+channeltest.LongMessage+`","code":100}}`))
	channeltest.CheckTruncated(t, e.Detail)
}

func TestSendRetryAfter(t *testing.T) {
	throttle := channeltest.ReadTestdata(t, "130429.json")
	for _, c := range []struct {
		name     string
		header   string
		min, max time.Duration
	}{
		{"absent", "", 0, 0},
		{"seconds", "120", 120 * time.Second, 120 * time.Second},
		{"zero", "0", 0, 0},
		{"http date", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat), 58 * time.Minute, time.Hour},
		{"rfc 850 date", time.Now().Add(time.Hour).UTC().Format("Monday, 02-Jan-06 15:04:05 GMT"), 58 * time.Minute, time.Hour},
		{"past date", "Wed, 21 Oct 2015 07:28:00 GMT", 0, 0},
		{"garbage", "soon", 0, 0},
		{"negative", "-5", 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var h []string
			if c.header != "" {
				h = []string{"Retry-After", c.header}
			}
			e := sendErr(t, channeltest.Respond(t, 429, throttle, h...))
			if e.RetryAfter < c.min || e.RetryAfter > c.max || e.Class != channels.Throttle {
				t.Errorf("RetryAfter = %v class=%v; want in [%v, %v], throttle", e.RetryAfter, e.Class, c.min, c.max)
			}
			if got := channels.RetryAfter(error(e)); got != e.RetryAfter {
				t.Errorf("channels.RetryAfter = %v", got)
			}
		})
	}
	t.Run("on a non-graph 503", func(t *testing.T) {
		e := sendErr(t, channeltest.Respond(t, 503, "busy", "Retry-After", "7"))
		if e.RetryAfter != 7*time.Second || e.Class != channels.Transient {
			t.Errorf("got %v %v; want 7s transient", e.RetryAfter, e.Class)
		}
	})
}

func TestSendTransportError(t *testing.T) {
	channeltest.CheckTransportError(t, func(ts *httptest.Server) error { return sendErr(t, ts) })
}

func TestSendContext(t *testing.T) {
	channeltest.CheckContext(t, channeltest.SendOf(newClient(t, channeltest.Hanging(t).URL).Send, message()))
}

// TestSendAgainstFake runs the adapter against whatsapptest: the fake's
// answers classify as documented and it sees the envelope ids.
func TestSendAgainstFake(t *testing.T) {
	fake := whatsapptest.NewServer(whatsapptest.Config{Rate: 0.001, Burst: 3, Token: token})
	defer fake.Close()
	c := newClient(t, fake.URL())
	ok, throttled := channeltest.CountAnswers(t, 5, channeltest.Numbered(message()), channeltest.Bound(t.Context(), c.Send),
		func(res channels.Result) bool { return strings.HasPrefix(res.ProviderID, "wamid.") },
		func(e *channels.Error) bool {
			return e.Code == "130429" && e.Scope == channels.ScopeKey && e.Status == 429
		})
	if ok != 3 || throttled != 2 {
		t.Errorf("accepted %d, throttled %d; want 3, 2", ok, throttled)
	}
	arr := fake.Arrivals()
	if len(arr) != 5 || arr[0].ID != "env-0" || arr[4].ID != "env-4" || arr[0].Key != phoneID || arr[0].To != recipient {
		t.Errorf("arrivals = %+v", arr)
	}

	bad, err := whatsapp.New(whatsapp.Config{BaseURL: fake.URL(), Token: "wrong"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bad.Send(t.Context(), message())
	var e *channels.Error
	if !errors.As(err, &e) || e.Class != channels.Halt || e.Code != "190" || e.Status != 401 {
		t.Errorf("wrong token: %v; want halt code 190 status 401", err)
	}
}

// TestConnectionReuse: the adapter's own client (its pool bounded to
// channeltest.ReusePool connections) reuses its connections, at most 1 new
// one per 1,000 messages after warm-up.
func TestConnectionReuse(t *testing.T) {
	h := channeltest.Responder(200, channeltest.ReadTestdata(t, "success.json"), "Content-Type", "application/json")
	channeltest.CheckReuse(t, h, func(baseURL string, pool int) func(context.Context) error {
		c, err := whatsapp.New(whatsapp.Config{BaseURL: baseURL, Token: token, MaxIdleConnsPerHost: pool})
		return channeltest.SendOf(channeltest.Must(t, c, err).Send, message())
	})
}
