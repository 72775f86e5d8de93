package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/pacerhq/pacer/pacer/message"
	"github.com/redis/go-redis/v9"
)

// TestMessageShow: `pacer message show` of a delivered id prints its
// provider message id, attempts and webhook events, in text and JSON,
// finding its pacing key from the id; of a dead-lettered id its reason
// and attempts; of an unknown id it exits 1 naming the ledger's TTL.
func TestMessageShow(t *testing.T) {
	env, _ := operatorEnv(t)
	opt, err := redis.ParseURL(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	keys := bucket.NewKeys(env["PACER_REDIS_PREFIX"])
	b := ledger.NewBatcher(rdb, keys, ledger.BatchConfig{FlushInterval: time.Millisecond})
	defer b.Close(t.Context())
	for _, id := range []string{"m-ok", "m-dead"} {
		if got, _, err := b.Claim(t.Context(), "whatsapp", "106", id, "pacer-1", false); err != nil || got != ledger.Claimed {
			t.Fatalf("claim %s: %v, %v", id, got, err)
		}
	}
	b.Attempted(t.Context(), "whatsapp", "106", "m-ok", ledger.Attempt{Outcome: "retry", Code: "131000"})
	b.Attempted(t.Context(), "whatsapp", "106", "m-ok", ledger.Attempt{Outcome: "delivered"})
	b.Delivered(t.Context(), "whatsapp", "106", "m-ok", "wamid.HBgL")
	b.Attempted(t.Context(), "whatsapp", "106", "m-dead", ledger.Attempt{Outcome: "dead-lettered", Code: "131026"})
	b.Release(t.Context(), "whatsapp", "106", "m-dead", "pacer-1")
	if err := b.Written(t.Context()); err != nil {
		t.Fatal(err)
	}
	heard := time.Now()
	if _, err := control.New(rdb, keys).CountOutcomes(t.Context(), "whatsapp", []control.Outcome{
		{ID: "m-ok", Campaign: "spring", Kind: control.DeviceDelivered}}); err != nil {
		t.Fatal(err)
	}

	code, out, errs := runCLI(env, "message", "show", "--channel", "whatsapp", "--id", "m-ok")
	if code != 0 {
		t.Fatalf("show m-ok: exit %d, %q", code, errs)
	}
	for _, want := range []string{"message m-ok of whatsapp, key 106: delivered, provider message id wamid.HBgL\n",
		" retry         131000\n", " delivered     -\n", "events:\n", " device_delivered\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("show m-ok printed\n%s\nwithout %q", out, want)
		}
	}
	code, out, errs = runCLI(env, "message", "show", "--channel", "whatsapp", "--id", "m-ok", "--key", "106", "--json")
	var m message.Message
	if code != 0 || json.Unmarshal([]byte(out), &m) != nil {
		t.Fatalf("show --json: exit %d, %q, %q", code, out, errs)
	}
	if m.State != "delivered" || m.ProviderMessageID != "wamid.HBgL" || len(m.Attempts) != 2 || m.Attempts[1].Outcome != "delivered" ||
		len(m.Events) != 1 || m.Events[0].Kind != "device_delivered" || m.Events[0].At == nil || m.Events[0].At.Sub(heard).Abs() > time.Minute {
		t.Errorf("show --json: %+v; want delivered wamid.HBgL, 2 attempts, a device_delivered event heard now", m)
	}

	code, out, errs = runCLI(env, "message", "show", "--channel", "whatsapp", "--id", "m-dead", "--key", "106")
	if code != 0 || !strings.Contains(out, "key 106: dead-lettered\n") || !strings.Contains(out, " dead-lettered 131026\n") || !strings.Contains(out, "events: none received") {
		t.Errorf("show m-dead: exit %d, %q, %q; want dead-lettered with its attempt (131026), no events", code, out, errs)
	}

	for _, args := range [][]string{{"--id", "m-never"}, {"--id", "m-never", "--key", "106"}} {
		code, out, errs = runCLI(env, append([]string{"message", "show", "--channel", "whatsapp"}, args...)...)
		if code != 1 || out != "" || !strings.Contains(errs, "unknown id m-never of whatsapp (never seen, or older than the ledger's TTL of 7m0s)") {
			t.Errorf("show %v of an unknown id: exit %d, stdout %q, stderr %q; want 1 naming the TTL", args, code, out, errs)
		}
	}
	if code, _, errs := runCLI(env, "message", "show", "--channel", "whatsapp"); code != 2 || !strings.Contains(errs, "--id is required") {
		t.Errorf("show without --id: exit %d, %q; want 2", code, errs)
	}
}
