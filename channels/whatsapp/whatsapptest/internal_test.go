package whatsapptest

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) func() time.Time { return func() time.Time { return t0.Add(d) } }

// TestBucket steps one key through time: burst, refusal, refill, cap.
func TestBucket(t *testing.T) {
	s := New(Config{Rate: 2, Burst: 3})
	ms := time.Millisecond
	for i, st := range []struct {
		at time.Duration
		ok bool
	}{
		{0, true}, {0, true}, {0, true}, // burst 3
		{0, false},
		{499 * ms, false}, // 0.998 tokens
		{500 * ms, true},  // 1 token
		{500 * ms, false},
		{10 * time.Second, true}, {10 * time.Second, true}, {10 * time.Second, true}, // capped at 3
		{10 * time.Second, false},
	} {
		if got := s.arrive("k", "+1", "", at(st.at)); got != st.ok {
			t.Fatalf("step %d at %v: allowed %v, want %v", i, st.at, got, st.ok)
		}
	}
	if st := s.Stats()["k"]; st.Delivered != 7 || st.Throttled != 4 || !st.First.Equal(t0) || !st.Last.Equal(t0.Add(10*time.Second)) {
		t.Errorf("stats = %+v", st)
	}
}

// TestSetRateKeepsTokens: tokens earned at the old rate stay, up to the new burst.
func TestSetRateKeepsTokens(t *testing.T) {
	s := New(Config{Rate: 1}) // burst 1
	if !s.arrive("k", "+1", "", at(0)) || s.arrive("k", "+1", "", at(0)) {
		t.Fatal("burst 1 not enforced")
	}
	s.setRate("k", 10, t0.Add(500*time.Millisecond)) // 0.5 token earned at 1/s; burst 10
	if s.arrive("k", "+1", "", at(500*time.Millisecond)) {
		t.Fatal("allowed with 0.5 tokens")
	}
	if !s.arrive("k", "+1", "", at(550*time.Millisecond)) { // 0.5 + 0.05*10 = 1
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
		{"burst later", []time.Duration{0, 1, 2, 5 * time.Second, 5*time.Second + 1, 5*time.Second + 2, 5*time.Second + 3}, 4},
		{"same instant", []time.Duration{7, 7, 7, 7, 7}, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := New(Config{}) // unlimited: every arrival is accepted
			var times []time.Time
			for _, d := range c.at {
				s.arrive("k", "+1", "", at(d))
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
				s.arrive("k", "+1", "", func() time.Time { return tm })
			}
			if got, want := s.Stats()["k"].Max1s, max1sNaive(times); got != want {
				t.Fatalf("Max1s = %d, naive %d", got, want)
			}
		}
	})
	t.Run("throttled arrivals do not count", func(t *testing.T) {
		s := New(Config{Rate: 0.001, Burst: 2})
		for range 10 {
			s.arrive("k", "+1", "", at(0))
		}
		if got := s.Stats()["k"].Max1s; got != 2 {
			t.Errorf("Max1s = %d, want 2", got)
		}
	})
}
