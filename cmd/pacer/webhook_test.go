package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
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

	c, key, err := loadWebhookConfig(env("PACER_WEBHOOK_WHATSAPP_APP_SECRET_FILE", secretFile,
		"PACER_WEBHOOK_WHATSAPP_VERIFY_TOKEN", "tok", "PACER_WEBHOOK_SENDGRID_PUBLIC_KEY_FILE", keyFile))
	if err != nil {
		t.Fatal(err)
	}
	if c.WhatsAppAppSecret != "app-secret" || key == nil || !key.Equal(&k.PublicKey) || c.Addr != ":8090" || !c.Apply {
		t.Errorf("config %+v, key %v: want the secret and key read from their files and the defaults", c, key)
	}

	for _, tc := range []struct {
		env  func(string) (string, bool)
		want []string
	}{
		{env(), []string{"PACER_WEBHOOK_WHATSAPP_APP_SECRET: set it, PACER_WEBHOOK_SENDGRID_PUBLIC_KEY, or both"}},
		{env("PACER_WEBHOOK_WHATSAPP_APP_SECRET", "s"), []string{"PACER_WEBHOOK_WHATSAPP_VERIFY_TOKEN: required"}},
		{env("PACER_WEBHOOK_SENDGRID_PUBLIC_KEY", "!!", "PACER_WEBHOOK_SENDGRID_MAX_AGE", "0s", "PACER_WEBHOOK_ADDR", "nowhere"),
			[]string{"PACER_WEBHOOK_SENDGRID_PUBLIC_KEY: neither PEM nor base64", "PACER_WEBHOOK_SENDGRID_MAX_AGE: must be > 0", "PACER_WEBHOOK_ADDR: \"nowhere\""}},
		{env("PACER_WEBHOOK_WHATSAPP_APP_SECRET", "s", "PACER_WEBHOOK_WHATSAPP_APP_SECRET_FILE", secretFile, "PACER_WEBHOOK_WHATSAPP_VERIFY_TOKEN", "t"),
			[]string{"PACER_WEBHOOK_WHATSAPP_APP_SECRET and PACER_WEBHOOK_WHATSAPP_APP_SECRET_FILE: set one of them, not both"}},
	} {
		_, _, err := loadWebhookConfig(tc.env)
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
