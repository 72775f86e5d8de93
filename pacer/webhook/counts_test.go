package webhook

import (
	"context"
	"maps"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/suppress"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
)

// countServers are a real redis-server and a real Redis Cluster (the
// outcome hashes and the campaign hashes must share the channel's slot).
func countServers(t *testing.T) map[string]redis.UniversalClient {
	one := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), DB: testenv.RedisDB})
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.ClusterAddrs(t)})
	t.Cleanup(func() { one.Close(); cluster.Close() })
	return map[string]redis.UniversalClient{"redis-server": one, "cluster": cluster}
}

// eachCountServer runs f as a subtest on each of countServers' Redis, with
// keys under a prefix (tag, the server's name, the time) no other run
// uses and a campaign store over them.
func eachCountServer(t *testing.T, tag string, f func(t *testing.T, ctx context.Context, rdb redis.UniversalClient, keys bucket.Keys, st *control.Store)) {
	for name, rdb := range countServers(t) {
		t.Run(name, func(t *testing.T) {
			keys := bucket.NewKeys(tag + name + time.Now().Format("150405.000000"))
			f(t, context.Background(), rdb, keys, control.New(rdb, keys))
		})
	}
}

// waEvent is a WhatsApp status of message id of campaign c1, as the
// receiver reads it.
func waEvent(id, status string, code int) Event {
	return Event{ID: "wamid." + id + ":" + status, Channel: "whatsapp", Key: "1065", Kind: status, Message: id, Campaign: "c1",
		ProviderID: "wamid." + id, Code: code, At: time.Unix(1800000000, 0).UTC(), Recipients: []string{suppress.Hash("+1555" + id)}}
}

// TestCampaignOutcomesOnce: every webhook twice, in shuffled order, and
// the whole batch applied again (a replayed events topic) count each
// message once per outcome: m1 delivered then read, m2 read before its
// delivered (delivered counted once), m3 read without any delivered
// (counted delivered), m4 failed 131026 (failed and suppressed), m5
// failed 131000 (failed, not suppressed), m6 sent only (nothing).
// SendGrid's delivered, open, bounce (blocked) and dropped count likewise.
func TestCampaignOutcomesOnce(t *testing.T) {
	eachCountServer(t, "tco", func(t *testing.T, ctx context.Context, rdb redis.UniversalClient, keys bucket.Keys, st *control.Store) {
		o := NewOutcomes(suppress.NewStore(rdb, keys), nil, prometheus.NewRegistry()).WithCounts(st)

		evs := []Event{
			waEvent("m1", "sent", 0), waEvent("m1", "delivered", 0), waEvent("m1", "read", 0),
			waEvent("m2", "read", 0), waEvent("m2", "delivered", 0), waEvent("m2", "sent", 0),
			waEvent("m3", "read", 0),
			waEvent("m4", "failed", 131026),
			waEvent("m5", "failed", 131000),
			waEvent("m6", "sent", 0),
			{ID: "m7:deliveredless", Channel: "whatsapp", Key: "1065", Kind: "delivered", Message: "m7"}, // no campaign
		}
		sg := func(id, kind, reason string) Event {
			return Event{ID: "sg-" + id + kind, Channel: "sendgrid", Key: "k", Kind: kind, Message: id, Campaign: "c1",
				Reason: reason, Recipients: []string{suppress.Hash(id + "@example.com")}}
		}
		evs = append(evs, sg("e1", "processed", ""), sg("e1", "delivered", ""), sg("e1", "open", ""),
			sg("e2", "open", ""), sg("e3", "bounce", "blocked"), sg("e4", "dropped", ""), sg("e5", "deferred", ""))
		twice := append(append([]Event(nil), evs...), evs...)
		rand.Shuffle(len(twice), func(i, j int) { twice[i], twice[j] = twice[j], twice[i] })
		for i := 0; i < len(twice); i += 5 { // in batches, as polls come
			if err := o.Apply(ctx, twice[i:min(i+5, len(twice))]); err != nil {
				t.Fatal(err)
			}
		}
		if err := o.Apply(ctx, twice); err != nil { // the topic replayed
			t.Fatal(err)
		}

		want := map[string]struct {
			dev, read                  int64
			failed, bounced, suppressd map[string]int64
		}{
			"whatsapp": {3, 3, map[string]int64{"131026": 1, "131000": 1}, map[string]int64{}, map[string]int64{"undeliverable": 1}},
			"sendgrid": {2, 2, map[string]int64{"dropped": 1}, map[string]int64{"blocked": 1}, map[string]int64{"bounce": 1, "dropped": 1}},
		}
		for ch, w := range want {
			s, err := st.CampaignStatus(ctx, ch, "c1")
			if err != nil {
				t.Fatal(err)
			}
			if s.DeviceDelivered != w.dev || s.Read != w.read || !maps.Equal(s.Failed, w.failed) ||
				!maps.Equal(s.Bounced, w.bounced) || !maps.Equal(s.Suppressed, w.suppressd) {
				t.Errorf("%s c1: device_delivered %d, read %d, failed %v, bounced %v, suppressed %v; want %d, %d, %v, %v, %v",
					ch, s.DeviceDelivered, s.Read, s.Failed, s.Bounced, s.Suppressed, w.dev, w.read, w.failed, w.bounced, w.suppressd)
			}
		}
		if got := testutil.ToFloat64(o.m.counted.WithLabelValues("whatsapp", control.DeviceDelivered, "counted")); got != 3 {
			t.Errorf("pacer_webhook_outcomes_total{whatsapp,device_delivered,counted} = %v, want 3", got)
		}
		// The outcome hashes expire: a message's kinds are kept OutcomeTTL.
		ttl, err := rdb.PTTL(ctx, keys.Outcomes("whatsapp", "m1")).Result()
		if err != nil || ttl <= control.OutcomeTTL-time.Minute || ttl > control.OutcomeTTL {
			t.Errorf("PTTL of m1's outcomes = %v, %v; want about %v", ttl, err, control.OutcomeTTL)
		}
	})
}

// TestCountOutcomesInvalid: an outcome without its campaign, reason or a
// known kind is refused, naming it, and nothing of its batch is counted.
func TestCountOutcomesInvalid(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), DB: testenv.RedisDB})
	defer rdb.Close()
	keys := bucket.NewKeys("tci" + time.Now().Format("150405.000000"))
	st := control.New(rdb, keys)
	good := control.Outcome{ID: "m1", Campaign: "c1", Kind: control.Read}
	for _, bad := range []control.Outcome{
		{ID: "m2", Kind: control.Read},
		{ID: "m2", Campaign: "c1", Kind: control.Failed},
		{ID: "m2", Campaign: "c1", Kind: "opened"},
		{Campaign: "c1", Kind: control.Read},
	} {
		if _, err := st.CountOutcomes(context.Background(), "whatsapp", []control.Outcome{good, bad}); err == nil {
			t.Errorf("CountOutcomes(%+v) = nil error, want one naming it", bad)
		} else {
			t.Log(err)
		}
	}
	if s, _ := st.CampaignStatus(context.Background(), "whatsapp", "c1"); s.Read != 0 {
		t.Errorf("read %d after refused batches, want 0", s.Read)
	}
}
