package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
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
