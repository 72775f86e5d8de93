package consumer_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/pacer/consumer"
)

// haltSender answers every request with the 401 of a refused credential
// after latency, counting the requests.
type haltSender struct {
	latency time.Duration
	calls   atomic.Int64
}

func (s *haltSender) Send(ctx context.Context, m channels.Message) (channels.Result, error) {
	s.calls.Add(1)
	time.Sleep(s.latency)
	return channels.Result{}, &channels.Error{Channel: "test", Status: 401, Code: "190", Class: channels.Halt}
}

// TestHaltStopsTheKeysSlotsGrantedAhead: a key whose credential the
// provider refuses (401) stops after the requests already in flight when
// the first refusal came back: the senders holding slots granted ahead
// (up to a second of the rate) go back to the breaker gate and are parked,
// instead of each sending with the refused credential (32 of them before).
// At 50 msgs/s, a burst of 1 and 5 ms per answer, one request is in flight
// at a time; a second, on a loaded machine a third, may leave while the
// first answer is being classified.
func TestHaltStopsTheKeysSlotsGrantedAhead(t *testing.T) {
	h := newHarness(t, nil)
	h.cfg.Limit = bucket.Limit{PerSecond: 50, Burst: 1}
	h.cfg.Breaker.OpenFor = time.Minute // no half-open probe during the test
	const n = 200
	values := make([]string, n)
	for i := range values {
		values[i] = fmt.Sprintf(`{"id":"m%d","key":"k1","to":"d-%d"}`, i, i)
	}
	h.produce(values...)
	s := &haltSender{latency: 5 * time.Millisecond}
	_, stop := h.start(h.cfg, s, h.reg)
	// Two seconds: the slots of the first second granted ahead, and more.
	ok := waitFor(20*time.Second, func() bool { return h.counter("pacer_requeued_total", "reason", "breaker") >= n-2 })
	time.Sleep(2 * time.Second)
	stop()
	if !ok {
		t.Fatalf("%v records parked by the breaker, want at least %d", h.counter("pacer_requeued_total", "reason", "breaker"), n-2)
	}
	calls := s.calls.Load()
	if calls < 1 || calls > 3 {
		t.Errorf("%d requests with the refused credential, want 1 to 3", calls)
	}
	if got := h.counter("pacer_sends_total", "class", "halt"); got != float64(calls) {
		t.Errorf("pacer_sends_total{class=halt} = %v, want %d", got, calls)
	}
	if got := h.counter("pacer_dlq_total", "reason", "permanent"); got != 0 {
		t.Errorf("%v records dead-lettered, want none (a halt drops nothing)", got)
	}
}

// versionedSender refuses every request with a 401 until its credential is
// replaced (fix), then accepts; it is a consumer.CredentialVersioner.
type versionedSender struct {
	version atomic.Uint64
	fixed   atomic.Bool
	refused atomic.Int64
	sent    atomic.Int64
}

func (s *versionedSender) CredentialVersion(string) uint64 { return s.version.Load() }

func (s *versionedSender) fix() {
	s.fixed.Store(true)
	s.version.Add(1)
}

func (s *versionedSender) Send(ctx context.Context, m channels.Message) (channels.Result, error) {
	if !s.fixed.Load() {
		s.refused.Add(1)
		return channels.Result{}, &channels.Error{Channel: "test", Status: 401, Code: "190", Class: channels.Halt}
	}
	s.sent.Add(1)
	return channels.Result{ProviderID: "p-" + m.ID}, nil
}

// TestHaltEndsWhenTheCredentialIsReplaced: a key's breaker opened by a
// refused credential stays open (records parked, not sent) for its open
// period, a minute here, unless the sender reports that the key's
// credential was replaced: then the breaker closes and the key's next
// records are sent at once, without waiting for a half-open probe.
func TestHaltEndsWhenTheCredentialIsReplaced(t *testing.T) {
	h := newHarness(t, nil)
	h.cfg.Limit = bucket.Limit{PerSecond: 50, Burst: 1}
	h.cfg.Breaker.OpenFor = time.Minute
	s := &versionedSender{}
	s.version.Store(1)
	batch := func(prefix string, n int) {
		values := make([]string, n)
		for i := range values {
			values[i] = fmt.Sprintf(`{"id":"%s%d","key":"k1","to":"d-%d"}`, prefix, i, i)
		}
		h.produce(values...)
	}
	batch("a", 20)
	_, stop := h.start(h.cfg, s, h.reg)
	defer stop()
	if !waitFor(20*time.Second, func() bool { return h.counter("pacer_requeued_total", "reason", "breaker") >= 18 }) {
		t.Fatalf("%v records parked by the breaker, want the batch's", h.counter("pacer_requeued_total", "reason", "breaker"))
	}
	// Still parked a moment later: nothing sent while the credential is the refused one.
	time.Sleep(500 * time.Millisecond)
	refused := s.refused.Load()
	if refused < 1 || refused > 3 || s.sent.Load() != 0 {
		t.Fatalf("refused %d, sent %d before the credential was replaced; want 1 to 3 refused, none sent", refused, s.sent.Load())
	}
	s.fix()
	batch("b", 10)
	// Well within the minute the breaker would stay open.
	if !waitFor(15*time.Second, func() bool { return s.sent.Load() >= 10 }) {
		t.Fatalf("%d of the 10 records published after the credential was replaced were sent, want all within 15 s (the breaker stays open 1 min without the replacement)", s.sent.Load())
	}
	if got := s.refused.Load(); got != refused {
		t.Errorf("%d more requests refused after the credential was replaced, want none", got-refused)
	}
}

// TestHaltWithRedisDownLocal: with Redis down and PACER_REDIS_FAILURE=local
// there is no shared breaker; a halt must not leave the key's breaker shut
// in this process either (the record would go from the breaker gate to
// breakerShut and back forever): the halted record is sent again and
// delivered.
func TestHaltWithRedisDownLocal(t *testing.T) {
	halt := &channels.Error{Channel: "test", Status: 401, Code: "190", Class: channels.Halt}
	h := newHarness(t, map[string][]error{"halted": {halt}})
	h.cfg.RedisFailure = consumer.RedisFailureLocal
	h.mr.Close()
	h.produce(env("halted"), env("next"))
	s := h.sender
	h.run(func() bool { return s.count(s.success, "halted") == 1 && s.count(s.success, "next") == 1 })
	if got := s.count(s.calls, "halted"); got != 2 {
		t.Errorf("halted: %d requests, want 2 (the halt, then the delivery)", got)
	}
}
