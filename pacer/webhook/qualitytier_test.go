package webhook

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/pacerhq/pacer/internal/redistest"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/portfolio"
	"github.com/pacerhq/pacer/pacer/suppress"
)

// qualityLimitBody is a phone_number_quality_update of account for display
// number with event and the value's limit fields limits (JSON members, as
// `"current_limit":"TIER_1K"`), in the shape of Meta's reference
// (developers.facebook.com/documentation/business-messaging/whatsapp/webhooks/reference/phone_number_quality_update).
func qualityLimitBody(account, number, event, limits string) []byte {
	return []byte(`{"entry":[{"id":"` + account + `","time":1800000000,"changes":[{"value":{"display_phone_number":"` + number +
		`","event":"` + event + `"` + limits + `},"field":"phone_number_quality_update"}]}],"object":"whatsapp_business_account"}`)
}

// TestQualityTier: the messaging limit a phone_number_quality_update
// carries is a "tier" event of its display number, read as
// business_capability_update's tier is (an integer, -1 unlimited, or a
// tier name): max_daily_conversations_per_business over current_limit,
// never old_limit. A value not understood (TIER_NOT_SET, a name Meta adds
// later, an object) is skipped and the request still answered 200 with
// the quality event kept.
func TestQualityTier(t *testing.T) {
	for _, c := range []struct {
		event, limits string
		want          int // 0: no tier event
	}{
		{"UPGRADE", `,"current_limit":"TIER_1K"`, 1000},
		{"UPGRADE", `,"old_limit":"TIER_250","current_limit":"TIER_2K"`, 2000},
		{"DOWNGRADE", `,"old_limit":"TIER_10K","current_limit":"TIER_250"`, 250},
		{"THROUGHPUT_UPGRADE", `,"current_limit":"TIER_UNLIMITED","max_daily_conversations_per_business":"TIER_2K"`, 2000},
		{"UPGRADE", `,"max_daily_conversations_per_business":10000`, 10000},
		{"UPGRADE", `,"max_daily_conversations_per_business":-1`, portfolio.Unlimited},
		{"ONBOARDING", `,"max_daily_conversations_per_business":"TIER_100K"`, 100000},
		{"UPGRADE", `,"current_limit":"TIER_NOT_SET"`, 0},
		{"UPGRADE", `,"current_limit":"TIER_HUGE"`, 0},
		{"UPGRADE", `,"max_daily_conversations_per_business":{"x":1},"current_limit":"TIER_1K"`, 0},
		{"UPGRADE", `,"max_daily_conversations_per_business":1.5`, 0},
		{"UPGRADE", ``, 0},
	} {
		evs, err := parseWhatsApp(qualityLimitBody("waba", "1555", c.event, c.limits))
		var tiers []int
		quality := 0
		for _, ev := range evs {
			switch ev.Kind {
			case "tier":
				if ev.Number != "1555" || ev.Account != "waba" || ev.Channel != "whatsapp" {
					t.Errorf("%s%s: tier event %+v; want one of number 1555, account waba", c.event, c.limits, ev)
				}
				tiers = append(tiers, ev.Tier)
			case "quality":
				quality++
			}
		}
		wantQuality := 1
		if c.event == "ONBOARDING" {
			wantQuality = 0
		}
		if err != nil || quality != wantQuality || (c.want == 0) != (len(tiers) == 0) || (c.want != 0 && (len(tiers) != 1 || tiers[0] != c.want)) {
			t.Errorf("%s%s: tiers %v, %d quality events, %v; want tier %d (0: none) and %d quality event", c.event, c.limits, tiers, quality, err, c.want, wantQuality)
		}
	}
	f := newFixture(t)
	body := qualityLimitBody("waba", "1555", "DOWNGRADE", `,"current_limit":"TIER_NOT_SET"`)
	if s, b := f.postWA(t, body, WhatsAppSignature(secret, body)); s != 200 || !strings.Contains(b, `"events":1`) {
		t.Errorf("a limit not understood: %d %s; want 200 with the quality event only", s, b)
	}
}

// TestQualityTierApplied: the tier of a phone_number_quality_update
// becomes the tier of its display number's portfolio (the pacing key the
// status webhooks named beside the number, in a portfolio), which another
// replica's guard reads at its next admission; a number whose key has no
// portfolio falls back to its account's; a value not understood changes
// nothing; a number with neither is logged once and changes nothing.
func TestQualityTierApplied(t *testing.T) {
	redistest.Each(t, func(t *testing.T, e *redistest.Env) {
		ctx := context.Background()
		keys, ps := accountPortfolios(t, e, 250, "waba-beta", "beta")
		var logs testenv.Buffer
		o := NewOutcomes(suppress.NewStore(e.RDB, keys), slog.New(slog.NewTextHandler(&logs, nil)), nil).WithPortfolios(ps)
		apply := func(bodies ...[]byte) {
			t.Helper()
			var evs []Event
			for _, b := range bodies {
				got, err := parseWhatsApp(b)
				if err != nil {
					t.Fatal(err)
				}
				evs = append(evs, got...)
			}
			if err := o.Apply(ctx, evs); err != nil {
				t.Fatal(err)
			}
		}
		tier := func(p string) int {
			t.Helper()
			s, err := ps.Status(ctx, "whatsapp", p)
			if err != nil {
				t.Fatal(err)
			}
			return s.Tier
		}
		// The status naming 1555 beside key 1065 comes in the same batch:
		// the number's key is known before the tier is placed.
		apply(waBody("wamid.1 sent"), qualityLimitBody("waba", "1555", "UPGRADE", `,"max_daily_conversations_per_business":10000`))
		if got := tier("acme"); got != 10000 {
			t.Fatalf("after UPGRADE to 10000: acme's tier %d; want 10000\n%s", got, logs.String())
		}
		replica := portfolio.NewStore(e.RDB, keys)
		if a, err := replica.Admit(ctx, "whatsapp", "acme", suppress.Hash("+15550001"), false); err != nil || a.Tier != 10000 {
			t.Fatalf("another replica's guard: %+v %v; want tier 10000", a, err)
		}
		apply(qualityLimitBody("waba", "1555", "DOWNGRADE", `,"old_limit":"TIER_10K","current_limit":"TIER_2K"`))
		if got := tier("acme"); got != 2000 {
			t.Errorf("after DOWNGRADE to TIER_2K: acme's tier %d; want 2000", got)
		}
		apply(qualityLimitBody("waba", "1555", "UPGRADE", `,"current_limit":"TIER_NOT_SET"`))
		if got := tier("acme"); got != 2000 {
			t.Errorf("after a limit not understood: acme's tier %d; want 2000 kept", got)
		}
		// 1666's key is unknown: its account's portfolio is the number's.
		apply(qualityLimitBody("waba-beta", "1666", "UPGRADE", `,"current_limit":"TIER_UNLIMITED"`))
		if got := tier("beta"); got != portfolio.Unlimited {
			t.Errorf("number of account waba-beta: beta's tier %d; want unlimited", got)
		}
		before, err := ps.Names(ctx, "whatsapp")
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			apply(qualityLimitBody("waba-other", "1777", "DOWNGRADE", `,"current_limit":"TIER_50"`))
		}
		after, err := ps.Names(ctx, "whatsapp")
		if err != nil {
			t.Fatal(err)
		}
		if got := tier("acme"); got != 2000 || !slices.Equal(before, after) {
			t.Errorf("a number without a portfolio: acme's tier %d, portfolios %v -> %v; want 2000 and nothing created", got, before, after)
		}
		if n := strings.Count(logs.String(), "tier announced for a display number without a portfolio"); n != 1 || !strings.Contains(logs.String(), "number=1777 account=waba-other tier=50") {
			t.Errorf("a number without a portfolio, 3 times: logged %d times; want once, naming 1777\n%s", n, logs.String())
		}
	})
}
