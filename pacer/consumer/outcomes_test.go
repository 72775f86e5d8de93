package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/outcomes"
	"github.com/pacerhq/pacer/pacer/produce"
	"github.com/twmb/franz-go/pkg/kgo"
)

func tenantEnv(id, tenant string) string {
	return fmt.Sprintf(`{"id":%q,"key":"k1","to":"155500%s","campaign":"c1","tenant":%q}`, id, id, tenant)
}

// outcomeRecords reads the outcomes topic of h's Kafka until it holds
// want records (at most 20 s): each record's value by message id.
func outcomeRecords(t *testing.T, h *harness, want int) map[string]outcomes.Record {
	t.Helper()
	cl := testenv.KafkaClient(t, h.kc.ListenAddrs(), kgo.ConsumeTopics(outcomes.DefaultTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := map[string]outcomes.Record{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for len(got) < want && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			var o outcomes.Record
			if err := json.Unmarshal(r.Value, &o); err != nil {
				t.Errorf("outcome record %s: %v", r.Value, err)
			}
			if string(r.Key) != o.Tenant {
				t.Errorf("outcome record key %q, want its tenant %q", r.Key, o.Tenant)
			}
			got[o.MessageID] = o
		})
	}
	return got
}

// Every record of a tenant writes its final outcome (delivered, failed
// with the provider's code, dead-lettered with its reason) to the
// outcomes topic; a record without a tenant writes none.
func TestOutcomesOfTenantMessages(t *testing.T) {
	permanent := &channels.Error{Channel: "test", Status: 400, Code: "131026", Class: channels.Permanent}
	h := newHarness(t, map[string][]error{"bad": {permanent}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := produce.EnsureTopic(ctx, h.cl, outcomes.DefaultTopic, 2); err != nil {
		t.Fatal(err)
	}
	h.outcomes = outcomes.NewWriter(h.cl, outcomes.DefaultTopic, nil, nil)
	h.produce(tenantEnv("ok", "acme"), tenantEnv("bad", "acme"), `{"id":"gone","key":"k1","to":"1","tenant":"acme","expires_at":"2020-01-01T00:00:00Z"}`,
		env("anon"))
	h.run(func() bool { return h.sender.total(h.sender.success) == 2 && committedOffset(t, h) == 4 })
	got := outcomeRecords(t, h, 3)
	want := map[string]outcomes.Record{
		"ok":   {Tenant: "acme", MessageID: "ok", Campaign: "c1", Channel: "test", Outcome: outcomes.Delivered},
		"bad":  {Tenant: "acme", MessageID: "bad", Campaign: "c1", Channel: "test", Outcome: outcomes.Failed, Code: "131026"},
		"gone": {Tenant: "acme", MessageID: "gone", Channel: "test", Outcome: outcomes.DeadLettered, Reason: "expired"},
	}
	if len(got) != len(want) {
		t.Errorf("outcome records of %d messages, want %d: %v", len(got), len(want), got)
	}
	for id, w := range want {
		g := got[id]
		if g.At.IsZero() {
			t.Errorf("outcome of %s: no time", id)
		}
		g.At = time.Time{}
		if g != w {
			t.Errorf("outcome of %s:\n got %+v\nwant %+v", id, g, w)
		}
	}
}

// A record's offset is not committed while its outcome is not in Kafka
// (here: the outcomes topic does not exist yet), and is once it is.
func TestOutcomeHoldsTheCommit(t *testing.T) {
	h := newHarness(t, nil)
	wcl := testenv.KafkaClient(t, h.kc.ListenAddrs(), kgo.UnknownTopicRetries(1))
	h.outcomes = outcomes.NewWriter(wcl, outcomes.DefaultTopic, nil, nil)
	h.produce(tenantEnv("m1", "acme"), tenantEnv("m2", "acme"))
	h.startConsuming()
	if !waitFor(20*time.Second, func() bool { return h.sender.total(h.sender.success) == 2 }) {
		t.Fatal("not delivered within 20 s")
	}
	// Commits are made every second (AutoCommitInterval): three of them.
	time.Sleep(3 * time.Second)
	if at := committedOffset(t, h); at != 0 {
		t.Fatalf("committed offset %d while the outcomes are not in Kafka, want 0", at)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := produce.EnsureTopic(ctx, h.cl, outcomes.DefaultTopic, 1); err != nil {
		t.Fatal(err)
	}
	if !waitFor(30*time.Second, func() bool { return committedOffset(t, h) == 2 }) {
		t.Fatalf("committed offset %d 30 s after the outcomes topic appeared, want 2", committedOffset(t, h))
	}
	if got := outcomeRecords(t, h, 2); len(got) != 2 {
		t.Errorf("outcome records %v, want m1 and m2", got)
	}
}
