//go:build e2e

package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
	"github.com/pacerhq/pacer/internal/answertime"
	"github.com/pacerhq/pacer/internal/testenv"
)

// TestWebhooksBench (make bench-webhooks): hearing the provider after the
// send, through real `pacer run` and `pacer webhook` processes, a Kafka
// broker of its own (stopped mid-run) and redis-server. A campaign of
// PACER_BENCH_WEBHOOKS_N marketing templates (default 10,000) on 20
// numbers, one per recipient, to the strict fake WhatsApp API (80/s per
// number, burst 2, answers taking PACER_BENCH_WEBHOOKS_ANSWER, default
// 250ms-350ms, as the Cloud API's typical 200-500 ms) whose status
// webhooks, PACER_BENCH_WEBHOOKS_DELAY after each send (default 5s), fail
// 2% of the recipients with 131026 and 1% with 131049, come twice each and
// reversed for 10% of the messages. Once every message was sent, the
// broker stops for PACER_BENCH_WEBHOOKS_DOWN (default 20s) while the
// webhooks flow: the receiver answers none 2xx (503 after
// PACER_WEBHOOK_PRODUCE_TIMEOUT, 10 s), the fake retries. After the broker
// is back:
//   - `campaign status` of the campaign gives exactly the fake's counts
//     (each event applied once), and the suppressions added are the
//     fake's failed recipients;
//   - a second campaign of marketing templates to the same recipients
//     makes 0 requests to the 131026 and 131049 recipients and one to
//     each other; a third of utility templates to the failed recipients
//     goes to the 131049 ones (marketing only) and not to the 131026 ones;
//   - badly signed webhooks (one before, one during the outage) are
//     answered 401 and counted as bad-signature.
//
// Kept out of `make test-e2e`: it takes minutes and stops a broker.
func TestWebhooksBench(t *testing.T) {
	if os.Getenv("PACER_BENCH_WEBHOOKS") != "1" {
		t.Skip("a bench of minutes that stops a Kafka broker of its own: PACER_BENCH_WEBHOOKS=1 runs it (make bench-webhooks)")
	}
	n := envSetting(t, "PACER_BENCH_WEBHOOKS_N", 10_000, strconv.Atoi)
	down := envSetting(t, "PACER_BENCH_WEBHOOKS_DOWN", 20*time.Second, time.ParseDuration)
	delay := envSetting(t, "PACER_BENCH_WEBHOOKS_DELAY", 5*time.Second, time.ParseDuration)
	typical, _ := answertime.Uniform(250*time.Millisecond, 350*time.Millisecond)
	answer := envSetting(t, "PACER_BENCH_WEBHOOKS_ANSWER", typical, answertime.Parse)
	const numbers = 20
	if n < numbers {
		t.Fatalf("PACER_BENCH_WEBHOOKS_N=%d: want at least one message per number (%d)", n, numbers)
	}
	broker := testenv.PrivateBroker(t)
	e := newE2E(t, whatsapptest.Config{Rate: 80, Burst: 2, AnswerTime: answer})
	e.brokers = broker.Addr
	// A provider sends over many connections at once; a cap keeps the
	// ones waiting on a stopped broker (PACER_WEBHOOK_PRODUCE_TIMEOUT
	// each) within the processes' file limits.
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 200, MaxIdleConnsPerHost: 200}}
	hooks := whatsapptest.Webhooks{Undeliverable: 0.02, MarketingLimit: 0.01, Read: 0.3,
		Duplicate: 1, Reorder: 0.1, Delay: delay, Client: client}
	wh, base := e.startWebhook(t, hooks)
	badSig := func() {
		t.Helper()
		if code := postWhatsAppWebhook(t, base, "not the secret", []byte(`{"object":"whatsapp_business_account","entry":[]}`)); code != 401 {
			t.Fatalf("badly signed webhook answered %d, want 401", code)
		}
	}
	badSig()

	keys := make([]string, numbers)
	for i := range keys {
		keys[i] = fmt.Sprintf("106570%05d", i+1)
	}
	to := func(i int) string { return fmt.Sprintf("1556%07d", i) }
	template := func(tag, campaign, category string, only func(to string) bool) (string, int) {
		var b strings.Builder
		c := 0
		for i := range n {
			if only != nil && !only(to(i)) {
				continue
			}
			fmt.Fprintf(&b, `{"id":"%s-%d","key":%q,"to":%q,"campaign":%q,"category":%q,"payload":{"type":"template","template":{"name":"offer","language":{"code":"en"}}}}`+"\n",
				tag, i, keys[i%numbers], to(i), campaign, category)
			c++
		}
		return b.String(), c
	}
	campaign1 := "wh1:" + e.prefix
	p := e.run("PACER_WHATSAPP_RATE=80", "PACER_WHATSAPP_BURST=1")
	lines, _ := template("c1", campaign1, "marketing", nil)
	start := time.Now()
	if code, _, errOut := e.publish(lines, "--partitions", "4"); code != 0 {
		t.Fatalf("publish: %d %s", code, errOut)
	}
	e.waitDelivered(n, 10*time.Minute, p, wh)
	sent := time.Since(start)

	// The outage: the broker stops once every message was sent, while
	// the webhooks, PACER_BENCH_WEBHOOKS_DELAY after each send, flow (a
	// large campaign) or are about to (a small one).
	now := func() whatsapptest.WebhookStats {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		st, _ := e.fake.WaitWebhooks(ctx)
		return st
	}
	metric := func(result string) float64 {
		v, _ := wh.metric(t, `pacer_webhook_requests_total{channel="whatsapp",result="`+result+`"}`)
		return v
	}
	postsBefore := now().Posts
	stopping := time.Now()
	broker.Down()
	stopped := time.Now()
	// A request whose events Kafka acknowledged just before it stopped
	// may still be answered 200; after a second, none can be.
	time.Sleep(time.Second)
	acceptedDown := metric("accepted")
	badSig()
	time.Sleep(max(down-time.Since(stopped), 0)) // the outage itself
	acceptedWhileDown := metric("accepted") - acceptedDown
	failedWhileDown := metric("kafka-failed")
	starting := time.Now()
	broker.Up()
	up := time.Now()
	outage := up.Sub(stopped)
	if acceptedWhileDown != 0 {
		t.Errorf("%v webhooks answered 2xx while Kafka was down, want 0 (answered before Kafka acknowledged their events)", acceptedWhileDown)
	}
	// The receiver waits PACER_WEBHOOK_PRODUCE_TIMEOUT (10 s) for Kafka
	// before its 503: a shorter outage holds the requests instead.
	if failedWhileDown == 0 && acceptedWhileDown == 0 && down > 12*time.Second {
		t.Fatalf("no webhook answered 503 while Kafka was down (%v): the outage hit nothing; posts before it %d, now %d", outage, postsBefore, now().Posts)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	fs, err := e.fake.WaitWebhooks(ctx)
	if err != nil || fs.Dropped != 0 {
		t.Fatalf("webhooks after the broker came back: %+v: %v (Dropped: given up after the fake's retries)\n%s", fs, err, wh.logs())
	}
	drained := time.Since(up)
	e.waitOutcomesApplied(t, wh, 5*time.Minute) // after the webhooks drained
	applied := time.Since(up)
	if fs.Delivered+fs.Failed131026+fs.Failed131049 != int64(n) || fs.Failed131026 == 0 || fs.Failed131049 == 0 {
		t.Fatalf("the fake decided %+v for %d messages; want every message delivered or failed, some 131026 and some 131049", fs, n)
	}

	want, got := fakeOutcomes(fs), e.outcomesOf(t, campaign1)
	if !got.equal(want) {
		t.Errorf("campaign status --json %+v; want %+v (what the fake decided, each event once)", got, want)
	}
	for reason, w := range map[string]int64{"undeliverable": fs.Failed131026, "marketing-limit": fs.Failed131049} {
		if v := wh.mustMetric(t, `pacer_webhook_suppressions_added_total{channel="whatsapp",reason="`+reason+`"}`); v != float64(w) {
			t.Errorf("suppressions added %s: %v, want %d (the fake's failed recipients)", reason, v, w)
		}
	}

	// Who failed only the fake's webhooks said (Webhooks.Fails: a fate
	// per recipient). The next campaigns' requests per recipient show
	// whom Pacer suppressed.
	fate := map[string]int{}
	for i := range n {
		if code := hooks.Fails(to(i)); code != 0 {
			fate[to(i)] = code
		}
	}
	var f26, f49 int
	for _, f := range fate {
		if f == 131026 {
			f26++
		} else {
			f49++
		}
	}
	if int64(f26) != fs.Failed131026 || int64(f49) != fs.Failed131049 {
		t.Fatalf("recipients by fate: %d 131026, %d 131049; the fake decided %d and %d", f26, f49, fs.Failed131026, fs.Failed131049)
	}
	requests := func(tag string) map[string]int {
		out := map[string]int{}
		for _, a := range e.fake.Arrivals() {
			if !a.Throttled && a.Code == 0 && strings.HasPrefix(a.ID, tag+"-") {
				out[a.To]++
			}
		}
		return out
	}
	suppressed := func(reason string) float64 {
		v, _ := p.metric(t, `pacer_suppressed_total{channel="whatsapp",reason="`+reason+`"}`)
		return v
	}
	// campaign runs a campaign and waits until each of its messages was
	// sent or suppressed, all of them accounted for.
	campaign := func(tag, category string, only func(string) bool, wantSuppressed int) map[string]int {
		t.Helper()
		lines, c := template(tag, tag+":"+e.prefix, category, only)
		before := suppressed("undeliverable") + suppressed("marketing-limit")
		if code, _, errOut := e.publish(lines, "--partitions", "4"); code != 0 {
			t.Fatalf("publish %s: %d %s", tag, code, errOut)
		}
		if !waitFor(5*time.Minute, func() bool {
			s := suppressed("undeliverable") + suppressed("marketing-limit") - before
			return len(requests(tag))+int(s) >= c
		}) {
			t.Fatalf("campaign %s: %d of %d messages sent or suppressed within 5 min\n%s", tag, len(requests(tag)), c, p.logs())
		}
		if s := suppressed("undeliverable") + suppressed("marketing-limit") - before; int(s) != wantSuppressed {
			t.Errorf("campaign %s: %v messages suppressed, want %d", tag, s, wantSuppressed)
		}
		return requests(tag)
	}
	reqs2 := campaign("c2", "marketing", nil, f26+f49)
	toFailed2 := 0
	for i := range n {
		c := reqs2[to(i)]
		if fate[to(i)] != 0 {
			toFailed2 += c
		} else if c != 1 {
			t.Errorf("second campaign: %s got %d requests, want 1", to(i), c)
		}
	}
	if toFailed2 != 0 {
		t.Errorf("second campaign (marketing): %d requests to the %d recipients failed 131026 or 131049, want 0", toFailed2, f26+f49)
	}
	reqs3 := campaign("c3", "utility", func(to string) bool { return fate[to] != 0 }, f26)
	to26, to49 := 0, 0
	for r, f := range fate {
		if f == 131026 {
			to26 += reqs3[r]
		} else if reqs3[r] != 1 {
			t.Errorf("third campaign (utility): %s (131049, marketing only) got %d requests, want 1", r, reqs3[r])
		} else {
			to49++
		}
	}
	if to26 != 0 {
		t.Errorf("third campaign (utility): %d requests to the %d recipients failed 131026, want 0", to26, f26)
	}

	if v := wh.mustMetric(t, `pacer_webhook_requests_total{channel="whatsapp",result="bad-signature"}`); v != 2 {
		t.Errorf("bad-signature requests %v, want 2 (one before, one during the outage)", v)
	}
	t.Logf("%d messages on %d numbers sent in %.1fs; the fake decided %d delivered (%d read), %d failed 131026, %d failed 131049",
		n, numbers, sent.Seconds(), fs.Delivered, fs.Read, fs.Failed131026, fs.Failed131049)
	t.Logf("broker stopped in %.1fs, down %.1fs, ready %.1fs after its start", stopped.Sub(stopping).Seconds(), starting.Sub(stopped).Seconds(), up.Sub(starting).Seconds())
	t.Logf("Kafka down %.1fs (stopped after %d webhooks answered): %v answered 503 kafka-failed, %v 2xx; fake: %d posts answered 2xx, %d attempts not, %d dropped",
		outage.Seconds(), postsBefore, metric("kafka-failed"), acceptedWhileDown, fs.Posts, fs.Retries, fs.Dropped)
	t.Logf("after the broker came back: webhooks drained in %.1fs, outcomes applied (group lag 0) in %.1fs", drained.Seconds(), applied.Seconds())
	t.Logf("campaign status %+v", got)
	t.Logf("second campaign (marketing): %d requests, %d to suppressed recipients; third (utility) to the failed: %d to 131049 recipients, %d to 131026; bad-signature %v",
		len(reqs2), toFailed2, to49, to26, wh.mustMetric(t, `pacer_webhook_requests_total{channel="whatsapp",result="bad-signature"}`))
	p.stop(t)
	wh.stop(t)
}
