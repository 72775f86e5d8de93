//go:build e2e

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/twmb/franz-go/pkg/kadm"
)

// TestUnknownOutcomesResolvedEndToEnd: through real `pacer run` and
// `pacer webhook` processes, real Kafka and redis-server. The WhatsApp
// fake answers after 1.5 s, so sends are in flight when the `pacer run`
// is SIGKILLed; the fake still takes the messages whose requests arrived
// and sends their status webhooks (each twice, half in reverse order). A
// new `pacer run` dead-letters as unknown-outcome those and the few
// claimed whose request had not left; the webhooks resolve every one the
// fake had: the campaign counts them delivered and no longer
// unknown-outcome, the ledger holds them delivered. A `pacer dlq replay`
// of the unknown outcomes then sends only those the fake never had: no
// message arrives twice, every one arrives.
func TestUnknownOutcomesResolvedEndToEnd(t *testing.T) {
	e := newE2E(t, whatsapptest.Config{Latency: 1500 * time.Millisecond})
	wh, _ := e.startWebhook(t, whatsapptest.Webhooks{Duplicate: 1, Reorder: 0.5, Read: 0.3})

	const n = 300
	key := "1065" + e.prefix[len(e.prefix)-8:]
	campaign := "uo:" + e.prefix
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"id":"%s-%d","key":%q,"to":"1555%07d","campaign":%q,"payload":{"type":"text","text":{"body":"m"}}}`+"\n",
			e.prefix, i, key, i, campaign)
	}
	if code, _, errOut := e.publish(b.String()); code != 0 {
		t.Fatalf("publish: %d %s", code, errOut)
	}
	env := []string{"PACER_WHATSAPP_RATE=40", "PACER_WHATSAPP_BURST=10", "PACER_KAFKA_SESSION_TIMEOUT=6s"}
	p := e.run(env...)
	if !waitFor(90*time.Second, func() bool { return e.deliveredNow() >= 40 && e.fake.InFlight() >= 10 }) {
		t.Fatalf("no sends in flight within 90 s (delivered %d, in flight %d)\n%s", e.deliveredNow(), e.fake.InFlight(), p.logs())
	}
	inflight := e.fake.InFlight()
	p.kill()
	t.Logf("SIGKILL with %d requests in flight, %d arrived", inflight, e.deliveredNow())
	p = e.run(env...)
	adm := kadm.NewClient(newKafkaClient(t, e.brokers))
	delivered, reasons := e.waitFinished(adm, n, 3*time.Minute)
	unknown, had := unknownOutcomes(t, reasons, delivered) // had: the fake took it, its webhooks come
	if had == 0 {
		t.Fatalf("no message the fake took was dead-lettered unknown-outcome (%d of %d): the kill hit no send in flight", unknown, len(delivered))
	}
	e.waitWebhooks(t)

	type status struct {
		Delivered   int64            `json:"delivered"`
		DeadLetters map[string]int64 `json:"dead_letters"`
		Remaining   int64            `json:"remaining"`
	}
	var st status
	resolved := waitFor(60*time.Second, func() bool {
		st = status{}
		if err := json.Unmarshal([]byte(e.cli("campaign", "status", "--channel", "whatsapp", "--campaign", campaign, "--json")), &st); err != nil {
			t.Fatal(err)
		}
		return st.Delivered == int64(n-unknown+had) && st.DeadLetters["unknown-outcome"] == int64(unknown-had)
	})
	if !resolved {
		t.Errorf("campaign status: delivered %d, dead letters %v; want %d delivered, unknown-outcome %d (%d dead-lettered so, %d of them taken by the fake)\n%s",
			st.Delivered, st.DeadLetters, n-unknown+had, unknown-had, unknown, had, wh.logs())
	}
	if st.Remaining != 0 {
		t.Errorf("campaign status: remaining %d, want 0", st.Remaining)
	}
	if v := wh.mustMetric(t, `pacer_webhook_unknown_resolved_total{channel="whatsapp",outcome="delivered"}`); v != float64(had) {
		t.Errorf("pacer_webhook_unknown_resolved_total{delivered} = %v, want %d (each unknown outcome the fake took, once)", v, had)
	}

	// The ledger holds every message the fake took delivered.
	led := ledger.New(e.redisClient(), bucket.NewKeys(e.prefix), 0)
	for i := range n {
		id := fmt.Sprintf("%s-%d", e.prefix, i)
		if !delivered[id] {
			continue
		}
		if ok, err := led.IsDelivered(context.Background(), "whatsapp", key, id); err != nil || !ok {
			t.Errorf("ledger: %s delivered %v, %v; want true", id, ok, err)
		}
	}

	// A replay of the DLQ skips the resolved ones and sends the others:
	// every message arrives, none twice.
	e.cli("dlq", "replay", "--channel", "whatsapp", "--topic", e.topic, "--reason", "unknown-outcome")
	if !waitFor(time.Minute, func() bool { return len(e.deliveredIDs()) == n }) {
		t.Errorf("after the replay the fake had %d messages, want %d", len(e.deliveredIDs()), n)
	}
	e.waitFinished(adm, n, time.Minute) // the replayed records read (the group's lag 0 again)
	if _, dups := e.delivered(); dups != 0 {
		t.Errorf("%d messages arrived twice", dups)
	}
	t.Logf("%d messages, %d dead-lettered unknown-outcome after the kill (%d in flight), the %d the fake took resolved by their webhooks; campaign status %+v",
		n, unknown, inflight, had, st)
	p.stop(t)
	wh.stop(t)
}
