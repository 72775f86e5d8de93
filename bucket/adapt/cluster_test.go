package adapt_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// TestOnCluster runs every script of the Adapter under Redis Cluster, on
// keys spread over its masters: each script's keys share the pacing key's
// hash slot, so none answers CROSSSLOT, and the pipelined Refresh reads
// what the single calls wrote.
func TestOnCluster(t *testing.T) {
	t.Parallel()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.ClusterAddrs(t)})
	t.Cleanup(func() { cc.Close() })
	ctx := t.Context()
	cfg := bucket.Config{Prefix: "tc" + t.Name() + time.Now().Format("150405.000000")}
	l, lim := adapt.New(cc, cfg), bucket.New(cc, cfg)
	ceiling := bucket.Limit{PerSecond: 100, Burst: 10}
	// Throttles persist for an hour: the second one, past Coalesce and the
	// cooldown, decreases the rate however late it runs.
	a := adapt.AIMD{Decrease: 0.5, Persist: time.Hour, Coalesce: time.Millisecond, MinCooldown: time.Millisecond}
	b := adapt.Breaker{}
	masters := map[string]bool{}
	for i := range 12 {
		key := "key" + strconv.Itoa(i)
		m, err := cc.MasterForKey(ctx, lim.Keys().Bucket("whatsapp", key))
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
		if r, err := lim.Reserve(ctx, "whatsapp", key, ceiling, 5, time.Second); err != nil || !r.OK {
			t.Fatalf("%s: Reserve = %+v, %v", key, r, err)
		}
		if ad, err := l.Throttled(ctx, "whatsapp", key, ceiling, a, 0); err != nil || ad.Rate != 100 || ad.Decreased {
			t.Fatalf("%s: lone Throttled = %+v, %v; want the rate kept", key, ad, err)
		}
		time.Sleep(5 * time.Millisecond) // past Coalesce and the cooldown
		if ad, err := l.ThrottledAfter(ctx, "whatsapp", key, ceiling, a, 0, 0, 0); err != nil || !ad.Decreased || ad.Rate >= 100 {
			t.Fatalf("%s: persistent Throttled = %+v, %v; want a decrease", key, ad, err)
		}
		if ad, err := l.RecoverAfter(ctx, "whatsapp", key, ceiling, a, 2); err != nil || ad.Rate >= 100 {
			t.Fatalf("%s: RecoverAfter = %+v, %v; want the cut rate", key, ad, err)
		}
		if _, err := l.PairThrottled(ctx, "whatsapp", key, "15551234567", time.Minute, time.Hour, 0.5); err != nil {
			t.Fatalf("%s: PairThrottled: %v", key, err)
		}
		if st, err := l.BreakerResult(ctx, "whatsapp", key, b, false, "halt"); err != nil || st != adapt.BreakerOpen {
			t.Fatalf("%s: BreakerResult(halt) = %v, %v; want open", key, st, err)
		}
		if allowed, _, _, err := l.BreakerAllow(ctx, "whatsapp", key, b, "a"); err != nil || allowed {
			t.Fatalf("%s: BreakerAllow while open = %v, %v; want refused", key, allowed, err)
		}
		if _, err := l.Achieved(ctx, "whatsapp", key); err != nil {
			t.Fatalf("%s: Achieved: %v", key, err)
		}
		want, err := l.Adapted(ctx, "whatsapp", key, ceiling, a)
		if err != nil {
			t.Fatalf("%s: Adapted: %v", key, err)
		}
		got := l.Refresh(ctx, "whatsapp", key, ceiling, a, 0)
		if got.AdaptedErr != nil || got.BreakerErr != nil || got.PairsErr != nil {
			t.Fatalf("%s: Refresh errors %v, %v, %v", key, got.AdaptedErr, got.BreakerErr, got.PairsErr)
		}
		if got.Adapted.Rate != want.Rate || got.Breaker.State != adapt.BreakerOpen || got.Breaker.Reason != "halt" || len(got.Pairs) != 1 {
			t.Fatalf("%s: Refresh = %+v; want rate %v, the breaker open for halt, one pair", key, got, want.Rate)
		}
	}
	if len(masters) < 2 {
		t.Fatalf("12 pacing keys all on %v", masters)
	}
}
