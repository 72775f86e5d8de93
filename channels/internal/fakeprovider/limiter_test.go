package fakeprovider

import (
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

const ms = time.Millisecond

// TestLimiterTake steps one key through time: burst, refusal with its wait,
// refill, cap.
func TestLimiterTake(t *testing.T) {
	l := NewLimiter(2, 3)
	for i, s := range []struct {
		at   time.Duration // since t0
		ok   bool
		wait time.Duration // want Bucket.Wait when refused
	}{
		{0, true, 0}, {0, true, 0}, {0, true, 0}, // burst 3
		{0, false, 500 * ms},
		{499 * ms, false, 1 * ms}, // 0.998 tokens
		{500 * ms, true, 0},       // 1 token
		{500 * ms, false, 500 * ms},
		{10 * time.Second, true, 0}, {10 * time.Second, true, 0}, {10 * time.Second, true, 0}, // capped at 3
		{10 * time.Second, false, 500 * ms},
	} {
		now := t0.Add(s.at)
		if got := l.Take("k", now); got != s.ok {
			t.Fatalf("step %d at %v: took %v, want %v", i, s.at, got, s.ok)
		}
		if w := l.Bucket("k", now).Wait(now); !s.ok && (w-s.wait).Abs() > time.Microsecond {
			t.Fatalf("step %d at %v: wait %v, want %v", i, s.at, w, s.wait)
		}
	}
	if b := l.Bucket("k", t0); b.Rate() != 2 || b.Burst() != 3 || l.Len() != 1 {
		t.Errorf("rate %v burst %v len %d, want 2 3 1", b.Rate(), b.Burst(), l.Len())
	}
}

func TestBurstFor(t *testing.T) {
	for _, c := range []struct {
		name  string
		burst int
		rate  float64
		want  float64
	}{
		{"configured", 5, 100, 5},
		{"ceil of rate", 0, 2.5, 3},
		{"at least 1", 0, 0.001, 1},
		{"unlimited", 0, 0, 1},
		{"negative burst is default", -1, 4, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := NewLimiter(c.rate, c.burst).BurstFor(c.rate); got != c.want {
				t.Errorf("BurstFor(%v) with burst %d = %v, want %v", c.rate, c.burst, got, c.want)
			}
		})
	}
}

// TestUnlimited: rate 0 (or less) allows everything and never waits; so
// does the zero Bucket.
func TestUnlimited(t *testing.T) {
	l := NewLimiter(-1, 1)
	var zero Bucket
	for i := range 100 {
		if !l.Take("k", t0) || !zero.Take(t0) {
			t.Fatalf("request %d refused", i)
		}
	}
	if w := l.Bucket("k", t0).Wait(t0); w != 0 {
		t.Errorf("Wait = %v, want 0", w)
	}
}

// TestAllowTakeRefund: Allow takes nothing, Refund gives one back up to the
// burst.
func TestAllowTakeRefund(t *testing.T) {
	b := NewBucket(0.001, 2, t0)
	for i, s := range []struct {
		op   string
		want bool
	}{
		{"allow", true}, {"allow", true}, // Allow takes nothing
		{"take", true}, {"take", true},
		{"allow", false}, {"take", false},
		{"refund", true}, {"take", true},
		{"refund", true}, {"refund", true}, {"refund", true}, // capped at 2
		{"take", true}, {"take", true}, {"take", false},
	} {
		got := true
		switch s.op {
		case "allow":
			got = b.Allow(t0)
		case "take":
			got = b.Take(t0)
		case "refund":
			b.Refund()
		}
		if got != s.want {
			t.Fatalf("step %d %s: %v, want %v", i, s.op, got, s.want)
		}
	}
}

// TestSetRateKeepsTokens: tokens earned at the old rate stay, up to the new
// burst.
func TestSetRateKeepsTokens(t *testing.T) {
	l := NewLimiter(1, 0) // burst 1
	if !l.Take("k", t0) || l.Take("k", t0) {
		t.Fatal("burst 1 not enforced")
	}
	l.SetRate("k", 10, t0.Add(500*ms)) // 0.5 token earned at 1/s; burst 10
	if l.Take("k", t0.Add(500*ms)) {
		t.Fatal("allowed with 0.5 tokens")
	}
	if !l.Take("k", t0.Add(550*ms)) { // 0.5 + 0.05*10 = 1
		t.Fatal("refused with 1 token")
	}
	l.SetRate("k", 0.001, t0.Add(10*time.Second)) // 9.45 tokens, capped at burst 1
	if !l.Take("k", t0.Add(10*time.Second)) || l.Take("k", t0.Add(10*time.Second)) {
		t.Fatal("tokens not capped at the new burst")
	}
}

// TestSetRateScope: SetRate(key) changes one key, now or later;
// SetRate("") changes every key, current and future, and drops per-key
// rates.
func TestSetRateScope(t *testing.T) {
	l := NewLimiter(1, 0)
	l.Bucket("a", t0)
	l.SetRate("a", 5, t0)
	l.SetRate("b", 7, t0) // before b's bucket exists
	for key, want := range map[string]float64{"a": 5, "b": 7, "c": 1} {
		if got := l.Rate(key); got != want {
			t.Errorf("Rate(%q) = %v, want %v", key, got, want)
		}
	}
	if b := l.Bucket("b", t0); b.Rate() != 7 || b.Burst() != 7 {
		t.Errorf("b: rate %v burst %v, want 7 7", b.Rate(), b.Burst())
	}
	l.SetRate("", 3, t0)
	for _, key := range []string{"a", "b", "c", "new"} {
		if b := l.Bucket(key, t0); b.Rate() != 3 || b.Burst() != 3 {
			t.Errorf("%s: rate %v burst %v, want 3 3", key, b.Rate(), b.Burst())
		}
	}
}
