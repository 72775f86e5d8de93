package consumer_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKeyBacklogDoesNotDelayOtherKeys: 400 records of key A, then 20 of B,
// on one partition at a strict 200/s per key. B is its own limit: all of
// its records go out while A is still near the start of its backlog, and
// every record of both is sent exactly once although most of A's were
// parked on the retry tiers (and some parked again) on the way.
func TestKeyBacklogDoesNotDelayOtherKeys(t *testing.T) {
	h := newHarness(t, nil)
	h.cfg.Limit = bucket.Limit{PerSecond: 200, Burst: 1}
	h.cfg.Lookahead = 100 * time.Millisecond // bound: max(20, in-flight bound at most InFlight 32) = 32 records of a key
	h.cfg.InFlight = 32
	h.cfg.RetryDelays = []time.Duration{200 * time.Millisecond, time.Second}
	rs := keyRecords(0, "A", 0, 400)
	rs = append(rs, keyRecords(0, "B", 0, 20)...)
	h.produceManual(rs)
	s := &seqSender{count: map[string]int{}}
	maxHeld, sawBig := 0.0, false
	h.runWith(s, func() bool {
		// While A's backlog lasts the process holds at least A's in-flight
		// records (parked copies read back before they are due are held
		// too, up to MaxQueued per partition), and A is one key in backlog
		// class 100-999.
		maxHeld = max(maxHeld, h.gauge("pacer_lookahead_records"))
		sawBig = sawBig || h.gaugeWith("pacer_key_backlog_keys", "class", "100-999") == 1
		// A rebalance at start-up may re-deliver records and so leave a
		// second park copy; it is skipped by the ledger once read.
		return s.drained(h, 420)
	})
	if maxHeld < 32 {
		t.Errorf("pacer_lookahead_records reached %v, want >= 32 (A's in-flight records)", maxHeld)
	}
	if !sawBig {
		t.Errorf("pacer_key_backlog_keys{class=100-999} never 1 while A had 400 records waiting")
	}
	seq, _ := s.sentOnce(t)
	if len(seq) != 420 {
		t.Errorf("%d requests, want 420", len(seq))
	}
	// At 200/s, B's 20 records take 0.1 s; A gets 20 more slots meanwhile.
	// Behind a shared window B would wait for about 370 of A's.
	checkBNotBehindA(t, h, seq, "B-19", 300)
	if l := h.lag(); l != 0 {
		t.Errorf("lag after shutdown = %d, want 0", l)
	}
}

// TestKeylessRecordsQueuedByEnvelopeKey: records published without a
// Kafka key (a platform's own producer) are queued by their envelope's
// pacing key, so a keyless backlog of A does not hold B's keyless records
// back either.
func TestKeylessRecordsQueuedByEnvelopeKey(t *testing.T) {
	h := newHarness(t, nil)
	h.cfg.Limit = bucket.Limit{PerSecond: 200, Burst: 1}
	h.cfg.Lookahead = 100 * time.Millisecond
	h.cfg.RetryDelays = []time.Duration{200 * time.Millisecond, time.Second}
	rs := keyRecords(0, "A", 0, 400)
	rs = append(rs, keyRecords(0, "B", 0, 20)...)
	for _, r := range rs {
		r.Key = nil
	}
	h.produceManual(rs)
	s := &seqSender{count: map[string]int{}}
	h.runWith(s, func() bool {
		return s.drained(h, 420)
	})
	seq, _ := s.sentOnce(t)
	aBefore := 0
	for _, id := range seq[:position(seq, "B-19")] {
		if id[0] == 'A' {
			aBefore++
		}
	}
	t.Logf("A's records sent before B's last: %d", aBefore)
	if aBefore > 100 {
		t.Errorf("%d of A's keyless records were sent before B's last; B waited for A", aBefore)
	}
}

// TestRevokeParksHeldRecords: a pacer stopped (its partitions revoked)
// while key A holds its 32 records (its bound) parks those not sent before
// its commit, so the commit of A's partition reaches its end (A's other
// 168 records were parked before); the next owner reads none of A's main
// records again and so parks none of them again (without it, the commit
// stayed at A's oldest held record and the next owner parked all 168 a
// second time), and every record is sent once.
func TestRevokeParksHeldRecords(t *testing.T) {
	h := newHarness(t, nil)
	h.cfg.Limit = bucket.Limit{PerSecond: 50, Burst: 1}
	h.cfg.Lookahead = 100 * time.Millisecond // bound: InFlight 32
	h.cfg.InFlight = 32
	h.cfg.RetryDelays = []time.Duration{200 * time.Millisecond, time.Second}
	rs := keyRecords(0, "A", 0, 200)
	h.produceManual(rs)
	s := &seqSender{count: map[string]int{}}
	reg := prometheus.NewRegistry()
	_, stop := h.start(h.cfg, s, reg)
	if !waitFor(30*time.Second, func() bool { _, c := s.snapshot(); return len(c) >= 5 }) {
		t.Fatal("5 records not sent within 30 s")
	}
	stop()
	first, _ := s.snapshot()
	parked1 := counterIn(t, reg, "pacer_parked_total")
	adm := kadm.NewClient(h.cl)
	commits, err := adm.FetchOffsets(context.Background(), "pacer-test")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := commits.Lookup("pacer.test", 0); o.At != 200 {
		t.Errorf("commit of A's partition after the revoke: %d, want 200 (its end)", o.At)
	}
	tiers := []string{"pacer.test.retry.1", "pacer.test.retry.2"}
	ends, err := adm.ListEndOffsets(context.Background(), tiers...)
	if err != nil {
		t.Fatal(err)
	}
	reg = prometheus.NewRegistry()
	_, stop = h.start(h.cfg, s, reg)
	ok := waitFor(30*time.Second, func() bool { return s.drained(h, 200) })
	stop()
	_, c := s.sentOnce(t)
	if !ok {
		t.Fatalf("%d of 200 ids sent within 30 s (lag %d)", len(c), h.lag())
	}
	// The second run's parks: copies back before their slots hop again
	// (pacer-parks 2 and more; how many depends on how soon the next owner
	// starts), a main record read again is parked for the first time
	// (pacer-parks 1).
	parked2 := counterIn(t, reg, "pacer_parked_total")
	again := h.copiesSince(ends, "1")
	t.Logf("first run: %d sent, %v parked; second run parked %v, %d of them main records", len(first), parked1, parked2, again)
	if want := 200 - len(first); parked1 < float64(want) {
		t.Errorf("first run parked %v, want >= %d: every record it did not send (168 beyond the bound and the held ones at the revoke)", parked1, want)
	}
	if again != 0 {
		t.Errorf("second run parked %d main records, want 0: A's main records were read and parked again", again)
	}
}

// copiesSince counts the records written to the retry tiers past the
// offsets since whose pacer-parks header is parks.
func (h *harness) copiesSince(since kadm.ListedOffsets, parks string) int {
	h.t.Helper()
	offs := map[string]map[int32]kgo.Offset{}
	since.Each(func(o kadm.ListedOffset) {
		if offs[o.Topic] == nil {
			offs[o.Topic] = map[int32]kgo.Offset{}
		}
		offs[o.Topic][o.Partition] = kgo.NewOffset().At(o.Offset)
	})
	var topics []string
	for t := range offs {
		topics = append(topics, t)
	}
	ends, err := kadm.NewClient(h.cl).ListEndOffsets(context.Background(), topics...)
	if err != nil {
		h.t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.kc.ListenAddrs()...), kgo.ConsumePartitions(offs))
	if err != nil {
		h.t.Fatal(err)
	}
	defer cl.Close()
	left := int64(0)
	ends.Each(func(o kadm.ListedOffset) {
		if s, ok := since.Lookup(o.Topic, o.Partition); ok {
			left += o.Offset - s.Offset
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := 0
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			h.t.Fatalf("retry tiers: %d copies not read within 30 s", left)
		}
		fs.EachRecord(func(r *kgo.Record) {
			left--
			if envelope.Header(r, envelope.HeaderParks) == parks {
				n++
			}
		})
	}
	return n
}

// checkBNotBehindA fails t if more than 100 of key A's records come in
// seq before lastB (B's last record): B waited for A's backlog; or if
// fewer than minParked records were parked (A's beyond its bound).
func checkBNotBehindA(t *testing.T, h *harness, seq []string, lastB string, minParked float64) {
	t.Helper()
	aBefore := 0
	for _, id := range seq[:position(seq, lastB)] {
		if id[0] == 'A' {
			aBefore++
		}
	}
	t.Logf("A's records sent before B's last: %d; parked %v", aBefore, h.counter("pacer_parked_total"))
	if aBefore > 100 {
		t.Errorf("%d of A's records were sent before B's last: B waited for A's backlog", aBefore)
	}
	if got := h.counter("pacer_parked_total"); got < minParked {
		t.Errorf("pacer_parked_total = %v, want >= %v (A's records beyond their key's bound)", got, minParked)
	}
}

// strictConfig: strict order (InFlight 1) at 100/s per key, a bound of 10
// records per key (lookahead 100 ms) and 60 per partition.
func strictConfig(h *harness) {
	h.cfg.Limit = bucket.Limit{PerSecond: 100, Burst: 1}
	h.cfg.InFlight = 1
	h.cfg.Lookahead = 100 * time.Millisecond
	h.cfg.MaxQueued = 60
	h.cfg.RetryDelays = []time.Duration{200 * time.Millisecond, time.Second}
}

// TestStrictOrderParked: with InFlight 1, key A's 300 records (3 s at
// 100/s) fill its bound of 10 and the rest is parked in A's chain, yet A's
// records are sent in offset order, including 150 more written once A has
// started (its chain takes them, though A's queue has room again). B's 10
// records, written to A's partition after those, are read and sent at
// once, not after A's backlog has drained to the partition's 30 (which
// took about 2.7 s when strict keys were never parked and A's backlog
// paused the partition).
func TestStrictOrderParked(t *testing.T) {
	h := newHarness(t, nil)
	strictConfig(h)
	h.produceManual(keyRecords(0, "A", 0, 150))
	s := &seqSender{count: map[string]int{}}
	_, stop := h.start(h.cfg, s, h.reg)
	if !waitFor(30*time.Second, func() bool { _, c := s.snapshot(); return len(c) > 0 }) {
		t.Fatal("A's first record not sent within 30 s")
	}
	h.produceManual(keyRecords(0, "A", 150, 150))
	h.produceManual(keyRecords(0, "B", 0, 10))
	ok := waitFor(30*time.Second, func() bool { return s.drained(h, 310) })
	stop()
	seq := s.sentInOrder(t, h, ok, 310)
	// B's 10 records take 0.1 s at its own 100/s; reading and starting
	// them takes some more on a loaded machine. A gets about 10 slots in
	// 0.1 s; 100 allows a second of delay.
	checkBNotBehindA(t, h, seq, "B-9", 250)
}

// TestStrictOrderParkedAcrossRestart: the pacer stops once A's chain
// copies are written but before A's first 10 records (held in its main
// partition, 1 s at 10/s) are all sent; a second pacer, at 200/s, takes
// over. The first one's copies are dropped unsent (their records are read
// again from the main partition, whose commit stayed below them), so A's
// records are sent once each and in offset order over both runs.
func TestStrictOrderParkedAcrossRestart(t *testing.T) {
	h := newHarness(t, nil)
	strictConfig(h)
	h.cfg.Limit = bucket.Limit{PerSecond: 10, Burst: 1}
	h.cfg.Lookahead = time.Second // bound 10
	rs := keyRecords(0, "A", 0, 150)
	h.produceManual(rs)
	s := &seqSender{count: map[string]int{}}
	reg := prometheus.NewRegistry()
	_, stop := h.start(h.cfg, s, reg)
	if !waitFor(30*time.Second, func() bool { return counterIn(t, reg, "pacer_parked_total") >= 140 }) {
		t.Fatal("A's 140 records beyond its bound not parked within 30 s")
	}
	stop()
	first, _ := s.snapshot()
	if len(first) >= 10 {
		t.Fatalf("the first run sent %d records before its stop, want < 10: the case is not tested", len(first))
	}
	// The first run's copies already due when it stopped may be dropped
	// by it: their chain ended with the stop, and their main records,
	// never finished, are read again. The rest are the second run's.
	parked, staleFirst := counterIn(t, reg, "pacer_parked_total"), counterIn(t, reg, "pacer_parked_stale_total")
	reg = prometheus.NewRegistry()
	h.cfg.Limit = bucket.Limit{PerSecond: 200, Burst: 1}
	_, stop = h.start(h.cfg, s, reg)
	ok := waitFor(30*time.Second, func() bool { return s.drained(h, 150) })
	// The stale copies are dropped as the retry tier is read, which may
	// end after the last send: wait for them too.
	waitFor(30*time.Second, func() bool { return staleFirst+counterIn(t, reg, "pacer_parked_stale_total") >= parked })
	stop()
	s.sentInOrder(t, h, ok, 150)
	staleSecond := counterIn(t, reg, "pacer_parked_stale_total")
	t.Logf("first run sent %d, parked %v, dropped %v stale copies at its stop; second run dropped %v stale copies, skipped %v duplicates, parked %v", len(first), parked, staleFirst, staleSecond, counterIn(t, reg, "pacer_duplicates_skipped_total"), counterIn(t, reg, "pacer_parked_total"))
	if staleFirst+staleSecond < parked {
		t.Errorf("stale copies dropped = %v + %v, want >= %v (the first run's copies)", staleFirst, staleSecond, parked)
	}
}

// TestRetryTierKeyCooldownDoesNotBlockOthers: 40 records of key A in a
// retry tier due in an hour (a long cooldown), then one of B due now: B is
// sent, A waits.
func TestRetryTierKeyCooldownDoesNotBlockOthers(t *testing.T) {
	h := newHarness(t, nil)
	h.cfg.RetryDelays = []time.Duration{time.Hour}
	due := kgo.RecordHeader{Key: "pacer-due", Value: []byte(strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10))}
	var rs []*kgo.Record
	for i := range 40 {
		rs = append(rs, keyRecord("pacer.test.retry.1", 0, "A", i, due))
	}
	rs = append(rs, keyRecord("pacer.test.retry.1", 0, "B", 0))
	// The tier must exist before the pacer's topics are ensured.
	if _, err := kadm.NewClient(h.cl).CreateTopic(context.Background(), 2, 1, nil, "pacer.test.retry.1"); err != nil {
		t.Fatal(err)
	}
	h.produceManual(rs)
	s := &seqSender{count: map[string]int{}}
	h.runWith(s, func() bool {
		_, c := s.snapshot()
		return c["B-0"] == 1
	})
	if _, c := s.snapshot(); len(c) != 1 {
		t.Errorf("%d ids sent, want only B-0: %v", len(c), c)
	}
}

// TestParkedDuplicateSpendsNoSlot: 20 parked copies of key A whose ids
// were delivered before (a rebalance parked their records twice), then a
// new record of A, at 2/s, handled one at a time. The copies are skipped
// before their slots, so the new record is sent within about one slot; if
// each duplicate took a slot before its claim found it delivered, the new
// one would wait 10 s. The same with the ledger's batched writes (the
// default), and with both copies of each record parked (two crashes in a
// row): the second copy comes right after the first, whose delivered mark
// may not be written yet. And with an hour's flush interval: each copy is
// its key's only record in hand, so its read goes at once rather than with
// the ledger's next flush.
func TestParkedDuplicateSpendsNoSlot(t *testing.T) {
	for _, tc := range []struct {
		batched time.Duration
		pairs   bool
	}{{0, false}, {20 * time.Millisecond, false}, {20 * time.Millisecond, true}, {time.Hour, false}} {
		t.Run(fmt.Sprintf("batched=%v,pairs=%v", tc.batched, tc.pairs), func(t *testing.T) {
			h := newHarness(t, nil)
			h.batched = tc.batched
			h.cfg.Limit = bucket.Limit{PerSecond: 2, Burst: 1}
			h.cfg.InFlight = 1 // one at a time, in the tier's order: the duplicates first
			h.cfg.MaxTokenWait = 30 * time.Second
			h.cfg.RetryDelays = []time.Duration{time.Second}
			led := h.plainLedger()
			parks := kgo.RecordHeader{Key: "pacer-parks", Value: []byte("1")}
			var rs []*kgo.Record
			n, want := 20, 1 // records, ids sent
			if tc.pairs {
				n, want = 3, 4
			}
			for i := range n {
				if tc.pairs { // the first copy is sent, the second skipped
					rs = append(rs, keyRecord("pacer.test.retry.1", 0, "A", i, parks))
				} else if err := led.Delivered(context.Background(), "test", "A", "A-"+strconv.Itoa(i), "p"); err != nil {
					t.Fatal(err)
				}
				rs = append(rs, keyRecord("pacer.test.retry.1", 0, "A", i, parks))
			}
			rs = append(rs, keyRecord("pacer.test.retry.1", 0, "A", 20, parks))
			if _, err := kadm.NewClient(h.cl).CreateTopic(context.Background(), 2, 1, nil, "pacer.test.retry.1"); err != nil {
				t.Fatal(err)
			}
			h.produceManual(rs)
			s := &seqSender{count: map[string]int{}}
			start := time.Now()
			var took time.Duration
			h.runWith(s, func() bool {
				_, c := s.snapshot()
				if c["A-20"] == 1 && took == 0 {
					took = time.Since(start)
				}
				return c["A-20"] == 1 && h.counter("pacer_duplicates_skipped_total") == float64(n)
			})
			if _, c := s.snapshot(); len(c) != want {
				t.Errorf("%d ids sent, want %d: %v", len(c), want, c)
			}
			t.Logf("A-20 sent %v after the start", took)
			if got := h.histCount("pacer_bucket_wait_seconds"); got != uint64(want) {
				t.Errorf("send slots taken = %d, want %d (one per id sent): the duplicates took slots", got, want)
			}
			if took > 5*time.Second {
				t.Errorf("A-20 sent %v after the start, want < 5 s: the duplicates spent A's slots", took)
			}
		})
	}
}

// TestDueCopyStartsFirst: in a retry tier, key A's records 0, 1 and 3
// are due in 3 s and record 2, after them, is due now, with InFlight 2.
// Record 2 is sent at once: records sleeping until their due time hold
// none of the key's InFlight places (they used to, and record 2 then
// waited 3 s behind them, the key's queue dry meanwhile), and the key's
// waiting records are in due order, so 2 is not behind 3 either.
func TestDueCopyStartsFirst(t *testing.T) {
	h := newHarness(t, nil)
	h.cfg.InFlight = 2
	h.cfg.RetryDelays = []time.Duration{time.Hour}
	later := kgo.RecordHeader{Key: "pacer-due", Value: []byte(strconv.FormatInt(time.Now().Add(3*time.Second).UnixMilli(), 10))}
	rs := []*kgo.Record{
		keyRecord("pacer.test.retry.1", 0, "A", 0, later),
		keyRecord("pacer.test.retry.1", 0, "A", 1, later),
		keyRecord("pacer.test.retry.1", 0, "A", 3, later),
		keyRecord("pacer.test.retry.1", 0, "A", 2),
	}
	if _, err := kadm.NewClient(h.cl).CreateTopic(context.Background(), 2, 1, nil, "pacer.test.retry.1"); err != nil {
		t.Fatal(err)
	}
	h.produceManual(rs)
	s := &seqSender{count: map[string]int{}}
	s.at = map[string]time.Time{}
	start := time.Now()
	h.runWith(s, func() bool { _, c := s.snapshot(); return len(c) == 4 })
	seq, _ := s.snapshot()
	s.mu.Lock()
	took, last := s.at["A-2"].Sub(start), s.at["A-0"].Sub(start)
	s.mu.Unlock()
	t.Logf("sent %v; A-2 after %v, A-0 after %v", seq, took.Round(10*time.Millisecond), last.Round(10*time.Millisecond))
	if seq[0] != "A-2" || took > 2*time.Second {
		t.Errorf("A-2 sent %v after the start (order %v), want first and within 2 s: it waited behind records not yet due", took, seq)
	}
	if last < 2500*time.Millisecond {
		t.Errorf("A-0 sent %v after the start, before its due time (3 s)", last)
	}
}

// slowSender accepts every message after hold, recording the request
// order and the most requests it had at once.
type slowSender struct {
	seqSender
	hold    time.Duration
	cur     atomic.Int32
	maxSeen atomic.Int32
}

func (s *slowSender) Send(ctx context.Context, m channels.Message) (channels.Result, error) {
	n := s.cur.Add(1)
	defer s.cur.Add(-1)
	for {
		was := s.maxSeen.Load()
		if n <= was || s.maxSeen.CompareAndSwap(was, n) {
			break
		}
	}
	time.Sleep(s.hold)
	return s.seqSender.Send(ctx, m)
}

// TestProcessInFlightBound: the process handles at most ProcessInFlight
// records at once over all keys and partitions, and a freed place goes to
// the key waiting longest, so a key's backlog does not hold another key's
// records behind it.
func TestProcessInFlightBound(t *testing.T) {
	h := newHarness(t, nil)
	h.cfg.Limit = bucket.Limit{PerSecond: 5000, Burst: 50}
	h.cfg.ProcessInFlight = 3
	rs := keyRecords(0, "A", 0, 150)
	rs = append(rs, keyRecords(0, "B", 0, 10)...)
	rs = append(rs, keyRecords(1, "C", 0, 10)...)
	h.produceManual(rs)
	// 20 ms a request: at 5,000/s each key alone would have its 32
	// records (PACER_INFLIGHT) in requests at once.
	s := &slowSender{seqSender: seqSender{count: map[string]int{}}, hold: 20 * time.Millisecond}
	maxGauge := 0.0
	h.runWith(s, func() bool {
		maxGauge = max(maxGauge, h.gauge("pacer_inflight_records"))
		return s.drained(h, 170)
	})
	if got := s.maxSeen.Load(); got > 3 || got < 2 {
		t.Errorf("at most %d requests at once, want 2..3 (ProcessInFlight 3)", got)
	}
	if maxGauge > 3 || maxGauge < 1 {
		t.Errorf("pacer_inflight_records reached %v, want 1..3", maxGauge)
	}
	seq, _ := s.sentOnce(t)
	// Round the keys: B's and C's 10 records each go out while A sends
	// about 10 more; behind A's backlog they would wait for most of A's 150.
	for _, last := range []string{"B-9", "C-9"} {
		aBefore := 0
		for _, id := range seq[:position(seq, last)] {
			if id[0] == 'A' {
				aBefore++
			}
		}
		if aBefore > 60 {
			t.Errorf("%d of A's records were sent before %s; the other keys waited for A's places", aBefore, last)
		}
	}
	// Nor does any key hold the others back: the places go round the three
	// keys while they all have records, so no key gets a long run.
	run, longest := 0, 0
	for i, id := range seq[:30] {
		if i > 0 && id[0] == seq[i-1][0] {
			run++
		} else {
			run = 1
		}
		longest = max(longest, run)
	}
	if longest > 5 {
		t.Errorf("%d requests of one key in a row among the first 30 (%v), want <= 5: the places did not go round the keys", longest, seq[:30])
	}
}

// TestInFlightFollowsAnswerTime: a key at 50/s whose provider answers in
// 3 s has 150 requests on the wire at its full rate (Little's law). Before
// its first answer its bound assumes 1 s (1.2 x 50 + burst 1 + 32 = 93
// records in hand); once answers come, its bound follows their 3 s and the
// provider sees well over 93 requests at once. With the fixed bound the
// pacer had (32), it saw 32 and the key ran at 11/s.
func TestInFlightFollowsAnswerTime(t *testing.T) {
	h := newHarness(t, nil)
	h.cfg.Limit = bucket.Limit{PerSecond: 50, Burst: 1}
	h.cfg.Lookahead = 10 * time.Second // all 400 held in one queue: none parked (a retry tier's queue has a bound of its own)
	var rs []*kgo.Record
	for i := range 400 {
		rs = append(rs, keyRecord("pacer.test", 0, "A", i))
	}
	h.produceManual(rs)
	s := &slowSender{seqSender: seqSender{count: map[string]int{}}, hold: 3 * time.Second}
	h.runWith(s, func() bool { return s.drained(h, 400) })
	if got := s.maxSeen.Load(); got < 120 {
		t.Errorf("at most %d requests at once, want >= 120 (50/s x 3 s answers: 150)", got)
	}
	if seq, _ := s.sentOnce(t); len(seq) != 400 {
		t.Errorf("%d requests, want 400", len(seq))
	}
}
