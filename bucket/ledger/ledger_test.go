package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/ledger"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/redis/go-redis/v9"
)

func ledgers(t *testing.T) map[string]*ledger.Ledger {
	mr := miniredis.RunT(t)
	real := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), DB: testenv.RedisDB})
	t.Cleanup(func() { real.Close() })
	return map[string]*ledger.Ledger{
		"miniredis":    ledger.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}), bucket.NewKeys("t"+t.Name()), 0),
		"redis-server": ledger.New(real, bucket.NewKeys("t"+t.Name()+time.Now().Format("150405.000000")), 0),
	}
}

func TestLedgerSteps(t *testing.T) {
	for name, l := range ledgers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			const ch, key, id = "whatsapp", "106", "m1"
			for i, s := range []struct {
				op    string // claim, force, deliver, release
				owner string
				want  ledger.ClaimResult
			}{
				{"claim", "a", ledger.Claimed},
				{"claim", "a", ledger.Claimed},        // the same owner again
				{"claim", "b", ledger.Abandoned},      // a crashed owner's claim
				{"release", "b", ledger.ClaimUnknown}, // not b's: nothing happens
				{"claim", "b", ledger.Abandoned},
				{"release", "a", ledger.ClaimUnknown}, // the provider refused: a lets go
				{"claim", "b", ledger.Claimed},        // a retry by another owner
				{"force", "c", ledger.Claimed},        // the operator chose to resend
				{"deliver", "c", ledger.ClaimUnknown},
				{"claim", "a", ledger.Delivered},
				{"force", "a", ledger.Delivered}, // delivered is final
				{"release", "c", ledger.ClaimUnknown},
				{"claim", "c", ledger.Delivered},
			} {
				var got ledger.ClaimResult
				var err error
				switch s.op {
				case "claim", "force":
					got, _, err = l.Claim(ctx, ch, key, id, s.owner, s.op == "force")
				case "deliver":
					err = l.Delivered(ctx, ch, key, id, "wamid.X")
				case "release":
					err = l.Release(ctx, ch, key, id, s.owner)
				}
				if err != nil || got != s.want {
					t.Fatalf("step %d %s(%s): got %v, %v; want %v", i, s.op, s.owner, got, err, s.want)
				}
			}
		})
	}
}

// TestLedgerClaimHonoursCooldown: no claim while the pacing key cools down,
// so a sender woken from a reservation does not send into a cooldown.
func TestLedgerClaimHonoursCooldown(t *testing.T) {
	mr := miniredis.RunT(t)
	for name, rdb := range map[string]*redis.Client{
		"miniredis":    redis.NewClient(&redis.Options{Addr: mr.Addr()}),
		"redis-server": redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), DB: testenv.RedisDB}),
	} {
		t.Run(name, func(t *testing.T) {
			defer rdb.Close()
			ctx := context.Background()
			lim := bucket.New(rdb, bucket.Config{Prefix: "tcd" + time.Now().Format("150405.000000")})
			l := ledger.New(rdb, lim.Keys(), 0)
			if err := lim.Cooldown(ctx, "whatsapp", "106", 2*time.Second); err != nil {
				t.Fatal(err)
			}
			got, left, err := l.Claim(ctx, "whatsapp", "106", "m1", "a", false)
			if err != nil || got != ledger.CoolingDown || left <= time.Second || left > 2*time.Second {
				t.Fatalf("Claim in cooldown = %v, %v, %v; want cooldown with 1s < left <= 2s", got, left, err)
			}
			if got, _, err := l.Claim(ctx, "whatsapp", "106", "m1", "b", false); err != nil || got != ledger.CoolingDown {
				t.Fatalf("second Claim = %v, %v; want cooldown (nothing was claimed)", got, err)
			}
			if got, _, err := l.Claim(ctx, "whatsapp", "107", "m1", "a", false); err != nil || got != ledger.Claimed {
				t.Fatalf("Claim on another key = %v, %v; want claimed", got, err)
			}
		})
	}
}

// TestClaimErrorIsNeverClaimed: an error answers ClaimUnknown, and the zero
// ClaimResult is not Claimed, so a caller that checks the result before
// the error (or not at all) does not send.
func TestClaimErrorIsNeverClaimed(t *testing.T) {
	var zero ledger.ClaimResult
	if zero == ledger.Claimed || zero.String() != "unknown" {
		t.Fatalf("zero ClaimResult = %v, want unknown and not Claimed", zero)
	}
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	l := ledger.New(rdb, bucket.Keys{}, 0)
	for _, c := range []struct {
		name    string
		breakIt func()
	}{
		{"redis error", func() { mr.SetError("LOADING Redis is loading the dataset in memory") }},
		{"unreachable", mr.Close},
	} {
		c.breakIt()
		got, left, err := l.Claim(t.Context(), "whatsapp", "106", "m1", "a", false)
		if err == nil || got == ledger.Claimed || got != ledger.ClaimUnknown || left != 0 {
			t.Fatalf("%s: Claim = %v, %v, %v; want unknown, 0 and an error", c.name, got, left, err)
		}
	}
}

// TestIsDelivered: an id is delivered only once Delivered recorded it; a
// claim alone is not.
func TestIsDelivered(t *testing.T) {
	for name, l := range ledgers(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			const ch, key, id = "whatsapp", "106", "m1"
			check := func(step string, want bool) {
				t.Helper()
				got, err := l.IsDelivered(ctx, ch, key, id)
				if err != nil || got != want {
					t.Fatalf("%s: IsDelivered = %v, %v; want %v", step, got, err, want)
				}
			}
			check("unknown id", false)
			if _, _, err := l.Claim(ctx, ch, key, id, "a", false); err != nil {
				t.Fatal(err)
			}
			check("claimed", false)
			if err := l.Delivered(ctx, ch, key, id, "wamid.X"); err != nil {
				t.Fatal(err)
			}
			check("delivered", true)
		})
	}
}
