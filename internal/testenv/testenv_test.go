package testenv

import (
	"context"
	"errors"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func TestRedisPing(t *testing.T) {
	if testing.Short() && os.Getenv(EnvRedisAddr) == "" {
		t.Skip("-short and " + EnvRedisAddr + " unset: would start a redis-server; run without -short (make test)")
	}
	addr := RedisAddr(t)
	if err := redisPing(addr, 5*time.Second); err != nil {
		t.Fatalf("PING %s: %v", addr, err)
	}
	if got, want := RedisURL(t), "redis://"+addr+"/9"; got != want {
		t.Fatalf("RedisURL = %q, want %q", got, want)
	}
	// A second call reuses the same server.
	if again := RedisAddr(t); again != addr {
		t.Fatalf("RedisAddr changed: %q then %q", addr, again)
	}
}

func TestKafkaPing(t *testing.T) {
	if testing.Short() && os.Getenv(EnvKafkaBrokers) == "" {
		t.Skip("-short and " + EnvKafkaBrokers + " unset: would start a Kafka broker; run without -short (make test)")
	}
	brokers := KafkaBrokers(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.Ping(ctx); err != nil {
		t.Fatalf("Ping %s: %v", brokers, err)
	}
}

// TestShortStartsNoServer: under -short, with their variables unset, the
// helpers that would start a Kafka broker, a Redis Cluster or a browser,
// or read the secured listeners, skip the test instead.
func TestShortStartsNoServer(t *testing.T) {
	short := flag.Lookup("test.short").Value
	was := short.String()
	if err := short.Set("true"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { short.Set(was) })
	for _, env := range []string{EnvKafkaBrokers, EnvRedisCluster, "PACER_TEST_KAFKA_SASL_BROKERS", "PACER_TEST_REDIS_TLS_ADDR", "PACER_CHROMIUM"} {
		t.Setenv(env, "")
	}
	// Were Kafka started, it would be through this hook first: it fails
	// at once instead.
	hook := containerKafka
	t.Cleanup(func() { containerKafka = hook })
	containerKafka = func() (string, bool, error) { return "", false, errors.New("a Kafka broker was started") }
	for name, call := range map[string]func(t *testing.T){
		"KafkaBrokers": func(t *testing.T) { KafkaBrokers(t) },
		"ClusterAddrs": func(t *testing.T) { ClusterAddrs(t) },
		"KafkaSecure":  func(t *testing.T) { KafkaSecure(t) },
		"RedisSecure":  func(t *testing.T) { RedisSecure(t) },
		"Chromium":     func(t *testing.T) { Chromium(t, "--version") },
	} {
		var skipped bool
		t.Run(name, func(t *testing.T) {
			defer func() { skipped = t.Skipped() }()
			call(t)
			t.Errorf("%s returned under -short with its variable unset", name)
		})
		if !skipped {
			t.Errorf("%s did not skip the test under -short", name)
		}
	}
}
