//go:build e2e

package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
)

// TestWebhookCampaignOutcomesEndToEnd: through real `pacer run` and
// `pacer webhook` processes, real Kafka and redis-server. The WhatsApp
// fake sends its status webhooks late, every one twice, and half of the
// messages' statuses in reverse order (a read before its delivered);
// shares of recipients fail 131026 or 131049 and a share read. `campaign
// status --json` then reports exactly the delivered-to-device, read and
// failed counts the fake decided, each message once.
func TestWebhookCampaignOutcomesEndToEnd(t *testing.T) {
	e := newE2E(t, whatsapptest.Config{})
	wh, _ := e.startWebhook(t, whatsapptest.Webhooks{Undeliverable: 0.15, MarketingLimit: 0.1, Read: 0.4, Duplicate: 1, Reorder: 0.5,
		Delay: 200 * time.Millisecond})

	const n = 150
	key := "1065" + e.prefix[len(e.prefix)-8:]
	var b strings.Builder
	// The events topic is shared by every run on the broker, and a new
	// group reads it from the start: this run's campaign and ids are its
	// own, so earlier runs' events count elsewhere.
	campaign := "oc:" + e.prefix
	for i := range n {
		fmt.Fprintf(&b, `{"id":"%s-%d","key":%q,"to":"1555%07d","campaign":%q,"payload":{"type":"text","text":{"body":"m"}}}`+"\n",
			e.prefix, i, key, i, campaign)
	}
	p := e.run()
	if code, _, errOut := e.publish(b.String()); code != 0 {
		t.Fatalf("publish: %d %s", code, errOut)
	}
	e.waitDelivered(n, 90*time.Second, p, wh)
	fs := e.waitWebhooks(t)
	if d, dups := e.delivered(); d != n || dups != 0 {
		t.Fatalf("the fake accepted %d messages (%d twice), want %d once", d, dups, n)
	}
	if fs.Read < 20 || fs.Failed131026 < 5 || fs.Failed131049 < 3 || fs.Delivered+fs.Failed131026+fs.Failed131049 != n {
		t.Fatalf("the fake decided %+v; want about 40%% read, 15%% 131026, 10%% 131049 of %d", fs, n)
	}

	want := fakeOutcomes(fs)
	read := func() campaignOutcomes { return e.outcomesOf(t, campaign) }
	same := campaignOutcomes.equal

	// Every webhook was answered 200, so its event is in Kafka: once the
	// outcome group has no lag, every one (each twice) has been applied
	// and committed, and a count of more would show.
	e.waitOutcomesApplied(t, wh, 60*time.Second)
	var got campaignOutcomes
	if got = read(); !same(got, want) {
		t.Fatalf("campaign status --json outcomes %+v; want %+v (what the fake decided, each message once)\n%s", got, want, wh.logs())
	}
	if v := wh.mustMetric(t, `pacer_webhook_outcomes_total{channel="whatsapp",outcome="device_delivered",result="duplicate"}`); v < float64(fs.Delivered) {
		t.Errorf("device_delivered duplicates %v, want at least %d (every webhook came twice)", v, fs.Delivered)
	}
	text := e.cli("campaign", "status", "--channel", "whatsapp", "--campaign", campaign)
	for _, line := range []string{
		fmt.Sprintf("  on device     %d ", fs.Delivered), fmt.Sprintf("  read          %d\n", fs.Read),
		fmt.Sprintf("  failed        %d\n", fs.Failed131026+fs.Failed131049), fmt.Sprintf("    131026               %d\n", fs.Failed131026),
	} {
		if !strings.Contains(text, line) {
			t.Errorf("campaign status lacks %q:\n%s", line, text)
		}
	}
	t.Logf("%d messages: %d delivered (%d read), %d failed 131026, %d failed 131049; %d webhooks posted; campaign status %+v",
		n, fs.Delivered, fs.Read, fs.Failed131026, fs.Failed131049, fs.Posts, got)
	p.stop(t)
	wh.stop(t)
}

// campaignOutcomes is the outcomes part of `campaign status --json`.
type campaignOutcomes struct {
	DeviceDelivered int64            `json:"device_delivered"`
	Read            int64            `json:"read"`
	Failed          map[string]int64 `json:"failed"`
	Bounced         map[string]int64 `json:"bounced"`
	Suppressed      map[string]int64 `json:"suppressed"`
}

// fakeOutcomes is what `campaign status` counts, each event once, for the
// fates the WhatsApp fake's webhooks decided (fs).
func fakeOutcomes(fs whatsapptest.WebhookStats) campaignOutcomes {
	return campaignOutcomes{DeviceDelivered: fs.Delivered, Read: fs.Read,
		Failed:     map[string]int64{"131026": fs.Failed131026, "131049": fs.Failed131049},
		Suppressed: map[string]int64{"undeliverable": fs.Failed131026, "marketing-limit": fs.Failed131049}}
}

// equal reports whether a and b count the same (an empty map equals none).
func (a campaignOutcomes) equal(b campaignOutcomes) bool {
	return a.DeviceDelivered == b.DeviceDelivered && a.Read == b.Read && maps.Equal(a.Failed, b.Failed) &&
		maps.Equal(a.Bounced, b.Bounced) && maps.Equal(a.Suppressed, b.Suppressed)
}

// outcomesOf reads campaign's outcomes with `pacer campaign status --json`.
func (e *e2e) outcomesOf(t testing.TB, campaign string) campaignOutcomes {
	t.Helper()
	var st campaignOutcomes
	if err := json.Unmarshal([]byte(e.cli("campaign", "status", "--channel", "whatsapp", "--campaign", campaign, "--json")), &st); err != nil {
		t.Fatal(err)
	}
	return st
}
