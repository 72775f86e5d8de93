package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/pacer/portfolio"
	"github.com/pacerhq/pacer/pacer/suppress"
	"github.com/redis/go-redis/v9"
)

// TestPortfolioSetStatus: a key without a portfolio says it is not
// guarded; set puts two keys in a portfolio with a tier; status by
// portfolio or by key shows the tier, keys and usage; bad tiers, names
// and channels are usage errors naming the flag.
func TestPortfolioSetStatus(t *testing.T) {
	env, _ := operatorEnv(t)
	if code, out, errs := runCLI(env, "portfolio", "status", "--channel", "whatsapp", "--key", "106"); code != 0 || !strings.Contains(out, "no portfolio: not guarded") {
		t.Fatalf("status of a key without portfolio: exit %d, %q %q", code, out, errs)
	}
	if code, out, errs := runCLI(env, "portfolio", "set", "--channel", "whatsapp", "--key", "106", "--portfolio", "acme", "--tier", "TIER_2K"); code != 0 || out != "whatsapp 106: in portfolio acme (tier 2000)\n" {
		t.Fatalf("set: exit %d, %q %q", code, out, errs)
	}
	if code, _, errs := runCLI(env, "portfolio", "set", "--channel", "whatsapp", "--key", "107", "--portfolio", "acme"); code != 0 {
		t.Fatalf("set 107: exit %d, %q", code, errs)
	}
	if code, out, errs := runCLI(env, "portfolio", "set", "--channel", "whatsapp", "--account", "1029", "--portfolio", "acme"); code != 0 || out != "whatsapp account 1029: its tier webhooks apply to portfolio acme\n" {
		t.Fatalf("set --account: exit %d, %q %q", code, out, errs)
	}
	for _, by := range [][]string{{"--portfolio", "acme"}, {"--key", "107"}} {
		code, out, errs := runCLI(env, append([]string{"portfolio", "status", "--channel", "whatsapp"}, by...)...)
		if code != 0 || !strings.Contains(out, "keys:     106 107") || !strings.Contains(out, "tier:     2000") || !strings.Contains(out, "used:     0 (0%)") || !strings.Contains(out, "deferred: 0") ||
			!strings.Contains(out, "quality:  - (no quality webhook applied)") {
			t.Errorf("status %v: exit %d, %q %q", by, code, out, errs)
		}
	}
	// A quality downgrade applied with the pause on (pacer webhook), a
	// marketing message deferred and one admitted: status shows them all;
	// resume ends the pause.
	opt, err := redis.ParseURL(env["PACER_REDIS_URL"])
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ps := portfolio.NewStore(rdb, bucket.NewKeys(env["PACER_REDIS_PREFIX"]))
	ctx := context.Background()
	if err := ps.SetQuality(ctx, "whatsapp", "acme", portfolio.Flagged, time.Date(2027, 1, 15, 8, 0, 0, 0, time.UTC), true); err != nil {
		t.Fatal(err)
	}
	for _, m := range []bool{true, false} {
		if _, err := ps.Admit(ctx, "whatsapp", "acme", suppress.Hash("+15550001"), m); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errs := runCLI(env, "portfolio", "status", "--channel", "whatsapp", "--portfolio", "acme")
	if code != 0 || !strings.Contains(out, "used:     1 (0%)") || !strings.Contains(out, "oldest:   leaves the window at 20") || !strings.Contains(out, "deferred: 1 deferrals") ||
		!strings.Contains(out, "quality:  FLAGGED at 2027-01-15T08:00:00Z; marketing PAUSED (pacer portfolio resume --portfolio acme)") {
		t.Errorf("status after FLAGGED: exit %d, %q %q", code, out, errs)
	}
	if code, out, errs := runCLI(env, "portfolio", "resume", "--channel", "whatsapp", "--portfolio", "acme"); code != 0 || out != "portfolio acme: marketing resumed (deferred messages are sent within 30s)\n" {
		t.Errorf("resume: exit %d, %q %q", code, out, errs)
	}
	if code, out, errs := runCLI(env, "portfolio", "resume", "--channel", "whatsapp", "--portfolio", "acme"); code != 0 || out != "portfolio acme: marketing was not paused\n" {
		t.Errorf("resume again: exit %d, %q %q", code, out, errs)
	}
	if _, out, _ := runCLI(env, "portfolio", "status", "--channel", "whatsapp", "--portfolio", "acme"); !strings.Contains(out, "quality:  FLAGGED at 2027-01-15T08:00:00Z\n") {
		t.Errorf("status after resume: %q; want quality FLAGGED, not paused", out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"set", "--channel", "whatsapp", "--key", "106", "--portfolio", "acme", "--tier", "0"}, "--tier: tier \"0\""},
		{[]string{"set", "--channel", "whatsapp", "--key", "106", "--portfolio", "a:b"}, "portfolio \"a:b\""},
		{[]string{"set", "--channel", "fcm", "--key", "106", "--portfolio", "acme"}, "--channel must be whatsapp"},
		{[]string{"status", "--channel", "whatsapp"}, "give --portfolio or --key"},
		{[]string{"set", "--channel", "whatsapp", "--portfolio", "acme"}, "--key or --account are required"},
		{[]string{"resume", "--channel", "whatsapp"}, "give --portfolio"},
	} {
		if code, _, errs := runCLI(env, append([]string{"portfolio"}, c.args...)...); code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, errs, c.want)
		}
	}
	// A portfolio nothing names (a typo) is said so, exit 1, by status and
	// resume; one named by an account alone is known.
	for _, verb := range []string{"status", "resume"} {
		if code, out, errs := runCLI(env, "portfolio", verb, "--channel", "whatsapp", "--portfolio", "acne"); code != 1 || out != "" ||
			!strings.Contains(errs, "no portfolio acne of whatsapp") {
			t.Errorf("%s of an unknown portfolio: exit %d, %q %q; want 1 naming it", verb, code, out, errs)
		}
	}
	if code, _, errs := runCLI(env, "portfolio", "set", "--channel", "whatsapp", "--account", "2040", "--portfolio", "beta"); code != 0 {
		t.Fatalf("set --account of beta: exit %d, %q", code, errs)
	}
	if code, out, errs := runCLI(env, "portfolio", "status", "--channel", "whatsapp", "--portfolio", "beta"); code != 0 || !strings.Contains(out, "portfolio beta") {
		t.Errorf("status of a portfolio named by an account: exit %d, %q %q", code, out, errs)
	}
}
