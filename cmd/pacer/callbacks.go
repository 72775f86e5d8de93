package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/pacerhq/pacer/pacer/callback"
	"github.com/pacerhq/pacer/pacer/ingest"
	"github.com/pacerhq/pacer/pacer/outcomes"
	"github.com/pacerhq/pacer/pacer/produce"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The tenants' callbacks: `pacer run` writes outcomes (newOutcomeWriter),
// `pacer ingest` dispatches them (startCallbacks); see
// docs/decisions/0039-callbacks-through-an-outcomes-topic.md.

// checkCallbackConfig reports the PACER_CALLBACK_* settings of c that are
// out of range.
func checkCallbackConfig(c ingestConfig, bad func(v, p string)) {
	if c.TopicPrefix == "" || checkTopic("x", c.TopicPrefix+"whatsapp") != nil {
		bad("PACER_INGEST_TOPIC_PREFIX", "must be a topic prefix: ASCII letters, digits, '.', '_' and '-'")
	}
	if c.CallbackGroup == "" {
		bad("PACER_CALLBACK_GROUP", "must not be empty")
	}
	if c.CallbackBatch < 1 || c.CallbackBatch > 10000 {
		bad("PACER_CALLBACK_BATCH", "must be in 1..10000")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"PACER_CALLBACK_WAIT", c.CallbackWait}, {"PACER_CALLBACK_TIMEOUT", c.CallbackTimeout},
		{"PACER_CALLBACK_MAX_BACKOFF", c.CallbackMaxBackoff}, {"PACER_CALLBACK_DEDUPE_TTL", c.CallbackDedupeTTL}} {
		if d.v <= 0 {
			bad(d.name, "must be > 0")
		}
	}
	if c.CallbackMaxBackoff > 0 && c.CallbackMaxBackoff < time.Second {
		bad("PACER_CALLBACK_MAX_BACKOFF", "must be >= 1s (the first wait)")
	}
	if c.CallbackMaxPending < c.CallbackBatch {
		bad("PACER_CALLBACK_MAX_PENDING", "must be >= PACER_CALLBACK_BATCH")
	}
}

// callbackTopicErr says what is wrong with PACER_CALLBACK_TOPIC, "" if
// nothing.
func callbackTopicErr(topic string) string {
	if topic == "" || checkTopic("x", topic) != nil {
		return "must be a Kafka topic name: ASCII letters, digits, '.', '_' and '-'"
	}
	return ""
}

// newOutcomeWriter returns the writer of `pacer run`'s outcome records
// (PACER_CALLBACK_TOPIC), with its own producer and its metrics labelled
// channel as the pacer's are, and the function that
// waits (at most drain) for its records and closes it. The topic is
// created in the background when missing: the records wait for it.
func newOutcomeWriter(ctx context.Context, cfg config, channel string, kopts []kgo.Opt, log *slog.Logger, reg prometheus.Registerer) (*outcomes.Writer, func(drain time.Duration), error) {
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, kopts...), kgo.ClientID("pacer-outcomes"),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(5*time.Millisecond),
		// A Kafka outage's outcomes wait here, not in the pacing path.
		kgo.MaxBufferedRecords(1<<20))...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka client: %w", err)
	}
	ectx, stopEnsure := context.WithCancel(ctx)
	ensured := make(chan struct{})
	go func() {
		defer close(ensured)
		if _, err := produce.EnsureTopic(ectx, cl, cfg.CallbackTopic, 12); err != nil && ectx.Err() == nil {
			log.Warn("outcomes topic not checked; outcome records wait until it exists", "topic", cfg.CallbackTopic, "err", err)
		}
	}()
	w := outcomes.NewWriter(cl, cfg.CallbackTopic, log, prometheus.WrapRegistererWith(prometheus.Labels{"channel": channel}, reg))
	return w, func(drain time.Duration) {
		stopEnsure()
		<-ensured
		actx, cancel := context.WithTimeout(context.Background(), drain)
		defer cancel()
		if err := w.Close(actx); err != nil {
			log.Error("outcome records not acknowledged at exit; their records are read again by the next owner", "waiting", w.Waiting())
		}
		cl.Close()
	}, nil
}

// startCallbacks runs the callback dispatcher in the background: the
// outcomes of each tenant of tf with a callback_url go to it. The
// returned function stops it and waits for its final commit.
func startCallbacks(ctx context.Context, cfg config, ic ingestConfig, tf *ingest.TenantFile, rdb redis.UniversalClient,
	kopts []kgo.Opt, log *slog.Logger, reg prometheus.Registerer) (func(), error) {
	receivers := func(id string) (callback.Receiver, bool) {
		t := tf.Tenants().ByID(id)
		if t == nil || t.CallbackURL == "" {
			return callback.Receiver{}, false
		}
		return callback.Receiver{URL: t.CallbackURL, SecretFile: t.CallbackSecretFile}, true
	}
	d, err := callback.New(callback.Config{Topic: cfg.CallbackTopic, Group: ic.CallbackGroup, Batch: ic.CallbackBatch, Wait: ic.CallbackWait,
		Timeout: ic.CallbackTimeout, MaxBackoff: ic.CallbackMaxBackoff, DedupeTTL: ic.CallbackDedupeTTL,
		MaxPending: ic.CallbackMaxPending, Partitions: ic.Partitions, KeyPrefix: cfg.RedisPrefix + ":", Logger: log}, rdb, receivers, reg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := d.Run(dctx, append(append([]kgo.Opt{}, kopts...), kgo.ClientID("pacer-callbacks"))); err != nil {
			log.Error("callback dispatcher stopped", "err", err)
		}
	}()
	return func() { cancel(); <-done }, nil
}

// checkCallbackSecrets checks a tenant's callback_secret_file when the
// tenants file is loaded: it exists and holds whsec_ secrets
// (callback.ReadSecrets; its errors name the file, never a secret).
func checkCallbackSecrets(path string) error {
	_, err := callback.ReadSecrets(path)
	return err
}
