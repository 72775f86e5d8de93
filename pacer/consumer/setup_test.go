package consumer_test

// The set-up the consumer's tests share: a Pacer on kfake and miniredis
// (harness), scripted and recording senders, and readers of its metrics,
// topics and committed offsets.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/campaign"
	"github.com/pacerhq/pacer/pacer/consumer"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/pacerhq/pacer/pacer/outcomes"
	"github.com/pacerhq/pacer/pacer/portfolio"
	"github.com/pacerhq/pacer/pacer/suppress"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// scriptSender answers each message ID with the errors queued for it, then
// success. It records every call.
type scriptSender struct {
	mu      sync.Mutex
	script  map[string][]error
	calls   map[string]int
	success map[string]int
	at      map[string]time.Time // last request per id, when non-nil
}

func (s *scriptSender) Send(ctx context.Context, m channels.Message) (channels.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[m.ID]++
	if s.at != nil {
		s.at[m.ID] = time.Now()
	}
	if q := s.script[m.ID]; len(q) > 0 {
		s.script[m.ID] = q[1:]
		if q[0] != nil {
			return channels.Result{}, q[0]
		}
	}
	s.success[m.ID]++
	return channels.Result{ProviderID: "p-" + m.ID}, nil
}

func (s *scriptSender) count(m map[string]int, id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return m[id]
}

// total is the sum of m's counts (every id's calls or successes).
func (s *scriptSender) total(m map[string]int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

type harness struct {
	t      *testing.T
	kc     *kfake.Cluster
	cl     *kgo.Client
	mr     *miniredis.Miniredis
	raddr  string // mr.Addr(), kept for after mr.Close
	reg    *prometheus.Registry
	sender *scriptSender
	cfg    consumer.Config
	// batched is the flush interval of each pacer's ledger.Batcher; 0
	// means ledger.DefaultFlushInterval, as pacer run has by default.
	batched time.Duration
	// hook, if set, is a go-redis hook on every Redis client of a pacer.
	hook redis.Hook
	// batchHook, if set, is a go-redis hook on the Batcher's client only.
	batchHook redis.Hook
	// afterRun, if set, is called by stop once Run has returned, before the
	// Batcher is closed.
	afterRun func()
	// ping, if true, gives each pacer a Deps.RedisPing on its Redis client
	// (as pacer run does).
	ping bool
	// wrapBucket, if set, wraps each pacer's Deps.Bucket (to watch its
	// grants).
	wrapBucket func(consumer.Bucket) consumer.Bucket
	// campaigns, if set, is each pacer's Deps.Campaigns (live control and
	// campaign counts), on h's Redis.
	campaigns func(rdb *redis.Client, keys bucket.Keys) campaign.Store
	// suppress, if true, gives each pacer a Deps.Suppress on its Redis
	// client (as pacer run does by default).
	suppress bool
	// portfolios, if not nil, gives each pacer it as Deps.Portfolios (a
	// store over h's Redis).
	portfolios *portfolio.Store
	// outcomes, if not nil, is each pacer's Deps.Outcomes.
	outcomes *outcomes.Writer
}

func newHarness(t *testing.T, script map[string][]error) *harness {
	kc := testenv.FakeKafka(t, 2, "pacer.test")
	cl := testenv.KafkaClient(t, kc.ListenAddrs())
	mr := miniredis.RunT(t)
	return &harness{t: t, kc: kc, cl: cl, mr: mr, raddr: mr.Addr(), reg: prometheus.NewRegistry(),
		sender: &scriptSender{script: script, calls: map[string]int{}, success: map[string]int{}},
		cfg: consumer.Config{Channel: "test", Topic: "pacer.test", Limit: bucket.Limit{PerSecond: 1000, Burst: 10},
			MaxAttempts: 3, RetryDelays: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}, AIMD: adapt.AIMD{MinCooldown: 20 * time.Millisecond}, Breaker: adapt.Breaker{OpenFor: 50 * time.Millisecond}, Drain: 5 * time.Second}}
}

func (h *harness) produce(values ...string) {
	h.t.Helper()
	var rs []*kgo.Record
	for _, v := range values {
		rs = append(rs, &kgo.Record{Topic: "pacer.test", Key: []byte("k1"), Value: []byte(v)})
	}
	if err := h.cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		h.t.Fatal(err)
	}
}

// start runs a Pacer for cfg with its own Redis client on h's server and
// its own sender; stop cancels it and fails the test if Run returned an
// error. kopts are added to the Kafka options (hooks, for one).
func (h *harness) start(cfg consumer.Config, sender channels.Sender, reg prometheus.Registerer, kopts ...kgo.Opt) (p *consumer.Pacer, stop func()) {
	h.t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: h.raddr, MaxRetries: -1})
	if h.hook != nil {
		rdb.AddHook(h.hook)
	}
	lim := bucket.New(rdb, bucket.Config{})
	brdb := rdb
	if h.batchHook != nil {
		brdb = redis.NewClient(&redis.Options{Addr: h.raddr, MaxRetries: -1})
		if h.hook != nil {
			brdb.AddHook(h.hook)
		}
		brdb.AddHook(h.batchHook)
		h.t.Cleanup(func() { brdb.Close() })
	}
	bat := ledger.NewBatcher(brdb, lim.Keys(), ledger.BatchConfig{FlushInterval: h.batched})
	var pb consumer.Bucket = lim
	if h.wrapBucket != nil {
		pb = h.wrapBucket(lim)
	}
	deps := consumer.Deps{Bucket: pb, Adapter: adapt.New(rdb, bucket.Config{}), Ledger: bat, Sender: sender,
		Fallback: bucket.NewLocal(bucket.LocalConfig{Replicas: 2})}
	if h.campaigns != nil {
		deps.Campaigns = h.campaigns(rdb, lim.Keys())
	}
	if h.ping {
		deps.RedisPing = func(ctx context.Context) error { return rdb.Ping(ctx).Err() }
	}
	if h.suppress {
		deps.Suppress = suppress.NewStore(rdb, lim.Keys())
	}
	deps.Portfolios = h.portfolios
	deps.Outcomes = h.outcomes
	p, err := consumer.New(cfg, append([]kgo.Opt{kgo.SeedBrokers(h.kc.ListenAddrs()...)}, kopts...), deps, reg)
	if err != nil {
		closeLedger(h.t, bat)
		rdb.Close()
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			err := <-errc
			if h.afterRun != nil {
				h.afterRun()
			}
			// A test that leaves Redis down gets a ledger that cannot
			// write what waits: its Close gives up, as pacer run's does
			// at exit, and the test's own checks say what that means.
			pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
			if rdb.Ping(pctx).Err() == nil {
				closeLedger(h.t, bat)
			} else {
				cctx, ccancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				_ = bat.Close(cctx)
				ccancel()
			}
			pcancel()
			rdb.Close()
			if err != nil {
				h.t.Errorf("Run: %v", err)
			}
		})
	}
	h.t.Cleanup(stop)
	return p, stop
}

// startConsuming starts a pacer (stopped when the test ends) and waits
// for it to consume (Started), at most 30 s.
func (h *harness) startConsuming() *consumer.Pacer {
	h.t.Helper()
	p, _ := h.start(h.cfg, h.sender, h.reg)
	select {
	case <-p.Started():
	case <-time.After(30 * time.Second):
		h.t.Fatal("the pacer did not start consuming within 30 s")
	}
	return p
}

// closeLedger closes l, writing what waits, and fails the test if that
// takes more than 5 s.
func closeLedger(t *testing.T, l *ledger.Batcher) {
	t.Helper()
	testenv.CloseWithin(t, 5*time.Second, "ledger Close", l.Close)
}

// newLedger returns the production ledger over rdb (nil for a test that
// never reaches Redis) that keeps ids for ttl (0: ledger.DefaultTTL),
// closed when the test ends.
func newLedger(t *testing.T, rdb redis.Cmdable, keys bucket.Keys, ttl time.Duration) *ledger.Batcher {
	l := ledger.NewBatcher(rdb, keys, ledger.BatchConfig{TTL: ttl})
	t.Cleanup(func() { closeLedger(t, l) })
	return l
}

// run starts the pacer and stops it once done() holds (or after 20 s).
func (h *harness) run(done func() bool) {
	h.t.Helper()
	_, stop := h.start(h.cfg, h.sender, h.reg)
	ok := waitFor(20*time.Second, done)
	stop()
	if !ok {
		h.t.Fatal("condition not reached within 20 s")
	}
}

// waitFor polls cond every 10 ms until it holds (true) or within passes
// (false).
func waitFor(within time.Duration, cond func() bool) bool {
	return testenv.WaitFor(within, 10*time.Millisecond, cond)
}

// eachLedger runs f as subtests batched=0s and batched=5ms: with the
// ledger.Batcher flushing at its default interval and every 5 ms (see
// harness.batched), the consumer's guarantees hold with either.
func eachLedger(t *testing.T, f func(t *testing.T, batched time.Duration)) {
	for _, batched := range []time.Duration{0, 5 * time.Millisecond} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) { f(t, batched) })
	}
}

// dlq returns the DLQ records' reason header by envelope value.
func (h *harness) dlq(want int) map[string]string {
	h.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.kc.ListenAddrs()...), kgo.ConsumeTopics("pacer.test.dlq"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		h.t.Fatal(err)
	}
	defer cl.Close()
	got := map[string]string{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for len(got) < want && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			for _, hd := range r.Headers {
				if hd.Key == "pacer-reason" {
					got[string(r.Value)] = string(hd.Value)
				}
			}
		})
	}
	return got
}

func env(id string) string {
	return fmt.Sprintf(`{"id":%q,"key":"k1","to":"155500%s"}`, id, id)
}

// seqSender accepts every message and records the order of the requests.
type seqSender struct {
	mu    sync.Mutex
	seq   []string // ids, in request order
	count map[string]int
	at    map[string]time.Time // when each id was sent, if non-nil
}

func (s *seqSender) Send(_ context.Context, m channels.Message) (channels.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq = append(s.seq, m.ID)
	s.count[m.ID]++
	if s.at != nil {
		s.at[m.ID] = time.Now()
	}
	return channels.Result{ProviderID: "p-" + m.ID}, nil
}

func (s *seqSender) snapshot() ([]string, map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := make(map[string]int, len(s.count))
	for k, v := range s.count {
		c[k] = v
	}
	return append([]string(nil), s.seq...), c
}

// drained reports whether n distinct ids were sent and the group has no lag.
func (s *seqSender) drained(h *harness, n int) bool {
	_, c := s.snapshot()
	return len(c) == n && h.lag() == 0
}

// sentOnce returns a snapshot after checking that every id in it was sent
// exactly once.
func (s *seqSender) sentOnce(t *testing.T) ([]string, map[string]int) {
	t.Helper()
	seq, c := s.snapshot()
	for id, n := range c {
		if n != 1 {
			t.Errorf("%s sent %d times, want once", id, n)
		}
	}
	return seq, c
}

// sentInOrder fails t unless ok (the n ids were sent within 30 s), and
// returns the ids sent, each once (sentOnce) and in its key's order
// (checkOrder).
func (s *seqSender) sentInOrder(t *testing.T, h *harness, ok bool, n int) []string {
	t.Helper()
	if !ok {
		_, c := s.snapshot()
		t.Fatalf("%d of %d ids sent within 30 s (lag %d)", len(c), n, h.lag())
	}
	seq, _ := s.sentOnce(t)
	checkOrder(t, seq)
	return seq
}

// keyRecord is one envelope of pacing key key, numbered i, for partition part.
func keyRecord(topic string, part int32, key string, i int, hs ...kgo.RecordHeader) *kgo.Record {
	id := key + "-" + strconv.Itoa(i)
	return &kgo.Record{Topic: topic, Partition: part, Key: []byte(key), Headers: hs,
		Value: []byte(fmt.Sprintf(`{"id":%q,"key":%q,"to":"1555%04d"}`, id, key, i))}
}

// keyRecords is n envelopes of pacing key key numbered from .. from+n-1
// (keyRecord), for partition part of pacer.test.
func keyRecords(part int32, key string, from, n int) []*kgo.Record {
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = keyRecord("pacer.test", part, key, from+i)
	}
	return rs
}

func (h *harness) produceManual(rs []*kgo.Record) {
	h.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.kc.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(16<<20))
	if err != nil {
		h.t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		h.t.Fatal(err)
	}
}

// runWith runs a pacer sending through s until done() holds (at most 30 s).
func (h *harness) runWith(s channels.Sender, done func() bool) {
	h.t.Helper()
	_, stop := h.start(h.cfg, s, h.reg)
	ok := waitFor(30*time.Second, done)
	stop()
	if !ok {
		h.t.Fatal("condition not reached within 30 s")
	}
}

// position returns the index of id in seq, or -1.
func position(seq []string, id string) int {
	for i, s := range seq {
		if s == id {
			return i
		}
	}
	return -1
}

// lag returns the group's lag over the main and retry topics, -1 if unknown.
func (h *harness) lag() int64 {
	lag, err := kadm.NewClient(h.cl).Lag(context.Background(), "pacer-test")
	if err != nil {
		return -1
	}
	return lag["pacer-test"].Lag.Total()
}

// checkOrder fails t unless seq (ids "<key>-<n>") holds every key's
// records in order 0, 1, 2, ... with none skipped and none twice.
func checkOrder(t *testing.T, seq []string) {
	t.Helper()
	next := map[string]int{}
	for _, id := range seq {
		k, ns, _ := strings.Cut(id, "-")
		n, _ := strconv.Atoi(ns)
		if n != next[k] {
			t.Fatalf("%s sent when %s-%d was due next: order broken", id, k, next[k])
		}
		next[k]++
	}
}

// dlqRecords counts the records written to the DLQ topic (its end offsets).
func (h *harness) dlqRecords() int64 {
	h.t.Helper()
	ends, err := kadm.NewClient(h.cl).ListEndOffsets(context.Background(), "pacer.test.dlq")
	if err != nil {
		h.t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// committedOffset returns the highest offset group pacer-test committed on
// a partition of pacer.test, 0 if none.
func committedOffset(t *testing.T, h *harness) int64 {
	offs, err := kadm.NewClient(h.cl).FetchOffsets(context.Background(), "pacer-test")
	if err != nil {
		t.Errorf("fetch offsets: %v", err)
	}
	var at int64
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == "pacer.test" {
			at = max(at, o.At)
		}
	})
	return at
}

// family returns the metrics of family name in reg, and whether reg has it.
func family(t *testing.T, reg *prometheus.Registry, name string) ([]*dto.Metric, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric(), true
		}
	}
	return nil, false
}

// hasLabels reports whether m carries every label name, value pair of
// labels (name1, value1, name2, value2, ...).
func hasLabels(m *dto.Metric, labels ...string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		if !slices.ContainsFunc(m.GetLabel(), func(lp *dto.LabelPair) bool {
			return lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
		}) {
			return false
		}
	}
	return true
}

// counter returns the first counter name{labels} in h.reg, 0 if none.
func (h *harness) counter(name string, labels ...string) float64 {
	h.t.Helper()
	ms, _ := family(h.t, h.reg, name)
	for _, m := range ms {
		if hasLabels(m, labels...) {
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func (h *harness) gauge(name string) float64 {
	h.t.Helper()
	return gaugeIn(h.t, h.reg, name)
}

// gaugeIn returns the first value of gauge name in reg, or -1 if absent.
func gaugeIn(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	if ms, _ := family(t, reg, name); len(ms) > 0 {
		return ms[0].GetGauge().GetValue()
	}
	return -1
}

// gaugeWith returns the gauge name{label=value}, or -1.
func (h *harness) gaugeWith(name, label, value string) float64 {
	h.t.Helper()
	ms, _ := family(h.t, h.reg, name)
	for _, m := range ms {
		if hasLabels(m, label, value) {
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// counterIn returns the sum of counter name in reg, or -1 if absent.
func counterIn(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	ms, ok := family(t, reg, name)
	if !ok {
		return -1
	}
	sum := 0.0
	for _, m := range ms {
		sum += m.GetCounter().GetValue()
	}
	return sum
}

// histCount is the number of observations of histogram name in h.reg.
func (h *harness) histCount(name string) uint64 {
	h.t.Helper()
	ms, _ := family(h.t, h.reg, name)
	var n uint64
	for _, m := range ms {
		n += m.GetHistogram().GetSampleCount()
	}
	return n
}

// redis returns a client on h's Redis for a test to read or set what the
// pacer keeps there; it is closed when the test ends.
func (h *harness) redis() *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: h.raddr})
	h.t.Cleanup(func() { rdb.Close() })
	return rdb
}

// plainLedger returns a ledger on h's Redis that writes at once (not
// batched), for a test to set or read ids as another process would.
func (h *harness) plainLedger() *ledger.Ledger {
	return ledger.New(h.redis(), bucket.Keys{}, 0)
}

// deadClaims claims ids of key k1 for "dead-process", as a process that
// died between its claims and its sends leaves them.
func (h *harness) deadClaims(ids ...string) {
	h.t.Helper()
	l := h.plainLedger()
	for _, id := range ids {
		if _, _, err := l.Claim(context.Background(), "test", "k1", id, "dead-process", false); err != nil {
			h.t.Fatal(err)
		}
	}
}

// timedSender accepts every message and records when each request came.
type timedSender struct {
	mu    sync.Mutex
	times []time.Time
}

func (s *timedSender) Send(context.Context, channels.Message) (channels.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.times = append(s.times, time.Now())
	return channels.Result{ProviderID: "ok"}, nil
}

func (s *timedSender) snapshot() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.times...)
}

// startTimed starts a pacer at lim with a timedSender after producing n
// envelopes of key k1 whose ids are idFormat of 0 .. n-1.
func (h *harness) startTimed(lim bucket.Limit, idFormat string, n int) (s *timedSender, stop func()) {
	h.t.Helper()
	h.cfg.Limit = lim
	var vals []string
	for i := range n {
		vals = append(vals, env(fmt.Sprintf(idFormat, i)))
	}
	h.produce(vals...)
	s = &timedSender{}
	_, stop = h.start(h.cfg, s, h.reg)
	return s, stop
}

// claimOps counts the claim operations in the arguments of one ledger.lua
// EVALSHA (see [ledgerOps]).
func claimOps(args []any) int { return ledgerOps(args, "cf") }

// ledgerOps counts the operations of the kinds given (e.g. "cf": claims,
// "d": delivered marks) in the arguments of one ledger.lua EVALSHA: sha,
// numkeys, keys, then gen_ms, base, c, p, p pair limits of two arguments
// and operations of six arguments (op, field, arg, cooldown index,
// recipient, pair index).
func ledgerOps(args []any, kinds string) int { return idLedgerOps(args, kinds, "") }

// idLedgerOps is ledgerOps for the operations on one envelope id (their
// field ends with it); id "" counts them all.
func idLedgerOps(args []any, kinds, id string) int {
	if len(args) < 3 {
		return 0
	}
	nk, err := strconv.Atoi(fmt.Sprint(args[2]))
	if err != nil || len(args) < 3+nk+4 {
		return 0
	}
	np, err := strconv.Atoi(fmt.Sprint(args[3+nk+3]))
	if err != nil {
		return 0
	}
	n := 0
	for i := 3 + nk + 4 + 2*np; i+1 < len(args); i += 6 {
		if op := fmt.Sprint(args[i]); len(op) == 1 && strings.Contains(kinds, op) && strings.HasSuffix(fmt.Sprint(args[i+1]), id) {
			n++
		}
	}
	return n
}
