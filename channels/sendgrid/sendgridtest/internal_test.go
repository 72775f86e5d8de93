package sendgridtest

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) func() time.Time { return func() time.Time { return t0.Add(d) } }

func arrival(key, id string) Arrival { return Arrival{Key: key, To: "a@example.com", ID: id} }

// TestBucket steps one key through time: burst, refusal with its reset time,
// refill, cap.
func TestBucket(t *testing.T) {
	s := New(Config{Rate: 2, Burst: 3})
	ms := time.Millisecond
	for i, st := range []struct {
		at    time.Duration
		ok    bool
		reset time.Duration // when refused: when the next token is there
	}{
		{0, true, 0}, {0, true, 0}, {0, true, 0}, // burst 3
		{0, false, 500 * ms},
		{499 * ms, false, 500 * ms}, // 0.998 tokens
		{500 * ms, true, 0},         // 1 token
		{500 * ms, false, 1000 * ms},
		{10 * time.Second, true, 0}, {10 * time.Second, true, 0}, {10 * time.Second, true, 0}, // capped at 3
		{10 * time.Second, false, 10500 * ms},
	} {
		v := s.arrive(arrival("k", ""), at(st.at))
		if v.allowed != st.ok || v.limit != 3 {
			t.Fatalf("step %d at %v: allowed %v limit %d, want %v 3", i, st.at, v.allowed, v.limit, st.ok)
		}
		if !st.ok && v.reset.Sub(t0.Add(st.reset)).Abs() > time.Microsecond {
			t.Fatalf("step %d: reset at %v, want %v", i, v.reset.Sub(t0), st.reset)
		}
		if st.ok && v.messageID == "" {
			t.Fatalf("step %d: no message id", i)
		}
	}
	if st := s.Stats()["k"]; st.Delivered != 7 || st.Throttled != 4 || !st.First.Equal(t0) || !st.Last.Equal(t0.Add(10*time.Second)) {
		t.Errorf("stats = %+v", st)
	}
}

func TestCeilUnix(t *testing.T) {
	for _, c := range []struct {
		t    time.Time
		want int64
	}{
		{time.Unix(100, 0), 100},
		{time.Unix(100, 1), 101},
		{time.Unix(100, 999_999_999), 101},
	} {
		if got := ceilUnix(c.t); got != c.want {
			t.Errorf("ceilUnix(%v) = %d, want %d", c.t, got, c.want)
		}
	}
}

// TestSetRateKeepsTokens: tokens earned at the old rate stay, up to the new burst.
func TestSetRateKeepsTokens(t *testing.T) {
	s := New(Config{Rate: 1}) // burst 1
	if !s.arrive(arrival("k", ""), at(0)).allowed || s.arrive(arrival("k", ""), at(0)).allowed {
		t.Fatal("burst 1 not enforced")
	}
	s.setRate("k", 10, t0.Add(500*time.Millisecond)) // 0.5 token earned at 1/s; burst 10
	if s.arrive(arrival("k", ""), at(500*time.Millisecond)).allowed {
		t.Fatal("allowed with 0.5 tokens")
	}
	if !s.arrive(arrival("k", ""), at(550*time.Millisecond)).allowed { // 0.5 + 0.05*10 = 1
		t.Fatal("refused with 1 token")
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
	ms := time.Millisecond
	for _, c := range []struct {
		name string
		at   []time.Duration
		want int
	}{
		{"one", []time.Duration{0}, 1},
		{"exactly 1s apart", []time.Duration{0, 1000 * ms, 2000 * ms}, 1},
		{"just under 1s", []time.Duration{0, 999 * ms}, 2},
		{"window slides", []time.Duration{0, 100 * ms, 900 * ms, 1050 * ms, 1099 * ms, 1100 * ms}, 4},
		{"same instant", []time.Duration{7, 7, 7, 7, 7}, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := New(Config{}) // unlimited: every arrival is accepted
			var times []time.Time
			for _, d := range c.at {
				s.arrive(arrival("k", ""), at(d))
				times = append(times, t0.Add(d))
			}
			if got := s.Stats()["k"].Max1s; got != c.want || max1sNaive(times) != c.want {
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
			s := New(Config{})
			for _, tm := range times {
				s.arrive(arrival("k", ""), func() time.Time { return tm })
			}
			if got, want := s.Stats()["k"].Max1s, max1sNaive(times); got != want {
				t.Fatalf("Max1s = %d, naive %d", got, want)
			}
		}
	})
	t.Run("throttled arrivals do not count", func(t *testing.T) {
		s := New(Config{Rate: 0.001, Burst: 2})
		for range 10 {
			s.arrive(arrival("k", ""), at(0))
		}
		if got := s.Stats()["k"].Max1s; got != 2 {
			t.Errorf("Max1s = %d, want 2", got)
		}
	})
}
