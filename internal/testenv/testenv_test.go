package testenv

import (
	"context"
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
