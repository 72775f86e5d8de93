package whatsapp

import (
	"net/http"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"120", 120 * time.Second},
		{" 5 ", 5 * time.Second},
		{"99999999999999999999", 0}, // overflows uint64: not a number, not a date
		{"18446744073709551615", time.Duration(1<<63-1) / time.Second * time.Second},
		{"-1", 0},
		{"1.5", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},            // IMF-fixdate
		{now.Add(90 * time.Second).Format(time.RFC850), 90 * time.Second},                // obsolete RFC 850
		{now.Add(90 * time.Second).Format("Mon Jan _2 15:04:05 2006"), 90 * time.Second}, // asctime
		{now.Format(http.TimeFormat), 0},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
	} {
		if got := parseRetryAfter(c.in, now); got != c.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

// TestClassifyTable pins the table to providers.md §1.4, so an edit to one
// of them shows up here.
func TestClassifyTable(t *testing.T) {
	want := map[channels.Class][]int{
		channels.Throttle:  {130429, 131056, 80007, 4, 131048},
		channels.Transient: {131057, 2, 131000, 131016, 1},
		channels.Permanent: {131049, 131026, 131047, 131021, 131051, 131053, 100, 131008, 131009, 33, 130472,
			132000, 132001, 132005, 132007, 132012, 132015},
		channels.Halt: {0, 190, 3, 10, 131005, 368, 131031, 131042, 131045},
	}
	for code := 200; code <= 299; code++ {
		want[channels.Halt] = append(want[channels.Halt], code)
	}
	n := 0
	for class, list := range want {
		for _, code := range list {
			r, ok := classify(code)
			if !ok || r.class != class {
				t.Errorf("classify(%d) = %v, %v; want %v", code, r.class, ok, class)
			}
			n++
		}
	}
	if n-100 != len(codes) {
		t.Errorf("codes has %d entries, the test lists %d besides 200-299", len(codes), n-100)
	}
	for _, code := range []int{-1, 5, 199, 300, 133016, 9999999} {
		if r, ok := classify(code); ok {
			t.Errorf("classify(%d) = %v, true; want unknown", code, r)
		}
	}
	scopes := map[int]channels.Scope{130429: channels.ScopeKey, 131056: channels.ScopePair,
		80007: channels.ScopeAccount, 4: channels.ScopeAccount, 131048: channels.ScopeKey}
	for code, s := range scopes {
		if r, _ := classify(code); r.scope != s {
			t.Errorf("classify(%d).scope = %v, want %v", code, r.scope, s)
		}
	}
}
