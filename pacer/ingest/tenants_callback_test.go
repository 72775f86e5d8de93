package ingest_test

import (
	"strings"
	"testing"

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
