package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/pacer/consumer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestOutcomes runs with the ledger's default flush interval and with 5 ms
// (claims started ahead of the slot, marks and releases queued): every
// outcome the same.
func TestOutcomes(t *testing.T) { eachLedger(t, testOutcomes) }

func testOutcomes(t *testing.T, batched time.Duration) {
	throttle := &channels.Error{Channel: "test", Status: 429, Code: "130429", Class: channels.Throttle}
	pair := &channels.Error{Channel: "test", Status: 429, Code: "131056", Class: channels.Throttle, Scope: channels.ScopePair, RetryAfter: 30 * time.Millisecond}
	transient := &channels.Error{Channel: "test", Status: 503, Code: "2", Class: channels.Transient}
	permanent := &channels.Error{Channel: "test", Status: 400, Code: "131026", Class: channels.Permanent}
	halt := &channels.Error{Channel: "test", Status: 401, Code: "190", Class: channels.Halt}
	h := newHarness(t, map[string][]error{
		"throttled": {throttle, throttle},
		"pair":      {pair},
		"flaky":     {transient},
		"broken":    {transient, transient, transient, transient},
		"bad":       {permanent},
		"halted":    {halt},
	})
	h.batched = batched
	h.produce(env("ok"), env("throttled"), env("pair"), env("flaky"), env("broken"), env("bad"), env("halted"),
		`not json`, `{"id":"old","key":"k1","to":"1","expires_at":"2001-01-01T00:00:00Z"}`, env("last"))
	s := h.sender
	h.run(func() bool {
		// Every record whose outcome is asserted below: a halt answered
		// before "ok" (or "bad") was sent parks it behind the breaker
		// until a probe succeeds, and the run must not stop before that.
		return s.count(s.success, "ok") == 1 && s.count(s.success, "last") == 1 && s.count(s.success, "flaky") == 1 &&
			s.count(s.success, "pair") == 1 && s.count(s.success, "halted") == 1 && s.count(s.success, "throttled") == 1 &&
			h.counter("pacer_dlq_total", "reason", "attempts-exhausted") == 1 && h.counter("pacer_dlq_total", "reason", "permanent") == 1 &&
			h.counter("pacer_dlq_total", "reason", "malformed") == 1 && h.counter("pacer_dlq_total", "reason", "expired") == 1
	})

	for id, want := range map[string]int{"ok": 1, "throttled": 3, "pair": 2, "flaky": 2, "broken": 3, "bad": 1, "halted": 2, "last": 1} {
		if got := s.count(s.calls, id); got != want {
			t.Errorf("%s: %d requests, want %d", id, got, want)
		}
	}
	for _, id := range []string{"ok", "throttled", "pair", "flaky", "halted", "last"} {
		if got := s.count(s.success, id); got != 1 {
			t.Errorf("%s: delivered %d times, want once", id, got)
		}
	}
	reasons := h.dlq(4)
	for v, want := range map[string]string{
		env("broken"): "attempts-exhausted",
		env("bad"):    "permanent:131026",
		`not json`:    "malformed",
		`{"id":"old","key":"k1","to":"1","expires_at":"2001-01-01T00:00:00Z"}`: "expired",
	} {
		if reasons[v] != want {
			t.Errorf("DLQ reason of %s = %q, want %q", v, reasons[v], want)
		}
	}
	if len(reasons) != 4 {
		t.Errorf("DLQ holds %d records, want 4: %v", len(reasons), reasons)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"pacer_delivered_total", nil, 6},
		{"pacer_sends_total", []string{"class", "throttle"}, 3},
		{"pacer_sends_total", []string{"class", "transient"}, 4},
		{"pacer_sends_total", []string{"class", "permanent"}, 1},
		{"pacer_sends_total", []string{"class", "halt"}, 1},
		{"pacer_dlq_total", []string{"reason", "malformed"}, 1},
		{"pacer_dlq_total", []string{"reason", "permanent"}, 1},
	} {
		if got := h.counter(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if problems, err := testutil.GatherAndLint(h.reg); err != nil || len(problems) > 0 {
		t.Errorf("metric lint: %v %v", err, problems)
	}

	// Everything finished was committed.
	lag, err := kadm.NewClient(h.cl).Lag(context.Background(), "pacer-test")
	if err != nil {
		t.Fatal(err)
	}
	if l := lag["pacer-test"].Lag.Total(); l != 0 {
		t.Errorf("lag after shutdown = %d, want 0", l)
	}
}

// TestCooldownSharedByReplicas: a key-scoped throttle seen by one replica
// cools the key down for every replica sharing its Redis. Three Pacers of
// channel "test" share one Redis; each reads its own topic, so which
// replica handles which message is fixed. Replica 0 is throttled for k1
// with Retry-After 1 s; the k1 messages produced for replicas 1 and 2 after
// that answer are sent only once the cooldown has passed, and so is replica
// 0's retry.
func TestCooldownSharedByReplicas(t *testing.T) {
	const cooldown = time.Second
	h := newHarness(t, nil)
	senders := make([]*scriptSender, 3)
	regs := make([]*prometheus.Registry, 3)
	cfgs := make([]consumer.Config, 3)
	for i := range senders {
		senders[i] = &scriptSender{script: map[string][]error{}, calls: map[string]int{}, success: map[string]int{}, at: map[string]time.Time{}}
		regs[i] = prometheus.NewRegistry()
		cfgs[i] = h.cfg
		if i > 0 {
			cfgs[i].Topic = fmt.Sprintf("pacer.test.r%d", i)
			cfgs[i].Group = fmt.Sprintf("pacer-test-r%d", i)
		}
	}
	senders[0].script["a"] = []error{&channels.Error{Channel: "test", Status: 429, Code: "130429", Class: channels.Throttle, RetryAfter: cooldown}}
	for i := range senders {
		h.start(cfgs[i], senders[i], regs[i])
	}
	// Every replica has created its topics and owns its partitions.
	if !waitFor(20*time.Second, func() bool {
		for _, reg := range regs {
			if gaugeIn(t, reg, "pacer_partitions_assigned") <= 0 {
				return false
			}
		}
		return true
	}) {
		t.Fatal("not every replica was assigned its partitions within 20 s")
	}

	h.produce(env("a"))
	s0 := senders[0]
	if !waitFor(20*time.Second, func() bool { return s0.count(s0.calls, "a") >= 1 }) {
		t.Fatal("replica 0 did not send a within 20 s")
	}
	s0.mu.Lock()
	throttledAt := s0.at["a"]
	s0.mu.Unlock()
	for i := 1; i < 3; i++ {
		rec := &kgo.Record{Topic: cfgs[i].Topic, Key: []byte("k1"), Value: []byte(env(fmt.Sprint("b", i)))}
		if err := h.cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if !waitFor(20*time.Second, func() bool {
		return s0.count(s0.success, "a") == 1 && senders[1].count(senders[1].success, "b1") == 1 &&
			senders[2].count(senders[2].success, "b2") == 1
	}) {
		t.Fatalf("within 20 s: a delivered %d, b1 %d, b2 %d; want 1 each", s0.count(s0.success, "a"),
			senders[1].count(senders[1].success, "b1"), senders[2].count(senders[2].success, "b2"))
	}
	// Redis keeps time in milliseconds: allow 10 ms of rounding.
	for i, id := range []string{"a", "b1", "b2"} {
		s := senders[i]
		s.mu.Lock()
		after := s.at[id].Sub(throttledAt)
		s.mu.Unlock()
		if after < cooldown-10*time.Millisecond {
			t.Errorf("replica %d sent %s %v after the throttle, inside the %v cooldown", i, id, after, cooldown)
		}
	}
	if got := s0.count(s0.calls, "a"); got != 2 {
		t.Errorf("a: %d requests, want 2 (throttled, then delivered)", got)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  consumer.Config
		want string
	}{
		{"no channel", consumer.Config{Limit: bucket.Limit{PerSecond: 1, Burst: 1}}, "Channel: is required"},
		{"zero rate", consumer.Config{Channel: "c", Limit: bucket.Limit{PerSecond: 0, Burst: 1}}, "invalid limit"},
		{"zero burst", consumer.Config{Channel: "c", Limit: bucket.Limit{PerSecond: 5, Burst: 0}}, "invalid limit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := consumer.New(c.cfg, nil, consumer.Deps{Bucket: bucket.New(nil, bucket.Config{}), Adapter: adapt.New(nil, bucket.Config{}), Ledger: newLedger(t, nil, bucket.Keys{}, 0), Sender: &scriptSender{}}, prometheus.NewRegistry())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
}

// TestNewRejectsShortLedgerTTL: a ledger that forgets ids sooner than
// IdempotencyTTL would let re-delivered copies be sent again.
func TestNewRejectsShortLedgerTTL(t *testing.T) {
	cfg := consumer.Config{Channel: "c", Limit: bucket.Limit{PerSecond: 5, Burst: 1}, IdempotencyTTL: 20 * time.Minute}
	for _, c := range []struct {
		ttl  time.Duration
		want string // "" for no error
	}{
		{10 * time.Minute, "the ledger keeps ids 10m0s, less than IdempotencyTTL 20m0s"},
		{20 * time.Minute, ""},
	} {
		_, err := consumer.New(cfg, nil, consumer.Deps{Bucket: bucket.New(nil, bucket.Config{}), Adapter: adapt.New(nil, bucket.Config{}), Ledger: newLedger(t, nil, bucket.Keys{}, c.ttl), Sender: &scriptSender{}}, prometheus.NewRegistry())
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("ledger TTL %v: err = %v, want %q", c.ttl, err, c.want)
		}
	}
}

// TestIdempotency: a copy of a delivered id is skipped; an id claimed by a
// process that died mid-send is dead-lettered as unknown-outcome, unless an
// operator replayed it from the DLQ.
func TestIdempotency(t *testing.T) { eachLedger(t, testIdempotency) }

func testIdempotency(t *testing.T, batched time.Duration) {
	h := newHarness(t, nil)
	h.batched = batched
	h.deadClaims("crashed", "replayed")
	h.produce(env("twice"), env("twice"), env("crashed"))
	rep := &kgo.Record{Topic: "pacer.test", Key: []byte("k1"), Value: []byte(env("replayed")),
		Headers: []kgo.RecordHeader{{Key: "pacer-replayed", Value: []byte("1")}}}
	if err := h.cl.ProduceSync(context.Background(), rep).FirstErr(); err != nil {
		t.Fatal(err)
	}
	h.produce(env("last"))
	s := h.sender
	h.run(func() bool {
		return s.count(s.success, "last") == 1 && s.count(s.success, "replayed") == 1 &&
			h.counter("pacer_duplicates_skipped_total") == 1 && h.counter("pacer_dlq_total", "reason", "unknown-outcome") == 1
	})
	if got := s.count(s.calls, "twice"); got != 1 {
		t.Errorf("twice: %d requests, want 1", got)
	}
	if got := s.count(s.calls, "crashed"); got != 0 {
		t.Errorf("crashed: %d requests, want 0 (unknown outcome goes to the DLQ)", got)
	}
	if got := h.counter("pacer_duplicates_skipped_total"); got != 1 {
		t.Errorf("pacer_duplicates_skipped_total = %v, want 1", got)
	}
	if r := h.dlq(1)[env("crashed")]; r != "unknown-outcome" {
		t.Errorf("crashed: DLQ reason %q, want unknown-outcome", r)
	}
}

// TestLongCooldownRequeues: a cooldown longer than MaxTokenWait puts the
// record back without an attempt; it is delivered once the cooldown ends,
// even with MaxAttempts 1.
func TestLongCooldownRequeues(t *testing.T) {
	h := newHarness(t, nil)
	h.cfg.MaxAttempts = 1
	h.cfg.MaxTokenWait = 100 * time.Millisecond
	rdb := redis.NewClient(&redis.Options{Addr: h.mr.Addr()})
	defer rdb.Close()
	if err := bucket.New(rdb, bucket.Config{}).Cooldown(context.Background(), "test", "k1", 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	h.produce(env("a"), env("b"))
	s := h.sender
	h.run(func() bool { return s.count(s.success, "a") == 1 && s.count(s.success, "b") == 1 })
	if el := time.Since(start); el < 1400*time.Millisecond {
		t.Errorf("delivered after %v, before the 1.5 s cooldown ended", el)
	}
	if got := h.counter("pacer_requeued_total", "reason", "cooldown"); got < 2 {
		t.Errorf("pacer_requeued_total{cooldown} = %v, want >= 2", got)
	}
	if got := h.counter("pacer_dlq_total", "reason", "attempts-exhausted"); got != 0 {
		t.Errorf("attempts-exhausted = %v, want 0", got)
	}
	if s.count(s.calls, "a") != 1 || s.count(s.calls, "b") != 1 {
		t.Errorf("requests a=%d b=%d, want 1 each", s.count(s.calls, "a"), s.count(s.calls, "b"))
	}
}

// TestRedisFailureClosed: in closed mode (the default) with Redis down,
// the pacer fetches the records but sends none and is not ready; once Redis
// answers again it sends each of them once and is ready.
func TestRedisFailureClosed(t *testing.T) {
	h := newHarness(t, nil)
	h.cfg.RedisFailure = consumer.RedisFailureClosed
	h.mr.Close() // Redis is down from the start
	ids := []string{"a", "b", "c"}
	for _, id := range ids {
		h.produce(env(id))
	}
	polled := &pollCounter{topic: h.cfg.Topic}
	p, stop := h.start(h.cfg, h.sender, h.reg, kgo.WithHooks(polled))
	defer stop()
	s := h.sender
	sum := func(m map[string]int) (n int) {
		for _, id := range ids {
			n += s.count(m, id)
		}
		return n
	}

	// Down: all three records reached the pacer, which keeps retrying Redis
	// for them (several failed calls after the fetch), sends nothing and
	// says it is not ready.
	if !waitFor(20*time.Second, func() bool { return polled.n.Load() == 3 && h.counter("pacer_redis_errors_total") >= 1 }) {
		t.Fatalf("Redis down: %d of 3 records polled, pacer_redis_errors_total %v; want 3 and >= 1",
			polled.n.Load(), h.counter("pacer_redis_errors_total"))
	}
	errs := h.counter("pacer_redis_errors_total")
	if !waitFor(20*time.Second, func() bool { return h.counter("pacer_redis_errors_total") >= errs+3 }) {
		t.Fatalf("pacer_redis_errors_total stayed at %v: the pacer stopped retrying Redis", h.counter("pacer_redis_errors_total"))
	}
	if n := sum(s.calls); n != 0 {
		t.Errorf("Redis down: %d sends, want 0", n)
	}
	if p.Ready() {
		t.Error("Redis down: Ready() = true, want false")
	}
	if g := h.gauge("pacer_ready"); g != 0 {
		t.Errorf("Redis down: pacer_ready = %v, want 0", g)
	}
	if g := h.gauge("pacer_redis_fallback"); g == 1 {
		t.Error("closed mode reports pacer_redis_fallback 1")
	}

	// Back: each record is sent once, and the pacer is ready again.
	if err := h.mr.Restart(); err != nil {
		t.Fatal(err)
	}
	if !waitFor(20*time.Second, func() bool { return sum(s.success) == 3 && p.Ready() }) {
		t.Fatalf("Redis back: delivered %d of 3, Ready() %v; want 3, true", sum(s.success), p.Ready())
	}
	for _, id := range ids {
		if got := s.count(s.calls, id); got != 1 {
			t.Errorf("%s: %d requests, want 1", id, got)
		}
	}
	if g := h.gauge("pacer_ready"); g != 1 {
		t.Errorf("Redis back: pacer_ready = %v, want 1", g)
	}
}

// TestRedisFailureLocal: in local mode with Redis down, the pacer keeps
// sending through its in-process bucket and says so on pacer_redis_fallback.
func TestRedisFailureLocal(t *testing.T) {
	h := newHarness(t, nil)
	h.cfg.RedisFailure = consumer.RedisFailureLocal
	h.mr.Close() // Redis is down from the start
	h.produce(env("a"), env("b"), env("c"))
	s := h.sender
	h.run(func() bool {
		return s.count(s.success, "a")+s.count(s.success, "b")+s.count(s.success, "c") == 3
	})
	if sent := s.count(s.calls, "a") + s.count(s.calls, "b") + s.count(s.calls, "c"); sent != 3 {
		t.Errorf("local: %d sends, want 3", sent)
	}
	if g := h.gauge("pacer_redis_fallback"); g != 1 {
		t.Errorf("local: pacer_redis_fallback = %v, want 1", g)
	}
	if got := h.counter("pacer_redis_errors_total"); got < 1 {
		t.Errorf("pacer_redis_errors_total = %v, want >= 1", got)
	}
}

// pollCounter is a kgo hook counting the records of topic that the client
// returned from a poll.
type pollCounter struct {
	topic string
	n     atomic.Int64
}

func (c *pollCounter) OnFetchRecordUnbuffered(r *kgo.Record, polled bool) {
	if polled && r.Topic == c.topic {
		c.n.Add(1)
	}
}

// TestTooLargeForDLQ: a record whose DLQ copy exceeds the producer's
// message size is still dead-lettered (value cut, pacer-truncated set), and
// the partition keeps flowing.
func TestTooLargeForDLQ(t *testing.T) {
	h := newHarness(t, map[string][]error{
		"big": {&channels.Error{Channel: "test", Status: 400, Code: "131026", Class: channels.Permanent}},
	})
	big := fmt.Sprintf(`{"id":"big","key":"k1","to":"1","payload":{"x":%q}}`, strings.Repeat("x", 1_040_000))
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.kc.ListenAddrs()...), kgo.ProducerBatchMaxBytes(4<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "pacer.test", Key: []byte("k1"), Value: []byte(big),
		Headers: []kgo.RecordHeader{{Key: "campaign", Value: []byte("spring")}, {Key: "bulky", Value: make([]byte, 4<<10)}}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	h.produce(env("after"))
	s := h.sender
	h.run(func() bool {
		return s.count(s.success, "after") == 1 && h.counter("pacer_dlq_total", "reason", "permanent") == 1
	})
	dc, err := kgo.NewClient(kgo.SeedBrokers(h.kc.ListenAddrs()...), kgo.ConsumeTopics("pacer.test.dlq"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(8<<20), kgo.FetchMaxPartitionBytes(8<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got *kgo.Record
	for got == nil && ctx.Err() == nil {
		dc.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = r })
	}
	if got == nil {
		t.Fatal("no DLQ record")
	}
	hdr := map[string]string{}
	for _, x := range got.Headers {
		hdr[x.Key] = string(x.Value)
	}
	if hdr["pacer-reason"] != "permanent:131026" || hdr["pacer-truncated"] != fmt.Sprint(len(big)) || len(got.Value) != 512<<10 {
		t.Errorf("DLQ record: reason %q truncated %q value %d bytes; want permanent:131026, %d, %d",
			hdr["pacer-reason"], hdr["pacer-truncated"], len(got.Value), len(big), 512<<10)
	}
	// What replay selects by and what says where the original is stay; only
	// the large header goes.
	if hdr["campaign"] != "spring" || !strings.HasPrefix(hdr["pacer-origin"], "pacer.test/") || hdr["pacer-detail"] == "" {
		t.Errorf("DLQ record headers: campaign %q origin %q detail %q; want spring, pacer.test/..., the provider answer",
			hdr["campaign"], hdr["pacer-origin"], hdr["pacer-detail"])
	}
	if _, ok := hdr["bulky"]; ok {
		t.Errorf("DLQ record kept the 4 KiB header")
	}
}

// TestRecipientLimit: with a per-recipient bucket (FCM's per-device limit),
// messages to one recipient are spaced by it while another recipient of the
// same pacing key is not held back. One slot every 2 s keeps the bounds
// far apart: a loaded machine may delay a send by a second, never by the
// 2 s the other recipient would wait behind the first.
func TestRecipientLimit(t *testing.T) {
	h := newHarness(t, nil)
	// The key's 20/s leaves a sender 25 ms of lateness before its slot
	// lapses (and with it the recipient's token), so sends keep to their
	// slots within 25 ms.
	h.cfg.Limit = bucket.Limit{PerSecond: 20, Burst: 10}
	h.cfg.RecipientLimit = bucket.Limit{PerSecond: 0.5, Burst: 1}
	h.sender.at = map[string]time.Time{}
	grants := &grantLog{first: map[string]time.Time{}}
	h.wrapBucket = func(b consumer.Bucket) consumer.Bucket { grants.Bucket = b; return grants }
	h.produce(`{"id":"r1","key":"k1","to":"dev-A"}`, `{"id":"r2","key":"k1","to":"dev-A"}`,
		`{"id":"r3","key":"k1","to":"dev-A"}`, `{"id":"o1","key":"k1","to":"dev-B"}`)
	s := h.sender
	// Each slot given up costs its recipient 2 s: a loaded machine took
	// 16 s where 4 do.
	_, stop := h.start(h.cfg, h.sender, h.reg)
	ok := waitFor(60*time.Second, func() bool {
		return s.count(s.success, "r1")+s.count(s.success, "r2")+s.count(s.success, "r3")+s.count(s.success, "o1") == 4
	})
	stop()
	if !ok {
		t.Fatal("the 4 messages were not all sent within 60 s")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	first, last := s.at["r1"], s.at["r1"]
	for _, id := range []string{"r2", "r3"} {
		first, last = minTime(first, s.at[id]), maxTime(last, s.at[id])
	}
	if span := last.Sub(first); span < 3900*time.Millisecond {
		t.Errorf("3 messages to one device at 0.5/s burst 1 spanned %v, want >= 4 s", span)
	}
	// Each device's first slot is granted at once: sharing one bucket, one
	// of them would wait 2 s behind the other. (The slots, not the sends:
	// a sender that oversleeps its slot by 25 ms gives the recipient's
	// token up with it and sends 2 s later, as a loaded machine made one
	// run in four do.)
	grants.mu.Lock()
	defer grants.mu.Unlock()
	if len(grants.first) != 2 {
		t.Fatalf("slots granted for %d recipients, want 2: dev-A and dev-B each in a bucket of its own", len(grants.first))
	}
	var at []time.Time
	for _, a := range grants.first {
		at = append(at, a)
	}
	if d := at[0].Sub(at[1]).Abs(); d > 1500*time.Millisecond {
		t.Errorf("the two devices' first slots were granted %v apart, want at once (2 s if they shared a bucket)", d)
	}
}

// grantLog is a Bucket that keeps, per recipient (the Sub of a
// ReserveMulti's second request), the slot of its first granted
// reservation.
type grantLog struct {
	consumer.Bucket
	mu    sync.Mutex
	first map[string]time.Time
}

func (g *grantLog) ReserveMulti(ctx context.Context, channel, key string, reqs []bucket.Request, maxWait time.Duration) (bucket.Reservation, error) {
	res, err := g.Bucket.ReserveMulti(ctx, channel, key, reqs, maxWait)
	if err == nil && res.OK && len(reqs) == 2 {
		g.mu.Lock()
		if _, ok := g.first[reqs[1].Sub]; !ok {
			g.first[reqs[1].Sub] = res.At
		}
		g.mu.Unlock()
	}
	return res, err
}

// TestRecipientLimitBucketCalls: a campaign whose every message goes to a
// different device of one key with a recipient bucket (FCM's per-device
// limit) asks Redis about once per message. Such a key reserves both
// buckets per message, looking only as far ahead as the key's burst lasts
// (100 ms here); when a second of senders waited for those few slots, the
// ones beyond them were refused and asked again every slot interval, about
// 50 bucket calls per message delivered, and on a busy machine the CPU
// they took woke the holders too late to use their slots: FCM's demo ran
// at half its rate.
func TestRecipientLimitBucketCalls(t *testing.T) {
	h := newHarness(t, nil)
	h.cfg.Limit = bucket.Limit{PerSecond: 100, Burst: 10}
	h.cfg.RecipientLimit = bucket.Limit{PerSecond: 4.0 / 3, Burst: 160} // fcm.DeviceLimit
	const n = 300
	values := make([]string, n)
	for i := range values {
		values[i] = fmt.Sprintf(`{"id":"m%d","key":"k1","to":"device-%d"}`, i, i)
	}
	h.produce(values...)
	s := h.sender
	h.run(func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.success) == n
	})
	delivered := h.counter("pacer_delivered_total")
	calls := h.counter("pacer_bucket_calls_total")
	if delivered != n {
		t.Fatalf("delivered %v, want %d", delivered, n)
	}
	// Each message takes one reservation; a slot lapsed on a loaded
	// machine, or a sender that came just before the next slot entered
	// reach, takes another.
	if per := calls / delivered; per > 3 {
		t.Errorf("%.0f bucket calls for %d messages (%.1f per message), want at most 3 per message", calls, n, per)
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// TestRecordKeyMustMatchEnvelope: a record whose Kafka key names another
// pacing key than its envelope is dead-lettered as malformed, never sent;
// a record without a key is paced by the envelope's key.
func TestRecordKeyMustMatchEnvelope(t *testing.T) {
	h := newHarness(t, nil)
	mismatch := env("mismatch")
	if err := h.cl.ProduceSync(context.Background(),
		&kgo.Record{Topic: "pacer.test", Key: []byte("k2"), Value: []byte(mismatch)},
		&kgo.Record{Topic: "pacer.test", Value: []byte(env("keyless"))},
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	s := h.sender
	h.run(func() bool {
		return s.count(s.success, "keyless") == 1 && h.counter("pacer_dlq_total", "reason", "malformed") == 1
	})
	if got := h.dlq(1); got[mismatch] != "malformed" {
		t.Fatalf("DLQ = %v, want the mismatched record as malformed", got)
	}
	if n := s.count(s.calls, "mismatch"); n != 0 {
		t.Fatalf("the mismatched record was sent %d times, want 0", n)
	}
}

// TestProgressAndSummaryLogged: while it delivers, Run logs progress at
// INFO, and when it stops, a summary of what it finished, whose counts are
// the metrics' (a record dead-lettered on its way to a retry tier counts as
// dead-lettered, its failed tries as retried).
func TestProgressAndSummaryLogged(t *testing.T) {
	transient := &channels.Error{Channel: "test", Status: 503, Code: "2", Class: channels.Transient}
	h := newHarness(t, map[string][]error{"p3": {&channels.Error{Channel: "test", Status: 400, Code: "131026", Class: channels.Permanent}},
		"p4": {transient, transient, transient}})
	var logs consumer.SyncBuffer
	h.cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	h.cfg.ProgressEvery = time.Second
	h.produce(env("p1"), env("p2"), env("p3"), env("p4"))
	s := h.sender
	h.run(func() bool {
		return s.count(s.success, "p1")+s.count(s.success, "p2") == 2 && h.counter("pacer_dlq_total", "reason", "permanent") == 1 &&
			h.counter("pacer_dlq_total", "reason", "attempts-exhausted") == 1 && strings.Contains(logs.String(), `"msg":"progress"`)
	})
	var progress, summary map[string]any
	for _, line := range strings.Split(logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		switch m["msg"] {
		case "progress":
			if progress == nil {
				progress = m
			}
		case "pacer stopped":
			summary = m
		}
	}
	if progress == nil || progress["delivered"].(float64)+progress["dead_lettered"].(float64) < 1 {
		t.Errorf("progress line = %v, want one counting what finished", progress)
	}
	if summary == nil || summary["delivered"] != 2.0 || summary["dead_lettered"] != 2.0 || summary["retried"] != h.counter("pacer_retries_total") {
		t.Errorf("summary = %v, want delivered 2, dead_lettered 2, retried %v (pacer_retries_total)", summary, h.counter("pacer_retries_total"))
	}
}

// TestTransientFailuresLoggedOncePerInterval: 30 records refused as
// transient (a provider refusing connections) are all retried and
// delivered, but logged in one line, not 30: the first at once, the rest
// within consumer.RetryLogEvery counted by pacer_retries_total.
func TestTransientFailuresLoggedOncePerInterval(t *testing.T) {
	transient := &channels.Error{Channel: "test", Status: 503, Code: "2", Class: channels.Transient}
	script := map[string][]error{}
	var ids []string
	for i := range 30 {
		id := fmt.Sprintf("t%d", i)
		script[id] = []error{transient}
		ids = append(ids, env(id))
	}
	h := newHarness(t, script)
	var logs consumer.SyncBuffer
	h.cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	h.produce(ids...)
	s := h.sender
	h.run(func() bool { return s.total(s.success) == 30 })
	if got := h.counter("pacer_retries_total"); got != 30 {
		t.Errorf("pacer_retries_total = %v, want 30", got)
	}
	if n := strings.Count(logs.String(), "transient failure; retrying later"); n != 1 {
		t.Errorf("%d transient failure lines for 30 failures within %v, want 1", n, consumer.RetryLogEvery)
	}
}

// throttledHarness is newHarness with message a's first request answered
// by throttle and the sender recording when it sent each message
// (h.sender.at).
func throttledHarness(t *testing.T, throttle *channels.Error) *harness {
	h := newHarness(t, map[string][]error{"a": {throttle}})
	h.sender.at = map[string]time.Time{}
	return h
}

// TestAccountThrottleCoolsEveryKey: an account-scoped throttle (WhatsApp
// 80007) of one key holds every key of the channel for its cooldown, through
// the shared account cooldown, and is counted by scope.
func TestAccountThrottleCoolsEveryKey(t *testing.T) {
	const cool = 600 * time.Millisecond
	h := throttledHarness(t, &channels.Error{Channel: "test", Status: 400, Code: "80007", Class: channels.Throttle,
		Scope: channels.ScopeAccount, RetryAfter: cool})
	h.produce(env("a"))
	var throttledAt time.Time
	h.run(func() bool {
		if throttledAt.IsZero() && h.sender.count(h.sender.calls, "a") == 1 {
			h.sender.mu.Lock()
			throttledAt = h.sender.at["a"]
			h.sender.mu.Unlock()
			// Another key's message arrives while the account cools down.
			if err := h.cl.ProduceSync(context.Background(), &kgo.Record{Topic: "pacer.test", Key: []byte("k2"),
				Value: []byte(`{"id":"b","key":"k2","to":"1555000"}`)}).FirstErr(); err != nil {
				t.Error(err)
			}
		}
		return h.sender.count(h.sender.success, "a") == 1 && h.sender.count(h.sender.success, "b") == 1
	})
	h.sender.mu.Lock()
	b := h.sender.at["b"]
	h.sender.mu.Unlock()
	if wait := b.Sub(throttledAt); wait < cool-50*time.Millisecond {
		t.Errorf("key k2 sent %v after the account throttle of k1, want >= the %v account cooldown", wait, cool)
	}
	if n := h.counter("pacer_throttles_total", "scope", "account"); n != 1 {
		t.Errorf("pacer_throttles_total{scope=account} = %v, want 1", n)
	}
}

// accountSender is a scriptSender whose keys belong to the accounts of
// accounts (consumer.AccountNamer), as the credentials directory says.
type accountSender struct {
	*scriptSender
	accounts map[string]string
}

func (a accountSender) Account(key string) string { return a.accounts[key] }

// TestAccountThrottleCoolsOnlyItsAccount: with keys behind different
// credentials (k1 and k3 share one, k2 has its own), an account-scoped
// throttle of k1 holds k3 for its cooldown and lets k2 send at once: one
// business's WhatsApp 80007 does not stop the other businesses of the
// channel.
func TestAccountThrottleCoolsOnlyItsAccount(t *testing.T) {
	const cool = 2 * time.Second
	h := throttledHarness(t, &channels.Error{Channel: "test", Status: 400, Code: "80007", Class: channels.Throttle,
		Scope: channels.ScopeAccount, RetryAfter: cool})
	as := accountSender{h.sender, map[string]string{"k1": "acct-a", "k3": "acct-a", "k2": "acct-b"}}
	if err := h.cl.ProduceSync(context.Background(), &kgo.Record{Topic: "pacer.test", Key: []byte("k1"),
		Value: []byte(`{"id":"a","key":"k1","to":"1555000"}`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	_, stop := h.start(h.cfg, as, h.reg)
	defer stop()
	var throttledAt time.Time
	if !waitFor(20*time.Second, func() bool { return h.sender.count(h.sender.calls, "a") == 1 }) {
		t.Fatal("the first message was never sent")
	}
	h.sender.mu.Lock()
	throttledAt = h.sender.at["a"]
	h.sender.mu.Unlock()
	// Other keys' messages arrive while k1's account cools down.
	for _, r := range []struct{ key, id string }{{"k2", "b"}, {"k3", "c"}} {
		if err := h.cl.ProduceSync(context.Background(), &kgo.Record{Topic: "pacer.test", Key: []byte(r.key),
			Value: []byte(fmt.Sprintf(`{"id":%q,"key":%q,"to":"1555000"}`, r.id, r.key))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if !waitFor(20*time.Second, func() bool {
		return h.sender.count(h.sender.success, "a") == 1 && h.sender.count(h.sender.success, "b") == 1 && h.sender.count(h.sender.success, "c") == 1
	}) {
		t.Fatalf("not every message was delivered: %v", h.sender.success)
	}
	h.sender.mu.Lock()
	b, c := h.sender.at["b"].Sub(throttledAt), h.sender.at["c"].Sub(throttledAt)
	h.sender.mu.Unlock()
	if c < cool-50*time.Millisecond {
		t.Errorf("k3 (k1's account) sent %v after k1's account throttle, want >= the %v cooldown", c, cool)
	}
	if b >= cool/2 {
		t.Errorf("k2 (another account) sent %v after k1's account throttle, want well before the %v cooldown ends", b, cool)
	}
}

// TestPairThrottleHoldsOnlyThePair: a pair-scoped throttle (WhatsApp
// 131056) holds that recipient, through a cooldown shared in Redis, for the
// pair's base cooldown (1 s); another recipient of the same key sends at
// once, and the key's rate is not touched.
func TestPairThrottleHoldsOnlyThePair(t *testing.T) {
	h := throttledHarness(t, &channels.Error{Channel: "test", Status: 400, Code: "131056", Class: channels.Throttle, Scope: channels.ScopePair})
	h.produce(`{"id":"a","key":"k1","to":"1555000111"}`)
	var throttledAt time.Time
	produced := false
	h.run(func() bool {
		if throttledAt.IsZero() && h.sender.count(h.sender.calls, "a") == 1 {
			h.sender.mu.Lock()
			throttledAt = h.sender.at["a"]
			h.sender.mu.Unlock()
		}
		// The next messages come once the throttle was answered (its
		// cooldown is in Redis): one fetched while it is still being
		// recorded would be sent before there is a cooldown to hold it.
		if !produced && !throttledAt.IsZero() && slices.ContainsFunc(h.mr.Keys(), func(k string) bool {
			return strings.HasSuffix(k, "{test:k1}:pairs")
		}) {
			produced = true
			h.produce(`{"id":"b","key":"k1","to":"1555000111"}`, `{"id":"c","key":"k1","to":"1555000222"}`)
		}
		return h.sender.count(h.sender.success, "a") == 1 && h.sender.count(h.sender.success, "b") == 1 &&
			h.sender.count(h.sender.success, "c") == 1
	})
	h.sender.mu.Lock()
	b, c := h.sender.at["b"].Sub(throttledAt), h.sender.at["c"].Sub(throttledAt)
	h.sender.mu.Unlock()
	if b < 950*time.Millisecond {
		t.Errorf("the throttled pair's next message went %v after the throttle, want >= its 1 s cooldown", b)
	}
	if c > 900*time.Millisecond {
		t.Errorf("another recipient of the key went %v after the pair throttle, want at once", c)
	}
	if n := h.counter("pacer_throttles_total", "scope", "pair"); n != 1 {
		t.Errorf("pacer_throttles_total{scope=pair} = %v, want 1", n)
	}
	pairs := 0
	for _, k := range h.mr.Keys() {
		if strings.HasSuffix(k, "{test:k1}:pairs") {
			pairs++
		}
		if strings.HasSuffix(k, "{test:k1}:aimd") {
			t.Errorf("a pair throttle wrote the key's adaptive state %s", k)
		}
	}
	if pairs != 1 {
		t.Errorf("no shared pair cooldown in Redis")
	}
}

// TestPairLearnedRatePacesThePair: after a pair's throttle, its waiting
// messages go at the pair's learned rate (one per base cooldown, 1/s here)
// once the cooldown ends, not at once into the provider's emptied pair
// bucket; another recipient of the key is not paced by it.
func TestPairLearnedRatePacesThePair(t *testing.T) {
	h := throttledHarness(t, &channels.Error{Channel: "test", Status: 400, Code: "131056", Class: channels.Throttle, Scope: channels.ScopePair})
	h.produce(`{"id":"a","key":"k1","to":"1555000111"}`)
	ids := []string{"b1", "b2", "b3"}
	produced := false
	pairKnown := func() bool {
		for _, k := range h.mr.Keys() {
			if strings.HasSuffix(k, "{test:k1}:pairs") {
				return true
			}
		}
		return false
	}
	h.run(func() bool {
		// The pair's next messages come once its throttle is recorded:
		// messages already on their way when the answer comes cannot be
		// paced by it.
		if !produced && h.sender.count(h.sender.calls, "a") == 1 && pairKnown() {
			produced = true
			var envs []string
			for _, id := range ids {
				envs = append(envs, fmt.Sprintf(`{"id":%q,"key":"k1","to":"1555000111"}`, id))
			}
			envs = append(envs, `{"id":"c1","key":"k1","to":"1555000222"}`, `{"id":"c2","key":"k1","to":"1555000222"}`)
			h.produce(envs...)
		}
		for _, id := range append(ids, "a", "c1", "c2") {
			if h.sender.count(h.sender.success, id) != 1 {
				return false
			}
		}
		return true
	})
	h.sender.mu.Lock()
	var at []time.Time
	for _, id := range append([]string{"a"}, ids...) {
		at = append(at, h.sender.at[id])
	}
	c := h.sender.at["c2"].Sub(h.sender.at["c1"])
	h.sender.mu.Unlock()
	slices.SortFunc(at, func(x, y time.Time) int { return x.Compare(y) })
	for i := 1; i < len(at); i++ {
		// 1 s apart at the learned 1/s; a sender may use its slot up to a
		// quarter of an interval late, so the next can follow 0.75 s after.
		if gap := at[i].Sub(at[i-1]); gap < 600*time.Millisecond {
			t.Errorf("pair sends %d and %d went %v apart, want about 1 s (the pair's learned rate)", i-1, i, gap)
		}
	}
	if c > 500*time.Millisecond {
		t.Errorf("another recipient's two messages went %v apart, want no pair pacing", c)
	}
}

// TestMaxCooldownCapsRetryAndRequeue: AIMD.MaxCooldown, the one cooldown
// cap (PACER_MAX_COOLDOWN), also caps the delay of a retry that a provider
// asked to wait an hour, and of a requeue behind an hour-long cooldown.
func TestMaxCooldownCapsRetryAndRequeue(t *testing.T) {
	const maxCooldown = 10 * time.Second
	h := newHarness(t, map[string][]error{
		"flaky": {&channels.Error{Channel: "test", Status: 503, Code: "2", Class: channels.Transient, RetryAfter: time.Hour}},
	})
	h.cfg.AIMD.MaxCooldown = maxCooldown
	h.cfg.MaxTokenWait = 100 * time.Millisecond
	rdb := redis.NewClient(&redis.Options{Addr: h.mr.Addr()})
	defer rdb.Close()
	if err := bucket.New(rdb, bucket.Config{}).Cooldown(context.Background(), "test", "k2", time.Hour); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	h.produce(env("flaky"))
	if err := h.cl.ProduceSync(context.Background(), &kgo.Record{Topic: "pacer.test", Key: []byte("k2"),
		Value: []byte(`{"id":"cooled","key":"k2","to":"1555000"}`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	h.run(func() bool {
		return h.counter("pacer_retries_total") == 1 && h.counter("pacer_requeued_total", "reason", "cooldown") >= 1
	})

	// The copies on the retry topics carry their due time.
	due := h.dueTimes(t, start, []string{"pacer.test.retry.1", "pacer.test.retry.2"}, func(v string) string {
		if strings.Contains(v, "cooled") {
			return "cooled"
		}
		return "flaky"
	})
	// A requeue adds up to a tenth of jitter; the run took a few seconds at most.
	for _, id := range []string{"flaky", "cooled"} {
		d, ok := due[id]
		switch {
		case !ok:
			t.Errorf("%s: no copy on a retry topic", id)
		case d < maxCooldown-time.Second || d > maxCooldown*11/10+5*time.Second:
			t.Errorf("%s: due %v after the start, want about %v (AIMD.MaxCooldown), not the hour asked for", id, d.Round(time.Millisecond), maxCooldown)
		}
	}
}

// TestValidateNamesTheField: every problem is reported, joined, each on the
// Config field at fault, so a caller can name its own setting.
func TestValidateNamesTheField(t *testing.T) {
	fields := func(err error) []string {
		var out []string
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			var fe *consumer.FieldError
			if !errors.As(e, &fe) {
				t.Fatalf("%v is not a *consumer.FieldError", e)
			}
			out = append(out, fe.Field)
		}
		slices.Sort(out)
		return out
	}
	ok := consumer.Config{Channel: "c", Limit: bucket.Limit{PerSecond: 80, Burst: 10}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	flat := ok
	flat.RetryDelays = []time.Duration{5 * time.Second, 5 * time.Second}
	if err := flat.Validate(); err != nil {
		t.Errorf("equal retry delays: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(*consumer.Config)
		want []string
	}{
		{"floor above the rate", func(c *consumer.Config) { c.AIMD.Floor = 100 }, []string{"AIMD.Floor"}},
		{"rate beyond the adaptive range", func(c *consumer.Config) { c.Limit.PerSecond = 1e308 }, []string{"Limit.PerSecond"}},
		{"zero burst", func(c *consumer.Config) { c.Limit.Burst = 0 }, []string{"Limit.Burst"}},
		{"retry delays out of order", func(c *consumer.Config) { c.RetryDelays = []time.Duration{30 * time.Second, 5 * time.Second} }, []string{"RetryDelays"}},
		{"min above max cooldown", func(c *consumer.Config) { c.AIMD.MinCooldown, c.AIMD.MaxCooldown = time.Minute, time.Second },
			[]string{"AIMD.MaxCooldown"}},
		{"all at once", func(c *consumer.Config) {
			c.Channel = ""
			c.AIMD.Decrease = 1.5
			c.Breaker.MaxOpenFor, c.Breaker.OpenFor = time.Second, time.Minute
			c.RecipientLimit = bucket.Limit{PerSecond: -1, Burst: 1}
			c.RetryDelays = []time.Duration{time.Second, 0}
			c.Drain = -time.Second
			c.LeaseSize = 257
			c.InFlight = 65537
			c.UnknownOutcome = "guess"
			c.RedisFailure = "open"
		}, []string{"AIMD.Decrease", "Breaker.MaxOpenFor", "Channel", "Drain", "InFlight", "LeaseSize", "RecipientLimit.PerSecond",
			"RedisFailure", "RetryDelays", "UnknownOutcome"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := ok
			c.edit(&cfg)
			err := cfg.Validate()
			if err == nil {
				t.Fatal("Validate accepted it")
			}
			if got := fields(err); strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Errorf("fields %v, want %v; error:\n%v", got, c.want, err)
			}
		})
	}
}

// TestRedisStallDoesNotBurst: senders whose slots started while Redis
// stalled (their idempotency claims waiting on it) must not all send the
// moment it answers again: each late slot is given up and a new one taken,
// so no 1 s window holds more than rate + burst requests.
func TestRedisStallDoesNotBurst(t *testing.T) { eachLedger(t, testRedisStallDoesNotBurst) }

func testRedisStallDoesNotBurst(t *testing.T, batched time.Duration) {
	h := newHarness(t, nil)
	h.batched = batched
	const rate, burst, n = 10.0, 2, 40
	s, stop := h.startTimed(bucket.Limit{PerSecond: rate, Burst: burst}, "s%02d", n)
	defer stop()
	if !waitFor(20*time.Second, func() bool { return len(s.snapshot()) >= 5 }) {
		t.Fatal("no sends before the stall")
	}
	h.mr.SetError("LOADING Redis is loading the dataset in memory") // every command fails: a stall
	time.Sleep(2 * time.Second)
	h.mr.SetError("")
	if !waitFor(30*time.Second, func() bool { return len(s.snapshot()) >= n }) {
		t.Fatalf("delivered %d of %d after the stall", len(s.snapshot()), n)
	}
	times := s.snapshot()
	for i := range times {
		in := 0
		for j := i; j < len(times) && times[j].Sub(times[i]) < time.Second; j++ {
			in++
		}
		if limit := int(rate) + burst; in > limit {
			t.Fatalf("%d requests in the 1 s from %v (request %d), want <= rate + burst = %d", in, times[i].Format("15:04:05.000"), i, limit)
		}
	}
	if h.counter("pacer_late_slots_total") < 1 {
		t.Fatal("no slot was given up: the stall did not hold any claim")
	}
}

// TestClaimAheadNotLate: with a Batcher whose flush interval (40 ms) is
// longer than a slot may be late after its claim (lateSlot + lateClaim,
// 25 ms at 100/s), the claim is started that long ahead of the slot, so
// the sends keep the pace. A claim made only once the slot began would find
// every slot late and deliver nothing.
func TestClaimAheadNotLate(t *testing.T) {
	h := newHarness(t, nil)
	h.batched = 40 * time.Millisecond
	const rate, burst, n = 100.0, 1, 100
	s, stop := h.startTimed(bucket.Limit{PerSecond: rate, Burst: burst}, "a%03d", n)
	ok := waitFor(20*time.Second, func() bool { return len(s.snapshot()) >= n })
	stop()
	if !ok {
		t.Fatalf("delivered %d of %d within 20 s (%v late slots)", len(s.snapshot()), n, h.counter("pacer_late_slots_total"))
	}
	times := s.snapshot()
	secs := times[len(times)-1].Sub(times[0]).Seconds()
	late := h.counter("pacer_late_slots_total")
	t.Logf("%d sends in %.2fs (%.0f/s), %v slots given up as late", len(times), secs, float64(len(times)-1)/secs, late)
	// Slots also lapse when a sender wakes late on a busy machine: the bound
	// is the pace, not a count of lapses.
	if got := float64(len(times)-1) / secs; got < rate/2 {
		t.Errorf("%.0f sends/s, want at least half the rate (%v/s)", got, rate)
	}
}

// slowFlushes is a go-redis hook that holds every pipeline for delay before
// sending it and counts the scripts (EVALSHA) its pipelines carry.
type slowFlushes struct {
	delay  time.Duration
	claims atomic.Int64 // claim operations ("c", "f") in ledger.lua calls
}

func (s *slowFlushes) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *slowFlushes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (s *slowFlushes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == "evalsha" {
				s.claims.Add(int64(claimOps(c.Args())))
			}
		}
		time.Sleep(s.delay)
		return next(ctx, cmds)
	}
}

// TestLateClaimKeptForNextSlot: a claim that comes later after its slot
// than a slot may be used (every ledger flush here takes 60 ms, past the
// 5 ms + 20 ms allowed at 100/s) gives that slot up once; the record keeps
// its claim and sends at its next slot, with no second claim. Claiming
// again for each new slot waited for a flush again and came as late,
// slot after slot, and nothing was sent.
func TestLateClaimKeptForNextSlot(t *testing.T) {
	h := newHarness(t, nil)
	h.cfg.Limit = bucket.Limit{PerSecond: 100, Burst: 1}
	h.batched = 5 * time.Millisecond
	slow := &slowFlushes{delay: 60 * time.Millisecond}
	h.batchHook = slow
	h.produce(env("a"))
	h.run(func() bool { return h.sender.count(h.sender.success, "a") == 1 })
	if n := h.counter("pacer_late_slots_total"); n < 1 {
		t.Errorf("pacer_late_slots_total = %v: the slow claim did not make its slot late, the test shows nothing", n)
	}
	// One claim: not one per slot.
	if n := slow.claims.Load(); n != 1 {
		t.Errorf("%d claims in the ledger's flushes, want 1", n)
	}
}

// TestReadyWithNothingToConsume: a pacer whose topic holds no record is
// ready once it consumes (its poll waits for records), and says so on
// pacer_ready: an idle channel's replicas must pass their readiness probe.
func TestReadyWithNothingToConsume(t *testing.T) {
	h := newHarness(t, nil)
	h.ping = true // and a Redis that answers: ready at once, not at the first 5 s ping
	p := h.startConsuming()
	if !waitFor(4*time.Second, func() bool { return p.Ready() && h.gauge("pacer_ready") == 1 }) {
		t.Fatalf("empty topic: Ready() %v, pacer_ready %v; want true, 1", p.Ready(), h.gauge("pacer_ready"))
	}
}

// TestNotReadyBeforeRedisAnswers: a pacer whose Redis does not answer
// when it starts is not ready once it consumes (it said ready for the
// first 5 s, until its first ping), counts the failed start-up check in
// pacer_redis_errors_total, and becomes ready once Redis answers.
func TestNotReadyBeforeRedisAnswers(t *testing.T) {
	h := newHarness(t, nil)
	h.ping = true
	h.mr.Close() // Redis is down from the start
	p := h.startConsuming()
	if !waitFor(10*time.Second, func() bool { return h.counter("pacer_redis_errors_total") >= 1 }) {
		t.Errorf("pacer_redis_errors_total = %v after the failed start-up check, want >= 1", h.counter("pacer_redis_errors_total"))
	}
	if p.Ready() || h.gauge("pacer_ready") != 0 {
		t.Errorf("Redis down since start: Ready() %v, pacer_ready %v; want false, 0", p.Ready(), h.gauge("pacer_ready"))
	}
	if err := h.mr.Restart(); err != nil {
		t.Fatal(err)
	}
	if !waitFor(20*time.Second, func() bool { return p.Ready() && h.gauge("pacer_ready") == 1 }) {
		t.Fatalf("Redis back: Ready() %v, pacer_ready %v; want true, 1", p.Ready(), h.gauge("pacer_ready"))
	}
}

// TestRedisFailureLocalStaysLocal: in local mode with Redis down, the
// delivered marks the ledger only queues for its next flush are no sign of
// Redis: the pacer stays in its fallback for the whole outage (it flipped
// back to Redis's buckets after each queued mark, and to a fresh
// in-process bucket at the next failed call).
func TestRedisFailureLocalStaysLocal(t *testing.T) {
	h := newHarness(t, nil)
	h.batched = 20 * time.Millisecond
	h.cfg.RedisFailure = consumer.RedisFailureLocal
	var logs consumer.SyncBuffer
	h.cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	h.mr.Close() // Redis is down from the start
	ids := []string{"a", "b", "c", "d", "e", "f"}
	for _, id := range ids {
		h.produce(env(id))
	}
	s := h.sender
	_, stop := h.start(h.cfg, h.sender, h.reg)
	defer stop()
	if !waitFor(30*time.Second, func() bool {
		n := 0
		for _, id := range ids {
			n += s.count(s.success, id)
		}
		return n == len(ids)
	}) {
		t.Fatal("local mode, Redis down: not every record delivered within 30s")
	}
	if n := strings.Count(logs.String(), "redis reachable again"); n != 0 {
		t.Errorf("Redis down throughout: %d lines %q, want 0", n, "redis reachable again")
	}
	if g := h.gauge("pacer_redis_fallback"); g != 1 {
		t.Errorf("pacer_redis_fallback = %v, want 1 (still in the fallback)", g)
	}
	// Back, so that the queued marks are written before the ledger closes.
	if err := h.mr.Restart(); err != nil {
		t.Fatal(err)
	}
	if !waitFor(30*time.Second, func() bool { return len(h.mr.Keys()) > 0 }) {
		t.Error("Redis back: the queued delivered marks were not written within 30s")
	}
}

// TestServerRetryFloor: a message the provider answered with a server
// error (HTTP 5xx) is retried no sooner than Config.ServerRetry (up to a
// fifth later: jitter), where its retry tier would bring it back sooner;
// a transient failure of another status (APNs IdleTimeout, 400)
// keeps its tier's delay.
func TestServerRetryFloor(t *testing.T) {
	const least = 2 * time.Minute
	h := newHarness(t, map[string][]error{
		"server":  {&channels.Error{Channel: "test", Status: 503, Code: "UNAVAILABLE", Class: channels.Transient}},
		"network": {&channels.Error{Channel: "test", Status: 400, Code: "IdleTimeout", Class: channels.Transient}},
	})
	h.cfg.ServerRetry = least
	start := time.Now()
	h.produce(env("server"), env("network"))
	h.run(func() bool { return h.counter("pacer_retries_total") == 2 })

	due := h.dueTimes(t, start, []string{"pacer.test.retry.1"}, func(v string) string {
		if strings.Contains(v, `"server"`) {
			return "server"
		}
		return "network"
	})
	// The run took a few seconds at most on a loaded machine.
	if d, ok := due["server"]; !ok || d < least || d > least*6/5+5*time.Second {
		t.Errorf("server error: due %v after the start (found %v), want %v..%v", d.Round(time.Millisecond), ok, least, least*6/5)
	}
	if tier := h.cfg.RetryDelays[0]; !func() bool { d, ok := due["network"]; return ok && d >= tier*4/5 && d <= tier*6/5+5*time.Second }() {
		t.Errorf("a 400: due %v after the start, want the first tier's %v ±20%%", due["network"].Round(time.Millisecond), tier)
	}
}

// dueTimes reads the retry copies on topics for up to 5 s, until it has
// two ids (idOf names a copy's envelope id from its value), and returns
// each id's first pacer-due header as a time since start.
func (h *harness) dueTimes(t *testing.T, start time.Time, topics []string, idOf func(value string) string) map[string]time.Duration {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.kc.ListenAddrs()...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	due := map[string]time.Duration{} // envelope id => due - start
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for len(due) < 2 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			for _, hd := range r.Headers {
				if hd.Key == "pacer-due" {
					var ms int64
					fmt.Sscan(string(hd.Value), &ms)
					if id := idOf(string(r.Value)); due[id] == 0 {
						due[id] = time.UnixMilli(ms).Sub(start)
					}
				}
			}
		})
	}
	return due
}
