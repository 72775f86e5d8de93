package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/whatsapp"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/pacerhq/pacer/pacer/portfolio"
	"github.com/pacerhq/pacer/pacer/produce"
	"github.com/pacerhq/pacer/pacer/suppress"
	"github.com/pacerhq/pacer/pacer/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
)

// webhookConfig is what `pacer webhook` reads beyond config (Kafka, Redis,
// logging, PACER_DRAIN). docs/configuration.md has the same table.
type webhookConfig struct {
	// PACER_WEBHOOK_ADDR: listen address of the webhook routes, /metrics, /healthz, /readyz; default :8090; "127.0.0.1:0" picks a free port (logged).
	Addr string `env:"PACER_WEBHOOK_ADDR, default=:8090" unit:"host:port" help:"webhook routes, /metrics, /healthz, /readyz"`
	// PACER_WEBHOOK_WHATSAPP_APP_SECRET: the Meta app's secret, which signs its webhooks (X-Hub-Signature-256); without it there is no WhatsApp route; may be a file (_FILE); never logged.
	WhatsAppAppSecret string `env:"PACER_WEBHOOK_WHATSAPP_APP_SECRET" secret:"true" unit:"secret" help:"signs WhatsApp webhooks; none: no WhatsApp route"`
	// PACER_WEBHOOK_WHATSAPP_VERIFY_TOKEN: the token Meta's verification GET must present (hub.verify_token); required with the app secret; may be a file (_FILE); never logged.
	WhatsAppVerifyToken string `env:"PACER_WEBHOOK_WHATSAPP_VERIFY_TOKEN" secret:"true" unit:"secret" help:"hub.verify_token of Meta's handshake"`
	// PACER_WEBHOOK_SENDGRID_PUBLIC_KEY: the Event Webhook's verification key (base64 DER or PEM, ECDSA P-256); without it there is no SendGrid route; may be a file (_FILE).
	SendGridPublicKey string `env:"PACER_WEBHOOK_SENDGRID_PUBLIC_KEY" secret:"true" unit:"key" help:"verifies SendGrid webhooks; none: no SendGrid route"`
	// PACER_WEBHOOK_GENERIC_SECRET: the secret(s) signing the platform's own outcomes (Standard Webhooks, whsec_<base64>, several separated by white space while one is rotated); without it there is no generic route; may be a file (_FILE); never logged.
	GenericSecret string `env:"PACER_WEBHOOK_GENERIC_SECRET" secret:"true" unit:"secret" help:"signs POST /webhook/generic; none: no generic route"`
	// PACER_WEBHOOK_SENDGRID_MAX_AGE: oldest (or furthest ahead) signed SendGrid timestamp accepted; default 10m.
	SendGridMaxAge time.Duration `env:"PACER_WEBHOOK_SENDGRID_MAX_AGE, default=10m" unit:"duration" help:"older signed timestamps are refused"`
	// PACER_WEBHOOK_PRODUCE_TIMEOUT: longest wait for Kafka's acknowledgement of a webhook's events before answering 503; default 10s.
	ProduceTimeout time.Duration `env:"PACER_WEBHOOK_PRODUCE_TIMEOUT, default=10s" unit:"duration" help:"longest wait for Kafka's ack before 503"`
	// PACER_WEBHOOK_PARTITIONS: partitions of an events topic the command has to create; default 12.
	Partitions int `env:"PACER_WEBHOOK_PARTITIONS, default=12" unit:"partitions" help:"of an events topic it creates"`
	// PACER_WEBHOOK_APPLY: also consume the events topics and apply their outcomes (suppressions) in this process; default true.
	Apply bool `env:"PACER_WEBHOOK_APPLY, default=true" unit:"true|false" help:"consume the events topics and apply them here"`
	// PACER_WEBHOOK_GROUP: consumer group of the outcome consumer; default pacer-webhook-outcomes.
	Group string `env:"PACER_WEBHOOK_GROUP, default=pacer-webhook-outcomes" unit:"text" help:"consumer group applying the events"`
	// PACER_WEBHOOK_QUALITY_PAUSE: a WhatsApp quality downgrade (phone_number_quality_update FLAGGED or DOWNGRADE) pauses the marketing of its account's portfolio until `pacer portfolio resume` or an upgrade event; default false (recorded only).
	QualityPause bool `env:"PACER_WEBHOOK_QUALITY_PAUSE, default=false" unit:"true|false" help:"a quality downgrade pauses its portfolio's marketing"`
	// PACER_WEBHOOK_THROTTLES: a throttle a WhatsApp status webhook reports (a failed status with 130429, 131048, 613: the key's AIMD and cooldown; 131056: the pair's cooldown) is applied to the shared state every `pacer run` reads; the channel's rate and AIMD settings (PACER_WHATSAPP_RATE, PACER_WHATSAPP_BURST, PACER_WHATSAPP_PAIR_RATE, PACER_AIMD_*, PACER_THROTTLE_COOLDOWN, PACER_MAX_COOLDOWN) must then be those of `pacer run`; default false.
	Throttles bool `env:"PACER_WEBHOOK_THROTTLES, default=false" unit:"true|false" help:"apply throttles reported by status webhooks to the keys' AIMD and cooldowns"`
}

// webhookShared are the settings of config that `pacer webhook` reads too.
var webhookShared = []string{"PACER_KAFKA_BROKERS", "PACER_KAFKA_TLS", "PACER_KAFKA_SASL_", "PACER_REDIS_", "PACER_DRAIN", "PACER_LOG_",
	"PACER_AIMD_", "PACER_THROTTLE_COOLDOWN", "PACER_MAX_COOLDOWN"}

// loadWebhookConfig reads webhookConfig through lookup (secrets' _FILE
// forms included): every problem found, joined, each naming its variable.
func loadWebhookConfig(lookup func(string) (string, bool)) (webhookConfig, *ecdsa.PublicKey, [][]byte, error) {
	lookup, fileErrs := secretFiles(lookup)
	var c webhookConfig
	errs := processEnv(&c, lookup)
	bad := func(v, p string) { errs = append(errs, &configError{v, p}) }
	if err := listenAddr(c.Addr, ":8090"); err != "" {
		bad("PACER_WEBHOOK_ADDR", err)
	}
	if dir, _ := lookup("PACER_CREDENTIALS_DIR"); c.WhatsAppAppSecret == "" && c.SendGridPublicKey == "" && c.GenericSecret == "" && dir == "" {
		bad("PACER_WEBHOOK_WHATSAPP_APP_SECRET", "set it, PACER_WEBHOOK_SENDGRID_PUBLIC_KEY, PACER_WEBHOOK_GENERIC_SECRET, or PACER_CREDENTIALS_DIR (secrets per sender): without any no webhook is heard")
	}
	var generic [][]byte
	if c.GenericSecret != "" {
		var err error
		if generic, err = webhook.ParseGenericSecrets(c.GenericSecret); err != nil {
			bad("PACER_WEBHOOK_GENERIC_SECRET", err.Error())
		}
	}
	if c.WhatsAppAppSecret != "" && c.WhatsAppVerifyToken == "" {
		bad("PACER_WEBHOOK_WHATSAPP_VERIFY_TOKEN", "required with PACER_WEBHOOK_WHATSAPP_APP_SECRET: Meta's verification GET presents it")
	}
	var key *ecdsa.PublicKey
	if c.SendGridPublicKey != "" {
		var err error
		if key, err = webhook.ParseSendGridKey(c.SendGridPublicKey); err != nil {
			bad("PACER_WEBHOOK_SENDGRID_PUBLIC_KEY", err.Error())
		}
	}
	if c.SendGridMaxAge <= 0 {
		bad("PACER_WEBHOOK_SENDGRID_MAX_AGE", "must be > 0")
	}
	if c.ProduceTimeout <= 0 {
		bad("PACER_WEBHOOK_PRODUCE_TIMEOUT", "must be > 0")
	}
	if c.Partitions < 1 {
		bad("PACER_WEBHOOK_PARTITIONS", "must be >= 1")
	}
	if c.Apply && c.Group == "" {
		bad("PACER_WEBHOOK_GROUP", "must not be empty")
	}
	if c.QualityPause && !c.Apply {
		bad("PACER_WEBHOOK_QUALITY_PAUSE", "needs PACER_WEBHOOK_APPLY=true: only the process applying the events pauses a portfolio")
	}
	if c.Throttles && !c.Apply {
		bad("PACER_WEBHOOK_THROTTLES", "needs PACER_WEBHOOK_APPLY=true: only the process applying the events applies their throttles")
	}
	return c, key, generic, errors.Join(append(fileErrs(), errs...)...)
}

func webhookSettingsHelp() string {
	return commandSettingsHelp(reflect.TypeOf(webhookConfig{}), webhookShared)
}

// cmdWebhook serves the providers' status webhooks (package webhook) and,
// with PACER_WEBHOOK_APPLY, applies their events in a consumer group of
// its own: see docs/webhooks.md and docs/decisions/0028.
func cmdWebhook(ctx context.Context, args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) error {
	var wc webhookConfig
	var sgKey *ecdsa.PublicKey
	var genericKeys [][]byte
	cfg, log, err := startService("webhook", webhookSettingsHelp, args, stderr, lookup, func() (err error) {
		wc, sgKey, genericKeys, err = loadWebhookConfig(lookup)
		return err
	})
	if err != nil {
		return err
	}
	var secrets webhook.Secrets
	if dir, _ := lookup("PACER_CREDENTIALS_DIR"); dir != "" {
		secrets = dirSecrets{dir: dir, log: log}
	}
	var channels []string
	if wc.WhatsAppAppSecret != "" || secrets != nil {
		channels = append(channels, "whatsapp")
	}
	if sgKey != nil || secrets != nil {
		channels = append(channels, "sendgrid")
	}
	eventChannels := channels
	if genericKeys != nil {
		channels = append(channels, "generic")
		eventChannels = webhook.GenericChannels // the platform's outcomes name any of them
	}
	kopts, err := kafkaOpts(cfg)
	if err != nil {
		return err
	}
	kc, err := kgo.NewClient(append(kopts, kgo.ClientID("pacer-webhook"), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(wc.ProduceTimeout), kgo.ProduceRequestTimeout(wc.ProduceTimeout), kgo.ProducerLinger(0))...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer kc.Close()
	var topics []string
	for _, ch := range eventChannels {
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := produce.EnsureTopic(tctx, kc, webhook.Topic(ch), wc.Partitions)
		cancel()
		if err != nil {
			return kafkaCommandFailure(cfg, err) // names the setting a refusal comes from
		}
		topics = append(topics, webhook.Topic(ch))
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv := webhook.New(webhook.Config{WhatsAppAppSecret: []byte(wc.WhatsAppAppSecret), WhatsAppVerifyToken: wc.WhatsAppVerifyToken,
		SendGridKey: sgKey, Secrets: secrets, GenericSecrets: genericKeys, SendGridMaxAge: wc.SendGridMaxAge, ProduceTimeout: wc.ProduceTimeout, Logger: log}, kc, reg)

	// Listen first: an address in use stops start-up before the outcome
	// consumer joins its group (and logs its fetches failing as it leaves).
	ln, err := listenSetting("PACER_WEBHOOK_ADDR", wc.Addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	errc := make(chan error, 2)
	if wc.Apply {
		rdb, err := newRedis(cfg)
		if err != nil {
			return err
		}
		defer rdb.Close()
		redis.SetLogger(redisLogger{log})
		cc, err := kgo.NewClient(append(kopts, kgo.ClientID("pacer-webhook-outcomes"), kgo.ConsumerGroup(wc.Group),
			kgo.ConsumeTopics(topics...), kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
		if err != nil {
			return fmt.Errorf("kafka client: %w", err)
		}
		defer cc.Close()
		keys := bucket.NewKeys(cfg.RedisPrefix)
		out := webhook.NewOutcomes(suppress.NewStore(rdb, keys), log, reg).WithPortfolios(portfolio.NewStore(rdb, keys).WithWindow(cfg.guardWindow())).
			WithLimits(control.New(rdb, keys)).WithQualityPause(wc.QualityPause).WithCounts(control.New(rdb, keys)).
			WithLedger(ledger.New(rdb, keys, cfg.LedgerTTL), cfg.LedgerTTL)
		if wc.Throttles {
			out = out.WithThrottles(webhookThrottles(cfg, rdb, keys))
		}
		go func() { errc <- out.Run(ctx, cc) }()
	}

	mux := http.NewServeMux()
	ops := opsHandler(reg, func() bool {
		c, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return kc.Ping(c) == nil
	})
	mux.Handle("/metrics", ops)
	mux.Handle("/healthz", ops)
	mux.Handle("/readyz", ops)
	mux.Handle("/webhook/", srv)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: time.Minute}
	log.Info("webhook listening", "addr", ln.Addr().String(), "channels", channels, "apply", wc.Apply)
	return serveUntilDone(ctx, hs, ln, errc, cfg.Drain)
}

// dirSecrets reads the webhook secrets of one sender from the credentials
// directory: webhook-whatsapp.<phone-number ID> holds a Meta app secret,
// webhook-sendgrid.<pacing key> a SendGrid verification key (base64 DER
// or PEM). Files are read at each request (a few hundred bytes), so a
// Secret mount's update is seen at once. A file that cannot be read or
// parsed counts as absent and is logged, without its content.
type dirSecrets struct {
	dir string
	log *slog.Logger
}

func (d dirSecrets) read(name string) ([]byte, bool) {
	if strings.ContainsAny(name, "/\\") {
		return nil, false
	}
	b, err := os.ReadFile(filepath.Join(d.dir, name))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			d.log.Warn("webhook secret not readable", "file", name, "err", pathError(err))
		}
		return nil, false
	}
	b = bytes.TrimRight(b, "\r\n")
	return b, len(b) > 0
}

func (d dirSecrets) WhatsAppAppSecret(id string) ([]byte, bool) {
	return d.read(credentialFileName("webhook-whatsapp", id))
}

func (d dirSecrets) SendGridKey(key string) (*ecdsa.PublicKey, bool) {
	b, ok := d.read(credentialFileName("webhook-sendgrid", key))
	if !ok {
		return nil, false
	}
	k, err := webhook.ParseSendGridKey(string(b))
	if err != nil {
		d.log.Warn("webhook verification key not usable", "file", credentialFileName("webhook-sendgrid", key), "err", err)
		return nil, false
	}
	return k, true
}

// webhookThrottles is what `pacer webhook` applies the throttles of
// WhatsApp status webhooks with (webhook.Outcomes.WithThrottles): the
// pacers' adaptive state, the key policy `pacer run` of the channel reads
// (its configuration, PACER_WHATSAPP_* and PACER_AIMD_*, under the limits
// set at run time), and the Cloud API's throttle codes
// (whatsapp.ThrottleOf).
func webhookThrottles(cfg config, rdb redis.UniversalClient, keys bucket.Keys) webhook.Throttles {
	ch, err := channelNamed("whatsapp")
	if err != nil {
		panic(err) // channelTable lists whatsapp
	}
	pc := cfg.pacerConfig(ch)
	base := control.KeyPolicy{Limit: pc.Limit, RecipientLimit: pc.RecipientLimit, AIMD: pc.AIMD, Breaker: pc.Breaker}
	return webhook.Throttles{
		Adapter: adapt.New(rdb, bucket.Config{Prefix: cfg.RedisPrefix}),
		Policy:  map[string]control.Policy{ch.name: control.OverridePolicy{Base: base, Channel: ch.name, Store: control.New(rdb, keys)}},
		Throttle: func(channel string, code int) (channels.Scope, time.Duration, bool) {
			if channel != ch.name {
				return 0, 0, false
			}
			return whatsapp.ThrottleOf(code)
		},
	}
}
