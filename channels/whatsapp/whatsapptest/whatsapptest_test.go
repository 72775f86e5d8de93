package whatsapptest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
)

// post sends body to /v21.0/{key}/messages on h and returns the recorded answer.
func post(h http.Handler, key, bearer, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/v21.0/"+key+"/messages", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		r.Header.Set("Authorization", "Bearer "+bearer)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func text(to, id string) string {
	return fmt.Sprintf(`{"messaging_product":"whatsapp","recipient_type":"individual","to":%q,
		"type":"text","text":{"body":"hi"},"biz_opaque_callback_data":%q}`, to, id)
}

func decodeError(t *testing.T, w *httptest.ResponseRecorder) whatsapptest.ErrorBody {
	t.Helper()
	var b whatsapptest.ErrorBody
	if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil {
		t.Fatalf("error body %q: %v", w.Body, err)
	}
	return b
}

// TestLimitEnforced: 2×burst requests at once get exactly burst accepted,
// over real HTTP and from concurrent senders.
func TestLimitEnforced(t *testing.T) {
	const burst = 20
	s := whatsapptest.NewServer(whatsapptest.Config{Rate: 0.001, Burst: burst}) // refills 1 per 1000 s
	defer s.Close()
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i := range 2 * burst {
		wg.Go(func() {
			resp, err := http.Post(s.URL()+"/v21.0/111/messages", "application/json",
				strings.NewReader(text("+15550001", fmt.Sprint("id-", i))))
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			codes[resp.StatusCode]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if codes[200] != burst || codes[429] != burst {
		t.Fatalf("statuses = %v; want %d×200 and %d×429", codes, burst, burst)
	}
	st := s.Stats()["111"]
	if st.Delivered != burst || st.Throttled != burst || st.Duplicates != 0 || st.Max1s != burst {
		t.Errorf("stats = %+v", st)
	}
	if n := len(s.Arrivals()); n != 2*burst {
		t.Errorf("%d arrivals, want %d", n, 2*burst)
	}
	// Another key has its own bucket.
	if w := post(s, "222", "", text("+15550001", "x")); w.Code != 200 {
		t.Errorf("other key: HTTP %d", w.Code)
	}
}

func TestDefaultBurst(t *testing.T) {
	s := whatsapptest.New(whatsapptest.Config{Rate: 2.5}) // burst ceil(2.5) = 3
	ok := 0
	for range 6 {
		if post(s, "k", "", text("+1555", "")).Code == 200 {
			ok++
		}
	}
	if ok != 3 {
		t.Errorf("accepted %d of 6, want 3", ok)
	}
}

func TestUnlimited(t *testing.T) {
	s := whatsapptest.New(whatsapptest.Config{})
	for i := range 500 {
		if w := post(s, "k", "", text("+1555", "")); w.Code != 200 {
			t.Fatalf("request %d: HTTP %d", i, w.Code)
		}
	}
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

// TestDuplicates: an ID accepted twice counts once as a duplicate; a
// throttled request and an empty ID never do, and keys count separately.
func TestDuplicates(t *testing.T) {
	s := whatsapptest.New(whatsapptest.Config{Rate: 0.001, Burst: 4})
	for _, id := range []string{"a", "b", "a", "", ""} { // the 5th is throttled
		post(s, "k", "", text("+1555", id))
	}
	post(s, "k", "", text("+1555", "b")) // throttled, not a duplicate
	post(s, "j", "", text("+1555", "a")) // other key
	st := s.Stats()
	if k := st["k"]; k.Delivered != 4 || k.Throttled != 2 || k.Duplicates != 1 {
		t.Errorf("k: %+v; want 4 delivered, 2 throttled, 1 duplicate", k)
	}
	if j := st["j"]; j.Delivered != 1 || j.Duplicates != 0 {
		t.Errorf("j: %+v; want 1 delivered, 0 duplicates", j)
	}
	arr := s.Arrivals()
	if len(arr) != 7 || arr[2].ID != "a" || arr[4].Throttled != true || arr[6].Key != "j" || arr[0].To != "+1555" {
		t.Errorf("arrivals = %+v", arr)
	}
}

func TestSetRate(t *testing.T) {
	s := whatsapptest.New(whatsapptest.Config{Rate: 0.001, Burst: 1})
	accepted := func(key string) bool { return post(s, key, "", text("+1555", "")).Code == 200 }
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
	s := whatsapptest.New(whatsapptest.Config{Latency: 50 * time.Millisecond})
	start := time.Now()
	post(s, "k", "", text("+1555", ""))
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("answered after %v, want at least 50ms", d)
	}
}

// TestStatsEndpoint: GET /_stats serves Stats, and FetchStats reads it.
func TestStatsEndpoint(t *testing.T) {
	s := whatsapptest.NewServer(whatsapptest.Config{Rate: 0.001, Burst: 2})
	defer s.Close()
	for _, id := range []string{"a", "a", "b"} {
		if _, err := http.Post(s.URL()+"/v21.0/k/messages", "application/json", bytes.NewBufferString(text("+1", id))); err != nil {
			t.Fatal(err)
		}
	}
	got, err := whatsapptest.FetchStats(t.Context(), nil, s.URL()+"/")
	if err != nil {
		t.Fatal(err)
	}
	want := s.Stats()
	k := got["k"]
	if len(got) != 1 || k.Delivered != 2 || k.Throttled != 1 || k.Duplicates != 1 || k.Max1s != 2 ||
		!k.First.Equal(want["k"].First) || !k.Last.Equal(want["k"].Last) {
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
		if _, ok := raw["k"][f]; !ok {
			t.Errorf("/_stats has no %q: %v", f, raw)
		}
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

// TestStrictBucket checks the number's bucket has no slack: exactly Burst
// at once, then one more only when a whole token has been earned (1/Rate),
// counted from the first request.
func TestStrictBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := whatsapptest.New(whatsapptest.Config{Rate: 10, Burst: 3})
		time.Sleep(time.Hour) // a bucket starts at its first request, not at New
		for i, want := range []int{0, 0, 0, 130429} {
			if got := codeOf(t, post(s, "111", "", text("+1555000", fmt.Sprint(i)))); got != want {
				t.Fatalf("request %d at once: code %d, want %d", i, got, want)
			}
		}
		time.Sleep(99 * time.Millisecond) // 0.99 of a token: still refused
		if got := codeOf(t, post(s, "111", "", text("+1555000", "a"))); got != 130429 {
			t.Fatalf("after 99ms: code %d, want 130429", got)
		}
		time.Sleep(time.Millisecond)
		if got := codeOf(t, post(s, "111", "", text("+1555000", "b"))); got != 0 {
			t.Fatalf("after 100ms: code %d, want 0", got)
		}
	})
}

// TestPairLimit checks 131056 per (number, recipient) with Meta's documented
// burst and rate, that other recipients and the number's bucket are
// untouched by it, and the documented body (providers.md §1.4).
func TestPairLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := whatsapptest.New(whatsapptest.Config{Rate: 1000, PairRate: whatsapptest.PairRate, PairBurst: whatsapptest.PairBurst})
		for i := range whatsapptest.PairBurst {
			if got := codeOf(t, post(s, "111", "", text("+1555000", fmt.Sprint(i)))); got != 0 {
				t.Fatalf("pair request %d: code %d, want 0", i, got)
			}
			time.Sleep(10 * time.Millisecond)
		}
		w := post(s, "111", "", text("+1555000", "over"))
		if got := codeOf(t, w); got != 131056 || w.Code != http.StatusTooManyRequests {
			t.Fatalf("46th to one recipient: HTTP %d code %d, want 429 131056", w.Code, got)
		}
		if got := codeOf(t, post(s, "111", "", text("+1555999", "other"))); got != 0 {
			t.Fatalf("another recipient: code %d, want 0", got)
		}
		if got := codeOf(t, post(s, "222", "", text("+1555000", "other number"))); got != 0 {
			t.Fatalf("another number to the same recipient: code %d, want 0", got)
		}
		time.Sleep(6 * time.Second) // one token at 1 per 6 s (less the 0.45 s spent above)
		if got := codeOf(t, post(s, "111", "", text("+1555000", "later"))); got != 0 {
			t.Fatalf("6 s later: code %d, want 0", got)
		}
		if got := codeOf(t, post(s, "111", "", text("+1555000", "again"))); got != 131056 {
			t.Fatalf("at once again: code %d, want 131056", got)
		}
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
			if got := codeOf(t, post(s, key, "", text("+1555000", fmt.Sprint(i)))); got != 0 {
				t.Fatalf("request %d: code %d, want 0", i, got)
			}
			time.Sleep(10 * time.Second)
		}
		w := post(s, "222", "", text("+1555000", "over"))
		if got := codeOf(t, w); got != 80007 || w.Code != http.StatusBadRequest {
			t.Fatalf("4th in the window: HTTP %d code %d, want 400 80007", w.Code, got)
		}
		if got := codeOf(t, post(s, "333", "", text("+1555000", "other account"))); got != 0 {
			t.Fatalf("another account: code %d, want 0", got)
		}
		time.Sleep(30 * time.Second) // the first request (at 0) has left the window
		if got := codeOf(t, post(s, "111", "", text("+1555000", "rolled"))); got != 0 {
			t.Fatalf("after the first left the window: code %d, want 0", got)
		}
		if got := codeOf(t, post(s, "111", "", text("+1555000", "full"))); got != 80007 {
			t.Fatalf("window full again: code %d, want 80007", got)
		}
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
		if got := codeOf(t, post(s, "111", "", text("+1555000", "b"))); got != 130429 {
			t.Fatalf("at the hidden rate: code %d, want 130429", got)
		}
		time.Sleep(time.Second)
		if c := admin("/_admin/fail?key=111&n=1"); c != http.StatusNoContent {
			t.Fatalf("fail: HTTP %d, want 204", c)
		}
		w := post(s, "111", "", text("+1555000", "c"))
		if got := codeOf(t, w); got != 131000 || w.Code != http.StatusInternalServerError {
			t.Fatalf("after FailNext: HTTP %d code %d, want 500 131000", w.Code, got)
		}
		time.Sleep(time.Second)
		if got := codeOf(t, post(s, "111", "", text("+1555000", "d"))); got != 0 {
			t.Fatalf("after the failure: code %d, want 0", got)
		}
		// The 500 is counted as a failure, not as a throttle.
		st := s.Stats()["111"]
		if st.Delivered != 2 || st.Throttled != 1 || st.Failed != 1 {
			t.Errorf("stats %+v, want 2 delivered, 1 throttled (130429), 1 failed (the injected 500)", st)
		}
	})
}
