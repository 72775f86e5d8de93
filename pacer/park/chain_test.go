package park_test

import (
	"testing"
	"time"

	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/pacerhq/pacer/pacer/park"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestChainOf: a chain copy's header is read back as written; a record
// without one is no copy, and a header that does not parse names no chain
// (its copy is dropped as stale, never sent out of order).
func TestChainOf(t *testing.T) {
	tok := park.NewToken("pacer-0")
	if tok2 := park.NewToken("pacer-0"); tok2 == tok {
		t.Fatalf("two chains of one process share the token %q", tok)
	}
	r := &kgo.Record{Headers: park.ChainHeaders(3, tok, 42)}
	if got, off, isCopy := park.ChainOf(r); got != tok || off != 42 || !isCopy {
		t.Errorf("ChainOf = %q, %d, %v; want %q, 42, true", got, off, isCopy, tok)
	}
	if envelope.Header(r, envelope.HeaderParks) != "3" {
		t.Errorf("parks header %q, want 3", envelope.Header(r, envelope.HeaderParks))
	}
	if _, _, isCopy := park.ChainOf(&kgo.Record{}); isCopy {
		t.Errorf("a record without a chain header read as a chain copy")
	}
	for _, v := range []string{"pacer-0-1", "pacer-0-1/x", "/"} {
		got, _, isCopy := park.ChainOf(&kgo.Record{Headers: []kgo.RecordHeader{{Key: envelope.HeaderChain, Value: []byte(v)}}})
		if got != "" || !isCopy {
			t.Errorf("chain header %q read as chain %q (copy %v), want none (copy true)", v, got, isCopy)
		}
	}
}

// TestTier: a copy goes to the tier with the longest delay not above its
// wait (tier 1 below every delay), due after that delay or its wait if
// shorter.
func TestTier(t *testing.T) {
	delays := []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}
	for _, c := range []struct {
		wait, due time.Duration
		tier      int
	}{
		{2 * time.Second, 2 * time.Second, 1},
		{5 * time.Second, 5 * time.Second, 1},
		{29 * time.Second, 5 * time.Second, 1},
		{30 * time.Second, 30 * time.Second, 2},
		{20 * time.Minute, 5 * time.Minute, 3},
	} {
		if tier, due := park.Tier(delays, c.wait); tier != c.tier || due != c.due {
			t.Errorf("Tier(%v) = %d, %v; want %d, %v", c.wait, tier, due, c.tier, c.due)
		}
	}
}
