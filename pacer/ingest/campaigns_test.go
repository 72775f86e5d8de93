package ingest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/ingest"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/pacerhq/pacer/pacer/message"
)

// twoTenants is a tenants file of acme and other, both on whatsapp.
func twoTenants(burst int, rate float64) string {
	return fmt.Sprintf(`{"tenants":[
 {"id":"acme","key_sha256":[%q],"requests_per_second":%v,"burst":%d,"messages_per_day":100000,"channels":["whatsapp"]},
 {"id":"other","key_sha256":[%q],"requests_per_second":%v,"burst":%d,"messages_per_day":100000,"channels":["whatsapp"]}]}`,
		digest(acmeKey), rate, burst, digest(otherKey), rate, burst)
}

// post sends POST path with key and no body, and checks the answer
// against openapi.yaml.
func (e *env) post(key, path string) answer {
	e.t.Helper()
	return e.send(func() *http.Request {
		r, _ := http.NewRequest("POST", e.url+path, nil)
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		return r
	})
}

// pacingKey is the pacing key a tenant's publish uses: each tenant its
// own (a pacing key belongs to its first tenant).
func pacingKey(key string) string {
	if key == acmeKey {
		return "106540352242922"
	}
	return "106540352242923"
}

// publish publishes envelopes of campaign c with ids to whatsapp as key's
// tenant, on its pacingKey, and fails the test unless every one is
// accepted.
func (e *env) publish(key, c string, ids ...string) {
	e.t.Helper()
	var lines []string
	for _, id := range ids {
		lines = append(lines, fmt.Sprintf(`{"id":%q,"key":%q,"to":"15551234567","campaign":%q}`, id, pacingKey(key), c))
	}
	if a := e.do(key, "whatsapp", "application/x-ndjson", strings.Join(lines, "\n")); a.status != 202 || strings.Contains(string(a.body), `"rejected":[{`) {
		e.t.Fatalf("publish of campaign %s as %s: %d %s; want 202, every envelope accepted", c, key, a.status, a.body)
	}
}

// listed returns the campaigns a list answered, by name.
func listed(t *testing.T, a answer) map[string]control.Status {
	t.Helper()
	if a.status != 200 {
		t.Fatalf("list: %d %s; want 200", a.status, a.body)
	}
	var l struct{ Campaigns []control.Status }
	if err := json.Unmarshal(a.body, &l); err != nil {
		t.Fatalf("list %s: %v", a.body, err)
	}
	out := map[string]control.Status{}
	for _, s := range l.Campaigns {
		out[s.Campaign] = s
	}
	return out
}

// TestTenantCampaigns: two tenants of one channel on a real redis-server.
// Each lists, reads and controls only the campaigns it published; the
// other's campaign, one published outside the API and one never published
// are alike 404, never 403; pause, cancel and resume reach control.Store
// as `pacer campaign` would set them; publishing to a campaign another
// owns is 409 naming the field campaign, and nothing is produced.
func TestTenantCampaigns(t *testing.T) {
	e := newEnv(t, opts{realRedis: true, tenants: twoTenants(100, 100)})
	ctx := t.Context()
	e.publish(acmeKey, "spring", "a-1", "a-2")
	e.publish(otherKey, "fall", "o-1")
	// A campaign published by `pacer publish` (no tenant) belongs to nobody.
	if err := e.ctl.AddPublished(ctx, "whatsapp", map[string]int64{"ops": 3}); err != nil {
		t.Fatal(err)
	}

	// Lists: each its own, with the counters of `pacer campaign status`.
	acme := listed(t, e.get(acmeKey, "/v1/channels/whatsapp/campaigns"))
	if len(acme) != 1 || acme["spring"].Published != 2 || acme["spring"].State != "running" || acme["spring"].Tenant != "acme" {
		t.Errorf("acme's list %+v; want spring alone, running, published 2, tenant acme", acme)
	}
	other := listed(t, e.get(otherKey, "/v1/channels/whatsapp/campaigns"))
	if len(other) != 1 || other["fall"].Published != 1 || other["fall"].Tenant != "other" {
		t.Errorf("other's list %+v; want fall alone, published 1", other)
	}

	// One campaign: the very JSON `pacer campaign status --json` prints.
	a := e.get(acmeKey, "/v1/channels/whatsapp/campaigns/spring")
	st, known, err := e.ctl.Find(ctx, "whatsapp", "spring")
	if err != nil || !known {
		t.Fatalf("control.Find(spring): %v, known %v", err, known)
	}
	want, _ := json.Marshal(st.JSON())
	if a.status != 200 || strings.TrimSpace(string(a.body)) != string(want) {
		t.Errorf("acme's spring: %d %s; want 200 %s", a.status, a.body, want)
	}
	if !strings.Contains(a.h.Get("RateLimit-Policy"), `"tenant";q=100;w=1`) || !strings.HasPrefix(a.h.Get("RateLimit"), `"tenant";r=`) {
		t.Errorf("acme's spring: RateLimit-Policy %q, RateLimit %q; want the tenant's policy as on publish", a.h.Get("RateLimit-Policy"), a.h.Get("RateLimit"))
	}

	// Another's, nobody's and an unknown campaign: 404 alike.
	notMine := []struct{ key, campaign, who string }{
		{otherKey, "spring", "other reads acme's spring"},
		{acmeKey, "fall", "acme reads other's fall"},
		{acmeKey, "ops", "acme reads ops, published outside the API"},
		{acmeKey, "never", "acme reads a campaign never published"},
	}
	for _, c := range notMine {
		a := e.get(c.key, "/v1/channels/whatsapp/campaigns/"+c.campaign)
		if a.status != 404 || a.h.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(a.body), "unknown-campaign") {
			t.Errorf("%s: %d %s; want 404 unknown-campaign", c.who, a.status, a.body)
		}
		for _, verb := range []string{"pause", "resume", "cancel"} {
			a := e.post(c.key, "/v1/channels/whatsapp/campaigns/"+c.campaign+"/"+verb)
			if a.status != 404 || !strings.Contains(string(a.body), "unknown-campaign") {
				t.Errorf("%s, %s: %d %s; want 404 unknown-campaign", c.who, verb, a.status, a.body)
			}
		}
	}
	states, err := e.ctl.States(ctx, "whatsapp", []string{"spring", "fall", "ops"})
	if err != nil || !slices.Equal(states, []control.State{control.Running, control.Running, control.Running}) {
		t.Errorf("states after the refused actions: %q, %v; want all running", states, err)
	}
	if known, _ := e.ctl.Known(ctx, "whatsapp", "never"); known {
		t.Error("a refused action on a campaign never published created it")
	}

	// Pause, cancel and resume its own: as control.Store sees them.
	for _, c := range []struct {
		verb      string
		want, was control.State
	}{{"pause", control.Paused, control.Running}, {"cancel", control.Cancelled, control.Paused}, {"resume", control.Running, control.Cancelled}} {
		a := e.post(acmeKey, "/v1/channels/whatsapp/campaigns/spring/"+c.verb)
		var ch ingest.StateChange
		if a.status != 200 || json.Unmarshal(a.body, &ch) != nil || ch != (ingest.StateChange{Campaign: "spring", State: c.want.Name(), Previous: c.was.Name()}) {
			t.Errorf("acme %s spring: %d %s; want 200 %s (was %s)", c.verb, a.status, a.body, c.want.Name(), c.was.Name())
		}
		if a.h.Get("RateLimit") == "" {
			t.Errorf("acme %s spring: no RateLimit field", c.verb)
		}
		states, err := e.ctl.States(ctx, "whatsapp", []string{"spring", "fall"})
		if err != nil || !slices.Equal(states, []control.State{c.want, control.Running}) {
			t.Errorf("after acme %s spring: states %q, %v; want [%q running]", c.verb, states, err, c.want)
		}
		if c.verb == "pause" {
			l := listed(t, e.get(acmeKey, "/v1/channels/whatsapp/campaigns"))
			if l["spring"].State != "paused" {
				t.Errorf("acme's list after pause: %+v; want spring paused", l)
			}
		}
	}

	// Publishing to a campaign another tenant (or nobody) owns: 409.
	for _, c := range []struct{ key, campaign string }{{otherKey, "spring"}, {acmeKey, "ops"}} {
		body := env1("ok-1") + "\n" + fmt.Sprintf(`{"id":"taken-%s","key":"106540352242922","to":"15551234567","campaign":%q}`, c.campaign, c.campaign)
		a := e.do(c.key, "whatsapp", "application/x-ndjson", body)
		if a.status != 409 || !strings.Contains(string(a.body), `"line":2,"id":"taken-`+c.campaign+`","name":"campaign"`) || a.h.Get("Retry-After") != "" {
			t.Errorf("publish to %s as %s: %d %s; want 409 naming campaign of line 2, no Retry-After", c.campaign, c.key, a.status, a.body)
		}
	}
	recs := e.records("pacer.whatsapp")
	if len(recs["ok-1"])+len(recs["taken-spring"])+len(recs["taken-ops"]) != 0 || len(recs["a-1"]) != 1 {
		t.Errorf("records: %d of the refused batches, %d of a-1; want none of the refused, a-1 once",
			len(recs["ok-1"])+len(recs["taken-spring"])+len(recs["taken-ops"]), len(recs["a-1"]))
	}
	if st, _, _ := e.ctl.Find(ctx, "whatsapp", "spring"); st.Published != 2 || st.Tenant != "acme" {
		t.Errorf("spring after other's publish: published %d, tenant %q; want 2, acme", st.Published, st.Tenant)
	}
	// Its own campaign again: accepted, counted.
	e.publish(acmeKey, "spring", "a-3")
	if st, _, _ := e.ctl.Find(ctx, "whatsapp", "spring"); st.Published != 3 {
		t.Errorf("spring after acme's second publish: published %d; want 3", st.Published)
	}
}

// TestTenantMessages: GET /v1/messages/{id} answers only the tenant's own
// ids, with both tenants on the id's channel: the other's GET is 404.
func TestTenantMessages(t *testing.T) {
	e := newEnv(t, opts{realRedis: true, tenants: twoTenants(100, 100)})
	e.publish(acmeKey, "spring", "m-own")
	b := ledger.NewBatcher(e.rdb, e.keys, ledger.BatchConfig{FlushInterval: time.Millisecond})
	defer b.Close(t.Context())
	if got, _, err := b.Claim(t.Context(), "whatsapp", "106540352242922", "m-own", "pacer-1", false); err != nil || got != ledger.Claimed {
		t.Fatalf("claim: %v, %v", got, err)
	}
	b.Delivered(t.Context(), "whatsapp", "106540352242922", "m-own", "wamid.1")
	if err := b.Written(t.Context()); err != nil {
		t.Fatal(err)
	}
	var m message.Message
	if a := e.get(acmeKey, "/v1/messages/m-own?channel=whatsapp"); a.status != 200 || json.Unmarshal(a.body, &m) != nil || m.ProviderMessageID != "wamid.1" {
		t.Errorf("acme's own id: %d %s; want 200 delivered wamid.1", a.status, a.body)
	}
	if a := e.get(otherKey, "/v1/messages/m-own?channel=whatsapp"); a.status != 404 || !strings.Contains(string(a.body), "unknown-message") {
		t.Errorf("other's GET of acme's id on their shared channel: %d %s; want 404 unknown-message", a.status, a.body)
	}
}

// TestCampaignRequestsBadInput: bad input is 400 problem+json naming the
// field, a channel not served is 404, one the tenant may not publish to
// 403, a wrong method 405 with Allow.
func TestCampaignRequestsBadInput(t *testing.T) {
	e := newEnv(t, opts{})
	for _, c := range []struct {
		method, path string
		status       int
		has          string
	}{
		{"GET", "/v1/channels/whatsapp/campaigns?limit=0", 400, `"name":"limit"`},
		{"GET", "/v1/channels/whatsapp/campaigns?limit=1001", 400, `"name":"limit"`},
		{"GET", "/v1/channels/whatsapp/campaigns?limit=ten", 400, `"name":"limit"`},
		{"GET", "/v1/channels/whatsapp/campaigns/a%01b", 400, `"name":"campaign"`},
		{"POST", "/v1/channels/whatsapp/campaigns/a%ffb/pause", 400, `"name":"campaign"`},
		{"GET", "/v1/channels/sms/campaigns", 404, "unknown-channel"},
		{"GET", "/v1/channels/sendgrid/campaigns/x", 403, "forbidden-channel"},
		{"DELETE", "/v1/channels/whatsapp/campaigns/x", 405, "method-not-allowed"},
		{"GET", "/v1/channels/whatsapp/campaigns/x/pause", 405, "method-not-allowed"},
	} {
		mk := func() *http.Request {
			r, _ := http.NewRequest(c.method, e.url+c.path, nil)
			r.Header.Set("Authorization", "Bearer "+acmeKey)
			return r
		}
		var a answer
		if c.status == 405 {
			// The document lists a 405 under each operation of its path:
			// a method the path lacks has no operation to check it by.
			a = e.raw(c.method, c.path, "", "Authorization", "Bearer "+acmeKey)
			if allow := map[string]string{"DELETE": "GET, HEAD", "GET": "POST"}[c.method]; a.h.Get("Allow") != allow {
				t.Errorf("%s %s: Allow %q; want %q", c.method, c.path, a.h.Get("Allow"), allow)
			}
		} else {
			a = e.send(mk)
		}
		if a.status != c.status || a.h.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(a.body), c.has) {
			t.Errorf("%s %s: %d %s; want %d problem+json with %s", c.method, c.path, a.status, a.body, c.status, c.has)
		}
	}
	if a := e.get("", "/v1/channels/whatsapp/campaigns"); a.status != 401 || a.h.Get("WWW-Authenticate") == "" {
		t.Errorf("no key: %d %s; want 401 with WWW-Authenticate", a.status, a.body)
	}
	if a := e.get(acmeKey, "/v1/channels/whatsapp/campaigns?limit=5"); a.status != 200 || strings.TrimSpace(string(a.body)) != `{"campaigns":[]}` {
		t.Errorf("list of a tenant without campaigns: %d %s; want 200 an empty list", a.status, a.body)
	}
}

// TestCampaignRequestsCountAgainstTenantRate: every campaign read and
// action is one request of the tenant's requests/s bucket, as a publish
// is: with a burst of 3 and a rate of one a minute, the fourth is 429
// refused by tier tenant.
func TestCampaignRequestsCountAgainstTenantRate(t *testing.T) {
	e := newEnv(t, opts{realRedis: true, tenants: twoTenants(3, 1.0/60)})
	e.publish(acmeKey, "spring", "a-1") // the first of the 3
	for i, p := range []func() answer{
		func() answer { return e.get(acmeKey, "/v1/channels/whatsapp/campaigns") },
		func() answer { return e.post(acmeKey, "/v1/channels/whatsapp/campaigns/spring/pause") },
	} {
		if a := p(); a.status != 200 {
			t.Fatalf("request %d: %d %s; want 200", i+2, a.status, a.body)
		}
	}
	a := e.get(acmeKey, "/v1/channels/whatsapp/campaigns/spring")
	if a.status != 429 || !strings.Contains(string(a.body), `"tier":"tenant"`) || a.h.Get("Retry-After") == "" {
		t.Errorf("fourth request: %d %s; want 429 tier tenant with Retry-After", a.status, a.body)
	}
	// The other tenant's bucket is its own.
	if a := e.get(otherKey, "/v1/channels/whatsapp/campaigns"); a.status != 200 {
		t.Errorf("other's list: %d %s; want 200", a.status, a.body)
	}
}

// TestCampaignClaimRace: two tenants publishing to one new campaign name
// at once: one owns it, every request of that one is accepted, every one
// of the other refused 409.
func TestCampaignClaimRace(t *testing.T) {
	e := newEnv(t, opts{realRedis: true, tenants: twoTenants(100, 100)})
	var wg sync.WaitGroup
	status := map[string][]int{}
	var mu sync.Mutex
	for i := range 10 {
		for _, key := range []string{acmeKey, otherKey} {
			wg.Go(func() {
				resp, err := http.DefaultClient.Do(func() *http.Request {
					r, _ := http.NewRequest("POST", e.url+"/v1/channels/whatsapp/messages",
						strings.NewReader(fmt.Sprintf(`{"id":"r-%s-%d","key":%q,"to":"1","campaign":"race"}`, key, i, pacingKey(key))))
					r.Header.Set("Authorization", "Bearer "+key)
					r.Header.Set("Content-Type", "application/json")
					return r
				}())
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				mu.Lock()
				status[key] = append(status[key], resp.StatusCode)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	st, _, err := e.ctl.Find(t.Context(), "whatsapp", "race")
	if err != nil {
		t.Fatal(err)
	}
	winner, loser := acmeKey, otherKey
	if st.Tenant == "other" {
		winner, loser = otherKey, acmeKey
	}
	all := func(ss []int, want int) bool {
		return len(ss) == 10 && !slices.ContainsFunc(ss, func(s int) bool { return s != want })
	}
	if !all(status[winner], 202) || !all(status[loser], 409) || st.Published != 10 {
		t.Errorf("owner %q: winner's answers %v, loser's %v, published %d; want 10x202, 10x409, 10", st.Tenant, status[winner], status[loser], st.Published)
	}
}

// TestPacingKeyOwned: a pacing key belongs to the tenant that first
// published to it. Another tenant's publish naming it, alone or with a
// key of its own, is 409 key-taken naming the field key of each such
// line; nothing is produced or claimed, so the owner's next id on that
// key is accepted and produced (the ledger, keyed by channel, pacing key
// and id, never sees the other's copy).
func TestPacingKeyOwned(t *testing.T) {
	e := newEnv(t, opts{realRedis: true, tenants: twoTenants(100, 100)})
	const acmes, others = "106540352242920", "106540352242929"
	a := e.do(acmeKey, "whatsapp", "application/json", fmt.Sprintf(`{"id":"a-1","key":%q,"to":"15551234567"}`, acmes))
	if a.status != 202 {
		t.Fatalf("acme's first publish: %d %s; want 202", a.status, a.body)
	}
	body := fmt.Sprintf(`{"id":"o-1","key":%q,"to":"15551234567"}`+"\n"+`{"id":"a-2","key":%q,"to":"15551234567"}`, others, acmes)
	a = e.do(otherKey, "whatsapp", "application/x-ndjson", body)
	if a.status != 409 || !strings.Contains(string(a.body), "/key-taken") ||
		!strings.Contains(string(a.body), `"line":2,"id":"a-2","name":"key"`) || strings.Contains(string(a.body), `"line":1`) {
		t.Fatalf("other's publish on acme's key: %d %s; want 409 key-taken naming key of line 2 only", a.status, a.body)
	}
	// The refused batch claimed nothing: acme may take the other key too.
	for _, id := range []string{"a-2", "a-3"} {
		k := acmes
		if id == "a-3" {
			k = others
		}
		if a := e.do(acmeKey, "whatsapp", "application/json", fmt.Sprintf(`{"id":%q,"key":%q,"to":"15551234567"}`, id, k)); a.status != 202 || !strings.Contains(string(a.body), `"accepted":[{"line":1,"id":"`+id+`"}]`) {
			t.Errorf("acme's %s on %s: %d %s; want 202, accepted", id, k, a.status, a.body)
		}
	}
	recs := e.records("pacer.whatsapp")
	if len(recs["o-1"]) != 0 || len(recs["a-2"]) != 1 || len(recs["a-3"]) != 1 {
		t.Errorf("records o-1 %d, a-2 %d, a-3 %d; want 0, 1 (acme's), 1", len(recs["o-1"]), len(recs["a-2"]), len(recs["a-3"]))
	}
	// Known to this process now: the other is still refused.
	if a := e.do(otherKey, "whatsapp", "application/json", fmt.Sprintf(`{"id":"o-2","key":%q,"to":"15551234567"}`, others)); a.status != 409 {
		t.Errorf("other's publish on %s, now acme's: %d %s; want 409", others, a.status, a.body)
	}
}

// TestClaimAllOrNothing: a publish refused 409 for another's campaign
// claims none of its new campaign names.
func TestClaimAllOrNothing(t *testing.T) {
	e := newEnv(t, opts{realRedis: true, tenants: twoTenants(100, 100)})
	e.publish(acmeKey, "spring", "a-1")
	body := fmt.Sprintf(`{"id":"o-1","key":%q,"to":"15551234567","campaign":"fresh"}`+"\n"+
		`{"id":"o-2","key":%q,"to":"15551234567","campaign":"spring"}`, pacingKey(otherKey), pacingKey(otherKey))
	if a := e.do(otherKey, "whatsapp", "application/x-ndjson", body); a.status != 409 || !strings.Contains(string(a.body), `"line":2,"id":"o-2","name":"campaign"`) {
		t.Fatalf("other's publish of fresh and spring: %d %s; want 409 naming campaign of line 2", a.status, a.body)
	}
	if st, known, err := e.ctl.Find(t.Context(), "whatsapp", "fresh"); err != nil || known {
		t.Errorf("fresh after the refused publish: %+v known %v, %v; want unknown (not claimed)", st, known, err)
	}
	e.publish(acmeKey, "fresh", "a-2")
	if st, _, _ := e.ctl.Find(t.Context(), "whatsapp", "fresh"); st.Tenant != "acme" {
		t.Errorf("fresh's owner %q; want acme", st.Tenant)
	}
	// Nor the pacing key: acme may publish on it.
	if a := e.do(acmeKey, "whatsapp", "application/json", fmt.Sprintf(`{"id":"a-3","key":%q,"to":"15551234567"}`, pacingKey(otherKey))); a.status != 202 {
		t.Errorf("acme on the refused batch's key: %d %s; want 202", a.status, a.body)
	}
}

// TestPublishRefusesBadCampaign: a campaign name the campaign paths could
// never name (a control character) or longer than 128 bytes is refused at
// publish, 400 naming the field campaign, so no tenant owns a campaign it
// cannot pause.
func TestPublishRefusesBadCampaign(t *testing.T) {
	e := newEnv(t, opts{realRedis: true, tenants: twoTenants(100, 100)})
	for _, c := range []struct{ campaign, reason string }{
		{`spr\u0007ing`, "envelope: campaign: contains a control character"},
		{strings.Repeat("x", 200_000), "envelope: campaign: 200000 bytes, at most 128 allowed"},
	} {
		body := fmt.Sprintf(`{"id":"bad","key":%q,"to":"15551234567","campaign":"%s"}`, pacingKey(acmeKey), c.campaign)
		a := e.do(acmeKey, "whatsapp", "application/json", body)
		if a.status != 400 || !strings.Contains(string(a.body), `"name":"campaign","reason":"`+c.reason+`"`) {
			t.Errorf("publish of campaign %.20q: %d %.300s; want 400 naming campaign: %s", c.campaign, a.status, a.body, c.reason)
		}
	}
	if recs := e.records("pacer.whatsapp"); len(recs["bad"]) != 0 {
		t.Errorf("%d records of the refused envelopes; want none", len(recs["bad"]))
	}
}
