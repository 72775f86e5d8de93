package quota_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/ingest/quota"
	"github.com/pacerhq/pacer/pacer/ingest/window"
)

// BenchmarkTakeFinish100: one ingest request of 100 new ids on
// redis-server, Take then Finish, one at a time: the Redis time the gateway
// spends on a batch of 100 (round trips plus script run time). The records
// expire a minute later: nothing stays on the server.
func BenchmarkTakeFinish100(b *testing.B) { benchTakeFinish(b, 100) }

// BenchmarkTakeFinish1: the same with one id, for the fixed cost.
func BenchmarkTakeFinish1(b *testing.B) { benchTakeFinish(b, 1) }

func benchTakeFinish(b *testing.B, per int) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(b)})
	defer rdb.Close()
	q := quota.New(rdb)
	ctx := context.Background()
	k := bucket.NewKeys(fmt.Sprintf("qbench%d", time.Now().UnixNano()))
	tiers := []quota.Tier{
		{Name: "ip", Key: k.Ingest("ip", "192.0.2.1"), Unit: quota.PerRequest, Bucket: &bucket.Limit{PerSecond: 1e6, Burst: 1e6}},
		{Name: "tenant", Key: k.Ingest("tenant", "acme"), Unit: quota.PerRequest, Bucket: &bucket.Limit{PerSecond: 1e6, Burst: 1e6}},
		{Name: "tenant-day", Key: k.Ingest("tenant-day", "acme"), Unit: quota.PerMessage, Window: &window.Window{Max: 1e9, Period: 24 * time.Hour}},
		{Name: "channel", Key: k.Ingest("channel", "whatsapp"), Unit: quota.PerMessage, Bucket: &bucket.Limit{PerSecond: 1e6, Burst: 1e6}},
	}
	n := 0
	b.ResetTimer()
	for range b.N {
		ids := make([]string, per)
		for i := range ids {
			n++
			ids[i] = k.Ingest("id", fmt.Sprintf("acme:whatsapp:m%d", n))
		}
		res, err := q.Take(ctx, quota.Request{Tiers: tiers, IDs: ids, ClaimTTL: 40 * time.Second})
		if err != nil || !res.Granted {
			b.Fatal(err, res.Granted)
		}
		if err := q.Finish(ctx, quota.Finish{Token: res.Token, Done: ids, DoneTTL: time.Minute}); err != nil {
			b.Fatal(err)
		}
	}
}
