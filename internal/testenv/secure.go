package testenv

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// SecureKafka is the secured listeners of the test broker (scripts/kafka.sh):
// SASL_SSL with user Username (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and SSL
// requiring a client certificate, both with certificates signed by CAFile.
type SecureKafka struct {
	SASLBrokers  string // PACER_TEST_KAFKA_SASL_BROKERS
	MTLSBrokers  string // PACER_TEST_KAFKA_MTLS_BROKERS
	CAFile       string // PACER_TEST_KAFKA_CA: PEM
	ClientCert   string // PACER_TEST_KAFKA_CLIENT_CERT: PEM, signed by CAFile
	ClientKey    string // PACER_TEST_KAFKA_CLIENT_KEY: PEM
	Username     string // PACER_TEST_KAFKA_SASL_USERNAME
	PasswordFile string // PACER_TEST_KAFKA_SASL_PASSWORD_FILE
}

// SecureRedis is the TLS port of the test redis-server (scripts/redis.sh)
// and its ACL user.
type SecureRedis struct {
	TLSAddr      string // PACER_TEST_REDIS_TLS_ADDR: host:port
	CAFile       string // PACER_TEST_REDIS_CA
	ClientCert   string // PACER_TEST_REDIS_CLIENT_CERT
	ClientKey    string // PACER_TEST_REDIS_CLIENT_KEY
	Username     string // PACER_TEST_REDIS_USERNAME
	PasswordFile string // PACER_TEST_REDIS_PASSWORD_FILE
}

const secureHint = "run `make test`, or `eval \"$(scripts/test-env.sh)\"` (scripts/kafka.sh env and scripts/redis.sh env print the variables of servers started by the scripts)"

// KafkaSecure returns the secured listeners from the environment; when
// neither they nor PACER_TEST_KAFKA_BROKERS are set, from the broker of
// scripts/kafka.sh (started by [KafkaBrokers]). It fails the test without
// them.
func KafkaSecure(t testing.TB) SecureKafka {
	t.Helper()
	get := secureVars(t, "PACER_TEST_KAFKA_SASL_BROKERS", "kafka.sh", func() {
		if os.Getenv(EnvKafkaBrokers) == "" {
			KafkaBrokers(t)
		}
	})
	return SecureKafka{
		SASLBrokers: get("PACER_TEST_KAFKA_SASL_BROKERS"), MTLSBrokers: get("PACER_TEST_KAFKA_MTLS_BROKERS"),
		CAFile: get("PACER_TEST_KAFKA_CA"), ClientCert: get("PACER_TEST_KAFKA_CLIENT_CERT"), ClientKey: get("PACER_TEST_KAFKA_CLIENT_KEY"),
		Username: get("PACER_TEST_KAFKA_SASL_USERNAME"), PasswordFile: get("PACER_TEST_KAFKA_SASL_PASSWORD_FILE"),
	}
}

// RedisSecure returns the TLS port and ACL user from the environment
// (scripts/redis.sh env); it fails the test without them.
func RedisSecure(t testing.TB) SecureRedis {
	t.Helper()
	get := secureVars(t, "PACER_TEST_REDIS_TLS_ADDR", "", nil)
	return SecureRedis{
		TLSAddr: get("PACER_TEST_REDIS_TLS_ADDR"), CAFile: get("PACER_TEST_REDIS_CA"),
		ClientCert: get("PACER_TEST_REDIS_CLIENT_CERT"), ClientKey: get("PACER_TEST_REDIS_CLIENT_KEY"),
		Username: get("PACER_TEST_REDIS_USERNAME"), PasswordFile: get("PACER_TEST_REDIS_PASSWORD_FILE"),
	}
}

// Password returns the content of a password file.
func Password(t testing.TB, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil || len(b) == 0 {
		t.Fatalf("testenv: password file: %v", err)
	}
	return strings.TrimRight(string(b), "\r\n")
}

// secureVars returns a getter of the variables whose presence key shows:
// from the environment, else (script set, start run first) from
// `scripts/<script> env`. A missing variable fails the test; under -short
// with key unset, the test is skipped.
func secureVars(t testing.TB, key, script string, start func()) func(string) string {
	t.Helper()
	if strings.TrimSpace(os.Getenv(key)) == "" {
		skipShort(t, "secured listener", key)
	}
	vars := map[string]string{}
	if os.Getenv(key) == "" && script != "" && os.Getenv(EnvKafkaBrokers) == "" {
		start()
		out, err := runScript(script, "env", 30*time.Second)
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		for _, line := range strings.Split(out, "\n") {
			if k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "="); ok {
				vars[k] = v
			}
		}
	}
	return func(name string) string {
		t.Helper()
		if v := strings.TrimSpace(os.Getenv(name)); v != "" {
			return v
		}
		if v := vars[name]; v != "" {
			return v
		}
		t.Fatalf("testenv: %s is not set\n%s", name, secureHint)
		return ""
	}
}

// String describes the listeners for test logs (no password).
func (k SecureKafka) String() string {
	return fmt.Sprintf("SASL_SSL %s, mTLS %s, user %s", k.SASLBrokers, k.MTLSBrokers, k.Username)
}
