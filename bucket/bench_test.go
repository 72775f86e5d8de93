package bucket_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// Benchmarks against one real redis-server (testenv.RedisAddr), with 1, 8
// and 64 concurrent callers on 8 pacing keys and a limit that never
// refuses, so every call is a grant. Each reports:
//
//	decisions/s  messages cleared to send per second (a lease of 16
//	             slots is 16 decisions)
//	p50-µs       median latency of one call
//	p99-µs       99th percentile latency of one call
//	calls/decision  Redis calls per message
//
// ns/op is per decision. BenchmarkRedisRate runs go-redis/redis_rate v10
// Allow, the peer, on the same server and client settings in the same run.
// Numbers for this machine are in BENCHMARKS.md.

// never is a limit that always grants.
var never = bucket.Limit{PerSecond: 1e9, Burst: 1e9}

// benchOp is one call of a benchmark: it returns the decisions it made.
type benchOp func(ctx context.Context, key string) (int, error)

func benchCallers(b *testing.B, mk func(b *testing.B, rdb *redis.Client, l *bucket.Limiter) benchOp) {
	for _, callers := range []int{1, 8, 64} {
		b.Run("callers="+strconv.Itoa(callers), func(b *testing.B) {
			rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(b), DB: testenv.RedisDB, PoolSize: 128})
			b.Cleanup(func() { rdb.Close() })
			l := bucket.New(rdb, bucket.Config{Prefix: "bench:" + strconv.FormatInt(time.Now().UnixNano(), 36)})
			if err := l.Load(b.Context()); err != nil {
				b.Fatal(err)
			}
			op := mk(b, rdb, l)
			ctx := context.Background()
			if _, err := op(ctx, "warm-up"); err != nil { // connections, scripts
				b.Fatal(err)
			}
			var decisions, calls atomic.Int64
			lat := make([][]time.Duration, callers)
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for g := range callers {
				wg.Go(func() {
					key := "k" + strconv.Itoa(g%8)
					for decisions.Load() < int64(b.N) {
						t := time.Now()
						n, err := op(ctx, key)
						lat[g] = append(lat[g], time.Since(t))
						if err != nil {
							b.Error(err)
							return
						}
						calls.Add(1)
						decisions.Add(int64(n))
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			all := slices.Concat(lat...)
			slices.Sort(all)
			pct := func(p float64) float64 {
				return float64(all[int(p*float64(len(all)-1))]) / float64(time.Microsecond)
			}
			b.ReportMetric(float64(decisions.Load())/elapsed.Seconds(), "decisions/s")
			b.ReportMetric(pct(0.50), "p50-µs")
			b.ReportMetric(pct(0.99), "p99-µs")
			b.ReportMetric(float64(calls.Load())/float64(decisions.Load()), "calls/decision")
		})
	}
}

// BenchmarkReserve is Limiter.Reserve: one call per message, a slot within
// a second.
func BenchmarkReserve(b *testing.B) {
	benchCallers(b, func(b *testing.B, _ *redis.Client, l *bucket.Limiter) benchOp {
		return func(ctx context.Context, key string) (int, error) {
			r, err := l.Reserve(ctx, "bench", key, never, 1, time.Second)
			return b2i(r.OK), err
		}
	})
}

// BenchmarkLease is Limiter.Lease of 16 slots: one call per 16 messages,
// the pacer's path at high per-key rates.
func BenchmarkLease(b *testing.B) {
	benchCallers(b, func(b *testing.B, _ *redis.Client, l *bucket.Limiter) benchOp {
		return func(ctx context.Context, key string) (int, error) {
			ls, err := l.Lease(ctx, "bench", key, never, 16, time.Second)
			return ls.Granted, err
		}
	})
}

// BenchmarkRedisRate is go-redis/redis_rate v10 Allow, the peer: one call
// per message.
func BenchmarkRedisRate(b *testing.B) {
	benchCallers(b, func(b *testing.B, rdb *redis.Client, _ *bucket.Limiter) benchOp {
		rl := redis_rate.NewLimiter(rdb)
		lim := redis_rate.Limit{Rate: 1e9, Burst: 1e9, Period: time.Second}
		prefix := "bench:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
		return func(ctx context.Context, key string) (int, error) {
			r, err := rl.Allow(ctx, prefix+key, lim)
			if err != nil {
				return 0, err
			}
			return r.Allowed, nil
		}
	})
}
