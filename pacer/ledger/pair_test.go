package ledger_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/pacerhq/pacer/pacer/suppress"
	"github.com/redis/go-redis/v9"
)

// whatsappPair is WhatsApp's documented pair limit: 1 message per 6 s from
// one number to one user, up to 45 in a burst (Meta, "Pair rate limits").
var whatsappPair = ledger.Pair{Every: 6 * time.Second, Burst: 45}

// pairServers are the redis-server and Redis Cluster clients of a pair
// test, two each: two replicas claiming through the same Redis.
func pairServers(t *testing.T) map[string][2]redis.UniversalClient {
	out := map[string][2]redis.UniversalClient{}
	for name, mk := range map[string]func() redis.UniversalClient{
		"redis-server": func() redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), DB: testenv.RedisDB})
		},
		"redis-cluster": func() redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.ClusterAddrs(t)})
		},
	} {
		a, b := mk(), mk()
		t.Cleanup(func() { a.Close(); b.Close() })
		out[name] = [2]redis.UniversalClient{a, b}
	}
	return out
}

// claimAll claims ids 0 .. n-1 of key k1 (owner "a") for recipient to,
// alternately through b[0] and b[1], all before the first flush, and
// returns the answers by id.
func claimAll(t *testing.T, b [2]*ledger.Batcher, n int, to ledger.Recipient) ([]ledger.ClaimResult, []time.Duration) {
	t.Helper()
	pcs := make([]*ledger.PendingClaim, n)
	for i := range n {
		pcs[i] = b[i%2].ClaimForAsync("whatsapp", "k1", fmt.Sprint("id-", i), "a", false, to)
	}
	b[0].Flush()
	b[1].Flush()
	res, waits := make([]ledger.ClaimResult, n), make([]time.Duration, n)
	for i, pc := range pcs {
		var err error
		if res[i], waits[i], err = pc.Wait(context.Background()); err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
	}
	return res, waits
}

// TestPairLimitAtWhatsAppFigures: 50 claims to one recipient from one
// number, made through two replicas at once, at WhatsApp's documented
// pair limit: exactly 45 are claimed, and the other 5 are refused
// (PairLimited), told to wait for the pair's next turn, 6 s after the
// burst's first claim; another recipient of the same number is claimed at
// once. On redis-server and Redis Cluster (the pair key shares the pacing
// key's slot).
func TestPairLimitAtWhatsAppFigures(t *testing.T) {
	for name, cl := range pairServers(t) {
		t.Run(name, func(t *testing.T) {
			keys := bucket.NewKeys("tpair" + time.Now().Format("150405.000000"))
			b := [2]*ledger.Batcher{ledger.NewBatcher(cl[0], keys, ledger.BatchConfig{FlushInterval: time.Second}),
				ledger.NewBatcher(cl[1], keys, ledger.BatchConfig{FlushInterval: time.Second})}
			defer b[0].Close(context.Background())
			defer b[1].Close(context.Background())
			to := ledger.Recipient{Hash: suppress.Hash("+15550001"), Pair: whatsappPair, NoSuppression: true}
			start := time.Now()
			res, waits := claimAll(t, b, 50, to)
			took := time.Since(start)
			var claimed int
			var refused []time.Duration
			for i, r := range res {
				switch r {
				case ledger.Claimed:
					claimed++
				case ledger.PairLimited:
					refused = append(refused, waits[i])
				default:
					t.Errorf("claim %d answered %v", i, r)
				}
			}
			if claimed != 45 || len(refused) != 5 {
				t.Fatalf("%d claimed and %d refused for the pair, want 45 and 5", claimed, len(refused))
			}
			for k, w := range refused {
				// The next turn: one interval after the burst's first
				// claim, told from the refused claim's own call, at most
				// took later.
				if want := whatsappPair.Every; w > want || w < want-took-100*time.Millisecond {
					t.Errorf("refused claim %d waits %v, want %v (less at most the %v the claims took)", k, w, want, took)
				}
			}
			other := ledger.Recipient{Hash: suppress.Hash("+15550002"), Pair: whatsappPair, NoSuppression: true}
			pc := b[1].ClaimForAsync("whatsapp", "k1", "other", "a", false, other)
			b[1].Flush()
			if r, _, err := pc.Wait(context.Background()); r != ledger.Claimed || err != nil {
				t.Errorf("another recipient's claim: %v, %v; want claimed", r, err)
			}
		})
	}
}

// TestPairLimitPaces: at a pair limit scaled down (burst 45, one per
// 200 ms), 50 claims to one recipient through two replicas are claimed 45
// at once, then one per interval: each refused claim, made again when its
// wait ends, is claimed once a turn is free; the k-th of the late ones
// no sooner than k intervals after the first claim, the last within a
// second of the ideal 5 intervals. A claim already delivered, or claimed
// again by its owner, is not refused for the pair.
func TestPairLimitPaces(t *testing.T) {
	pair := ledger.Pair{Every: 200 * time.Millisecond, Burst: 45}
	for name, cl := range pairServers(t) {
		t.Run(name, func(t *testing.T) {
			keys := bucket.NewKeys("tpairs" + time.Now().Format("150405.000000"))
			b := [2]*ledger.Batcher{ledger.NewBatcher(cl[0], keys, ledger.BatchConfig{FlushInterval: 5 * time.Millisecond}),
				ledger.NewBatcher(cl[1], keys, ledger.BatchConfig{FlushInterval: 5 * time.Millisecond})}
			defer b[0].Close(context.Background())
			defer b[1].Close(context.Background())
			to := ledger.Recipient{Hash: suppress.Hash("+15550003"), Pair: pair}
			start := time.Now()
			res, waits := claimAll(t, b, 50, to)
			var mu sync.Mutex
			var late []time.Duration // when each refused claim was claimed, since start
			refusals := 0
			var wg sync.WaitGroup
			for i, r := range res {
				if r == ledger.Claimed {
					continue
				}
				if r != ledger.PairLimited {
					t.Fatalf("claim %d answered %v", i, r)
				}
				mu.Lock()
				refusals++
				mu.Unlock()
				wg.Add(1)
				go func() {
					defer wg.Done()
					w := waits[i]
					for {
						time.Sleep(w)
						pc := b[i%2].ClaimForAsync("whatsapp", "k1", fmt.Sprint("id-", i), "a", false, to)
						b[i%2].Flush()
						r, again, err := pc.Wait(context.Background())
						mu.Lock()
						if err != nil || r != ledger.PairLimited {
							if r != ledger.Claimed {
								t.Errorf("claim %d made again: %v, %v", i, r, err)
							}
							late = append(late, time.Since(start))
							mu.Unlock()
							return
						}
						refusals++
						mu.Unlock()
						w = again
					}
				}()
			}
			wg.Wait()
			if len(late) != 5 {
				t.Fatalf("%d late claims, want 5", len(late))
			}
			// Each turn goes to one of those that wait for it: at most
			// 5 + 4 + 3 + 2 + 1 refusals, each refused claim made again
			// when the turn it waited for came.
			if refusals < 5 || refusals > 15 {
				t.Errorf("%d refusals, want 5 to 15", refusals)
			}
			slices.Sort(late)
			for k, at := range late {
				if turn := time.Duration(k+1)*pair.Every - 50*time.Millisecond; at < turn {
					t.Errorf("late claim %d claimed %v after the first, before its turn %v", k, at, turn)
				}
			}
			if last := late[4]; last > 5*pair.Every+time.Second {
				t.Errorf("the last claim came %v after the first, want about %v", last, 5*pair.Every)
			}
			// Claimed again by its owner, or delivered: no turn taken, so
			// the pair's next turn is still one interval after the last.
			_ = b[0].Delivered(context.Background(), "whatsapp", "k1", "id-0", "wamid")
			for _, id := range []string{"id-0", "id-1"} {
				pc := b[0].ClaimForAsync("whatsapp", "k1", id, "a", false, to)
				b[0].Flush()
				if r, _, err := pc.Wait(context.Background()); err != nil || r == ledger.PairLimited {
					t.Errorf("claim of %s again: %v, %v; want no pair refusal", id, r, err)
				}
			}
		})
	}
}
