package ingest_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pacerhq/pacer/pacer/ingest"
)

// A tenant's callback_url and callback_secret_file: read, looked up by
// id, and refused with the field named when wrong.
func TestTenantsFileCallbacks(t *testing.T) {
	const base = `"key_sha256":["9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"],"requests_per_second":1,"messages_per_day":1,"channels":["whatsapp"]`
	ts, err := ingest.ParseTenants([]byte(`{"tenants":[{"id":"acme",`+base+`,"callback_url":"https://acme.example/pacer","callback_secret_file":"/run/secrets/acme"},{"id":"bolt","key_sha256":["`+strings.Repeat("a", 64)+`"],"requests_per_second":1,"messages_per_day":1,"channels":["whatsapp"]}]}`), []string{"whatsapp"})
	if err != nil {
		t.Fatal(err)
	}
	if a := ts.ByID("acme"); a == nil || a.CallbackURL != "https://acme.example/pacer" || a.CallbackSecretFile != "/run/secrets/acme" {
		t.Errorf("ByID(acme) = %+v", a)
	}
	if b := ts.ByID("bolt"); b == nil || b.CallbackURL != "" {
		t.Errorf("ByID(bolt) = %+v, want a tenant without callback", b)
	}
	if ts.ByID("nobody") != nil {
		t.Error("ByID(nobody) found a tenant")
	}
	for _, c := range []struct{ fields, want string }{
		{`"callback_url":"acme.example/pacer","callback_secret_file":"/s"`, `tenant 1 ("acme"): callback_url: must be an absolute http or https URL`},
		{`"callback_url":"ftp://acme.example/","callback_secret_file":"/s"`, `callback_url: must be an absolute http or https URL`},
		{`"callback_url":"https://acme.example/"`, `tenant 1 ("acme"): callback_secret_file: required with callback_url`},
		{`"callback_secret_file":"/s"`, `tenant 1 ("acme"): callback_secret_file: given without callback_url`},
	} {
		_, err := ingest.ParseTenants([]byte(`{"tenants":[{"id":"acme",`+base+`,`+c.fields+`}]}`), []string{"whatsapp"})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.fields, err, c.want)
		}
	}
}

// secretCheck stands for callback.ReadSecrets: the file must exist and
// hold a whsec_ secret; the error names the file, never its content.
func secretCheck(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("callback secret file: %w", err)
	}
	if !strings.HasPrefix(strings.TrimSpace(string(b)), "whsec_") {
		return fmt.Errorf("callback secret file %s: secret 1 of 1: not whsec_ followed by base64", path)
	}
	return nil
}

// A callback_secret_file that does not exist or holds no whsec_ secret
// fails the tenants file's load, naming the tenant and the field, never
// the file's content; on reload the tenants before stay in force (logged)
// until the secret file is fixed, which is picked up without the tenants
// file changing.
func TestTenantsFileChecksCallbackSecret(t *testing.T) {
	dir := t.TempDir()
	good, bad, missing := filepath.Join(dir, "good"), filepath.Join(dir, "bad"), filepath.Join(dir, "missing")
	os.WriteFile(good, []byte("whsec_"+strings.Repeat("A", 32)+"\n"), 0o600)
	os.WriteFile(bad, []byte("hunter2-not-a-secret\n"), 0o600)
	file := func(secret string) []byte {
		return []byte(`{"tenants":[{"id":"acme","key_sha256":["` + digest(acmeKey) + `"],"requests_per_second":1,"messages_per_day":1,` +
			`"channels":["whatsapp"],"callback_url":"https://acme.example/pacer","callback_secret_file":"` + secret + `"}]}`)
	}
	path := filepath.Join(dir, "tenants.json")
	for _, c := range []struct{ secret, want string }{
		{missing, `tenant "acme": callback_secret_file: callback secret file: open ` + missing + `: no such file or directory`},
		{bad, `tenant "acme": callback_secret_file: callback secret file ` + bad + `: secret 1 of 1: not whsec_`},
	} {
		os.WriteFile(path, file(c.secret), 0o600)
		_, err := ingest.LoadTenantFileChecked(path, []string{"whatsapp"}, secretCheck)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("load with %s: %v; want %q, never the file's content", c.secret, err, c.want)
		}
	}

	os.WriteFile(path, file(good), 0o600)
	tf, err := ingest.LoadTenantFileChecked(path, []string{"whatsapp"}, secretCheck)
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return buf.Write(p)
		}), nil))
		ctx, cancel := context.WithCancel(t.Context())
		go tf.Watch(ctx, time.Second, log)
		os.WriteFile(path, bytes.Replace(file(missing), []byte(digest(acmeKey)), []byte(digest("new-key")), 1), 0o600)
		time.Sleep(3*time.Second + time.Second/2)
		mu.Lock()
		out := buf.String()
		mu.Unlock()
		if tf.Tenants().Lookup(acmeKey) == nil || tf.Tenants().Lookup("new-key") != nil {
			t.Errorf("a tenants file with a missing callback_secret_file was loaded")
		}
		if !strings.Contains(out, "tenants file not reloaded") || !strings.Contains(out, `callback_secret_file`) {
			t.Errorf("log lacks the refused reload naming callback_secret_file:\n%s", out)
		}
		// Fixed in place: loaded at the next poll.
		os.WriteFile(missing, []byte("whsec_"+strings.Repeat("B", 32)), 0o600)
		time.Sleep(2 * time.Second)
		cancel()
		synctest.Wait()
		if tf.Tenants().Lookup("new-key") == nil {
			t.Errorf("the tenants file was not loaded once its callback_secret_file was fixed")
		}
	})
}
