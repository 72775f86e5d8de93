package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/pacer/consumer"
	"github.com/pacerhq/pacer/pacer/portfolio"
	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-envconfig"
)

// config is everything `pacer run` reads from the environment. Each field
// names its variable, unit and default; each channel's own variables are in
// its row of [channelTable]; docs/configuration.md has the same table. The rules a
// consumer.Config field must follow live in packages consumer and bucket
// ([consumer.Config.Validate]); a field that sets one carries a pacer tag.
type config struct {
	// PACER_KAFKA_BROKERS: comma-separated host:port seed brokers; default 127.0.0.1:9092.
	KafkaBrokers []string `env:"PACER_KAFKA_BROKERS, default=127.0.0.1:9092" unit:"host:port,..."`
	// PACER_KAFKA_SESSION_TIMEOUT: consumer-group session timeout: how soon a dead replica's partitions move to others; default 45s (the broker allows 6s..30m by default).
	KafkaSessionTimeout time.Duration `env:"PACER_KAFKA_SESSION_TIMEOUT, default=45s"`
	// PACER_KAFKA_TLS: true reaches the brokers over TLS (their SSL or SASL_SSL listener); default false.
	KafkaTLS bool `env:"PACER_KAFKA_TLS, default=false"`
	// PACER_KAFKA_TLS_CA_FILE: PEM file of the CA certificates the brokers' certificates are checked against; default the system's.
	KafkaTLSCAFile string `env:"PACER_KAFKA_TLS_CA_FILE"`
	// PACER_KAFKA_TLS_CERT_FILE: PEM client certificate, for brokers that require one (mTLS); with PACER_KAFKA_TLS_KEY_FILE.
	KafkaTLSCertFile string `env:"PACER_KAFKA_TLS_CERT_FILE"`
	// PACER_KAFKA_TLS_KEY_FILE: PEM private key of PACER_KAFKA_TLS_CERT_FILE.
	KafkaTLSKeyFile string `env:"PACER_KAFKA_TLS_KEY_FILE"`
	// PACER_KAFKA_TLS_SERVER_NAME: the name the brokers' certificates must carry; default each broker's host.
	KafkaTLSServerName string `env:"PACER_KAFKA_TLS_SERVER_NAME" unit:"host name"`
	// PACER_KAFKA_SASL_MECHANISM: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; default none (no SASL).
	KafkaSASLMechanism string `env:"PACER_KAFKA_SASL_MECHANISM" unit:"PLAIN|SCRAM-SHA-256|SCRAM-SHA-512"`
	// PACER_KAFKA_SASL_USERNAME: the SASL user; required with a mechanism.
	KafkaSASLUsername string `env:"PACER_KAFKA_SASL_USERNAME" unit:"name"`
	// PACER_KAFKA_SASL_PASSWORD: the SASL password; required with a mechanism; may be a file (_FILE); never logged.
	KafkaSASLPassword string `env:"PACER_KAFKA_SASL_PASSWORD" secret:"true" unit:"secret"`
	// PACER_REDIS_URL: redis:// or rediss:// URL of the bucket store, with user and password if any; default redis://127.0.0.1:6379/0; may be a file (_FILE).
	RedisURL string `env:"PACER_REDIS_URL, default=redis://127.0.0.1:6379/0" secret:"true" unit:"URL"`
	// PACER_REDIS_CLUSTER_ADDRS: comma-separated host:port seeds of a Redis Cluster; set, it replaces PACER_REDIS_URL.
	RedisClusterAddrs string `env:"PACER_REDIS_CLUSTER_ADDRS" unit:"host:port,..."`
	// PACER_REDIS_SENTINEL_ADDRS: comma-separated host:port of Redis Sentinels; set, it replaces PACER_REDIS_URL.
	RedisSentinelAddrs string `env:"PACER_REDIS_SENTINEL_ADDRS" unit:"host:port,..."`
	// PACER_REDIS_SENTINEL_MASTER: the master name the Sentinels watch; required with PACER_REDIS_SENTINEL_ADDRS.
	RedisSentinelMaster string `env:"PACER_REDIS_SENTINEL_MASTER" unit:"name"`
	// PACER_REDIS_USERNAME: ACL user of the Redis servers (any mode); default none (the default user).
	RedisUsername string `env:"PACER_REDIS_USERNAME" unit:"name"`
	// PACER_REDIS_PASSWORD: password of the Redis servers (any mode; for a single server, unless PACER_REDIS_URL has one); may be a file (_FILE); never logged.
	RedisPassword string `env:"PACER_REDIS_PASSWORD" secret:"true" unit:"secret"`
	// PACER_REDIS_TLS: true reaches Redis over TLS in every mode (a rediss:// URL does too); default false.
	RedisTLS bool `env:"PACER_REDIS_TLS, default=false"`
	// PACER_REDIS_TLS_CA_FILE: PEM file of the CA certificates the servers' certificates are checked against; default the system's.
	RedisTLSCAFile string `env:"PACER_REDIS_TLS_CA_FILE"`
	// PACER_REDIS_TLS_CERT_FILE: PEM client certificate, for servers that require one (tls-auth-clients); with PACER_REDIS_TLS_KEY_FILE.
	RedisTLSCertFile string `env:"PACER_REDIS_TLS_CERT_FILE"`
	// PACER_REDIS_TLS_KEY_FILE: PEM private key of PACER_REDIS_TLS_CERT_FILE.
	RedisTLSKeyFile string `env:"PACER_REDIS_TLS_KEY_FILE"`
	// PACER_REDIS_TLS_SERVER_NAME: the name the servers' certificates must carry; default each server's host.
	RedisTLSServerName string `env:"PACER_REDIS_TLS_SERVER_NAME" unit:"host name"`
	// PACER_REDIS_PREFIX: prefix of every Redis key Pacer writes; default "pacer".
	RedisPrefix string `env:"PACER_REDIS_PREFIX, default=pacer" unit:"key prefix"`
	// PACER_METRICS_ADDR: listen address of /metrics, /healthz, /readyz; default :9464; "127.0.0.1:0" picks a free port.
	MetricsAddr string `env:"PACER_METRICS_ADDR, default=:9464"`
	// PACER_PPROF: true also serves Go's profiles (/debug/pprof/) on PACER_METRICS_ADDR; default false.
	Pprof bool `env:"PACER_PPROF, default=false"`
	// PACER_STATUS_HISTORY_KEYS: pacing keys whose last hour (a point per 10 s) each pacer run replica keeps for the status page, its most active; about 4.9 KB of memory and at most 1.8 KB of Redis each; 1..100000; default 1000.
	StatusHistoryKeys int `env:"PACER_STATUS_HISTORY_KEYS, default=1000" unit:"keys"`
	// PACER_PAGE_ADDR: listen address of the status page (/status, /status.json, its actions) on a listener of its own; default none: on PACER_METRICS_ADDR.
	PageAddr string `env:"PACER_PAGE_ADDR" unit:"host:port"`
	// PACER_PAGE_VIEWERS_FILE: JSON list of {name, token_sha256} whose bearer tokens may read the status page; default none.
	PageViewersFile string `env:"PACER_PAGE_VIEWERS_FILE" unit:"path"`
	// PACER_PAGE_OPERATORS_FILE: JSON list of {name, token_sha256} whose bearer tokens may read the status page and act from it (pause, resume, cancel, limits, DLQ replay); default none: no action is served.
	PageOperatorsFile string `env:"PACER_PAGE_OPERATORS_FILE" unit:"path"`
	// PACER_PAGE_OPEN_READ: true lets a request without a credential read the status page's data; default false: reading needs a viewer's or an operator's token.
	PageOpenRead bool `env:"PACER_PAGE_OPEN_READ, default=false"`
	// PACER_LOG_LEVEL: debug, info, warn or error; default info.
	LogLevel string `env:"PACER_LOG_LEVEL, default=info" unit:"debug|info|warn|error"`
	// PACER_LOG_FORMAT: json or text; default json.
	LogFormat string `env:"PACER_LOG_FORMAT, default=json" unit:"json|text"`
	// PACER_DRAIN: duration in-flight sends may finish after SIGTERM or a revoke; default 30s.
	Drain time.Duration `env:"PACER_DRAIN, default=30s" pacer:"Drain"`
	// PACER_MAX_ATTEMPTS: requests per message before transient failures dead-letter it; default 5.
	MaxAttempts int `env:"PACER_MAX_ATTEMPTS, default=5" pacer:"MaxAttempts"`
	// PACER_THROTTLE_COOLDOWN: shortest key cooldown after a throttle (used when the provider names no Retry-After);
	// default 0 = one token interval of the channel's rate, within [10ms, 1s].
	ThrottleCooldown time.Duration `env:"PACER_THROTTLE_COOLDOWN, default=0s" pacer:"AIMD.MinCooldown"`
	// PACER_MAX_COOLDOWN: longest key cooldown a provider hint can ask for, and longest delay of a retry or requeue; default 1h.
	MaxCooldown time.Duration `env:"PACER_MAX_COOLDOWN, default=1h" pacer:"AIMD.MaxCooldown"`
	// PACER_AIMD_DECREASE: deepest single cut of a key's rate when throttles persist, as a factor in (0,1); default 0.8.
	AIMDDecrease float64 `env:"PACER_AIMD_DECREASE, default=0.8" pacer:"AIMD.Decrease"`
	// PACER_AIMD_FLOOR: lowest adapted rate in msgs/s per key, at most the channel's rate; default 1, or the channel's rate if lower.
	AIMDFloor *float64 `env:"PACER_AIMD_FLOOR, noinit" pacer:"AIMD.Floor"`
	// PACER_AIMD_WINDOW: throttle-free time before the rate is raised; default 2s.
	AIMDWindow time.Duration `env:"PACER_AIMD_WINDOW, default=2s" pacer:"AIMD.Window"`
	// PACER_AIMD_STEP: additive first increase in msgs/s after a throttle; default 0 = multiplicative, +2% (doubling per clean window in a row).
	AIMDStep float64 `env:"PACER_AIMD_STEP, default=0" pacer:"AIMD.Step"`
	// PACER_SERVER_ERROR_BURST: server errors (HTTP 5xx) of one key, counted over every replica within PACER_SERVER_ERROR_WINDOW, that cut its rate once by PACER_SERVER_ERROR_DECREASE; 0 = off; default 20.
	ServerErrorBurst int `env:"PACER_SERVER_ERROR_BURST, default=20" unit:"count"`
	// PACER_SERVER_ERROR_WINDOW: the window PACER_SERVER_ERROR_BURST counts in, from the first server error after the last window or cut; default 10s.
	ServerErrorWindow time.Duration `env:"PACER_SERVER_ERROR_WINDOW, default=10s" pacer:"AIMD.ServerErrorWindow"`
	// PACER_SERVER_ERROR_DECREASE: factor in (0,1) a burst of server errors multiplies the key's rate by (never below PACER_AIMD_FLOOR); default 0.9.
	ServerErrorDecrease float64 `env:"PACER_SERVER_ERROR_DECREASE, default=0.9" pacer:"AIMD.ServerErrorDecrease"`
	// PACER_BREAKER_FLOOR_THROTTLES: throttles in a row at the floor that open a key's breaker; default 5.
	BreakerFloorThrottles int `env:"PACER_BREAKER_FLOOR_THROTTLES, default=5" pacer:"Breaker.FloorThrottles"`
	// PACER_BREAKER_MAX_OPEN: longest open period of a breaker (it doubles from PACER_HALT_COOLDOWN); default 10m.
	BreakerMaxOpen time.Duration `env:"PACER_BREAKER_MAX_OPEN, default=10m" pacer:"Breaker.MaxOpenFor"`
	// PACER_HALT_COOLDOWN: first open period of a key's breaker after a credential or account error; default 30s.
	HaltCooldown time.Duration `env:"PACER_HALT_COOLDOWN, default=30s" pacer:"Breaker.OpenFor"`

	// PACER_MAX_TOKEN_WAIT: longest wait for a token or a cooldown in place; a longer one requeues the record (not an attempt); default 5s.
	MaxTokenWait time.Duration `env:"PACER_MAX_TOKEN_WAIT, default=5s" pacer:"MaxTokenWait"`
	// PACER_RETRY_DELAYS: comma-separated back-off of the retry topics <topic>.retry.1, .2, ...; default 5s,30s,5m.
	RetryDelays []time.Duration `env:"PACER_RETRY_DELAYS, default=5s,30s,5m" pacer:"RetryDelays"`
	// PACER_UNKNOWN_OUTCOME: what to do when a send got no answer or a dead process left a claim: dlq or resend; default dlq.
	UnknownOutcome string `env:"PACER_UNKNOWN_OUTCOME, default=dlq" pacer:"UnknownOutcome"`
	// PACER_SUPPRESS: whether `pacer run` checks each recipient in its pacing key's suppressions (in the ledger claim's own script call) and suppresses a recipient the provider calls gone (APNs 410, FCM UNREGISTERED); default true.
	Suppress bool `env:"PACER_SUPPRESS, default=true"`
	// PACER_PORTFOLIO_WINDOW: the moving window of WhatsApp's messaging limit (unique recipients of business-initiated messages per business portfolio), 1s..24h; default 24h, WhatsApp's own; shorter only for tests and demonstrations.
	PortfolioWindow time.Duration `env:"PACER_PORTFOLIO_WINDOW, default=24h"`
	// PACER_REDIS_FAILURE: when Redis is unreachable: closed (stop sending, keep every record) or local (pace in-process at rate / PACER_EXPECTED_REPLICAS); default closed.
	RedisFailure string `env:"PACER_REDIS_FAILURE, default=closed" pacer:"RedisFailure" unit:"closed|local"`
	// PACER_EXPECTED_REPLICAS: replicas sharing each channel, for the local failure mode's share of the rate; default 1.
	ExpectedReplicas int `env:"PACER_EXPECTED_REPLICAS, default=1" unit:"replicas"`
	// PACER_SEND_TIMEOUT: longest wait for one provider answer; no answer in time is an unknown outcome; default 30s.
	SendTimeout time.Duration `env:"PACER_SEND_TIMEOUT, default=30s" pacer:"SendTimeout"`
	// PACER_INFLIGHT: the most records of one pacing key handled at once in a partition; below it a key's bound follows its rate x the provider's answer time (Little's law, with headroom), so a slow provider does not lower its rate; 1 keeps each key's strict order; default 1024.
	InFlight int `env:"PACER_INFLIGHT, default=1024" pacer:"InFlight"`
	// PACER_PROCESS_INFLIGHT: records one process handles at once over every partition and key (waiting for a slot, a claim or the provider's answer); more wait in their key's queue; default 8192 (4,000 msgs/s over 50 keys at a 250-350 ms answer time, each key with room to lease its slots).
	ProcessInFlight int `env:"PACER_PROCESS_INFLIGHT, default=8192" pacer:"ProcessInFlight"`
	// PACER_LOOKAHEAD: how much of its pace a key keeps in memory per partition (rate x lookahead records, at least its in-flight bound); the rest is parked on the retry topics; default 5s.
	Lookahead time.Duration `env:"PACER_LOOKAHEAD, default=5s" pacer:"Lookahead"`
	// PACER_PARK_LANES: true parks records beyond a key's lookahead on the park lanes <topic>.park.<n>, written once each whatever their wait, instead of hopping through the retry topics; false keeps them on the retry topics; default true (see docs/decisions/0032).
	ParkLanes bool `env:"PACER_PARK_LANES, default=true" pacer:"ParkLanes"`
	// PACER_LEASE_SIZE: send slots taken from Redis per call for one key; default 0 = automatic (a fifth of a second of slots once that is >= 2, below 20 only while the key has that many messages waiting, 20 or more only while at least 2 wait, else 1).
	LeaseSize int `env:"PACER_LEASE_SIZE, default=0" pacer:"LeaseSize"`
	// PACER_CALLBACK_TOPIC: the outcomes topic: pacer run writes the final outcome of every message of a tenant to it, and pacer ingest's callback dispatcher reads it; default pacer.outcomes.
	CallbackTopic string `env:"PACER_CALLBACK_TOPIC, default=pacer.outcomes" unit:"topic"`
	// PACER_IDEMPOTENCY_TTL: how long pacer ingest remembers accepted envelope ids and Idempotency-Key answers; default 24h.
	IdempotencyTTL time.Duration `env:"PACER_IDEMPOTENCY_TTL, default=24h"`
	// PACER_LEDGER_TTL: how long pacer run's idempotency ledger keeps a claim or delivered mark in Redis; at least 1.2 x the longest retry delay + 1m (5m at least); default 7m.
	LedgerTTL time.Duration `env:"PACER_LEDGER_TTL, default=7m" pacer:"IdempotencyTTL"`
	// PACER_LEDGER_FLUSH: how long an idempotency claim or delivered mark waits for others to go to Redis with it in one pipeline, 1ms..1s; default 20ms.
	LedgerFlush time.Duration `env:"PACER_LEDGER_FLUSH, default=20ms"`
	// PACER_KAFKA_STARTUP_TIMEOUT: run exits 1 if no Kafka broker answered within this at start-up; default 1m.
	StartupTimeout time.Duration `env:"PACER_KAFKA_STARTUP_TIMEOUT, default=1m" pacer:"StartupTimeout"`
	// PACER_PROGRESS_INTERVAL: interval of run's INFO progress line; default 30s.
	ProgressEvery time.Duration `env:"PACER_PROGRESS_INTERVAL, default=30s" pacer:"ProgressEvery"`

	// channels holds every channel's own settings (PACER_<NAME>_*), read
	// by [readChannel] from the row of [channelTable], by channel name.
	channels map[string]channelConfig
}

// pacerTag is the struct tag naming the consumer.Config field a variable sets
// ("AIMD.Floor"): [consumer.Config.Validate] reports problems by field, and
// the tag turns them back into the variable's name.
const pacerTag = "pacer"

// configError names the variable that is wrong.
type configError struct {
	Var     string
	Problem string
}

func (e *configError) Error() string { return e.Var + ": " + e.Problem }

// listenSetting listens on addr, the value of the setting name, or returns
// a *configError naming it; an address in use says what to do about it (a
// second process on one host meets the first one's default port).
func listenSetting(name, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, &configError{name, fmt.Sprintf("%s is in use (another pacer process on this host?): set %s to a free port, or to 127.0.0.1:0 to pick one", addr, name)}
	}
	if err != nil {
		return nil, &configError{name, err.Error()}
	}
	return ln, nil
}

// loadConfig reads the configuration through lookup (os.LookupEnv in main,
// a map in tests) and validates it for channel ch: every problem found,
// joined, each naming its variable.
//
// Each secret variable V may instead be given as V_FILE, read here
// ([secretFiles]).
func loadConfig(lookup func(string) (string, bool), ch *channel) (config, error) {
	lookup, fileErrs := secretFiles(lookup)
	var c config
	parseErrs := processEnv(&c, lookup)
	// The variables set aside read as their defaults below: the other
	// variables' problems are reported with theirs.
	errs := append(parseErrs, c.validate()...)
	c.channels = map[string]channelConfig{}
	for i := range channelTable {
		row := &channelTable[i]
		cc, cerrs := readChannel(row, lookup)
		c.channels[row.name] = cc
		errs = append(errs, cerrs...)
		// The pacer's rules for this channel; another channel's run only
		// needs this channel's own limits to be valid. A limit that is not
		// a number reads as its default here: the rules comparing with it
		// are not checked, the others are (a bad rate does not hide a bad
		// AIMD or breaker setting).
		for _, e := range pacerErrors(c.pacerConfig(row).Validate()) {
			limitRule := strings.HasPrefix(e.Field, "Limit.") || strings.HasPrefix(e.Field, "RecipientLimit.")
			if cc.unparsed && (limitRule || e.Field == "AIMD.Floor") {
				continue
			}
			if row == ch || limitRule {
				if e.Field == "AIMD.MaxCooldown" && c.ThrottleCooldown > c.MaxCooldown && c.MaxCooldown > 0 {
					errs = append(errs, cooldownConflict(c, lookup))
					continue
				}
				errs = append(errs, c.nameField(row, e))
			}
		}
	}
	// The secret files' problems first: a value they left empty may
	// also be reported as missing. One line per problem: a problem found
	// by two checks is said once.
	var out []error
	said := map[string]bool{}
	for _, e := range append(fileErrs(), errs...) {
		if !said[e.Error()] {
			said[e.Error()] = true
			out = append(out, e)
		}
	}
	return c, errors.Join(out...)
}

// processEnv fills *target (a pointer to a struct of env-tagged fields)
// from lookup with envconfig, and returns every value that does not parse,
// each naming its variable. envconfig stops at the first value it cannot
// parse: each one found is set aside (read as unset, so its default stands
// in) and the rest parsed again, so that every variable at fault is named.
func processEnv[T any](target *T, lookup func(string) (string, bool)) []error {
	var parseErrs []error
	hidden := map[string]bool{}
	for {
		var zero T
		*target = zero
		err := envconfig.ProcessWith(context.Background(), &envconfig.Config{
			Target: target,
			Lookuper: envconfig.LookuperFunc(func(k string) (string, bool) {
				if hidden[k] {
					return "", false
				}
				return lookup(k)
			}),
		})
		if err == nil {
			return parseErrs
		}
		named := nameVariable(reflect.TypeOf(zero), err)
		parseErrs = append(parseErrs, named)
		var ce *configError
		if !errors.As(named, &ce) || hidden[ce.Var] {
			return parseErrs
		}
		hidden[ce.Var] = true
	}
}

// guardWindow is how long the messaging-limit guard keeps a recipient:
// PACER_PORTFOLIO_WINDOW, plus how long before its arrival at WhatsApp a
// message can be admitted (its lookahead, then at most a send timeout),
// since the guard stamps the admission and WhatsApp counts the arrival: a
// recipient must not leave the guard's window while WhatsApp still counts
// it. The same in `pacer run`, `pacer webhook` and `pacer portfolio`.
func (c config) guardWindow() time.Duration {
	return c.PortfolioWindow + c.Lookahead + c.SendTimeout
}

// pacerConfig returns the consumer.Config of channel ch from c: everything
// but Topic, Group and Logger.
func (c config) pacerConfig(ch *channel) consumer.Config {
	cc := c.channels[ch.name]
	var floor float64 // 0: bucket's default, 1 or the rate if lower
	if c.AIMDFloor != nil {
		floor = *c.AIMDFloor
	}
	serverErrors := c.ServerErrorBurst // 0 = off, which adapt.AIMD spells < 0
	if serverErrors <= 0 {
		serverErrors = -1
	}
	serverRetry, _ := parseServerRetry(cc.vars.get("SERVER_RETRY")) // checked by readChannel
	return consumer.Config{
		Channel: ch.name, Limit: cc.limit, RecipientLimit: cc.recipient, Pair: cc.pair, ServerRetry: serverRetry,
		SlowStart: slowStartOf(cc.vars),
		AIMD: adapt.AIMD{Decrease: c.AIMDDecrease, Floor: floor, Window: c.AIMDWindow, Step: c.AIMDStep,
			MinCooldown: c.ThrottleCooldown, MaxCooldown: c.MaxCooldown,
			ServerErrors: serverErrors, ServerErrorWindow: c.ServerErrorWindow, ServerErrorDecrease: c.ServerErrorDecrease},
		Breaker:     adapt.Breaker{OpenFor: c.HaltCooldown, MaxOpenFor: c.BreakerMaxOpen, FloorThrottles: c.BreakerFloorThrottles},
		MaxAttempts: c.MaxAttempts, Drain: c.Drain, MaxTokenWait: c.MaxTokenWait, RetryDelays: c.RetryDelays,
		InFlight: c.InFlight, ProcessInFlight: c.ProcessInFlight, Lookahead: c.Lookahead, ParkLanes: c.ParkLanes, LeaseSize: c.LeaseSize, SendTimeout: c.SendTimeout, UnknownOutcome: c.UnknownOutcome,
		IdempotencyTTL: c.LedgerTTL, RedisFailure: c.RedisFailure, StartupTimeout: c.StartupTimeout,
		ProgressEvery: c.ProgressEvery,
	}
}

// cooldownConflict is the problem of a PACER_THROTTLE_COOLDOWN above
// PACER_MAX_COOLDOWN, which the pacer reports on its MaxCooldown field: it
// names the variable the operator set, or both when both were set.
func cooldownConflict(c config, lookup func(string) (string, bool)) error {
	_, minSet := lookup("PACER_THROTTLE_COOLDOWN")
	_, maxSet := lookup("PACER_MAX_COOLDOWN")
	v := "PACER_THROTTLE_COOLDOWN, PACER_MAX_COOLDOWN"
	switch {
	case minSet && !maxSet:
		v = "PACER_THROTTLE_COOLDOWN"
	case maxSet && !minSet:
		v = "PACER_MAX_COOLDOWN"
	}
	return &configError{v, fmt.Sprintf("PACER_THROTTLE_COOLDOWN %v must be <= PACER_MAX_COOLDOWN %v", c.ThrottleCooldown, c.MaxCooldown)}
}

// pacerErrors returns the *consumer.FieldError problems joined in err.
func pacerErrors(err error) []*consumer.FieldError {
	var out []*consumer.FieldError
	var walk func(error)
	walk = func(err error) {
		var fe *consumer.FieldError
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
		} else if errors.As(err, &fe) {
			out = append(out, fe)
		} else if err != nil {
			out = append(out, &consumer.FieldError{Err: err})
		}
	}
	walk(err)
	return out
}

// nameField turns a problem with a consumer.Config field into one naming the
// variable that set it: a channel's own (PACER_<NAME>_RATE) or a pacer tag's.
func (c config) nameField(ch *channel, e *consumer.FieldError) error {
	vars := map[string]string{"Limit.PerSecond": ch.prefix() + "RATE", "Limit.Burst": ch.prefix() + "BURST"}
	if r := ch.recipient; r != nil {
		vars["RecipientLimit.PerSecond"], vars["RecipientLimit.Burst"] = ch.prefix()+r.prefix+"_RATE", ch.prefix()+r.prefix+"_BURST"
		vars["Pair"] = ch.prefix() + r.prefix + "_INTERVAL"
	}
	t := reflect.TypeOf(c)
	for i := range t.NumField() {
		if f := t.Field(i).Tag.Get(pacerTag); f != "" {
			vars[f] = envName(t.Field(i))
		}
	}
	if v, ok := vars[e.Field]; ok {
		return &configError{v, plainProblem(e.Err.Error())}
	}
	return fmt.Errorf("%w: %w", errConfig, e)
}

// plainProblem drops the Go package's prefix of a check's message
// ("bucket: invalid limit: rate -1 must be > 0" reads "rate -1 must be
// > 0"): the variable it follows says what was wrong.
func plainProblem(msg string) string {
	for _, sentinel := range []error{bucket.ErrInvalidLimit, adapt.ErrInvalidAIMD, adapt.ErrInvalidBreaker} {
		if rest, ok := strings.CutPrefix(msg, sentinel.Error()+": "); ok {
			return rest
		}
	}
	return msg
}

// envName returns the variable of a config field: the env tag's name.
func envName(f reflect.StructField) string {
	return strings.TrimSpace(strings.Split(f.Tag.Get("env"), ",")[0])
}

// nameVariable rewrites an envconfig error about struct type t, which
// names the Go field path ("WhatsApp: Rate: ..."), so that it names the
// environment variable.
func nameVariable(t reflect.Type, err error) error {
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
	walk(t, "")
	if bestVar == "" {
		return fmt.Errorf("configuration: %w", err)
	}
	return &configError{bestVar, plainParseError(err, strings.TrimPrefix(msg, best+": "))}
}

// plainParseError says what was wrong with a value in words, without Go's
// parser names ("strconv.ParseFloat: parsing ...").
func plainParseError(err error, msg string) string {
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		switch {
		case strings.HasPrefix(ne.Func, "ParseBool"):
			return fmt.Sprintf("%q is not true or false", ne.Num)
		case errors.Is(ne.Err, strconv.ErrRange):
			return fmt.Sprintf("%q is out of range", ne.Num)
		case strings.HasPrefix(ne.Func, "ParseFloat"):
			return fmt.Sprintf("%q is not a number", ne.Num)
		default:
			return fmt.Sprintf("%q is not a whole number", ne.Num)
		}
	}
	if i := strings.Index(msg, "time: invalid duration "); i >= 0 {
		return msg[i+len("time: invalid duration "):] + " is not a duration (such as 500ms, 30s, 5m, 1h)"
	}
	if i := strings.Index(msg, "time: missing unit in duration "); i >= 0 {
		return msg[i+len("time: missing unit in duration "):] + " has no unit (such as 500ms, 30s, 5m, 1h)"
	}
	return msg
}

// validate checks the settings only the command uses (Kafka, Redis, logs),
// and refuses a 0 where the pacer would read 0 as "the default": each
// variable has a default of its own, so 0 is a mistake unless the
// variable's default is 0.
func (c config) validate() []error {
	var errs []error
	bad := func(v, p string) { errs = append(errs, &configError{v, p}) }
	if len(c.KafkaBrokers) == 0 {
		bad("PACER_KAFKA_BROKERS", "at least one host:port is required")
	}
	if c.IdempotencyTTL < 10*time.Minute {
		bad("PACER_IDEMPOTENCY_TTL", fmt.Sprintf("%v is too short: a client's retry must find the id it sent (at least 10m)", c.IdempotencyTTL))
	}
	if c.LedgerFlush < time.Millisecond || c.LedgerFlush > time.Second {
		bad("PACER_LEDGER_FLUSH", fmt.Sprintf("%v is outside 1ms..1s", c.LedgerFlush))
	}
	seen := map[string]bool{} // one line per bad entry, however often it is listed
	for _, b := range c.KafkaBrokers {
		if _, port, err := net.SplitHostPort(b); (err != nil || !validPort(port)) && !seen[b] {
			seen[b] = true
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
	if c.RedisClusterAddrs != "" && c.RedisSentinelAddrs != "" {
		bad("PACER_REDIS_SENTINEL_ADDRS", "set either PACER_REDIS_CLUSTER_ADDRS or PACER_REDIS_SENTINEL_ADDRS, not both")
	}
	c.validateSecurity(bad)
	if c.ServerErrorBurst < 0 {
		bad("PACER_SERVER_ERROR_BURST", fmt.Sprintf("%d must be >= 0 (0 turns the cut off)", c.ServerErrorBurst))
	}
	if c.KafkaSessionTimeout < time.Second {
		bad("PACER_KAFKA_SESSION_TIMEOUT", "must be >= 1s")
	}
	if p := callbackTopicErr(c.CallbackTopic); p != "" {
		bad("PACER_CALLBACK_TOPIC", p)
	}
	// The URL may hold a password: errors describe it, never echo it.
	if u, err := url.Parse(c.RedisURL); err != nil {
		switch {
		case strings.Contains(err.Error(), "invalid port"):
			bad("PACER_REDIS_URL", "the port is not a number")
		case strings.Contains(err.Error(), "missing protocol scheme"):
			bad("PACER_REDIS_URL", "must be a redis://, rediss:// or unix:// URL")
		default:
			bad("PACER_REDIS_URL", "is not a valid URL (special characters in a password must be percent-encoded)")
		}
	} else if u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix" {
		bad("PACER_REDIS_URL", "must be a redis://, rediss:// or unix:// URL")
	} else if p := u.Port(); p != "" && !validPort(p) {
		bad("PACER_REDIS_URL", "the port must be 1..65535")
	} else if _, err := redis.ParseURL(c.RedisURL); err != nil {
		bad("PACER_REDIS_URL", "host, port or database is not valid (redis://[user:password@]host:port/db)")
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
	if err := listenAddr(c.MetricsAddr, ":9464"); err != "" {
		bad("PACER_METRICS_ADDR", err)
	}
	if c.PageAddr != "" {
		if err := listenAddr(c.PageAddr, "127.0.0.1:9465"); err != "" {
			bad("PACER_PAGE_ADDR", err)
		} else if sameListener(c.PageAddr, c.MetricsAddr) {
			bad("PACER_PAGE_ADDR", fmt.Sprintf("%s is the metrics address (PACER_METRICS_ADDR=%s): give the status page another port, or unset PACER_PAGE_ADDR to serve it beside /metrics", c.PageAddr, c.MetricsAddr))
		}
	}
	if c.ExpectedReplicas < 1 {
		bad("PACER_EXPECTED_REPLICAS", "must be >= 1")
	}
	if c.StatusHistoryKeys < 1 || c.StatusHistoryKeys > 100_000 {
		bad("PACER_STATUS_HISTORY_KEYS", fmt.Sprintf("%d is outside 1..100000", c.StatusHistoryKeys))
	}
	if c.PortfolioWindow < time.Second || c.PortfolioWindow > portfolio.Window {
		bad("PACER_PORTFOLIO_WINDOW", fmt.Sprintf("%v must be 1s..24h (WhatsApp's window is 24h)", c.PortfolioWindow))
	}
	v, t := reflect.ValueOf(c), reflect.TypeOf(c)
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Tag.Get(pacerTag) == "" || zeroDefault(f.Tag.Get("env")) {
			continue
		}
		fv := v.Field(i)
		if fv.Kind() == reflect.Pointer && !fv.IsNil() {
			fv = fv.Elem()
		}
		if (fv.Kind() == reflect.Slice && fv.Len() == 0) || (fv.Kind() != reflect.Pointer && fv.IsZero()) {
			def := ""
			if _, d, ok := strings.Cut(f.Tag.Get("env"), "default="); ok {
				def = " (unset it for the default " + d + ")"
			}
			bad(envName(f), "must not be 0 or empty"+def)
		}
	}
	return errs
}

// zeroDefault reports whether an env tag's default is 0 ("default=0",
// "default=0s"; not "default=0.8") or false.
func zeroDefault(tag string) bool {
	_, d, ok := strings.Cut(tag, "default=")
	if !ok {
		return false
	}
	d, _, _ = strings.Cut(d, ",")
	if d == "false" {
		return true
	}
	if f, err := strconv.ParseFloat(d, 64); err == nil {
		return f == 0
	}
	dur, err := time.ParseDuration(d)
	return err == nil && dur == 0
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(s))
	if err != nil {
		return l, fmt.Errorf("%q is not debug, info, warn or error", s)
	}
	return l, nil
}

// settingsHelp lists every variable `pacer run` reads, with its default,
// for `pacer run -h`: the shared ones, then channel's own (docs/configuration.md says
// what each means and its unit).
func settingsHelp(ch *channel) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nsettings (environment variables; docs/configuration.md gives each one's unit and meaning):")
	t := reflect.TypeOf(config{})
	for i := range t.NumField() {
		tag, ok := t.Field(i).Tag.Lookup("env")
		if !ok {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		def := "(none)"
		if i := strings.Index(opts, "default="); i >= 0 {
			def = opts[i+len("default="):] // the last option; may hold commas
		}
		if strings.TrimSpace(name) == "PACER_AIMD_FLOOR" {
			def = "1, or the channel's rate if lower"
		}
		fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSpace(name), def)
	}
	rows := channelTable
	if ch != nil {
		rows = []channel{*ch}
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "  %sRATE\t%g\n  %sBURST\t%d\n", r.prefix(), r.limit.PerSecond, r.prefix(), r.limit.Burst)
		if rb := r.recipient; rb != nil {
			fmt.Fprintf(tw, "  %s%s_RATE\t%g\n  %s%s_BURST\t%d\n", r.prefix(), rb.prefix, rb.limit.PerSecond, r.prefix(), rb.prefix, rb.limit.Burst)
			if rb.every > 0 {
				fmt.Fprintf(tw, "  %s%s_INTERVAL\t%v\n", r.prefix(), rb.prefix, rb.every)
			}
		}
		for _, s := range r.settings {
			def := s.def
			if def == "" {
				def = "(none)"
			}
			fmt.Fprintf(tw, "  %s%s\t%s\n", r.prefix(), s.suffix, def)
		}
	}
	fmt.Fprintf(tw, "  PACER_CREDENTIALS_DIR\t(none)\n")
	fmt.Fprintln(tw, "  any secret setting may be given as <VARIABLE>_FILE, a file holding its value")
	tw.Flush()
	return b.String()
}

// envRow is one setting of a config struct for a -h listing.
type envRow struct{ name, unit, def, help string }

// envRows lists the env-tagged fields of struct type t whose variable keep
// accepts (nil: all): the name, the unit (tag unit, else from the Go type),
// the default ("(none)" without one) and tag help.
func envRows(t reflect.Type, keep func(name string) bool) []envRow {
	var rows []envRow
	for i := range t.NumField() {
		f := t.Field(i)
		tag, ok := f.Tag.Lookup("env")
		if !ok {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		name = strings.TrimSpace(name)
		if keep != nil && !keep(name) {
			continue
		}
		def := "(none)"
		if i := strings.Index(opts, "default="); i >= 0 {
			def = opts[i+len("default="):] // the last option; may hold commas
		}
		unit := f.Tag.Get("unit")
		if unit == "" {
			switch {
			case f.Type == reflect.TypeOf(time.Duration(0)):
				unit = "duration"
			case f.Type.Kind() == reflect.Bool:
				unit = "true|false"
			case f.Type.Kind() == reflect.Slice:
				unit = "list"
			case f.Type.Kind() == reflect.Int:
				unit = "count"
			case strings.HasSuffix(name, "_FILE"):
				unit = "path"
			default:
				unit = "text"
			}
		}
		rows = append(rows, envRow{name: name, unit: unit, def: def, help: f.Tag.Get("help")})
	}
	return rows
}

// listenAddr checks a listen address setting (default def): "" would
// listen on a random port of every interface, so it is refused like any
// other empty value. It returns the problem, or "".
func listenAddr(a, def string) string {
	if a == "" {
		return "must not be empty (unset it for the default " + def + ")"
	}
	if _, port, err := net.SplitHostPort(a); err != nil || (port != "0" && !validPort(port)) {
		return fmt.Sprintf("%q is not host:port (such as %s or 127.0.0.1:0)", a, def)
	}
	return ""
}

// sameListener reports whether listening on a and on b would take one
// port: the same port (not 0, which picks a free one) on the same host,
// or on a host that is every address ("", 0.0.0.0, ::).
func sameListener(a, b string) bool {
	ha, pa, erra := net.SplitHostPort(a)
	hb, pb, errb := net.SplitHostPort(b)
	if erra != nil || errb != nil || pa != pb || pa == "0" {
		return false
	}
	any := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || any(ha) || any(hb)
}

// validPort reports whether p is a TCP port number, 1..65535.
func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n >= 1 && n <= 65535
}
