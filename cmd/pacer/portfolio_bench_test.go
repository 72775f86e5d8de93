//go:build e2e

package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
	"github.com/pacerhq/pacer/pacer/suppress"
	"github.com/redis/go-redis/v9"
)

// TestMessagingLimitBench (PACER_BENCH_PORTFOLIO=1) measures what the
// messaging-limit guard costs with 100,000 recipients in one portfolio's
// window: one `pacer run` (real Kafka and redis-server, the WhatsApp fake
// answering at once, PACER_WHATSAPP_RATE 3000) sends rounds of n
// templates to new recipients through a number outside any portfolio
// (guard off) and through a number of the portfolio (guard on), in turn.
// It logs msgs/s (the fake's accepted sends over its first-to-last span),
// Redis round trips per message (pacer_redis_round_trips_total) and the
// MEMORY USAGE of the portfolio's keys. A measurement, not a check.
func TestMessagingLimitBench(t *testing.T) {
	if os.Getenv("PACER_BENCH_PORTFOLIO") == "" {
		t.Skip("measurement: run with PACER_BENCH_PORTFOLIO=1")
	}
	const (
		filled = 100_000
		n      = 5_000
		rounds = 2
	)
	e := newE2E(t, whatsapptest.Config{})
	ctx := context.Background()
	rdb := e.redisClient()
	keys := bucket.NewKeys(e.prefix)
	win, meta := keys.PortfolioWindow("whatsapp", "brand"), keys.PortfolioMeta("whatsapp", "brand")
	t.Cleanup(func() { rdb.Del(ctx, win, meta) })
	const on, off = "106540352200001", "106540352200002"
	e.cli("portfolio", "set", "--channel", "whatsapp", "--key", on, "--portfolio", "brand", "--tier", "200000")
	now := time.Now().UnixMilli()
	for start := 0; start < filled; start += 1000 {
		zs := make([]redis.Z, 0, 1000)
		for i := start; i < start+1000; i++ {
			zs = append(zs, redis.Z{Score: float64(now), Member: suppress.Hash(fmt.Sprint("filled-", i))})
		}
		if err := rdb.ZAdd(ctx, win, zs...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	usage := func() (w, m int64) {
		w, _ = rdb.MemoryUsage(ctx, win, 0).Result()
		m, _ = rdb.MemoryUsage(ctx, meta, 0).Result()
		return w, m
	}
	w0, m0 := usage()
	t.Logf("window of %d recipients: %d bytes (%.1f per recipient), portfolio hash %d bytes", filled, w0, float64(w0)/filled, m0)

	p := e.run("PACER_WHATSAPP_RATE=3000")
	if !waitFor(60*time.Second, func() bool { v, _ := p.metric(t, `pacer_ready{channel="whatsapp"}`); return v == 1 }) {
		t.Fatalf("pacer run not ready within 60 s\n%s", p.logs())
	}
	trips := `pacer_redis_round_trips_total{channel="whatsapp"}`
	sent := 0
	round := func(key, tag string) (rate, perMsg float64) {
		t.Helper()
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, `{"id":"%s-%d","key":%q,"to":"+1%s%07d","category":"marketing","payload":{"type":"template","template":{"name":"offer","language":{"code":"en"}}}}`+"\n",
				tag, i, key, map[string]string{on: "556", off: "557"}[key], sent+i)
		}
		before := e.fake.Stats()[key]
		t0, _ := p.metric(t, trips)
		if code, out, errs := e.publish(b.String()); code != 0 {
			t.Fatalf("publish: %d %s %s", code, out, errs)
		}
		if !waitFor(120*time.Second, func() bool { return e.fake.Stats()[key].Delivered >= before.Delivered+n }) {
			t.Fatalf("%s: %d of %d delivered within 120 s\n%s", tag, e.fake.Stats()[key].Delivered-before.Delivered, n, p.logs())
		}
		sent += n
		var first time.Time
		for _, a := range e.fake.Arrivals() {
			if a.Key == key && strings.HasPrefix(a.ID, tag+"-") && (first.IsZero() || a.At.Before(first)) {
				first = a.At
			}
		}
		last := e.fake.Stats()[key].Last
		t1, _ := p.metric(t, trips)
		return float64(n-1) / last.Sub(first).Seconds(), (t1 - t0) / n
	}
	for r := range rounds {
		offRate, offTrips := round(off, fmt.Sprint("off", r))
		onRate, onTrips := round(on, fmt.Sprint("on", r))
		t.Logf("round %d: guard off %.0f msgs/s, %.3f Redis round trips per message; guard on %.0f msgs/s, %.3f round trips per message",
			r+1, offRate, offTrips, onRate, onTrips)
	}
	w1, m1 := usage()
	used, _ := rdb.ZCard(ctx, win).Result()
	t.Logf("after: window of %d recipients: %d bytes (%.1f per recipient), portfolio hash %d bytes", used, w1, float64(w1)/float64(used), m1)
	p.stop(t)
}
