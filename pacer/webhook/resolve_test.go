package webhook

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/pacerhq/pacer/pacer/suppress"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
)

// flakyMark is a Ledger whose first DeliveredIn fails, as a crash between a
// resolution's count and its mark would leave it.
// It counts the ids read one by one (Outcome).
type flakyMark struct {
	Ledger
	failed bool
	read   map[string]int
}

func (f *flakyMark) Outcome(ctx context.Context, channel, key, id string) (string, error) {
	f.read[id]++
	return f.Ledger.Outcome(ctx, channel, key, id)
}

func (f *flakyMark) DeliveredIn(ctx context.Context, channel, key, id, providerID, campaign string) error {
	if !f.failed {
		f.failed = true
		return errors.New("connection reset")
	}
	return f.Ledger.DeliveredIn(ctx, channel, key, id, providerID, campaign)
}

// TestResolveUnknownOutcomes: sent, delivered and read events of messages
// of unknown outcome, each twice, shuffled, in batches, then the whole
// topic again, with the first ledger mark failing (the batch applied
// again): m1, dead-lettered unknown-outcome, and m2, claimed by a process
// that died and dead-lettered only after its events came, are counted
// delivered once and taken out of dlq:unknown-outcome, and marked
// delivered (a DLQ replay's forced claim answers delivered); m3 (sent by
// a live sender meanwhile) and m4 (dead-lettered permanent) are left as
// they are, and m6 (sent as usual) is not read one by one; m5's failed event counts failed:131026 and leaves it
// dead-lettered.
func TestResolveUnknownOutcomes(t *testing.T) {
	eachCountServer(t, "tru", func(t *testing.T, ctx context.Context, rdb redis.UniversalClient, keys bucket.Keys, st *control.Store) {
		l := ledger.New(rdb, keys, 0)
		led := &flakyMark{Ledger: l, read: map[string]int{}}
		o := NewOutcomes(suppress.NewStore(rdb, keys), nil, prometheus.NewRegistry()).WithCounts(st).WithLedger(led, time.Minute)
		const ch, key = "whatsapp", "1065"
		for _, id := range []string{"m1", "m2", "m3", "m4", "m5"} {
			if res, _, err := l.Claim(ctx, ch, key, id, "dead", false); err != nil || res != ledger.Claimed {
				t.Fatalf("claim %s: %v, %v", id, res, err)
			}
		}
		for id, reason := range map[string]string{"m1": "unknown-outcome", "m4": "permanent", "m5": "unknown-outcome"} {
			if err := l.DeadLettered(ctx, ch, key, id, reason); err != nil {
				t.Fatal(err)
			}
		}
		// The consumer's counts of m1 and m5.
		rdb.HIncrBy(ctx, keys.Campaign(ch, "c1"), control.UnknownOutcome, 2)

		var evs []Event
		if err := l.Delivered(ctx, ch, key, "m6", "wamid.m6"); err != nil { // sent as usual
			t.Fatal(err)
		}
		for _, id := range []string{"m1", "m2", "m3", "m4", "m6"} {
			evs = append(evs, waEvent(id, "sent", 0), waEvent(id, "delivered", 0), waEvent(id, "read", 0))
		}
		evs = append(evs, waEvent("m5", "failed", 131026))
		twice := append(append([]Event(nil), evs...), evs...)
		rand.Shuffle(len(twice), func(i, j int) { twice[i], twice[j] = twice[j], twice[i] })
		for i := 0; i < len(twice); i += 4 {
			err := o.Apply(ctx, twice[i:min(i+4, len(twice))])
			if err != nil { // the flakyMark mark: applied again, as Run does
				err = o.Apply(ctx, twice[i:min(i+4, len(twice))])
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if got := o.Pending(); got != 2 {
			t.Errorf("%d sent events wait for their claim; want 2 (m2, m3)", got)
		}
		// m3's sender lives and records its send; m2's process died:
		// the next consumer dead-letters it as unknown-outcome.
		if err := l.Delivered(ctx, ch, key, "m3", "wamid.m3"); err != nil {
			t.Fatal(err)
		}
		if err := l.DeadLettered(ctx, ch, key, "m2", "unknown-outcome"); err != nil {
			t.Fatal(err)
		}
		rdb.HIncrBy(ctx, keys.Campaign(ch, "c1"), control.UnknownOutcome, 1)
		if err := o.ResolvePending(ctx); err != nil {
			t.Fatal(err)
		}
		if err := o.Apply(ctx, twice); err != nil { // the topic replayed
			t.Fatal(err)
		}
		if err := o.ResolvePending(ctx); err != nil {
			t.Fatal(err)
		}

		s, err := st.CampaignStatus(ctx, ch, "c1")
		if err != nil {
			t.Fatal(err)
		}
		if s.Delivered != 2 || s.DeadLetters["unknown-outcome"] != 1 || !maps.Equal(s.Failed, map[string]int64{"131026": 1}) {
			t.Errorf("c1: delivered %d, dead letters %v, failed %v; want 2 (m1, m2), unknown-outcome 1 (m5), failed 131026: 1",
				s.Delivered, s.DeadLetters, s.Failed)
		}
		for id, want := range map[string]string{
			"m1": "delivered", "m2": "delivered", "m3": "delivered", "m4": "dead-lettered:permanent", "m5": "dead-lettered:unknown-outcome",
		} {
			if got, err := l.Outcome(ctx, ch, key, id); err != nil || got != want {
				t.Errorf("ledger outcome of %s = %q, %v; want %q", id, got, err, want)
			}
		}
		if res, _, err := l.Claim(ctx, ch, key, "m1", "replay", true); err != nil || res != ledger.Delivered {
			t.Errorf("a DLQ replay's forced claim of m1 = %v, %v; want delivered (never sent twice)", res, err)
		}
		if got := o.Pending(); got != 0 {
			t.Errorf("%d sent events still wait; want 0", got)
		}
		if led.read["m6"] != 0 || led.read["m1"] == 0 {
			t.Errorf("ids read one by one %v; want m1 and not m6 (the batch's read found it delivered)", led.read)
		}
		for outcome, want := range map[string]float64{"delivered": 2, "failed": 1} {
			if got := testutil.ToFloat64(o.m.resolved.WithLabelValues(ch, outcome)); got != want {
				t.Errorf("pacer_webhook_unknown_resolved_total{%s,%s} = %v, want %v", ch, outcome, got, want)
			}
		}
	})
}

// TestMatchByProviderID: an event that names only the provider's message
// id takes the envelope id and campaign its delivered mark kept: its
// failure counts in its campaign (a SendGrid event's sg_message_id by
// the X-Message-Id it begins with); one whose provider id the ledger does
// not hold counts nothing.
func TestMatchByProviderID(t *testing.T) {
	eachCountServer(t, "tmp", func(t *testing.T, ctx context.Context, rdb redis.UniversalClient, keys bucket.Keys, st *control.Store) {
		l := ledger.New(rdb, keys, 0)
		reg := prometheus.NewRegistry()
		o := NewOutcomes(suppress.NewStore(rdb, keys), nil, reg).WithCounts(st).WithLedger(l, time.Minute)
		if err := l.DeliveredIn(ctx, "whatsapp", "1065", "m7", "wamid.m7", "c1"); err != nil {
			t.Fatal(err)
		}
		bare := func(id string) Event { // no biz_opaque_callback_data
			ev := waEvent(id, "failed", 131000)
			ev.Message, ev.Campaign = "", ""
			return ev
		}
		if err := o.Apply(ctx, []Event{bare("m7"), bare("m8"), bare("m7")}); err != nil {
			t.Fatal(err)
		}
		if err := l.DeliveredIn(ctx, "sendgrid", "k", "e9", "14c5d75ce93", "c1"); err != nil {
			t.Fatal(err)
		}
		sg := Event{ID: "sg1", Channel: "sendgrid", Key: "k", Kind: "dropped", ProviderID: "14c5d75ce93.filter0001.16648.5515E0B88.0"}
		if err := o.Apply(ctx, []Event{sg}); err != nil {
			t.Fatal(err)
		}
		if s, err := st.CampaignStatus(ctx, "sendgrid", "c1"); err != nil || !maps.Equal(s.Failed, map[string]int64{"dropped": 1}) {
			t.Errorf("sendgrid c1 failed %v, %v; want dropped: 1 (e9, matched by its X-Message-Id)", s.Failed, err)
		}
		s, err := st.CampaignStatus(ctx, "whatsapp", "c1")
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(s.Failed, map[string]int64{"131000": 1}) {
			t.Errorf("c1 failed %v; want 131000: 1 (m7, matched by its wamid, once)", s.Failed)
		}
		for found, want := range map[string]float64{"true": 2, "false": 1} {
			if got := testutil.ToFloat64(o.m.matched.WithLabelValues("whatsapp", found)); got != want {
				t.Errorf("pacer_webhook_provider_id_matches_total{whatsapp,%s} = %v, want %v", found, got, want)
			}
		}
	})
}
