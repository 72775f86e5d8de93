package consumer_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/pacer/ledger"
)

// TestAttemptsInLedger: each request's outcome is kept in the ledger
// beside its id (time, what the pacer did, the provider's code): a record
// retried once then delivered, one refused for good, one whose attempts
// ran out; one delivered at its first request keeps no line (its mark
// says it).
func TestAttemptsInLedger(t *testing.T) {
	transient := &channels.Error{Channel: "test", Status: 503, Code: "2", Class: channels.Transient}
	permanent := &channels.Error{Channel: "test", Status: 400, Code: "131026", Class: channels.Permanent}
	noCode := &channels.Error{Channel: "test", Status: 500, Class: channels.Transient}
	h := newHarness(t, map[string][]error{
		"flaky":  {transient},
		"ok":     {},
		"bad":    {permanent},
		"broken": {transient, noCode, transient},
	})
	h.produce(env("flaky"), env("bad"), env("broken"), env("ok"))
	h.run(func() bool {
		return h.sender.count(h.sender.success, "flaky") == 1 && h.sender.count(h.sender.success, "ok") == 1 && h.counter("pacer_dlq_total", "reason", "attempts-exhausted") == 1 &&
			h.counter("pacer_dlq_total", "reason", "permanent") == 1
	})
	rdb := h.redis()
	l := ledger.New(rdb, bucket.New(rdb, bucket.Config{}).Keys(), 0)
	for id, want := range map[string]string{
		"flaky":  "delivered p-flaky [retry/2 delivered/]",
		"ok":     "delivered p-ok []", // a first request delivered: the mark alone
		"bad":    "none  [dead-lettered/131026]",
		"broken": "none  [retry/2 retry/500 dead-lettered/2]",
	} {
		e, err := l.Show(context.Background(), "test", "k1", id)
		if err != nil {
			t.Fatal(err)
		}
		var as []string
		for _, a := range e.Attempts {
			as = append(as, a.Outcome+"/"+a.Code)
		}
		if got := fmt.Sprintf("%v %s %v", e.State, e.ProviderID, as); got != want {
			t.Errorf("%s: %q; want %q", id, got, want)
		}
	}
}
