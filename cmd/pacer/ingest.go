package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"reflect"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/ingest"
	"github.com/pacerhq/pacer/pacer/ingest/quota"
	"github.com/pacerhq/pacer/pacer/message"
	"github.com/pacerhq/pacer/pacer/produce"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ingestConfig is what `pacer ingest` reads beyond config (Kafka, Redis,
// logging, PACER_REDIS_FAILURE, PACER_EXPECTED_REPLICAS,
// PACER_IDEMPOTENCY_TTL). docs/configuration.md has the same table.
type ingestConfig struct {
	// PACER_INGEST_ADDR: listen address of the API, /metrics, /healthz, /readyz; default :8080; "127.0.0.1:0" picks a free port (logged).
	Addr string `env:"PACER_INGEST_ADDR, default=:8080" unit:"host:port" help:"API, /metrics, /healthz, /readyz; 127.0.0.1:0 picks a free port (logged)"`
	// PACER_INGEST_TENANTS: path of the tenants file (JSON: ids, API key SHA-256s, quotas, channels); required; reloaded on change.
	Tenants string `env:"PACER_INGEST_TENANTS" unit:"path" help:"the tenants file (required; reloaded on change)"`
	// PACER_INGEST_IP_RATE: requests per second per client IP; default 100.
	IPRate float64 `env:"PACER_INGEST_IP_RATE, default=100" unit:"requests/s" help:"per client IP"`
	// PACER_INGEST_IP_BURST: bucket capacity in requests per client IP; default 200.
	IPBurst int `env:"PACER_INGEST_IP_BURST, default=200" unit:"requests" help:"IP bucket capacity"`
	// PACER_INGEST_CHANNEL_RATE: messages per second accepted per channel, all tenants together; default 10000.
	ChannelRate float64 `env:"PACER_INGEST_CHANNEL_RATE, default=10000" unit:"messages/s" help:"per channel, all tenants"`
	// PACER_INGEST_CHANNEL_BURST: channel bucket capacity in messages, >= 1000 (a full batch); default 10000.
	ChannelBurst int `env:"PACER_INGEST_CHANNEL_BURST, default=10000" unit:"messages" help:"channel bucket capacity, >= 1000"`
	// PACER_INGEST_TRUSTED_PROXIES: comma-separated CIDRs (or addresses) of proxies whose X-Forwarded-For is believed; default none.
	TrustedProxies []string `env:"PACER_INGEST_TRUSTED_PROXIES" unit:"CIDRs" help:"proxies whose X-Forwarded-For is believed"`
	// PACER_INGEST_PRODUCE_TIMEOUT: longest wait for Kafka's acknowledgement before answering 503; default 10s.
	ProduceTimeout time.Duration `env:"PACER_INGEST_PRODUCE_TIMEOUT, default=10s" unit:"duration" help:"longest wait for Kafka's ack before 503"`
	// PACER_INGEST_PARTITIONS: partitions of a channel topic the gateway has to create; default 12.
	Partitions int `env:"PACER_INGEST_PARTITIONS, default=12" unit:"partitions" help:"of a channel topic the gateway creates"`
	// PACER_INGEST_TOPIC_PREFIX: starts every channel topic the gateway writes to: <prefix><channel>; a pacer run behind it then consumes --topic <prefix><channel>; default pacer. (the topics pacer run consumes by default).
	TopicPrefix string `env:"PACER_INGEST_TOPIC_PREFIX, default=pacer." unit:"topic prefix" help:"channel topics are <prefix><channel>"`
	// PACER_CALLBACK_GROUP: consumer group of the callback dispatcher on the outcomes topic (PACER_CALLBACK_TOPIC); default pacer-callbacks.
	CallbackGroup string `env:"PACER_CALLBACK_GROUP, default=pacer-callbacks" unit:"group" help:"the callback dispatcher's consumer group"`
	// PACER_CALLBACK_BATCH: most outcomes in one callback POST to a tenant; default 100.
	CallbackBatch int `env:"PACER_CALLBACK_BATCH, default=100" unit:"outcomes" help:"most outcomes per callback POST"`
	// PACER_CALLBACK_WAIT: longest an outcome waits for its callback batch to fill before the batch is sent; default 1s.
	CallbackWait time.Duration `env:"PACER_CALLBACK_WAIT, default=1s" unit:"duration" help:"longest wait for a batch to fill"`
	// PACER_CALLBACK_TIMEOUT: one callback POST, the receiver's answer included; default 10s.
	CallbackTimeout time.Duration `env:"PACER_CALLBACK_TIMEOUT, default=10s" unit:"duration" help:"one callback POST"`
	// PACER_CALLBACK_MAX_BACKOFF: longest wait between two attempts of a callback batch its receiver did not acknowledge (the first wait is 1s, then doubling, with 20% jitter); default 5m.
	CallbackMaxBackoff time.Duration `env:"PACER_CALLBACK_MAX_BACKOFF, default=5m" unit:"duration" help:"longest wait between attempts of a batch"`
	// PACER_CALLBACK_DEDUPE_TTL: how long an outcome sent to its tenant is remembered in Redis, so that a copy read again (a replayed outcomes topic) is not sent again; default 168h.
	CallbackDedupeTTL time.Duration `env:"PACER_CALLBACK_DEDUPE_TTL, default=168h" unit:"duration" help:"how long an outcome sent is remembered"`
	// PACER_CALLBACK_MAX_PENDING: outcomes of one tenant held in memory while its receiver does not acknowledge them; past it, the outcomes topic partitions they came from pause; default 10000.
	CallbackMaxPending int `env:"PACER_CALLBACK_MAX_PENDING, default=10000" unit:"outcomes" help:"per tenant, before its partitions pause"`
}

// ingestShared are the settings of config that `pacer ingest` reads too
// (Kafka, Redis, logging, drain, Redis failure mode, idempotency TTL), as
// prefixes of their names; docs/configuration.md says what each means.
var ingestShared = []string{"PACER_KAFKA_BROKERS", "PACER_KAFKA_TLS", "PACER_KAFKA_SASL_", "PACER_REDIS_",
	"PACER_EXPECTED_REPLICAS", "PACER_IDEMPOTENCY_TTL", "PACER_DRAIN", "PACER_LOG_", "PACER_CALLBACK_TOPIC"}

// ingestSettingsHelp lists every variable `pacer ingest` reads, for
// `pacer ingest -h`: its own with unit, default and meaning, then the
// shared ones with unit and default.
func ingestSettingsHelp() string {
	return commandSettingsHelp(reflect.TypeOf(ingestConfig{}), ingestShared)
}

// commandSettingsHelp lists the variables of a command other than run: own's
// (its config struct) with unit, default and meaning, then those of
// `pacer run` whose names start with one of shared, with unit and default.
func commandSettingsHelp(own reflect.Type, shared []string) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nsettings (environment variables; docs/configuration.md gives each one's meaning):")
	fmt.Fprintln(tw, "  variable\tunit\tdefault\tmeaning")
	for _, r := range envRows(own, nil) {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", r.name, r.unit, r.def, r.help)
	}
	fmt.Fprintln(tw, "\nread as `pacer run` reads them:")
	for _, r := range envRows(reflect.TypeOf(config{}), func(name string) bool {
		for _, p := range shared {
			if strings.HasPrefix(name, p) {
				return true
			}
		}
		return false
	}) {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", r.name, r.unit, r.def)
	}
	fmt.Fprintln(tw, "  any secret setting may be given as <VARIABLE>_FILE, a file holding its value")
	tw.Flush()
	return b.String()
}

// loadIngestConfig reads ingestConfig through lookup: every problem
// found, joined, one per line, each naming its variable (as loadConfig
// does for `pacer run`).
func loadIngestConfig(lookup func(string) (string, bool)) (ingestConfig, []netip.Prefix, error) {
	var c ingestConfig
	errs := processEnv(&c, lookup)
	bad := func(v, p string) { errs = append(errs, &configError{v, p}) }
	if err := listenAddr(c.Addr, ":8080"); err != "" {
		bad("PACER_INGEST_ADDR", err)
	}
	if c.Tenants == "" {
		bad("PACER_INGEST_TENANTS", "required: the path of the tenants file")
	}
	limitErrs("PACER_INGEST_IP_", bucket.Limit{PerSecond: c.IPRate, Burst: c.IPBurst}, 100, bad)
	limitErrs("PACER_INGEST_CHANNEL_", bucket.Limit{PerSecond: c.ChannelRate, Burst: c.ChannelBurst}, 10000, bad)
	if c.ChannelBurst >= 1 && c.ChannelBurst < ingest.MaxBatch { // below 1: said above
		bad("PACER_INGEST_CHANNEL_BURST", fmt.Sprintf("must be >= %d (a full batch)", ingest.MaxBatch))
	}
	if c.ProduceTimeout <= 0 {
		bad("PACER_INGEST_PRODUCE_TIMEOUT", "must be > 0")
	}
	if c.Partitions < 1 {
		bad("PACER_INGEST_PARTITIONS", "must be >= 1")
	}
	checkCallbackConfig(c, bad)
	var proxies []netip.Prefix
	for _, s := range c.TrustedProxies {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				bad("PACER_INGEST_TRUSTED_PROXIES", fmt.Sprintf("%q is not a CIDR or an address", s))
				continue
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		proxies = append(proxies, p)
	}
	return c, proxies, errors.Join(errs...)
}

// limitErrs reports the problems of l, set by prefix+"RATE" and
// prefix+"BURST", each on the variable at fault: the burst is checked too
// when the rate is wrong (against defRate, a valid rate).
func limitErrs(prefix string, l bucket.Limit, defRate float64, bad func(v, p string)) {
	name := func(err error) {
		var fe *bucket.FieldError
		if errors.As(err, &fe) && fe.Field == "Burst" {
			bad(prefix+"BURST", fe.Err.Error())
		} else if errors.As(err, &fe) {
			bad(prefix+"RATE", fe.Err.Error())
		} else {
			bad(prefix+"RATE", err.Error())
		}
	}
	err := l.Validate()
	if err == nil {
		return
	}
	name(err)
	var fe *bucket.FieldError
	if errors.As(err, &fe) && fe.Field == "PerSecond" {
		if err := (bucket.Limit{PerSecond: defRate, Burst: l.Burst}).Validate(); err != nil {
			var be *bucket.FieldError
			if errors.As(err, &be) && be.Field == "Burst" {
				name(err)
			}
		}
	}
}

func cmdIngest(ctx context.Context, args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) error {
	var ic ingestConfig
	var proxies []netip.Prefix
	cfg, log, err := startService("ingest", ingestSettingsHelp, args, stderr, lookup, func() (err error) {
		ic, proxies, err = loadIngestConfig(lookup)
		return err
	})
	if err != nil {
		return err
	}
	var channels []string
	for _, row := range channelTable {
		channels = append(channels, row.name)
	}
	tf, err := ingest.LoadTenantFileChecked(ic.Tenants, channels, checkCallbackSecrets)
	if err != nil {
		return &configError{"PACER_INGEST_TENANTS", err.Error()}
	}
	go tf.Watch(ctx, time.Second, log)

	rdb, err := newRedis(cfg)
	if err != nil {
		return err
	}
	defer rdb.Close()
	redis.SetLogger(redisLogger{log})
	q := quota.New(rdb)
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = q.Load(lctx)
	cancel()
	if r := redisRefusal(err); r != "" {
		return fmt.Errorf("redis: %s: %w", r, err) // credentials or certificates: waiting cannot help
	} else if err != nil {
		attrs := []any{"err", err, "failure_mode", cfg.RedisFailure}
		if h := redisHint(cfg, err); h != "" {
			attrs = append(attrs, "hint", h)
		}
		log.Warn("redis not reachable at start-up", attrs...)
	}
	kopts, err := kafkaOpts(cfg)
	if err != nil {
		return err
	}
	kc, err := kgo.NewClient(append(kopts, kgo.ClientID("pacer-ingest"),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		// A broker that is slow but answering fails a produce request within
		// the timeout, and franz-go then fails its records; a broker that
		// does not answer at all leaves a request in flight that the
		// idempotent producer retries until the broker answers (the HTTP
		// answer does not wait for it, see ingest.Server).
		kgo.RecordDeliveryTimeout(ic.ProduceTimeout), kgo.ProduceRequestTimeout(ic.ProduceTimeout),
		kgo.ProducerLinger(0))...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer kc.Close()
	// TLS or SASL that does not match the listener, refused credentials or
	// certificates: stop here, naming the setting, rather than serve 503s.
	// Brokers down or slow: serve, not ready, until they answer.
	if refused, err := kafkaStartCheck(ctx, cfg, kc, 5*time.Second); refused != nil {
		return refused
	} else if err != nil {
		cause, _ := produce.KafkaCause(err)
		log.Warn("kafka not reachable at start-up", "err", err, "cause", cause)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ctl := control.New(rdb, bucket.NewKeys(cfg.RedisPrefix))
	srv, err := ingest.New(ingest.Config{
		Channels: channels, IPLimit: bucket.Limit{PerSecond: ic.IPRate, Burst: ic.IPBurst},
		ChannelLimit:   bucket.Limit{PerSecond: ic.ChannelRate, Burst: ic.ChannelBurst},
		TrustedProxies: proxies, IdempotencyTTL: cfg.IdempotencyTTL, ProduceTimeout: ic.ProduceTimeout,
		Partitions: ic.Partitions, RedisFailure: cfg.RedisFailure, Logger: log, TopicPrefix: ic.TopicPrefix,
	}, ingest.Deps{Kafka: kc, Quota: q, Fallback: quota.NewLocal(cfg.ExpectedReplicas), Keys: bucket.NewKeys(cfg.RedisPrefix),
		Tenants: tf.Tenants, Campaigns: ctl, Control: ctl,
		Messages:  message.NewStore(rdb, bucket.NewKeys(cfg.RedisPrefix), cfg.LedgerTTL),
		Metrics:   promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
		RedisPing: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }, KafkaPing: kc.Ping}, reg)
	if err != nil {
		return fmt.Errorf("%w: %w", errConfig, err)
	}
	ln, err := listenSetting("PACER_INGEST_ADDR", ic.Addr)
	if err != nil {
		return err
	}
	stopCallbacks, err := startCallbacks(ctx, cfg, ic, tf, rdb, kopts, log, reg)
	if err != nil {
		return err
	}
	defer stopCallbacks()
	// srv serves /metrics, /healthz and /readyz as well as the API.
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: time.Minute}
	log.Info("ingest listening", "addr", ln.Addr().String(), "tenants", tf.Tenants().Len())
	return serveUntilDone(ctx, hs, ln, make(chan error, 1), cfg.Drain)
}
