package ledger

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// redisCPU returns redis-server's CPU seconds so far (INFO cpu).
func redisCPU(b *testing.B, rdb *redis.Client) float64 {
	s, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(s, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return sum
}

// BenchmarkLedgerRedisCPU measures redis-server's CPU per message of a
// steady flow through ledger.lua: each call claims batch new ids of 20
// pacing keys and marks the previous call's ids delivered.
func BenchmarkLedgerRedisCPU(b *testing.B) {
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
		if err := ledgerScript.Run(ctx, rdb, keys, argv...).Err(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric((redisCPU(b, rdb)-cpu0)/float64(b.N*batch)*1e6, "redis-µs/msg")
}

// BenchmarkLookupRedisCPU measures redis-server's CPU per id of Lookup
// (the read of a backlog's ids before they are queued), 1,000 ids a call.
func BenchmarkLookupRedisCPU(b *testing.B) {
	e := redistest.Real(b)
	rdb := e.RDB
	l := New(rdb, bucket.NewKeys(e.Prefix), time.Minute)
	ctx := context.Background()
	const batch = 1000
	refs := make([]Ref, batch)
	n := 0
	cpu0 := redisCPU(b, rdb)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range refs {
			n++
			refs[j] = Ref{Channel: "whatsapp", Key: "10000000" + strconv.Itoa(n%20), ID: "01JABCDEFGHJKMNPQRSTVWXYZ" + strconv.Itoa(n)}
		}
		if _, err := l.Lookup(ctx, refs); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric((redisCPU(b, rdb)-cpu0)/float64(b.N*batch)*1e6, "redis-µs/id")
}
