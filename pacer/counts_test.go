package pacer_test

import (
	"maps"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/control"
	"github.com/pacerhq/pacer/bucket/ledger"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer"
	"github.com/redis/go-redis/v9"
)

// TestCampaignCounts: the ledger's counts of a flush reach the campaigns'
// counters (delivered, first and last delivery, dead letters by reason),
// on redis-server; a campaign whose counters cannot be written (its key
// holds a string: WRONGTYPE) has its counts, and only its, reported
// unwritten, so the Batcher tries them again and the others are not added
// twice.
func TestCampaignCounts(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), DB: testenv.RedisDB})
	defer rdb.Close()
	keys := bucket.NewKeys("tcc" + time.Now().Format("150405.000000"))
	st := control.New(rdb, keys)
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
	pipe := rdb.Pipeline()
	unwritten := pacer.CampaignCounts(st, "whatsapp")(ctx, pipe, cs)
	_, _ = pipe.Exec(ctx)
	left := unwritten()
	if len(left) != 2 || left[0] != cs[4] || left[1] != cs[5] {
		t.Errorf("unwritten %+v; want the broken campaign's two counts", left)
	}
	s, err := st.CampaignStatus(ctx, "whatsapp", "spring")
	if err != nil {
		t.Fatal(err)
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
