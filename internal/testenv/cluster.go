package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"
)

// EnvRedisCluster names the comma-separated addresses of a Redis Cluster
// ("127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"), read by [ClusterAddrs].
const EnvRedisCluster = "PACER_TEST_REDIS_CLUSTER"

var (
	clusterOnce  sync.Once
	clusterAddrs []string
	clusterErr   error
)

// ClusterAddrs returns the addresses of the masters of a real Redis Cluster
// (three masters, no replicas): $PACER_TEST_REDIS_CLUSTER if set, else the
// cluster of scripts/redis-cluster.sh start, which this call starts if it
// is not running (shared by all test binaries of the work tree and left
// running: stop it with scripts/redis-cluster.sh stop; `make test` does).
// Without a cluster it fails the test with a hint; under -short with the
// variable unset it skips the test.
func ClusterAddrs(t testing.TB) []string {
	t.Helper()
	if a := strings.TrimSpace(os.Getenv(EnvRedisCluster)); a != "" {
		return splitAddrs(a)
	}
	skipShort(t, "Redis Cluster", EnvRedisCluster)
	clusterOnce.Do(func() { clusterAddrs, clusterErr = startCluster() })
	if clusterErr != nil {
		t.Fatalf("testenv: no Redis Cluster: %v\nrun `make test` (it starts one and sets %s), or set it yourself", clusterErr, EnvRedisCluster)
	}
	t.Logf("testenv: %s is not set; using the cluster of scripts/redis-cluster.sh (stop it with scripts/redis-cluster.sh stop)", EnvRedisCluster)
	return clusterAddrs
}

// splitAddrs returns the addresses of a comma- (or space-) separated list.
func splitAddrs(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
}

func startCluster() ([]string, error) {
	out, err := runScript("redis-cluster.sh", "start", 2*time.Minute)
	if err != nil {
		return nil, fmt.Errorf("%s is not set: %w", EnvRedisCluster, err)
	}
	addrs := splitAddrs(lastLine(out))
	if len(addrs) == 0 {
		return nil, fmt.Errorf("scripts/redis-cluster.sh start printed %q, not addresses", out)
	}
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("scripts/redis-cluster.sh start printed %q, not host:port,...", lastLine(out))
		}
	}
	return addrs, nil
}

// Sentinel starts a private redis-server master and one redis-sentinel
// (redis-server --sentinel) monitoring it as masterName "pacer", both on
// free 127.0.0.1 ports, for the test only: they are stopped in t.Cleanup.
// It returns the master name and the sentinel's address, for
// redis.FailoverOptions or redis.UniversalOptions{MasterName, Addrs}. It
// never skips: without redis-server it fails the test.
func Sentinel(t testing.TB) (masterName string, sentinelAddrs []string) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("testenv: redis-server is not installed (apt-get install redis-server)")
	}
	dir := t.TempDir()
	master := startServer(t, bin, dir, "master", func(port int) []string {
		return []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}
	})
	sentinel := startServer(t, bin, dir, "sentinel", func(port int) []string {
		conf := filepath.Join(dir, "sentinel-"+strconv.Itoa(port)+".conf")
		_, mport, _ := net.SplitHostPort(master)
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor pacer 127.0.0.1 %s 1\nsentinel down-after-milliseconds pacer 5000\n", port, dir, mport)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return []string{conf, "--sentinel"}
	})
	return "pacer", []string{sentinel}
}

// startServer runs bin with args(port) on a free port until PING answers,
// retrying on another port if it exits, and stops it in t.Cleanup.
func startServer(t testing.TB, bin, dir, name string, args func(port int) []string) string {
	t.Helper()
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		c, err := startChild(name, bin, dir, addr, args(port)...)
		if err != nil {
			lastErr = err
			continue
		}
		t.Cleanup(c.stop)
		return addr
	}
	t.Fatalf("testenv: %v", lastErr)
	return ""
}
