package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/redis/go-redis/v9"
)

func TestWebhookConfig(t *testing.T) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	keyFile := filepath.Join(t.TempDir(), "sg.pem")
	os.WriteFile(keyFile, []byte("-----BEGIN PUBLIC KEY-----\n"+base64.StdEncoding.EncodeToString(der)+"\n-----END PUBLIC KEY-----\n"), 0o600)
	secretFile := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secretFile, []byte("app-secret\n"), 0o600)
	env := func(kv ...string) func(string) (string, bool) {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}

	c, key, _, err := loadWebhookConfig(env("PACER_WEBHOOK_WHATSAPP_APP_SECRET_FILE", secretFile,
		"PACER_WEBHOOK_WHATSAPP_VERIFY_TOKEN", "tok", "PACER_WEBHOOK_SENDGRID_PUBLIC_KEY_FILE", keyFile))
	if err != nil {
		t.Fatal(err)
	}
	if c.WhatsAppAppSecret != "app-secret" || key == nil || !key.Equal(&k.PublicKey) || c.Addr != ":8090" || !c.Apply || c.QualityPause || c.Throttles {
		t.Errorf("config %+v, key %v: want the secret and key read from their files and the defaults", c, key)
	}

	for _, tc := range []struct {
		env  func(string) (string, bool)
		want []string
	}{
		{env(), []string{"PACER_WEBHOOK_WHATSAPP_APP_SECRET: set it, PACER_WEBHOOK_SENDGRID_PUBLIC_KEY, PACER_WEBHOOK_GENERIC_SECRET, or PACER_CREDENTIALS_DIR"}},
		{env("PACER_WEBHOOK_GENERIC_SECRET", "whsec_"+base64.StdEncoding.EncodeToString([]byte("app-secret"))),
			[]string{"PACER_WEBHOOK_GENERIC_SECRET: secret 1 of 1: 10 bytes once decoded, want 24 to 64"}},
		{env("PACER_WEBHOOK_GENERIC_SECRET", "app-secret"), []string{"PACER_WEBHOOK_GENERIC_SECRET: secret 1 of 1: not whsec_ followed by base64"}},
		{env("PACER_WEBHOOK_WHATSAPP_APP_SECRET", "s"), []string{"PACER_WEBHOOK_WHATSAPP_VERIFY_TOKEN: required"}},
		{env("PACER_WEBHOOK_SENDGRID_PUBLIC_KEY", "!!", "PACER_WEBHOOK_SENDGRID_MAX_AGE", "0s", "PACER_WEBHOOK_ADDR", "nowhere"),
			[]string{"PACER_WEBHOOK_SENDGRID_PUBLIC_KEY: neither PEM nor base64", "PACER_WEBHOOK_SENDGRID_MAX_AGE: must be > 0", "PACER_WEBHOOK_ADDR: \"nowhere\""}},
		{env("PACER_WEBHOOK_WHATSAPP_APP_SECRET", "s", "PACER_WEBHOOK_WHATSAPP_APP_SECRET_FILE", secretFile, "PACER_WEBHOOK_WHATSAPP_VERIFY_TOKEN", "t"),
			[]string{"PACER_WEBHOOK_WHATSAPP_APP_SECRET and PACER_WEBHOOK_WHATSAPP_APP_SECRET_FILE: set one of them, not both"}},
		{env("PACER_WEBHOOK_SENDGRID_PUBLIC_KEY_FILE", keyFile, "PACER_WEBHOOK_QUALITY_PAUSE", "maybe"), []string{"PACER_WEBHOOK_QUALITY_PAUSE"}},
		{env("PACER_WEBHOOK_SENDGRID_PUBLIC_KEY_FILE", keyFile, "PACER_WEBHOOK_QUALITY_PAUSE", "true", "PACER_WEBHOOK_APPLY", "false"),
			[]string{"PACER_WEBHOOK_QUALITY_PAUSE: needs PACER_WEBHOOK_APPLY=true"}},
		{env("PACER_WEBHOOK_SENDGRID_PUBLIC_KEY_FILE", keyFile, "PACER_WEBHOOK_THROTTLES", "true", "PACER_WEBHOOK_APPLY", "false"),
			[]string{"PACER_WEBHOOK_THROTTLES: needs PACER_WEBHOOK_APPLY=true"}},
	} {
		_, _, _, err := loadWebhookConfig(tc.env)
		if err == nil {
			t.Errorf("want errors %q, got none", tc.want)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q lacks %q", err, w)
			}
		}
		if strings.Contains(err.Error(), "app-secret") {
			t.Errorf("error %q shows the secret", err)
		}
	}
}

// Secrets per sender come from the credentials directory:
// webhook-whatsapp.<phone-number ID> and webhook-sendgrid.<pacing key>;
// a missing or unusable file is no secret, and a name with a path
// separator is never read.
func TestWebhookDirSecrets(t *testing.T) {
	top := t.TempDir()
	dir := filepath.Join(top, "creds")
	os.Mkdir(dir, 0o700)
	os.WriteFile(filepath.Join(top, "webhook-whatsapp.9"), []byte("outside"), 0o600)
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	os.WriteFile(filepath.Join(dir, "webhook-whatsapp.1065"), []byte("own-secret\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "webhook-sendgrid.news"), []byte(base64.StdEncoding.EncodeToString(der)), 0o600)
	os.WriteFile(filepath.Join(dir, "webhook-sendgrid.broken"), []byte("not a key"), 0o600)
	var logs strings.Builder
	d := dirSecrets{dir: dir, log: slog.New(slog.NewTextHandler(&logs, nil))}
	if s, ok := d.WhatsAppAppSecret("1065"); !ok || string(s) != "own-secret" {
		t.Errorf("1065: %q %v, want own-secret", s, ok)
	}
	if _, ok := d.WhatsAppAppSecret("2077"); ok {
		t.Error("2077 has no file but a secret was found")
	}
	if got, ok := d.SendGridKey("news"); !ok || !got.Equal(&k.PublicKey) {
		t.Errorf("news: %v %v, want its key", got, ok)
	}
	if _, ok := d.SendGridKey("broken"); ok || !strings.Contains(logs.String(), "webhook-sendgrid.broken") || strings.Contains(logs.String(), "not a key") {
		t.Errorf("broken: found %v; log %q: want none, the file named, its content not", ok, logs.String())
	}
	if _, ok := d.WhatsAppAppSecret("x/../../webhook-whatsapp.9"); ok {
		t.Error("a name with a path separator was read")
	}
	_, _, _, err := loadWebhookConfig(func(k string) (string, bool) {
		if k == "PACER_CREDENTIALS_DIR" {
			return dir, true
		}
		return "", false
	})
	if err != nil {
		t.Errorf("the credentials directory alone: %v, want no error", err)
	}
}

// PACER_WEBHOOK_GENERIC_SECRET_FILE holds the generic route's secrets, one
// per line while one is rotated: each becomes an HMAC key.
func TestWebhookGenericSecretFile(t *testing.T) {
	k1, k2 := bytes.Repeat([]byte{1}, 24), bytes.Repeat([]byte{2}, 32)
	file := filepath.Join(t.TempDir(), "generic")
	os.WriteFile(file, []byte("whsec_"+base64.StdEncoding.EncodeToString(k1)+"\nwhsec_"+base64.StdEncoding.EncodeToString(k2)+"\n"), 0o600)
	_, _, keys, err := loadWebhookConfig(func(k string) (string, bool) {
		if k == "PACER_WEBHOOK_GENERIC_SECRET_FILE" {
			return file, true
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || !bytes.Equal(keys[0], k1) || !bytes.Equal(keys[1], k2) {
		t.Errorf("keys %x, want %x and %x", keys, k1, k2)
	}
}

// TestWebhookThrottlesWiring: `pacer webhook` applies a WhatsApp status's
// throttle with the key policy `pacer run` of WhatsApp reads (its rate,
// burst and AIMD settings) and the Cloud API's scopes; another channel's
// codes are no throttle.
func TestWebhookThrottlesWiring(t *testing.T) {
	cfg, err := loadConfig(lookupMap(map[string]string{"PACER_WHATSAPP_RATE": "200", "PACER_WHATSAPP_BURST": "20",
		"PACER_AIMD_DECREASE": "0.5", "PACER_MAX_COOLDOWN": "10m"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // not contacted: no per-key limit read
	defer rdb.Close()
	th := webhookThrottles(cfg, rdb, bucket.NewKeys(cfg.RedisPrefix))
	pol, ok := th.Policy["whatsapp"].(control.OverridePolicy)
	if !ok || pol.Base.Limit != (bucket.Limit{PerSecond: 200, Burst: 20}) || pol.Base.AIMD.Decrease != 0.5 || pol.Base.AIMD.MaxCooldown != 10*time.Minute {
		t.Errorf("whatsapp policy %+v; want run's: 200/s burst 20, decrease 0.5, max cooldown 10m, under the limits set at run time", th.Policy["whatsapp"])
	}
	if scope, _, ok := th.Throttle("whatsapp", 130429); !ok || scope != channels.ScopeKey {
		t.Errorf("whatsapp 130429: %v %v; want a key throttle", scope, ok)
	}
	if scope, _, ok := th.Throttle("whatsapp", 131056); !ok || scope != channels.ScopePair {
		t.Errorf("whatsapp 131056: %v %v; want a pair throttle", scope, ok)
	}
	if _, _, ok := th.Throttle("sendgrid", 130429); ok {
		t.Errorf("sendgrid 130429: a throttle; want none")
	}
}
