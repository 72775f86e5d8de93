package consumer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/pacer/consumer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
)

type nopSender struct{}

func (nopSender) Send(context.Context, channels.Message) (channels.Result, error) {
	return channels.Result{}, nil
}

// Run gives up after StartupTimeout when no seed broker ever answers, and
// says whether the name does not resolve or nothing listens there, instead
// of retrying forever.
func TestRunFailsWhenNoBrokerAnswers(t *testing.T) {
	for _, c := range []struct {
		name, seed, cause string
	}{
		{"name does not resolve", "nonsense.invalid:9092", "does not resolve"},
		{"nothing listens", "127.0.0.1:1", "nothing listens"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
			lim := bucket.New(rdb, bucket.Config{})
			p, err := consumer.New(consumer.Config{Channel: "test", Limit: bucket.Limit{PerSecond: 10, Burst: 1}, StartupTimeout: time.Second},
				[]kgo.Opt{kgo.SeedBrokers(c.seed), kgo.RetryTimeout(time.Second)},
				consumer.Deps{Bucket: lim, Adapter: adapt.New(rdb, bucket.Config{}), Ledger: newLedger(t, rdb, lim.Keys(), 0), Sender: nopSender{}},
				prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			err = p.Run(ctx)
			var ke *consumer.KafkaError
			if !errors.As(err, &ke) || !strings.Contains(ke.Cause, c.cause) || ctx.Err() != nil {
				t.Fatalf("Run = %v, want a KafkaError whose cause says %q, well before the 2-minute bound", err, c.cause)
			}
		})
	}
}
