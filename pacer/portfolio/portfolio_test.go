package portfolio_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/redistest"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/portfolio"
	"github.com/pacerhq/pacer/pacer/suppress"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

func admit(t *testing.T, st *portfolio.Store, p, to string) portfolio.Admission {
	t.Helper()
	a, err := st.Admit(context.Background(), "whatsapp", p, suppress.Hash(to), false)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestGuard: at tier 3 a portfolio's two numbers share one window: new
// recipients enter it until it holds 3, a recipient already in it passes
// when it is full, a fourth new one is deferred until the oldest leaves
// the window (wait within the window) and counted; a reservation given
// back frees its place, one refreshed since is kept; a message refreshes
// its recipient's last-seen time, and past the window only the recipients
// seen within it count.
func TestGuard(t *testing.T) {
	redistest.Each(t, func(t *testing.T, e *redistest.Env) {
		ctx := context.Background()
		const window = 2 * time.Second
		st := portfolio.NewStore(e.RDB, bucket.NewKeys(e.Prefix)).WithWindow(window)
		for _, k := range []string{"106", "107"} {
			if err := st.Set(ctx, "whatsapp", k, "acme", 3); err != nil {
				t.Fatal(err)
			}
		}
		if p, ok, err := st.Of(ctx, "whatsapp", "107"); err != nil || !ok || p != "acme" {
			t.Fatalf("Of(107) = %q %v %v; want acme", p, ok, err)
		}
		if p, ok, err := st.Of(ctx, "whatsapp", "999"); err != nil || ok || p != "" {
			t.Fatalf("Of(999) = %q %v %v; want no portfolio", p, ok, err)
		}
		e.At(0)
		step := func(to string, want portfolio.Verdict, used int) portfolio.Admission {
			t.Helper()
			a := admit(t, st, "acme", to)
			if a.Verdict != want || a.Used != used || a.Tier != 3 {
				t.Fatalf("%s: %v used %d tier %d; want %v used %d tier 3", to, a.Verdict, a.Used, a.Tier, want, used)
			}
			return a
		}
		step("u1", portfolio.New, 1)
		e.Mark()
		step("u2", portfolio.New, 2)
		step("u1", portfolio.Seen, 2)
		u3 := step("u3", portfolio.New, 3)
		d := step("u4", portfolio.Deferred, 3)
		if d.Wait <= 0 || d.Wait > window+time.Millisecond {
			t.Errorf("u4 deferred for %v; want within (0, %v]", d.Wait, window)
		}
		step("u2", portfolio.Seen, 3) // the first recipients keep flowing
		if ok, err := st.GiveBack(ctx, "whatsapp", "acme", u3); err != nil || !ok {
			t.Fatalf("GiveBack(u3) = %v %v; want removed", ok, err)
		}
		u4 := step("u4", portfolio.New, 3)
		step("u4", portfolio.Seen, 3) // refreshed: u4's first reservation is no longer its own
		if ok, err := st.GiveBack(ctx, "whatsapp", "acme", portfolio.Admission{Verdict: portfolio.New, Hash: u4.Hash, Score: u4.Score - 1}); err != nil || ok {
			t.Errorf("GiveBack of a refreshed entry = %v %v; want kept", ok, err)
		}
		s, err := st.Status(ctx, "whatsapp", "acme")
		if err != nil {
			t.Fatal(err)
		}
		if s.Tier != 3 || s.Used != 3 || s.Deferred != 1 || len(s.Keys) != 2 || s.Keys[0] != "106" || s.UsedRatio() != 1 {
			t.Errorf("status %+v; want tier 3, used 3, deferred 1, keys [106 107]", s)
		}
		if s.Oldest.IsZero() {
			t.Error("status: no oldest expiry")
		}
		e.At(window / 2)
		step("u1", portfolio.Seen, 3) // refreshed: counted until window/2 + window
		e.At(window + 500*time.Millisecond)
		step("u5", portfolio.New, 2) // u2 and u4 left the window, u1 not
		if s, _ := st.Status(ctx, "whatsapp", "acme"); s.Used != 2 {
			t.Errorf("status after the window: used %d; want 2", s.Used)
		}
	})
}

// TestTierChangesLive: a raised tier admits at once, an unlimited one
// admits everyone, a key moved to another portfolio leaves the first.
func TestTierChangesLive(t *testing.T) {
	e := redistest.Mini(t)
	ctx := context.Background()
	st := portfolio.NewStore(e.RDB, bucket.NewKeys(""))
	if err := st.Set(ctx, "whatsapp", "106", "acme", 1); err != nil {
		t.Fatal(err)
	}
	admit(t, st, "acme", "u1")
	if a := admit(t, st, "acme", "u2"); a.Verdict != portfolio.Deferred {
		t.Fatalf("u2 at tier 1: %v; want deferred", a.Verdict)
	}
	if err := st.SetTier(ctx, "whatsapp", "acme", 2); err != nil {
		t.Fatal(err)
	}
	if a := admit(t, st, "acme", "u2"); a.Verdict != portfolio.New {
		t.Fatalf("u2 at tier 2: %v; want new", a.Verdict)
	}
	if err := st.SetTier(ctx, "whatsapp", "acme", portfolio.Unlimited); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if a := admit(t, st, "acme", fmt.Sprint("v", i)); a.Verdict != portfolio.New || a.Tier != portfolio.Unlimited {
			t.Fatalf("v%d unlimited: %v tier %d; want new, -1", i, a.Verdict, a.Tier)
		}
	}
	if err := st.Set(ctx, "whatsapp", "106", "beta", 0); err != nil {
		t.Fatal(err)
	}
	a, _ := st.Status(ctx, "whatsapp", "acme")
	b, _ := st.Status(ctx, "whatsapp", "beta")
	if len(a.Keys) != 0 || len(b.Keys) != 1 || b.Tier != portfolio.Unlimited {
		t.Errorf("after the move: acme keys %v, beta keys %v tier %d; want none, [106], unlimited", a.Keys, b.Keys, b.Tier)
	}
}

// TestAdmitExactAcrossReplicas: 8 clients (replicas) admitting 400
// distinct recipients at once into a tier of 250 admit exactly 250.
func TestAdmitExactAcrossReplicas(t *testing.T) {
	redistest.Each(t, func(t *testing.T, e *redistest.Env) {
		keys := bucket.NewKeys(e.Prefix)
		if err := portfolio.NewStore(e.RDB, keys).SetTier(context.Background(), "whatsapp", "acme", 250); err != nil {
			t.Fatal(err)
		}
		var next atomic.Int64
		var deferred atomic.Int64
		n := redistest.CountConcurrent(t, 8, 50, func() (bool, error) {
			st := portfolio.NewStore(e.RDB, keys)
			a, err := st.Admit(context.Background(), "whatsapp", "acme", suppress.Hash(fmt.Sprint("u", next.Add(1))), false)
			if a.Verdict == portfolio.Deferred {
				deferred.Add(1)
			}
			return a.Verdict == portfolio.New, err
		})
		if n != 250 || deferred.Load() != 150 {
			t.Errorf("%d admitted, %d deferred; want 250 and 150", n, deferred.Load())
		}
	})
}

// TestParseTierAndNames: WhatsApp's tier names and numbers are read, bad
// tiers and portfolio names are refused with ErrInvalid.
func TestParseTierAndNames(t *testing.T) {
	for in, want := range map[string]int{"250": 250, "TIER_250": 250, "TIER_2K": 2000, "2000": 2000, "tier_10k": 10000,
		"TIER_100K": 100000, "TIER_UNLIMITED": portfolio.Unlimited, "unlimited": portfolio.Unlimited} {
		if got, err := portfolio.ParseTier(in); err != nil || got != want {
			t.Errorf("ParseTier(%q) = %d %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-5", "TIER_1M", "lots"} {
		if _, err := portfolio.ParseTier(in); !errors.Is(err, portfolio.ErrInvalid) {
			t.Errorf("ParseTier(%q): %v; want ErrInvalid", in, err)
		}
	}
	st := portfolio.NewStore(redistest.Mini(t).RDB, bucket.NewKeys(""))
	for _, p := range []string{"", "a b", "a{b}", "a:b", "a\x1b[31mb", "a\tb", strings.Repeat("x", 129)} {
		if err := st.Set(context.Background(), "whatsapp", "106", p, 250); !errors.Is(err, portfolio.ErrInvalid) {
			t.Errorf("Set portfolio %q: %v; want ErrInvalid", p, err)
		}
	}
}

// TestBytesPerRecipient: MEMORY USAGE of a window of 100,000 recipients
// on redis-server is within the stated BytesPerRecipient.
func TestBytesPerRecipient(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), DB: testenv.RedisDB})
	defer rdb.Close()
	ctx := context.Background()
	keys := bucket.NewKeys("tp" + time.Now().Format("150405.000000"))
	win := keys.PortfolioWindow("whatsapp", "big")
	defer rdb.Del(ctx, win)
	const n = 100_000
	now := time.Now().UnixMilli()
	for start := 0; start < n; start += 1000 {
		zs := make([]redis.Z, 0, 1000)
		for i := start; i < start+1000; i++ {
			zs = append(zs, redis.Z{Score: float64(now + int64(i)), Member: suppress.Hash(fmt.Sprint("u", i))})
		}
		if err := rdb.ZAdd(ctx, win, zs...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	b, err := rdb.MemoryUsage(ctx, win, 0).Result()
	if err != nil {
		t.Fatal(err)
	}
	per := float64(b) / n
	t.Logf("%.1f bytes per recipient", per)
	if per > portfolio.BytesPerRecipient || per < 20 {
		t.Errorf("%.1f bytes per recipient; BytesPerRecipient states at most %d", per, portfolio.BytesPerRecipient)
	}
}

// TestGuardOnCluster: under Redis Cluster a portfolio's window and hash
// share one slot (the script runs), apart from its keys' slots; Set
// writes both slots; 400 recipients at tier 250 admit exactly 250.
func TestGuardOnCluster(t *testing.T) {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.ClusterAddrs(t)})
	defer rdb.Close()
	ctx := context.Background()
	keys := bucket.NewKeys("tc" + time.Now().Format("150405.000000"))
	st := portfolio.NewStore(rdb, keys)
	for _, k := range []string{"106", "107", "108"} {
		if err := st.Set(ctx, "whatsapp", k, "acme", 250); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for i := range 400 {
		a, err := st.Admit(ctx, "whatsapp", "acme", suppress.Hash(fmt.Sprint("u", i)), false)
		if err != nil {
			t.Fatal(err)
		}
		if a.Verdict == portfolio.New {
			n++
		}
	}
	s, err := st.Status(ctx, "whatsapp", "acme")
	if err != nil {
		t.Fatal(err)
	}
	if n != 250 || s.Used != 250 || s.Deferred != 150 || len(s.Keys) != 3 {
		t.Errorf("%d admitted, status %+v; want 250 admitted, used 250, deferred 150, 3 keys", n, s)
	}
}

// BenchmarkAdmit: one admission (a script call) per op on redis-server,
// half of them to recipients already in the window.
func BenchmarkAdmit(b *testing.B) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(b), DB: testenv.RedisDB})
	defer rdb.Close()
	ctx := context.Background()
	st := portfolio.NewStore(rdb, bucket.NewKeys("tb"+time.Now().Format("150405.000000")))
	if err := st.SetTier(ctx, "whatsapp", "bench", 100_000); err != nil {
		b.Fatal(err)
	}
	hashes := make([]string, 1024)
	for i := range hashes {
		hashes[i] = suppress.Hash(fmt.Sprint("u", i/2))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := st.Admit(ctx, "whatsapp", "bench", hashes[i%len(hashes)], false); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// TestQualityPause: a downgrade recorded without the pause changes no
// admission; with it, the portfolio's marketing messages are Paused
// (nothing reserved, counted as deferred) even to a recipient in the
// window, while its other business-initiated messages are admitted; an
// upgrade event, or Resume, lets marketing through again. Status shows
// the quality, its time and the pause.
func TestQualityPause(t *testing.T) {
	redistest.Each(t, func(t *testing.T, e *redistest.Env) {
		ctx := context.Background()
		st := portfolio.NewStore(e.RDB, bucket.NewKeys(e.Prefix))
		if err := st.Set(ctx, "whatsapp", "106", "acme", 100); err != nil {
			t.Fatal(err)
		}
		at := time.Unix(1_800_000_000, 0).UTC()
		admitM := func(to string, marketing bool) portfolio.Admission {
			t.Helper()
			a, err := st.Admit(ctx, "whatsapp", "acme", suppress.Hash(to), marketing)
			if err != nil {
				t.Fatal(err)
			}
			return a
		}
		status := func() portfolio.Status {
			t.Helper()
			s, err := st.Status(ctx, "whatsapp", "acme")
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		if err := st.SetQuality(ctx, "whatsapp", "acme", portfolio.Flagged, at, false); err != nil {
			t.Fatal(err)
		}
		if a := admitM("r1", true); a.Verdict != portfolio.New {
			t.Fatalf("marketing after FLAGGED without the pause: %v; want new", a.Verdict)
		}
		if s := status(); s.Quality != "FLAGGED" || !s.QualityAt.Equal(at) || s.Paused != "" {
			t.Fatalf("status %+v; want quality FLAGGED at %v, not paused", s, at)
		}
		if err := st.SetQuality(ctx, "whatsapp", "acme", portfolio.Downgrade, at.Add(time.Hour), true); err != nil {
			t.Fatal(err)
		}
		for _, to := range []string{"r1", "r2"} { // in the window, and new
			if a := admitM(to, true); a.Verdict != portfolio.Paused || a.Used != 1 || a.Wait != 0 {
				t.Fatalf("marketing to %s while paused: %+v; want paused, used 1, no wait", to, a)
			}
		}
		if a := admitM("r3", false); a.Verdict != portfolio.New || a.Used != 2 {
			t.Fatalf("utility while paused: %+v; want new, used 2", a)
		}
		if s := status(); s.Paused != "DOWNGRADE" || s.Quality != "DOWNGRADE" || s.Deferred != 2 || s.Used != 2 {
			t.Fatalf("status %+v; want paused by DOWNGRADE, 2 deferred, 2 used", s)
		}
		if err := st.SetQuality(ctx, "whatsapp", "acme", portfolio.Unflagged, at.Add(2*time.Hour), true); err != nil {
			t.Fatal(err)
		}
		if a := admitM("r2", true); a.Verdict != portfolio.New {
			t.Fatalf("marketing after UNFLAGGED: %v; want new", a.Verdict)
		}
		if err := st.SetQuality(ctx, "whatsapp", "acme", portfolio.Flagged, at.Add(3*time.Hour), true); err != nil {
			t.Fatal(err)
		}
		if a := admitM("r4", true); a.Verdict != portfolio.Paused {
			t.Fatalf("marketing after FLAGGED: %v; want paused", a.Verdict)
		}
		if ok, err := st.Resume(ctx, "whatsapp", "acme"); err != nil || !ok {
			t.Fatalf("Resume = %v %v; want true", ok, err)
		}
		if ok, err := st.Resume(ctx, "whatsapp", "acme"); err != nil || ok {
			t.Fatalf("Resume again = %v %v; want false (not paused)", ok, err)
		}
		if a := admitM("r4", true); a.Verdict != portfolio.New {
			t.Fatalf("marketing after Resume: %v; want new", a.Verdict)
		}
		if s := status(); s.Paused != "" || s.Quality != "FLAGGED" || s.Deferred != 3 {
			t.Fatalf("status %+v; want not paused, quality FLAGGED, 3 deferred", s)
		}
		if names, err := st.Names(ctx, "whatsapp"); err != nil || len(names) != 1 || names[0] != "acme" {
			t.Fatalf("Names = %v %v; want [acme]", names, err)
		}
	})
}
