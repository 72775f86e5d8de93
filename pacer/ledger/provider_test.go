package ledger_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/redis/go-redis/v9"
)

// TestByProvider: a delivered mark with a provider id finds its envelope
// id (and campaign) by that id; one without a provider id, another pacing
// key or an unknown provider id finds nothing; on a single server and
// under Redis Cluster.
func TestByProvider(t *testing.T) {
	ctx := context.Background()
	for name, l := range ledgers(t) {
		t.Run(name, func(t *testing.T) {
			if err := l.Delivered(ctx, "whatsapp", "106", "m1", "wamid.A"); err != nil {
				t.Fatal(err)
			}
			if err := l.DeliveredIn(ctx, "whatsapp", "106", "m2", "wamid.B", "spring sale"); err != nil {
				t.Fatal(err)
			}
			if err := l.Delivered(ctx, "whatsapp", "106", "m3", ""); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				key, pid     string
				id, campaign string
				ok           bool
			}{
				{"106", "wamid.A", "m1", "", true},
				{"106", "wamid.B", "m2", "spring sale", true},
				{"107", "wamid.A", "", "", false}, // another number's
				{"106", "wamid.C", "", "", false},
				{"106", "", "", "", false},
			} {
				id, campaign, ok, err := l.ByProvider(ctx, "whatsapp", c.key, c.pid)
				if err != nil || id != c.id || campaign != c.campaign || ok != c.ok {
					t.Errorf("ByProvider(%s, %q) = %q, %q, %v, %v; want %q, %q, %v", c.key, c.pid, id, campaign, ok, err, c.id, c.campaign, c.ok)
				}
			}
			// The provider-id field names no envelope id: m1 reads delivered,
			// the provider id's field reads as no id.
			if st, err := l.Lookup(ctx, []ledger.Ref{{"whatsapp", "106", "m1"}, {"whatsapp", "106", "wamid.A"}}); err != nil ||
				st[0] != ledger.StateDelivered || st[1] != ledger.StateNone {
				t.Errorf("Lookup(m1, wamid.A) = %v, %v; want [delivered none]", st, err)
			}
		})
	}
}

// TestBatcherKeepsProviderID: the delivered mark a Batcher flushes writes
// the provider-id field with its campaign in the same call.
func TestBatcherKeepsProviderID(t *testing.T) {
	for name, s := range servers(t) {
		t.Run(name, func(t *testing.T) {
			b := ledger.NewBatcher(s.rdb, s.keys, ledger.BatchConfig{FlushInterval: 2 * time.Millisecond})
			if err := b.DeliveredCounted(t.Context(), "sendgrid", "acct", "e1", "sg.1", ledger.Count{Name: "welcome", Field: "delivered"}); err != nil {
				t.Fatal(err)
			}
			closeBatcher(t, b)
			got := entries(t, s.rdb, s.keys)
			if got["acct\n\x01sg.1"] != "i:e1\nwelcome" || got["acct\ne1"] != "d:sg.1" || len(got) != 2 {
				t.Errorf("entries = %q; want the mark d:sg.1 and the provider-id field i:e1\\nwelcome", got)
			}
			id, campaign, ok, err := ledger.New(s.rdb, s.keys, 0).ByProvider(t.Context(), "sendgrid", "acct", "sg.1")
			if err != nil || id != "e1" || campaign != "welcome" || !ok {
				t.Errorf("ByProvider(sg.1) = %q, %q, %v, %v; want e1, welcome, true", id, campaign, ok, err)
			}
		})
	}
}

// TestLedgerOutcome: Outcome reads each state, with a dead-letter's
// reason; Unsettled tells the claimed and dead-lettered ones.
func TestLedgerOutcome(t *testing.T) {
	ctx := context.Background()
	for name, l := range ledgers(t) {
		t.Run(name, func(t *testing.T) {
			const ch, key = "whatsapp", "106"
			if _, _, err := l.Claim(ctx, ch, key, "claimed", "a", false); err != nil {
				t.Fatal(err)
			}
			if _, _, err := l.Claim(ctx, ch, key, "dead", "a", false); err != nil {
				t.Fatal(err)
			}
			if err := l.DeadLettered(ctx, ch, key, "dead", "unknown-outcome"); err != nil {
				t.Fatal(err)
			}
			if err := l.Delivered(ctx, ch, key, "sent", "wamid.S"); err != nil {
				t.Fatal(err)
			}
			for id, want := range map[string]string{
				"claimed": "claimed", "dead": "dead-lettered:unknown-outcome", "sent": "delivered", "never": "none",
			} {
				if got, err := l.Outcome(ctx, ch, key, id); err != nil || got != want {
					t.Errorf("Outcome(%s) = %q, %v; want %q", id, got, err, want)
				}
			}
			ids := []string{"claimed", "dead", "sent", "never"}
			if got, err := l.Unsettled(ctx, ch, []string{key, key, key, key}, ids); err != nil || !slices.Equal(got, []bool{true, true, false, false}) {
				t.Errorf("Unsettled(%v) = %v, %v; want [true true false false]", ids, got, err)
			}
		})
	}
}

// TestProviderIndexBytes measures what a provider id costs a delivered
// mark on redis-server (MEMORY USAGE of the generation hashes, 20,000
// marks with a wamid-sized provider id and a campaign, less the same marks
// without a provider id: the id in the mark's value and its provider-id
// field) and holds it to what docs/architecture.md states: at most 320
// bytes per mark (276 measured on redis-server 7.0).
func TestProviderIndexBytes(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), DB: testenv.RedisDB})
	defer rdb.Close()
	ctx := context.Background()
	const n = 20_000
	usage := func(withPID bool) int64 {
		keys := bucket.NewKeys(fmt.Sprintf("tpb%v%s", withPID, time.Now().Format("150405.000000")))
		b := ledger.NewBatcher(rdb, keys, ledger.BatchConfig{FlushInterval: time.Millisecond, MaxBatch: 1000})
		for i := range n {
			pid := ""
			if withPID {
				// A wamid: "wamid." and 56 base64 characters (providers.md §8.2).
				pid = fmt.Sprintf("wamid.HBgLMTY1MDM4NzcwMDEVAgARGBI5QTNDQTVCM0Q0Q0Q2RTY3%06d", i)
			}
			id := fmt.Sprintf("0190b3f4-7c1e-7a2b-9f10-%012d", i) // a UUIDv7
			if err := b.DeliveredCounted(ctx, "whatsapp", "106540352242922", id, pid, ledger.Count{Name: "spring-sale"}); err != nil {
				t.Fatal(err)
			}
		}
		closeBatcher(t, b)
		hashes, err := rdb.Keys(ctx, keys.Prefix()+":{*}:ids:*").Result()
		if err != nil || len(hashes) == 0 {
			t.Fatalf("generation hashes %v, %v", hashes, err)
		}
		var total int64
		for _, h := range hashes {
			v, err := rdb.MemoryUsage(ctx, h, 0).Result()
			if err != nil {
				t.Fatal(err)
			}
			total += v
			rdb.Del(ctx, h)
		}
		return total
	}
	without, with := usage(false), usage(true)
	per := float64(with-without) / n
	t.Logf("%.1f bytes per mark without a provider id, %.1f more with one and its provider-id field", float64(without)/n, per)
	if per > 320 || per < 60 {
		t.Errorf("a provider id costs %.1f bytes per mark; docs/architecture.md states at most 320", per)
	}
}
