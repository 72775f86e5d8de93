package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/pacerhq/pacer/pacer/produce"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestUnknownOutcomeDeadLetteredOnce: a record whose id a dead process
// claimed is dead-lettered as unknown-outcome once; the copies Kafka
// delivers again afterwards (a crash before the offset commit, here the
// same envelope again) are skipped as duplicates, one read before the next
// owner's first fetch and one read while it runs, and write no second DLQ
// copy; a copy replayed from the DLQ is sent.
func TestUnknownOutcomeDeadLetteredOnce(t *testing.T) { eachLedger(t, testDeadLetteredOnce) }

func testDeadLetteredOnce(t *testing.T, batched time.Duration) {
	h := newHarness(t, nil)
	h.batched = batched
	h.deadClaims("crashed")
	s := h.sender
	h.produce(env("crashed"), env("first"))
	h.run(func() bool {
		return s.count(s.success, "first") == 1 && h.counter("pacer_dlq_total", "reason", "unknown-outcome") == 1
	})
	if n := h.dlqRecords(); n != 1 {
		t.Fatalf("after the first owner: %d DLQ records, want 1", n)
	}

	// The next owner: the record read again (produced before it starts, so
	// it is in the partition's backlog), then again while it runs. A record
	// that takes a send slot claims its id ahead of it (handle.go's
	// claimAhead), so claims of "crashed" count the slots its copy took:
	// pacer_bucket_wait_seconds cannot, as a claim answered later than its
	// slot allows gives the slot up and "second" takes another.
	h.reg = prometheus.NewRegistry()
	claims := &idClaims{id: "crashed"}
	h.batchHook = claims
	h.produce(env("crashed"), env("second"))
	_, stop := h.start(h.cfg, h.sender, h.reg)
	defer stop()
	if !waitFor(20*time.Second, func() bool {
		return s.count(s.success, "second") == 1 && h.counter("pacer_duplicates_skipped_total") == 1
	}) {
		t.Fatalf("backlog copy: second sent %d, duplicates %v, DLQ %d; want 1, 1, 1",
			s.count(s.success, "second"), h.counter("pacer_duplicates_skipped_total"), h.dlqRecords())
	}
	if got := claims.n.Load(); got != 0 {
		t.Errorf("crashed claimed %d times, want 0: the copy read again took a send slot", got)
	}
	if got, late := h.histCount("pacer_bucket_wait_seconds"), h.counter("pacer_late_slots_total"); got < 1 || float64(got) > 1+late {
		t.Errorf("send slots taken = %d with %v given up late, want 1 (second's) and one per slot given up", got, late)
	}
	h.produce(env("crashed"), env("third"))
	if !waitFor(20*time.Second, func() bool {
		return s.count(s.success, "third") == 1 && h.counter("pacer_duplicates_skipped_total") == 2
	}) {
		t.Fatalf("copy while running: third sent %d, duplicates %v, DLQ %d; want 1, 2, 1",
			s.count(s.success, "third"), h.counter("pacer_duplicates_skipped_total"), h.dlqRecords())
	}
	if n := h.dlqRecords(); n != 1 {
		t.Errorf("%d DLQ records, want 1: the copies read again are not dead-lettered again", n)
	}
	if got := s.count(s.calls, "crashed"); got != 0 {
		t.Errorf("crashed: %d requests before the replay, want 0", got)
	}

	stop()

	// Replayed from the DLQ (the operator decided), read by the next owner
	// in its backlog: it is sent.
	rep := &kgo.Record{Topic: "pacer.test", Key: []byte("k1"), Value: []byte(env("crashed")),
		Headers: []kgo.RecordHeader{{Key: "pacer-replayed", Value: []byte("1")}}}
	if err := h.cl.ProduceSync(context.Background(), rep).FirstErr(); err != nil {
		t.Fatal(err)
	}
	h.reg = prometheus.NewRegistry()
	h.run(func() bool { return s.count(s.success, "crashed") == 1 })
	if n := h.dlqRecords(); n != 1 {
		t.Errorf("%d DLQ records at the end, want 1", n)
	}
}

// TestDeliveredBacklogSkippedBeforeSlot: after a crash the next owner
// reads again records the dead process delivered; they are finished as
// duplicates before they take a send slot (one ledger read for the fetch,
// of the records below the horizon the dead process recorded), so a fresh
// record behind them is not 20 slots (5 s at 4/s) late. Without a horizon
// (a process of a version that wrote none) the records are not read in the
// ledger first: each takes a slot, and its claim finds it delivered; none
// is sent again either way.
func TestDeliveredBacklogSkippedBeforeSlot(t *testing.T) {
	for _, tc := range []struct {
		batched time.Duration
		horizon bool
	}{{0, true}, {5 * time.Millisecond, true}, {0, false}} {
		batched := tc.batched
		t.Run(fmt.Sprintf("batched=%v,horizon=%v", batched, tc.horizon), func(t *testing.T) {
			h := newHarness(t, nil)
			h.batched = batched
			h.cfg.Limit = bucket.Limit{PerSecond: 4, Burst: 1}
			l := h.plainLedger()
			var vals []string
			for i := range 20 {
				id := fmt.Sprint("d", i)
				// As the process that died left them: claimed, delivered.
				if _, _, err := l.Claim(context.Background(), "test", "k1", id, "dead-process", false); err != nil {
					t.Fatal(err)
				}
				if err := l.Delivered(context.Background(), "test", "k1", id, "p-"+id); err != nil {
					t.Fatal(err)
				}
				vals = append(vals, env(id))
			}
			if tc.horizon { // as the process that died recorded it before it handled them
				ps := []ledger.Partition{{Group: "pacer-test", Topic: "pacer.test", Partition: 0}, {Group: "pacer-test", Topic: "pacer.test", Partition: 1}}
				if err := l.SetHorizons(context.Background(), "test", ps, []int64{20, 20}); err != nil {
					t.Fatal(err)
				}
			}
			h.produce(append(vals, env("fresh"))...)
			s := h.sender
			h.run(func() bool {
				return s.count(s.success, "fresh") == 1 && h.counter("pacer_duplicates_skipped_total") == 20
			})
			want := uint64(1) // fresh's
			if !tc.horizon {
				want = 21
			}
			if got := h.histCount("pacer_bucket_wait_seconds"); got != want {
				t.Errorf("send slots taken = %d, want %d", got, want)
			}
			for i := range 20 {
				if n := s.count(s.calls, fmt.Sprint("d", i)); n != 0 {
					t.Errorf("d%d: %d requests, want 0", i, n)
				}
			}
		})
	}
}

// TestReplayOncePerID: a message dead-lettered more than once (its DLQ
// copies carry one envelope id) is replayed once; a value that does not
// parse is replayed as often as it is there.
func TestReplayOncePerID(t *testing.T) {
	h := newHarness(t, nil)
	if _, err := kadm.NewClient(h.cl).CreateTopic(context.Background(), 1, 1, nil, "pacer.test.dlq"); err != nil {
		t.Fatal(err)
	}
	var rs []*kgo.Record
	for _, v := range []string{env("a"), env("b"), env("a"), "not json", env("a"), "not json"} {
		rs = append(rs, &kgo.Record{Topic: "pacer.test.dlq", Key: []byte("k1"), Value: []byte(v),
			Headers: []kgo.RecordHeader{{Key: "pacer-reason", Value: []byte("unknown-outcome")}}})
	}
	if err := h.cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.kc.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	s, err := produce.Replay(context.Background(), cl, produce.ReplayConfig{DLQTopic: "pacer.test.dlq", Topic: "pacer.test", Partitions: 2})
	if err != nil || s.Scanned != 6 || s.Replayed != 4 || s.Duplicates != 2 {
		t.Fatalf("Replay = %+v, %v; want 6 scanned, 4 replayed, 2 duplicates", s, err)
	}
	ends, err := kadm.NewClient(h.cl).ListEndOffsets(context.Background(), "pacer.test")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	if n != 4 {
		t.Errorf("%d records on the main topic, want 4 (a, b and both unparsed)", n)
	}
}

// TestHorizonRecordedBeforeHandling: a process records its partition's
// horizon above a record's offset before it handles the record, so the
// next owner reads every record it may have handled in the ledger.
func TestHorizonRecordedBeforeHandling(t *testing.T) {
	h := newHarness(t, nil)
	l := h.plainLedger()
	ps := []ledger.Partition{{Group: "pacer-test", Topic: "pacer.test", Partition: 0}, {Group: "pacer-test", Topic: "pacer.test", Partition: 1}}
	var mu sync.Mutex
	var missing []string
	check := func(id string) { // at each send: the horizon covers it
		offs, err := l.Horizons(context.Background(), "test", ps)
		mu.Lock()
		defer mu.Unlock()
		if err != nil || max(offs[0], offs[1]) < 3 {
			missing = append(missing, fmt.Sprintf("%s: horizons %v, %v", id, offs, err))
		}
	}
	h.produce(env("a"), env("b"), env("c"))
	s := h.sender
	_, stop := h.start(h.cfg, checkingSender{s, check}, h.reg)
	ok := waitFor(20*time.Second, func() bool { return s.count(s.success, "c") == 1 })
	stop()
	if !ok {
		t.Fatal("c not delivered")
	}
	if len(missing) > 0 {
		t.Errorf("sent with no horizon above them: %v", missing)
	}
	offs, err := l.Horizons(context.Background(), "test", ps)
	if err != nil || max(offs[0], offs[1]) < 3 || min(offs[0], offs[1]) != -1 {
		t.Errorf("horizons %v, %v; want one partition's above offset 2, the other's unset", offs, err)
	}
}

// checkingSender calls check with each message's id before its send.
type checkingSender struct {
	*scriptSender
	check func(id string)
}

func (c checkingSender) Send(ctx context.Context, m channels.Message) (channels.Result, error) {
	c.check(m.ID)
	return c.scriptSender.Send(ctx, m)
}
