package sendgridtest_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/sendgrid/sendgridtest"
)

const (
	secret  = "SG.fake-secret.0123456789"
	keyName = "marketing"
)

// post sends body to /v3/mail/send on h with the bearer key (none if "")
// and returns the recorded answer.
func post(h http.Handler, bearer, body string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/v3/mail/send", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Accept", "application/json")
	if bearer != "" {
		r.Header.Set("Authorization", "Bearer "+bearer)
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
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

// TestLimitEnforced: 2×burst requests at once get exactly burst accepted,
// over real HTTP and from concurrent senders, and every refusal is
// SendGrid's 429.
func TestLimitEnforced(t *testing.T) {
	const burst = 20
	s := sendgridtest.NewServer(sendgridtest.Config{Rate: 0.001, Burst: burst, // refills 1 per 1000 s
		APIKeys: map[string]string{keyName: secret}})
	defer s.Close()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		codes = map[int]int{}
		ids   = map[string]bool{}
	)
	start := time.Now()
	for i := range 2 * burst {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", s.URL()+"/v3/mail/send", strings.NewReader(mail("a@example.com", fmt.Sprint("id-", i))))
			req.Header.Set("Authorization", "Bearer "+secret)
			req.Header.Set("Accept", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			codes[resp.StatusCode]++
			h := resp.Header
			switch resp.StatusCode {
			case 202:
				id := h.Get("X-Message-Id")
				if len(body) != 0 || len(id) != 22 || ids[id] {
					t.Errorf("202 body %q id %q (seen %v)", body, id, ids[id])
				}
				ids[id] = true
			case 429:
				reset, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
				if string(body) != `{"errors":[{"field":null,"message":"too many requests"}]}`+"\n" ||
					h.Get("X-RateLimit-Limit") != strconv.Itoa(burst) || h.Get("X-RateLimit-Remaining") != "0" ||
					err != nil || reset < start.Unix()+990 || reset > time.Now().Unix()+1001 {
					t.Errorf("429 body %s headers %v", body, h)
				}
			}
		})
	}
	wg.Wait()
	if codes[202] != burst || codes[429] != burst {
		t.Fatalf("statuses = %v; want %d×202 and %d×429", codes, burst, burst)
	}
	st := s.Stats()[keyName]
	if st.Delivered != burst || st.Throttled != burst || st.Duplicates != 0 || st.Max1s != burst {
		t.Errorf("stats = %+v", st)
	}
	if n := len(s.Arrivals()); n != 2*burst {
		t.Errorf("%d arrivals, want %d", n, 2*burst)
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

func TestDefaultBurst(t *testing.T) {
	s := sendgridtest.New(sendgridtest.Config{Rate: 2.5}) // burst ceil(2.5) = 3
	ok := 0
	for range 6 {
		if post(s, secret, mail("a@example.com", "")).Code == 202 {
			ok++
		}
	}
	if ok != 3 {
		t.Errorf("accepted %d of 6, want 3", ok)
	}
}

func TestUnlimited(t *testing.T) {
	s := sendgridtest.New(sendgridtest.Config{})
	for i := range 500 {
		if w := post(s, secret, mail("a@example.com", "")); w.Code != 202 {
			t.Fatalf("request %d: HTTP %d", i, w.Code)
		}
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

// TestDuplicates: an ID accepted twice counts once as a duplicate; a
// throttled request and an empty ID never do, keys count separately, and a
// mail-level pacer_id counts when personalizations[0] has none.
func TestDuplicates(t *testing.T) {
	keys := map[string]string{"k": "SG.k", "j": "SG.j"}
	s := sendgridtest.New(sendgridtest.Config{Rate: 0.001, Burst: 5, APIKeys: keys})
	top := `{"personalizations":[{"to":[{"email":"a@example.com"}]}],"custom_args":{"pacer_id":"a"},
		"from":{"email":"f@example.org"},"template_id":"d-1"}`
	for _, body := range []string{mail("a@example.com", "a"), mail("a@example.com", "b"), top, mail("a@example.com", ""),
		mail("a@example.com", ""), mail("a@example.com", "c")} { // the 6th is throttled
		post(s, "SG.k", body)
	}
	post(s, "SG.k", mail("a@example.com", "b")) // throttled, not a duplicate
	post(s, "SG.j", mail("a@example.com", "a")) // other key
	st := s.Stats()
	if k := st["k"]; k.Delivered != 5 || k.Throttled != 2 || k.Duplicates != 1 {
		t.Errorf("k: %+v; want 5 delivered, 2 throttled, 1 duplicate", k)
	}
	if j := st["j"]; j.Delivered != 1 || j.Duplicates != 0 {
		t.Errorf("j: %+v; want 1 delivered, 0 duplicates", j)
	}
	arr := s.Arrivals()
	if len(arr) != 8 || arr[2].ID != "a" || !arr[5].Throttled || arr[5].MessageID != "" || arr[7].Key != "j" ||
		arr[0].To != "a@example.com" || arr[0].MessageID == "" {
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

func TestSetRate(t *testing.T) {
	s := sendgridtest.New(sendgridtest.Config{Rate: 0.001, Burst: 1, APIKeys: map[string]string{"a": "SG.a", "b": "SG.b", "c": "SG.c"}})
	accepted := func(key string) bool { return post(s, "SG."+key, mail("a@example.com", "")).Code == 202 }
	if !accepted("a") || accepted("a") || !accepted("b") || accepted("b") {
		t.Fatal("burst 1 not enforced")
	}
	s.SetRate("a", 0) // unlimited for a only
	for range 10 {
		if !accepted("a") {
			t.Fatal("a refused after SetRate(a, 0)")
		}
	}
	if accepted("b") {
		t.Fatal("b accepted: SetRate(a) changed b")
	}
	s.SetRate("", 0) // unlimited for all, and for new keys
	if !accepted("b") || !accepted("c") || !accepted("c") {
		t.Fatal(`refused after SetRate("", 0)`)
	}
}

func TestLatency(t *testing.T) {
	s := sendgridtest.New(sendgridtest.Config{Latency: 50 * time.Millisecond})
	start := time.Now()
	post(s, secret, mail("a@example.com", ""))
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("answered after %v, want at least 50ms", d)
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

// TestStatsEndpoint: GET /_stats serves Stats, and FetchStats reads it.
func TestStatsEndpoint(t *testing.T) {
	s := sendgridtest.NewServer(sendgridtest.Config{Rate: 0.001, Burst: 2, APIKeys: map[string]string{keyName: secret}})
	defer s.Close()
	if s.Handler() != http.Handler(s) {
		t.Error("Handler is not the server")
	}
	for _, id := range []string{"a", "a", "b"} {
		req, _ := http.NewRequest("POST", s.URL()+"/v3/mail/send", strings.NewReader(mail("a@example.com", id)))
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Accept", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	got, err := sendgridtest.FetchStats(t.Context(), nil, s.URL()+"/")
	if err != nil {
		t.Fatal(err)
	}
	want := s.Stats()
	k := got[keyName]
	if len(got) != 1 || k.Delivered != 2 || k.Throttled != 1 || k.Duplicates != 1 || k.Max1s != 2 ||
		!k.First.Equal(want[keyName].First) || !k.Last.Equal(want[keyName].Last) {
		t.Errorf("FetchStats = %+v, Stats = %+v", got, want)
	}
	resp, err := http.Get(s.URL() + "/_stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw map[string]map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"delivered", "throttled", "duplicates", "max_1s", "first", "last"} {
		if _, ok := raw[keyName][f]; !ok {
			t.Errorf("/_stats has no %q: %v", f, raw)
		}
	}
	if _, err := sendgridtest.FetchStats(t.Context(), nil, s.URL()+"/nothing"); err == nil {
		t.Error("FetchStats of a wrong URL: no error")
	}
	if u := sendgridtest.New(sendgridtest.Config{}).URL(); u != "" {
		t.Errorf("URL of New = %q, want empty", u)
	}
}
