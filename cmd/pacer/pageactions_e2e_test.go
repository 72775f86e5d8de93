//go:build e2e

package main

// Operators act from the status page of a running `pacer run` (real
// Kafka and Redis, the strict fake WhatsApp API), in headless Chromium
// driven over the DevTools protocol: a viewer's click is refused, an
// operator's pauses the campaign.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/produce"
	"github.com/twmb/franz-go/pkg/kgo"
)

var pageAddrRE = regexp.MustCompile(`msg="status page listening" addr=(\S+)`)

// credentialsFile writes a credentials file of one entry: name and the
// SHA-256 of token.
func credentialsFile(t *testing.T, file, name, token string) string {
	t.Helper()
	d := sha256.Sum256([]byte(token))
	return writeFile(t, file, fmt.Sprintf(`[{"name":%q,"token_sha256":%q}]`, name, hex.EncodeToString(d[:])))
}

// TestPageActionsInChromium: a campaign of 2 x 600 messages at 20 msgs/s
// per number drains through pacer run, whose status page has a listener
// of its own (PACER_PAGE_ADDR) and needs a token to be read. In Chromium a
// viewer logs in and clicks pause on the campaign: the page shows the
// refusal (403) and the campaign keeps sending. An operator logs in and
// clicks pause: the page shows it paused, and the fake provider receives
// none of its messages later than 2 s after the click. The operator then
// sets a key's limit from its form (pacer limit get shows it), lists the
// DLQ by reason, views a record (its key, reason and value) and replays
// the two listed, logged with the operator's name.
func TestPageActionsInChromium(t *testing.T) {
	measured(t)
	const viewerToken, operatorToken = "e2e-viewer-token", "e2e-operator-token"
	e := newE2E(t, whatsapptest.Config{Rate: 40, Burst: 1, Latency: 5 * time.Millisecond})
	keys := []string{"10654860001", "10654860002"}
	// Two records the pacer dead-letters as malformed, for the DLQ part,
	// ahead of the campaign.
	cl := newKafkaClient(t, e.brokers)
	if _, err := produce.EnsureTopic(context.Background(), cl, e.topic, 2); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: e.topic, Key: []byte(keys[0]), Value: []byte(fmt.Sprintf("broken %d", i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	campaignLines(&b, "e2e-pause", keys, 600, "")
	if code, out, errs := e.publish(b.String(), "--partitions", "2"); code != 0 {
		t.Fatalf("publish: %d %s %s", code, out, errs)
	}
	p := e.run("PACER_WHATSAPP_RATE=20", "PACER_WHATSAPP_BURST=1", "PACER_PAGE_ADDR=127.0.0.1:0", "PACER_PAGE_OPEN_READ=false",
		"PACER_PAGE_VIEWERS_FILE="+credentialsFile(t, "viewers.json", "vera", viewerToken),
		"PACER_PAGE_OPERATORS_FILE="+credentialsFile(t, "operators.json", "otto", operatorToken))
	defer p.stop(t)
	p.metricsAddr(t) // logged after the page's listener
	m := pageAddrRE.FindStringSubmatch(p.logs())
	if m == nil {
		t.Fatalf("no status page listener logged\n%s", p.logs())
	}
	base := "http://" + m[1]
	if !strings.Contains(p.logs(), `msg="status page access" reading="1 viewer(s) and 1 operator(s)" actions="1 operator(s)"`) {
		t.Errorf("the start-up log does not say who may read and act\n%s", p.logs())
	}
	if code, body := httpGet(t, base+"/status.json"); code != 401 {
		t.Errorf("/status.json without a token: %d %s; want 401", code, body)
	}
	if code, _ := httpGet(t, "http://"+p.metricsAddr(t)+"/status"); code != 404 {
		t.Errorf("/status on the metrics listener: %d; want 404 (the page has a listener of its own)", code)
	}
	e.waitProgress(20, 60*time.Second, p)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(testenv.ChromiumPath(t)), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 2*time.Minute)
	defer cancel()

	pause := chromedp.CSS(`tr[data-campaign="e2e-pause"] button[data-action="pause"]`)
	// login logs in with token and waits for the campaign's pause button.
	login := func(token, who string) {
		t.Helper()
		if err := chromedp.Do(ctx,
			chromedp.Navigate(base+"/status"),
			chromedp.WaitVisible(chromedp.CSS("#token")),
			chromedp.SendKeys(chromedp.CSS("#token"), token),
			chromedp.Click(chromedp.CSS("#login-btn")),
			chromedp.WaitVisible(pause),
		); err != nil {
			t.Fatalf("log in as %s: %v\n%s", who, err, p.logs())
		}
		if shown, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#who"))); err != nil || shown != who {
			t.Errorf("after log-in the page says %q (%v), want %q", shown, err, who)
		}
	}
	// click clicks pause and returns the message the page shows.
	click := func() string {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("action-msg").textContent = ""`)); err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(ctx, chromedp.Click(pause)); err != nil {
			t.Fatalf("click pause: %v", err)
		}
		msg, err := chromedp.Run(ctx, chromedp.Poll[string](`document.getElementById("action-msg").textContent`, chromedp.WithPollingTimeout(30*time.Second)))
		if err != nil {
			t.Fatalf("no message after the click: %v", err)
		}
		return msg
	}
	state := func() string {
		var s struct{ State string }
		json.Unmarshal([]byte(e.cli("campaign", "status", "--channel", "whatsapp", "--campaign", "e2e-pause", "--json")), &s)
		return s.State
	}

	// A viewer: refused, and the campaign keeps sending.
	login(viewerToken, "logged in as vera (viewer)")
	viewerClicked := time.Now()
	if msg := click(); !strings.Contains(msg, "refused (HTTP 403)") || !strings.Contains(msg, `viewer "vera" may read the status but not act`) {
		t.Errorf("the viewer's click shows %q; want the 403 refusal", msg)
	}
	// Past the 2 s a pause takes to stop the sends, they go on.
	time.Sleep(time.Until(viewerClicked.Add(2500 * time.Millisecond)))
	e.waitProgress(e.deliveredNow()+10, 10*time.Second, p)
	if s := state(); s != "running" {
		t.Errorf("after the viewer's click the campaign is %q, want running", s)
	}
	if !strings.Contains(p.logs(), `msg="status page action refused" component="status page" by=vera role=viewer`) {
		t.Errorf("the refusal is not logged with the viewer's name\n%s", p.logs())
	}

	// An operator: paused; the provider receives nothing 2 s after the click.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#logout"))); err != nil {
		t.Fatal(err)
	}
	login(operatorToken, "logged in as otto (operator)")
	clicked := time.Now()
	if msg := click(); msg != "campaign e2e-pause: paused (was running)" {
		t.Fatalf("the operator's click shows %q; want the campaign paused", msg)
	}
	if s := state(); s != "paused" {
		t.Errorf("after the operator's click the campaign is %q, want paused", s)
	}
	if !strings.Contains(p.logs(), `msg="campaign state set" component="status page" by=otto channel=whatsapp campaign=e2e-pause old=running new=paused`) {
		t.Errorf("the pause is not logged with the operator's name and the old and new state\n%s", p.logs())
	}
	// Watch the provider for 5 s after the click: nothing after 2 s.
	atClick := e.deliveredNow()
	time.Sleep(time.Until(clicked.Add(5 * time.Second))) // the window watched: nothing may arrive in its last 3 s
	var last time.Time
	for _, k := range keys {
		if s := e.fake.Stats()[k]; s.Last.After(last) {
			last = s.Last
		}
	}
	total := e.deliveredNow()
	if total >= 2*600 {
		t.Fatalf("the campaign finished (%d delivered) before the pause: nothing was shown", total)
	}
	if late := last.Sub(clicked); late > 2*time.Second {
		t.Errorf("the provider received the campaign's last message %v after the click (%d at the click, %d now); want within 2 s", late, atClick, total)
	}
	t.Logf("paused from the page: last send %v after the click; %d of %d delivered", last.Sub(clicked).Round(time.Millisecond), total, 2*600)

	// The operator sets a key's limit from its form.
	msg := func(prefix string) string {
		t.Helper()
		m, err := chromedp.Run(ctx, chromedp.Poll[string](fmt.Sprintf(`(t => t.startsWith(%q) && t)(document.getElementById("action-msg").textContent)`, prefix),
			chromedp.WithPollingTimeout(60*time.Second)))
		if err != nil {
			got, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#action-msg")))
			t.Fatalf("no message starting %q: %v; the page shows %q\n%s", prefix, err, got, p.logs())
		}
		return m
	}
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#limit-key"), keys[1]),
		chromedp.SendKeys(chromedp.CSS("#limit-rate"), "7"),
		domClick(`#limit-form button[data-limit="set"]`),
	); err != nil {
		t.Fatal(err)
	}
	if m := msg("key "); m != "key "+keys[1]+": limit 7 msgs/s, burst the channel's (was the channel's)" {
		t.Errorf("after set limit the page shows %q", m)
	}
	if out := e.cli("limit", "get", "--channel", "whatsapp", "--key", keys[1]); !strings.Contains(out, keys[1]+"  7 ") {
		t.Errorf("limit get after the page set it:\n%s", out)
	}

	// The operator browses the DLQ by reason, views a record and replays
	// both (the confirmation answered yes).
	var rows []string
	if !waitFor(60*time.Second, func() bool {
		if err := chromedp.Do(ctx,
			chromedp.SetValue(chromedp.CSS("#dlq-reason"), "malformed"),
			domClick(`#dlq-form button[type="submit"]`),
			chromedp.WaitVisible(chromedp.CSS("#dlq-count")),
		); err != nil {
			t.Fatal(err)
		}
		n, _ := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#dlq tr[data-dlq]")].map(r => r.textContent)`))
		rows = n
		return len(rows) == 2
	}) {
		t.Fatalf("the DLQ list never showed the 2 malformed records: %q\n%s", rows, p.logs())
	}
	view, err := chromedp.Run(ctx, chromedp.Poll[string](`(() => { const b = document.querySelector("#dlq tr[data-dlq] button"); if (b && !b.dataset.clicked) { b.dataset.clicked = 1; b.click(); }
		const r = document.getElementById("dlq-record"); return !r.hidden && r.textContent; })()`, chromedp.WithPollingTimeout(60*time.Second)))
	var rec struct {
		Key, Reason, Value string
		Attempts           int
	}
	if err != nil || json.Unmarshal([]byte(view), &rec) != nil || rec.Key != keys[0] || rec.Reason != "malformed" || !strings.HasPrefix(rec.Value, "broken ") {
		t.Errorf("the DLQ record viewed: %v %s; want key %s, malformed, its value", err, view, keys[0])
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](
		`window.confirm = () => true; document.querySelectorAll("#dlq input[type=checkbox]").forEach(c => c.checked = true); true`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, domClick("#dlq-replay")); err != nil {
		t.Fatal(err)
	}
	if m := msg("replayed"); m != "replayed 2 DLQ record(s) to "+e.topic {
		t.Errorf("after the replay the page shows %q", m)
	}
	if !strings.Contains(p.logs(), `msg="dlq replayed" component="status page" by=otto topic=`+e.topic+` replayed=2`) {
		t.Errorf("the replay is not logged with the operator's name\n%s", p.logs())
	}
}

// domClick waits until the element sel names is visible and clicks it
// through the DOM (element.click()), not at its position on the screen:
// the page redraws its tables every few seconds, and on a loaded machine a
// mouse click computed before a redraw lands on whatever moved under it
// (a limit form submitted by such a click never was).
func domClick(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.WaitVisible(chromedp.CSS(sel)),
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool](fmt.Sprintf(`(b => { b.click(); return true; })(document.querySelector(%q))`, sel))(ctx, t)
			return err
		}),
	)
}
