//go:build e2e

package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
	"github.com/pacerhq/pacer/pacer/webhook"
	"github.com/twmb/franz-go/pkg/kadm"
)

// TestWebhookSuppressionEndToEnd: through real `pacer run` and `pacer
// webhook` processes, real Kafka and redis-server. The WhatsApp fake
// reports 20% of the recipients failed with 131026 by webhook only (the
// sends were answered 200), sends every webhook twice and 30% of the
// messages' statuses reversed. A second campaign to the same recipients
// makes no request to those recipients (dead-lettered
// suppressed:undeliverable) and delivers to the others again; a badly
// signed webhook is refused and counted.
func TestWebhookSuppressionEndToEnd(t *testing.T) {
	e := newE2E(t, whatsapptest.Config{})
	wh, base := e.startWebhook(t, whatsapptest.Webhooks{Undeliverable: 0.2, Duplicate: 1, Reorder: 0.3, Delay: 50 * time.Millisecond})

	if code, body := httpGet(t, base+"/webhook/whatsapp?hub.mode=subscribe&hub.verify_token=e2e-verify&hub.challenge=77"); code != 200 || body != "77" {
		t.Fatalf("handshake: %d %q, want 200 77", code, body)
	}
	bad := []byte(`{"object":"whatsapp_business_account","entry":[]}`)
	if code := postWhatsAppWebhook(t, base, "not the secret", bad); code != 401 {
		t.Fatalf("badly signed webhook answered %d, want 401", code)
	}
	if v := wh.mustMetric(t, `pacer_webhook_requests_total{channel="whatsapp",result="bad-signature"}`); v != 1 {
		t.Errorf("bad-signature requests %v, want 1", v)
	}

	const n = 150
	key := "1065" + e.prefix[len(e.prefix)-8:]
	lines := func(tag string) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, `{"id":"%s-%d","key":%q,"to":"1555%07d","payload":{"type":"text","text":{"body":"m"}}}`+"\n", tag, i, key, i)
		}
		return b.String()
	}
	p := e.run()
	if code, _, errOut := e.publish(lines("c1")); code != 0 {
		t.Fatalf("publish: %d %s", code, errOut)
	}
	e.waitDelivered(n, 90*time.Second, p, wh)
	st := e.waitWebhooks(t)
	failed := int(st.Failed131026)
	if failed < 10 || failed > 60 {
		t.Fatalf("%d of %d recipients failed with 131026, want about 20%%", failed, n)
	}
	series := `pacer_webhook_suppressions_added_total{channel="whatsapp",reason="undeliverable"}`
	// One entry per recipient: its hash takes the number with or without "+".
	if !waitFor(60*time.Second, func() bool { v, _ := wh.metric(t, series); return v >= float64(failed) }) {
		v, _ := wh.metric(t, series)
		t.Fatalf("%v undeliverable entries added within 60 s, want %d\n%s", v, failed, wh.logs())
	}

	// Which recipients failed only the fake's webhooks said: the
	// second campaign's requests per recipient show whom it suppressed.
	if code, _, errOut := e.publish(lines("c2")); code != 0 {
		t.Fatalf("publish: %d %s", code, errOut)
	}
	if !waitFor(90*time.Second, func() bool {
		v, _ := p.metric(t, `pacer_dlq_total{channel="whatsapp",reason="suppressed"}`)
		return v >= float64(failed) && e.deliveredNow() >= 2*n-failed
	}) {
		t.Fatalf("second campaign: not %d delivered and %d suppressed within 90 s\n%s", 2*n-failed, failed, p.logs())
	}
	time.Sleep(time.Second) // a request to a suppressed recipient would show now
	perTo := map[string]int{}
	for _, a := range e.fake.Arrivals() {
		if !a.Throttled && a.Code == 0 {
			perTo[a.To]++
		}
	}
	once := 0
	for to, c := range perTo {
		switch c {
		case 1:
			once++
		case 2:
		default:
			t.Errorf("%s got %d requests, want 1 (suppressed) or 2", to, c)
		}
	}
	if once != failed || len(perTo) != n {
		t.Errorf("%d recipients asked once (the second campaign suppressed them) of %d, want the %d the fake failed with 131026", once, len(perTo), failed)
	}
	if v := p.mustMetric(t, `pacer_suppressed_total{channel="whatsapp",reason="undeliverable"}`); v != float64(failed) {
		t.Errorf("pacer_suppressed_total{undeliverable} = %v, want %d", v, failed)
	}
	t.Logf("%d messages, %d failed by webhook only, %d webhooks posted (every one twice), %d retried; second campaign: %d requests",
		n, failed, st.Posts, st.Retries, e.deliveredNow()-n)
	p.stop(t)
	wh.stop(t)
}

// TestWebhookThroughputAndQualityEndToEnd: through a real `pacer
// webhook` process, real Kafka and redis-server, with
// PACER_WEBHOOK_QUALITY_PAUSE=true. A status webhook names the number's
// display number beside its phone-number ID; Meta's THROUGHPUT_UPGRADE
// for that display number then makes the key's limit (the one `pacer
// limit set` writes, which every `pacer run` re-reads each second:
// TestLiveLimitRaiseShort) 1,000 msgs/s within 1 s of the POST. A FLAGGED
// event pauses the account's portfolio's marketing, which `pacer portfolio
// status` shows and `pacer portfolio resume` ends. The messaging-limit
// tiers of business_capability_update and of phone_number_quality_update
// are the portfolio's within 1 s of their POSTs.
func TestWebhookThroughputAndQualityEndToEnd(t *testing.T) {
	e := newE2E(t, whatsapptest.Config{})
	secret := webhookSecret
	wh := startPacer(t, e.env("PACER_WEBHOOK_ADDR=127.0.0.1:0", "PACER_WEBHOOK_WHATSAPP_APP_SECRET="+secret,
		"PACER_WEBHOOK_WHATSAPP_VERIFY_TOKEN=e2e-verify", "PACER_WEBHOOK_GROUP=wh-"+e.prefix, "PACER_WEBHOOK_PARTITIONS=2",
		"PACER_WEBHOOK_QUALITY_PAUSE=true"), "webhook")
	defer wh.stop(t)
	base := "http://" + wh.metricsAddr(t)
	suffix := e.prefix[len(e.prefix)-8:]
	key, number, account := "1065"+suffix, "1555"+suffix, "waba-"+suffix
	env := map[string]string{"PACER_REDIS_URL": e.redis, "PACER_REDIS_PREFIX": e.prefix}
	if code, _, errs := runCLI(env, "portfolio", "set", "--channel", "whatsapp", "--key", key, "--account", account, "--portfolio", "acme", "--tier", "unlimited"); code != 0 {
		t.Fatalf("portfolio set: exit %d %s", code, errs)
	}
	if code, _, errs := runCLI(env, "limit", "set", "--channel", "whatsapp", "--key", key, "--rate", "80", "--burst", "40"); code != 0 {
		t.Fatalf("limit set: exit %d %s", code, errs)
	}
	post := func(body string) {
		t.Helper()
		if code := postWhatsAppWebhook(t, base, secret, []byte(body)); code != 200 {
			t.Fatalf("webhook answered %d, want 200", code)
		}
	}
	quality := func(event string) string {
		return `{"object":"whatsapp_business_account","entry":[{"id":"` + account + `","time":1800000000,"changes":[{"field":"phone_number_quality_update",` +
			`"value":{"display_phone_number":"` + number + `","event":"` + event + `","current_limit":"TIER_UNLIMITED"}}]}]}`
	}
	post(`{"object":"whatsapp_business_account","entry":[{"id":"` + account + `","changes":[{"field":"messages","value":{"messaging_product":"whatsapp",` +
		`"metadata":{"display_phone_number":"` + number + `","phone_number_id":"` + key + `"},` +
		`"statuses":[{"id":"wamid.e2e","status":"sent","timestamp":"1800000000","recipient_id":"15550001"}]}}]}]}`)
	applied := `pacer_webhook_events_applied_total{channel="whatsapp",kind="sent"}`
	if !waitFor(60*time.Second, func() bool { v, _ := wh.metric(t, applied); return v >= 1 }) {
		t.Fatalf("the status webhook was not applied within 60 s\n%s", wh.logs())
	}
	limit := func() string {
		_, out, _ := runCLI(env, "limit", "get", "--channel", "whatsapp", "--key", key)
		return out
	}
	raised := regexp.MustCompile(`(?m)^` + key + `\s+1000\s+40$`)
	start := time.Now()
	post(quality("THROUGHPUT_UPGRADE"))
	if !waitFor(time.Second-time.Since(start), func() bool { return raised.MatchString(limit()) }) {
		t.Fatalf("1 s after THROUGHPUT_UPGRADE, pacer limit get says %q; want 1000 msgs/s\n%s", limit(), wh.logs())
	}
	t.Logf("limit raised %v after the POST: %s", time.Since(start), strings.TrimSpace(limit()))

	status := func() string {
		_, out, _ := runCLI(env, "portfolio", "status", "--channel", "whatsapp", "--portfolio", "acme")
		return out
	}
	// A tier announced by business_capability_update is the guard's tier
	// (read from Redis at every admission) within 1 s of the POST.
	start = time.Now()
	post(`{"object":"whatsapp_business_account","entry":[{"id":"` + account + `","time":1800000000,"changes":[{"field":"business_capability_update",` +
		`"value":{"max_daily_conversation_per_phone":-1,"max_daily_conversations_per_business":"TIER_10K"}}]}]}`)
	if !waitFor(time.Second-time.Since(start), func() bool { return strings.Contains(status(), "tier:     10000") }) {
		t.Fatalf("1 s after business_capability_update TIER_10K, portfolio status says %q; want tier 10000\n%s", status(), wh.logs())
	}
	t.Logf("tier set %v after the POST", time.Since(start))
	// So is the limit a phone_number_quality_update carries for the number
	// (its key's portfolio): max_daily_conversations_per_business over the
	// deprecated current_limit, old_limit not read.
	start = time.Now()
	post(`{"object":"whatsapp_business_account","entry":[{"id":"` + account + `","time":1800000000,"changes":[{"field":"phone_number_quality_update",` +
		`"value":{"display_phone_number":"` + number + `","event":"UPGRADE","old_limit":"TIER_10K","current_limit":"TIER_UNLIMITED",` +
		`"max_daily_conversations_per_business":"TIER_100K"}}]}]}`)
	if !waitFor(time.Second-time.Since(start), func() bool { return strings.Contains(status(), "tier:     100000\n") }) {
		t.Fatalf("1 s after phone_number_quality_update TIER_100K, portfolio status says %q; want tier 100000\n%s", status(), wh.logs())
	}
	t.Logf("tier from the quality update set %v after the POST", time.Since(start))

	post(quality("FLAGGED"))
	if !waitFor(30*time.Second, func() bool { return strings.Contains(status(), "FLAGGED at 2027-01-15T08:00:00Z; marketing PAUSED") }) {
		t.Fatalf("portfolio status after FLAGGED: %q; want marketing paused\n%s", status(), wh.logs())
	}
	if code, out, errs := runCLI(env, "portfolio", "resume", "--channel", "whatsapp", "--portfolio", "acme"); code != 0 || !strings.Contains(out, "marketing resumed") {
		t.Fatalf("resume: exit %d %q %q", code, out, errs)
	}
	if out := status(); !strings.Contains(out, "quality:  FLAGGED at 2027-01-15T08:00:00Z\n") {
		t.Errorf("portfolio status after resume: %q; want FLAGGED, not paused", out)
	}
}

// webhookSecret is the WhatsApp app secret of the e2e tests' `pacer
// webhook`.
const webhookSecret = "e2e-app-secret"

// postWhatsAppWebhook posts body to the WhatsApp webhook of the `pacer
// webhook` at base, signed with app secret secret as Meta signs
// (X-Hub-Signature-256), and returns the answer's status code.
func postWhatsAppWebhook(t *testing.T, base, secret string, body []byte) int {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/webhook/whatsapp", bytes.NewReader(body))
	req.Header.Set("X-Hub-Signature-256", webhook.WhatsAppSignature([]byte(secret), body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// startWebhook starts a `pacer webhook` of e's settings (the WhatsApp app
// secret webhookSecret, verify token e2e-verify, its own group) and makes
// e's fake send its status webhooks there, as hooks says (its URL and
// AppSecret filled in). It returns the process and its base URL.
func (e *e2e) startWebhook(t *testing.T, hooks whatsapptest.Webhooks) (*proc, string) {
	t.Helper()
	wh := startPacer(t, e.env("PACER_WEBHOOK_ADDR=127.0.0.1:0", "PACER_WEBHOOK_WHATSAPP_APP_SECRET="+webhookSecret,
		"PACER_WEBHOOK_WHATSAPP_VERIFY_TOKEN=e2e-verify", "PACER_WEBHOOK_GROUP=wh-"+e.prefix, "PACER_WEBHOOK_PARTITIONS=2"), "webhook")
	base := "http://" + wh.metricsAddr(t)
	hooks.URL, hooks.AppSecret = base+"/webhook/whatsapp", []byte(webhookSecret)
	e.fake.SendWebhooks(hooks)
	return wh, base
}

// waitOutcomesApplied waits at most within until the outcome group of the
// webhook command wh (wh-<prefix>, as startWebhook names it) has no lag
// left: every status event in Kafka has been applied and committed. It
// fails the test, with wh's log, if the group still lags then.
func (e *e2e) waitOutcomesApplied(t *testing.T, wh *proc, within time.Duration) {
	t.Helper()
	adm := kadm.NewClient(newKafkaClient(t, e.brokers))
	group := "wh-" + e.prefix
	if !waitFor(within, func() bool {
		lags, err := adm.Lag(context.Background(), group)
		return err == nil && lags[group].Lag.Total() == 0 && len(lags[group].Lag) > 0
	}) {
		t.Fatalf("the outcome group %s still lags after %v\n%s", group, within, wh.logs())
	}
}

// waitWebhooks waits at most 60 s until e's fake has sent every status
// webhook it decided on, failing the test if it could not or dropped any,
// and returns what it decided.
func (e *e2e) waitWebhooks(t *testing.T) whatsapptest.WebhookStats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := e.fake.WaitWebhooks(ctx)
	if err != nil || st.Dropped != 0 {
		t.Fatalf("webhooks %+v: %v", st, err)
	}
	return st
}
