package ledger_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/pacerhq/pacer/pacer/suppress"
	"github.com/redis/go-redis/v9"
)

// TestClaimChecksSuppression: a claim whose recipient is suppressed for its
// pacing key answers Suppressed with the entry's reason and claims nothing,
// in the claim's own script call (no command of its own); a marketing-only
// entry refuses only marketing claims; an expired entry, another key's
// entry, or one removed refuses nothing. On miniredis, redis-server and
// Redis Cluster (where the claim and the suppression share the key's slot).
func TestClaimChecksSuppression(t *testing.T) {
	mr := miniredis.RunT(t)
	for name, rdb := range map[string]redis.UniversalClient{
		"miniredis":     redis.NewClient(&redis.Options{Addr: mr.Addr()}),
		"redis-server":  redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), DB: testenv.RedisDB}),
		"redis-cluster": redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.ClusterAddrs(t)}),
	} {
		t.Run(name, func(t *testing.T) {
			defer rdb.Close()
			ctx := context.Background()
			keys := bucket.NewKeys("tsup" + time.Now().Format("150405.000000"))
			st := suppress.NewStore(rdb, keys)
			b := ledger.NewBatcher(rdb, keys, ledger.BatchConfig{})
			defer b.Close(ctx)
			now := time.Now()
			dead, gone, ad, old := suppress.Hash("tok-dead"), suppress.Hash("tok-gone"), suppress.Hash("+1555"), suppress.Hash("tok-old")
			if _, err := st.Add(ctx, "fcm", "proj", suppress.New(dead, suppress.Unregistered, time.Time{}, now),
				suppress.New(ad, suppress.MarketingLimit, time.Time{}, now),
				suppress.New(gone, suppress.Bounce, time.Time{}, now)); err != nil {
				t.Fatal(err)
			}
			// An entry that expired since it was added (an add prunes the
			// expired ones it finds), as ledger.lua's contract writes it.
			past := strconv.FormatInt(now.Add(-time.Minute).UnixMilli(), 10)
			if err := rdb.HSet(ctx, keys.Suppressed("fcm", "proj"), old, past+" a undeliverable 0").Err(); err != nil {
				t.Fatal(err)
			}
			claim := func(key, id string, to ledger.Recipient) (ledger.ClaimResult, string) {
				t.Helper()
				pc := b.ClaimForAsync("fcm", key, id, "a", false, to)
				b.Flush()
				res, _, err := pc.Wait(ctx)
				if err != nil {
					t.Fatalf("claim %s: %v", id, err)
				}
				return res, pc.Suppression()
			}
			for i, s := range []struct {
				key, id    string
				to         ledger.Recipient
				want       ledger.ClaimResult
				wantReason string
			}{
				{"proj", "m1", ledger.Recipient{Hash: dead}, ledger.Suppressed, "unregistered"},
				{"proj", "m1", ledger.Recipient{Hash: dead, Marketing: true}, ledger.Suppressed, "unregistered"},
				{"proj", "m2", ledger.Recipient{Hash: gone}, ledger.Suppressed, "bounce"},
				{"proj", "m3", ledger.Recipient{Hash: ad}, ledger.Claimed, ""}, // not a marketing message
				{"proj", "m4", ledger.Recipient{Hash: ad, Marketing: true}, ledger.Suppressed, "marketing-limit"},
				{"proj", "m5", ledger.Recipient{Hash: old}, ledger.Claimed, ""},   // expired
				{"other", "m6", ledger.Recipient{Hash: dead}, ledger.Claimed, ""}, // another pacing key
				{"proj", "m7", ledger.Recipient{Hash: suppress.Hash("tok-live")}, ledger.Claimed, ""},
				{"proj", "m8", ledger.Recipient{}, ledger.Claimed, ""}, // nothing to check
			} {
				if got, why := claim(s.key, s.id, s.to); got != s.want || why != s.wantReason {
					t.Errorf("step %d: claim %s/%s = %v %q; want %v %q", i, s.key, s.id, got, why, s.want, s.wantReason)
				}
			}
			// Nothing was claimed for m1: once the entry is removed, m1 is
			// claimed (another owner would read an abandoned claim).
			if n, err := st.Remove(ctx, "fcm", "proj", dead); err != nil || n != 1 {
				t.Fatalf("Remove = %d, %v; want 1", n, err)
			}
			pc := b.ClaimForAsync("fcm", "proj", "m1", "b", false, ledger.Recipient{Hash: dead})
			b.Flush()
			if res, _, err := pc.Wait(ctx); err != nil || res != ledger.Claimed {
				t.Fatalf("claim after Remove = %v, %v; want claimed by a new owner", res, err)
			}
		})
	}
}
