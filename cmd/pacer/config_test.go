package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func lookupMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestLoadConfigDefaults(t *testing.T) {
	c, err := loadConfig(lookupMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.KafkaBrokers, ","); got != "127.0.0.1:9092" {
		t.Errorf("KafkaBrokers = %q", got)
	}
	if c.RedisURL != "redis://127.0.0.1:6379/0" || c.MetricsAddr != ":9464" || c.Drain != 30*time.Second ||
		c.MaxAttempts != 5 || c.WhatsApp.Rate != 80 || c.WhatsApp.Burst != 10 ||
		c.WhatsApp.BaseURL != "https://graph.facebook.com" || c.WhatsApp.APIVersion != "v21.0" {
		t.Errorf("defaults = %+v", c)
	}
}

func TestLoadConfigNamesTheBadVariable(t *testing.T) {
	for _, c := range []struct{ name, val string }{
		{"PACER_WHATSAPP_RATE", "0"},
		{"PACER_WHATSAPP_RATE", "-3"},
		{"PACER_WHATSAPP_RATE", "fast"},
		{"PACER_WHATSAPP_RATE", "Inf"},
		{"PACER_WHATSAPP_RATE", "NaN"},
		{"PACER_WHATSAPP_RATE", "1e308"},
		{"PACER_INFLIGHT", "0"},
		{"PACER_WHATSAPP_PAIR_RATE", "-1"},
		{"PACER_WHATSAPP_PAIR_BURST", "-1"},
		{"PACER_REDIS_SENTINEL_MASTER", "mymaster"},
		{"PACER_RETRY_DELAYS", ","},
		{"PACER_AIMD_FLOOR", "20000"},
		{"PACER_FCM_DEVICE_BURST", "0"},
		{"PACER_LEASE_SIZE", "-1"},
		{"PACER_WHATSAPP_BURST", "0"},
		{"PACER_WHATSAPP_BURST", "1.5"},
		{"PACER_REDIS_URL", "http://x"},
		{"PACER_KAFKA_BROKERS", "nohostport"},
		{"PACER_DRAIN", "soon"},
		{"PACER_DRAIN", "0s"},
		{"PACER_MAX_ATTEMPTS", "0"},
		{"PACER_LOG_LEVEL", "loud"},
		{"PACER_LOG_FORMAT", "xml"},
		{"PACER_WHATSAPP_BASE_URL", "graph.facebook.com"},
		{"PACER_REDIS_PREFIX", "a{b}"},
		{"PACER_MAX_TOKEN_WAIT", "0s"},
		{"PACER_RETRY_DELAYS", "5s,-1s"},
		{"PACER_RETRY_DELAYS", "5s,often"},
		{"PACER_UNKNOWN_OUTCOME", "guess"},
		{"PACER_IDEMPOTENCY_TTL", "0s"},
		{"PACER_REDIS_FAILURE", "open"},
		{"PACER_EXPECTED_REPLICAS", "0"},
		{"PACER_AIMD_DECREASE", "1.5"},
		{"PACER_AIMD_FLOOR", "0"},
		{"PACER_AIMD_WINDOW", "0s"},
		{"PACER_AIMD_STEP", "-1"},
		{"PACER_BREAKER_FLOOR_THROTTLES", "0"},
		{"PACER_KAFKA_SESSION_TIMEOUT", "10ms"},
		{"PACER_APNS_RATE", "0"},
		{"PACER_FCM_BURST", "0"},
		{"PACER_SENDGRID_RATE", "x"},
		{"PACER_APNS_BASE_URL", "ftp://x"},
	} {
		t.Run(c.name+"="+c.val, func(t *testing.T) {
			_, err := loadConfig(lookupMap(map[string]string{c.name: c.val}))
			if err == nil || !strings.Contains(err.Error(), c.name) {
				t.Fatalf("error = %v, want one naming %s", err, c.name)
			}
		})
	}
}

// TestRunExitCodes drives main's run: bad settings exit 2 naming the
// variable, and the token never appears in the output.
func TestRunExitCodes(t *testing.T) {
	const secret = "EAAG-very-secret-token"
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		code int
		want string
	}{
		{"no command", nil, nil, 2, "usage"},
		{"unknown command", []string{"fly"}, nil, 2, `unknown command "fly"`},
		{"no channel", []string{"run"}, map[string]string{"PACER_WHATSAPP_TOKEN": secret}, 2, "--channel is required"},
		{"unknown channel", []string{"run", "--channel", "pigeon"}, map[string]string{"PACER_WHATSAPP_TOKEN": secret}, 2, `unknown channel "pigeon"`},
		{"missing token", []string{"run", "--channel", "whatsapp"}, nil, 2, "PACER_WHATSAPP_TOKEN"},
		{"bad rate", []string{"run", "--channel", "whatsapp"}, map[string]string{"PACER_WHATSAPP_TOKEN": secret, "PACER_WHATSAPP_RATE": "0"}, 2, "PACER_WHATSAPP_RATE"},
		{"bad metrics addr", []string{"run", "--channel", "whatsapp"}, map[string]string{"PACER_WHATSAPP_TOKEN": secret, "PACER_METRICS_ADDR": "256.0.0.1:99999", "PACER_REDIS_URL": "redis://127.0.0.1:1/0"}, 2, "PACER_METRICS_ADDR"},
		{"publish without file", []string{"publish", "--channel", "whatsapp"}, nil, 2, "exactly one FILE"},
		{"apns without key", []string{"run", "--channel", "apns"}, map[string]string{"PACER_APNS_KEY_ID": "K", "PACER_APNS_TEAM_ID": "T"}, 2, "PACER_APNS_KEY_FILE"},
		{"apns key unreadable", []string{"run", "--channel", "apns"}, map[string]string{"PACER_APNS_KEY_ID": "K", "PACER_APNS_TEAM_ID": "T", "PACER_APNS_KEY_FILE": "/nonexistent/secret-path.p8"}, 2, "PACER_APNS_KEY_FILE"},
		{"fcm without credentials", []string{"run", "--channel", "fcm"}, nil, 2, "PACER_FCM_CREDENTIALS_FILE"},
		{"fcm credentials not JSON", []string{"run", "--channel", "fcm"}, map[string]string{"PACER_FCM_CREDENTIALS_FILE": "/etc/hostname"}, 2, "PACER_FCM_CREDENTIALS_FILE"},
		{"apns short key id", []string{"run", "--channel", "apns"}, map[string]string{"PACER_APNS_KEY_ID": "x", "PACER_APNS_TEAM_ID": "TEAM123456", "PACER_APNS_KEY_FILE": "/etc/hostname"}, 2, "PACER_APNS_"},
		{"sendgrid bad keys", []string{"run", "--channel", "sendgrid"}, map[string]string{"PACER_SENDGRID_API_KEYS": "main=SG.secret,broken"}, 2, "PACER_SENDGRID_API_KEYS"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), c.args, strings.NewReader(""), &out, &errb, lookupMap(c.env))
			all := out.String() + errb.String()
			if code != c.code || !strings.Contains(all, c.want) {
				t.Fatalf("exit %d, output %q; want exit %d mentioning %q", code, all, c.code, c.want)
			}
			if strings.Contains(all, secret) {
				t.Fatalf("output contains the token: %q", all)
			}
		})
	}
}
