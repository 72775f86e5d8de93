//go:build e2e

package main

// Deep backlogs through `pacer run` against real Kafka and Redis and the
// strict fake WhatsApp API: one number whose backlog reaches minutes past
// its lookahead costs at most 2 Kafka writes per delivered message
// (pacer_kafka_writes_total over the messages delivered), whatever its
// depth. TestBacklogParkWritesShort runs in `make test-e2e`;
// TestBacklogBench (PACER_BENCH_BACKLOG=1, `make bench-backlog`) prints the
// figures of BENCHMARKS.md.

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
)

// backlogRun is one number's backlog drained through one `pacer run`.
type backlogRun struct {
	n           int
	rate        float64
	took, ideal time.Duration // first to last accepted send; n / rate
	delivered   int
	dups        int
	throttled   int
	writes      float64            // pacer_kafka_writes_total, every series
	byKind      map[string]float64 // kind/topic -> writes
	maxRSSKB    int
	parked      float64 // pacer_parked_total
}

// perDelivered is the Kafka writes per delivered message.
func (b backlogRun) perDelivered() float64 {
	if b.delivered == 0 {
		return 0
	}
	return b.writes / float64(b.delivered)
}

func (b backlogRun) String() string {
	var kinds []string
	for k, v := range b.byKind {
		if v > 0 {
			kinds = append(kinds, fmt.Sprintf("%s %.0f", k, v))
		}
	}
	sort.Strings(kinds)
	return fmt.Sprintf("%d msgs at %.0f/s: delivered %d, duplicates %d, throttled %d; done in %v (ideal %v, +%.1f%%); Kafka writes %.0f = %.3f per delivered message (%s); max RSS %d MiB",
		b.n, b.rate, b.delivered, b.dups, b.throttled, b.took.Round(100*time.Millisecond), b.ideal,
		100*(b.took.Seconds()/b.ideal.Seconds()-1), b.writes, b.perDelivered(), strings.Join(kinds, ", "), b.maxRSSKB/1024)
}

// writesByKind reads pacer_kafka_writes_total's series as kind/topic -> value.
func (p *proc) writesByKind(t testing.TB) map[string]float64 {
	t.Helper()
	_, body := httpGet(t, "http://"+p.metricsAddr(t)+"/metrics")
	out := map[string]float64{}
	for _, l := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(l, "pacer_kafka_writes_total{")
		if !ok {
			continue
		}
		labels, val, _ := strings.Cut(rest, "} ")
		kind, topic := "", ""
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "kind":
				kind = strings.Trim(v, `"`)
			case "topic":
				topic = strings.Trim(v, `"`)
			}
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			t.Fatalf("/metrics: %s: %v", l, err)
		}
		out[kind+"/"+topic] += f
	}
	return out
}

// runBacklog publishes n messages for one number and drains them through
// one `pacer run` at rate msgs/s (the fake's limit, burst 2; the pacer's
// burst 1), with env added to its settings, until all are delivered.
func runBacklog(t *testing.T, n int, rate float64, env ...string) backlogRun {
	e := newE2E(t, whatsapptest.Config{Rate: rate, Burst: 2, Latency: 5 * time.Millisecond})
	key := keysOn("9", 0, 4, 1)[0]
	var b strings.Builder
	lines(&b, "bl", key, n)
	if code, out, errs := e.publish(b.String(), "--partitions", "4"); code != 0 {
		t.Fatalf("publish: %d %s %s", code, out, errs)
	}
	r := backlogRun{n: n, rate: rate, ideal: time.Duration(float64(n) / rate * float64(time.Second))}
	p := e.run(append([]string{"PACER_WHATSAPP_RATE=" + strconv.FormatFloat(rate, 'f', -1, 64), "PACER_WHATSAPP_BURST=1", "PACER_PARK_LANES=true"}, env...)...)
	deadline := time.Now().Add(r.ideal*3/2 + 2*time.Minute)
	for e.fake.Stats()[key].Delivered < n {
		r.maxRSSKB = max(r.maxRSSKB, rssKB(p.cmd.Process.Pid))
		if time.Now().After(deadline) {
			t.Fatalf("delivered %d of %d by %v\n%s", e.fake.Stats()[key].Delivered, n, time.Since(deadline.Add(-r.ideal*3/2-2*time.Minute)), p.logs())
		}
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // a late duplicate shows
	r.writes = p.metricSum(t, "pacer_kafka_writes_total")
	r.byKind = p.writesByKind(t)
	r.parked = p.metricSum(t, "pacer_parked_total")
	p.stop(t)
	s := e.fake.Stats()[key]
	r.delivered, r.dups, r.throttled = s.Delivered, s.Duplicates, s.Throttled
	r.took = s.Last.Sub(s.First)
	return r
}

// TestBacklogParkWritesShort: one number with 6,000 messages at 200/s (a
// 30 s backlog: 25 s past its 5 s lookahead) and retry tiers of 1 s and
// 2 s, so the backlog is deep against its tiers as 100,000 messages at
// 80/s are against the default ones. Through the tiers a record hopped
// every 2 s until its slot was within the lookahead of the worker that
// read it back; on the park lanes each parked record is written once: at
// most 1 Kafka write per delivered message (1.05 allows the odd requeue),
// every message delivered once.
func TestBacklogParkWritesShort(t *testing.T) {
	measured(t)
	r := runBacklog(t, 6000, 200, "PACER_RETRY_DELAYS=1s,2s")
	t.Log(r)
	if r.delivered != r.n || r.dups != 0 {
		t.Errorf("delivered %d with %d duplicates, want %d once each", r.delivered, r.dups, r.n)
	}
	if r.writes == 0 || r.perDelivered() > 1.05 {
		t.Errorf("%.0f Kafka writes for %d delivered (%.2f each), want (0, 1.05]: %v", r.writes, r.delivered, r.perDelivered(), r.byKind)
	}
	lanes := 0.0
	for k, v := range r.byKind {
		if strings.HasPrefix(k, "park/park.") {
			lanes += v
		}
	}
	if lanes < 0.9*r.parked {
		t.Errorf("%.0f of %.0f parked copies went to a park lane, want 90%% at least: %v", lanes, r.parked, r.byKind)
	}
}

// TestBacklogBench prints the figures of BENCHMARKS.md ("Deep backlogs"):
// one number at 80/s with 20,000 messages and the tiers, lookahead and
// backlog all a fifth of the defaults' (PACER_RETRY_DELAYS=1s,6s,1m,
// PACER_LOOKAHEAD=1s: the same horizon-to-tier ratio as 100,000 messages
// with the defaults, in 4 minutes), then, with PACER_BENCH_BACKLOG=full,
// 100,000 messages with the defaults (21 minutes).
// PACER_BENCH_BACKLOG_N=n,rate runs that one instead, with the settings
// of PACER_BENCH_BACKLOG_ENV (K=V;K=V) added.
func TestBacklogBench(t *testing.T) {
	mode := os.Getenv("PACER_BENCH_BACKLOG")
	if mode == "" {
		t.Skip("measurement: run with PACER_BENCH_BACKLOG=1 (make bench-backlog)")
	}
	if v := os.Getenv("PACER_BENCH_BACKLOG_N"); v != "" {
		n, rate, _ := strings.Cut(v, ",")
		ni, err1 := strconv.Atoi(n)
		rf, err2 := strconv.ParseFloat(rate, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("PACER_BENCH_BACKLOG_N=%q: want n,rate", v)
		}
		var env []string
		if v := os.Getenv("PACER_BENCH_BACKLOG_ENV"); v != "" {
			env = strings.Split(v, ";")
		}
		t.Log(runBacklog(t, ni, rf, env...))
		return
	}
	t.Run("Compressed20000", func(t *testing.T) {
		t.Log(runBacklog(t, 20_000, 80, "PACER_RETRY_DELAYS=1s,6s,1m", "PACER_LOOKAHEAD=1s"))
	})
	if mode == "full" {
		t.Run("Full100000", func(t *testing.T) { t.Log(runBacklog(t, 100_000, 80)) })
	}
}

// pausedWrites is one run of runPausedWrites.
type pausedWrites struct {
	n           int
	window      time.Duration
	writes      float64 // Kafka writes over the window, well into the pause
	resumeFirst time.Duration
	lost, dups  int
}

func (r pausedWrites) String() string {
	return fmt.Sprintf("campaign of %d paused at its first send: %.0f Kafka writes in %v from 15 s into the pause (%.2f per record per minute); first send %v after resume; lost %d, duplicates %d",
		r.n, r.writes, r.window, r.writes/float64(r.n)/r.window.Minutes(), r.resumeFirst.Round(10*time.Millisecond), r.lost, r.dups)
}

// runPausedWrites publishes a campaign of n messages on one number at
// 50/s, pauses it once its first message is sent, counts the Kafka writes
// of one `pacer run` over window once every record of it has come to its
// slot and found it paused (15 s in), then resumes it and waits until
// every message is delivered.
func runPausedWrites(t *testing.T, n int, window time.Duration) pausedWrites {
	e := newE2E(t, whatsapptest.Config{Rate: 50, Burst: 2, Latency: 5 * time.Millisecond})
	var b strings.Builder
	key := "10654830001"
	campaignLines(&b, "P", []string{key}, n, "")
	ps := e.startAndPublish(b.String(), 1, "PACER_WHATSAPP_RATE=50", "PACER_WHATSAPP_BURST=1")
	e.waitProgress(0, 60*time.Second, ps...)
	e.cli("campaign", "pause", "--channel", "whatsapp", "--campaign", "P")
	time.Sleep(15 * time.Second)
	before := ps[0].metricSum(t, "pacer_kafka_writes_total")
	time.Sleep(window)
	r := pausedWrites{n: n, window: window, writes: ps[0].metricSum(t, "pacer_kafka_writes_total") - before}
	e.cli("campaign", "resume", "--channel", "whatsapp", "--campaign", "P")
	resumed := time.Now()
	e.waitDelivered(n, 120*time.Second, ps...)
	stopAll(t, ps)
	r.resumeFirst = -1
	for _, a := range e.fake.Arrivals() {
		if !a.Throttled && a.At.After(resumed) {
			r.resumeFirst = a.At.Sub(resumed)
			break
		}
	}
	r.lost = n - len(e.deliveredIDs())
	_, r.dups = e.delivered()
	return r
}

// TestBacklogPausedWritesShort: a paused campaign costs no Kafka write per
// period. Each of its records is parked once when it comes to its slot
// and finds the campaign paused (for the longest retry delay, 5 minutes,
// taken early on resume); before, each came back every 5 s to look at the
// state again: 400 records cost 80 writes a second. 20 s well into the
// pause see none (one allowed for a stray requeue), and a resume sends
// again within 8 s, every message once.
func TestBacklogPausedWritesShort(t *testing.T) {
	measured(t)
	r := runPausedWrites(t, 400, 20*time.Second)
	t.Log(r)
	if r.writes > 1 {
		t.Errorf("%.0f Kafka writes in %v while the campaign was paused, want 0 (1 allowed)", r.writes, r.window)
	}
	if r.resumeFirst < 0 || r.resumeFirst > 8*time.Second {
		t.Errorf("first send %v after resume, want within 8 s", r.resumeFirst)
	}
	if r.lost != 0 || r.dups != 0 {
		t.Errorf("lost %d, duplicates %d: want 0", r.lost, r.dups)
	}
}
