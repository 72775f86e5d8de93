package channeltest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pacerhq/pacer/channels/internal/fakeprovider"
	"github.com/pacerhq/pacer/internal/answertime"
)

// FakeKeys are the keys [CheckFake] sends requests of, even numbers of hex
// digits so that a key can be a device token: a fake that must know its
// keys in advance (SendGrid's API keys) is configured with them.
var FakeKeys = []string{"1111", "2222", "0a", "0b", "0c"}

// Fake describes a provider fake (channels/*/*test) to [CheckFake]. C is
// its Config type, S its Server type, K its per-key statistics type and A
// its arrival type.
type Fake[C any, S FakeServer[K, A], K Stats, A any] struct {
	// Config returns the fake's configuration of c: each key earns c.Rate
	// requests per second into a bucket of c.Burst (0: ceil(Rate), at least
	// 1) and each answer waits c.Latency, or a time drawn from c.AnswerTime.
	Config func(c FakeConfig) C
	// New and NewServer are the package's New and NewServer; CheckFake
	// builds the fake with NewServer if c.Listen, else with New, and closes
	// it when the test ends.
	New, NewServer func(C) S
	// FetchStats is the package's FetchStats.
	FetchStats func(ctx context.Context, hc *http.Client, baseURL string) (map[string]K, error)
	// Arrival returns the key of an arrival and whether it was throttled.
	Arrival func(A) (key string, throttled bool)
	// Request returns a valid request of key as the adapter sends it,
	// carrying id where the adapter puts the envelope id (the fake counts
	// duplicates by it; "" for none), its URL relative to the fake's base
	// URL (as httptest.NewRequest makes it). Requests with an empty id
	// differ from each other.
	Request func(key, id string) *http.Request
	// Accepted and Throttled are the HTTP statuses of an accepted request
	// and of one refused by its key's bucket.
	Accepted, Throttled int
	// Check, if set, checks one answer further (body, headers); CheckFake
	// calls it for every answer, from concurrent goroutines.
	Check func(t testing.TB, status int, h http.Header, body []byte)
	// StatsFields are the JSON fields of a key in GET /_stats.
	StatsFields []string
}

// FakeConfig is what [CheckFake] asks of a fake.
type FakeConfig struct {
	Rate    float64       // per key, in requests per second; 0 is unlimited
	Burst   int           // in requests; 0 is ceil(Rate), at least 1
	Latency time.Duration // before each answer
	Listen  bool          // NewServer rather than New
	// AnswerTime, if not zero, is drawn for each answer instead of Latency.
	AnswerTime answertime.Dist
}

// Stats is a fake's per-key statistics: [fakeprovider.KeyStats], or a type
// that embeds it.
type Stats interface {
	Common() fakeprovider.KeyStats
}

// FakeServer is the API every fake's Server has.
type FakeServer[K, A any] interface {
	URL() string
	Client() *http.Client
	Close()
	Handler() http.Handler
	ServeHTTP(http.ResponseWriter, *http.Request)
	Arrivals() []A
	Stats() map[string]K
}

// Request returns a request of method to target with body, as a server
// receives it (httptest.NewRequest), and the headers given in name, value
// pairs; a pair whose value is "" is left out.
func Request(method, target, body string, header ...string) *http.Request {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] != "" {
			r.Header.Set(header[i], header[i+1])
		}
	}
	return r
}

// PostJSON returns a POST of body, a JSON document, to target as a server
// receives it, with the Content-Type application/json and token as a
// bearer token (none if token is ""), then the headers given in name, value
// pairs, as [Request] takes them.
func PostJSON(target, token, body string, header ...string) *http.Request {
	return Request("POST", target, body, append([]string{"Content-Type", "application/json", "Authorization", Bearer(token)}, header...)...)
}

// DecodeBody returns the JSON body of w read as a T, failing t at once if
// it is not one.
func DecodeBody[T any](t testing.TB, w *httptest.ResponseRecorder) T {
	t.Helper()
	var b T
	if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil {
		t.Fatalf("error body %q: %v", w.Body, err)
	}
	return b
}

// Bearer returns the Authorization header value of token, "Bearer " and
// the token, or "" for an empty token.
func Bearer(token string) string {
	if token == "" {
		return ""
	}
	return "Bearer " + token
}

// Serve has h serve r and returns the recorded answer.
func Serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// CheckFake checks what every fake promises, in subtests: that its
// buckets are strict (exactly Burst at once, from concurrent senders over
// HTTP, then one more only when a whole token has been earned, counted from
// the key's first request), per key, of ceil(Rate) by default and unlimited
// at rate 0; that POST /_admin/rate changes a key's rate or every key's;
// that answers wait Config.Latency, or each a time of its own drawn from
// Config.AnswerTime, counted on arrival and waiting side by side; that duplicates are counted by id,
// never for a throttled request or an empty id; and that GET /_stats serves
// Stats, which FetchStats reads.
func CheckFake[C any, S FakeServer[K, A], K Stats, A any](t *testing.T, f Fake[C, S, K, A]) {
	t.Run("limit", func(t *testing.T) { checkLimit(t, f) })
	t.Run("strict", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := f.start(t, FakeConfig{Rate: 10, Burst: 3})
			time.Sleep(time.Hour) // a bucket starts at its key's first request, not at New
			for i, want := range []int{f.Accepted, f.Accepted, f.Accepted, f.Throttled} {
				if got := f.serve(t, s.Handler(), "0a", fmt.Sprint(i)); got != want {
					t.Fatalf("request %d at once: HTTP %d, want %d", i, got, want)
				}
			}
			time.Sleep(99 * time.Millisecond) // 0.99 of a token: still refused
			if got := f.serve(t, s.Handler(), "0a", "a"); got != f.Throttled {
				t.Fatalf("after 99ms: HTTP %d, want %d", got, f.Throttled)
			}
			time.Sleep(time.Millisecond)
			if got := f.serve(t, s.Handler(), "0a", "b"); got != f.Accepted {
				t.Fatalf("after 100ms: HTTP %d, want %d", got, f.Accepted)
			}
		})
	})
	t.Run("default burst", func(t *testing.T) {
		s := f.start(t, FakeConfig{Rate: 2.5}) // burst ceil(2.5) = 3
		ok := 0
		for range 6 {
			if f.serve(t, s, "0a", "") == f.Accepted {
				ok++
			}
		}
		if ok != 3 {
			t.Errorf("accepted %d of 6, want 3", ok)
		}
	})
	t.Run("unlimited", func(t *testing.T) {
		s := f.start(t, FakeConfig{})
		for i := range 500 {
			if got := f.serve(t, s, "0a", ""); got != f.Accepted {
				t.Fatalf("request %d: HTTP %d", i, got)
			}
		}
	})
	t.Run("admin rate", func(t *testing.T) { checkAdminRate(t, f) })
	t.Run("latency", func(t *testing.T) {
		s := f.start(t, FakeConfig{Latency: 50 * time.Millisecond})
		start := time.Now()
		f.serve(t, s, "0a", "")
		if d := time.Since(start); d < 50*time.Millisecond {
			t.Errorf("answered after %v, want at least 50ms", d)
		}
	})
	t.Run("answer time", func(t *testing.T) { synctest.Test(t, func(t *testing.T) { checkAnswerTime(t, f) }) })
	t.Run("duplicates", func(t *testing.T) { checkDuplicates(t, f) })
	t.Run("stats", func(t *testing.T) { checkStats(t, f) })
}

// start builds the fake of c, closed when t ends.
func (f Fake[C, S, K, A]) start(t *testing.T, c FakeConfig) FakeServer[K, A] {
	s := f.New
	if c.Listen {
		s = f.NewServer
	}
	srv := s(f.Config(c))
	t.Cleanup(srv.Close)
	return srv
}

// serve sends the request of key and id to h and returns the status,
// checked by f.Check.
func (f Fake[C, S, K, A]) serve(t testing.TB, h http.Handler, key, id string) int {
	t.Helper()
	w := Serve(h, f.Request(key, id))
	if f.Check != nil {
		f.Check(t, w.Code, w.Header(), w.Body.Bytes())
	}
	return w.Code
}

// send sends the request of key and id to the fake listening at base
// through hc and returns the status, checked by f.Check.
func (f Fake[C, S, K, A]) send(t testing.TB, hc *http.Client, base, key, id string) (int, error) {
	r := f.Request(key, id)
	u, err := url.Parse(base + r.URL.RequestURI())
	if err != nil {
		return 0, err
	}
	r = r.Clone(t.Context())
	r.URL, r.Host, r.RequestURI = u, u.Host, ""
	resp, err := hc.Do(r)
	if err != nil {
		return 0, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if f.Check != nil {
		f.Check(t, resp.StatusCode, resp.Header, body)
	}
	return resp.StatusCode, err
}

// checkLimit: 2×burst requests at once over HTTP, from concurrent senders,
// get exactly burst accepted and burst throttled; another key has a bucket
// of its own.
func checkLimit[C any, S FakeServer[K, A], K Stats, A any](t *testing.T, f Fake[C, S, K, A]) {
	const burst = 20
	s := f.start(t, FakeConfig{Rate: 0.001, Burst: burst, Listen: true}) // refills 1 per 1000 s
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i := range 2 * burst {
		wg.Go(func() {
			code, err := f.send(t, s.Client(), s.URL(), "1111", fmt.Sprint("id-", i))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(codes) != 2 || codes[f.Accepted] != burst || codes[f.Throttled] != burst {
		t.Fatalf("statuses = %v; want %d×%d and %d×%d", codes, burst, f.Accepted, burst, f.Throttled)
	}
	st := s.Stats()["1111"].Common()
	if st.Delivered != burst || st.Throttled != burst || st.Duplicates != 0 || st.Max1s != burst {
		t.Errorf("stats = %+v", st)
	}
	if n := len(s.Arrivals()); n != 2*burst {
		t.Errorf("%d arrivals, want %d", n, 2*burst)
	}
	if got := f.serve(t, s, "2222", "x"); got != f.Accepted {
		t.Errorf("other key: HTTP %d, want %d", got, f.Accepted)
	}
}

// checkAdminRate: POST /_admin/rate sets one key's rate, or every key's
// (current and future), and refuses a rate that is not a number.
func checkAdminRate[C any, S FakeServer[K, A], K Stats, A any](t *testing.T, f Fake[C, S, K, A]) {
	s := f.start(t, FakeConfig{Rate: 0.001, Burst: 1})
	admin := func(query string, want int) {
		t.Helper()
		if w := Serve(s, Request("POST", "/_admin/rate?"+query, "")); w.Code != want {
			t.Fatalf("/_admin/rate?%s: HTTP %d, want %d", query, w.Code, want)
		}
	}
	accepted := func(key string) bool { return f.serve(t, s, key, "") == f.Accepted }
	a, b, c := "0a", "0b", "0c"
	if !accepted(a) || accepted(a) || !accepted(b) || accepted(b) {
		t.Fatal("burst 1 not enforced")
	}
	for _, bad := range []string{"rate=x", "key=0a&rate=NaN", "rate=Inf", "key=0a"} {
		admin(bad, http.StatusBadRequest)
	}
	admin("key=0a&rate=0", http.StatusNoContent) // unlimited for a only
	for range 10 {
		if !accepted(a) {
			t.Fatal("a refused after its rate was set to 0")
		}
	}
	if accepted(b) {
		t.Fatal("b accepted: the rate of a changed b")
	}
	admin("rate=0", http.StatusNoContent) // unlimited for all, and for new keys
	if !accepted(b) || !accepted(c) || !accepted(c) {
		t.Fatal("refused after every rate was set to 0")
	}
}

// checkDuplicates: an id accepted twice counts once as a duplicate; a
// throttled request and an empty id never do, and keys count separately.
func checkDuplicates[C any, S FakeServer[K, A], K Stats, A any](t *testing.T, f Fake[C, S, K, A]) {
	s := f.start(t, FakeConfig{Rate: 0.001, Burst: 4})
	k, j := "0a", "0b"
	type req struct{ key, id string }
	reqs := []req{{k, "a"}, {k, "b"}, {k, "a"}, {k, ""}, {k, ""}, // the 5th is throttled
		{k, "b"}, // throttled, not a duplicate
		{j, "a"}} // another key
	for _, r := range reqs {
		f.serve(t, s, r.key, r.id)
	}
	st := s.Stats()
	if ks := st[k].Common(); ks.Delivered != 4 || ks.Throttled != 2 || ks.Duplicates != 1 {
		t.Errorf("%s: %+v; want 4 delivered, 2 throttled, 1 duplicate", k, ks)
	}
	if js := st[j].Common(); js.Delivered != 1 || js.Duplicates != 0 {
		t.Errorf("%s: %+v; want 1 delivered, 0 duplicates", j, js)
	}
	var got []string
	for _, a := range s.Arrivals() {
		key, throttled := f.Arrival(a)
		got = append(got, fmt.Sprintf("%s %v", key, throttled))
	}
	if want := "[0a false 0a false 0a false 0a false 0a true 0a true 0b false]"; fmt.Sprint(got) != want {
		t.Errorf("arrivals (key, throttled) = %v, want %s", got, want)
	}
}

// checkStats: GET /_stats serves Stats as JSON with the fake's fields,
// FetchStats reads it, and a fake built by New has no URL or Client.
func checkStats[C any, S FakeServer[K, A], K Stats, A any](t *testing.T, f Fake[C, S, K, A]) {
	s := f.start(t, FakeConfig{Rate: 0.001, Burst: 2, Listen: true})
	for _, id := range []string{"a", "a", "b"} {
		if _, err := f.send(t, s.Client(), s.URL(), "0a", id); err != nil {
			t.Fatal(err)
		}
	}
	got, err := f.FetchStats(t.Context(), s.Client(), s.URL()+"/")
	if err != nil {
		t.Fatal(err)
	}
	want := s.Stats()["0a"].Common()
	k := got["0a"].Common()
	if len(got) != 1 || k.Delivered != 2 || k.Throttled != 1 || k.Duplicates != 1 || k.Max1s != 2 ||
		!k.First.Equal(want.First) || !k.Last.Equal(want.Last) {
		t.Errorf("FetchStats = %+v, Stats = %+v", got, s.Stats())
	}
	resp, err := s.Client().Get(s.URL() + "/_stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw map[string]map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil || resp.StatusCode != 200 ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET /_stats: HTTP %d %q: %v", resp.StatusCode, resp.Header.Get("Content-Type"), err)
	}
	for _, field := range f.StatsFields {
		if _, ok := raw["0a"][field]; !ok {
			t.Errorf("/_stats has no %q: %v", field, raw)
		}
	}
	if _, err := f.FetchStats(t.Context(), s.Client(), s.URL()+"/nothing"); err == nil {
		t.Error("FetchStats of a wrong URL: no error")
	}
	if n := f.start(t, FakeConfig{}); n.URL() != "" || n.Client() != nil {
		t.Errorf("a fake built by New: URL %q, Client %v; want none", n.URL(), n.Client())
	}
}

// checkAnswerTime: 40 requests at once to a fake answering in 250-350 ms
// with a bucket of 3 are all counted on arrival, before any answer (3
// accepted, 37 throttled), and each is answered after a time of its own
// within the bounds: together, not one after the other. Run it in a
// synctest bubble.
func checkAnswerTime[C any, S FakeServer[K, A], K Stats, A any](t *testing.T, f Fake[C, S, K, A]) {
	const n = 40
	d, err := answertime.Uniform(250*time.Millisecond, 350*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	s := f.start(t, FakeConfig{Rate: 0.001, Burst: 3, AnswerTime: d})
	start := time.Now()
	took := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			f.serve(t, s.Handler(), "0a", fmt.Sprint("id-", i))
			took[i] = time.Since(start)
		})
	}
	synctest.Wait() // every request is waiting for its answer time
	if got := len(s.Arrivals()); got != n {
		t.Errorf("%d arrivals before any answer, want %d: a fake counts a request on arrival", got, n)
	}
	wg.Wait()
	slices.Sort(took)
	if took[0] < 250*time.Millisecond || took[n-1] > 350*time.Millisecond {
		t.Errorf("answered after %v..%v, want within 250ms-350ms (requests waiting in turn?)", took[0], took[n-1])
	}
	if took[0] == took[n-1] {
		t.Errorf("every answer took %v: the answer time must be drawn per request", took[0])
	}
	if st := s.Stats()["0a"].Common(); st.Delivered != 3 || st.Throttled != n-3 {
		t.Errorf("stats = %+v; want 3 delivered, %d throttled", st, n-3)
	}
}
