//go:build e2e

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

var ingestAddrRE = regexp.MustCompile(`msg="ingest listening" (?:component=\S+ )?addr=(\S+)`)

// startIngest starts `pacer ingest` in e's environment with the tenants
// file tenants and returns the process and its API's base URL.
func (e *e2e) startIngest(tenants string) (*proc, string) {
	e.t.Helper()
	p := startPacer(e.t, e.env("PACER_INGEST_ADDR=127.0.0.1:0", "PACER_INGEST_TENANTS="+tenants), "ingest")
	var addr string
	if !waitFor(60*time.Second, func() bool {
		m := ingestAddrRE.FindStringSubmatch(p.logs())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}) {
		e.t.Fatalf("pacer ingest logged no address within 60 s\n%s", p.logs())
	}
	return p, "http://" + addr
}

// apiCall sends method path to the ingest API at base with key's bearer
// and body (NDJSON when not empty) and returns the status and body.
func apiCall(t *testing.T, base, method, path, key, body string) (int, string) {
	t.Helper()
	r, _ := http.NewRequest(method, base+path, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+key)
	if body != "" {
		r.Header.Set("Content-Type", "application/x-ndjson")
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestIngestTenantPausesOwnCampaign: two tenants publish a campaign each
// through one `pacer ingest` to one `pacer run` and the strict fake
// WhatsApp API. Tenant A pauses its campaign through the API: its sends
// stop within a few seconds while B's go on; B can neither see nor pause
// A's (404); A resumes it and every message of both is delivered once.
func TestIngestTenantPausesOwnCampaign(t *testing.T) {
	parallel(t)
	const per, rate = 200, 20.0
	e := newE2E(t, whatsapptest.Config{Rate: rate, Burst: 2, Latency: 5 * time.Millisecond})
	e.topic = "pacer.whatsapp" // the gateway's topic of channel whatsapp
	keyA, keyB := "tenant-a-key-"+e.prefix, "tenant-b-key-"+e.prefix
	sum := func(k string) string { s := sha256.Sum256([]byte(k)); return hex.EncodeToString(s[:]) }
	tenants := writeFile(t, "tenants.json", fmt.Sprintf(`{"tenants":[
 {"id":"tenant-a","key_sha256":[%q],"requests_per_second":50,"burst":50,"messages_per_day":100000,"channels":["whatsapp"]},
 {"id":"tenant-b","key_sha256":[%q],"requests_per_second":50,"burst":50,"messages_per_day":100000,"channels":["whatsapp"]}]}`, sum(keyA), sum(keyB)))

	// The topic is shared with whatever else published to it: this
	// test's group starts at its end, so the pacer sends only what the
	// test publishes.
	group := "pacer-" + e.prefix
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(e.brokers, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, e.topic); err != nil && !strings.Contains(err.Error(), "TOPIC_ALREADY_EXISTS") {
		t.Fatalf("create %s: %v", e.topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, e.topic)
	if err == nil {
		_, err = adm.CommitOffsets(ctx, group, ends.Offsets())
	}
	cancel()
	cl.Close()
	if err != nil {
		t.Fatalf("start group %s at the end of %s: %v", group, e.topic, err)
	}

	ing, base := e.startIngest(tenants)
	lines := func(c, number string) string {
		var b strings.Builder
		for i := range per {
			fmt.Fprintf(&b, `{"id":"%s-%s-%d","key":%q,"to":"1555%07d","campaign":%q,"payload":{"type":"text","text":{"body":"m%d"}}}`+"\n",
				c, e.prefix, i, number, i, c, i)
		}
		return b.String()
	}
	for _, c := range []struct{ key, campaign, number string }{{keyA, "A", "10654830001"}, {keyB, "B", "10654830002"}} {
		if code, body := apiCall(t, base, "POST", "/v1/channels/whatsapp/messages", c.key, lines(c.campaign, c.number)); code != 202 || strings.Contains(body, `"rejected":[{`) {
			t.Fatalf("publish of %s: %d %s\n%s", c.campaign, code, body, ing.logs())
		}
	}
	run := e.run("PACER_WHATSAPP_RATE=20", "PACER_WHATSAPP_BURST=2")
	logs := func() string { return ing.logs() + run.logs() }
	if !waitFor(90*time.Second, func() bool { return countIn(e.fake.Arrivals(), "A-"+e.prefix, time.Time{}) >= 10 }) {
		t.Fatalf("fewer than 10 sends of A within 90 s\n%s", logs())
	}

	// B cannot see or pause A's campaign: 404, as for one never published.
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/channels/whatsapp/campaigns/A"},
		{"POST", "/v1/channels/whatsapp/campaigns/A/pause"},
	} {
		if code, body := apiCall(t, base, c.method, c.path, keyB, ""); code != 404 {
			t.Errorf("tenant B %s %s: %d %s; want 404", c.method, c.path, code, body)
		}
	}
	if code, body := apiCall(t, base, "GET", "/v1/channels/whatsapp/campaigns", keyB, ""); code != 200 || strings.Contains(body, `"campaign":"A"`) || !strings.Contains(body, `"campaign":"B"`) {
		t.Errorf("tenant B's list: %d %s; want B alone", code, body)
	}

	if code, body := apiCall(t, base, "POST", "/v1/channels/whatsapp/campaigns/A/pause", keyA, ""); code != 200 || !strings.Contains(body, `"state":"paused"`) {
		t.Fatalf("tenant A pauses A: %d %s", code, body)
	}
	paused := time.Now()
	if !strings.Contains(ing.logs(), `msg="campaign state set"`) || !strings.Contains(ing.logs(), `tenant=tenant-a channel=whatsapp campaign=A old=running new=paused`) {
		t.Errorf("the pause is not logged with the tenant, old and new state:\n%s", ing.logs())
	}
	// Running pacers apply a state within about 1 s (campaign.Refresh);
	// a send already under way may still land. From 3 s on, none of A.
	const settle, window = 3 * time.Second, 5 * time.Second
	time.Sleep(settle + window)
	as := e.fake.Arrivals()
	aPaused, bPaused := 0, 0
	for _, a := range as {
		if a.Throttled || a.At.Before(paused.Add(settle)) || a.At.After(paused.Add(settle+window)) {
			continue
		}
		switch {
		case strings.HasPrefix(a.ID, "A-"+e.prefix):
			aPaused++
		case strings.HasPrefix(a.ID, "B-"+e.prefix):
			bPaused++
		}
	}
	t.Logf("in the %v from %v after the pause: %d sends of A, %d of B", window, settle, aPaused, bPaused)
	if aPaused != 0 {
		t.Errorf("campaign A: %d sends from %v to %v after its pause; want none", aPaused, settle, settle+window)
	}
	// B at 20/s for 5 s is 100 (88 seen on an idle 2-core machine, 35 on
	// a loaded one); a stopped B would be none.
	if bPaused < 5 {
		t.Errorf("campaign B: %d sends while A was paused; want it to go on (>= 5; its number paces 20/s)", bPaused)
	}
	code, body := apiCall(t, base, "GET", "/v1/channels/whatsapp/campaigns/A", keyA, "")
	var st struct {
		State     string
		Published *int64
	}
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil || st.State != "paused" || st.Published == nil || *st.Published != per {
		t.Errorf("tenant A's GET of A: %d %s; want paused, published %d", code, body, per)
	}

	if code, body := apiCall(t, base, "POST", "/v1/channels/whatsapp/campaigns/A/resume", keyA, ""); code != 200 || !strings.Contains(body, `"previous_state":"paused"`) {
		t.Fatalf("tenant A resumes A: %d %s", code, body)
	}
	// Every message of both, once: counted by the test's ids, as the
	// shared topic may carry other records to the fake.
	mine := func() (ids map[string]int) {
		ids = map[string]int{}
		for _, a := range e.fake.Arrivals() {
			if !a.Throttled && strings.Contains(a.ID, "-"+e.prefix+"-") {
				ids[a.ID]++
			}
		}
		return ids
	}
	if !waitFor(120*time.Second, func() bool { return len(mine()) >= 2*per }) {
		t.Fatalf("delivered %d of %d within 120 s after the resume\n%s", len(mine()), 2*per, logs())
	}
	time.Sleep(500 * time.Millisecond) // let a late duplicate show
	for id, n := range mine() {
		if n != 1 {
			t.Errorf("%s delivered %d times; want once", id, n)
		}
	}
	run.stop(t)
	ing.stop(t)
}
