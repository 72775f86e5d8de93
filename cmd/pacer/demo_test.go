package main

import (
	"strings"
	"testing"
	"time"
)

// TestDemoFlagsCheckedFirst: a rate or burst the pacer refuses (the AIMD's
// range of rates included) is bad usage, exit 2 naming the flag, before
// anything is started or published.
func TestDemoFlagsCheckedFirst(t *testing.T) {
	for _, c := range []refusal{
		{[]string{"demo", "-rate", "1e12"}, "pacer: demo: -rate: "},
		{[]string{"demo", "-rate", "0"}, "pacer: demo: -rate: "},
		{[]string{"demo", "-burst", "0"}, "pacer: demo: -burst: "},
		{[]string{"demo", "-numbers", "-1"}, "pacer: demo: -numbers -1: must be >= 1"},
		{[]string{"demo", "-partitions", "0", "-messages", "0"}, "pacer: demo: -messages 0, -partitions 0: must be >= 1"},
	} {
		code, out, errs := runCLI(nil, c.args...)
		if code != 2 || out != "" || !strings.HasPrefix(errs, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2, nothing on stdout, %q", c.args, code, out, errs, c.want)
		}
	}
}

// TestDemoPacedRate: the demo judges each key by the rate its messages
// kept after the first burst, and fails a key below minPaced of the
// configured rate. The figures are the FCM demo's before and after the fix
// of its recipient-bucket gate (300 messages at 40 msgs/s, burst 5).
func TestDemoPacedRate(t *testing.T) {
	for _, c := range []struct {
		name             string
		delivered, burst int
		span             time.Duration
		rate, want       float64
		judged, pass     bool
	}{
		{"fcm before: half the rate", 300, 5, 12690 * time.Millisecond, 40, 295 / 12.69, true, false},
		{"fcm after", 300, 5, 7540 * time.Millisecond, 40, 295 / 7.54, true, true},
		{"at the rate exactly", 410, 10, 8 * time.Second, 50, 50, true, true},
		{"89% of the rate", 366, 10, 8 * time.Second, 50, 44.5, true, false},
		{"burst shown above the rate is not counted", 60, 10, time.Second, 50, 50, true, true},
		{"fewer than a second of the rate after the burst", 15, 10, 100 * time.Millisecond, 50, 0, false, true},
		{"one arrival", 1, 10, 0, 50, 0, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, judged := pacedRate(c.delivered, c.burst, c.span, c.rate)
			if judged != c.judged || (judged && (got < c.want-1e-9 || got > c.want+1e-9)) {
				t.Fatalf("pacedRate(%d, %d, %v, %v) = %v, %v; want %v, %v", c.delivered, c.burst, c.span, c.rate, got, judged, c.want, c.judged)
			}
			if pass := !judged || !tooSlow(got, c.rate); pass != c.pass {
				t.Errorf("paced %.2f of %v: pass %v, want %v", got, c.rate, pass, c.pass)
			}
		})
	}
}
