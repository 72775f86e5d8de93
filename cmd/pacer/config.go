package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"reflect"
	"strings"
	"time"

	"github.com/sethvargo/go-envconfig"
)

// config is everything `pacer run` reads from the environment. Each field
// names its variable, unit and default; README.md has the same table.
type config struct {
	// PACER_KAFKA_BROKERS: comma-separated host:port seed brokers; default 127.0.0.1:9092.
	KafkaBrokers []string `env:"PACER_KAFKA_BROKERS, default=127.0.0.1:9092"`
	// PACER_KAFKA_SESSION_TIMEOUT: consumer-group session timeout: how soon a dead replica's partitions move to others; default 45s (the broker allows 6s..30m by default).
	KafkaSessionTimeout time.Duration `env:"PACER_KAFKA_SESSION_TIMEOUT, default=45s"`
	// PACER_REDIS_URL: redis:// or rediss:// URL of the bucket store; default redis://127.0.0.1:6379/0.
	RedisURL string `env:"PACER_REDIS_URL, default=redis://127.0.0.1:6379/0"`
	// PACER_REDIS_CLUSTER_ADDRS: comma-separated host:port seeds of a Redis Cluster; set, it replaces PACER_REDIS_URL.
	RedisClusterAddrs string `env:"PACER_REDIS_CLUSTER_ADDRS"`
	// PACER_REDIS_SENTINEL_ADDRS: comma-separated host:port of Redis Sentinels; set, it replaces PACER_REDIS_URL.
	RedisSentinelAddrs string `env:"PACER_REDIS_SENTINEL_ADDRS"`
	// PACER_REDIS_SENTINEL_MASTER: the master name the Sentinels watch; required with PACER_REDIS_SENTINEL_ADDRS.
	RedisSentinelMaster string `env:"PACER_REDIS_SENTINEL_MASTER"`
	// PACER_REDIS_PASSWORD: password for the cluster or Sentinel-managed servers; never logged.
	RedisPassword string `env:"PACER_REDIS_PASSWORD"`
	// PACER_REDIS_PREFIX: prefix of every Redis key Pacer writes; default "pacer".
	RedisPrefix string `env:"PACER_REDIS_PREFIX, default=pacer"`
	// PACER_METRICS_ADDR: listen address of /metrics, /healthz, /readyz; default :9464; "127.0.0.1:0" picks a free port.
	MetricsAddr string `env:"PACER_METRICS_ADDR, default=:9464"`
	// PACER_LOG_LEVEL: debug, info, warn or error; default info.
	LogLevel string `env:"PACER_LOG_LEVEL, default=info"`
	// PACER_LOG_FORMAT: json or text; default json.
	LogFormat string `env:"PACER_LOG_FORMAT, default=json"`
	// PACER_DRAIN: duration in-flight sends may finish after SIGTERM or a revoke; default 30s.
	Drain time.Duration `env:"PACER_DRAIN, default=30s"`
	// PACER_MAX_ATTEMPTS: requests per message before transient failures dead-letter it; default 5.
	MaxAttempts int `env:"PACER_MAX_ATTEMPTS, default=5"`
	// PACER_THROTTLE_COOLDOWN: shortest key cooldown after a throttle (used when the provider names no Retry-After); default 1s.
	ThrottleCooldown time.Duration `env:"PACER_THROTTLE_COOLDOWN, default=1s"`
	// PACER_MAX_COOLDOWN: longest key cooldown a provider hint can ask for; default 1h.
	MaxCooldown time.Duration `env:"PACER_MAX_COOLDOWN, default=1h"`
	// PACER_AIMD_DECREASE: factor applied to a key's rate on a throttle, in (0,1); default 0.5.
	AIMDDecrease float64 `env:"PACER_AIMD_DECREASE, default=0.5"`
	// PACER_AIMD_FLOOR: lowest adapted rate in msgs/s per key; default 1.
	AIMDFloor float64 `env:"PACER_AIMD_FLOOR, default=1"`
	// PACER_AIMD_WINDOW: throttle-free time before the rate is raised; default 60s.
	AIMDWindow time.Duration `env:"PACER_AIMD_WINDOW, default=60s"`
	// PACER_AIMD_STEP: additive increase in msgs/s per clean window; default 0 = a tenth of the channel's rate.
	AIMDStep float64 `env:"PACER_AIMD_STEP, default=0"`
	// PACER_BREAKER_FLOOR_THROTTLES: throttles in a row at the floor that open a key's breaker; default 5.
	BreakerFloorThrottles int `env:"PACER_BREAKER_FLOOR_THROTTLES, default=5"`
	// PACER_BREAKER_MAX_OPEN: longest open period of a breaker (it doubles from PACER_HALT_COOLDOWN); default 10m.
	BreakerMaxOpen time.Duration `env:"PACER_BREAKER_MAX_OPEN, default=10m"`
	// PACER_HALT_COOLDOWN: first open period of a key's breaker after a credential or account error; default 30s.
	HaltCooldown time.Duration `env:"PACER_HALT_COOLDOWN, default=30s"`

	// PACER_MAX_TOKEN_WAIT: longest wait for a token or a cooldown in place; a longer one requeues the record (not an attempt); default 5s.
	MaxTokenWait time.Duration `env:"PACER_MAX_TOKEN_WAIT, default=5s"`
	// PACER_RETRY_DELAYS: comma-separated back-off of the retry topics <topic>.retry.1, .2, ...; default 5s,30s,5m.
	RetryDelays []time.Duration `env:"PACER_RETRY_DELAYS, default=5s,30s,5m"`
	// PACER_UNKNOWN_OUTCOME: what to do when a send got no answer or a dead process left a claim: dlq or resend; default dlq.
	UnknownOutcome string `env:"PACER_UNKNOWN_OUTCOME, default=dlq"`
	// PACER_REDIS_FAILURE: when Redis is unreachable: closed (stop sending, keep every record) or local (pace in-process at rate / PACER_EXPECTED_REPLICAS); default closed.
	RedisFailure string `env:"PACER_REDIS_FAILURE, default=closed"`
	// PACER_EXPECTED_REPLICAS: replicas sharing each channel, for the local failure mode's share of the rate; default 1.
	ExpectedReplicas int `env:"PACER_EXPECTED_REPLICAS, default=1"`
	// PACER_SEND_TIMEOUT: longest wait for one provider answer; no answer in time is an unknown outcome; default 30s.
	SendTimeout time.Duration `env:"PACER_SEND_TIMEOUT, default=30s"`
	// PACER_INFLIGHT: records of one pacing key handled at once in a partition (1 keeps each key's strict order); default 32.
	InFlight int `env:"PACER_INFLIGHT, default=32"`
	// PACER_LOOKAHEAD: how much of its pace a key keeps in memory per partition (rate x lookahead records, at least PACER_INFLIGHT); the rest is parked on the retry topics; default 5s.
	Lookahead time.Duration `env:"PACER_LOOKAHEAD, default=5s"`
	// PACER_LEASE_SIZE: send slots taken from Redis per call for one key; default 0 = automatic (a tenth of a second of slots once that is >= 10, else 1).
	LeaseSize int `env:"PACER_LEASE_SIZE, default=0"`
	// PACER_IDEMPOTENCY_TTL: how long delivered envelope ids are remembered; default 24h.
	IdempotencyTTL time.Duration `env:"PACER_IDEMPOTENCY_TTL, default=24h"`

	WhatsApp whatsappConfig
	SendGrid sendgridConfig
	APNs     apnsConfig
	FCM      fcmConfig
}

type apnsConfig struct {
	// PACER_APNS_BASE_URL: APNs base URL; default https://api.push.apple.com (sandbox: https://api.sandbox.push.apple.com).
	BaseURL string `env:"PACER_APNS_BASE_URL, default=https://api.push.apple.com"`
	// PACER_APNS_KEY_ID: the 10-character key ID of the .p8 signing key; required by `run --channel apns`.
	KeyID string `env:"PACER_APNS_KEY_ID"`
	// PACER_APNS_TEAM_ID: the 10-character Apple team ID; required by `run --channel apns`.
	TeamID string `env:"PACER_APNS_TEAM_ID"`
	// PACER_APNS_KEY_FILE: path of the .p8 token-signing key (PKCS#8 EC P-256); required by `run --channel apns`; never logged.
	KeyFile string `env:"PACER_APNS_KEY_FILE"`
	// PACER_APNS_RATE: notifications per second per app (bundle ID); default 1000 (Apple publishes no number).
	Rate float64 `env:"PACER_APNS_RATE, default=1000"`
	// PACER_APNS_BURST: bucket capacity in notifications per app; default 1000.
	Burst int `env:"PACER_APNS_BURST, default=1000"`
}

type fcmConfig struct {
	// PACER_FCM_BASE_URL: FCM HTTP v1 base URL; default https://fcm.googleapis.com.
	BaseURL string `env:"PACER_FCM_BASE_URL, default=https://fcm.googleapis.com"`
	// PACER_FCM_CREDENTIALS_FILE: path of the service-account JSON; required by `run --channel fcm`; never logged.
	CredentialsFile string `env:"PACER_FCM_CREDENTIALS_FILE"`
	// PACER_FCM_RATE: messages per second per Firebase project; default 10000 (600,000/min).
	Rate float64 `env:"PACER_FCM_RATE, default=10000"`
	// PACER_FCM_BURST: bucket capacity in messages per project; default 10000.
	Burst int `env:"PACER_FCM_BURST, default=10000"`
	// PACER_FCM_DEVICE_RATE: messages per second per device (FCM: 240/min and 5,000/h); default 1.3333 (80/min, within both); 0 = no device bucket.
	DeviceRate float64 `env:"PACER_FCM_DEVICE_RATE, default=1.3333"`
	// PACER_FCM_DEVICE_BURST: device bucket capacity; default 160.
	DeviceBurst int `env:"PACER_FCM_DEVICE_BURST, default=160"`
}

type sendgridConfig struct {
	// PACER_SENDGRID_BASE_URL: v3 API base URL; default https://api.sendgrid.com (EU subusers: https://api.eu.sendgrid.com).
	BaseURL string `env:"PACER_SENDGRID_BASE_URL, default=https://api.sendgrid.com"`
	// PACER_SENDGRID_API_KEYS: name=key pairs, comma-separated; the envelope key names the API key (the pacing key); never logged.
	APIKeys string `env:"PACER_SENDGRID_API_KEYS"`
	// PACER_SENDGRID_ON_BEHALF_OF: name=subuser pairs for the On-Behalf-Of header; default none.
	OnBehalfOf string `env:"PACER_SENDGRID_ON_BEHALF_OF"`
	// PACER_SENDGRID_RATE: mails per second per API key; default 100 (SendGrid publishes no mail/send rate).
	Rate float64 `env:"PACER_SENDGRID_RATE, default=100"`
	// PACER_SENDGRID_BURST: bucket capacity in mails per API key; default 100.
	Burst int `env:"PACER_SENDGRID_BURST, default=100"`
}

type whatsappConfig struct {
	// PACER_WHATSAPP_BASE_URL: Graph API base URL; default https://graph.facebook.com.
	BaseURL string `env:"PACER_WHATSAPP_BASE_URL, default=https://graph.facebook.com"`
	// PACER_WHATSAPP_API_VERSION: Graph API version path segment; default v21.0.
	APIVersion string `env:"PACER_WHATSAPP_API_VERSION, default=v21.0"`
	// PACER_WHATSAPP_TOKEN: system-user access token; required by `run --channel whatsapp`; never logged.
	Token string `env:"PACER_WHATSAPP_TOKEN"`
	// PACER_WHATSAPP_RATE: messages per second per phone-number ID; default 80.
	Rate float64 `env:"PACER_WHATSAPP_RATE, default=80"`
	// PACER_WHATSAPP_BURST: bucket capacity in messages per phone-number ID; default 10.
	Burst int `env:"PACER_WHATSAPP_BURST, default=10"`
	// PACER_WHATSAPP_PAIR_RATE: msgs/s per number->recipient pair (Meta: about 1 per 6 s, error 131056); default 0 = no pair bucket.
	PairRate float64 `env:"PACER_WHATSAPP_PAIR_RATE, default=0"`
	// PACER_WHATSAPP_PAIR_BURST: pair bucket capacity (Meta: up to 45 in a burst); default 45.
	PairBurst int `env:"PACER_WHATSAPP_PAIR_BURST, default=45"`
}

// configError names the variable that is wrong.
type configError struct {
	Var     string
	Problem string
}

func (e *configError) Error() string { return e.Var + ": " + e.Problem }

// loadConfig reads the configuration through lookup (os.LookupEnv in main,
// a map in tests) and validates it. Errors name the variable.
func loadConfig(lookup func(string) (string, bool)) (config, error) {
	var c config
	err := envconfig.ProcessWith(context.Background(), &envconfig.Config{
		Target:   &c,
		Lookuper: envconfig.LookuperFunc(lookup),
	})
	if err != nil {
		return c, nameVariable(err)
	}
	return c, c.validate()
}

// nameVariable rewrites an envconfig error, which names the Go field path
// ("WhatsApp: Rate: ..."), so that it names the environment variable.
func nameVariable(err error) error {
	msg := err.Error()
	best, bestVar := "", ""
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		for i := range t.NumField() {
			f := t.Field(i)
			p := path + f.Name
			if tag, ok := f.Tag.Lookup("env"); ok {
				if strings.HasPrefix(msg, p+": ") && len(p) > len(best) {
					best, bestVar = p, strings.TrimSpace(strings.Split(tag, ",")[0])
				}
			} else if f.Type.Kind() == reflect.Struct {
				walk(f.Type, p+": ")
			}
		}
	}
	walk(reflect.TypeOf(config{}), "")
	if bestVar == "" {
		return fmt.Errorf("configuration: %w", err)
	}
	return &configError{bestVar, strings.TrimPrefix(msg, best+": ")}
}

func (c config) validate() error {
	var errs []error
	bad := func(v, p string) { errs = append(errs, &configError{v, p}) }
	if len(c.KafkaBrokers) == 0 {
		bad("PACER_KAFKA_BROKERS", "at least one host:port is required")
	}
	for _, b := range c.KafkaBrokers {
		if !strings.Contains(b, ":") {
			bad("PACER_KAFKA_BROKERS", fmt.Sprintf("%q is not host:port", b))
		}
	}
	for _, v := range []struct{ name, val string }{
		{"PACER_REDIS_CLUSTER_ADDRS", c.RedisClusterAddrs}, {"PACER_REDIS_SENTINEL_ADDRS", c.RedisSentinelAddrs},
	} {
		for _, a := range splitList(v.val) {
			if !strings.Contains(a, ":") {
				bad(v.name, fmt.Sprintf("%q is not host:port", a))
			}
		}
	}
	if c.RedisSentinelMaster != "" && c.RedisSentinelAddrs == "" {
		bad("PACER_REDIS_SENTINEL_MASTER", "set only with PACER_REDIS_SENTINEL_ADDRS")
	}
	if c.AIMDFloor > 0 && c.AIMDFloor > max(c.WhatsApp.Rate, c.APNs.Rate, c.FCM.Rate, c.SendGrid.Rate) {
		bad("PACER_AIMD_FLOOR", "is above every channel's rate")
	}
	if c.RedisClusterAddrs != "" && c.RedisSentinelAddrs != "" {
		bad("PACER_REDIS_SENTINEL_ADDRS", "set either PACER_REDIS_CLUSTER_ADDRS or PACER_REDIS_SENTINEL_ADDRS, not both")
	}
	if c.KafkaSessionTimeout < time.Second {
		bad("PACER_KAFKA_SESSION_TIMEOUT", "must be >= 1s")
	}
	if u, err := url.Parse(c.RedisURL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix") {
		bad("PACER_REDIS_URL", "must be a redis://, rediss:// or unix:// URL")
	}
	if c.RedisPrefix == "" || strings.ContainsAny(c.RedisPrefix, "{} ") {
		bad("PACER_REDIS_PREFIX", "must be non-empty without braces or spaces")
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		bad("PACER_LOG_LEVEL", err.Error())
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		bad("PACER_LOG_FORMAT", fmt.Sprintf("%q is not json or text", c.LogFormat))
	}
	if c.Drain <= 0 {
		bad("PACER_DRAIN", "must be > 0")
	}
	if c.MaxAttempts < 1 {
		bad("PACER_MAX_ATTEMPTS", "must be >= 1")
	}
	if c.ThrottleCooldown <= 0 {
		bad("PACER_THROTTLE_COOLDOWN", "must be > 0")
	}
	if c.MaxCooldown < c.ThrottleCooldown {
		bad("PACER_MAX_COOLDOWN", "must be >= PACER_THROTTLE_COOLDOWN")
	}
	if !(c.AIMDDecrease > 0 && c.AIMDDecrease < 1) {
		bad("PACER_AIMD_DECREASE", "must be in (0, 1)")
	}
	if !(c.AIMDFloor > 0) || c.AIMDFloor > 1e9 {
		bad("PACER_AIMD_FLOOR", "must be > 0 messages per second")
	}
	if c.AIMDWindow <= 0 {
		bad("PACER_AIMD_WINDOW", "must be > 0")
	}
	if !(c.AIMDStep >= 0) || c.AIMDStep > 1e9 {
		bad("PACER_AIMD_STEP", "must be >= 0 (0 = a tenth of the rate)")
	}
	if c.BreakerFloorThrottles < 1 {
		bad("PACER_BREAKER_FLOOR_THROTTLES", "must be >= 1")
	}
	if c.BreakerMaxOpen < c.HaltCooldown {
		bad("PACER_BREAKER_MAX_OPEN", "must be >= PACER_HALT_COOLDOWN")
	}
	if c.HaltCooldown <= 0 {
		bad("PACER_HALT_COOLDOWN", "must be > 0")
	}
	if c.MaxTokenWait <= 0 {
		bad("PACER_MAX_TOKEN_WAIT", "must be > 0")
	}
	if len(c.RetryDelays) == 0 {
		bad("PACER_RETRY_DELAYS", "at least one delay is required")
	}
	for i, d := range c.RetryDelays {
		if d <= 0 {
			bad("PACER_RETRY_DELAYS", fmt.Sprintf("entry %d is empty, zero or negative; each delay must be > 0", i+1))
			break
		}
	}
	if c.UnknownOutcome != "dlq" && c.UnknownOutcome != "resend" {
		bad("PACER_UNKNOWN_OUTCOME", fmt.Sprintf("%q is not dlq or resend", c.UnknownOutcome))
	}
	if c.RedisFailure != "closed" && c.RedisFailure != "local" {
		bad("PACER_REDIS_FAILURE", fmt.Sprintf("%q is not closed or local", c.RedisFailure))
	}
	if c.ExpectedReplicas < 1 {
		bad("PACER_EXPECTED_REPLICAS", "must be >= 1")
	}
	if c.SendTimeout <= 0 {
		bad("PACER_SEND_TIMEOUT", "must be > 0")
	}
	if c.InFlight < 1 || c.InFlight > 1024 {
		bad("PACER_INFLIGHT", "must be in 1..1024")
	}
	if c.Lookahead <= 0 {
		bad("PACER_LOOKAHEAD", "must be > 0")
	}
	if c.LeaseSize < 0 || c.LeaseSize > 256 {
		bad("PACER_LEASE_SIZE", "must be in 0..256 (0 = automatic)")
	}
	if c.IdempotencyTTL <= 0 {
		bad("PACER_IDEMPOTENCY_TTL", "must be > 0")
	}
	if c.WhatsApp.APIVersion == "" || strings.Contains(c.WhatsApp.APIVersion, "/") {
		bad("PACER_WHATSAPP_API_VERSION", "must be a version such as v21.0")
	}
	for _, u := range []struct{ name, val string }{
		{"PACER_WHATSAPP_BASE_URL", c.WhatsApp.BaseURL}, {"PACER_APNS_BASE_URL", c.APNs.BaseURL},
		{"PACER_FCM_BASE_URL", c.FCM.BaseURL}, {"PACER_SENDGRID_BASE_URL", c.SendGrid.BaseURL},
	} {
		if pu, err := url.Parse(u.val); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			bad(u.name, "must be an http(s) URL")
		}
	}
	// Each channel's limit, and each optional per-recipient limit (rate 0 = off).
	for _, r := range []struct {
		name     string
		rate     float64
		bname    string
		burst    int
		optional bool
	}{
		{"PACER_WHATSAPP_RATE", c.WhatsApp.Rate, "PACER_WHATSAPP_BURST", c.WhatsApp.Burst, false},
		{"PACER_APNS_RATE", c.APNs.Rate, "PACER_APNS_BURST", c.APNs.Burst, false},
		{"PACER_FCM_RATE", c.FCM.Rate, "PACER_FCM_BURST", c.FCM.Burst, false},
		{"PACER_SENDGRID_RATE", c.SendGrid.Rate, "PACER_SENDGRID_BURST", c.SendGrid.Burst, false},
		{"PACER_WHATSAPP_PAIR_RATE", c.WhatsApp.PairRate, "PACER_WHATSAPP_PAIR_BURST", c.WhatsApp.PairBurst, true},
		{"PACER_FCM_DEVICE_RATE", c.FCM.DeviceRate, "PACER_FCM_DEVICE_BURST", c.FCM.DeviceBurst, true},
	} {
		switch {
		case r.optional && !(r.rate >= 0 && r.rate <= 1e9):
			bad(r.name, "must be >= 0 (0 = off) and <= 1e9 messages per second")
		case !r.optional && !(r.rate > 0 && r.rate <= 1e9):
			bad(r.name, "must be > 0 and <= 1e9 messages per second")
		}
		if r.burst < 1 {
			bad(r.bname, "must be >= 1 message")
		}
	}
	return errors.Join(errs...)
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(s))
	if err != nil {
		return l, fmt.Errorf("%q is not debug, info, warn or error", s)
	}
	return l, nil
}
