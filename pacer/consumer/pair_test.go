package consumer_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/channels/whatsapp"
	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
)

// pairNumber is the phone-number ID of the pair tests' envelopes.
const pairNumber = "106540352200001"

// tripCounter counts the requests go-redis clients make of Redis: one per
// command sent alone, one per pipeline, as pacer_redis_round_trips_total
// counts them.
type tripCounter struct{ n atomic.Int64 }

func (c *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(1); return next(ctx, cmds) }
}

// pairRun sends n envelopes of pairNumber, to n recipients (distinct) or
// to one, through a pacer with pair limit pair against the strict WhatsApp
// fake enforcing a pair bucket of fakeEvery and burst 45, and returns the
// fake's statistics of the key, how long from the first accepted request
// to the last, and the Redis round trips per delivered message.
func pairRun(t *testing.T, pair ledger.Pair, fakeEvery time.Duration, n int, distinct bool, within time.Duration) (whatsapptest.KeyStats, time.Duration, float64, *harness) {
	t.Helper()
	f := whatsapptest.NewServer(whatsapptest.Config{PairRate: 1 / fakeEvery.Seconds(), PairBurst: 45, Token: "t"})
	t.Cleanup(f.Close)
	s, err := whatsapp.New(whatsapp.Config{BaseURL: f.URL(), Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, nil)
	trips := &tripCounter{}
	h.hook = trips
	h.cfg.Channel = "whatsapp"
	h.cfg.Limit = bucket.Limit{PerSecond: 80, Burst: 10}
	h.cfg.Pair = pair
	h.cfg.RetryDelays = nil // 5s, 30s, 5m: a deferral shorter than 5 s comes back when due, in one hop
	var rs []*kgo.Record
	for i := range n {
		to := "15550001111"
		if distinct {
			to = fmt.Sprintf("1555%07d", i)
		}
		rs = append(rs, &kgo.Record{Topic: "pacer.test", Key: []byte(pairNumber),
			Value: fmt.Appendf(nil, `{"id":"m%d","key":%q,"to":%q,"payload":{"type":"text","text":{"body":"hello"}}}`, i, pairNumber, to)})
	}
	h.produceManual(rs)
	_, stop := h.start(h.cfg, s, h.reg)
	delivered := func() int { return f.Stats()[pairNumber].Delivered }
	ok := waitFor(within, func() bool { return delivered() == n })
	stop()
	st := f.Stats()[pairNumber]
	if !ok {
		t.Fatalf("%d of %d delivered within %v (%d throttled)", st.Delivered, n, within, st.Throttled)
	}
	return st, st.Last.Sub(st.First), float64(trips.n.Load()) / float64(n), h
}

// TestPairLimitMeetsTheProvider: 50 messages from one number to one
// recipient, against the strict fake enforcing WhatsApp's pair bucket
// (burst 45, then one per interval; scaled here to one per 3 s, so the
// ideal is 15 s: 45 at once, then 5 one every 3 s), finish near the ideal
// with at most one 131056, the 5 beyond the burst deferred ("pair-limit")
// until the pair's next turn, never counted as attempts. Without the pair
// limit the pacer learned the pair from its throttles (a first cooldown of
// 1 s, then at least a minute per throttle) and took far longer.
func TestPairLimitMeetsTheProvider(t *testing.T) {
	every := 3 * time.Second
	st, took, trips, h := pairRun(t, ledger.Pair{Every: every, Burst: 45}, every, 50, false, 40*time.Second)
	t.Logf("50 messages to one recipient: %v from first to last, %d throttled, %.3f Redis round trips per message", took, st.Throttled, trips)
	if st.Throttled > 1 {
		t.Errorf("%d requests answered 131056, want at most 1", st.Throttled)
	}
	if ideal := 5 * every; took > ideal+3*time.Second {
		t.Errorf("50 messages took %v from the first to the last, want about %v", took, ideal)
	}
	// Each turn goes to one of the messages that wait for it, the others
	// are deferred again: 5 + 4 + 3 + 2 + 1 deferrals.
	if n := h.counter("pacer_requeued_total", "reason", "pair-limit"); n < 5 || n > 15 {
		t.Errorf("pacer_requeued_total{reason=pair-limit} = %v, want 5 to 15", n)
	}
	if n := h.counter("pacer_retries_total"); n != 0 {
		t.Errorf("pacer_retries_total = %v, want 0: a deferral is no attempt", n)
	}
}

// TestPairLimitCostsNoRoundTrip: with the pair limit on, 300 messages to
// 300 recipients (the common case) make no more Redis round trips per
// delivered message than without it: the pair's turn is taken in the
// ledger claim's own script call.
func TestPairLimitCostsNoRoundTrip(t *testing.T) {
	_, _, off, _ := pairRun(t, ledger.Pair{}, 6*time.Second, 300, true, 30*time.Second)
	_, _, on, _ := pairRun(t, ledger.Pair{Every: 6 * time.Second, Burst: 45}, 6*time.Second, 300, true, 30*time.Second)
	t.Logf("Redis round trips per delivered message, 300 recipients: %.3f with the pair limit, %.3f without", on, off)
	if on > off*1.25+0.05 {
		t.Errorf("%.3f Redis round trips per delivered message with the pair limit, more than the %.3f without", on, off)
	}
}
