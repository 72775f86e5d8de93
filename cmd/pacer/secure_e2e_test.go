//go:build e2e

package main

// End-to-end tests through secured servers: the broker's SASL_SSL and mTLS
// listeners and the redis-server's TLS port with an ACL user (scripts/kafka.sh,
// scripts/redis.sh; internal/testenv).

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
	"github.com/pacerhq/pacer/internal/testenv"
)

// secureWorld is an e2e world whose commands reach Kafka through SASL_SSL
// (SCRAM-SHA-512) and Redis through TLS as an ACL user, with every secret
// (Kafka password, Redis password, WhatsApp token) given as a file.
type secureWorld struct {
	*e2e
	kafka   testenv.SecureKafka
	redis   testenv.SecureRedis
	secrets []string // values that must never appear in any output
}

func newSecureWorld(t *testing.T, fake whatsapptest.Config) *secureWorld {
	w := &secureWorld{e2e: newE2E(t, fake), kafka: testenv.KafkaSecure(t), redis: testenv.RedisSecure(t)}
	token := filepath.Join(t.TempDir(), "whatsapp-token")
	if err := os.WriteFile(token, []byte("e2e-secret-token\n"), 0o600); err != nil { // a trailing newline, as echo writes
		t.Fatal(err)
	}
	w.secrets = []string{testenv.Password(t, w.kafka.PasswordFile), testenv.Password(t, w.redis.PasswordFile), "e2e-secret-token"}
	w.rewrite = func(env []string) []string {
		return setEnv(env, map[string]string{
			"PACER_KAFKA_BROKERS":            w.kafka.SASLBrokers,
			"PACER_KAFKA_TLS":                "true",
			"PACER_KAFKA_TLS_CA_FILE":        w.kafka.CAFile,
			"PACER_KAFKA_SASL_MECHANISM":     "SCRAM-SHA-512",
			"PACER_KAFKA_SASL_USERNAME":      w.kafka.Username,
			"PACER_KAFKA_SASL_PASSWORD_FILE": w.kafka.PasswordFile,
			"PACER_REDIS_URL":                "rediss://" + w.redis.TLSAddr + fmt.Sprintf("/%d", testenv.RedisDB),
			"PACER_REDIS_USERNAME":           w.redis.Username,
			"PACER_REDIS_PASSWORD_FILE":      w.redis.PasswordFile,
			"PACER_REDIS_TLS_CA_FILE":        w.redis.CAFile,
			"PACER_WHATSAPP_TOKEN":           "",
			"PACER_WHATSAPP_TOKEN_FILE":      token,
		})
	}
	return w
}

// setEnv returns env with each variable of set replaced by its value, or
// removed when the value is "" (later entries in set win over env's).
func setEnv(env []string, set map[string]string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			out = append(out, kv)
		}
	}
	for k, v := range set {
		if v != "" {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// with returns a copy of w whose commands get set on top of its own
// environment.
func (w *secureWorld) with(set map[string]string) *e2e {
	e := *w.e2e
	base := w.rewrite
	e.rewrite = func(env []string) []string { return setEnv(base(env), set) }
	return &e
}

// checkNoSecret fails when any of w's secrets appears in out.
func (w *secureWorld) checkNoSecret(t *testing.T, what, out string) {
	t.Helper()
	for i, s := range w.secrets {
		if strings.Contains(out, s) {
			t.Errorf("secret %d (of Kafka password, Redis password, WhatsApp token) appears in %s", i, what)
		}
	}
}

// pacerCmd runs the pacer binary with args and stdin in e's environment
// and returns its exit code, combined output and run time; it fails the
// test after limit.
func pacerCmd(t *testing.T, e *e2e, stdin string, limit time.Duration, args ...string) (int, string, time.Duration) {
	t.Helper()
	cmd := exec.Command(pacerBin, args...)
	cmd.Env = e.env()
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(limit):
		cmd.Process.Kill()
		<-done
		t.Fatalf("pacer %s did not exit within %v\n%s", strings.Join(args, " "), limit, out.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), time.Since(start)
}

// TestEndToEndSecure: publish, run and status through SASL_SSL (SCRAM-SHA-512)
// and TLS Redis with an ACL user, every secret from a file: each message is
// delivered exactly once at the paced rate, and no output holds a secret.
func TestEndToEndSecure(t *testing.T) {
	measuredAlone(t)
	const numbers, per, rate, burst = 2, 250, 50.0, 10
	w := newSecureWorld(t, whatsapptest.Config{Rate: rate, Burst: burst}) // as strict as the provider: no spare burst
	t.Logf("kafka: %s; redis: TLS %s, user %s", w.kafka, w.redis.TLSAddr, w.redis.Username)
	lines, keys := campaign(numbers, per, "s")
	code, out, stderr := w.publish(lines, "--partitions", "2")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("published %d, rejected 0", numbers*per)) {
		t.Fatalf("publish: exit %d\n%s%s", code, out, stderr)
	}
	t.Logf("publish: %s", strings.TrimSpace(out))
	w.checkNoSecret(t, "publish's output", out+stderr)

	p := w.run("PACER_WHATSAPP_RATE=50", "PACER_WHATSAPP_BURST=10", "PACER_LOG_LEVEL=debug")
	maddr := p.metricsAddr(t)
	w.waitDelivered(numbers*per, 90*time.Second, p)
	// Exactly once and never throttled; the pacing accuracy itself is
	// TestEndToEndOneProcess's (the transport does not change it).
	for _, k := range keys {
		s := w.fake.Stats()[k]
		t.Logf("number %s: delivered %d, duplicates %d, throttled %d, max in 1s %d, %.1f msgs/s",
			k, s.Delivered, s.Duplicates, s.Throttled, s.Max1s, float64(s.Delivered)/s.Last.Sub(s.First).Seconds())
		if s.Delivered != per || s.Duplicates != 0 || s.Throttled != 0 {
			t.Errorf("number %s: delivered %d, duplicates %d, throttled %d; want %d exactly once, none throttled",
				k, s.Delivered, s.Duplicates, s.Throttled, per)
		}
	}
	if code, body := httpGet(t, "http://"+maddr+"/readyz"); code != 200 {
		t.Errorf("/readyz = %d %q, want 200 (Kafka and Redis answering)", code, body)
	}
	_, metrics := httpGet(t, "http://"+maddr+"/metrics")
	if want := fmt.Sprintf(`pacer_delivered_total{channel="whatsapp"} %d`, numbers*per); !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %s", want)
	}
	w.checkNoSecret(t, "/metrics", metrics)
	code, status, _ := pacerCmd(t, w.e2e, "", time.Minute, "status", "--channel", "whatsapp", "--key", keys[0])
	if code != 0 || !strings.Contains(status, keys[0]) {
		t.Errorf("status through TLS Redis: exit %d\n%s", code, status)
	}
	w.checkNoSecret(t, "status output", status)
	p.stop(t)
	w.checkNoSecret(t, "run's log (debug level)", p.logs())
}

// TestSecureKafkaMechanisms: every SASL mechanism the settings offer, and
// mTLS with a client certificate, publish through the broker.
func TestSecureKafkaMechanisms(t *testing.T) {
	parallel(t)
	w := newSecureWorld(t, whatsapptest.Config{Rate: 10, Burst: 10})
	for _, c := range []struct {
		name string
		set  map[string]string
	}{
		{"PLAIN", map[string]string{"PACER_KAFKA_SASL_MECHANISM": "PLAIN"}},
		{"SCRAM-SHA-256", map[string]string{"PACER_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256"}},
		{"SCRAM-SHA-512", map[string]string{"PACER_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512"}},
		{"mTLS", map[string]string{
			"PACER_KAFKA_BROKERS": w.kafka.MTLSBrokers, "PACER_KAFKA_SASL_MECHANISM": "", "PACER_KAFKA_SASL_USERNAME": "",
			"PACER_KAFKA_SASL_PASSWORD_FILE": "", "PACER_KAFKA_TLS_CERT_FILE": w.kafka.ClientCert, "PACER_KAFKA_TLS_KEY_FILE": w.kafka.ClientKey,
			// the certificate names 127.0.0.1 and localhost
			"PACER_KAFKA_TLS_SERVER_NAME": "localhost",
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			lines, _ := campaign(1, 3, "m")
			code, out, _ := pacerCmd(t, w.with(c.set), lines, time.Minute, "publish", "--channel", "whatsapp", "--topic", w.topic, "-")
			if code != 0 || !strings.Contains(out, "published 3, rejected 0") {
				t.Errorf("exit %d, want 0 and 3 published\n%s", code, out)
			}
			w.checkNoSecret(t, "publish's output", out)
		})
	}
}

// TestSecureKafkaRefused: credentials, certificates and protocols the
// broker refuses end the command at once with a cause naming the setting,
// for publish and for run (which would otherwise retry until
// PACER_KAFKA_STARTUP_TIMEOUT), and never echo the password.
func TestSecureKafkaRefused(t *testing.T) {
	parallel(t)
	w := newSecureWorld(t, whatsapptest.Config{Rate: 10, Burst: 10})
	wrong := "wrong-" + w.prefix
	pwFile := filepath.Join(t.TempDir(), "wrong-password")
	if err := os.WriteFile(pwFile, []byte(wrong), 0o600); err != nil {
		t.Fatal(err)
	}
	w.secrets = append(w.secrets, wrong)
	for _, c := range []struct {
		name, want string
		set        map[string]string
	}{
		{"wrong password", "pacer: kafka: authentication failed (PACER_KAFKA_SASL_*)",
			map[string]string{"PACER_KAFKA_SASL_PASSWORD_FILE": pwFile}},
		{"wrong CA", "pacer: kafka: TLS: certificate signed by unknown authority (PACER_KAFKA_TLS_CA_FILE)",
			map[string]string{"PACER_KAFKA_TLS_CA_FILE": otherCA(t)}},
		{"wrong server name", "pacer: kafka: TLS: the broker's certificate is not valid for kafka.example.com (PACER_KAFKA_TLS_SERVER_NAME)",
			map[string]string{"PACER_KAFKA_TLS_SERVER_NAME": "kafka.example.com"}},
		{"plaintext client, TLS listener", "pacer: kafka: TLS: the broker answered in TLS to a plaintext client (PACER_KAFKA_TLS)",
			map[string]string{"PACER_KAFKA_TLS": "", "PACER_KAFKA_TLS_CA_FILE": ""}},
		// The alert (bad certificate, certificate required) depends on the
		// broker's JVM and TLS version.
		{"no client certificate, mTLS listener", "pacer: kafka: TLS: the broker refused the handshake (tls: … certificate) (PACER_KAFKA_TLS_CERT_FILE, PACER_KAFKA_TLS_KEY_FILE)",
			map[string]string{"PACER_KAFKA_BROKERS": w.kafka.MTLSBrokers, "PACER_KAFKA_SASL_MECHANISM": "", "PACER_KAFKA_SASL_USERNAME": "", "PACER_KAFKA_SASL_PASSWORD_FILE": ""}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := w.with(c.set)
			lines, _ := campaign(1, 1, "r")
			code, out, took := pacerCmd(t, e, lines, 2*time.Minute, "publish", "--channel", "whatsapp", "--topic", w.topic, "-")
			t.Logf("publish: exit %d after %v: %s", code, took.Round(time.Millisecond), strings.TrimSpace(out))
			if code != 1 || !containsParts(out, c.want) {
				t.Errorf("publish: exit %d, want 1 and %q\n%s", code, c.want, out)
			}
			w.checkNoSecret(t, "publish's output", out)

			// A start-up timeout far beyond pacerCmd's limit: run must not wait it out.
			set := map[string]string{"PACER_KAFKA_STARTUP_TIMEOUT": "10m", "PACER_METRICS_ADDR": "127.0.0.1:0"}
			for k, v := range c.set {
				set[k] = v
			}
			code, out, took = pacerCmd(t, w.with(set), "", 2*time.Minute, "run", "--channel", "whatsapp", "--topic", w.topic,
				"--group", "pacer-"+w.prefix)
			t.Logf("run: exit %d after %v", code, took.Round(time.Millisecond))
			if code != 1 || !containsParts(out, c.want) {
				t.Errorf("run: exit %d, want 1 and %q\n%s", code, c.want, out)
			}
			w.checkNoSecret(t, "run's output", out)
		})
	}
}

// containsParts reports whether s holds the parts of want between "…", in
// order.
func containsParts(s, want string) bool {
	for _, part := range strings.Split(want, "…") {
		i := strings.Index(s, part)
		if i < 0 {
			return false
		}
		s = s[i+len(part):]
	}
	return true
}

// TestSecureRedisRefused: a wrong password or an unknown CA ends status and
// run at once with a cause naming the setting (run would otherwise wait for
// Redis, not ready), and never echoes the password.
func TestSecureRedisRefused(t *testing.T) {
	parallel(t)
	w := newSecureWorld(t, whatsapptest.Config{Rate: 10, Burst: 10})
	wrong := "wrong-" + w.prefix
	w.secrets = append(w.secrets, wrong)
	for _, c := range []struct {
		name, want string
		set        map[string]string
	}{
		{"wrong password", "redis: authentication failed (PACER_REDIS_USERNAME and PACER_REDIS_PASSWORD, or the user and password of PACER_REDIS_URL): …WRONGPASS",
			map[string]string{"PACER_REDIS_PASSWORD_FILE": "", "PACER_REDIS_PASSWORD": wrong}},
		{"wrong CA", "redis: TLS: certificate signed by unknown authority (PACER_REDIS_TLS_CA_FILE)",
			map[string]string{"PACER_REDIS_TLS_CA_FILE": otherCA(t)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, _ := pacerCmd(t, w.with(c.set), "", time.Minute, "status", "--channel", "whatsapp")
			t.Logf("status: exit %d: %s", code, strings.TrimSpace(out))
			if code != 1 || !containsParts(out, "pacer: status: "+c.want) {
				t.Errorf("status: exit %d, want 1 and %q\n%s", code, c.want, out)
			}
			w.checkNoSecret(t, "status output", out)
			set := map[string]string{"PACER_METRICS_ADDR": "127.0.0.1:0"}
			for k, v := range c.set {
				set[k] = v
			}
			code, out, _ = pacerCmd(t, w.with(set), "", time.Minute, "run", "--channel", "whatsapp", "--topic", w.topic, "--group", "pacer-"+w.prefix)
			if code != 1 || !containsParts(out, "pacer: "+c.want) {
				t.Errorf("run: exit %d, want 1 and %q\n%s", code, c.want, out)
			}
			w.checkNoSecret(t, "run's output", out)
		})
	}
}
