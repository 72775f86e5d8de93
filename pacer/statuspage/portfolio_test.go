package statuspage

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/pacer/portfolio"
	"github.com/pacerhq/pacer/pacer/suppress"
	"github.com/redis/go-redis/v9"
)

// portfolioScenario puts key 15550000001 in portfolio acme at tier 250,
// admits two recipients, applies a FLAGGED quality event with the pause
// on and defers one marketing message: acme has used 2, 1 deferred,
// quality FLAGGED, marketing paused. It returns when the oldest entry
// leaves the window, within [lo, hi].
func portfolioScenario(t *testing.T, rdb redis.UniversalClient, cfg Config) (lo, hi time.Time) {
	t.Helper()
	ctx := context.Background()
	st := portfolio.NewStore(rdb, bucket.NewKeys(cfg.Prefix))
	if err := st.Set(ctx, channel, "15550000001", "acme", 250); err != nil {
		t.Fatal(err)
	}
	lo = time.Now().Add(portfolio.Window).Add(-time.Second)
	for _, to := range []string{"+15551230001", "+15551230002"} {
		if _, err := st.Admit(ctx, channel, "acme", suppress.Hash(to), false); err != nil {
			t.Fatal(err)
		}
	}
	hi = time.Now().Add(portfolio.Window).Add(time.Second)
	if err := st.SetQuality(ctx, channel, "acme", portfolio.Flagged, time.Date(2027, 1, 15, 8, 0, 0, 0, time.UTC), true); err != nil {
		t.Fatal(err)
	}
	if a, err := st.Admit(ctx, channel, "acme", suppress.Hash("+15551230003"), true); err != nil || a.Verdict != portfolio.Paused {
		t.Fatalf("marketing admission %+v %v; want paused", a, err)
	}
	return lo, hi
}

// TestStatusJSONPortfolios: /status.json lists the channel's portfolios
// with their tier, used, the oldest entry's expiry, deferred messages
// (the Redis counter every replica adds to) and quality.
func TestStatusJSONPortfolios(t *testing.T) {
	rdb, cfg := setup(t)
	lo, hi := portfolioScenario(t, rdb, cfg)
	mux := http.NewServeMux()
	New(rdb, cfg).Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var raw struct {
		Portfolios []map[string]any `json:"portfolios"`
	}
	if err := json.Unmarshal(b, &raw); err != nil || len(raw.Portfolios) != 1 {
		t.Fatalf("status.json %s: %v; want one portfolio", b, err)
	}
	p := raw.Portfolios[0]
	oldest, err := time.Parse(time.RFC3339Nano, p["oldest_expiry"].(string))
	if err != nil || oldest.Before(lo) || oldest.After(hi) {
		t.Errorf("oldest_expiry %v (%v); want within [%v, %v]", p["oldest_expiry"], err, lo, hi)
	}
	if p["name"] != "acme" || p["tier"] != 250.0 || p["used"] != 2.0 || p["deferred"] != 1.0 || p["quality"] != "FLAGGED" ||
		p["quality_at"] != "2027-01-15T08:00:00Z" || p["marketing_paused"] != "FLAGGED" || len(p["keys"].([]any)) != 1 {
		t.Errorf("portfolio %v; want acme, tier 250, used 2, deferred 1, quality FLAGGED at 2027-01-15T08:00:00Z, marketing paused, key 15550000001", p)
	}

	// Another channel has no portfolios: an empty list, not null.
	other := cfg
	other.Channel = "fcm"
	st, err := New(rdb, other).Status(context.Background(), "", "", 0)
	if err != nil || st.Portfolios == nil || len(st.Portfolios) != 0 {
		t.Errorf("fcm portfolios %v %v; want an empty list", st.Portfolios, err)
	}
}

// TestPortfolioRowInChromium: the page shows acme's row: keys, tier,
// used with its share, the oldest entry's expiry, deferred and quality.
func TestPortfolioRowInChromium(t *testing.T) {
	rdb, cfg := setup(t)
	portfolioScenario(t, rdb, cfg)
	mux := http.NewServeMux()
	New(rdb, cfg).Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	dom := string(chromium(t, "--virtual-time-budget=10000", "--dump-dom", srv.URL+"/status"))
	// portfolio | keys | tier | used | oldest leaves | deferred | quality
	got := tableRow(t, dom, "portfolio", "acme")
	if !regexp.MustCompile(`^acme\|15550000001\|250\|2 \(1 %\)\|20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ\|1\|FLAGGED, marketing paused$`).MatchString(got) {
		t.Errorf("row of portfolio acme: %q", got)
	}
}
