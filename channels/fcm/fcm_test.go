package fcm_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/fcm"
	"github.com/pacerhq/pacer/channels/fcm/fcmtest"
	"github.com/pacerhq/pacer/channels/internal/channeltest"
)

const (
	access    = "ya29.secret-access-token-0123456789"
	recipient = "fGx3Vv2hQkqIj0sP4m1y7N:APA91bHun4MxP5egoKMwt2KZFBaFUH-1RYqx0123456789abcdefghijklmnop"
	project   = "myproject-b5ae1"
)

// newClient returns a Client of baseURL whose access token is always access.
func newClient(t *testing.T, baseURL string) *fcm.Client {
	t.Helper()
	c, err := fcm.New(t.Context(), fcm.Config{BaseURL: baseURL,
		TokenSource: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: access})})
	return channeltest.Must(t, c, err)
}

func message() channels.Message {
	return channeltest.Message("env-1", project, recipient, `{"notification":{"title":"Hi","body":"there"},"data":{"k":"v"}}`)
}

// checkErr returns the *channels.Error in err, and fails the test if there
// is none or if its text holds a secret.
func checkErr(t *testing.T, err error, secrets ...string) *channels.Error {
	t.Helper()
	return channeltest.ErrorOf(t, "fcm", err, append(secrets, access, recipient)...)
}

// sendErr sends message() through a client of ts and returns the *channels.Error.
func sendErr(t *testing.T, ts *httptest.Server) *channels.Error {
	t.Helper()
	return channeltest.SendError(t, "fcm", newClient(t, ts.URL).Send, message(), access, recipient)
}

// sendAnswer is sendErr to a server that answers status and body.
func sendAnswer(t *testing.T, status int, body string) *channels.Error {
	return sendErr(t, channeltest.Respond(t, status, body))
}

// TestSendClassification runs every code of providers.md §3.3 through the
// adapter, each with the HTTP status FCM documents for it.
func TestSendClassification(t *testing.T) {
	channeltest.CheckDocumented(t, channeltest.Documented{
		channels.Throttle:  {"QUOTA_EXCEEDED 429", "RESOURCE_EXHAUSTED 429"}, // RESOURCE_EXHAUSTED: #719
		channels.Transient: {"UNAVAILABLE 503", "INTERNAL 500", "UNSPECIFIED_ERROR 500"},
		channels.Permanent: {"UNREGISTERED 404", "SENDER_ID_MISMATCH 403", "INVALID_ARGUMENT 400",
			"INVALID_ARGUMENT_apns 400 INVALID_ARGUMENT", "THIRD_PARTY_AUTH_ERROR 401", "APNS_AUTH_ERROR 401"},
		channels.Halt: {"UNAUTHENTICATED 401", "PERMISSION_DENIED 403"},
	}, func(t *testing.T, d channeltest.DocumentedError) *channels.Error {
		var g struct {
			Error struct {
				Code    int
				Message string
			}
		}
		if err := json.Unmarshal([]byte(d.Body), &g); err != nil || g.Error.Code != d.Status {
			t.Fatalf("testdata error.code = %d, %v; want %d", g.Error.Code, err, d.Status)
		}
		e := sendErr(t, channeltest.Respond(t, d.Status, d.Body, "Content-Type", "application/json; charset=UTF-8"))
		// A project's quota (#719's ErrorInfo) asks for a minute when FCM
		// names no wait; a QUOTA_EXCEEDED, which does not say whether the
		// project or the device is over, throttles the pair alone when its
		// token is the first refused (each send here is a new client's).
		// A 5xx carries no wait of its own: the pacer's retry waits FCM's
		// 10 s (PACER_FCM_SERVER_RETRY).
		scope, retry := channels.ScopeKey, time.Duration(0)
		switch {
		case d.Name == "QUOTA_EXCEEDED":
			scope = channels.ScopePair
		case d.Class == channels.Throttle:
			retry = time.Minute
		}
		if e.Scope != scope {
			t.Errorf("Scope = %v, want %v", e.Scope, scope)
		}
		if want := d.Code == "UNREGISTERED"; e.Gone != want || !e.GoneSince.IsZero() {
			t.Errorf("Gone = %v since %v, want %v since nothing", e.Gone, e.GoneSince, want)
		}
		if e.Detail != g.Error.Message[:min(len(g.Error.Message), 200)] {
			t.Errorf("Detail = %q, want error.message %q", e.Detail, g.Error.Message)
		}
		if e.RetryAfter != retry || e.Err != nil {
			t.Errorf("RetryAfter = %v, Err = %v; want %v, nil", e.RetryAfter, e.Err, retry)
		}
		return e
	})
}

// TestSendCodeBeatsStatus: the code decides, whatever the HTTP status.
func TestSendCodeBeatsStatus(t *testing.T) {
	for _, c := range []struct {
		file   string
		status int
		class  channels.Class
	}{
		{"UNREGISTERED.json", 500, channels.Permanent},
		{"UNAVAILABLE.json", 400, channels.Transient},
		{"QUOTA_EXCEEDED.json", 503, channels.Throttle},
		{"PERMISSION_DENIED.json", 400, channels.Halt},
	} {
		e := sendErr(t, channeltest.Respond(t, c.status, channeltest.ReadTestdata(t, c.file)))
		if e.Class != c.class {
			t.Errorf("%s with HTTP %d: class %v, want %v", c.file, c.status, e.Class, c.class)
		}
	}
}

// TestSendUnknownCode: a code in no table is classified by HTTP status.
func TestSendUnknownCode(t *testing.T) {
	channeltest.CheckUnknownCode(t, channeltest.ReadTestdata(t, "unknown.json"), "FAILED_PRECONDITION", channeltest.Statuses{
		channels.Permanent: {400, 404}, channels.Halt: {401, 403}, channels.Throttle: {429}, channels.Transient: {500, 503},
	}, sendAnswer, func(t *testing.T, status int, e *channels.Error) {
		var retry time.Duration
		if status == 429 {
			retry = time.Minute
		}
		if e.Scope != channels.ScopeKey || e.RetryAfter != retry {
			t.Errorf("got scope=%v retry=%v; want key %v", e.Scope, e.RetryAfter, retry)
		}
	})
}

// TestSendNonGoogleBody: a body without a Google error is classified by status.
func TestSendNonGoogleBody(t *testing.T) {
	channeltest.CheckNonProviderBody(t, channeltest.Answers{
		channels.Throttle:  {"429", "429 Too Many Requests"},
		channels.Transient: {"502 <html><body>Bad Gateway</body></html>", "503"},
		channels.Permanent: {"400 bad request", `400 {"ok":false}`, "404 <html>Not Found</html>"},
		channels.Halt:      {"401 Unauthorized", "403 Forbidden"},
	}, sendAnswer, func(t *testing.T, _ channeltest.Answer, e *channels.Error) {
		if e.Scope != channels.ScopeKey {
			t.Errorf("Scope = %v, want key", e.Scope)
		}
		if e.Class == channels.Throttle && e.RetryAfter != time.Minute {
			t.Errorf("bare 429 RetryAfter = %v, want the 1 min floor", e.RetryAfter)
		}
	})
}

func TestSendSuccess(t *testing.T) {
	res, err := newClient(t, channeltest.Respond(t, 200, channeltest.ReadTestdata(t, "success.json")).URL).Send(t.Context(), message())
	if err != nil || res.ProviderID != "projects/myproject-b5ae1/messages/0:1500415314455276%31bd1c9631bd1c96" {
		t.Fatalf("Send = %+v, %v", res, err)
	}
}

// TestSendSuccessWithoutName: a 2xx the adapter cannot read is Transient.
func TestSendSuccessWithoutName(t *testing.T) {
	for _, body := range []string{`{"name":""}`, `{}`, `not json`, ``} {
		e := sendErr(t, channeltest.Respond(t, 200, body))
		if e.Class != channels.Transient || e.Err == nil || e.Status != 200 {
			t.Errorf("body %q: class=%v err=%v; want transient with Err", body, e.Class, e.Err)
		}
	}
}

// TestSendRequestShape checks method, path, headers and the merged body.
func TestSendRequestShape(t *testing.T) {
	ts, got := channeltest.Capture(t, func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"name":"projects/p/messages/1"}`)
	})

	for _, c := range []struct {
		name    string
		base    string
		dataID  string
		key     string
		payload string
		want    map[string]string // JSON text of each message field
		path    string
	}{
		{
			name:    "payload fields kept, token wins",
			payload: `{"token":"someone-else","notification":{"title":"Hi \u00e9","body":"x"},"android":{"priority":"high","ttl":"3.5s"},"apns":{"headers":{"apns-priority":"10"}},"data":{"a":"1"}}`,
			want: map[string]string{
				"token":        `"` + recipient + `"`,
				"notification": `{"title":"Hi \u00e9","body":"x"}`,
				"android":      `{"priority":"high","ttl":"3.5s"}`,
				"apns":         `{"headers":{"apns-priority":"10"}}`,
				"data":         `{"a":"1"}`,
			},
			path: "/v1/projects/" + project + "/messages:send",
		},
		{
			name:    "nil payload, base path, odd key",
			base:    "/fcm/",
			key:     "a/b c",
			want:    map[string]string{"token": `"` + recipient + `"`},
			path:    "/fcm/v1/projects/a%2Fb%20c/messages:send",
			payload: "",
		},
		{
			name:    "null payload",
			payload: ` null `,
			want:    map[string]string{"token": `"` + recipient + `"`},
			path:    "/v1/projects/" + project + "/messages:send",
		},
		{
			name:    "data id added to data",
			dataID:  "pacer_id",
			payload: `{"data":{"a":"1"}}`,
			want:    map[string]string{"token": `"` + recipient + `"`, "data": `{"a":"1","pacer_id":"env-1"}`},
			path:    "/v1/projects/" + project + "/messages:send",
		},
		{
			name:    "data id creates data",
			dataID:  "pacer_id",
			payload: `{"notification":{"title":"t"},"data":null}`,
			want:    map[string]string{"token": `"` + recipient + `"`, "notification": `{"title":"t"}`, "data": `{"pacer_id":"env-1"}`},
			path:    "/v1/projects/" + project + "/messages:send",
		},
		{
			name:    "data id set by the payload",
			dataID:  "pacer_id",
			payload: `{"data":{"pacer_id":"theirs"}}`,
			want:    map[string]string{"token": `"` + recipient + `"`, "data": `{"pacer_id":"theirs"}`},
			path:    "/v1/projects/" + project + "/messages:send",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl, err := fcm.New(t.Context(), fcm.Config{BaseURL: ts.URL + c.base, DataIDKey: c.dataID,
				TokenSource: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: access})})
			if err != nil {
				t.Fatal(err)
			}
			send := channeltest.Bound(t.Context(), cl.Send)
			rq := channeltest.SendCaptured(t, got, send, message(), c.payload, c.key, "projects/p/messages/1")
			channeltest.CheckPost(t, rq, c.path, access, false)
			top := channeltest.JSONObject(t, rq.Body)
			if len(top) != 1 {
				t.Errorf("body has %d top-level fields, want 1 (message): %s", len(top), rq.Body)
			}
			channeltest.CheckFields(t, "message", channeltest.JSONObject(t, top["message"]), c.want)
		})
	}
}

// TestSendInvalidRequest: bad payloads, keys and recipients fail without a
// request, since FCM counts client errors against the quota.
func TestSendInvalidRequest(t *testing.T) {
	var hits channeltest.Counter
	ts := httptest.NewServer(&hits)
	defer ts.Close()
	c := newClient(t, ts.URL)
	for _, p := range []string{`[1,2]`, `"text"`, `42`, `true`, `{"a":`, `{"a":1}x`, `{`} {
		m := message()
		m.Payload = json.RawMessage(p)
		_, err := c.Send(t.Context(), m)
		if e := checkErr(t, err); e.Class != channels.Permanent || e.Code != "invalid-payload" {
			t.Errorf("payload %s: err = %v; want permanent invalid-payload", p, err)
		}
	}
	for _, key := range []string{"", ".", ".."} {
		m := message()
		m.Key = key
		_, err := c.Send(t.Context(), m)
		if e := checkErr(t, err); e.Class != channels.Permanent || e.Code != "invalid-key" {
			t.Errorf("key %q: err = %v; want permanent invalid-key", key, err)
		}
	}
	m := message()
	m.To = ""
	_, err := c.Send(t.Context(), m)
	if e := checkErr(t, err); e.Class != channels.Permanent || e.Code != "invalid-recipient" {
		t.Errorf("empty recipient: err = %v; want permanent invalid-recipient", err)
	}
	withID, err := fcm.New(t.Context(), fcm.Config{BaseURL: ts.URL, DataIDKey: "pacer_id",
		TokenSource: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: access})})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{`{"data":"x"}`, `{"data":[1]}`, `{"data":{"a":}}`} {
		m := message()
		m.Payload = json.RawMessage(p)
		_, err := withID.Send(t.Context(), m)
		if e := checkErr(t, err); e.Class != channels.Permanent || e.Code != "invalid-payload" {
			t.Errorf("payload %s with DataIDKey: err = %v; want permanent invalid-payload", p, err)
		}
	}
	hits.CheckNone(t)
}

// serviceAccount returns a valid key file (of a fake that is not listening)
// as a map to alter, and its private key.
func serviceAccount(t *testing.T) (map[string]any, string) {
	t.Helper()
	var sa map[string]any
	if err := json.Unmarshal(fcmtest.New(fcmtest.Config{}).ServiceAccountJSONAt("http://127.0.0.1:1"), &sa); err != nil {
		t.Fatal(err)
	}
	return sa, sa["private_key"].(string)
}

func marshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	return channeltest.Must(t, b, err)
}

func TestNew(t *testing.T) {
	sa, key := serviceAccount(t)
	keyLines := strings.Split(strings.TrimSpace(key), "\n")
	with := func(k string, v any) []byte {
		m := map[string]any{}
		for k, v := range sa {
			m[k] = v
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return marshal(t, m)
	}
	ts := oauth2.StaticTokenSource(&oauth2.Token{AccessToken: access})
	for _, c := range []struct {
		name  string
		cfg   fcm.Config
		field string // "" means no error
	}{
		{"key file", fcm.Config{CredentialsJSON: marshal(t, sa)}, ""},
		{"token source", fcm.Config{TokenSource: ts}, ""},
		{"no token_uri: Google's", fcm.Config{CredentialsJSON: with("token_uri", nil)}, ""},
		{"https token_uri", fcm.Config{CredentialsJSON: with("token_uri", "https://oauth2.example.com/token")}, ""},
		{"neither", fcm.Config{}, "Config.CredentialsJSON or Config.TokenSource"},
		{"both", fcm.Config{CredentialsJSON: marshal(t, sa), TokenSource: ts}, "Config.CredentialsJSON and Config.TokenSource"},
		{"not json", fcm.Config{CredentialsJSON: []byte(key)}, "Config.CredentialsJSON"},
		{"json array", fcm.Config{CredentialsJSON: []byte(`["` + keyLines[1] + `"]`)}, "Config.CredentialsJSON"},
		{"user credentials", fcm.Config{CredentialsJSON: with("type", "authorized_user")}, `"authorized_user"`},
		{"odd type", fcm.Config{CredentialsJSON: with("type", keyLines[1])}, "Config.CredentialsJSON"},
		{"no email", fcm.Config{CredentialsJSON: with("client_email", nil)}, "client_email"},
		{"no key", fcm.Config{CredentialsJSON: with("private_key", nil)}, "private_key"},
		{"broken key", fcm.Config{CredentialsJSON: with("private_key", strings.Replace(key, keyLines[3], "AAAA", 1))}, "private_key"},
		{"http token_uri", fcm.Config{CredentialsJSON: with("token_uri", "http://oauth2.example.com/token")}, "token_uri"},
		{"relative base", fcm.Config{TokenSource: ts, BaseURL: "fcm.googleapis.com"}, "Config.BaseURL"},
		{"bad scheme", fcm.Config{TokenSource: ts, BaseURL: "ftp://fcm.googleapis.com"}, "Config.BaseURL"},
		{"unparseable base", fcm.Config{TokenSource: ts, BaseURL: "http://%zz/" + access}, "Config.BaseURL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl, err := fcm.New(t.Context(), c.cfg)
			switch {
			case c.field == "" && (err != nil || cl == nil):
				t.Fatalf("New: %v", err)
			case c.field != "" && (err == nil || !strings.Contains(err.Error(), c.field)):
				t.Fatalf("New: %v; want an error naming %s", err, c.field)
			}
			if err == nil {
				return
			}
			channeltest.NoSecrets(t, err, append(keyLines[1:len(keyLines)-1], access)...)
		})
	}
}

// TestNoSecretsInErrors: the access token and the registration token stay
// out of error text even when the provider echoes them.
func TestNoSecretsInErrors(t *testing.T) {
	echo := `{"error":{"code":400,"message":"token ` + access + ` to ` + recipient + `","status":"INVALID_ARGUMENT"}}`
	for _, c := range []struct {
		name string
		ts   *httptest.Server
	}{
		{"google error echoing both", channeltest.Respond(t, 400, echo)},
		{"html echoing both", channeltest.Respond(t, 502, "<p>"+access+" "+recipient+"</p>")},
		{"bad success", channeltest.Respond(t, 200, access+recipient)},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := sendErr(t, c.ts) // checks the error text
			if strings.Contains(e.Detail, access) || strings.Contains(e.Detail, recipient) {
				t.Errorf("Detail %q holds a secret", e.Detail)
			}
		})
	}
	t.Run("transport", func(t *testing.T) {
		sendErr(t, channeltest.Closed()) // checks the error text
	})
}

func TestDetailTruncated(t *testing.T) {
	e := sendErr(t, channeltest.Respond(t, 400,
		`{"error":{"code":400,"message":"`+channeltest.LongMessage+`","status":"INVALID_ARGUMENT"}}`))
	channeltest.CheckTruncated(t, e.Detail)
}

// TestSendRetryAfter: Retry-After in both forms, and the 1 min floor of a
// project throttle (#719's body), none for a QUOTA_EXCEEDED of a lone token.
func TestSendRetryAfter(t *testing.T) {
	project429 := channeltest.ReadTestdata(t, "RESOURCE_EXHAUSTED.json")
	device429 := channeltest.ReadTestdata(t, "QUOTA_EXCEEDED.json")
	unavailable := channeltest.ReadTestdata(t, "UNAVAILABLE.json")
	inAnHour := time.Now().Add(time.Hour).UTC()
	for _, c := range []struct {
		name     string
		status   int
		body     string
		header   string
		class    channels.Class
		min, max time.Duration
	}{
		{"project, absent: 1 min floor", 429, project429, "", channels.Throttle, time.Minute, time.Minute},
		{"project, seconds", 429, project429, "120", channels.Throttle, 120 * time.Second, 120 * time.Second},
		{"project, seconds under the floor", 429, project429, "10", channels.Throttle, time.Minute, time.Minute},
		{"project, http date", 429, project429, inAnHour.Format(http.TimeFormat), channels.Throttle, 58 * time.Minute, time.Hour},
		{"project, rfc 850 date", 429, project429, inAnHour.Format(time.RFC850), channels.Throttle, 58 * time.Minute, time.Hour},
		{"project, asctime date", 429, project429, inAnHour.Format(time.ANSIC), channels.Throttle, 58 * time.Minute, time.Hour},
		{"project, past date", 429, project429, "Wed, 21 Oct 2015 07:28:00 GMT", channels.Throttle, time.Minute, time.Minute},
		{"project, garbage", 429, project429, "soon", channels.Throttle, time.Minute, time.Minute},
		{"project, seconds over the floor", 429, project429, "90", channels.Throttle, 90 * time.Second, 90 * time.Second},
		{"device, absent", 429, device429, "", channels.Throttle, 0, 0},
		{"device, seconds", 429, device429, "30", channels.Throttle, 30 * time.Second, 30 * time.Second},
		{"device, http date", 429, device429, inAnHour.Format(http.TimeFormat), channels.Throttle, 58 * time.Minute, time.Hour},
		{"503, absent", 503, unavailable, "", channels.Transient, 0, 0},
		{"503, seconds", 503, unavailable, "7", channels.Transient, 7 * time.Second, 7 * time.Second},
		{"503, http date", 503, unavailable, inAnHour.Format(http.TimeFormat), channels.Transient, 58 * time.Minute, time.Hour},
		{"503 without a body, seconds", 503, "", "17", channels.Transient, 17 * time.Second, 17 * time.Second},
		{"503 without a body, absent", 503, "", "", channels.Transient, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var h []string
			if c.header != "" {
				h = []string{"Retry-After", c.header}
			}
			e := sendErr(t, channeltest.Respond(t, c.status, c.body, h...))
			if e.RetryAfter < c.min || e.RetryAfter > c.max || e.Class != c.class {
				t.Errorf("RetryAfter = %v class=%v; want in [%v, %v], %v", e.RetryAfter, e.Class, c.min, c.max, c.class)
			}
			if got := channels.RetryAfter(error(e)); got != e.RetryAfter {
				t.Errorf("channels.RetryAfter = %v", got)
			}
		})
	}
}

func TestSendTransportError(t *testing.T) {
	channeltest.CheckTransportError(t, func(ts *httptest.Server) error { return sendErr(t, ts) })
}

func TestSendContext(t *testing.T) {
	channeltest.CheckContext(t, channeltest.SendOf(newClient(t, channeltest.Hanging(t).URL).Send, message()))
	t.Run("during the token request", func(t *testing.T) {
		fake := fcmtest.New(fcmtest.Config{})
		hang := channeltest.Hang(t)
		mux := http.NewServeMux()
		mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
			r.ParseForm()
			hang.ServeHTTP(w, r)
		})
		mux.Handle("/", fake)
		slow := httptest.NewServer(mux)
		t.Cleanup(slow.Close)
		cl, err := fcm.New(t.Context(), fcm.Config{BaseURL: slow.URL, CredentialsJSON: fake.ServiceAccountJSONAt(slow.URL)})
		if err != nil {
			t.Fatal(err)
		}
		// The token request must honour ctx.
		channeltest.CheckCanceled(t, channeltest.SendOf(cl.Send, message()))
	})
}

// newFakeClient returns a Client of fake that gets its tokens from the
// fake's token endpoint.
func newFakeClient(t *testing.T, fake *fcmtest.Server, dataID string) *fcm.Client {
	t.Helper()
	c, err := fcm.New(t.Context(), fcm.Config{BaseURL: fake.URL(), CredentialsJSON: fake.ServiceAccountJSON(), DataIDKey: dataID})
	return channeltest.Must(t, c, err)
}

// TestTokenCaching: many sends, concurrent or not, make one token request.
func TestTokenCaching(t *testing.T) {
	fake := fcmtest.NewServer(fcmtest.Config{})
	defer fake.Close()
	c := newFakeClient(t, fake, "")
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if _, err := c.Send(t.Context(), message()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for range 50 {
		if _, err := c.Send(t.Context(), message()); err != nil {
			t.Fatal(err)
		}
	}
	if n := fake.TokenRequests(); n != 1 {
		t.Errorf("%d token requests for 100 sends, want 1", n)
	}
	if st := fake.Stats()[project]; st.Delivered != 100 {
		t.Errorf("stats = %+v; want 100 delivered", st)
	}
}

// TestTokenNearExpiry: a token within a minute of its expiry is replaced
// before it is sent.
func TestTokenNearExpiry(t *testing.T) {
	fake := fcmtest.NewServer(fcmtest.Config{TokenTTL: 50 * time.Second})
	defer fake.Close()
	c := newFakeClient(t, fake, "")
	for range 3 {
		if _, err := c.Send(t.Context(), message()); err != nil {
			t.Fatal(err)
		}
	}
	if n := fake.TokenRequests(); n != 3 {
		t.Errorf("%d token requests, want 3: a 50 s token is too close to expiry to reuse", n)
	}
}

// TestUnauthenticatedRefresh: a refused access token is replaced once and
// the send retried; a second refusal is a Halt.
func TestUnauthenticatedRefresh(t *testing.T) {
	t.Run("fake revokes its tokens", func(t *testing.T) {
		fake := fcmtest.NewServer(fcmtest.Config{})
		defer fake.Close()
		c := newFakeClient(t, fake, "")
		if _, err := c.Send(t.Context(), message()); err != nil {
			t.Fatal(err)
		}
		fake.RevokeTokens()
		if _, err := c.Send(t.Context(), message()); err != nil {
			t.Fatalf("Send after revocation = %v; want success on a new token", err)
		}
		if n := fake.TokenRequests(); n != 2 {
			t.Errorf("%d token requests, want 2", n)
		}
		if st := fake.Stats()[project]; st.Delivered != 2 {
			t.Errorf("stats = %+v; want 2 delivered", st)
		}
	})

	unauthenticated := channeltest.ReadTestdata(t, "UNAUTHENTICATED.json")
	counting := func(body string) (*httptest.Server, *atomic.Int32) {
		var n atomic.Int32
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			w.WriteHeader(401)
			io.WriteString(w, body)
		}))
		t.Cleanup(ts.Close)
		return ts, &n
	}
	t.Run("refused twice", func(t *testing.T) {
		ts, sends := counting(unauthenticated)
		var minted atomic.Int32
		_, err := mintingClient(t, ts.URL, &minted).Send(t.Context(), message())
		if e := checkErr(t, err, "tok-1", "tok-2"); e.Class != channels.Halt || e.Code != "UNAUTHENTICATED" || e.Status != 401 {
			t.Errorf("err = %v; want halt UNAUTHENTICATED 401", err)
		}
		if sends.Load() != 2 || minted.Load() != 2 {
			t.Errorf("%d sends with %d tokens; want 2 and 2", sends.Load(), minted.Load())
		}
	})
	t.Run("no newer token", func(t *testing.T) {
		ts, sends := counting(unauthenticated)
		_, err := newClient(t, ts.URL).Send(t.Context(), message())
		if e := checkErr(t, err); e.Class != channels.Halt || e.Code != "UNAUTHENTICATED" {
			t.Errorf("err = %v; want halt UNAUTHENTICATED", err)
		}
		if n := sends.Load(); n != 1 {
			t.Errorf("%d sends, want 1: a static token source has nothing newer", n)
		}
	})
	t.Run("third-party auth is not retried", func(t *testing.T) {
		ts, sends := counting(channeltest.ReadTestdata(t, "THIRD_PARTY_AUTH_ERROR.json"))
		var minted atomic.Int32
		_, err := mintingClient(t, ts.URL, &minted).Send(t.Context(), message())
		if e := checkErr(t, err); e.Class != channels.Permanent || e.Code != "THIRD_PARTY_AUTH_ERROR" {
			t.Errorf("err = %v; want permanent THIRD_PARTY_AUTH_ERROR", err)
		}
		if n := sends.Load(); n != 1 {
			t.Errorf("%d sends, want 1", n)
		}
	})
}

// mintingClient returns a client of baseURL whose token source mints a
// new access token on each call ("tok-1", "tok-2", ...), counted in
// minted.
func mintingClient(t *testing.T, baseURL string, minted *atomic.Int32) *fcm.Client {
	t.Helper()
	src := tokenFunc(func() (*oauth2.Token, error) {
		return &oauth2.Token{AccessToken: "tok-" + strconv.Itoa(int(minted.Add(1)))}, nil
	})
	c, err := fcm.New(t.Context(), fcm.Config{BaseURL: baseURL, TokenSource: src})
	return channeltest.Must(t, c, err)
}

// tokenFunc is an oauth2.TokenSource made of a function.
type tokenFunc func() (*oauth2.Token, error)

func (f tokenFunc) Token() (*oauth2.Token, error) { return f() }

// TestTokenErrors: no access token is a Halt with Code "oauth2", and no FCM
// request; its text holds neither key material nor the assertion.
func TestTokenErrors(t *testing.T) {
	_, key := serviceAccount(t)
	keyLines := strings.Split(strings.TrimSpace(key), "\n")
	secrets := append([]string{key}, keyLines[1:len(keyLines)-1]...)

	var fcmHits atomic.Int32
	var assertion atomic.Value
	tokenEndpoint := func(status int, body func(r *http.Request) string) string {
		fake := fcmtest.New(fcmtest.Config{})
		mux := http.NewServeMux()
		mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
			r.ParseForm()
			assertion.Store(r.PostForm.Get("assertion"))
			w.WriteHeader(status)
			io.WriteString(w, body(r))
		})
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fcmHits.Add(1) })
		ts := httptest.NewServer(mux)
		t.Cleanup(ts.Close)
		return string(fake.ServiceAccountJSONAt(ts.URL))
	}
	for _, c := range []struct {
		name   string
		key    string // service-account JSON
		detail string // in the error text
	}{
		{"invalid_grant", tokenEndpoint(400, func(*http.Request) string {
			return `{"error":"invalid_grant","error_description":"Invalid JWT Signature."}`
		}), "HTTP 400 invalid_grant: Invalid JWT Signature."},
		{"echoing the request", tokenEndpoint(400, func(r *http.Request) string {
			return "bad request: " + r.PostForm.Encode()
		}), "HTTP 400"},
		{"server error", tokenEndpoint(503, func(*http.Request) string { return "unavailable" }), "HTTP 503"},
		{"not json", tokenEndpoint(200, func(*http.Request) string { return "<html>" }), "cannot fetch token"},
		{"no access token", tokenEndpoint(200, func(*http.Request) string { return `{"expires_in":3600}` }), "empty access token"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl, err := fcm.New(t.Context(), fcm.Config{BaseURL: "http://127.0.0.1:1", CredentialsJSON: []byte(c.key)})
			if err != nil {
				t.Fatal(err)
			}
			_, err = cl.Send(t.Context(), message())
			a, _ := assertion.Load().(string)
			e := checkErr(t, err, append(secrets, a)...)
			if e.Class != channels.Halt || e.Code != "oauth2" || e.Status != 0 || !strings.Contains(err.Error(), c.detail) {
				t.Errorf("err = %v; want halt oauth2, status 0, mentioning %q", err, c.detail)
			}
			if a == "" {
				t.Error("the token endpoint got no assertion")
			}
		})
	}
	t.Run("token endpoint down", func(t *testing.T) {
		ts := httptest.NewServer(http.NotFoundHandler())
		ts.Close()
		cl, err := fcm.New(t.Context(), fcm.Config{BaseURL: ts.URL,
			CredentialsJSON: fcmtest.New(fcmtest.Config{}).ServiceAccountJSONAt(ts.URL)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.Send(t.Context(), message())
		if e := checkErr(t, err, secrets...); e.Class != channels.Halt || e.Code != "oauth2" {
			t.Errorf("err = %v; want halt oauth2", err)
		}
	})
	t.Run("token source error", func(t *testing.T) {
		boom := errors.New("metadata server unreachable")
		cl, err := fcm.New(t.Context(), fcm.Config{BaseURL: "http://127.0.0.1:1",
			TokenSource: tokenFunc(func() (*oauth2.Token, error) { return nil, boom })})
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.Send(t.Context(), message())
		if e := checkErr(t, err); e.Class != channels.Halt || e.Code != "oauth2" || !errors.Is(err, boom) {
			t.Errorf("err = %v; want halt oauth2 wrapping the source's error", err)
		}
	})
	t.Run("key of another fake", func(t *testing.T) {
		fake := fcmtest.NewServer(fcmtest.Config{})
		defer fake.Close()
		other := fcmtest.New(fcmtest.Config{}).ServiceAccountJSONAt(fake.URL())
		cl, err := fcm.New(t.Context(), fcm.Config{BaseURL: fake.URL(), CredentialsJSON: other})
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.Send(t.Context(), message())
		if e := checkErr(t, err, secrets...); e.Class != channels.Halt || e.Code != "oauth2" || !strings.Contains(err.Error(), "invalid_grant") {
			t.Errorf("err = %v; want halt oauth2 invalid_grant", err)
		}
		if n := len(fake.Arrivals()); n != 0 {
			t.Errorf("%d sends reached FCM without a token", n)
		}
	})
	if n := fcmHits.Load(); n != 0 {
		t.Errorf("%d requests reached FCM without a token", n)
	}
}

// TestSendAgainstFake runs the adapter against fcmtest: the fake's answers
// classify as documented and it sees the envelope ids.
func TestSendAgainstFake(t *testing.T) {
	t.Run("project quota", func(t *testing.T) {
		// The fake answers FCM's documented QUOTA_EXCEEDED, which does not
		// say whose quota it is: the first token refused waits alone, the
		// second (another token, within a minute) throttles the project.
		fake := fcmtest.NewServer(fcmtest.Config{Rate: 0.001, Burst: 3, RetryAfter: 90 * time.Second})
		defer fake.Close()
		c := newFakeClient(t, fake, "pacer_id")
		var scopes []channels.Scope
		ok, throttled := channeltest.CountAnswers(t, 5, channeltest.Numbered(message()), channeltest.Bound(t.Context(), c.Send),
			func(res channels.Result) bool {
				return strings.HasPrefix(res.ProviderID, "projects/"+project+"/messages/")
			},
			func(e *channels.Error) bool {
				scopes = append(scopes, e.Scope)
				return e.Code == "QUOTA_EXCEEDED" && e.Status == 429 && e.RetryAfter == 90*time.Second
			})
		if ok != 3 || throttled != 2 || !slices.Equal(scopes, []channels.Scope{channels.ScopePair, channels.ScopePair}) {
			t.Errorf("accepted %d, throttled %d as %v; want 3, 2 of one token, each pair", ok, throttled, scopes)
		}
		m := message()
		m.To = "another-device"
		_, err := c.Send(t.Context(), m)
		if e := checkErr(t, err); e.Class != channels.Throttle || e.Scope != channels.ScopeKey || e.RetryAfter != 90*time.Second {
			t.Errorf("a second token refused: %+v; want a project throttle", e)
		}
		arr := fake.Arrivals()
		if len(arr) != 6 || arr[0].ID != "env-0" || arr[4].ID != "env-4" || arr[0].Key != project || arr[0].To != recipient {
			t.Errorf("arrivals = %+v", arr)
		}
	})
	t.Run("#719 shape, http date", func(t *testing.T) {
		fake := fcmtest.NewServer(fcmtest.Config{Rate: 0.001, Burst: 1, QuotaErrorInfo: true,
			RetryAfter: 2 * time.Minute, RetryAfterDate: true})
		defer fake.Close()
		c := newFakeClient(t, fake, "")
		c.Send(t.Context(), message())
		_, err := c.Send(t.Context(), message())
		e := checkErr(t, err)
		if e.Class != channels.Throttle || e.Code != "RESOURCE_EXHAUSTED" || e.Scope != channels.ScopeKey ||
			e.RetryAfter < 2*time.Minute-30*time.Second || e.RetryAfter > 2*time.Minute+2*time.Second { // a date: the client's clock has moved on since
			t.Errorf("throttle = %+v; want RESOURCE_EXHAUSTED key, about 2 min", e)
		}
	})
	t.Run("device rate", func(t *testing.T) {
		fake := fcmtest.NewServer(fcmtest.Config{DeviceRate: 0.001, DeviceBurst: 2})
		defer fake.Close()
		c := newFakeClient(t, fake, "")
		for i := range 3 {
			_, err := c.Send(t.Context(), message())
			if i < 2 && err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
			if i == 2 {
				e := checkErr(t, err)
				if e.Class != channels.Throttle || e.Scope != channels.ScopePair || e.Code != "QUOTA_EXCEEDED" || e.RetryAfter != 0 {
					t.Errorf("device throttle = %+v; want throttle pair, no RetryAfter", e)
				}
			}
		}
		m := message()
		m.To = "another-device"
		if _, err := c.Send(t.Context(), m); err != nil {
			t.Errorf("another device: %v", err)
		}
	})
	t.Run("unregistered and invalid", func(t *testing.T) {
		fake := fcmtest.NewServer(fcmtest.Config{Unregistered: []string{recipient}})
		defer fake.Close()
		c := newFakeClient(t, fake, "")
		_, err := c.Send(t.Context(), message())
		if e := checkErr(t, err); e.Class != channels.Permanent || e.Code != "UNREGISTERED" || e.Status != 404 {
			t.Errorf("dead token: %+v; want permanent UNREGISTERED 404", e)
		}
		m := message()
		m.To = "live"
		m.Payload = json.RawMessage(`{"data":{"n":1}}`)
		_, err = c.Send(t.Context(), m)
		if e := checkErr(t, err); e.Class != channels.Permanent || e.Code != "INVALID_ARGUMENT" || e.Status != 400 {
			t.Errorf("non-string data: %+v; want permanent INVALID_ARGUMENT 400", e)
		}
	})
}

// TestConnectionReuse: the adapter's own client (its pool bounded to
// channeltest.ReusePool connections) reuses its connections, at most 1 new
// one per 1,000 messages after warm-up.
func TestConnectionReuse(t *testing.T) {
	h := channeltest.Responder(200, channeltest.ReadTestdata(t, "success.json"), "Content-Type", "application/json")
	channeltest.CheckReuse(t, h, func(baseURL string, pool int) func(context.Context) error {
		c, err := fcm.New(t.Context(), fcm.Config{BaseURL: baseURL, MaxIdleConnsPerHost: pool,
			TokenSource: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: access})})
		return channeltest.SendOf(channeltest.Must(t, c, err).Send, message())
	})
}
