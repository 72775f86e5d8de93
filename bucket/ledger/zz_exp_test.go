package ledger

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/internal/redistest"
	"github.com/pacerhq/pacer/lua"
	"github.com/redis/go-redis/v9"
)

func BenchmarkExpLedger(b *testing.B) {
	cuts := map[string]string{
		"0-validate": "\nlocal t = redis.call('TIME')",
		"1-time":     "\nlocal function hkey(i)",
		"2-mget":     "\n-- A field read (seen[f])",
		"3-hmget":    "\n-- Run the operations in order",
		"4-ops":      "\nlocal hs = {}",
		"5-full":     "",
	}
	for _, name := range []string{"0-validate", "1-time", "2-mget", "3-hmget", "4-ops", "5-full"} {
		src := lua.Ledger
		if c := cuts[name]; c != "" {
			i := strings.Index(src, c)
			if i < 0 {
				b.Fatal(name)
			}
			src = src[:i] + "\nreturn 1\n"
		}
		sc := redis.NewScript(src)
		b.Run(name, func(b *testing.B) {
			e := redistest.Real(b)
			rdb := e.RDB
			l := New(rdb, bucket.NewKeys(e.Prefix), time.Minute)
			const batch = 40
			ctx := context.Background()
			var prev []op
			n := 0
			cpu0 := redisCPU(b, rdb)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var ops []op
				ops = append(ops, prev...)
				prev = prev[:0]
				for j := 0; j < batch; j++ {
					n++
					id := "01JABCDEFGHJKMNPQRSTVWXYZ" + strconv.Itoa(n)
					key := "10000000" + strconv.Itoa(n%20)
					ops = append(ops, op{kind: 'c', channel: "whatsapp", key: key, id: id, arg: "owner-1"})
					prev = append(prev, op{kind: 'd', channel: "whatsapp", key: key, id: id, arg: "wamid.HBgLMTY1MDU1NTEyMzQVAgARGBI5QTNDQTVCM0Q0Q0Q2RTY3RTcA"})
				}
				keys, argv := l.args(ops, time.Now())
				if err := sc.Run(ctx, rdb, keys, argv...).Err(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric((redisCPU(b, rdb)-cpu0)/float64(b.N*batch)*1e6, "redis-µs/msg")
		})
	}
}
