//go:build e2e

package main

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
)

// TestStatusBacklogAgrees: a campaign of 60 messages on one number paced
// at 0.2 msgs/s (one every 5 s, the publishers' period) leaves most of its
// records held or parked; `pacer status` and the status page
// (/status.json) show the number's backlog from the same figure (records
// held plus estimated parked), so they show the same backlog, above 1,
// once their readings meet (each publishes every 5 s). The status page
// counted the records in hand only: 1 against 53.
func TestStatusBacklogAgrees(t *testing.T) {
	measured(t)
	e := newE2E(t, whatsapptest.Config{Rate: 5, Burst: 1, Latency: 5 * time.Millisecond})
	const key = "10654860001"
	var b strings.Builder
	campaignLines(&b, "B", []string{key}, 60, "")
	p := e.startAndPublish(b.String(), 1, "PACER_WHATSAPP_RATE=0.2", "PACER_WHATSAPP_BURST=1")[0]
	defer p.stop(t)
	base := "http://" + p.metricsAddr(t)
	row := regexp.MustCompile(`(?m)^` + key + `\s+(\d+)\s*$`)
	var cli, page int
	agree := waitFor(60*time.Second, func() bool {
		out := e.cli("status", "--channel", "whatsapp")
		_, backlog, ok := strings.Cut(out, "top keys by backlog")
		m := row.FindStringSubmatch(backlog)
		if !ok || m == nil {
			return false
		}
		cli, _ = strconv.Atoi(m[1])
		_, body := httpGet(t, base+"/status.json")
		var s struct {
			Keys []struct {
				Key     string `json:"key"`
				Backlog int    `json:"backlog"`
			} `json:"keys"`
		}
		if json.Unmarshal([]byte(body), &s) != nil {
			return false
		}
		page = -1
		for _, k := range s.Keys {
			if k.Key == key {
				page = k.Backlog
			}
		}
		return cli > 1 && page == cli
	})
	if !agree {
		_, body := httpGet(t, base+"/status.json")
		t.Fatalf("backlog of %s: pacer status %d, /status.json %d; want the same figure, above 1\n%s\n%s\n%s", key, cli, page, e.cli("status", "--channel", "whatsapp"), body, p.logs())
	}
	t.Logf("backlog of %s: %d in both", key, cli)
}
