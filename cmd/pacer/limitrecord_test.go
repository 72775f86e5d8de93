package main

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// limitTest returns a fresh Redis prefix, a client of the test
// redis-server's database and the whatsapp channel's limit record under
// that prefix, which it deletes when the test ends.
func limitTest(t *testing.T) (prefix string, rdb *redis.Client, key string) {
	var b [4]byte
	crand.Read(b[:])
	prefix = "pacer-limitrec-" + hex.EncodeToString(b[:])
	rdb = redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), DB: testenv.RedisDB})
	key = limitKey(prefix, "whatsapp")
	t.Cleanup(func() {
		rdb.Del(context.Background(), key)
		rdb.Close()
	})
	return prefix, rdb, key
}

// TestFailedStartRecordsNoLimit: a `pacer run` that fails its Kafka
// start-up check records no limit for its channel, so `pacer status` with
// no pacer running shows this shell's limit, as README says (it recorded
// 7/s before its checks, with no expiry, and status showed 7/s "from the
// running pacers" when none ran).
func TestFailedStartRecordsNoLimit(t *testing.T) {
	prefix, rdb, key := limitTest(t)
	env := map[string]string{"PACER_REDIS_URL": testenv.RedisURL(t), "PACER_REDIS_PREFIX": prefix,
		"PACER_WHATSAPP_TOKEN": "t", "PACER_WHATSAPP_RATE": "7", "PACER_METRICS_ADDR": "127.0.0.1:0",
		"PACER_KAFKA_BROKERS": "127.0.0.1:1", "PACER_KAFKA_STARTUP_TIMEOUT": "1ms"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	var out, errb strings.Builder
	if code := run(t.Context(), []string{"run", "--channel", "whatsapp"}, strings.NewReader(""), &out, &errb, lookup); code != 1 {
		t.Fatalf("pacer run with Kafka down: exit %d, want 1\n%s", code, errb.String())
	}
	if n, err := rdb.Exists(t.Context(), key).Result(); err != nil || n != 0 {
		t.Errorf("after a run that never started: %s exists %d (err %v), want 0", key, n, err)
	}
	env["PACER_WHATSAPP_RATE"] = "10"
	out.Reset()
	errb.Reset()
	if code := run(t.Context(), []string{"status", "--channel", "whatsapp"}, strings.NewReader(""), &out, &errb, lookup); code != 0 {
		t.Fatalf("pacer status: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if want := "limit 10 msgs/s, burst "; !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "this shell's PACER_* settings") {
		t.Errorf("pacer status with no pacer running:\n%s\nwant %q from this shell's PACER_* settings", out.String(), want)
	}
}

// TestRunRecordsLimitOnceStarted: a `pacer run` that starts records its
// channel's limit with an expiry of at most limitTTL; after a clean stop
// the record is left to expire (other replicas may still run).
func TestRunRecordsLimitOnceStarted(t *testing.T) {
	prefix, rdb, key := limitTest(t)
	env := map[string]string{"PACER_REDIS_URL": testenv.RedisURL(t), "PACER_REDIS_PREFIX": prefix,
		"PACER_WHATSAPP_TOKEN": "t", "PACER_WHATSAPP_RATE": "7", "PACER_METRICS_ADDR": "127.0.0.1:0",
		"PACER_KAFKA_BROKERS": testenv.KafkaBrokers(t)}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	topic := "pacer.limitrec." + prefix[len("pacer-limitrec-"):]
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	var errb strings.Builder
	go func() {
		done <- run(ctx, []string{"run", "--channel", "whatsapp", "--topic", topic, "--group", topic}, strings.NewReader(""), io.Discard, &errb, lookup)
	}()
	var m map[string]string
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if m, _ = rdb.HGetAll(t.Context(), key).Result(); len(m) > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("pacer run: exit %d after SIGTERM-like stop, want 0\n%s", code, errb.String())
	}
	if m["rate"] != "7" {
		t.Fatalf("the started pacer recorded %v under %s, want rate 7\n%s", m, key, errb.String())
	}
	ttl, err := rdb.PTTL(t.Context(), key).Result()
	if err != nil || ttl <= 0 || ttl > limitTTL {
		t.Errorf("the limit record's TTL after a clean stop: %v (err %v), want in (0, %v]", ttl, err, limitTTL)
	}
}

// TestKeepLimitRefreshesThenExpires: the limit record lives while its
// pacer keeps refreshing it, past several of its TTLs, and expires once it
// stops.
func TestKeepLimitRefreshesThenExpires(t *testing.T) {
	prefix, rdb, key := limitTest(t)
	// A TTL 20 times the refresh interval: a refresh delayed by a loaded
	// machine does not let the record lapse while keepLimit runs.
	const ttl, every = 2 * time.Second, 100 * time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		keepLimit(ctx, rdb, prefix, "whatsapp", bucket.Limit{PerSecond: 7, Burst: 3}, slog.New(slog.NewTextHandler(io.Discard, nil)), every, ttl)
	}()
	// Three TTLs: without refreshes the record would be gone.
	for range 60 {
		time.Sleep(100 * time.Millisecond)
		if lim, ok := publishedLimit(t.Context(), rdb, prefix, "whatsapp"); ok && lim != (bucket.Limit{PerSecond: 7, Burst: 3}) {
			t.Fatalf("recorded %+v, want 7/s burst 3", lim)
		}
	}
	if lim, ok := publishedLimit(t.Context(), rdb, prefix, "whatsapp"); !ok || lim != (bucket.Limit{PerSecond: 7, Burst: 3}) {
		t.Fatalf("6 s (3 TTLs) into a running keepLimit: recorded %+v, %v; want 7/s burst 3", lim, ok)
	}
	if d, err := rdb.PTTL(t.Context(), key).Result(); err != nil || d <= 0 || d > ttl {
		t.Errorf("the record's TTL while refreshed: %v (err %v), want in (0, %v]", d, err, ttl)
	}
	cancel()
	<-stopped
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := rdb.Exists(t.Context(), key).Result()
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still exists 10 s after its pacer stopped (TTL %v)", key, ttl)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, ok := publishedLimit(t.Context(), rdb, prefix, "whatsapp"); ok {
		t.Error("publishedLimit still reports a limit after the record expired")
	}
}
