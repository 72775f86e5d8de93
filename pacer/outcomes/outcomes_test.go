package outcomes_test

import (
	"context"
	"testing"
	"time"

	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/outcomes"
	"github.com/pacerhq/pacer/pacer/produce"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestFromDeadLetter(t *testing.T) {
	for _, c := range []struct{ in, outcome, reason, code string }{
		{"permanent:131026", outcomes.Failed, "", "131026"},
		{"suppressed:unsubscribe", outcomes.Suppressed, "unsubscribe", ""},
		{"expired", outcomes.DeadLettered, "expired", ""},
		{"attempts-exhausted", outcomes.DeadLettered, "attempts-exhausted", ""},
	} {
		o, r, code := outcomes.FromDeadLetter(c.in)
		if o != c.outcome || r != c.reason || code != c.code {
			t.Errorf("FromDeadLetter(%q) = %q %q %q, want %q %q %q", c.in, o, r, code, c.outcome, c.reason, c.code)
		}
	}
}

// AfterAcked runs at once with nothing waiting, and otherwise only once
// every record written before it is in Kafka: here, once the topic the
// records wait for exists.
func TestAfterAckedWaitsForEarlierRecords(t *testing.T) {
	kc := testenv.FakeKafka(t, 1, "other")
	cl := testenv.KafkaClient(t, kc.ListenAddrs(), kgo.UnknownTopicRetries(1))
	w := outcomes.NewWriter(cl, "pacer.outcomes.t", nil, nil)
	now := false
	w.AfterAcked(func() { now = true })
	if !now {
		t.Fatal("AfterAcked with nothing written did not run at once")
	}
	w.Write(outcomes.Record{Tenant: "acme", MessageID: "m1", Channel: "whatsapp", Outcome: outcomes.Delivered, At: time.Now()})
	w.Write(outcomes.Record{Tenant: "acme", MessageID: "m2", Channel: "whatsapp", Outcome: outcomes.Delivered, At: time.Now()})
	done := make(chan struct{})
	w.AfterAcked(func() { close(done) })
	select {
	case <-done:
		t.Fatal("AfterAcked ran while its records were not in Kafka")
	case <-time.After(time.Second):
	}
	if n := w.Waiting(); n != 2 {
		t.Errorf("Waiting() = %d, want 2", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := produce.EnsureTopic(ctx, cl, "pacer.outcomes.t", 1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("AfterAcked did not run within 30 s of the topic's creation")
	}
	if err := w.Acked(ctx); err != nil || w.Waiting() != 0 {
		t.Errorf("Acked = %v, Waiting() = %d, want nil, 0", err, w.Waiting())
	}
}
