package webhook

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/redistest"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/portfolio"
	"github.com/pacerhq/pacer/pacer/suppress"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// qualityBody is a phone_number_quality_update of WhatsApp Business
// Account account for display number number, as Meta's reference shows
// it (developers.facebook.com/documentation/business-messaging/whatsapp/webhooks/reference/phone_number_quality_update).
func qualityBody(account, number, event string) []byte {
	return []byte(`{"entry":[{"id":"` + account + `","time":1800000000,"changes":[{"value":{"display_phone_number":"` + number +
		`","event":"` + event + `","current_limit":"TIER_UNLIMITED"},"field":"phone_number_quality_update"}]}],"object":"whatsapp_business_account"}`)
}

// TestParseQuality: a phone_number_quality_update of a quality or
// throughput event is one "quality" event of its account and number,
// followed by the "tier" its current_limit carries (TestQualityTier);
// ONBOARDING yields the tier only, and nothing without a limit; a missing
// display number is an error naming the field.
func TestParseQuality(t *testing.T) {
	evs, err := parseWhatsApp(qualityBody("waba", "1555", "THROUGHPUT_UPGRADE"))
	if err != nil || len(evs) != 2 || evs[0].Kind != "quality" || evs[0].Account != "waba" || evs[0].Number != "1555" ||
		evs[0].Quality != "THROUGHPUT_UPGRADE" || !evs[0].At.Equal(time.Unix(1_800_000_000, 0)) ||
		evs[1].Kind != "tier" || evs[1].Tier != portfolio.Unlimited || evs[1].Number != "1555" {
		t.Fatalf("parse: %+v %v; want a quality event THROUGHPUT_UPGRADE of waba, number 1555, and its tier unlimited", evs, err)
	}
	if evs, err := parseWhatsApp(qualityBody("waba", "1555", "ONBOARDING")); err != nil || len(evs) != 1 || evs[0].Kind != "tier" {
		t.Errorf("ONBOARDING: %+v %v; want its tier only", evs, err)
	}
	noLimit := bytes.Replace(qualityBody("waba", "1555", "ONBOARDING"), []byte(`,"current_limit":"TIER_UNLIMITED"`), nil, 1)
	if evs, err := parseWhatsApp(noLimit); err != nil || len(evs) != 0 {
		t.Errorf("ONBOARDING without a limit: %+v %v; want no event", evs, err)
	}
	if _, err := parseWhatsApp(qualityBody("waba", "", "FLAGGED")); err == nil || !strings.Contains(err.Error(), "display_phone_number") {
		t.Errorf("no display number: %v; want an error naming display_phone_number", err)
	}
	st, err := parseWhatsApp(waBody("wamid.1 sent"))
	if err != nil || len(st) != 1 || st[0].Number != "1555" || st[0].Key != "1065" {
		t.Errorf("status: %+v %v; want number 1555 of key 1065 (its metadata)", st, err)
	}
}

// TestThroughputUpgradeRaisesLimit: signed webhooks through Kafka
// (kfake) to the outcome consumer, on redis-server. A status webhook of
// phone-number ID 1065 names its display number 1555; then Meta's
// THROUGHPUT_UPGRADE for 1555 makes 1065's per-key limit (the one `pacer
// limit set` writes and every pacer re-reads) 1,000 msgs/s, its burst
// kept, within 1 s of the POST.
func TestThroughputUpgradeRaisesLimit(t *testing.T) {
	e := redistest.Real(t)
	keys := bucket.NewKeys(e.Prefix)
	ctx := context.Background()
	ctl := control.New(e.RDB, keys)
	if _, _, err := ctl.SetLimit(ctx, "whatsapp", control.KeyLimit{Key: "1065", PerSecond: 80, Burst: 40}); err != nil {
		t.Fatal(err)
	}
	ps := portfolio.NewStore(e.RDB, keys)

	cluster := testenv.FakeKafka(t, 2, Topic("whatsapp"))
	pc := testenv.KafkaClient(t, cluster.ListenAddrs(), kgo.ProducerLinger(0))
	hs := httptest.NewServer(New(Config{WhatsAppAppSecret: secret, WhatsAppVerifyToken: "v"}, pc, prometheus.NewRegistry()))
	t.Cleanup(hs.Close)
	cc := testenv.KafkaClient(t, cluster.ListenAddrs(), kgo.ConsumerGroup("outcomes"),
		kgo.ConsumeTopics(Topic("whatsapp")), kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	out := NewOutcomes(suppress.NewStore(e.RDB, keys), nil, nil).WithPortfolios(ps).WithLimits(ctl)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- out.Run(rctx, cc) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	post := func(body []byte) {
		t.Helper()
		req, _ := http.NewRequest("POST", hs.URL+"/webhook/whatsapp", strings.NewReader(string(body)))
		req.Header.Set("X-Hub-Signature-256", WhatsAppSignature(secret, body))
		if code, b := do(t, req); code != 200 {
			t.Fatalf("POST answered %d %s; want 200", code, b)
		}
	}
	// poll reads cond every 10 ms until it holds or within has passed.
	poll := func(within time.Duration, cond func() bool) bool {
		for end := time.Now().Add(within); ; time.Sleep(10 * time.Millisecond) {
			if cond() {
				return true
			}
			if time.Now().After(end) {
				return false
			}
		}
	}
	post(waBody("wamid.1 sent"))
	if !poll(30*time.Second, func() bool { k, ok, _ := ps.KeyOfNumber(ctx, "whatsapp", "1555"); return ok && k == "1065" }) {
		t.Fatal("the status webhook's display number 1555 was not recorded as key 1065")
	}
	limit := func() control.KeyLimit {
		l, _, err := ctl.Limit(ctx, "whatsapp", "1065")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	start := time.Now()
	post(qualityBody("waba", "1555", "THROUGHPUT_UPGRADE"))
	if !poll(time.Second-time.Since(start), func() bool { return limit().PerSecond == UpgradedThroughput }) {
		t.Fatalf("1 s after the THROUGHPUT_UPGRADE webhook key 1065's limit is %+v; want 1000 msgs/s", limit())
	}
	if l := limit(); l.Burst != 40 {
		t.Errorf("limit %+v; want the burst kept (40)", l)
	}
}

// accountPortfolios returns the keys and a portfolio store over e in which
// WhatsApp pacing key 1065 is in portfolio "acme" at tier (0: none set)
// and provider account is in portfolio ofAccount.
func accountPortfolios(t *testing.T, e *redistest.Env, tier int, account, ofAccount string) (bucket.Keys, *portfolio.Store) {
	t.Helper()
	keys := bucket.NewKeys(e.Prefix)
	ps := portfolio.NewStore(e.RDB, keys)
	if err := ps.Set(t.Context(), "whatsapp", "1065", "acme", tier); err != nil {
		t.Fatal(err)
	}
	if err := ps.SetAccount(t.Context(), "whatsapp", account, ofAccount); err != nil {
		t.Fatal(err)
	}
	return keys, ps
}

// TestQualityDowngradePause: with the pause on, a FLAGGED webhook pauses
// the marketing of its account's portfolio and an UNFLAGGED one resumes
// it; with it off, a DOWNGRADE is recorded as the portfolio's quality and
// pauses nothing. An account without a portfolio changes nothing.
func TestQualityDowngradePause(t *testing.T) {
	redistest.Each(t, func(t *testing.T, e *redistest.Env) {
		ctx := context.Background()
		keys, ps := accountPortfolios(t, e, 0, "waba", "acme")
		apply := func(o *Outcomes, account, event string) portfolio.Status {
			t.Helper()
			evs, err := parseWhatsApp(qualityBody(account, "1555", event))
			if err != nil {
				t.Fatal(err)
			}
			if err := o.Apply(ctx, evs); err != nil {
				t.Fatal(err)
			}
			s, err := ps.Status(ctx, "whatsapp", "acme")
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		marketing := func() portfolio.Verdict {
			t.Helper()
			a, err := ps.Admit(ctx, "whatsapp", "acme", suppress.Hash("+15550001"), true)
			if err != nil {
				t.Fatal(err)
			}
			return a.Verdict
		}
		off := NewOutcomes(suppress.NewStore(e.RDB, keys), nil, nil).WithPortfolios(ps)
		if s := apply(off, "waba", "DOWNGRADE"); s.Quality != "DOWNGRADE" || s.Paused != "" {
			t.Fatalf("pause off, DOWNGRADE: %+v; want quality DOWNGRADE, not paused", s)
		}
		if v := marketing(); v != portfolio.New {
			t.Fatalf("pause off: marketing %v; want new", v)
		}
		on := NewOutcomes(suppress.NewStore(e.RDB, keys), nil, nil).WithPortfolios(ps).WithQualityPause(true)
		if s := apply(on, "other", "FLAGGED"); s.Quality != "DOWNGRADE" || s.Paused != "" {
			t.Fatalf("FLAGGED of an account without a portfolio: %+v; want nothing changed", s)
		}
		if s := apply(on, "waba", "FLAGGED"); s.Quality != "FLAGGED" || s.Paused != "FLAGGED" {
			t.Fatalf("pause on, FLAGGED: %+v; want quality FLAGGED, paused", s)
		}
		if v := marketing(); v != portfolio.Paused {
			t.Fatalf("pause on, after FLAGGED: marketing %v; want paused", v)
		}
		if s := apply(on, "waba", "UNFLAGGED"); s.Quality != "UNFLAGGED" || s.Paused != "" || s.Deferred != 1 {
			t.Fatalf("UNFLAGGED: %+v; want quality UNFLAGGED, not paused, 1 deferred", s)
		}
		if v := marketing(); v != portfolio.Seen {
			t.Fatalf("after UNFLAGGED: marketing %v; want seen (admitted)", v)
		}
	})
}
