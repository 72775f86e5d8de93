package bucket_test

import (
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/redistest"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// exercise runs every kind of call of l once on a few pacing keys and
// fails the test on any error.
func exercise(t *testing.T, l *bucket.Limiter, keys int) {
	t.Helper()
	ctx := t.Context()
	lim := bucket.Limit{PerSecond: 1000, Burst: 1000}
	for i := range keys {
		key := "key" + strconv.Itoa(i)
		if d, err := l.Reserve(ctx, "whatsapp", key, lim, 1, 0); err != nil || !d.OK {
			t.Fatalf("Reserve(%s, now) = %+v, %v", key, d, err)
		}
		if r, err := l.Reserve(ctx, "whatsapp", key, lim, 1, time.Second); err != nil || !r.OK {
			t.Fatalf("Reserve(%s) = %+v, %v", key, r, err)
		}
		ls, err := l.Lease(ctx, "whatsapp", key, lim, 10, time.Second)
		if err != nil || ls.Granted != 10 {
			t.Fatalf("Lease(%s) = %+v, %v", key, ls, err)
		}
		if _, err := l.Return(ctx, ls, 5); err != nil {
			t.Fatalf("Return(%s): %v", key, err)
		}
		if d, err := l.ReserveMulti(ctx, "whatsapp", key, []bucket.Request{{Limit: lim, Cost: 1}, {Sub: "15551234567", Limit: lim, Cost: 1}}, 0); err != nil || !d.OK {
			t.Fatalf("ReserveMulti(%s, now) = %+v, %v", key, d, err)
		}
		if r, err := l.ReserveMulti(ctx, "whatsapp", key, []bucket.Request{{Limit: lim, Cost: 1}, {Sub: "15550000000", Limit: lim, Cost: 1}}, time.Hour); err != nil || !r.OK {
			t.Fatalf("ReserveMulti(%s) = %+v, %v", key, r, err)
		}
		if _, err := l.State(ctx, "whatsapp", key, lim); err != nil {
			t.Fatalf("State(%s): %v", key, err)
		}
		if err := l.Cooldown(ctx, "whatsapp", key, time.Second); err != nil {
			t.Fatal(err)
		}
		if r, err := l.Reserve(ctx, "whatsapp", key, lim, 1, time.Hour); err != nil || r.OK || !r.Cooldown {
			t.Fatalf("Reserve(%s) in cooldown = %+v, %v", key, r, err)
		}
	}
}

// uniqueLimiter is a Limiter on rdb with a key prefix of its own.
func uniqueLimiter(t *testing.T, rdb redis.UniversalClient) *bucket.Limiter {
	return bucket.New(rdb, bucket.Config{Prefix: uniquePrefix(t) + ":" + strconv.FormatInt(time.Now().UnixNano(), 36)})
}

func uniquePrefix(t *testing.T) string {
	return "test:" + strings.ReplaceAll(t.Name(), "/", ":") + ":" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// TestCluster runs every call on a real three-master Redis Cluster, checks
// that pacing keys spread over the masters while the keys of one pacing key
// share a slot, and that a SCRIPT FLUSH on every master is recovered.
func TestCluster(t *testing.T) {
	t.Parallel()
	addrs := testenv.ClusterAddrs(t)
	if len(addrs) < 3 {
		t.Fatalf("want three masters, got %v", addrs)
	}
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs})
	t.Cleanup(func() { rdb.Close() })
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("NewUniversalClient(%v) is a %T, want a ClusterClient", addrs, rdb)
	}
	ctx := t.Context()
	prefix := uniquePrefix(t)
	l := bucket.New(rdb, bucket.Config{Prefix: prefix})
	if err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	exercise(t, l, 12)

	// Every key of a pacing key in one slot; pacing keys on several masters.
	masters := map[string]bool{}
	for i := range 12 {
		key := "key" + strconv.Itoa(i)
		slot := func(k string) int64 { return cc.ClusterKeySlot(ctx, k).Val() }
		s := slot(l.Keys().Bucket("whatsapp", key))
		for _, k := range []string{l.Keys().Cooldown("whatsapp", key), l.Keys().SubBucket("whatsapp", key, "15551234567"), l.Keys().SubCooldown("whatsapp", key, "15550000000")} {
			if slot(k) != s {
				t.Fatalf("%s is in slot %d, %s in %d", k, slot(k), l.Keys().Bucket("whatsapp", key), s)
			}
		}
		m, err := cc.MasterForKey(ctx, l.Keys().Bucket("whatsapp", key))
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
	}
	if len(masters) < 2 {
		t.Fatalf("12 pacing keys all on %v", masters)
	}

	// NOSCRIPT on every master: every call recovers (by EVAL).
	h := &redistest.Trips{Match: redistest.NoScriptReply}
	cc.AddHook(h)
	if err := cc.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	exercise(t, uniqueLimiter(t, rdb), 12)
	if h.Load() == 0 {
		t.Fatal("no call met NOSCRIPT after SCRIPT FLUSH on every master")
	}
}

// TestSentinel runs every call through a Sentinel-managed master.
func TestSentinel(t *testing.T) {
	t.Parallel()
	name, sentinels := testenv.Sentinel(t)
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{MasterName: name, Addrs: sentinels})
	t.Cleanup(func() { rdb.Close() })
	l := bucket.New(rdb, bucket.Config{Prefix: uniquePrefix(t)})
	if err := l.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	exercise(t, l, 3)
}

// TestUniversalSingleNode runs every call through a UniversalClient on one
// node.
func TestUniversalSingleNode(t *testing.T) {
	t.Parallel()
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{testenv.RedisAddr(t)}, DB: testenv.RedisDB})
	t.Cleanup(func() { rdb.Close() })
	l := bucket.New(rdb, bucket.Config{Prefix: uniquePrefix(t)})
	exercise(t, l, 3)
}

// privateRedis starts a redis-server of the test's own, so that it can be
// flushed and restarted without disturbing other tests. restart stops it and
// starts it again on the same port, with an empty script cache.
func privateRedis(t *testing.T) (addr string, restart func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	addr = "127.0.0.1:" + port
	dir := t.TempDir()
	var cmd *exec.Cmd
	start := func() {
		cmd = exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start redis-server: %v", err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * ms) {
			c, err := net.DialTimeout("tcp", addr, 100*ms)
			if err == nil {
				c.Close()
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("redis-server on %s did not start: %v", addr, err)
			}
		}
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
	start()
	t.Cleanup(stop)
	return addr, func() { stop(); start() }
}

// TestNoScript checks that a SCRIPT FLUSH and a restart (both empty the
// script cache) are recovered transparently, with one failed EVALSHA per
// script and flush.
func TestNoScript(t *testing.T) {
	t.Parallel()
	addr, restart := privateRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	h := &redistest.Trips{Match: redistest.NoScriptReply}
	rdb.AddHook(h)
	ctx := t.Context()
	l := bucket.New(rdb, bucket.Config{})
	if err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	lim := bucket.Limit{PerSecond: 1e6, Burst: 1e6}
	for _, s := range []struct {
		name  string
		empty func()
	}{
		{"SCRIPT FLUSH", func() {
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}},
		{"restart", restart},
	} {
		if r, err := l.Reserve(ctx, "test", "single", lim, 1, 0); err != nil || !r.OK || h.Load() != 0 {
			t.Fatalf("Reserve before %s = %+v, %v; %d NOSCRIPT", s.name, r, err, h.Load())
		}
		// A single call: EVALSHA fails once, EVAL answers and reloads.
		s.empty()
		if r, err := l.Reserve(ctx, "test", "single", lim, 1, 0); err != nil || !r.OK {
			t.Fatalf("Reserve after %s = %+v, %v", s.name, r, err)
		}
		if r, err := l.Reserve(ctx, "test", "single", lim, 1, 0); err != nil || !r.OK {
			t.Fatalf("second Reserve after %s = %+v, %v", s.name, r, err)
		}
		if n := h.Load(); n != 1 {
			t.Fatalf("after %s: %d single calls met NOSCRIPT, want 1", s.name, n)
		}
		h.Reset()
		if err := l.Load(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
