package fcmtest

import (
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) func() time.Time { return func() time.Time { return t0.Add(d) } }

// sendAt records one send of project "p" to token at d after t0.
func (s *Server) sendAt(token string, d time.Duration) outcome {
	return s.arrive("p", token, true, "", [32]byte{byte(len(s.Arrivals()))}, at(d))
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
	if s.devices.Len() != 3 { // a, b, dead; c never got past the project
		t.Errorf("%d device buckets, want 3", s.devices.Len())
	}
	u := New(Config{})
	u.sendAt("a", 0)
	if u.devices.Len() != 0 {
		t.Errorf("an unlimited device rate made %d buckets, want 0", u.devices.Len())
	}
}
