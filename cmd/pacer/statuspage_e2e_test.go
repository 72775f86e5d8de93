//go:build e2e

package main

// The status page of a running `pacer run` (real Kafka and Redis, the
// strict fake WhatsApp API) in headless Chromium while a campaign drains:
// the page shows the campaign's and the keys' real numbers.

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
	"github.com/pacerhq/pacer/internal/testenv"
)

// domRow returns the cells of the table row whose attribute attr is val,
// tags stripped, or nil when there is none.
func domRow(dom, attr, val string) []string {
	m := regexp.MustCompile(`<tr[^>]*` + attr + `="` + regexp.QuoteMeta(val) + `"[^>]*>(.*?)</tr>`).FindStringSubmatch(dom)
	if m == nil {
		return nil
	}
	var out []string
	for _, c := range regexp.MustCompile(`<td[^>]*>(.*?)</td>`).FindAllStringSubmatch(m[1], -1) {
		out = append(out, strings.TrimSpace(regexp.MustCompile(`<[^>]+>`).ReplaceAllString(c[1], "")))
	}
	return out
}

// num reads a number as the page prints it ("1,234", "61 %", "30.5").
func num(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.ReplaceAll(s, ",", ""), "%")), 64)
	if err != nil {
		t.Fatalf("%q on the page is not a number", s)
	}
	return f
}

// TestStatusPageLiveCampaign: a campaign of 800 messages on two numbers at
// 20 msgs/s each (20 s), published with pacer publish and drained by pacer run;
// while it runs, /status in Chromium shows the campaign with its published
// count, the delivered count the pacers recorded (between what campaign
// status said before the page loaded and what the provider had accepted
// after), remaining = published - delivered, its rate and ETA, and both
// numbers with their limit. A screenshot goes to
// $PACER_STATUS_LIVE_SCREENSHOT (else the test's temporary directory).
func TestStatusPageLiveCampaign(t *testing.T) {
	measured(t)
	const per, rate = 400, 20
	e := newE2E(t, whatsapptest.Config{Rate: rate, Burst: 1, Latency: 5 * time.Millisecond})
	keys := []string{"10654850001", "10654850002"}
	var b strings.Builder
	campaignLines(&b, "spring-live", keys, per, "")
	if code, out, errs := e.publish(b.String(), "--partitions", "2"); code != 0 {
		t.Fatalf("publish: %d %s %s", code, out, errs)
	}
	p := e.run("PACER_WHATSAPP_RATE=20", "PACER_WHATSAPP_BURST=1")
	defer p.stop(t)
	base := "http://" + p.metricsAddr(t)

	// Until the replica has published its active keys (every 5 s) and the
	// campaign's counters show deliveries (every 1 s).
	type page struct {
		Keys []struct {
			Key string `json:"key"`
		} `json:"keys"`
		Campaigns []struct {
			Name      string `json:"name"`
			Delivered int64  `json:"delivered"`
		} `json:"campaigns"`
	}
	if !waitFor(60*time.Second, func() bool {
		_, body := httpGet(t, base+"/status.json")
		var s page
		return json.Unmarshal([]byte(body), &s) == nil && len(s.Keys) == 2 && len(s.Campaigns) == 1 && s.Campaigns[0].Delivered > 0
	}) {
		_, body := httpGet(t, base+"/status.json")
		t.Fatalf("the status never showed both numbers and the campaign with deliveries: %s\n%s", body, p.logs())
	}
	var before struct {
		Delivered int64 `json:"delivered"`
	}
	asked := time.Now()
	if err := json.Unmarshal([]byte(e.cli("campaign", "status", "--channel", "whatsapp", "--campaign", "spring-live", "--json")), &before); err != nil {
		t.Fatal(err)
	}
	// The page serves one reading for up to half an interval: wait until
	// the reading it serves began after campaign status asked, so that
	// every reading the browser gets is at least as new.
	if !waitFor(30*time.Second, func() bool {
		_, body := httpGet(t, base+"/status.json")
		var s struct {
			CollectedAt time.Time `json:"collected_at"`
			CollectMS   float64   `json:"collect_ms"`
		}
		return json.Unmarshal([]byte(body), &s) == nil &&
			s.CollectedAt.Add(-time.Duration(s.CollectMS*float64(time.Millisecond))).After(asked)
	}) {
		t.Fatalf("the status page never served a reading begun after %s", asked.Format(time.RFC3339Nano))
	}
	dom := string(testenv.Chromium(t, "--virtual-time-budget=10000", "--dump-dom", base+"/status"))
	accepted := e.deliveredNow()
	if accepted >= 2*per {
		t.Fatalf("the campaign was over (%d delivered) before the page was read: the test shows nothing live", accepted)
	}

	// campaign | state | delivered / published | progress | remaining | dead-lettered | outcomes | achieved/s | ETA
	c := domRow(dom, "data-campaign", "spring-live")
	if len(c) != 9 {
		t.Fatalf("campaign row %q; page:\n%s", c, dom)
	}
	dp := strings.Split(c[2], " / ")
	if c[1] != "running" || len(dp) != 2 || num(t, dp[1]) != 2*per || c[5] != "0" || c[6] != "—" {
		t.Errorf("campaign row %q: want running, published %d, nothing dead-lettered, no webhook outcomes (none sent)", c, 2*per)
	}
	delivered := num(t, dp[0])
	if delivered < float64(before.Delivered) || delivered > float64(accepted) {
		t.Errorf("the page shows %v delivered; campaign status said %d before, the provider accepted %d after", delivered, before.Delivered, accepted)
	}
	if rem := num(t, c[4]); rem != 2*per-delivered {
		t.Errorf("remaining %v, want published - delivered = %v", rem, 2*per-delivered)
	}
	if ach := num(t, c[7]); ach < 0.5*2*rate || ach > 2*rate+5 {
		t.Errorf("achieved %v msgs/s, want about %d (two numbers at %d)", ach, 2*rate, rate)
	}
	if !regexp.MustCompile(`^\d+(\.\d)? s$`).MatchString(c[8]) {
		t.Errorf("ETA %q, want seconds", c[8])
	}
	// key | limit | rate | achieved | utilization | tokens | cooldown | breaker | backlog | replicas
	for _, k := range keys {
		r := domRow(dom, "data-key", k)
		if len(r) != 10 || r[1] != "20" || r[7] != "closed" || r[9] != "1" {
			t.Errorf("row of number %s: %q; want limit 20, breaker closed, 1 replica", k, r)
		}
	}
	t.Logf("page during the campaign: %q (campaign status before %d, provider after %d)", c, before.Delivered, accepted)

	shot := os.Getenv("PACER_STATUS_LIVE_SCREENSHOT")
	if shot == "" {
		shot = filepath.Join(t.TempDir(), "status-live.png")
	}
	testenv.Chromium(t, "--virtual-time-budget=10000", "--window-size=1280,800", "--screenshot="+shot, base+"/status")
	png, err := os.ReadFile(shot)
	if err != nil || len(png) < 10000 || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("screenshot %s: %d bytes, %v; want a PNG", shot, len(png), err)
	}
	t.Logf("screenshot of the status page during the campaign: %s (%d bytes)", shot, len(png))
}
