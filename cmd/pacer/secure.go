package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/pacerhq/pacer/internal/tlsfail"
	"github.com/pacerhq/pacer/pacer/consumer"
	"github.com/pacerhq/pacer/pacer/produce"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// secretTag marks a config field whose value is a secret: it may be given
// as a file instead (<VARIABLE>_FILE), and it is never logged or echoed.
const secretTag = "secret"

// fileSuffix is the Docker and Kubernetes secrets convention: <VARIABLE>_FILE
// names a file holding the value of <VARIABLE>.
const fileSuffix = "_FILE"

// secretVariables returns the variables that may be given as files: the
// config fields tagged secret and the channel settings marked secret.
func secretVariables() map[string]bool {
	out := map[string]bool{}
	for _, t := range []reflect.Type{reflect.TypeOf(config{}), reflect.TypeOf(webhookConfig{})} {
		for i := range t.NumField() {
			if t.Field(i).Tag.Get(secretTag) == "true" {
				out[envName(t.Field(i))] = true
			}
		}
	}
	for i := range channelTable {
		for _, s := range channelTable[i].settings {
			if s.secret {
				out[channelTable[i].prefix()+s.suffix] = true
			}
		}
	}
	return out
}

// secretFiles wraps lookup so that each secret variable V may instead be
// given as V_FILE, a file whose content (less trailing CR and LF) is the
// value. Problems (both set, an unreadable or empty file) are returned by
// errs, each naming the variables and never a value or a path.
func secretFiles(lookup func(string) (string, bool)) (wrapped func(string) (string, bool), errs func() []error) {
	secrets := secretVariables()
	problems := map[string]error{}
	wrapped = func(name string) (string, bool) {
		v, ok := lookup(name)
		if !secrets[name] {
			return v, ok
		}
		path, fok := lookup(name + fileSuffix)
		if !fok {
			return v, ok
		}
		if ok {
			problems[name] = &configError{name + " and " + name + fileSuffix, "set one of them, not both"}
			return "", false
		}
		b, err := os.ReadFile(path)
		if err != nil {
			problems[name] = &configError{name + fileSuffix, "cannot read the file: " + pathError(err)}
			return "", false
		}
		val := strings.TrimRight(string(b), "\r\n")
		if val == "" {
			problems[name] = &configError{name + fileSuffix, "the file is empty"}
			return "", false
		}
		return val, true
	}
	errs = func() []error {
		names := make([]string, 0, len(problems))
		for n := range problems {
			names = append(names, n)
		}
		sort.Strings(names)
		out := make([]error, len(names))
		for i, n := range names {
			out[i] = problems[n]
		}
		return out
	}
	return wrapped, errs
}

// saslMechanisms are the values of PACER_KAFKA_SASL_MECHANISM besides "".
var saslMechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

// validateSecurity checks the TLS and SASL settings of Kafka and Redis
// against each other; the files are read by [kafkaOpts] and [newRedis].
func (c config) validateSecurity(bad func(v, p string)) {
	if c.KafkaSASLMechanism != "" {
		known := false
		for _, m := range saslMechanisms {
			known = known || m == c.KafkaSASLMechanism
		}
		if !known {
			bad("PACER_KAFKA_SASL_MECHANISM", fmt.Sprintf("%q is not one of %s", c.KafkaSASLMechanism, strings.Join(saslMechanisms, ", ")))
		}
		if c.KafkaSASLUsername == "" {
			bad("PACER_KAFKA_SASL_USERNAME", "required with PACER_KAFKA_SASL_MECHANISM")
		}
		if c.KafkaSASLPassword == "" {
			bad("PACER_KAFKA_SASL_PASSWORD", "required with PACER_KAFKA_SASL_MECHANISM (or PACER_KAFKA_SASL_PASSWORD_FILE)")
		}
	} else if c.KafkaSASLUsername != "" || c.KafkaSASLPassword != "" {
		bad("PACER_KAFKA_SASL_MECHANISM", "required with PACER_KAFKA_SASL_USERNAME and _PASSWORD ("+strings.Join(saslMechanisms, ", ")+")")
	}
	for _, t := range []struct {
		s   tlsSettings
		on  bool
		how string
	}{
		{c.kafkaTLSSettings(), c.KafkaTLS, "PACER_KAFKA_TLS=true"},
		{c.redisTLSSettings(), c.redisTLS(), "PACER_REDIS_TLS=true or a rediss:// PACER_REDIS_URL"},
	} {
		for _, v := range [][2]string{{"CA_FILE", t.s.ca}, {"CERT_FILE", t.s.cert}, {"KEY_FILE", t.s.key}, {"SERVER_NAME", t.s.serverName}} {
			if v[1] != "" && !t.on {
				bad(t.s.prefix+v[0], "set only with "+t.how)
			}
		}
		if (t.s.cert == "") != (t.s.key == "") {
			bad(t.s.prefix+"CERT_FILE", "set together with "+t.s.prefix+"KEY_FILE (the client certificate and its key)")
		}
	}
}

// tlsSettings are the TLS variables of Kafka or Redis.
type tlsSettings struct {
	prefix                    string // "PACER_KAFKA_TLS_"
	ca, cert, key, serverName string
}

func (c config) kafkaTLSSettings() tlsSettings {
	return tlsSettings{"PACER_KAFKA_TLS_", c.KafkaTLSCAFile, c.KafkaTLSCertFile, c.KafkaTLSKeyFile, c.KafkaTLSServerName}
}

func (c config) redisTLSSettings() tlsSettings {
	return tlsSettings{"PACER_REDIS_TLS_", c.RedisTLSCAFile, c.RedisTLSCertFile, c.RedisTLSKeyFile, c.RedisTLSServerName}
}

// redisTLS reports whether Redis is reached over TLS: PACER_REDIS_TLS, or a
// rediss:// URL for the single server.
func (c config) redisTLS() bool {
	return c.RedisTLS || (c.RedisClusterAddrs == "" && c.RedisSentinelAddrs == "" && strings.HasPrefix(c.RedisURL, "rediss://"))
}

// config builds the TLS client configuration: the CA file (PEM; none: the
// system's roots), the client certificate and key (PEM; for mTLS) and the
// server name (none: each server's host). Its errors name the variable
// and never the path or the file's content.
func (s tlsSettings) config() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.serverName}
	if s.ca != "" {
		b, err := os.ReadFile(s.ca)
		if err != nil {
			return nil, &configError{s.prefix + "CA_FILE", "cannot read the file: " + pathError(err)}
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(b) {
			return nil, &configError{s.prefix + "CA_FILE", "holds no PEM certificate"}
		}
	}
	if s.cert != "" {
		pair, err := tls.LoadX509KeyPair(s.cert, s.key)
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				return nil, &configError{s.prefix + "CERT_FILE or " + s.prefix + "KEY_FILE", "cannot read the file: " + pathError(err)}
			}
			return nil, &configError{s.prefix + "CERT_FILE and " + s.prefix + "KEY_FILE", "not a PEM certificate and its private key: " + err.Error()}
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// kafkaOpts returns the client options every command that talks to Kafka
// starts from: the seed brokers (PACER_KAFKA_BROKERS), TLS
// (PACER_KAFKA_TLS*) and SASL (PACER_KAFKA_SASL_*, with franz-go's
// mechanisms). Errors name the variable at fault.
func kafkaOpts(cfg config) ([]kgo.Opt, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(cfg.KafkaBrokers...)}
	if cfg.KafkaTLS {
		tc, err := cfg.kafkaTLSSettings().config()
		if err != nil {
			return nil, err
		}
		// kgo sets ServerName to each broker's host when it is empty.
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	var m sasl.Mechanism
	switch user, pass := cfg.KafkaSASLUsername, cfg.KafkaSASLPassword; cfg.KafkaSASLMechanism {
	case "":
	case "PLAIN":
		m = plain.Auth{User: user, Pass: pass}.AsMechanism()
	case "SCRAM-SHA-256":
		m = scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()
	case "SCRAM-SHA-512":
		m = scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()
	default:
		return nil, &configError{"PACER_KAFKA_SASL_MECHANISM", "is not one of " + strings.Join(saslMechanisms, ", ")}
	}
	if m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// kafkaSetting names the settings to look at for a Kafka failure that no
// retry mends (as [produce.KafkaSecurity] classifies it), or "" for any other.
func kafkaSetting(cfg config, err error) string {
	kind, _ := produce.KafkaSecurity(err)
	switch kind {
	case produce.SASLAuthFailed:
		return "PACER_KAFKA_SASL_*"
	case produce.SASLMechanism, produce.SASLNotOffered, produce.SASLExpected:
		return "PACER_KAFKA_SASL_MECHANISM"
	case produce.TLSUnknownCA:
		return "PACER_KAFKA_TLS_CA_FILE"
	case produce.TLSHostname:
		return "PACER_KAFKA_TLS_SERVER_NAME"
	case produce.TLSCertInvalid:
		return "the brokers' certificates; PACER_KAFKA_TLS_CA_FILE"
	case produce.TLSNotTLS, produce.TLSToPlaintext, produce.TLSClosed, produce.TLSExpected:
		return "PACER_KAFKA_TLS"
	case produce.TLSHandshakeRefused:
		return "PACER_KAFKA_TLS_CERT_FILE, PACER_KAFKA_TLS_KEY_FILE"
	case produce.ClosedAtOnce:
		switch {
		case !cfg.KafkaTLS:
			return "PACER_KAFKA_TLS"
		case cfg.KafkaSASLMechanism == "":
			return "PACER_KAFKA_TLS, PACER_KAFKA_SASL_MECHANISM"
		default:
			return "PACER_KAFKA_TLS, PACER_KAFKA_SASL_MECHANISM, PACER_KAFKA_TLS_CERT_FILE"
		}
	}
	return ""
}

// kafkaFailure returns err, a Kafka failure of a command: when a setting
// is at fault ([kafkaSetting]), as a [*consumer.KafkaError] whose cause names
// it ("authentication failed (PACER_KAFKA_SASL_*)"); else unchanged.
func kafkaFailure(cfg config, err error) error {
	s := kafkaSetting(cfg, err)
	if s == "" {
		return err
	}
	var ke *consumer.KafkaError
	if !errors.As(err, &ke) {
		cause, _ := produce.KafkaCause(err)
		ke = &consumer.KafkaError{Cause: cause, Err: err}
		err = ke
	}
	ke.Cause += " (" + s + ")"
	return err
}

// kafkaCommandFailure is [kafkaFailure] for a command that reaches the
// brokers at once (publish, dlq replay, run refused at start): the error
// also names PACER_KAFKA_BROKERS and its value (host:port list, no
// secret), so a broker that is down or an address that is wrong points at
// the setting.
func kafkaCommandFailure(cfg config, err error) error {
	return fmt.Errorf("%w (PACER_KAFKA_BROKERS=%s)", kafkaFailure(cfg, err), strings.Join(cfg.KafkaBrokers, ","))
}

// kafkaStartCheck asks the brokers for the metadata of no topic, waiting
// at most wait, for a command that serves without Kafka at hand (ingest):
// refused is a refusal no retry mends (TLS or SASL that does not match the
// listener, credentials, certificates), naming the setting and
// PACER_KAFKA_BROKERS ([kafkaCommandFailure]); other is any other failure
// (brokers down or slow), for the caller to log as it keeps going.
func kafkaStartCheck(ctx context.Context, cfg config, kc *kgo.Client, wait time.Duration) (refused, other error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{} // none; nil would ask for all
	_, err := req.RequestWith(ctx, kc)
	switch {
	case err == nil:
		return nil, nil
	case kafkaSetting(cfg, err) != "":
		return kafkaCommandFailure(cfg, fmt.Errorf("metadata: %w", err)), nil
	}
	return nil, err
}

// redisRefusal says why Redis refused the connection when no retry can
// mend it (credentials, certificates), naming the settings to look at;
// "" for any other failure (a server that is down, a timeout).
func redisRefusal(err error) string {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	switch {
	// WRONGPASS: a wrong user or password; the other two: a password
	// without a user where the default user has none, or no password.
	case strings.Contains(msg, "DB index is out of range"):
		return "the database number in PACER_REDIS_URL is beyond the server's databases (its `databases` setting, 16 by default; Redis Cluster has only database 0)"
	case strings.Contains(msg, "WRONGPASS"), strings.Contains(msg, "NOAUTH"), strings.Contains(msg, "without any password configured"):
		return "authentication failed (PACER_REDIS_USERNAME and PACER_REDIS_PASSWORD, or the user and password of PACER_REDIS_URL)"
	}
	if k, cause := tlsfail.Of(err, "server"); k != tlsfail.None {
		return cause + redisTLSSettings[k]
	}
	return ""
}

// redisTLSSettings names, after a TLS failure's cause, the settings to
// look at.
var redisTLSSettings = map[tlsfail.Kind]string{
	tlsfail.UnknownCA:   " (PACER_REDIS_TLS_CA_FILE)",
	tlsfail.Hostname:    " (PACER_REDIS_TLS_SERVER_NAME)",
	tlsfail.CertInvalid: " (the server's certificate; PACER_REDIS_TLS_CA_FILE)",
	tlsfail.NotTLS:      " (PACER_REDIS_TLS, or rediss:// in PACER_REDIS_URL)",
	tlsfail.Refused:     " (PACER_REDIS_TLS_CERT_FILE, PACER_REDIS_TLS_KEY_FILE)",
}

// redisHint names the settings to look at when Redis fails in the way a
// TLS mismatch does, "" otherwise. Unlike [redisRefusal] it is only a
// hint (a plain server that is merely slow, or restarting, fails alike):
// callers add it to the error or log line and keep retrying.
//   - TLS off, the connection closed at once (EOF, reset): a TLS port
//     drops a plain client's first command.
//   - TLS on, no answer in time: a plain port never answers the TLS
//     handshake.
func redisHint(cfg config, err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	where := redisSetting(cfg)
	if !cfg.redisTLS() && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(msg, "connection reset by peer")) {
		return "the server closed the connection at once; if that port expects TLS, set PACER_REDIS_TLS=true or use rediss:// in PACER_REDIS_URL (" + where + ")"
	}
	var ne net.Error
	if cfg.redisTLS() && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())) {
		return "no answer to the TLS handshake in time; if that port is not a TLS port, unset PACER_REDIS_TLS or use redis:// in PACER_REDIS_URL, else check the host and port (" + where + ")"
	}
	return ""
}
