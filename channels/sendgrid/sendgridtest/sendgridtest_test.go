package sendgridtest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/internal/channeltest"
	"github.com/pacerhq/pacer/channels/sendgrid/sendgridtest"
)

const (
	secret  = "SG.fake-secret.0123456789"
	keyName = "marketing"
)

// request returns a request of body to /v3/mail/send with the bearer key
// (none if "") and the header pairs, as the sendgrid adapter sends it.
func request(bearer, body string, header ...string) *http.Request {
	return channeltest.PostJSON("/v3/mail/send", bearer, body, append([]string{"Accept", "application/json"}, header...)...)
}

// post sends body to /v3/mail/send on h with the bearer key (none if "")
// and returns the recorded answer.
func post(h http.Handler, bearer, body string, header ...string) *httptest.ResponseRecorder {
	return channeltest.Serve(h, request(bearer, body, header...))
}

// mail returns a valid Mail Send body to one recipient with pacer_id id
// (none if "").
func mail(to, id string) string {
	args := ""
	if id != "" {
		args = fmt.Sprintf(`,"custom_args":{"pacer_id":%q}`, id)
	}
	return fmt.Sprintf(`{"personalizations":[{"to":[{"email":%q}]%s}],"from":{"email":"news@example.org"},
		"subject":"Hi","content":[{"type":"text/plain","value":"Hello"}]}`, to, args)
}

func decodeErrors(t *testing.T, w *httptest.ResponseRecorder) sendgridtest.ErrorBody {
	t.Helper()
	var b sendgridtest.ErrorBody
	if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil || len(b.Errors) == 0 {
		t.Fatalf("error body %q: %v", w.Body, err)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	return b
}

// fields returns "field: message" for each error, "null" for a null field.
func fields(b sendgridtest.ErrorBody) []string {
	var out []string
	for _, e := range b.Errors {
		f := "null"
		if e.Field != nil {
			f = *e.Field
		}
		out = append(out, f)
	}
	return out
}

// TestFake runs the checks every fake passes, with SendGrid's answers: a
// 202 with no body and a new 22-character X-Message-Id, a 429 with its
// body and X-RateLimit headers.
func TestFake(t *testing.T) {
	var mu sync.Mutex
	ids := map[string]bool{}
	keys := map[string]string{}
	for _, k := range channeltest.FakeKeys {
		keys[k] = "SG." + k
	}
	channeltest.CheckFake(t, channeltest.Fake[sendgridtest.Config, *sendgridtest.Server, sendgridtest.KeyStats, sendgridtest.Arrival]{
		Config: func(c channeltest.FakeConfig) sendgridtest.Config {
			return sendgridtest.Config{Rate: c.Rate, Burst: c.Burst, Latency: c.Latency, AnswerTime: c.AnswerTime, APIKeys: keys}
		},
		New: sendgridtest.New, NewServer: sendgridtest.NewServer, FetchStats: sendgridtest.FetchStats,
		Request:  func(key, id string) *http.Request { return request("SG."+key, mail("a@example.com", id)) },
		Accepted: http.StatusAccepted, Throttled: http.StatusTooManyRequests,
		Arrival: func(a sendgridtest.Arrival) (string, bool) { return a.Key, a.Throttled },
		Check: func(t testing.TB, status int, h http.Header, body []byte) {
			switch status {
			case 202:
				id := h.Get("X-Message-Id")
				mu.Lock()
				seen := ids[id]
				ids[id] = true
				mu.Unlock()
				if len(body) != 0 || len(id) != 22 || seen {
					t.Errorf("202 body %q id %q (seen %v)", body, id, seen)
				}
			case 429:
				limit, _ := strconv.Atoi(h.Get("X-RateLimit-Limit"))
				reset, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
				if string(body) != `{"errors":[{"field":null,"message":"too many requests"}]}`+"\n" ||
					limit < 1 || h.Get("X-RateLimit-Remaining") != "0" || err != nil || reset <= 0 ||
					h.Get("Content-Type") != "application/json" {
					t.Errorf("429 body %s headers %v", body, h)
				}
			}
		},
		StatsFields: []string{"delivered", "throttled", "duplicates", "max_1s", "first", "last"},
	})
}

// TestThrottleHeaders: a 429 says the bucket's capacity and, in Unix
// seconds rounded up, when its next token comes.
func TestThrottleHeaders(t *testing.T) {
	const burst = 20
	s := sendgridtest.New(sendgridtest.Config{Rate: 0.001, Burst: burst}) // refills 1 per 1000 s
	start := time.Now()
	for range burst {
		post(s, secret, mail("a@example.com", ""))
	}
	w := post(s, secret, mail("a@example.com", ""))
	h := w.Header()
	reset, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	if w.Code != 429 || h.Get("X-RateLimit-Limit") != strconv.Itoa(burst) || h.Get("X-RateLimit-Remaining") != "0" ||
		err != nil || reset < start.Unix()+990 || reset > time.Now().Unix()+1001 {
		t.Errorf("HTTP %d headers %v", w.Code, h)
	}
}

// TestNoRateLimitHeaders: in that mode a 429 has SendGrid's body and no
// X-RateLimit-* header, as Mail Send may answer.
func TestNoRateLimitHeaders(t *testing.T) {
	s := sendgridtest.New(sendgridtest.Config{Rate: 0.001, Burst: 1, NoRateLimitHeaders: true})
	if w := post(s, secret, mail("a@example.com", "")); w.Code != 202 {
		t.Fatalf("first: HTTP %d, want 202", w.Code)
	}
	w := post(s, secret, mail("a@example.com", ""))
	h := w.Header()
	if w.Code != 429 || w.Body.String() != `{"errors":[{"field":null,"message":"too many requests"}]}`+"\n" {
		t.Errorf("HTTP %d %s; want 429 with SendGrid's body", w.Code, w.Body)
	}
	for _, name := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"} {
		if v := h.Values(name); v != nil {
			t.Errorf("%s = %q, want absent", name, v)
		}
	}
}

// TestPerKeyBuckets: each API key has its own bucket.
func TestPerKeyBuckets(t *testing.T) {
	s := sendgridtest.New(sendgridtest.Config{Rate: 0.001, Burst: 1,
		APIKeys: map[string]string{"a": "SG.a", "b": "SG.b"}})
	for _, c := range []struct {
		key  string
		want int
	}{{"SG.a", 202}, {"SG.a", 429}, {"SG.b", 202}, {"SG.b", 429}} {
		if w := post(s, c.key, mail("x@example.com", "")); w.Code != c.want {
			t.Errorf("key %s: HTTP %d, want %d", c.key, w.Code, c.want)
		}
	}
	if st := s.Stats(); len(st) != 2 || st["a"].Delivered != 1 || st["b"].Throttled != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func TestAuth(t *testing.T) {
	s := sendgridtest.New(sendgridtest.Config{APIKeys: map[string]string{keyName: secret}})
	for _, c := range []struct {
		name   string
		header string // Authorization
		msg    string
	}{
		{"none", "", sendgridtest.MsgAuthRequired},
		{"basic", "Basic " + secret, sendgridtest.MsgAuthRequired},
		{"empty bearer", "Bearer ", sendgridtest.MsgAuthRequired},
		{"wrong key", "Bearer SG.other", sendgridtest.MsgAuthInvalid},
		{"key with a suffix", "Bearer " + secret + "x", sendgridtest.MsgAuthInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := post(s, "", mail("a@example.com", ""), "Authorization", c.header)
			b := decodeErrors(t, w)
			if w.Code != 401 || len(b.Errors) != 1 || b.Errors[0].Field != nil || b.Errors[0].Message != c.msg {
				t.Errorf("HTTP %d %s; want 401 %q", w.Code, w.Body, c.msg)
			}
		})
	}
	if w := post(s, secret, mail("a@example.com", "")); w.Code != 202 {
		t.Errorf("good key: HTTP %d %s", w.Code, w.Body)
	}
	arr := s.Arrivals()
	if len(arr) != 1 || arr[0].Key != keyName {
		t.Errorf("arrivals = %+v; want one, by name (refused requests are not recorded)", arr)
	}
	if _, ok := s.Stats()[keyName]; !ok {
		t.Errorf("stats = %v; want them by name", s.Stats())
	}
}

// TestAnyKey: without Config.APIKeys any key is accepted and reported by
// KeyID, which is stable and is not the secret.
func TestAnyKey(t *testing.T) {
	s := sendgridtest.New(sendgridtest.Config{})
	post(s, "SG.one", mail("a@example.com", ""))
	post(s, "SG.two", mail("a@example.com", ""))
	post(s, "SG.one", mail("a@example.com", ""))
	id1, id2 := sendgridtest.KeyID("SG.one"), sendgridtest.KeyID("SG.two")
	st := s.Stats()
	if len(st) != 2 || st[id1].Delivered != 2 || st[id2].Delivered != 1 {
		t.Errorf("stats = %+v", st)
	}
	if id1 == id2 || id1 != sendgridtest.KeyID("SG.one") || !strings.HasPrefix(id1, "key-") || len(id1) != 16 ||
		strings.Contains(id1, "one") {
		t.Errorf("KeyID = %q, %q", id1, id2)
	}
}

// TestValidation: a body SendGrid would refuse gets a 400 listing every
// problem, by field, in SendGrid's words.
func TestValidation(t *testing.T) {
	s := sendgridtest.New(sendgridtest.Config{})
	many := `{"personalizations":[` + strings.TrimSuffix(strings.Repeat(`{"to":[{"email":"a@example.com"}]},`, 1001), ",") +
		`],"from":{"email":"f@example.org"},"template_id":"d-1"}`
	for _, c := range []struct {
		name   string
		body   string
		fields []string
	}{
		{"empty", ``, []string{"null"}},
		{"not json", `not json`, []string{"null"}},
		{"array", `[1]`, []string{"null"}},
		{"wrong type", `{"personalizations":{"to":[]}}`, []string{"null"}},
		{"empty object", `{}`, []string{"personalizations", "from.email", "subject", "content"}},
		{"null", `null`, []string{"personalizations", "from.email", "subject", "content"}},
		{"no to", `{"personalizations":[{}],"from":{"email":"f@example.org"},"subject":"s","content":[{"type":"text/plain","value":"v"}]}`,
			[]string{"personalizations.0.to"}},
		{"bad addresses", `{"personalizations":[{"to":[{"email":"a@example.com"},{"email":"nope"}]},{"to":[{"email":"b@x"}]}],
			"from":{"email":"f@example.org"},"subject":"s","content":[{"type":"text/plain","value":"v"}]}`,
			[]string{"personalizations.0.to.1.email", "personalizations.1.to.0.email"}},
		{"bad from", `{"personalizations":[{"to":[{"email":"a@example.com"}]}],"from":{"email":"f at example.org"},
			"subject":"s","content":[{"type":"text/plain","value":"v"}]}`, []string{"from.email"}},
		{"empty content value", `{"personalizations":[{"to":[{"email":"a@example.com"}]}],"from":{"email":"f@example.org"},
			"subject":"s","content":[{"type":"text/plain","value":"v"},{"type":"text/html","value":""}]}`, []string{"content.1.value"}},
		{"too many personalizations", many, []string{"personalizations"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := post(s, secret, c.body)
			b := decodeErrors(t, w)
			if got := fields(b); w.Code != 400 || !slices.Equal(got, c.fields) {
				t.Errorf("HTTP %d fields %q; want 400 %q\n%s", w.Code, got, c.fields, w.Body)
			}
			for _, e := range b.Errors {
				if e.Message == "" || (e.Field != nil && !strings.HasPrefix(e.Help, "http://sendgrid.com/docs/")) {
					t.Errorf("error %+v: want a message, and help for a field", e)
				}
			}
		})
	}
	if n := len(s.Arrivals()); n != 0 {
		t.Errorf("%d arrivals, want 0", n)
	}

	// What the documented messages say.
	b := decodeErrors(t, post(s, secret, `{}`))
	if b.Errors[0].Message != sendgridtest.MsgNoPersonal || b.Errors[1].Message != sendgridtest.MsgNoFrom ||
		b.Errors[3].Message != sendgridtest.MsgNoContent {
		t.Errorf("messages = %+v", b.Errors)
	}

	// Valid without content and subject: a template; without a top-level
	// subject: every personalization has one.
	for _, body := range []string{
		`{"personalizations":[{"to":[{"email":"a@example.com"}]}],"from":{"email":"f@example.org"},"template_id":"d-1"}`,
		`{"personalizations":[{"to":[{"email":"a@example.com"}],"subject":"s"}],"from":{"email":"f@example.org"},
			"content":[{"type":"text/plain","value":"v"}]}`,
	} {
		if w := post(s, secret, body); w.Code != 202 {
			t.Errorf("HTTP %d %s for %s", w.Code, w.Body, body)
		}
	}
}

func TestTooLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 30 MB")
	}
	s := sendgridtest.New(sendgridtest.Config{})
	body := `{"content":[{"type":"text/plain","value":"` + strings.Repeat("a", sendgridtest.MaxBodyBytes) + `"}]}`
	w := post(s, secret, body)
	if b := decodeErrors(t, w); w.Code != 413 || b.Errors[0].Message != sendgridtest.MsgTooLarge || b.Errors[0].Field != nil {
		t.Errorf("HTTP %d %s; want 413", w.Code, w.Body)
	}
}

// TestMailLevelID: a mail-level pacer_id counts when personalizations[0]
// has none (the checks of every fake run in TestFake), and an arrival
// carries the id, the recipient and the message id, none when throttled.
func TestMailLevelID(t *testing.T) {
	s := sendgridtest.New(sendgridtest.Config{Rate: 0.001, Burst: 2})
	top := `{"personalizations":[{"to":[{"email":"a@example.com"}]}],"custom_args":{"pacer_id":"a"},
		"from":{"email":"f@example.org"},"template_id":"d-1"}`
	for _, body := range []string{mail("a@example.com", "a"), top, mail("b@example.com", "c")} { // the 3rd is throttled
		post(s, secret, body)
	}
	if k := s.Stats()[sendgridtest.KeyID(secret)]; k.Delivered != 2 || k.Throttled != 1 || k.Duplicates != 1 {
		t.Errorf("stats: %+v; want 2 delivered, 1 throttled, 1 duplicate", k)
	}
	arr := s.Arrivals()
	if len(arr) != 3 || arr[1].ID != "a" || arr[0].To != "a@example.com" || arr[0].MessageID == "" ||
		!arr[2].Throttled || arr[2].MessageID != "" || arr[2].ID != "c" || arr[2].To != "b@example.com" {
		t.Errorf("arrivals = %+v", arr)
	}
}

func TestOnBehalfOfRecorded(t *testing.T) {
	s := sendgridtest.New(sendgridtest.Config{})
	post(s, secret, mail("a@example.com", ""), "On-Behalf-Of", "sub1")
	post(s, secret, mail("a@example.com", ""))
	if arr := s.Arrivals(); len(arr) != 2 || arr[0].OnBehalfOf != "sub1" || arr[1].OnBehalfOf != "" {
		t.Errorf("arrivals = %+v", arr)
	}
}

func TestNotServed(t *testing.T) {
	s := sendgridtest.New(sendgridtest.Config{})
	for _, r := range []*http.Request{
		httptest.NewRequest("GET", "/v3/mail/send", nil),
		httptest.NewRequest("POST", "/v3/mail/batch", strings.NewReader("{}")),
	} {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		if w.Code != 404 || decodeErrors(t, w).Errors[0].Field != nil {
			t.Errorf("%s %s: HTTP %d %s; want 404", r.Method, r.URL.Path, w.Code, w.Body)
		}
	}
}
