package consumer_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/campaign"
	"github.com/pacerhq/pacer/pacer/consumer"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/redis/go-redis/v9"
)

// TestCampaignCounts: the ledger's counts of a flush reach the campaigns'
// counters (delivered, first and last delivery, dead letters by reason),
// on redis-server; a campaign whose counters cannot be written (its key
// holds a string) has its counts, and only its, reported refused, so the
// Batcher tries them again and the others are not added twice. The same
// batch sent again under its token (its answer lost) adds nothing and
// answers the same refusal.
func TestCampaignCounts(t *testing.T) {
	rdb, keys, st := campaignStore(t, "tcc")
	ctx := t.Context()
	if err := rdb.Set(ctx, keys.Campaign("whatsapp", "broken"), "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	cs := []ledger.Count{
		{Name: "spring", Field: "delivered", At: 1_700_000_002_000},
		{Name: "spring", Field: "delivered", At: 1_700_000_003_000},
		{Name: "spring", Field: "dlq:expired"},
		{Name: "spring", Field: "delivered", At: 1_700_000_001_000},
		{Name: "broken", Field: "delivered", At: 1_700_000_001_000},
		{Name: "broken", Field: "dlq:cancelled"},
		{Name: "summer", Field: "dlq:expired"},
		{Name: "summer", Field: "dlq:expired"},
	}
	var s control.Status
	for try := range 2 {
		pipe := rdb.Pipeline()
		result := consumer.CampaignCounts(st, "whatsapp")(ctx, pipe, "token-1", cs)
		_, _ = pipe.Exec(ctx)
		left, err := result()
		if err != nil || len(left) != 2 || left[0] != cs[4] || left[1] != cs[5] {
			t.Errorf("try %d: refused %+v, %v; want the broken campaign's two counts", try+1, left, err)
		}
		if s, err = st.CampaignStatus(ctx, "whatsapp", "spring"); err != nil {
			t.Fatal(err)
		}
	}
	if s.Delivered != 3 || !maps.Equal(s.DeadLetters, map[string]int64{"expired": 1}) ||
		s.First.UnixMilli() != 1_700_000_001_000 || s.Last.UnixMilli() != 1_700_000_003_000 {
		t.Errorf("spring: delivered %d, dead letters %v, first %v, last %v; want 3, expired 1, first at ...001 s, last at ...003 s",
			s.Delivered, s.DeadLetters, s.First, s.Last)
	}
	if s, err := st.CampaignStatus(ctx, "whatsapp", "summer"); err != nil || s.Delivered != 0 || !maps.Equal(s.DeadLetters, map[string]int64{"expired": 2}) {
		t.Errorf("summer: %+v, %v; want 2 expired, none delivered", s, err)
	}
}

// TestCampaignDuplicatesCounted: a campaign published twice (the same 4
// ids) whose first 4 were delivered and whose second 4 were skipped as
// duplicates, counted through the ledger's flush as the pacer counts them:
// status reads published 8, delivered 4, duplicates 4, remaining 0, on
// redis-server; a duplicates counter that cannot be written is reported
// unwritten, so the Batcher tries it again.
func TestCampaignDuplicatesCounted(t *testing.T) {
	rdb, keys, st := campaignStore(t, "tcd")
	ctx := t.Context()
	for range 2 {
		if err := st.AddPublished(ctx, "whatsapp", map[string]int64{"spring": 4}); err != nil {
			t.Fatal(err)
		}
	}
	var cs []ledger.Count
	for i := range 4 {
		cs = append(cs, ledger.Count{Name: "spring", Field: "delivered", At: 1_700_000_001_000 + int64(i)*1000})
	}
	write := func(cs []ledger.Count) []ledger.Count {
		pipe := rdb.Pipeline()
		result := consumer.CampaignCounts(st, "whatsapp")(ctx, pipe, rand.Text(), cs)
		_, _ = pipe.Exec(ctx)
		left, err := result()
		if err != nil {
			t.Fatal(err)
		}
		return left
	}
	if left := write(cs); len(left) != 0 {
		t.Fatalf("refused %+v", left)
	}
	s, err := st.CampaignStatus(ctx, "whatsapp", "spring")
	if err != nil || s.Published != 8 || s.Delivered != 4 || s.Duplicates != 0 || s.Remaining != 4 {
		t.Fatalf("before the duplicates: %+v, %v; want published 8, delivered 4, remaining 4", s, err)
	}
	dups := []ledger.Count{{Name: "spring", Field: "duplicates"}, {Name: "spring", Field: "duplicates"},
		{Name: "spring", Field: "duplicates"}, {Name: "spring", Field: "duplicates"}, {Name: "broken", Field: "duplicates"}}
	if err := rdb.Set(ctx, keys.Campaign("whatsapp", "broken"), "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if left := write(dups); len(left) != 1 || left[0] != dups[4] {
		t.Errorf("refused %+v; want the broken campaign's duplicate only", left)
	}
	s, err = st.CampaignStatus(ctx, "whatsapp", "spring")
	if err != nil || s.Published != 8 || s.Delivered != 4 || s.Duplicates != 4 || s.Remaining != 0 || s.ETASeconds == nil || *s.ETASeconds != 0 {
		t.Errorf("after the duplicates: %+v, %v; want published 8, delivered 4, duplicates 4, remaining 0, eta 0", s, err)
	}
	if s.Last.UnixMilli() != 1_700_000_004_000 {
		t.Errorf("last delivery %v; a duplicate moved it from ...004 s", s.Last)
	}
}

// campaignStore returns a client of the test redis-server, closed when
// the test ends, the Keys of a prefix of this test's own (tag and the
// time) and the campaign store over both.
func campaignStore(t *testing.T, tag string) (*redis.Client, bucket.Keys, *control.Store) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), DB: testenv.RedisDB})
	t.Cleanup(func() { rdb.Close() })
	keys := bucket.NewKeys(tag + time.Now().Format("150405.000000"))
	return rdb, keys, control.New(rdb, keys)
}

// TestCampaignCountsEveryDeadLetter: a record dead-lettered on its way to a
// retry tier (its attempts exhausted) counts in its campaign as one
// dead-lettered by its send does, so the campaign's remaining reaches 0.
func TestCampaignCountsEveryDeadLetter(t *testing.T) {
	transient := &channels.Error{Channel: "test", Status: 503, Code: "2", Class: channels.Transient}
	permanent := &channels.Error{Channel: "test", Status: 400, Code: "131026", Class: channels.Permanent}
	h := newHarness(t, map[string][]error{
		"broken": {transient, transient, transient},
		"bad":    {permanent},
	})
	var keys bucket.Keys
	h.campaigns = func(rdb *redis.Client, k bucket.Keys) campaign.Store {
		keys = k
		return control.New(rdb, k)
	}
	camp := func(id string) string {
		return fmt.Sprintf(`{"id":%q,"key":"k1","to":"155500%s","campaign":"spring"}`, id, id)
	}
	h.produce(camp("ok"), camp("broken"), camp("bad"))
	h.run(func() bool {
		return h.sender.count(h.sender.success, "ok") == 1 && h.counter("pacer_dlq_total", "reason", "attempts-exhausted") == 1 &&
			h.counter("pacer_dlq_total", "reason", "permanent") == 1
	})
	rdb := h.redis()
	s, err := control.New(rdb, keys).CampaignStatus(context.Background(), "test", "spring")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"attempts-exhausted": 1, "permanent": 1}; s.Delivered != 1 || !maps.Equal(s.DeadLetters, want) {
		t.Errorf("campaign spring: delivered %d, dead letters %v; want 1, %v", s.Delivered, s.DeadLetters, want)
	}
}
