//go:build e2e

package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
	"github.com/pacerhq/pacer/partitioner"
	"github.com/twmb/franz-go/pkg/kadm"
)

// TestMessagingLimitEndToEnd: WhatsApp's messaging limit through three
// real `pacer run` replicas, real Kafka and redis-server. A business
// portfolio at tier 250 with two numbers gets campaigns to 400 distinct
// recipients (marketing and utility templates, 200 per number). The fake
// counts the unique recipients of templates per portfolio and fails a
// template past its tier later, by status webhook, as WhatsApp does. The
// replicas together let exactly 250 recipients through (not 3 x 250),
// defer the other 150 (parked as portfolio-limit, none dead-lettered),
// keep delivering to the 250 admitted ones (repeats through the other
// number), and send the 150 once the window (PACER_PORTFOLIO_WINDOW, short
// here) has moved past the first ones: 400 recipients, each campaign
// message exactly once, none failed by the fake.
func TestMessagingLimitEndToEnd(t *testing.T) {
	measured(t)
	const (
		tier, n, repeats = 250, 400, 50
		// window: the guard's; it must outlast the first phase (replicas
		// are running before it starts: publish, 250 deliveries, the
		// repeats), which takes a few seconds, tens on a loaded machine.
		window = 40 * time.Second
		// sendTimeout: PACER_SEND_TIMEOUT, short here. The guard keeps a
		// recipient window + PACER_LOOKAHEAD (5 s) + PACER_SEND_TIMEOUT, as
		// long as a message admitted by it can take to reach WhatsApp,
		// which counts from the arrival: the fake's window is the
		// portfolio's own.
		sendTimeout = 2 * time.Second
		margin      = 5*time.Second + sendTimeout
	)
	// Every candidate number is in the fake's portfolio; two are chosen
	// once the replicas own their partitions.
	brand := map[string]string{}
	for _, k := range candidateKeys() {
		brand[k] = "brand"
	}
	e := newE2E(t, whatsapptest.Config{MessagingLimit: tier, MessagingWindow: window, Portfolios: brand})
	// The statuses go to a receiver that takes them: what counts is how
	// many the fake sent failed, which WaitWebhooks tells.
	hooks := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(hooks.Close)
	e.fake.SendWebhooks(whatsapptest.Webhooks{URL: hooks.URL, AppSecret: []byte("e2e"), Delay: 10 * time.Millisecond})
	env := []string{"PACER_PORTFOLIO_WINDOW=" + window.String(), "PACER_SEND_TIMEOUT=" + sendTimeout.String()}
	var ps []*proc
	for range 3 {
		ps = append(ps, e.run(env...))
	}
	e.waitMembersOwn(len(ps), e.topic, 90*time.Second, ps...)
	// The two numbers' records go to partitions of two different
	// replicas (a record's partition is its pacing key's): a guard kept
	// per process would let 2 x 200 recipients through. The deferred
	// records come back on retry topics, which any replica may own.
	keys := keysOfTwoMembers(t, e)
	for _, k := range keys {
		e.cli("portfolio", "set", "--channel", "whatsapp", "--key", k, "--portfolio", "brand", "--tier", fmt.Sprint(tier))
	}
	logs := func() string {
		var b strings.Builder
		for _, p := range ps {
			b.WriteString(p.logs())
		}
		return b.String()
	}
	sum := func(series string) (s float64) {
		for _, p := range ps {
			v, _ := p.metric(t, series)
			s += v
		}
		return s
	}
	template := func(id, key, to, category string) string {
		return fmt.Sprintf(`{"id":%q,"key":%q,"to":%q,"category":%q,"payload":{"type":"template","template":{"name":"offer","language":{"code":"en"}}}}`+"\n",
			id, key, to, category)
	}
	var lines strings.Builder
	for i := range n {
		cat := "marketing"
		if i%4 == 3 {
			cat = "utility"
		}
		lines.WriteString(template(fmt.Sprintf("c-%03d", i), keys[i%2], fmt.Sprintf("+1555%07d", i), cat))
	}
	start := time.Now()
	if code, out, errs := e.publish(lines.String()); code != 0 {
		t.Fatalf("publish: %d %s %s", code, out, errs)
	}
	requeued := `pacer_requeued_total{channel="whatsapp",reason="portfolio-limit"}`
	over := func() bool { return e.fake.MessagingLimit("brand").OverLimit > 0 }
	if !waitFor(60*time.Second, func() bool { return over() || e.deliveredNow() >= tier && sum(requeued) >= n-tier }) {
		t.Fatalf("not %d delivered and %d deferred within 60 s: %d delivered, %v deferred\n%s",
			tier, n-tier, e.deliveredNow(), sum(requeued), logs())
	}
	if over() {
		time.Sleep(time.Second) // the rest of the burst
		lim := e.fake.MessagingLimit("brand")
		t.Fatalf("the fake took %d templates to recipients past the tier of %d (they fail by webhook with %d); %d delivered, %v deferred",
			lim.OverLimit, tier, whatsapptest.MessagingLimitCode, e.deliveredNow(), sum(requeued))
	}
	// The admitted recipients, as the fake saw them.
	admitted := map[string]string{} // recipient -> the number it got its template from
	for _, a := range e.fake.Arrivals() {
		if a.Code == 0 && !a.Throttled {
			admitted[a.To] = a.Key
		}
	}
	// Repeats to admitted recipients, each through the number it did not
	// hear from: the window is the portfolio's, not the number's.
	lines.Reset()
	i := 0
	for to, key := range admitted {
		if i == repeats {
			break
		}
		other := keys[0]
		if key == keys[0] {
			other = keys[1]
		}
		lines.WriteString(template(fmt.Sprintf("r-%03d", i), other, to, "utility"))
		i++
	}
	if code, out, errs := e.publish(lines.String()); code != 0 {
		t.Fatalf("publish: %d %s %s", code, out, errs)
	}
	if !waitFor(60*time.Second, func() bool { return e.deliveredNow() >= tier+repeats }) {
		t.Fatalf("repeats to admitted recipients: %d of %d delivered within 60 s\n%s", e.deliveredNow(), tier+repeats, logs())
	}
	time.Sleep(time.Second) // a message the guard let through too many would show now
	first := time.Since(start)
	if first >= window {
		t.Fatalf("the first phase took %v, not within the window %v: the machine is too slow for this test's window", first, window)
	}
	lim := e.fake.MessagingLimit("brand")
	distinct := map[string]bool{}
	for _, a := range e.fake.Arrivals() {
		if a.Code == 0 && !a.Throttled {
			distinct[a.To] = true
		}
	}
	if len(distinct) != tier || lim.Recipients != tier || lim.OverLimit != 0 || e.deliveredNow() != tier+repeats {
		t.Fatalf("within the window the fake saw %d distinct recipients (window %d, %d past the tier), %d messages; want exactly %d recipients, none past it, %d messages (%d repeats)\n%s",
			len(distinct), lim.Recipients, lim.OverLimit, e.deliveredNow(), tier, tier+repeats, repeats, logs())
	}
	dlq := func() (v float64) {
		for _, p := range ps {
			v += p.metricSum(t, "pacer_dlq_total")
		}
		return v
	}
	if v := dlq(); v != 0 {
		t.Fatalf("%v dead-lettered, want none\n%s", v, logs())
	}
	st := e.cli("portfolio", "status", "--channel", "whatsapp", "--portfolio", "brand")
	t.Logf("after %v: %s", first.Round(time.Millisecond), strings.TrimSpace(st))

	// The window moves past the first recipients: the deferred go out.
	if !waitFor(window+margin+60*time.Second, func() bool { return e.deliveredNow() >= n+repeats }) {
		t.Fatalf("after the window: %d of %d delivered within %v\n%s", e.deliveredNow(), n+repeats, window+margin+60*time.Second, logs())
	}
	time.Sleep(time.Second)
	ids := map[string]int{}
	distinct = map[string]bool{}
	for _, a := range e.fake.Arrivals() {
		if a.Code == 0 && !a.Throttled {
			ids[a.ID]++
			distinct[a.To] = true
		}
	}
	for id, c := range ids {
		if c != 1 {
			t.Errorf("%s sent %d times, want once", id, c)
		}
	}
	if len(ids) != n+repeats || len(distinct) != n {
		t.Errorf("%d messages to %d recipients, want %d to %d", len(ids), len(distinct), n+repeats, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wst, err := e.fake.WaitWebhooks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lim := e.fake.MessagingLimit("brand"); lim.OverLimit != 0 || wst.FailedLimit != 0 {
		t.Errorf("%d templates past the tier, %d failed by webhook with %d; want none", lim.OverLimit, wst.FailedLimit, whatsapptest.MessagingLimitCode)
	}
	if v := dlq(); v != 0 {
		t.Errorf("%v dead-lettered, want none", v)
	}
	t.Logf("%d recipients, %d repeats, %v portfolio-limit deferrals over 3 replicas, %d webhooks (%d delivered, %d failed past the tier), all delivered after %v",
		n, repeats, sum(requeued), wst.Posts, wst.Delivered, wst.FailedLimit, time.Since(start).Round(time.Millisecond))
	for _, p := range ps {
		p.stop(t)
	}
}

// candidateKeys are the phone-number IDs keysOfTwoMembers picks from.
func candidateKeys() []string {
	ks := make([]string, 200)
	for i := range ks {
		ks[i] = fmt.Sprintf("1065403522%05d", i)
	}
	return ks
}

// keysOfTwoMembers returns two of candidateKeys whose records land on
// partitions of e.topic owned by two different members of e's group.
func keysOfTwoMembers(t *testing.T, e *e2e) [2]string {
	t.Helper()
	adm := kadm.NewClient(newKafkaClient(t, e.brokers))
	group := "pacer-" + e.prefix
	gs, err := adm.DescribeGroups(context.Background(), group)
	if err != nil || gs.Error() != nil {
		t.Fatalf("describe group %s: %v %v", group, err, gs.Error())
	}
	owner := map[int32]string{}
	for _, m := range gs[group].Members {
		c, _ := m.Assigned.AsConsumer()
		if c == nil {
			continue
		}
		for _, tp := range c.Topics {
			if tp.Topic == e.topic {
				for _, p := range tp.Partitions {
					owner[p] = m.MemberID
				}
			}
		}
	}
	var first string
	for _, k := range candidateKeys() {
		o, ok := owner[partitioner.Partition([]byte(k), len(owner))]
		switch {
		case !ok:
		case first == "":
			first = k
		case owner[partitioner.Partition([]byte(first), len(owner))] != o:
			return [2]string{first, k}
		}
	}
	t.Fatalf("no two candidate keys of different members (owners %v)", owner)
	return [2]string{}
}
