package ingest_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/pacerhq/pacer/pacer/message"
)

// get sends GET path with key and checks the answer against openapi.yaml.
func (e *env) get(key, path string) answer {
	e.t.Helper()
	mk := func() *http.Request {
		r, _ := http.NewRequest("GET", e.url+path, nil)
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		return r
	}
	return e.send(mk)
}

// TestGetMessage: a tenant's GET of an id it published answers the
// message (state, provider message id, attempts) with the RateLimit
// fields of a publish; another tenant's GET of that id, and a GET of an
// unknown id, are 404 problem+json, never 403; without the channel, 400.
func TestGetMessage(t *testing.T) {
	e := newEnv(t, opts{})
	if a := e.do(acmeKey, "whatsapp", "application/json", `{"id":"m-own","key":"106","to":"15550001"}`); a.status != 202 {
		t.Fatalf("publish: %d %s", a.status, a.body)
	}
	// The ledger reads the clock of Redis TIME: bring the test's forward.
	e.mr.SetTime(time.Now())
	b := ledger.NewBatcher(e.rdb, bucket.NewKeys(""), ledger.BatchConfig{FlushInterval: time.Millisecond})
	defer b.Close(t.Context())
	if got, _, err := b.Claim(t.Context(), "whatsapp", "106", "m-own", "pacer-1", false); err != nil || got != ledger.Claimed {
		t.Fatalf("claim: %v, %v", got, err)
	}
	b.Attempted(t.Context(), "whatsapp", "106", "m-own", ledger.Attempt{Outcome: "delivered"})
	b.Delivered(t.Context(), "whatsapp", "106", "m-own", "wamid.1")
	if err := b.Written(t.Context()); err != nil {
		t.Fatal(err)
	}

	a := e.get(acmeKey, "/v1/messages/m-own?channel=whatsapp")
	var m message.Message
	if a.status != 200 || json.Unmarshal(a.body, &m) != nil {
		t.Fatalf("own id: %d %s; want 200 and the message", a.status, a.body)
	}
	if m.State != "delivered" || m.ProviderMessageID != "wamid.1" || m.Key != "106" || len(m.Attempts) != 1 || m.Attempts[0].Outcome != "delivered" {
		t.Errorf("own id: %+v; want delivered wamid.1 with one attempt", m)
	}
	if a.h.Get("RateLimit") == "" || !strings.Contains(a.h.Get("RateLimit-Policy"), `"tenant"`) {
		t.Errorf("own id: RateLimit %q, RateLimit-Policy %q; want the tenant's policy as on publish", a.h.Get("RateLimit"), a.h.Get("RateLimit-Policy"))
	}
	for _, c := range []struct{ key, path, who string }{
		{otherKey, "/v1/messages/m-own?channel=whatsapp", "another tenant's id"},
		{otherKey, "/v1/messages/m-own?channel=sendgrid", "another tenant's id on its own channel"},
		{acmeKey, "/v1/messages/m-never?channel=whatsapp", "an unknown id"},
	} {
		a := e.get(c.key, c.path)
		if a.status != 404 || a.h.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(a.body), "unknown-message") {
			t.Errorf("%s: %d %s %s; want 404 unknown-message problem+json", c.who, a.status, a.h.Get("Content-Type"), a.body)
		}
	}
	if a := e.get(acmeKey, "/v1/messages/m-own"); a.status != 400 || !strings.Contains(string(a.body), `"name":"channel"`) {
		t.Errorf("no channel: %d %s; want 400 naming channel", a.status, a.body)
	}
	if a := e.get("", "/v1/messages/m-own?channel=whatsapp"); a.status != 401 {
		t.Errorf("no key: %d %s; want 401", a.status, a.body)
	}
}
