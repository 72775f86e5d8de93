package sendgridtest

import (
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) func() time.Time { return func() time.Time { return t0.Add(d) } }

// TestVerdict steps one key through time and checks what a verdict carries
// for the X-RateLimit headers and X-Message-Id. The bucket itself is
// tested in package fakeprovider.
func TestVerdict(t *testing.T) {
	s := New(Config{Rate: 2, Burst: 2})
	ms := time.Millisecond
	for i, st := range []struct {
		at    time.Duration
		ok    bool
		reset time.Duration // when refused: when the next token is there
	}{
		{0, true, 0}, {0, true, 0}, // burst 2
		{0, false, 500 * ms},
		{499 * ms, false, 500 * ms}, // 0.998 tokens
		{500 * ms, true, 0},
	} {
		v := s.arrive(Arrival{Key: "k", To: "a@example.com"}, at(st.at))
		if v.allowed != st.ok || v.limit != 2 || (v.messageID != "") != st.ok {
			t.Fatalf("step %d at %v: verdict %+v, want allowed %v limit 2", i, st.at, v, st.ok)
		}
		if !st.ok && v.reset.Sub(t0.Add(st.reset)).Abs() > time.Microsecond {
			t.Fatalf("step %d: reset at %v, want %v", i, v.reset.Sub(t0), st.reset)
		}
	}
	if st := s.Stats()["k"]; st.Delivered != 3 || st.Throttled != 2 || !st.First.Equal(t0) || !st.Last.Equal(t0.Add(500*ms)) {
		t.Errorf("stats = %+v", st)
	}
	if a := s.Arrivals(); len(a) != 5 || !a[2].Throttled || a[2].MessageID != "" || a[4].MessageID == "" {
		t.Errorf("arrivals = %+v", a)
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
