package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/pacer/suppress"
)

// suppressingHarness is newHarness(t, script) with the pacer checking
// suppressions and recipient to of pacing key k1 suppressed for reason,
// without expiry.
func suppressingHarness(t *testing.T, script map[string][]error, to string, reason suppress.Reason) *harness {
	t.Helper()
	h := newHarness(t, script)
	h.suppress = true
	rdb := h.redis()
	st := suppress.NewStore(rdb, bucket.NewKeys(""))
	if _, err := st.Add(context.Background(), "test", "k1", suppress.New(suppress.Hash(to), reason, time.Time{}, time.Now())); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestSuppressedRecipients: a message to a recipient suppressed for its
// pacing key is dead-lettered "suppressed:<reason>" without a request; an
// answer that calls a recipient gone (FCM UNREGISTERED) dead-letters its
// message as a permanent failure and suppresses the recipient, so the
// next message to it makes no request either; other recipients are sent.
func TestSuppressedRecipients(t *testing.T) {
	gone := &channels.Error{Channel: "test", Status: 404, Code: "UNREGISTERED", Class: channels.Permanent, Gone: true}
	h := suppressingHarness(t, map[string][]error{"g1": {gone}}, "155500s1", suppress.Bounce)
	h.produce(env("g1"), env("s1"), env("ok1"))
	p, stop := h.start(h.cfg, h.sender, h.reg)
	defer stop()
	<-p.Started()
	got := h.dlq(2)
	if got[env("g1")] != "permanent:UNREGISTERED" || got[env("s1")] != "suppressed:bounce" {
		t.Fatalf("DLQ reasons %v; want g1 permanent:UNREGISTERED, s1 suppressed:bounce", got)
	}
	if !waitFor(10*time.Second, func() bool { return h.sender.count(h.sender.success, "ok1") == 1 }) {
		t.Fatal("ok1 was not sent")
	}
	// The second message to g1's token, after the answer: no request.
	g2 := `{"id":"g2","key":"k1","to":"155500g1"}`
	h.produce(g2)
	if got := h.dlq(3); got[g2] != "suppressed:unregistered" {
		t.Fatalf("DLQ reasons %v; want g2 suppressed:unregistered", got)
	}
	for id, want := range map[string]int{"g1": 1, "s1": 0, "g2": 0, "ok1": 1} {
		if n := h.sender.count(h.sender.calls, id); n != want {
			t.Errorf("%s: %d requests; want %d", id, n, want)
		}
	}
	for _, c := range []struct {
		name, label string
		want        float64
	}{
		{"pacer_suppressed_total", "bounce", 1}, {"pacer_suppressed_total", "unregistered", 1},
		{"pacer_suppressions_added_total", "unregistered", 1}, {"pacer_dlq_total", "suppressed", 2},
	} {
		if n := h.counter(c.name, "reason", c.label); n != c.want {
			t.Errorf("%s{reason=%q} = %v; want %v", c.name, c.label, n, c.want)
		}
	}
}

// TestMarketingSuppressionByCategory: an entry for marketing messages only
// (WhatsApp 131049) refuses a message whose envelope says category
// marketing, and lets a utility one and an unlabelled one to the same
// recipient through.
func TestMarketingSuppressionByCategory(t *testing.T) {
	h := suppressingHarness(t, nil, "155500m1", suppress.MarketingLimit)
	mk := `{"id":"mk","key":"k1","to":"155500m1","category":"marketing"}`
	ut := `{"id":"ut","key":"k1","to":"155500m1","category":"utility"}`
	no := `{"id":"no","key":"k1","to":"155500m1"}`
	h.produce(mk, ut, no)
	p, stop := h.start(h.cfg, h.sender, h.reg)
	defer stop()
	<-p.Started()
	if got := h.dlq(1); got[mk] != "suppressed:marketing-limit" {
		t.Fatalf("DLQ reasons %v; want mk suppressed:marketing-limit", got)
	}
	if !waitFor(10*time.Second, func() bool {
		return h.sender.count(h.sender.success, "ut") == 1 && h.sender.count(h.sender.success, "no") == 1
	}) {
		t.Fatalf("ut sent %d, no sent %d; want 1 each", h.sender.count(h.sender.success, "ut"), h.sender.count(h.sender.success, "no"))
	}
	if n := h.sender.count(h.sender.calls, "mk"); n != 0 {
		t.Errorf("mk: %d requests; want 0", n)
	}
}
