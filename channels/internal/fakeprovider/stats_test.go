package fakeprovider

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRecord steps one key through accepted, throttled and duplicate
// requests.
func TestRecord(t *testing.T) {
	var s Stats
	for _, r := range []struct {
		at        time.Duration // since t0
		id        string
		throttled bool
	}{
		{0, "a", false},
		{0, "a", true}, // throttled: neither delivered nor a duplicate
		{100 * ms, "a", false},
		{200 * ms, "", false}, // no id: never a duplicate
		{300 * ms, "", false},
		{400 * ms, "b", false},
		{5 * time.Second, "a", false},
		{6 * time.Second, "c", true},
	} {
		s.Record("k", r.id, t0.Add(r.at), r.throttled)
	}
	want := KeyStats{Delivered: 6, Throttled: 2, Duplicates: 2, Max1s: 5, First: t0, Last: t0.Add(5 * time.Second)}
	if got := s.Snapshot()["k"]; got != want {
		t.Errorf("stats = %+v, want %+v", got, want)
	}
	if !s.Has("k") || s.Has("other") || len(s.Snapshot()) != 1 {
		t.Errorf("keys = %v", s.Snapshot())
	}
}

// TestThrottledOnly: a key with only refusals is known, with zero First and
// Last.
func TestThrottledOnly(t *testing.T) {
	var s Stats
	for range 10 {
		s.Record("k", "", t0, true)
	}
	if got := s.Snapshot()["k"]; got != (KeyStats{Throttled: 10}) {
		t.Errorf("stats = %+v", got)
	}
}

// max1sNaive is the definition: the most times in any window [t, t+1s),
// counted by binary search over sorted times.
func max1sNaive(times []time.Time) int {
	times = slices.SortedFunc(slices.Values(times), time.Time.Compare)
	best := 0
	for _, a := range times {
		from, _ := slices.BinarySearchFunc(times, a, time.Time.Compare)
		to, _ := slices.BinarySearchFunc(times, a.Add(time.Second), time.Time.Compare)
		best = max(best, to-from)
	}
	return best
}

func TestMax1s(t *testing.T) {
	for _, c := range []struct {
		name string
		at   []time.Duration
		want int
	}{
		{"one", []time.Duration{0}, 1},
		{"exactly 1s apart", []time.Duration{0, 1000 * ms, 2000 * ms}, 1},
		{"just under 1s", []time.Duration{0, 999 * ms}, 2},
		{"window slides", []time.Duration{0, 100 * ms, 900 * ms, 1050 * ms, 1099 * ms, 1100 * ms}, 4},
		{"burst later", []time.Duration{0, 1, 2, 5 * time.Second, 5*time.Second + 1, 5*time.Second + 2, 5*time.Second + 3}, 4},
		{"same instant", []time.Duration{7, 7, 7, 7, 7}, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			var s Stats
			var times []time.Time
			for _, d := range c.at {
				s.Record("k", "", t0.Add(d), false)
				times = append(times, t0.Add(d))
			}
			if got := s.Snapshot()["k"].Max1s; got != c.want || max1sNaive(times) != c.want {
				t.Errorf("Max1s = %d, naive %d; want %d", got, max1sNaive(times), c.want)
			}
		})
	}
	t.Run("random against naive", func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for range 20 {
			var times []time.Time
			for range 1500 + r.IntN(1000) { // enough to compact the window
				times = append(times, t0.Add(time.Duration(r.Int64N(int64(3*time.Second)))))
			}
			slices.SortFunc(times, time.Time.Compare)
			var s Stats
			for _, tm := range times {
				s.Record("k", "", tm, false)
			}
			if got, want := s.Snapshot()["k"].Max1s, max1sNaive(times); got != want {
				t.Fatalf("Max1s = %d, naive %d", got, want)
			}
		}
	})
	t.Run("throttled requests do not count", func(t *testing.T) {
		var s Stats
		for i := range 10 {
			s.Record("k", "", t0, i >= 2)
		}
		if got := s.Snapshot()["k"].Max1s; got != 2 {
			t.Errorf("Max1s = %d, want 2", got)
		}
	})
}

// TestStatsRoundTrip serves a snapshot with StatsHandler and reads it back
// with FetchStats.
func TestStatsRoundTrip(t *testing.T) {
	var s Stats
	s.Record("k", "a", t0, false)
	s.Record("k", "a", t0.Add(ms), false)
	s.Record("j", "", t0, true)
	ts := httptest.NewServer(StatsHandler(s.Snapshot))
	defer ts.Close()

	got, err := FetchStats[map[string]KeyStats](t.Context(), nil, ts.URL+"/", "faketest")
	if err != nil {
		t.Fatal(err)
	}
	want := s.Snapshot()
	if len(got) != len(want) {
		t.Fatalf("FetchStats = %+v, want %+v", got, want)
	}
	for k, w := range want {
		if g := got[k]; g.Delivered != w.Delivered || g.Throttled != w.Throttled || g.Duplicates != w.Duplicates ||
			g.Max1s != w.Max1s || !g.First.Equal(w.First) || !g.Last.Equal(w.Last) {
			t.Errorf("%s: got %+v, want %+v", k, g, w)
		}
	}

	resp, err := http.Get(ts.URL + "/_stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	var raw map[string]map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"delivered", "throttled", "duplicates", "max_1s", "first", "last"} {
		if _, ok := raw["k"][f]; !ok {
			t.Errorf("field %q missing from %v", f, raw["k"])
		}
	}
}

func TestFetchStatsErrors(t *testing.T) {
	for _, c := range []struct {
		name    string
		handler http.HandlerFunc
		want    string
	}{
		{"status", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }, "faketest: fetch stats: HTTP 418"},
		{"body", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("{")) }, "faketest: fetch stats: unexpected EOF"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts := httptest.NewServer(c.handler)
			defer ts.Close()
			m, err := FetchStats[map[string]KeyStats](t.Context(), ts.Client(), ts.URL, "faketest")
			if err == nil || err.Error() != c.want || m != nil {
				t.Errorf("FetchStats = %v, %v; want nil, %q", m, err, c.want)
			}
		})
	}
	if _, err := FetchStats[map[string]KeyStats](t.Context(), nil, "http://\x00", "faketest"); err == nil || !strings.HasPrefix(err.Error(), "faketest: fetch stats: ") {
		t.Errorf("bad URL: err = %v", err)
	}
}

// TestExtend: each key of extra gets its shared statistics joined with its
// extra counts; a key only s has is left out, one only extra has gets zero
// shared statistics.
func TestExtend(t *testing.T) {
	var s Stats
	at := time.Unix(1000, 0)
	s.Record("a", "", at, false)
	s.Record("a", "", at, true)
	s.Record("only-s", "", at, false)
	type both struct {
		KeyStats
		Extra int
	}
	got := Extend(&s, map[string]int{"a": 7, "only-extra": 2}, func(k KeyStats, e int) both { return both{k, e} })
	if len(got) != 2 || got["a"].Delivered != 1 || got["a"].Throttled != 1 || got["a"].Extra != 7 ||
		got["only-extra"].Delivered != 0 || got["only-extra"].Extra != 2 {
		t.Errorf("Extend = %+v", got)
	}
}
