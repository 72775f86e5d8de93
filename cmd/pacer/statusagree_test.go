package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/statuspage"
	"github.com/redis/go-redis/v9"
)

// TestCampaignETAOneSource: `campaign status --json` and the status page's
// /status.json give each campaign the same eta_seconds, byte for byte,
// from the same counters: a number while it runs, 0 once done, and null
// when there is none (paused, cancelled, published unknown), never -1 in
// one and null in the other. Likewise published, messages and remaining:
// null when published is unknown, in both.
func TestCampaignETAOneSource(t *testing.T) {
	env, st := operatorEnv(t)
	ctx := context.Background()
	now := time.Now().UnixMilli()
	if err := st.AddPublished(ctx, "whatsapp", map[string]int64{"running": 10, "paused": 60, "cancelled": 20, "done": 3}); err != nil {
		t.Fatal(err)
	}
	if err := st.Add(ctx, "whatsapp", map[string]*control.Counts{
		"running":   {Delivered: 3, First: now - 2000, Last: now}, // 1 msg/s, 7 remaining
		"paused":    {Delivered: 7, First: now - 6000, Last: now},
		"cancelled": {Delivered: 2, First: now - 1000, Last: now},
		"done":      {Delivered: 3, First: now - 2000, Last: now},
		"unknown":   {Delivered: 5, First: now - 4000, Last: now}, // never published through Pacer
	}); err != nil {
		t.Fatal(err)
	}
	for c, s := range map[string]control.State{"paused": control.Paused, "cancelled": control.Cancelled} {
		if _, err := st.SetState(ctx, "whatsapp", c, s); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{"running": "7", "paused": "null", "cancelled": "null", "done": "0", "unknown": "null"}

	opt, err := redis.ParseURL(env["PACER_REDIS_URL"])
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	mux := http.NewServeMux()
	statuspage.New(rdb, statuspage.Config{Channel: "whatsapp", Prefix: env["PACER_REDIS_PREFIX"],
		Policy: control.StaticPolicy{Limit: bucket.Limit{PerSecond: 80, Burst: 10}}}).Register(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/status.json", nil))
	var page struct {
		Campaigns []struct {
			Name      string          `json:"name"`
			ETA       json.RawMessage `json:"eta_seconds"`
			Published json.RawMessage `json:"published"`
			Messages  json.RawMessage `json:"messages"`
			Remaining json.RawMessage `json:"remaining"`
		} `json:"campaigns"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &page); rec.Code != 200 || err != nil {
		t.Fatalf("/status.json: %d %s: %v", rec.Code, rec.Body, err)
	}
	onPage := map[string]string{}
	counts := map[string][3]string{}
	for _, c := range page.Campaigns {
		onPage[c.Name] = string(c.ETA)
		counts[c.Name] = [3]string{string(c.Published), string(c.Messages), string(c.Remaining)}
	}
	for c, w := range want {
		code, out, errs := runCLI(env, "campaign", "status", "--channel", "whatsapp", "--campaign", c, "--json")
		var cli struct {
			ETA       json.RawMessage `json:"eta_seconds"`
			Published json.RawMessage `json:"published"`
			Messages  json.RawMessage `json:"messages"`
			Remaining json.RawMessage `json:"remaining"`
		}
		if err := json.Unmarshal([]byte(out), &cli); code != 0 || err != nil {
			t.Fatalf("campaign status %s --json: exit %d, %q %q: %v", c, code, out, errs, err)
		}
		if string(cli.ETA) != w || onPage[c] != w {
			t.Errorf("%s: eta_seconds %s in campaign status --json, %s on /status.json; want %s in both", c, cli.ETA, onPage[c], w)
		}
		if got := [3]string{string(cli.Published), string(cli.Messages), string(cli.Remaining)}; got != counts[c] || (c == "unknown") != (got == [3]string{"null", "null", "null"}) {
			t.Errorf("%s: published, messages, remaining %v in campaign status --json, %v on /status.json; want the same, null only when published is unknown", c, got, counts[c])
		}
	}
}

// TestCampaignStatusOutcomes: `campaign status` shows the outcomes the
// webhooks counted, each line only when not 0 (with its reasons), and
// --json always has them: 0 and {} when none.
func TestCampaignStatusOutcomes(t *testing.T) {
	env, st := operatorEnv(t)
	ctx := context.Background()
	if err := st.AddPublished(ctx, "whatsapp", map[string]int64{"spring": 5, "quiet": 2}); err != nil {
		t.Fatal(err)
	}
	outs := []control.Outcome{{ID: "m1", Kind: control.DeviceDelivered}, {ID: "m2", Kind: control.DeviceDelivered},
		{ID: "m2", Kind: control.Read}, {ID: "m3", Kind: control.Failed, Reason: "131026"},
		{ID: "m4", Kind: control.Failed, Reason: "131049"}, {ID: "m3", Kind: control.Suppressed, Reason: "undeliverable"}}
	for i := range outs {
		outs[i].Campaign = "spring"
	}
	if _, err := st.CountOutcomes(ctx, "whatsapp", outs); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(env, "campaign", "status", "--channel", "whatsapp", "--campaign", "spring")
	if code != 0 {
		t.Fatalf("campaign status: exit %d, %q %q", code, out, errs)
	}
	want := "  on device     2 (delivered to the device, or the mail server)\n  read          1\n  failed        2\n" +
		"    131026               1\n    131049               1\n  suppressed    1\n    undeliverable        1\n"
	if !strings.Contains(out, want) || strings.Contains(out, "bounced") {
		t.Errorf("campaign status:\n%s\nwant the lines\n%s(and no bounced line)", out, want)
	}
	code, out, errs = runCLI(env, "campaign", "status", "--channel", "whatsapp", "--campaign", "quiet")
	if code != 0 || strings.Contains(out, "on device") || strings.Contains(out, "read ") || strings.Contains(out, "failed") {
		t.Errorf("campaign status of quiet: exit %d, %q %q; want no outcome lines", code, out, errs)
	}
	code, out, errs = runCLI(env, "campaign", "status", "--channel", "whatsapp", "--campaign", "quiet", "--json")
	var got map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil {
		t.Fatalf("campaign status --json: exit %d, %q %q: %v", code, out, errs, err)
	}
	for f, w := range map[string]string{"device_delivered": "0", "read": "0", "failed": "{}", "bounced": "{}", "suppressed": "{}"} {
		if string(got[f]) != w {
			t.Errorf("quiet --json %s = %s, want %s", f, got[f], w)
		}
	}
}
