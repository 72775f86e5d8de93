package main

import (
	"strings"
	"testing"
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
		if code != 0 || !strings.Contains(out, "keys:     106 107") || !strings.Contains(out, "tier:     2000") || !strings.Contains(out, "used:     0 (0%)") || !strings.Contains(out, "deferred: 0") {
			t.Errorf("status %v: exit %d, %q %q", by, code, out, errs)
		}
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
	} {
		if code, _, errs := runCLI(env, append([]string{"portfolio"}, c.args...)...); code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, errs, c.want)
		}
	}
}
