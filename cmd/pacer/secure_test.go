package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSecretFiles: each secret variable may be a file (<VARIABLE>_FILE),
// whose trailing newline is dropped; the other variables may not.
func TestSecretFiles(t *testing.T) {
	env := map[string]string{
		"PACER_KAFKA_SASL_MECHANISM":     "SCRAM-SHA-512",
		"PACER_KAFKA_SASL_USERNAME":      "pacer",
		"PACER_KAFKA_SASL_PASSWORD_FILE": writeFile(t, "kafka", "kafka-pw-1\n"),
		"PACER_REDIS_PASSWORD_FILE":      writeFile(t, "redis", "redis-pw-2\r\n"),
		"PACER_REDIS_URL_FILE":           writeFile(t, "url", "rediss://redis.example.com:6380/2"),
		"PACER_WHATSAPP_TOKEN_FILE":      writeFile(t, "token", "wa-token-3\n"),
		"PACER_SENDGRID_API_KEYS_FILE":   writeFile(t, "keys", "main=SG.key-4\n"),
		"PACER_LOG_LEVEL_FILE":           writeFile(t, "level", "debug"), // not a secret: ignored
	}
	c, err := loadConfig(lookupMap(env), whatsappRow(t))
	if err != nil {
		t.Fatal(err)
	}
	if c.KafkaSASLPassword != "kafka-pw-1" || c.RedisPassword != "redis-pw-2" || c.RedisURL != "rediss://redis.example.com:6380/2" ||
		c.channels["whatsapp"].vars.get("TOKEN") != "wa-token-3" || c.channels["sendgrid"].vars.get("API_KEYS") != "main=SG.key-4" {
		t.Errorf("from files: kafka %q, redis %q, url %q, token %q, keys %q", c.KafkaSASLPassword, c.RedisPassword, c.RedisURL,
			c.channels["whatsapp"].vars.get("TOKEN"), c.channels["sendgrid"].vars.get("API_KEYS"))
	}
	if c.LogLevel != "info" {
		t.Errorf("PACER_LOG_LEVEL_FILE set the level to %q; only secrets are read from files", c.LogLevel)
	}
}

// TestSecretFileProblems: both set, an unreadable or empty file: each is
// an error naming the variables, never the value or the path.
func TestSecretFileProblems(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-secret-file")
	env := map[string]string{
		"PACER_KAFKA_SASL_MECHANISM": "PLAIN", "PACER_KAFKA_SASL_USERNAME": "pacer",
		"PACER_KAFKA_SASL_PASSWORD": "inline-secret-1", "PACER_KAFKA_SASL_PASSWORD_FILE": writeFile(t, "pw", "file-secret-2"),
		"PACER_WHATSAPP_TOKEN_FILE": missing,
		"PACER_REDIS_PASSWORD_FILE": writeFile(t, "empty", "\n"),
	}
	_, err := loadConfig(lookupMap(env), whatsappRow(t))
	if err == nil {
		t.Fatal("loadConfig accepted it")
	}
	msg := err.Error()
	for _, want := range []string{
		"PACER_KAFKA_SASL_PASSWORD and PACER_KAFKA_SASL_PASSWORD_FILE: set one of them, not both",
		"PACER_WHATSAPP_TOKEN_FILE: cannot read the file: no such file or directory",
		"PACER_REDIS_PASSWORD_FILE: the file is empty",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	for _, leak := range []string{"inline-secret-1", "file-secret-2", missing} {
		if strings.Contains(msg, leak) {
			t.Errorf("error echoes %q:\n%s", leak, msg)
		}
	}
}

// TestSecuritySettingsChecked: settings that do not fit together are
// refused at start-up, each naming its variable.
func TestSecuritySettingsChecked(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"PACER_KAFKA_SASL_MECHANISM": "GSSAPI", "PACER_KAFKA_SASL_USERNAME": "u", "PACER_KAFKA_SASL_PASSWORD": "p"},
			`PACER_KAFKA_SASL_MECHANISM: "GSSAPI" is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512`},
		{map[string]string{"PACER_KAFKA_SASL_MECHANISM": "PLAIN", "PACER_KAFKA_SASL_PASSWORD": "p"},
			"PACER_KAFKA_SASL_USERNAME: required with PACER_KAFKA_SASL_MECHANISM"},
		{map[string]string{"PACER_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256", "PACER_KAFKA_SASL_USERNAME": "u"},
			"PACER_KAFKA_SASL_PASSWORD: required with PACER_KAFKA_SASL_MECHANISM"},
		{map[string]string{"PACER_KAFKA_SASL_USERNAME": "u", "PACER_KAFKA_SASL_PASSWORD": "p"},
			"PACER_KAFKA_SASL_MECHANISM: required with PACER_KAFKA_SASL_USERNAME"},
		{map[string]string{"PACER_KAFKA_TLS_CA_FILE": "/ca.pem"}, "PACER_KAFKA_TLS_CA_FILE: set only with PACER_KAFKA_TLS=true"},
		{map[string]string{"PACER_KAFKA_TLS": "true", "PACER_KAFKA_TLS_CERT_FILE": "/c.pem"},
			"PACER_KAFKA_TLS_CERT_FILE: set together with PACER_KAFKA_TLS_KEY_FILE"},
		{map[string]string{"PACER_KAFKA_TLS": "on"}, `PACER_KAFKA_TLS: "on" is not true or false`},
		{map[string]string{"PACER_REDIS_TLS_CA_FILE": "/ca.pem"},
			"PACER_REDIS_TLS_CA_FILE: set only with PACER_REDIS_TLS=true or a rediss:// PACER_REDIS_URL"},
	} {
		_, err := loadConfig(lookupMap(c.env), whatsappRow(t))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.env, err, c.want)
		}
	}
	// Every missing SASL setting is named at once, not one per start.
	_, err := loadConfig(lookupMap(map[string]string{"PACER_KAFKA_SASL_MECHANISM": "PLAIN"}), whatsappRow(t))
	for _, want := range []string{"PACER_KAFKA_SASL_USERNAME: required", "PACER_KAFKA_SASL_PASSWORD: required"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("mechanism alone: error %v, want %q", err, want)
		}
	}
	// Accepted: rediss:// turns TLS on for the single server.
	if _, err := loadConfig(lookupMap(map[string]string{"PACER_REDIS_URL": "rediss://r:6380/0", "PACER_REDIS_TLS_CA_FILE": "/ca.pem"}), whatsappRow(t)); err != nil {
		t.Errorf("rediss:// with a CA file: %v", err)
	}
}

// TestKafkaOptsFiles: unreadable or wrong TLS files are named by their
// variable, never by their path.
func TestKafkaOptsFiles(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.pem")
	notPEM := writeFile(t, "ca.pem", "not a certificate")
	for _, c := range []struct {
		cfg  config
		want string
	}{
		{config{KafkaTLS: true, KafkaTLSCAFile: missing}, "PACER_KAFKA_TLS_CA_FILE: cannot read the file: no such file or directory"},
		{config{KafkaTLS: true, KafkaTLSCAFile: notPEM}, "PACER_KAFKA_TLS_CA_FILE: holds no PEM certificate"},
		{config{KafkaTLS: true, KafkaTLSCertFile: notPEM, KafkaTLSKeyFile: notPEM},
			"PACER_KAFKA_TLS_CERT_FILE and PACER_KAFKA_TLS_KEY_FILE: not a PEM certificate and its private key"},
		{config{KafkaTLS: true, KafkaTLSCertFile: missing, KafkaTLSKeyFile: missing},
			"PACER_KAFKA_TLS_CERT_FILE or PACER_KAFKA_TLS_KEY_FILE: cannot read the file"},
	} {
		_, err := kafkaOpts(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), t.TempDir()) {
			t.Errorf("kafkaOpts: %v, want %q without the path", err, c.want)
		}
	}
	opts, err := kafkaOpts(config{KafkaBrokers: []string{"b:9093"}, KafkaTLS: true, KafkaSASLMechanism: "SCRAM-SHA-512", KafkaSASLUsername: "u", KafkaSASLPassword: "p"})
	if err != nil || len(opts) != 3 {
		t.Errorf("kafkaOpts with TLS and SASL = %d options, %v; want seed brokers, TLS and SASL", len(opts), err)
	}
}

// TestNewRedisSecurity: the ACL user, password and TLS reach the client in
// every mode.
func TestNewRedisSecurity(t *testing.T) {
	ca := otherCA(t)
	check := func(mode string, user, pass string, tc *tls.Config, wantServerName string) {
		t.Helper()
		if user != "acl-user" || pass != "acl-pass" {
			t.Errorf("%s: user %q password %q", mode, user, pass)
		}
		if tc == nil || tc.RootCAs == nil || tc.ServerName != wantServerName {
			t.Errorf("%s: TLS config %+v, want the CA pool and server name %q", mode, tc, wantServerName)
		}
	}
	base := config{RedisUsername: "acl-user", RedisPassword: "acl-pass", RedisTLSCAFile: ca}

	c := base
	c.RedisURL = "rediss://redis.example.com:6380/0"
	rdb, err := newRedis(c)
	if err != nil {
		t.Fatal(err)
	}
	o := rdb.(*redis.Client).Options()
	check("single", o.Username, o.Password, o.TLSConfig, "redis.example.com")
	rdb.Close()

	c = base
	c.RedisTLS, c.RedisClusterAddrs = true, "10.0.0.1:6379,10.0.0.2:6379"
	rdb, _ = newRedis(c)
	co := rdb.(*redis.ClusterClient).Options()
	check("cluster", co.Username, co.Password, co.TLSConfig, "") // each node's host
	rdb.Close()

	c = base
	c.RedisTLS, c.RedisSentinelAddrs, c.RedisSentinelMaster, c.RedisTLSServerName = true, "10.0.0.1:26379", "main", "redis.internal"
	rdb, _ = newRedis(c)
	fo := rdb.(*redis.Client).Options()
	check("sentinel", fo.Username, fo.Password, fo.TLSConfig, "redis.internal")
	rdb.Close()

	// A user and password in the URL and in the variables: which one?
	c = config{RedisURL: "redis://u:url-secret@r:6379/0", RedisPassword: "var-secret"}
	if _, err := newRedis(c); err == nil || !strings.Contains(err.Error(), "not both") || strings.Contains(err.Error(), "secret") {
		t.Errorf("URL and PACER_REDIS_PASSWORD: %v, want an error naming both without the values", err)
	}
}

// TestKafkaFailureNamesCauseAndSetting: every failure kind that
// produce.KafkaSecurity reads is reported with its cause in words and the
// setting to look at; any other error passes unchanged.
func TestKafkaFailureNamesCauseAndSetting(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("pacer: topic t: metadata: %w", err) }
	for _, c := range []struct {
		name string
		cfg  config
		err  error
		want string
	}{
		{"sasl", config{}, wrap(kerr.SaslAuthenticationFailed), "kafka: authentication failed (PACER_KAFKA_SASL_*)"},
		{"mechanism", config{}, wrap(kerr.UnsupportedSaslMechanism), "kafka: SASL: the listener does not offer this mechanism (PACER_KAFKA_SASL_MECHANISM)"},
		{"no SASL on the listener", config{KafkaSASLMechanism: "PLAIN"}, wrap(kerr.IllegalSaslState),
			"kafka: SASL: the listener does not take SASL (a PLAINTEXT or SSL listener) (PACER_KAFKA_SASL_MECHANISM)"},
		{"unknown CA", config{}, wrap(x509.UnknownAuthorityError{}), "kafka: TLS: certificate signed by unknown authority (PACER_KAFKA_TLS_CA_FILE)"},
		{"host name", config{}, wrap(x509.HostnameError{Certificate: &x509.Certificate{}, Host: "kafka.example.com"}),
			"kafka: TLS: the broker's certificate is not valid for kafka.example.com (PACER_KAFKA_TLS_SERVER_NAME)"},
		{"expired", config{}, wrap(x509.CertificateInvalidError{Cert: &x509.Certificate{}, Reason: x509.Expired}),
			"(the brokers' certificates; PACER_KAFKA_TLS_CA_FILE)"},
		{"not TLS", config{}, wrap(tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}),
			"kafka: TLS: the broker does not answer in TLS (a plaintext or SASL_PLAINTEXT listener) (PACER_KAFKA_TLS)"},
		{"alert", config{}, wrap(&net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}),
			"kafka: TLS: the broker refused the handshake (tls: certificate required) (PACER_KAFKA_TLS_CERT_FILE, PACER_KAFKA_TLS_KEY_FILE)"},
		{"TLS to plaintext", config{}, wrap(errors.New("read: is this a plaintext connection speaking to a tls endpoint?")),
			"kafka: TLS: the broker answered in TLS to a plaintext client (PACER_KAFKA_TLS)"},
		// franz-go's ErrFirstReadEOF of a dial; the other two steps it names
		// are TestKafkaListenerMismatch's, against real listeners.
		{"closed at the handshake", config{KafkaTLS: true, KafkaSASLMechanism: "PLAIN"}, wrap(&kgo.ErrFirstReadEOF{}),
			"kafka: TLS: the broker closed the connection during the handshake (a plaintext or SASL_PLAINTEXT listener) (PACER_KAFKA_TLS)"},
		{"down", config{}, wrap(syscall.ECONNREFUSED), "pacer: topic t: metadata: connection refused"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := kafkaFailure(c.cfg, c.err).Error()
			if !strings.Contains(got, c.want) {
				t.Errorf("kafkaFailure = %q, want it to contain %q", got, c.want)
			}
			if c.name == "down" && got != c.err.Error() {
				t.Errorf("a failure no setting mends was changed: %q", got)
			}
		})
	}
}

// TestRedisRefusalNamesSetting: each TLS failure of a Redis connection is
// reported with its cause in words and the setting to look at, as Kafka's
// are; an error that is no refusal gives "".
func TestRedisRefusalNamesSetting(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("dial tcp 10.0.0.1:6380: %w", err) }
	for want, err := range map[string]error{
		"TLS: certificate signed by unknown authority (PACER_REDIS_TLS_CA_FILE)": wrap(x509.UnknownAuthorityError{}),
		"TLS: the server's certificate is not valid for redis.example.com (PACER_REDIS_TLS_SERVER_NAME)": wrap(
			x509.HostnameError{Certificate: &x509.Certificate{}, Host: "redis.example.com"}),
		"TLS: certificate has expired or is not yet valid:  (the server's certificate; PACER_REDIS_TLS_CA_FILE)": wrap(
			x509.CertificateInvalidError{Cert: &x509.Certificate{}, Reason: x509.Expired}),
		"TLS: the server does not answer in TLS (PACER_REDIS_TLS, or rediss:// in PACER_REDIS_URL)": wrap(
			tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}),
		"TLS: the server refused the handshake (tls: certificate required) (PACER_REDIS_TLS_CERT_FILE, PACER_REDIS_TLS_KEY_FILE)": wrap(
			&net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}),
		"": wrap(syscall.ECONNREFUSED),
	} {
		if got := redisRefusal(err); got != want {
			t.Errorf("redisRefusal(%v) = %q, want %q", err, got, want)
		}
	}
}
