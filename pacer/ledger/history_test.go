package ledger_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/pacerhq/pacer/internal/redistest"
	"github.com/pacerhq/pacer/pacer/ledger"
)

// TestBatcherAttempts: an id retried 6 times, then delivered, keeps its
// newest 5 attempts (time, outcome, code), oldest first, beside its
// delivered mark; each attempt is queued with the release or mark its
// outcome writes and goes in that flush's call: 7 attempts with 7 marks
// take 7 round trips, as the marks alone do. An id with nothing reads
// none, with no attempts.
func TestBatcherAttempts(t *testing.T) {
	for name, s := range servers(t) {
		t.Run(name, func(t *testing.T) {
			trips := new(redistest.Trips)
			s.rdb.AddHook(trips)
			b := ledger.NewBatcher(s.rdb, s.keys, ledger.BatchConfig{FlushInterval: time.Hour, MaxBatch: 1000})
			defer closeBatcher(t, b)
			const ch, key, id = "whatsapp", "106", "m1"
			start := time.Now().Add(-time.Second)
			var flushes int64
			for i := range 6 {
				if got, _, err := claimNow(t, b, ch, key, id); err != nil || got != ledger.Claimed {
					t.Fatalf("claim %d: %v, %v", i, got, err)
				}
				before := trips.Load()
				if err := b.Attempted(t.Context(), ch, key, id, ledger.Attempt{Outcome: "retry", Code: fmt.Sprint("13100", i)}); err != nil {
					t.Fatal(err)
				}
				b.Release(t.Context(), ch, key, id, "a")
				if err := b.Written(t.Context()); err != nil {
					t.Fatal(err)
				}
				flushes += trips.Load() - before
			}
			if got, _, err := claimNow(t, b, ch, key, id); err != nil || got != ledger.Claimed {
				t.Fatalf("last claim: %v, %v", got, err)
			}
			before := trips.Load()
			b.Attempted(t.Context(), ch, key, id, ledger.Attempt{Outcome: "delivered", Code: "200 OK\n"})
			b.Delivered(t.Context(), ch, key, id, "wamid.X")
			if err := b.Written(t.Context()); err != nil {
				t.Fatal(err)
			}
			flushes += trips.Load() - before
			if flushes != 7 {
				t.Errorf("7 outcomes with their attempts took %d round trips; want 7 (one flush each)", flushes)
			}

			e, err := b.Show(t.Context(), ch, key, id)
			if err != nil {
				t.Fatal(err)
			}
			if e.State != ledger.StateDelivered || e.ProviderID != "wamid.X" {
				t.Errorf("state %v, provider id %q; want delivered, wamid.X", e.State, e.ProviderID)
			}
			var got []string
			for _, a := range e.Attempts {
				got = append(got, a.Outcome+" "+a.Code)
				if a.At.Before(start) || a.At.After(time.Now().Add(time.Second)) {
					t.Errorf("attempt %s %s at %v; want within the test", a.Outcome, a.Code, a.At)
				}
			}
			want := []string{"retry 131002", "retry 131003", "retry 131004", "retry 131005", "delivered 200_OK_"}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("attempts %q; want %q (the newest %d)", got, want, ledger.HistoryAttempts)
			}

			none, err := b.Show(t.Context(), ch, key, "never")
			if err != nil || none.Known() || none.State != ledger.StateNone {
				t.Errorf("unknown id: %+v, %v; want none, no attempts", none, err)
			}
			if err := b.Attempted(t.Context(), ch, key, id, ledger.Attempt{Outcome: "two words"}); err == nil {
				t.Error("an outcome of two words was accepted")
			}
		})
	}
}

// claimNow claims id for owner "a" in a flush of its own.
func claimNow(t *testing.T, b *ledger.Batcher, ch, key, id string) (ledger.ClaimResult, time.Duration, error) {
	pc := b.ClaimAsync(ch, key, id, "a", false)
	b.Flush()
	return pc.Wait(t.Context())
}

// TestLedgerShowDeadLettered: an id dead-lettered while claimed reads
// dead-lettered with its reason and its attempt; KeysOf finds its pacing
// key from the id alone.
func TestLedgerShowDeadLettered(t *testing.T) {
	for name, s := range servers(t) {
		t.Run(name, func(t *testing.T) {
			l := ledger.New(s.rdb, s.keys, 0)
			b := ledger.NewBatcher(s.rdb, s.keys, ledger.BatchConfig{FlushInterval: time.Millisecond})
			defer closeBatcher(t, b)
			if got, _, err := l.Claim(t.Context(), "apns", "app.x", "m2", "a", false); err != nil || got != ledger.Claimed {
				t.Fatalf("claim: %v, %v", got, err)
			}
			b.Attempted(t.Context(), "apns", "app.x", "m2", ledger.Attempt{Outcome: "dead-lettered", Code: "unknown-outcome"})
			b.DeadLettered(t.Context(), "apns", "app.x", "m2", "unknown-outcome")
			if err := b.Written(t.Context()); err != nil {
				t.Fatal(err)
			}
			e, err := l.Show(t.Context(), "apns", "app.x", "m2")
			if err != nil {
				t.Fatal(err)
			}
			if e.State != ledger.StateDeadLettered || e.Reason != "unknown-outcome" || len(e.Attempts) != 1 || e.Attempts[0].Outcome != "dead-lettered" {
				t.Errorf("got %+v; want dead-lettered (unknown-outcome) with one attempt", e)
			}
			keys, err := l.KeysOf(t.Context(), "apns", "m2")
			if err != nil || fmt.Sprint(keys) != "[app.x]" {
				t.Errorf("KeysOf m2: %q, %v; want [app.x]", keys, err)
			}
			if keys, err := l.KeysOf(t.Context(), "apns", "m"); err != nil || len(keys) != 0 {
				t.Errorf("KeysOf m: %q, %v; want none", keys, err)
			}
		})
	}
}
