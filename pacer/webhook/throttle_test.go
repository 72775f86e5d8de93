package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
	"github.com/pacerhq/pacer/internal/redistest"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/keypace"
	"github.com/pacerhq/pacer/pacer/suppress"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
)

// waThrottle is the scope and least cooldown of the WhatsApp throttles
// the tests use, as whatsapp.ThrottleOf gives them (cmd/pacer wires that).
func waThrottle(_ string, code int) (channels.Scope, time.Duration, bool) {
	switch code {
	case 130429:
		return channels.ScopeKey, 0, true
	case 131056:
		return channels.ScopePair, 0, true
	case 80007:
		return channels.ScopeAccount, time.Minute, true
	}
	return 0, 0, false
}

// throttleFixture is an Outcomes applying WhatsApp's webhook throttles
// to key 1065 at 80/s burst 10 (the AIMD defaults: Persist 2s, Coalesce
// 500ms, MinCooldown 13ms), on e, its clock at offset off (step moves
// both Redis's clock and the Outcomes').
type throttleFixture struct {
	e   *redistest.Env
	o   *Outcomes
	ad  *adapt.Adapter
	reg *prometheus.Registry
	pol control.StaticPolicy
	off time.Duration
	t0  time.Time
}

func newThrottleFixture(t *testing.T, e *redistest.Env) *throttleFixture {
	f := &throttleFixture{e: e, reg: prometheus.NewRegistry(), t0: redistest.T0,
		pol: control.StaticPolicy{Limit: bucket.Limit{PerSecond: 80, Burst: 10}}}
	keys := bucket.NewKeys(e.Prefix)
	f.ad = adapt.New(e.RDB, bucket.Config{Prefix: e.Prefix})
	f.o = NewOutcomes(suppress.NewStore(e.RDB, keys), nil, f.reg).WithThrottles(Throttles{
		Adapter: f.ad, Policy: map[string]control.Policy{"whatsapp": f.pol}, Throttle: waThrottle})
	if e.Exact() {
		f.o.now = func() time.Time { return f.t0.Add(f.off) }
	} else {
		f.t0 = time.Now()
		e.Mark()
	}
	return f
}

// step moves to offset d from the fixture's start.
func (f *throttleFixture) step(d time.Duration) {
	f.e.At(d)
	f.off = d
}

// now is the Outcomes' clock.
func (f *throttleFixture) now() time.Time { return f.o.now() }

func (f *throttleFixture) apply(t *testing.T, evs ...Event) {
	t.Helper()
	if err := f.o.Apply(context.Background(), evs); err != nil {
		t.Fatalf("apply: %v", err)
	}
}

func (f *throttleFixture) state(t *testing.T) adapt.Adapted {
	t.Helper()
	a, err := f.ad.Adapted(context.Background(), "whatsapp", "1065", f.pol.Limit, f.pol.AIMD)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (f *throttleFixture) count(result string) float64 {
	return testutil.ToFloat64(f.o.m.throttles.WithLabelValues("whatsapp", "key", result))
}

// failed is a WhatsApp status "failed" of message wamid with code, seen
// by the provider at at.
func failed(wamid string, code int, at time.Time) Event {
	return Event{ID: wamid + ":failed", Channel: "whatsapp", Key: "1065", Kind: "failed", Code: code, At: at,
		ProviderID: wamid, Recipients: []string{suppress.Hash("15551234567")}}
}

// TestWebhookThrottleCutsOnce: a 130429 reported by webhook is a throttle
// of its key as an answer's is: the first, lone, sets the cooldown and
// keeps the rate; a second 800ms later (past Coalesce, within Persist)
// lowers the rate once; the provider's retry of that webhook 700ms after
// it (past the episode's hold, so the AIMD alone would cut again) and a
// throttle of a send made before the cut (its status older than the
// decrease) cut nothing.
func TestWebhookThrottleCutsOnce(t *testing.T) {
	redistest.Each(t, func(t *testing.T, e *redistest.Env) {
		f := newThrottleFixture(t, e)
		f.step(0)
		f.apply(t, failed("wamid.1", 130429, f.now()))
		a := f.state(t)
		if a.Rate != 80 || a.CooldownLeft <= 0 || f.count("cooldown") != 1 {
			t.Fatalf("a lone webhook throttle: rate %v, cooldown %v, counted cooldown %v; want 80, a cooldown, 1",
				a.Rate, a.CooldownLeft, f.count("cooldown"))
		}
		f.step(800 * time.Millisecond)
		second := failed("wamid.2", 130429, f.now())
		f.apply(t, second)
		cut := f.state(t)
		if !(cut.Rate >= 64 && cut.Rate < 80) || cut.CooldownLeft <= 0 || f.count("decreased") != 1 {
			t.Fatalf("a second webhook throttle 800ms later: rate %v, cooldown %v, decreased %v; want the rate cut once (64..80), a cooldown, 1",
				cut.Rate, cut.CooldownLeft, f.count("decreased"))
		}
		f.step(1500 * time.Millisecond)
		f.apply(t, second) // the provider's retry of the same webhook
		if a := f.state(t); a.Rate != cut.Rate || f.count("duplicate") != 1 || f.count("decreased") != 1 {
			t.Fatalf("the same webhook again: rate %v, duplicate %v, decreased %v; want %v (no second cut), 1, 1",
				a.Rate, f.count("duplicate"), f.count("decreased"), cut.Rate)
		}
		f.apply(t, failed("wamid.3", 130429, f.now().Add(-1300*time.Millisecond)))
		if a := f.state(t); a.Rate != cut.Rate || f.count("decreased") != 1 {
			t.Fatalf("a third throttle of the episode, sent before the cut: rate %v, decreased %v; want %v, 1", a.Rate, f.count("decreased"), cut.Rate)
		}
	})
}

// TestWebhookThrottleStale: a 130429 whose status is older than the
// key's Persist (2s) plus the timestamp's second changes nothing and is
// counted stale; one within it sets the cooldown.
func TestWebhookThrottleStale(t *testing.T) {
	redistest.Each(t, func(t *testing.T, e *redistest.Env) {
		f := newThrottleFixture(t, e)
		f.step(0)
		f.apply(t, failed("wamid.old", 130429, f.now().Add(-10*time.Second)))
		if a := f.state(t); a.Rate != 80 || a.CooldownLeft != 0 || f.count("stale") != 1 {
			t.Fatalf("a throttle 10s old: rate %v, cooldown %v, stale %v; want 80, none, 1", a.Rate, a.CooldownLeft, f.count("stale"))
		}
		f.apply(t, failed("wamid.late", 130429, f.now().Add(-2500*time.Millisecond)))
		if a := f.state(t); a.CooldownLeft <= 0 || f.count("stale") != 1 || f.count("cooldown") != 1 {
			t.Fatalf("a throttle 2.5s old: cooldown %v, stale %v, cooldown count %v; want a cooldown, 1, 1",
				a.CooldownLeft, f.count("stale"), f.count("cooldown"))
		}
	})
}

// TestWebhookPairThrottle: a 131056 reported by webhook sets the cooldown
// (1 s: no hint, no recipient limit) and learned rate (1/s) of the pair
// the pacers name for the recipient, whichever spelling its envelope
// used; the key's own rate and cooldown are untouched. An account
// throttle (80007) is counted skipped and changes nothing.
func TestWebhookPairThrottle(t *testing.T) {
	redistest.Each(t, func(t *testing.T, e *redistest.Env) {
		f := newThrottleFixture(t, e)
		f.step(0)
		f.apply(t, failed("wamid.p", 131056, f.now()), failed("wamid.a", 80007, f.now()))
		pairs, err := f.ad.Pairs(context.Background(), "whatsapp", "1065")
		if err != nil {
			t.Fatal(err)
		}
		p, ok := pairs[keypace.PairSub(suppress.Hash("+15551234567"))]
		if !ok || len(pairs) != 1 || p.Rate != 1 || p.Left <= 0 || p.Left > time.Second {
			t.Fatalf("pairs %+v; want one, of +15551234567's sub, rate 1/s, cooldown up to 1s", pairs)
		}
		if a := f.state(t); a.Rate != 80 || a.CooldownLeft != 0 {
			t.Errorf("key after a pair throttle: rate %v, cooldown %v; want 80, none", a.Rate, a.CooldownLeft)
		}
		pair := testutil.ToFloat64(f.o.m.throttles.WithLabelValues("whatsapp", "pair", "pair"))
		skipped := testutil.ToFloat64(f.o.m.throttles.WithLabelValues("whatsapp", "account", "skipped"))
		if pair != 1 || skipped != 1 {
			t.Errorf("counted pair %v, account skipped %v; want 1, 1", pair, skipped)
		}
	})
}

// capture is a Producer that keeps the events of the records it is given.
type capture struct {
	mu  sync.Mutex
	evs []Event
}

func (c *capture) ProduceSync(_ context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	out := make(kgo.ProduceResults, len(rs))
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range rs {
		var ev Event
		out[i] = kgo.ProduceResult{Record: r, Err: json.Unmarshal(r.Value, &ev)}
		c.evs = append(c.evs, ev)
	}
	return out
}

// TestFakeThrottleWebhooks: the WhatsApp fake's 130429 status webhooks
// (for messages its answer accepted, late, each sent twice) become key
// throttles of the number: those of the first messages, applied at once,
// set the cooldown (the first, lone) and count in its hold; those of the
// later messages, applied 800ms on, cut the rate once; every retry is a
// duplicate.
func TestFakeThrottleWebhooks(t *testing.T) {
	prod := &capture{}
	hs := httptest.NewServer(New(Config{WhatsAppAppSecret: secret, WhatsAppVerifyToken: "v"}, prod, nil))
	t.Cleanup(hs.Close)
	fake := whatsapptest.NewServer(whatsapptest.Config{})
	t.Cleanup(fake.Close)
	fake.SendWebhooks(whatsapptest.Webhooks{URL: hs.URL + "/webhook/whatsapp", AppSecret: secret, Throttled: 1, Duplicate: 1,
		Delay: 50 * time.Millisecond, Retry: 20 * time.Millisecond})
	const n = 10
	bodies := make([]string, n)
	for i := range n {
		bodies[i] = fmt.Sprintf(`{"messaging_product":"whatsapp","to":"+1555000%04d","type":"text","text":{"body":"hi"}}`, i)
	}
	if err := fake.Send("1065", bodies...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := fake.WaitWebhooks(ctx)
	if err != nil || st.Failed130429 != n || st.Posts != 2*n || st.Sent != 0 {
		t.Fatalf("fake webhooks %+v, %v; want %d messages failed 130429, each posted twice", st, err, n)
	}
	prod.mu.Lock()
	evs := prod.evs
	prod.mu.Unlock()
	byMessage := map[string][]Event{}
	var order []string
	for _, ev := range evs {
		if ev.Kind != "failed" || ev.Code != 130429 || ev.Key != "1065" {
			t.Fatalf("event %+v; want a failed 130429 of key 1065", ev)
		}
		if _, ok := byMessage[ev.ProviderID]; !ok {
			order = append(order, ev.ProviderID)
		}
		byMessage[ev.ProviderID] = append(byMessage[ev.ProviderID], ev)
	}
	var first, later []Event
	for i, id := range order {
		if i < n/2 {
			first = append(first, byMessage[id]...)
		} else {
			later = append(later, byMessage[id]...)
		}
	}

	f := newThrottleFixture(t, redistest.Mini(t))
	f.o.now = time.Now // the fake's timestamps are the wall clock's
	f.apply(t, first...)
	if a := f.state(t); a.Rate != 80 || a.CooldownLeft <= 0 || f.count("cooldown") != n/2 || f.count("duplicate") != n/2 {
		t.Fatalf("first messages' throttles: rate %v, cooldown %v, counted cooldown %v, duplicate %v; want 80, a cooldown, %d, %d",
			a.Rate, a.CooldownLeft, f.count("cooldown"), f.count("duplicate"), n/2, n/2)
	}
	f.e.MR.SetTime(redistest.T0.Add(800 * time.Millisecond))
	f.apply(t, later...)
	a := f.state(t)
	if !(a.Rate >= 64 && a.Rate < 80) || f.count("decreased") != 1 || f.count("cooldown") != n-1 || f.count("duplicate") != n || f.count("stale") != 0 {
		t.Fatalf("later messages' throttles: rate %v, decreased %v, cooldown %v, duplicate %v, stale %v; want one cut (64..80), 1, %d, %d, 0",
			a.Rate, f.count("decreased"), f.count("cooldown"), f.count("duplicate"), f.count("stale"), n-1, n)
	}
}
