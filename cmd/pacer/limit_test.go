package main

// Per-key and channel limits through the CLI, in process, on the real
// redis-server.

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/internal/testenv"
)

// TestStatusShowsKeyLimit: `pacer status` shows a key's own limit (`pacer
// limit set`) as its LIMIT/S, marked "(key)", and paces the key's row with
// it; a key without one shows the channel's limit the pacers recorded.
func TestStatusShowsKeyLimit(t *testing.T) {
	prefix, rdb, _ := limitTest(t)
	lookup := lookupMap(map[string]string{"PACER_REDIS_URL": testenv.RedisURL(t), "PACER_REDIS_PREFIX": prefix})
	pacer := func(args ...string) string {
		t.Helper()
		var out, errb strings.Builder
		if code := run(t.Context(), args, strings.NewReader(""), &out, &errb, lookup); code != 0 {
			t.Fatalf("pacer %v: exit %d\n%s%s", args, code, out.String(), errb.String())
		}
		return out.String()
	}
	publishLimit(t.Context(), rdb, prefix, "whatsapp", bucket.Limit{PerSecond: 80, Burst: 10}, limitTTL, slog.New(slog.NewTextHandler(io.Discard, nil)))
	pacer("limit", "set", "--channel", "whatsapp", "--key", "106", "--rate", "12", "--burst", "3")
	// A key with state: its row comes from the snapshot, not the idle line.
	ad := adapt.New(rdb, bucket.Config{Prefix: prefix})
	if _, err := ad.RecoverAfter(t.Context(), "whatsapp", "107", bucket.Limit{PerSecond: 12, Burst: 3}, adapt.AIMD{}, 1); err != nil {
		t.Fatal(err)
	}
	pacer("limit", "set", "--channel", "whatsapp", "--key", "107", "--rate", "12", "--burst", "3")
	for key, want := range map[string][]string{
		"106": {"106", "12", "12", "(key)"},
		"107": {"107", "12", "12", "(key)"},
		"108": {"108", "80", "80"},
	} {
		out := pacer("status", "--channel", "whatsapp", "--key", key)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		f := strings.Fields(lines[len(lines)-1])
		if len(f) < len(want) || !slices.Equal(f[:len(want)], want) || (len(want) == 3 && f[3] == "(key)") {
			t.Errorf("status --key %s row %q: want KEY RATE/S LIMIT/S = %v\n%s", key, lines[len(lines)-1], want, out)
		}
	}
}

// TestStatusKeyWarmingUp: a key the replicas report but whose first
// window of 5 s has not closed shows "warming up" as its ACHIEVED/S and
// no UTIL, rather than "-" as for a key no replica reported.
func TestStatusKeyWarmingUp(t *testing.T) {
	prefix, rdb, _ := limitTest(t)
	lookup := lookupMap(map[string]string{"PACER_REDIS_URL": testenv.RedisURL(t), "PACER_REDIS_PREFIX": prefix})
	ad := adapt.New(rdb, bucket.Config{Prefix: prefix})
	if _, err := ad.RecoverAfter(t.Context(), "whatsapp", "107", bucket.Limit{PerSecond: 80, Burst: 10}, adapt.AIMD{}, 40); err != nil {
		t.Fatal(err)
	}
	defer rdb.Del(context.Background(), bucket.NewKeys(prefix).Achieved("whatsapp", "107"))
	var out, errb strings.Builder
	if code := run(t.Context(), []string{"status", "--channel", "whatsapp", "--key", "107"}, strings.NewReader(""), &out, &errb, lookup); code != 0 {
		t.Fatalf("pacer status: exit %d\n%s%s", code, out.String(), errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	// KEY RATE/S LIMIT/S ACHIEVED/S UTIL ...
	if f := strings.Fields(lines[len(lines)-1]); len(f) < 6 || f[0] != "107" || f[3]+" "+f[4] != "warming up" || f[5] != "-" {
		t.Errorf("row %q: want ACHIEVED/S \"warming up\" and UTIL -\n%s", lines[len(lines)-1], out.String())
	}
}

// TestPublishLimitWarnsOfAnother: a replica started with another limit than
// the one recorded for its channel says so (both values) at start-up; the
// same limit again is no warning.
func TestPublishLimitWarnsOfAnother(t *testing.T) {
	prefix, rdb, _ := limitTest(t)
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	publishLimit(t.Context(), rdb, prefix, "whatsapp", bucket.Limit{PerSecond: 50, Burst: 10}, limitTTL, log)
	publishLimit(t.Context(), rdb, prefix, "whatsapp", bucket.Limit{PerSecond: 50, Burst: 10}, limitTTL, log)
	if logs.Len() != 0 {
		t.Errorf("the same limit twice: logged %q, want nothing", logs.String())
	}
	publishLimit(t.Context(), rdb, prefix, "whatsapp", bucket.Limit{PerSecond: 40, Burst: 10}, limitTTL, log)
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "recorded_rate=50") || !strings.Contains(out, "rate=40") {
		t.Errorf("another limit: logged %q, want a warning with recorded_rate=50 and rate=40", out)
	}
}
