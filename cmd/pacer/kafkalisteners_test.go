package main

// Kafka settings that do not match the listener, against the real broker's
// PLAINTEXT, SASL_SSL and SSL (mTLS) listeners (scripts/kafka.sh).

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/internal/testenv"
)

// TestKafkaListenerMismatch: TLS or SASL on one side only stops publish,
// run, ingest and webhook within seconds (run's start-up timeout is 10
// minutes here), with exit status 1 and an error naming the setting that
// probably does not match, never the password.
func TestKafkaListenerMismatch(t *testing.T) {
	plain := testenv.KafkaBrokers(t)
	sk := testenv.KafkaSecure(t)
	password := testenv.Password(t, sk.PasswordFile)
	tenants := filepath.Join(t.TempDir(), "tenants.json")
	if err := os.WriteFile(tenants, []byte(`{"tenants":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	scram := map[string]string{"PACER_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "PACER_KAFKA_SASL_USERNAME": sk.Username,
		"PACER_KAFKA_SASL_PASSWORD_FILE": sk.PasswordFile}
	tlsOn := map[string]string{"PACER_KAFKA_TLS": "true", "PACER_KAFKA_TLS_CA_FILE": sk.CAFile}
	mtls := map[string]string{"PACER_KAFKA_TLS_CERT_FILE": sk.ClientCert, "PACER_KAFKA_TLS_KEY_FILE": sk.ClientKey,
		"PACER_KAFKA_TLS_SERVER_NAME": "localhost"} // the certificate names 127.0.0.1 and localhost
	cases := []struct {
		name, brokers string
		set           []map[string]string
		want          string // the cause and the setting named
	}{
		{"TLS, PLAINTEXT listener", plain, []map[string]string{tlsOn},
			"TLS: the broker closed the connection during the handshake (a plaintext or SASL_PLAINTEXT listener) (PACER_KAFKA_TLS)"},
		{"TLS and SCRAM, PLAINTEXT listener", plain, []map[string]string{tlsOn, scram},
			"TLS: the broker closed the connection during the handshake (a plaintext or SASL_PLAINTEXT listener) (PACER_KAFKA_TLS)"},
		{"SCRAM, PLAINTEXT listener", plain, []map[string]string{scram},
			"SASL: the listener does not take SASL (a PLAINTEXT or SSL listener) (PACER_KAFKA_SASL_MECHANISM)"},
		{"SCRAM, SSL listener", sk.MTLSBrokers, []map[string]string{tlsOn, mtls, scram},
			"SASL: the listener does not take SASL (a PLAINTEXT or SSL listener) (PACER_KAFKA_SASL_MECHANISM)"},
		{"TLS without SASL, SASL_SSL listener", sk.SASLBrokers, []map[string]string{tlsOn},
			"(a SASL_SSL or SASL_PLAINTEXT listener) (PACER_KAFKA_SASL_MECHANISM)"},
		{"plaintext and SCRAM, SASL_SSL listener", sk.SASLBrokers, []map[string]string{scram},
			"TLS: the broker answered in TLS to a plaintext client (PACER_KAFKA_TLS)"},
	}
	topic := "pacer-mismatch-" + strings.ReplaceAll(t.Name(), "/", "-")
	commands := []struct {
		name  string
		args  []string
		stdin string
		env   map[string]string
	}{
		{"publish", []string{"publish", "--channel", "whatsapp", "--topic", topic, "-"},
			`{"id":"m1","key":"15550001","to":"15550001","payload":{"type":"text","text":{"body":"m"}}}` + "\n", nil},
		{"run", []string{"run", "--channel", "whatsapp", "--topic", topic, "--group", topic}, "",
			map[string]string{"PACER_WHATSAPP_TOKEN": "t", "PACER_METRICS_ADDR": "127.0.0.1:0", "PACER_KAFKA_STARTUP_TIMEOUT": "10m"}},
		{"ingest", []string{"ingest"}, "", map[string]string{"PACER_INGEST_TENANTS": tenants, "PACER_INGEST_ADDR": "127.0.0.1:0"}},
		{"webhook", []string{"webhook"}, "", map[string]string{"PACER_WEBHOOK_WHATSAPP_APP_SECRET": "s",
			"PACER_WEBHOOK_WHATSAPP_VERIFY_TOKEN": "v", "PACER_WEBHOOK_ADDR": "127.0.0.1:0", "PACER_WEBHOOK_APPLY": "false"}},
	}
	const bound = 15 * time.Second // each takes well under a second; a loaded machine gets ample room
	for _, c := range cases {
		for _, cmd := range commands {
			t.Run(c.name+"/"+cmd.name, func(t *testing.T) {
				env := map[string]string{"PACER_KAFKA_BROKERS": c.brokers, "PACER_REDIS_URL": testenv.RedisURL(t)}
				for _, m := range append(c.set, cmd.env) {
					for k, v := range m {
						env[k] = v
					}
				}
				// Past the bound the command is stopped: a command still
				// waiting for Kafka then fails the test by its time.
				ctx, cancel := context.WithTimeout(t.Context(), 2*bound)
				defer cancel()
				var out, errb strings.Builder
				start := time.Now()
				code := run(ctx, cmd.args, strings.NewReader(cmd.stdin), &out, &errb, lookupMap(env))
				took := time.Since(start)
				got := out.String() + errb.String()
				t.Logf("exit %d after %v: %s", code, took.Round(time.Millisecond), lastLine(got))
				if code != 1 || !strings.Contains(got, "pacer: kafka: ") || !strings.Contains(got, c.want) {
					t.Errorf("exit %d, want 1 and %q\n%s", code, c.want, got)
				}
				if took > bound {
					t.Errorf("took %v, want < %v", took.Round(time.Millisecond), bound)
				}
				if strings.Contains(got, password) {
					t.Error("the output holds the SASL password")
				}
			})
		}
	}
}

// TestIngestStartsWithKafkaMatchingOrDown: the start-up check stops
// pacer ingest on a refusal only: settings that match the SASL_SSL listener
// start it, and brokers that are down start it too, with a warning (it
// serves, not ready, until they answer).
func TestIngestStartsWithKafkaMatchingOrDown(t *testing.T) {
	sk := testenv.KafkaSecure(t)
	tenants := filepath.Join(t.TempDir(), "tenants.json")
	if err := os.WriteFile(tenants, []byte(`{"tenants":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		set  map[string]string
		warn bool
	}{
		{"SCRAM over TLS, SASL_SSL listener", map[string]string{"PACER_KAFKA_BROKERS": sk.SASLBrokers, "PACER_KAFKA_TLS": "true",
			"PACER_KAFKA_TLS_CA_FILE": sk.CAFile, "PACER_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
			"PACER_KAFKA_SASL_USERNAME": sk.Username, "PACER_KAFKA_SASL_PASSWORD_FILE": sk.PasswordFile}, false},
		{"nothing listens", map[string]string{"PACER_KAFKA_BROKERS": "127.0.0.1:1"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{"PACER_REDIS_URL": testenv.RedisURL(t), "PACER_INGEST_TENANTS": tenants, "PACER_INGEST_ADDR": "127.0.0.1:0"}
			for k, v := range c.set {
				env[k] = v
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var logs testenv.Buffer
			done := make(chan int, 1)
			go func() { done <- run(ctx, []string{"ingest"}, strings.NewReader(""), &logs, &logs, lookupMap(env)) }()
			listening := func() bool { return strings.Contains(logs.String(), `"msg":"ingest listening"`) }
			for !listening() {
				select {
				case code := <-done:
					t.Fatalf("pacer ingest exited %d before listening:\n%s", code, logs.String())
				case <-time.After(50 * time.Millisecond):
				}
			}
			cancel()
			if code := <-done; code != 0 {
				t.Errorf("exit %d after a stop, want 0:\n%s", code, logs.String())
			}
			warned := strings.Contains(logs.String(), `"msg":"kafka not reachable at start-up"`) &&
				strings.Contains(logs.String(), "nothing listens at the seed brokers")
			if warned != c.warn {
				t.Errorf("warned that Kafka is not reachable: %v, want %v:\n%s", warned, c.warn, logs.String())
			}
		})
	}
}

// lastLine returns the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
