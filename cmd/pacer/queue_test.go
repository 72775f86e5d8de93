//go:build e2e

package main

// Per-key queues through `pacer run` against real Kafka and Redis and the
// strict fake WhatsApp API (the pacer's rate; burst 2 against the pacer's 1:
// one message of margin for the arrival jitter of the network, as the README
// advises under a hard limit, and no more): a key's backlog
// must not delay the keys sharing its partition. TestQueuePerKeyShort runs
// in `make test-e2e`; TestQueueBench (PACER_BENCH_QUEUE=1, `make
// bench-queue`) prints the figures of BENCHMARKS.md.

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
	"github.com/pacerhq/pacer/partitioner"
	"github.com/twmb/franz-go/pkg/kadm"
)

// keysOn returns n pacing keys (tagged tag) whose partition among parts is part.
func keysOn(tag string, part int32, parts, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		k := fmt.Sprintf("10654%s%05d", tag, i)
		if partitioner.Partition([]byte(k), parts) == part {
			out = append(out, k)
		}
	}
	return out
}

// lines returns n envelopes of key, ids tag-key-i.
func lines(b *strings.Builder, tag, key string, n int) {
	for i := range n {
		fmt.Fprintf(b, `{"id":"%s-%s-%d","key":%q,"to":"1555%07d","payload":{"type":"text","text":{"body":"m"}}}`+"\n", tag, key, i, key, i)
	}
}

// rssKB reads the resident set size of pid in kB from /proc.
func rssKB(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			n, _ := strconv.Atoi(strings.Fields(l)[1])
			return n
		}
	}
	return 0
}

// headOfLine is one run of the measurement: big messages for key A,
// then 20 for B on A's partition and 20 for C on another, at rate msgs/s.
type headOfLine struct {
	firstB, firstC, doneB, doneC time.Duration // from the first send of the run
	ideal                        time.Duration // 20 / rate
	maxRSSKB                     int
	throttled                    int
	parked                       float64
	stats                        map[string]whatsapptest.KeyStats
	a, b, c                      string
}

// runHeadOfLine runs it until B and C (and A if waitA) are done, and at
// least minRun so the RSS covers parked copies coming back.
func runHeadOfLine(t *testing.T, big int, rate float64, waitA bool, minRun time.Duration, statusTop bool) headOfLine {
	e := newE2E(t, whatsapptest.Config{Rate: rate, Burst: 2, Latency: 5 * time.Millisecond})
	const parts = 4
	ab := keysOn("7", 0, parts, 2)
	c := keysOn("7", 1, parts, 1)[0]
	var b strings.Builder
	lines(&b, "q", ab[0], big)
	lines(&b, "q", ab[1], 20)
	lines(&b, "q", c, 20)
	if code, out, errs := e.publish(b.String(), "--partitions", strconv.Itoa(parts)); code != 0 {
		t.Fatalf("publish: %d %s %s", code, out, errs)
	}
	p := e.run("PACER_WHATSAPP_RATE="+strconv.FormatFloat(rate, 'f', -1, 64), "PACER_WHATSAPP_BURST=1")
	h := headOfLine{a: ab[0], b: ab[1], c: c, ideal: time.Duration(20 / rate * float64(time.Second))}
	start := time.Now()
	deadline := start.Add(3 * time.Minute)
	for {
		h.maxRSSKB = max(h.maxRSSKB, rssKB(p.cmd.Process.Pid))
		s := e.fake.Stats()
		if s[h.b].Delivered >= 20 && s[h.c].Delivered >= 20 && (!waitA || s[h.a].Delivered >= big) && time.Since(start) >= minRun {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not done within 3 minutes: %+v\n%s", s, p.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if statusTop {
		// pacer status names A as the top key by backlog once the pacer
		// published it (every 5 s).
		for {
			st := exec.Command(pacerBin, "status", "--channel", "whatsapp")
			st.Env = e.env()
			out, err := st.CombinedOutput()
			if err != nil {
				t.Fatalf("pacer status: %v\n%s", err, out)
			}
			first := ""
			if _, top, ok := strings.Cut(string(out), "BACKLOG\n"); ok {
				if f := strings.Fields(top); len(f) > 0 {
					first = f[0]
				}
			}
			if first == h.a {
				t.Logf("pacer status:\n%s", out[strings.Index(string(out), "top keys"):])
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pacer status never listed %s first:\n%s", h.a, out)
			}
			time.Sleep(time.Second)
		}
	}
	h.parked = p.metricSum(t, "pacer_parked_total")
	if os.Getenv("PACER_BENCH_DEBUG") != "" {
		t.Log(p.logs())
	}
	p.stop(t)
	h.stats = e.fake.Stats()
	var t0 time.Time
	for _, s := range h.stats {
		if t0.IsZero() || s.First.Before(t0) {
			t0 = s.First
		}
	}
	sb, sc := h.stats[h.b], h.stats[h.c]
	h.firstB, h.doneB = sb.First.Sub(t0), sb.Last.Sub(t0)
	h.firstC, h.doneC = sc.First.Sub(t0), sc.Last.Sub(t0)
	for k, s := range h.stats {
		if s.Duplicates != 0 {
			t.Errorf("number %s: %d duplicates, want 0", k, s.Duplicates)
		}
		h.throttled += s.Throttled
	}
	t.Logf("A %d msgs, B and C 20 each at %.0f/s (ideal 20 msgs: %v): B first send %v, done %v; C first send %v, done %v; A delivered %d; parked %.0f; throttled %d; max RSS %d MiB",
		big, rate, h.ideal, h.firstB.Round(10*time.Millisecond), h.doneB.Round(10*time.Millisecond),
		h.firstC.Round(10*time.Millisecond), h.doneC.Round(10*time.Millisecond), h.stats[h.a].Delivered, h.parked, h.throttled, h.maxRSSKB/1024)
	return h
}

// TestQueuePerKeyShort: 400 for A, then 20 for B on A's partition, 20 for C
// on another, at 20/s. Behind a shared window B waited about 19 s; with a
// queue per key B starts at once and is done about 1 s (its ideal) later.
func TestQueuePerKeyShort(t *testing.T) {
	measured(t)
	h := runHeadOfLine(t, 400, 20, false, 0, true)
	for name, d := range map[string]time.Duration{"B first send": h.firstB, "C first send": h.firstC,
		"B done": h.doneB - h.ideal, "C done": h.doneC - h.ideal} {
		// Generous for a loaded 2-core machine; waiting for A costs 19 s.
		if d > 4*time.Second {
			t.Errorf("%s %v after the first send of the run (beyond B's ideal): B or C waited for A", name, d)
		}
	}
	if h.parked == 0 {
		t.Errorf("pacer_parked_total = 0: A's records beyond its lookahead were held, not parked")
	}
}

// parkCost reads every copy the retry tiers and park lanes of e hold and sums up what
// parking cost: copies carrying pacer-parks (park copies and their hops),
// the records they were made for (distinct ids), the copies of a record
// made anew from its main partition after a rebalance or crash re-delivered
// it (pacer-parks 1 more than once), and the largest hop count.
type parkStats struct {
	copies, records, reparks, maxHops int
}

func (s parkStats) String() string {
	per := 0.0
	if s.records > 0 {
		per = float64(s.copies) / float64(s.records)
	}
	return fmt.Sprintf("%d park copies for %d parked records (%.2f per record; %d made again from a re-delivered original; most hops of one record %d)",
		s.copies, s.records, per, s.reparks, s.maxHops)
}

func parkCost(t *testing.T, e *e2e) parkStats {
	adm := kadm.NewClient(newKafkaClient(t, e.brokers))
	tiers := []string{e.topic + ".retry.1", e.topic + ".retry.2", e.topic + ".retry.3",
		e.topic + ".park.1", e.topic + ".park.2", e.topic + ".park.3", e.topic + ".park.4"}
	ends, err := adm.ListEndOffsets(context.Background(), tiers...)
	if err != nil {
		t.Logf("park cost: %v", err)
		return parkStats{}
	}
	var st parkStats
	first := map[string]int{}
	seen := map[string]bool{}
	for _, tier := range tiers {
		want := 0
		ends.Each(func(o kadm.ListedOffset) {
			if o.Topic == tier {
				want += int(o.Offset)
			}
		})
		if want == 0 {
			continue
		}
		for _, r := range consumeAll(t, e.brokers, tier, want) {
			parks := 0
			for _, h := range r.Headers {
				if h.Key == "pacer-parks" {
					parks, _ = strconv.Atoi(string(h.Value))
				}
			}
			if parks == 0 {
				continue
			}
			st.copies++
			st.maxHops = max(st.maxHops, parks)
			env := string(r.Value)
			id := env[strings.Index(env, `"id":"`)+6:]
			id = id[:strings.IndexByte(id, '"')]
			seen[id] = true
			if parks == 1 {
				first[id]++
			}
		}
	}
	st.records = len(seen)
	for _, n := range first {
		st.reparks += n - 1
	}
	return st
}

// timeline returns key's accepted arrivals per step from t0, as
// "n n n ...": where a backlogged key ran dry shows as low counts.
func timeline(e *e2e, key string, t0 time.Time, step time.Duration) string {
	var n []int
	for _, a := range e.fake.Arrivals() {
		if a.Key != key || a.Throttled {
			continue
		}
		i := int(a.At.Sub(t0) / step)
		for len(n) <= i {
			n = append(n, 0)
		}
		n[i]++
	}
	return strings.Trim(fmt.Sprint(n), "[]")
}

func benchOnly(t *testing.T) {
	if os.Getenv("PACER_BENCH_QUEUE") == "" {
		t.Skip("measurement: run with PACER_BENCH_QUEUE=1 (make bench-queue)")
	}
}

// TestQueueBench prints the figures of BENCHMARKS.md ("Queue per key").
func TestQueueBench(t *testing.T) {
	benchOnly(t)
	t.Run("A400", func(t *testing.T) { runHeadOfLine(t, 400, 20, true, 0, false) })
	t.Run("A100000", func(t *testing.T) { runHeadOfLine(t, 100_000, 20, false, 60*time.Second, false) })
	t.Run("Spread", benchSpread)
	t.Run("Kill", benchKill)
	t.Run("Strict", benchStrict)
}

// benchStrict: strict order (PACER_INFLIGHT=1). Number A has 8,000
// messages at 200/s, more than a partition holds (2,000); number B's 20
// are written to A's partition once A has started. A's excess is parked in
// its chain, so B is read and sent at once (before chains, A's backlog
// paused the partition and B waited until A's backlog had drained to
// 1,000), and A's messages arrive in offset order, except those a throttle
// sent to a retry (their order is given up).
func benchStrict(t *testing.T) {
	const rate, big = 200.0, 8000
	e := newE2E(t, whatsapptest.Config{Rate: rate, Burst: 2, Latency: 5 * time.Millisecond})
	ab := keysOn("8", 0, 4, 2)
	var b strings.Builder
	lines(&b, "q", ab[0], big)
	if code, out, errs := e.publish(b.String(), "--partitions", "4"); code != 0 {
		t.Fatalf("publish: %d %s %s", code, out, errs)
	}
	p := e.run("PACER_WHATSAPP_RATE=200", "PACER_WHATSAPP_BURST=1", "PACER_INFLIGHT=1")
	for e.fake.Stats()[ab[0]].Delivered == 0 {
		time.Sleep(100 * time.Millisecond)
	}
	// B is written once A has started: it is fetched behind A's backlog.
	b.Reset()
	lines(&b, "q", ab[1], 20)
	published := time.Now()
	if code, out, errs := e.publish(b.String(), "--partitions", "4"); code != 0 {
		t.Fatalf("publish: %d %s %s", code, out, errs)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		s := e.fake.Stats()
		if s[ab[0]].Delivered >= big && s[ab[1]].Delivered >= 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not done within 3 minutes: %+v\n%s", s, p.logs())
		}
		time.Sleep(500 * time.Millisecond)
	}
	parked := p.metricSum(t, "pacer_parked_total")
	p.stop(t)
	stats := e.fake.Stats()
	sa, sb := stats[ab[0]], stats[ab[1]]
	throttled := map[string]bool{}
	for _, a := range e.fake.Arrivals() {
		if a.Throttled {
			throttled[a.ID] = true
		}
	}
	last, inversions := -1, 0
	for _, a := range e.fake.Arrivals() {
		if a.Key != ab[0] || a.Throttled || throttled[a.ID] {
			continue
		}
		i, _ := strconv.Atoi(a.ID[strings.LastIndexByte(a.ID, '-')+1:])
		if i < last {
			inversions++
		}
		last = i
	}
	t.Logf("strict order, A 8,000 and then B 20 on one partition at %.0f/s: B first send %v after its publish, done %v (ideal 0.1 s); A done %v (ideal 40 s); parked %.0f; throttled %d (ids retried: order given up); A's other sends out of offset order: %d; duplicates %d",
		rate, sb.First.Sub(published).Round(10*time.Millisecond), sb.Last.Sub(published).Round(10*time.Millisecond), sa.Last.Sub(sa.First).Round(time.Second), parked, len(throttled), inversions, sa.Duplicates+sb.Duplicates)
	if inversions != 0 {
		t.Errorf("%d of A's sends out of offset order", inversions)
	}
	if d := sb.Last.Sub(published); d > 5*time.Second {
		t.Errorf("B done %v after its publish, want < 5 s: B waited for A's backlog", d)
	}
	if parked < 1000 {
		t.Errorf("parked %.0f, want >= 1,000 (A's excess over its bound of 1,000)", parked)
	}
	if sa.Duplicates+sb.Duplicates != 0 {
		t.Errorf("duplicates %d, want 0", sa.Duplicates+sb.Duplicates)
	}
}

// benchSpread: numbers on 4 partitions with backlogs spread geometrically
// from lo to hi, at rate msgs/s each (scaled by PACER_BENCH_SPREAD=numbers,lo,hi,rate).
func benchSpread(t *testing.T) {
	numbers, lo, hi, rate := 50, 10, 2000, 80.0
	if v := os.Getenv("PACER_BENCH_SPREAD"); v == "full" {
		hi = 50_000 // the scale: 313,000 messages, the largest 10.4 minutes at 80/s
	} else if v != "" {
		f := strings.Split(v, ",")
		numbers, _ = strconv.Atoi(f[0])
		lo, _ = strconv.Atoi(f[1])
		hi, _ = strconv.Atoi(f[2])
		rate, _ = strconv.ParseFloat(f[3], 64)
	}
	e := newE2E(t, whatsapptest.Config{Rate: rate, Burst: 2, Latency: 5 * time.Millisecond})
	want := map[string]int{}
	var b strings.Builder
	total := 0
	for i := range numbers {
		k := fmt.Sprintf("10654%05d", i)
		n := lo
		if numbers > 1 {
			n = int(float64(lo) * math.Pow(float64(hi)/float64(lo), float64(i)/float64(numbers-1)))
		}
		want[k] = n
		total += n
	}
	// Interleave in rounds so every number's records spread over its partition.
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i := 0; ; i++ {
		any := false
		for _, k := range keys {
			if i < want[k] {
				any = true
				fmt.Fprintf(&b, `{"id":"s-%s-%d","key":%q,"to":"1555%07d","payload":{"type":"text","text":{"body":"m"}}}`+"\n", k, i, k, i)
			}
		}
		if !any {
			break
		}
	}
	if code, out, errs := e.publish(b.String(), "--partitions", "4"); code != 0 {
		t.Fatalf("publish: %d %s %s", code, out, errs)
	}
	// The pacer runs at the fake's rate, or below it by PACER_BENCH_MARGIN
	// (a fraction, e.g. 0.05: the README's margin under a hard limit).
	prate := rate
	if v := os.Getenv("PACER_BENCH_MARGIN"); v != "" {
		m, _ := strconv.ParseFloat(v, 64)
		prate = rate * (1 - m)
	}
	// This run measures the queues, not AIMD: on a loaded 2-core machine
	// the fake stamps arrivals bunched by scheduling stalls and throttles a
	// few, and the default AIMD would halve those keys' rates for a minute.
	// So throttles cost 1% of the rate and a 10 ms cooldown here, unless
	// PACER_BENCH_ENV (K=V,...) says otherwise (PACER_BENCH_ENV=- for the
	// defaults).
	env := []string{"PACER_WHATSAPP_RATE=" + strconv.FormatFloat(prate, 'f', -1, 64), "PACER_WHATSAPP_BURST=1"}
	switch v := os.Getenv("PACER_BENCH_ENV"); v {
	case "":
		env = append(env, "PACER_AIMD_DECREASE=0.99", "PACER_THROTTLE_COOLDOWN=10ms")
	case "-":
	default:
		env = append(env, strings.Split(v, ",")...)
	}
	t.Logf("pacer settings: %v", env)
	p := e.run(env...)
	maxRSS := 0
	// At most 3 times the largest number's ideal plus 2 minutes, or
	// PACER_BENCH_SPREAD_MAX (a duration): the figures are then those of
	// what was delivered by then, and the run fails on the records left.
	deadline := time.Now().Add(envSetting(t, "PACER_BENCH_SPREAD_MAX", time.Duration(float64(hi)/rate*3+120)*time.Second, time.ParseDuration))
	for {
		maxRSS = max(maxRSS, rssKB(p.cmd.Process.Pid))
		got := 0
		for _, s := range e.fake.Stats() {
			got += s.Delivered
		}
		if got >= total || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	parked := p.metricSum(t, "pacer_parked_total")
	p.stop(t)
	stats := e.fake.Stats()
	var t0 time.Time
	for _, s := range stats {
		if t0.IsZero() || s.First.Before(t0) {
			t0 = s.First
		}
	}
	var rates, lateness []float64
	dups, lost, throttled, unfinished := 0, 0, 0, 0
	for _, k := range keys {
		s := stats[k]
		dups += s.Duplicates
		throttled += s.Throttled
		lost += want[k] - (s.Delivered - s.Duplicates)
		ideal := float64(want[k]) / prate
		done := s.Last.Sub(t0).Seconds()
		if want[k] >= int(2*rate) && s.Delivered > 1 { // a rate needs a backlog of some seconds to mean anything
			rates = append(rates, float64(s.Delivered-1)/s.Last.Sub(s.First).Seconds())
		}
		if s.Delivered-s.Duplicates >= want[k] {
			lateness = append(lateness, done-ideal)
		} else {
			unfinished++
		}
	}
	// The largest numbers, each: its rate, and its deliveries per 60 s.
	for _, k := range keys[max(0, len(keys)-3):] {
		s := stats[k]
		t.Logf("number %s, %d messages (ideal %.0f s): delivered %d, %.1f msgs/s from its first to its last; per 60 s: %s",
			k, want[k], float64(want[k])/prate, s.Delivered, float64(s.Delivered-1)/s.Last.Sub(s.First).Seconds(), timeline(e, k, t0, time.Minute))
	}
	t.Logf("park cost: %v", parkCost(t, e))
	if os.Getenv("PACER_BENCH_DEBUG") != "" {
		last := map[string][]time.Time{}
		shown := 0
		for _, a := range e.fake.Arrivals() {
			if a.Throttled && shown < 15 {
				shown++
				l := last[a.Key]
				var gaps []string
				for i := len(l) - 1; i >= 0 && i >= len(l)-3; i-- {
					gaps = append(gaps, a.At.Sub(l[i]).Round(time.Millisecond).String())
				}
				t.Logf("throttled %s %s at +%v; since the last accepted: %v", a.Key, a.ID, a.At.Sub(t0).Round(time.Millisecond), gaps)
			}
			if !a.Throttled {
				last[a.Key] = append(last[a.Key], a.At)
			}
		}
	}
	slices.Sort(rates)
	slices.Sort(lateness)
	if len(rates) == 0 || len(lateness) == 0 {
		t.Fatalf("nothing to measure: %d rates, %d numbers finished", len(rates), len(lateness))
	}
	t.Logf("%d numbers on 4 partitions, backlogs %d..%d (total %d), fake at %.0f/s, pacer at %.1f/s: achieved rate over numbers with >= 2 s of backlog: min %.1f, median %.1f msgs/s; completion minus ideal over the %d finished: median %.1fs, max %.1fs; %d unfinished at the end of the run; parked %.0f; throttled %d; duplicates %d, lost %d; max RSS %d MiB; run took %v",
		numbers, lo, hi, total, rate, prate, rates[0], rates[len(rates)/2], len(lateness), lateness[len(lateness)/2], lateness[len(lateness)-1], unfinished, parked, throttled, dups, lost, maxRSS/1024, time.Since(t0).Round(time.Second))
	if dups != 0 || lost != 0 {
		t.Errorf("duplicates %d, lost %d: want 0", dups, lost)
	}
}

// benchKill: 2 replicas, one number with 3,000 messages (parked beyond its
// lookahead) and 10 numbers with 100; one replica is SIGKILLed mid-run.
// Every message is delivered exactly once or dead-lettered as unknown-outcome
// (a send cut by the kill), none lost.
func benchKill(t *testing.T) {
	const rate = 50.0
	e := newE2E(t, whatsapptest.Config{Rate: rate, Burst: 2, Latency: 20 * time.Millisecond})
	want := map[string]int{"10654k00000": 3000}
	for i := 1; i <= 10; i++ {
		want[fmt.Sprintf("10654k%05d", i)] = 100
	}
	var b strings.Builder
	total := 0
	for k, n := range want {
		lines(&b, "k", k, n)
		total += n
	}
	if code, out, errs := e.publish(b.String(), "--partitions", "4"); code != 0 {
		t.Fatalf("publish: %d %s %s", code, out, errs)
	}
	envs := []string{"PACER_WHATSAPP_RATE=50", "PACER_WHATSAPP_BURST=1", "PACER_KAFKA_SESSION_TIMEOUT=6s"}
	procs := []*proc{e.run(envs...), e.run(envs...)}
	time.Sleep(8 * time.Second)
	parkedBefore := procs[0].metricSum(t, "pacer_parked_total") + procs[1].metricSum(t, "pacer_parked_total")
	inflight := e.fake.InFlight()
	procs[0].kill()
	inflight = max(inflight, e.fake.InFlight())
	adm := kadm.NewClient(newKafkaClient(t, e.brokers))
	delivered, reasons := e.waitFinished(adm, total, 4*time.Minute)
	// How long the last delivery took, and how many copies the retry
	// tiers and park lanes received (parks, their hops and requeues).
	first, last := e.deliverySpan()
	copies := int64(0)
	if ends, err := adm.ListEndOffsets(context.Background(), e.topic+".retry.1", e.topic+".retry.2", e.topic+".retry.3",
		e.topic+".park.1", e.topic+".park.2", e.topic+".park.3", e.topic+".park.4"); err == nil {
		ends.Each(func(o kadm.ListedOffset) { copies += o.Offset })
	}
	t.Logf("last delivery %v after the first (ideal for the 3,000: 60 s); %d copies written to the retry tiers and park lanes; %v", last.Sub(first).Round(time.Second), copies, parkCost(t, e))
	throttled := 0
	for _, st := range e.fake.Stats() {
		throttled += st.Throttled
	}
	t.Logf("the 3,000-message number's deliveries per 5 s from the first: %s; throttled %d (each halves the number's rate for a while: default AIMD)", timeline(e, "10654k00000", first, 5*time.Second), throttled)
	procs[1].stop(t)
	_, dups := e.delivered()
	lost := total - len(union(delivered, reasons))
	unknown := 0
	for id, r := range reasons {
		if r != "unknown-outcome" {
			t.Errorf("DLQ %s: reason %q, want only unknown-outcome", id, r)
		}
		unknown++
	}
	t.Logf("2 replicas, %d messages (one number 3,000, ten 100) at %.0f/s, SIGKILL of one after 8 s with %.0f records parked so far and %d requests in flight: delivered %d, duplicates %d, unknown-outcome %d, lost %d",
		total, rate, parkedBefore, inflight, len(delivered), dups, unknown, lost)
	if parkedBefore == 0 {
		t.Errorf("nothing parked before the kill")
	}
	if dups != 0 || lost != 0 {
		t.Errorf("duplicates %d, lost %d: want 0", dups, lost)
	}
	if unknown > inflight+1 {
		t.Errorf("unknown-outcome %d > requests in flight at the kill %d", unknown, inflight)
	}
}
