package channels_test

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
		if got := channels.ParseRetryAfter(c.in, now); got != c.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

// TestClassifyTable pins the table to providers.md §1.4, so an edit to one
// of them shows up here.
func TestParseResetEpoch(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	for _, c := range []struct {
		in   string
		want time.Duration
	}{
		{"1900000030", 30 * time.Second},
		{"1899999999", 0},
		{"", 0},
		{"soon", 0},
		{"-5", 0},
		{"99999999999999999999", 0},
	} {
		if got := channels.ParseResetEpoch(c.in, now); got != c.want {
			t.Errorf("ParseResetEpoch(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}
