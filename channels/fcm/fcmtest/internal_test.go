package fcmtest

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) func() time.Time { return func() time.Time { return t0.Add(d) } }

// send records one send of project "p" to token at d after t0.
func (s *Server) sendAt(token string, d time.Duration) outcome {
	return s.arrive("p", token, true, "", [32]byte{byte(len(s.arrivals))}, at(d))
}

// TestBucket steps one project through time: burst, refusal, refill, cap.
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
		if got := s.sendAt("tok", st.at) == accepted; got != st.ok {
			t.Fatalf("step %d at %v: accepted %v, want %v", i, st.at, got, st.ok)
		}
	}
	if st := s.Stats()["p"]; st.Delivered != 7 || st.Throttled != 4 || !st.First.Equal(t0) || !st.Last.Equal(t0.Add(10*time.Second)) {
		t.Errorf("stats = %+v", st)
	}
}

// TestDeviceBucket: a device refusal gives the project token back, and a
// dead token keeps it (client errors count against the quota, 429s do not).
func TestDeviceBucket(t *testing.T) {
	s := New(Config{Rate: 0.001, Burst: 3, DeviceRate: 0.001, DeviceBurst: 1, Unregistered: []string{"dead"}})
	for i, st := range []struct {
		token string
		want  outcome
	}{
		{"a", accepted},
		{"a", throttledDevice}, // refunded
		{"a", throttledDevice}, // refunded
		{"b", accepted},
		{"dead", unregistered}, // consumes the last project token
		{"c", throttledProject},
	} {
		if got := s.sendAt(st.token, 0); got != st.want {
			t.Fatalf("step %d (%s): outcome %d, want %d", i, st.token, got, st.want)
		}
	}
	st := s.Stats()["p"]
	if st.Delivered != 2 || st.DeviceThrottled != 2 || st.Unregistered != 1 || st.Throttled != 1 {
		t.Errorf("stats = %+v", st)
	}
	arr := s.Arrivals()
	if len(arr) != 6 || arr[1].Status != 429 || !arr[1].Throttled || arr[4].Status != 404 || arr[4].Throttled || arr[0].Status != 200 {
		t.Errorf("arrivals = %+v", arr)
	}
	if len(s.devices) != 3 { // a, b, dead; c never got past the project
		t.Errorf("%d device buckets, want 3", len(s.devices))
	}
	u := New(Config{})
	u.sendAt("a", 0)
	if len(u.devices) != 0 {
		t.Errorf("an unlimited device rate made %d buckets, want 0", len(u.devices))
	}
}

// TestSetRateKeepsTokens: tokens earned at the old rate stay, up to the new burst.
func TestSetRateKeepsTokens(t *testing.T) {
	s := New(Config{Rate: 1}) // burst 1
	if s.sendAt("t", 0) != accepted || s.sendAt("t", 0) == accepted {
		t.Fatal("burst 1 not enforced")
	}
	s.setRate("p", 10, t0.Add(500*time.Millisecond)) // 0.5 token earned at 1/s; burst 10
	if s.sendAt("t", 500*time.Millisecond) == accepted {
		t.Fatal("allowed with 0.5 tokens")
	}
	if s.sendAt("t", 550*time.Millisecond) != accepted { // 0.5 + 0.05*10 = 1
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
			s := New(Config{})
			var times []time.Time
			for _, d := range c.at {
				s.sendAt("t", d)
				times = append(times, t0.Add(d))
			}
			if got := s.Stats()["p"].Max1s; got != c.want || max1sNaive(times) != c.want {
				t.Errorf("Max1s = %d, naive %d; want %d", got, max1sNaive(times), c.want)
			}
		})
	}
	t.Run("random against naive", func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for range 10 {
			var times []time.Time
			for range 1500 + r.IntN(1000) { // enough to compact the window
				times = append(times, t0.Add(time.Duration(r.Int64N(int64(3*time.Second)))))
			}
			slices.SortFunc(times, time.Time.Compare)
			s := New(Config{})
			for _, tm := range times {
				s.arrive("p", "t", true, "", [32]byte{}, func() time.Time { return tm })
			}
			if got, want := s.Stats()["p"].Max1s, max1sNaive(times); got != want {
				t.Fatalf("Max1s = %d, naive %d", got, want)
			}
		}
	})
}
