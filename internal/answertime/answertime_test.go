package answertime

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// quantiles draws n answer times from d with a fixed seed and returns them
// sorted.
func sorted(d Dist, n int) []time.Duration {
	r := rand.New(rand.NewPCG(1, 2))
	s := make([]time.Duration, n)
	for i := range s {
		s[i] = d.DrawFrom(r)
	}
	slices.Sort(s)
	return s
}

func within(t *testing.T, what string, got, want time.Duration, frac float64) {
	t.Helper()
	if d := float64(got - want); d > frac*float64(want) || -d > frac*float64(want) {
		t.Errorf("%s = %v, want %v within %.0f%%", what, got, want, frac*100)
	}
}

// TestDistributions: 100,000 draws of each shape have the parameters
// asked for: a fixed one is always its value, a uniform one stays in its
// bounds and fills them (min, max, median), a log-normal one has the
// median and 99th percentile it was given.
func TestDistributions(t *testing.T) {
	const n = 100_000
	if s := sorted(Fixed(300*time.Millisecond), n); s[0] != 300*time.Millisecond || s[n-1] != 300*time.Millisecond {
		t.Errorf("fixed 300ms drew %v..%v", s[0], s[n-1])
	}
	u, err := Uniform(250*time.Millisecond, 350*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	s := sorted(u, n)
	if s[0] < 250*time.Millisecond || s[n-1] > 350*time.Millisecond {
		t.Errorf("uniform 250-350ms drew %v..%v, outside its bounds", s[0], s[n-1])
	}
	within(t, "uniform min", s[0], 250*time.Millisecond, 0.01)
	within(t, "uniform max", s[n-1], 350*time.Millisecond, 0.01)
	within(t, "uniform median", s[n/2], 300*time.Millisecond, 0.01)
	within(t, "uniform p10", s[n/10], 260*time.Millisecond, 0.01)

	l, err := LogNormal(300*time.Millisecond, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s = sorted(l, n)
	within(t, "log-normal median", s[n/2], 300*time.Millisecond, 0.02)
	within(t, "log-normal p99", s[n*99/100], 2*time.Second, 0.05)
	within(t, "log-normal p90", s[n*9/10], 853*time.Millisecond, 0.05) // 300ms * exp(1.2816 * 0.8155)
	if s[0] <= 0 {
		t.Errorf("log-normal drew %v", s[0])
	}
	if l.Median() != 300*time.Millisecond || u.Median() != 300*time.Millisecond {
		t.Errorf("Median = %v, %v; want 300ms", l.Median(), u.Median())
	}
	if !(Dist{}).IsZero() || Fixed(time.Millisecond).IsZero() || (Dist{}).Draw() != 0 {
		t.Errorf("the zero Dist must answer at once, a fixed 1ms must not be zero")
	}
}

// TestParse: each form reads back to what String prints, and bad input
// is refused with an error that quotes it and names the forms.
func TestParse(t *testing.T) {
	for in, want := range map[string]string{
		"300ms":                  "300ms",
		"0":                      "0s",
		"250ms-350ms":            "250ms-350ms",
		"1s-1s":                  "1s-1s",
		"lognormal:300ms,p99=2s": "lognormal:300ms,p99=2s",
	} {
		d, err := Parse(in)
		if err != nil || d.String() != want {
			t.Errorf("Parse(%q) = %v, %v; want %s", in, d, err, want)
		}
		var f Dist
		if err := f.Set(in); err != nil || f != d {
			t.Errorf("Set(%q) = %v, %v; want %v", in, f, err, d)
		}
	}
	for in, want := range map[string]string{
		"fast":                     "want a duration",
		"-5ms":                     "want a duration >= 0",
		"350ms-250ms":              "0 <= low <= high",
		"250ms-":                   "want a duration",
		"lognormal:300ms":          "lognormal:MEDIAN,p99=P99",
		"lognormal:2s,p99=300ms":   "0 < median <= p99",
		"lognormal:0s,p99=300ms":   "0 < median <= p99",
		"lognormal:300ms,p99=soon": "want a duration",
	} {
		_, err := Parse(in)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `"`+in+`"`) {
			t.Errorf("Parse(%q) = %v; want an error quoting it and saying %q", in, err, want)
		}
	}
}
