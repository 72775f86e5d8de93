package whatsapptest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pacerhq/pacer/channels/internal/channeltest"
	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
)

// request returns a request of body to /v21.0/{key}/messages with the
// bearer token (none if ""), as the whatsapp adapter sends it.
func request(key, bearer, body string) *http.Request {
	return channeltest.PostJSON("/v21.0/"+key+"/messages", bearer, body)
}

// post sends body to /v21.0/{key}/messages on h and returns the recorded answer.
func post(h http.Handler, key, bearer, body string) *httptest.ResponseRecorder {
	return channeltest.Serve(h, request(key, bearer, body))
}

func text(to, id string) string {
	return fmt.Sprintf(`{"messaging_product":"whatsapp","recipient_type":"individual","to":%q,
		"type":"text","text":{"body":"hi"},"biz_opaque_callback_data":%q}`, to, id)
}

func decodeError(t *testing.T, w *httptest.ResponseRecorder) whatsapptest.ErrorBody {
	t.Helper()
	return channeltest.DecodeBody[whatsapptest.ErrorBody](t, w)
}

// TestFake runs the checks every fake passes.
func TestFake(t *testing.T) {
	channeltest.CheckFake(t, channeltest.Fake[whatsapptest.Config, *whatsapptest.Server, whatsapptest.KeyStats, whatsapptest.Arrival]{
		Config: func(c channeltest.FakeConfig) whatsapptest.Config {
			return whatsapptest.Config{Rate: c.Rate, Burst: c.Burst, Latency: c.Latency, AnswerTime: c.AnswerTime}
		},
		New: whatsapptest.New, NewServer: whatsapptest.NewServer, FetchStats: whatsapptest.FetchStats,
		Request: func(key, id string) *http.Request {
			return request(key, "", text("+1555000", id))
		},
		Accepted: http.StatusOK, Throttled: http.StatusTooManyRequests,
		Arrival: func(a whatsapptest.Arrival) (string, bool) { return a.Key, a.Throttled },
		Check: func(t testing.TB, status int, h http.Header, body []byte) {
			if ct := h.Get("Content-Type"); ct != "application/json" {
				t.Errorf("HTTP %d: Content-Type %q", status, ct)
			}
			var b whatsapptest.ErrorBody
			if err := json.Unmarshal(body, &b); err != nil || (status == 200) != (b.Error.Code == 0) ||
				(status == 429 && b.Error.Code != 130429) {
				t.Errorf("HTTP %d %s: want 130429 for a 429, no error for a 200", status, body)
			}
		},
		StatsFields: []string{"delivered", "throttled", "failed", "duplicates", "max_1s", "first", "last"},
	})
}

// TestThrottleBody: beyond the bucket the fake answers Meta's 130429 body.
func TestThrottleBody(t *testing.T) {
	for _, c := range []struct {
		status, want int
	}{{0, 429}, {400, 400}} {
		s := whatsapptest.New(whatsapptest.Config{Rate: 0.001, Burst: 1, ThrottleStatus: c.status})
		post(s, "k", "", text("+1555", "a"))
		w := post(s, "k", "", text("+1555", "b"))
		if w.Code != c.want || w.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("HTTP %d %q, want %d application/json", w.Code, w.Header().Get("Content-Type"), c.want)
		}
		b := decodeError(t, w).Error
		if b.Code != 130429 || b.Type != "OAuthException" || b.Message != "(#130429) Rate limit hit" ||
			b.ErrorData == nil || b.ErrorData.MessagingProduct != "whatsapp" ||
			b.ErrorData.Details != "Cloud API message throughput has been reached." || b.FBTraceID == "" {
			t.Errorf("body = %s", w.Body)
		}
		if a := s.Arrivals(); len(a) != 2 || a[0].ID != "a" || a[0].Throttled || a[1].ID != "b" || !a[1].Throttled ||
			a[1].Code != 130429 || a[1].Key != "k" || a[1].To != "+1555" {
			t.Errorf("arrivals = %+v", a)
		}
	}
}

func TestSuccessBody(t *testing.T) {
	s := whatsapptest.New(whatsapptest.Config{})
	ids := map[string]bool{}
	for range 100 {
		w := post(s, "k", "", text("+16505551234", ""))
		var b struct {
			MessagingProduct string `json:"messaging_product"`
			Contacts         []struct {
				Input string `json:"input"`
				WaID  string `json:"wa_id"`
			} `json:"contacts"`
			Messages []struct {
				ID            string `json:"id"`
				MessageStatus string `json:"message_status"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil || w.Code != 200 {
			t.Fatalf("HTTP %d %s: %v", w.Code, w.Body, err)
		}
		if b.MessagingProduct != "whatsapp" || len(b.Contacts) != 1 || b.Contacts[0].Input != "+16505551234" ||
			b.Contacts[0].WaID != "16505551234" || len(b.Messages) != 1 || b.Messages[0].MessageStatus != "accepted" ||
			!strings.HasPrefix(b.Messages[0].ID, "wamid.") {
			t.Fatalf("body = %s", w.Body)
		}
		if ids[b.Messages[0].ID] {
			t.Fatalf("wamid %s repeated", b.Messages[0].ID)
		}
		ids[b.Messages[0].ID] = true
	}
	// Another server gives other wamids.
	w := post(whatsapptest.New(whatsapptest.Config{}), "k", "", text("+1555", ""))
	for id := range ids {
		if strings.Contains(w.Body.String(), id) {
			t.Fatalf("second server repeated wamid %s", id)
		}
	}
}

func TestAuth(t *testing.T) {
	s := whatsapptest.New(whatsapptest.Config{Token: "good"})
	for _, bearer := range []string{"", "bad", "good "} {
		w := post(s, "k", bearer, text("+1555", ""))
		if w.Code != 401 || decodeError(t, w).Error.Code != 190 {
			t.Errorf("token %q: HTTP %d %s; want 401 code 190", bearer, w.Code, w.Body)
		}
	}
	if w := post(s, "k", "good", text("+1555", "")); w.Code != 200 {
		t.Errorf("good token: HTTP %d %s", w.Code, w.Body)
	}
	if n := len(s.Arrivals()); n != 1 {
		t.Errorf("%d arrivals, want 1 (refused requests are not recorded)", n)
	}
}

func TestValidation(t *testing.T) {
	s := whatsapptest.New(whatsapptest.Config{})
	for _, body := range []string{
		``,
		`not json`,
		`[1]`,
		`null`,
		`{"to":"+1555"}`,
		`{"messaging_product":"sms","to":"+1555"}`,
		`{"messaging_product":"whatsapp"}`,
		`{"messaging_product":"whatsapp","to":""}`,
		`{"messaging_product":"whatsapp","to":15550001}`,
	} {
		w := post(s, "k", "", body)
		if w.Code != 400 || decodeError(t, w).Error.Code != 100 {
			t.Errorf("body %q: HTTP %d %s; want 400 code 100", body, w.Code, w.Body)
		}
	}
	if n := len(s.Arrivals()); n != 0 {
		t.Errorf("%d arrivals, want 0", n)
	}
	r := httptest.NewRequest("GET", "/v21.0/k/messages", nil)
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	if w.Code != 400 || decodeError(t, w).Error.Code != 100 {
		t.Errorf("GET messages: HTTP %d %s; want 400 code 100", w.Code, w.Body)
	}
}

// codeOf returns the error.code of an answer, 0 for a 200.
func codeOf(t *testing.T, w *httptest.ResponseRecorder) int {
	t.Helper()
	if w.Code == http.StatusOK {
		return 0
	}
	return decodeError(t, w).Error.Code
}

// wantCode posts a text to to with envelope id id from key on s and fails t
// at once unless the answer's Graph error code is want (0: accepted); what
// names the request in the failure.
func wantCode(t *testing.T, s http.Handler, key, to, id string, want int, what string) {
	t.Helper()
	if got := codeOf(t, post(s, key, "", text(to, id))); got != want {
		t.Fatalf("%s: code %d, want %d", what, got, want)
	}
}

// TestPairLimit checks 131056 per (number, recipient) with Meta's documented
// burst and rate, that other recipients and the number's bucket are
// untouched by it, and the documented body (providers.md §1.4).
func TestPairLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := whatsapptest.New(whatsapptest.Config{Rate: 1000, PairRate: whatsapptest.PairRate, PairBurst: whatsapptest.PairBurst})
		for i := range whatsapptest.PairBurst {
			wantCode(t, s, "111", "+1555000", fmt.Sprint(i), 0, fmt.Sprintf("pair request %d", i))
			time.Sleep(10 * time.Millisecond)
		}
		w := post(s, "111", "", text("+1555000", "over"))
		if got := codeOf(t, w); got != 131056 || w.Code != http.StatusTooManyRequests {
			t.Fatalf("46th to one recipient: HTTP %d code %d, want 429 131056", w.Code, got)
		}
		wantCode(t, s, "111", "+1555999", "other", 0, "another recipient")
		wantCode(t, s, "222", "+1555000", "other number", 0, "another number to the same recipient")
		time.Sleep(6 * time.Second) // one token at 1 per 6 s (less the 0.45 s spent above)
		wantCode(t, s, "111", "+1555000", "later", 0, "6 s later")
		wantCode(t, s, "111", "+1555000", "again", 131056, "at once again")
		st := s.Stats()["111"]
		if st.Delivered != whatsapptest.PairBurst+2 || st.Throttled != 2 {
			t.Fatalf("stats %+v, want %d delivered and 2 throttled", st, whatsapptest.PairBurst+2)
		}
	})
}

// TestAccountLimit checks 80007 over a rolling window shared by the numbers
// of one account, and not by a number of another account.
func TestAccountLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := whatsapptest.New(whatsapptest.Config{AccountLimit: 3, AccountWindow: time.Minute,
			Accounts: map[string]string{"111": "waba-1", "222": "waba-1"}})
		for i, key := range []string{"111", "222", "111"} {
			wantCode(t, s, key, "+1555000", fmt.Sprint(i), 0, fmt.Sprintf("request %d", i))
			time.Sleep(10 * time.Second)
		}
		w := post(s, "222", "", text("+1555000", "over"))
		if got := codeOf(t, w); got != 80007 || w.Code != http.StatusBadRequest {
			t.Fatalf("4th in the window: HTTP %d code %d, want 400 80007", w.Code, got)
		}
		wantCode(t, s, "333", "+1555000", "other account", 0, "another account")
		time.Sleep(30 * time.Second) // the first request (at 0) has left the window
		wantCode(t, s, "111", "+1555000", "rolled", 0, "after the first left the window")
		wantCode(t, s, "111", "+1555000", "full", 80007, "window full again")
	})
}

// TestAdmin checks the run-time endpoints: a hidden lower rate and 5xx.
func TestAdmin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := whatsapptest.New(whatsapptest.Config{Rate: 100, Burst: 1})
		admin := func(path string) int {
			r := httptest.NewRequest("POST", path, nil)
			w := httptest.NewRecorder()
			s.ServeHTTP(w, r)
			return w.Code
		}
		if c := admin("/_admin/rate?rate=x"); c != http.StatusBadRequest {
			t.Fatalf("bad rate: HTTP %d, want 400", c)
		}
		if c := admin("/_admin/rate?key=111&rate=1"); c != http.StatusNoContent {
			t.Fatalf("rate: HTTP %d, want 204", c)
		}
		post(s, "111", "", text("+1555000", "a"))
		time.Sleep(500 * time.Millisecond) // 100/s would have refilled; 1/s has not
		wantCode(t, s, "111", "+1555000", "b", 130429, "at the hidden rate")
		time.Sleep(time.Second)
		if c := admin("/_admin/fail?key=111&n=1"); c != http.StatusNoContent {
			t.Fatalf("fail: HTTP %d, want 204", c)
		}
		w := post(s, "111", "", text("+1555000", "c"))
		if got := codeOf(t, w); got != 131000 || w.Code != http.StatusInternalServerError {
			t.Fatalf("after FailNext: HTTP %d code %d, want 500 131000", w.Code, got)
		}
		time.Sleep(time.Second)
		wantCode(t, s, "111", "+1555000", "d", 0, "after the failure")
		// The 500 is counted as a failure, not as a throttle.
		st := s.Stats()["111"]
		if st.Delivered != 2 || st.Throttled != 1 || st.Failed != 1 {
			t.Errorf("stats %+v, want 2 delivered, 1 throttled (130429), 1 failed (the injected 500)", st)
		}
	})
}

func template(to, id string) string {
	return fmt.Sprintf(`{"messaging_product":"whatsapp","to":%q,"type":"template",
		"template":{"name":"offer","language":{"code":"en"}},"biz_opaque_callback_data":%q}`, to, id)
}

// TestMessagingLimit checks the messaging limit of a business portfolio
// (providers.md §1.1 [W-ML]): unique recipients of templates over a moving
// window, shared by the portfolio's numbers; a template to a new
// recipient past the tier is accepted synchronously (200) and marked to
// fail later; a recipient in the window, a free-form message and another
// portfolio are not limited; a recipient counts until the window after
// its last template.
func TestMessagingLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := whatsapptest.New(whatsapptest.Config{MessagingLimit: 2, MessagingWindow: time.Hour,
			Portfolios: map[string]string{"111": "p", "222": "p"}})
		send := func(key, body string) {
			t.Helper()
			if w := post(s, key, "", body); w.Code != http.StatusOK {
				t.Fatalf("HTTP %d %s, want 200: the limit refuses nothing synchronously", w.Code, w.Body)
			}
		}
		send("111", template("+1555001", "a"))
		time.Sleep(30 * time.Minute)
		send("222", template("+1555002", "b")) // the portfolio's second number
		send("111", template("+1555003", "c")) // past the tier: accepted, fails later
		send("222", text("+1555004", "d"))     // free-form: not counted
		send("333", template("+1555005", "e")) // a portfolio of its own
		send("222", template("+1555001", "f")) // in the window: refreshed at 30 min
		if got := s.MessagingLimit("p"); got != (whatsapptest.MessagingLimitStats{Recipients: 2, OverLimit: 1}) {
			t.Fatalf("portfolio p: %+v, want 2 recipients and 1 over the limit", got)
		}
		time.Sleep(time.Hour) // +1555002 (30 min) and +1555001 (refreshed at 30 min) left
		send("111", template("+1555003", "g"))
		if got := s.MessagingLimit("p"); got != (whatsapptest.MessagingLimitStats{Recipients: 1, OverLimit: 1}) {
			t.Fatalf("portfolio p after the window: %+v, want 1 recipient, still 1 over the limit", got)
		}
		over := map[string]bool{}
		for _, a := range s.Arrivals() {
			if a.OverLimit {
				over[a.ID] = true
			}
			if a.Template == (a.ID == "d") {
				t.Errorf("arrival %s: Template %v", a.ID, a.Template)
			}
		}
		if len(over) != 1 || !over["c"] {
			t.Fatalf("over the limit: %v, want only c", over)
		}
	})
}
