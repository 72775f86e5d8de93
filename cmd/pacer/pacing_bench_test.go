//go:build e2e

package main

// The scenario bench of pacing at a provider's real limit: real `pacer run`
// processes with the DEFAULT adaptation settings, the real Kafka broker and
// redis-server, against a strict fake WhatsApp Cloud API (token buckets of
// exactly the given rate and burst, no slack, counted at its ingress, each
// starting at its first request). A hidden limit is the fake's own rate,
// below the configured one or moved while the campaign runs, as inbound
// traffic takes Meta's throughput away from a number.
//
// `make bench-pacing` runs the full form (PACER_BENCH_PACING=full: campaigns
// of 60 s and more) and prints the table recorded in BENCHMARKS.md. Without
// it, `go test -tags e2e` (`make test-e2e`) runs the short form, with the same assertions on shorter
// campaigns, so that a regression fails CI.
//
// PACER_BENCH_PACING_ONLY runs a subset: a comma-separated list of
// prefixes of scenario names ("3,7 hidden" runs "3 hidden 80>40>80" and
// "7 hidden 30 of 80 x3"); unset or empty runs every scenario. A list that
// matches none fails the test, so a typo never passes as an empty run.

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// hiddenStep sets the fake's rate for every number at an offset from the
// first request the fake sees.
type hiddenStep struct {
	at   time.Duration
	rate float64
}

// pacingScenario is one row of the bench.
type pacingScenario struct {
	name      string
	rate      float64 // configured, msgs/s per number (PACER_WHATSAPP_RATE)
	burst     int     // configured and the fake's burst
	hidden    []hiddenStep
	numbers   int
	per       int // messages per number
	replicas  int
	pairEvery int     // every pairEvery-th message of a number goes to one recipient (0: none)
	pairRate  float64 // the fake's pair limit (with pairBurst)
	pairBurst int
	acctLimit int // the fake's account budget per acctWin for all numbers together (0: none)
	acctWin   time.Duration
	extraEnv  []string
}

// pacingResult is what the bench prints for a scenario.
type pacingResult struct {
	achieved    float64 // accepted msgs/s per number over the campaign (first to last accepted)
	hiddenAvg   float64 // time-weighted hidden limit over the same span
	throttled   float64 // share of requests answered with a throttle
	settle      []float64
	afterSettle float64 // share throttled after the last settle
	lost, dups  int
	requests    int
	codes       map[int]int
	pairMax     int           // throttles of the pair after its first
	pairSpan    time.Duration // from the pair's first throttle to the last accepted send
	pairPerMin  float64       // throttles per pair per minute after the first
	othersRate  float64       // accepted msgs/s per number to other recipients, over their span (pair scenario: also achieved)
}

func (r pacingResult) utilization() float64 { return r.achieved / r.hiddenAvg }

func pacingScenarios(full bool) []pacingScenario {
	// n picks the full or the short length.
	n := func(long, short int) int {
		if full {
			return long
		}
		return short
	}
	d := func(long, short time.Duration) time.Duration {
		if full {
			return long
		}
		return short
	}
	up := d(45*time.Second, 20*time.Second)
	return []pacingScenario{
		{name: "1 at the limit", rate: 80, burst: 10, numbers: 2, per: n(5600, 1600), replicas: 1},
		{name: "2 hidden 30 of 80", rate: 80, burst: 10, hidden: []hiddenStep{{0, 30}}, numbers: 1,
			per: n(2100, 750), replicas: 1},
		{name: "3 hidden 80>40>80", rate: 80, burst: 10, numbers: 1, replicas: 1,
			hidden:   []hiddenStep{{d(20*time.Second, 10*time.Second), 40}, {d(45*time.Second, 25*time.Second), 80}},
			per:      n(20*80+25*40+50*80, 10*80+15*40+int(up.Seconds())*80),
			extraEnv: nil},
		{name: "4a 0.5/s burst 1", rate: 0.5, burst: 1, numbers: 1, per: n(40, 12), replicas: 1},
		{name: "4b 1 per 6 s", rate: 1.0 / 6, burst: 1, numbers: 1, per: n(12, 4), replicas: 1},
		// The pair limit scaled down from Meta's 1 per 6 s, bursts of 45, so
		// that it is met within the campaign: 0.5/s, bursts of 5, against
		// one recipient getting every 100th (200th) message, 0.8 (0.4)/s.
		{name: "5 pair limit", rate: 80, burst: 10, numbers: 1, per: n(4000, 1200), replicas: 3,
			pairEvery: n(100, 100), pairRate: 0.5, pairBurst: 5},
		// The account budget scaled down from a rolling hour to 10 s, and
		// the cooldown with it (PACER_MAX_COOLDOWN caps the adapter's minute).
		{name: "6 account limit", rate: 40, burst: 10, numbers: 2, per: n(1200, 400), replicas: 1,
			acctLimit: n(600, 300), acctWin: 10 * time.Second, extraEnv: []string{"PACER_MAX_COOLDOWN=10s"}},
		{name: "7 at the limit x3", rate: 80, burst: 10, numbers: 2, per: n(5600, 1600), replicas: 3},
		{name: "7 hidden 30 of 80 x3", rate: 80, burst: 10, hidden: []hiddenStep{{0, 30}}, numbers: 1,
			per: n(2100, 750), replicas: 3},
	}
}

// TestPacingScenarios runs the scenarios one after another (they measure
// time and share 2 cores) and prints the table. The assertions are the
// issue's targets; the pair and account rows are printed, and assert only
// that nothing is lost or doubled.
func TestPacingScenarios(t *testing.T) {
	t.Parallel() // each scenario holds a measuring slot
	full := os.Getenv("PACER_BENCH_PACING") == "full"
	only := pacingOnly(os.Getenv("PACER_BENCH_PACING_ONLY"))
	var rows []string
	ran := 0
	for i, sc := range pacingScenarios(full) {
		if !only(sc.name) {
			continue
		}
		ran++
		t.Run(sc.name, func(t *testing.T) {
			holdSlots(t, 1)
			r := runPacingScenario(t, sc, fmt.Sprint(7, i))
			rows = append(rows, pacingRow(sc, r))
			checkPacingScenario(t, sc, r, full)
		})
	}
	if ran == 0 {
		t.Fatalf("PACER_BENCH_PACING_ONLY=%q matches no scenario", os.Getenv("PACER_BENCH_PACING_ONLY"))
	}
	form := "short"
	if full {
		form = "full"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pacing scenarios (%s form, default adaptation settings, strict fake):\n", form)
	fmt.Fprintf(&b, "| scenario | configured | hidden | achieved msgs/s | utilization | throttled | settle s | lost | duplicates |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		b.WriteString(r + "\n")
	}
	t.Log("\n" + b.String())
	fmt.Print(b.String())
}

// pacingOnly returns whether a scenario name is selected by list, the
// value of PACER_BENCH_PACING_ONLY: comma-separated name prefixes, each
// trimmed of spaces; an empty list (or only empty prefixes) selects all.
func pacingOnly(list string) func(name string) bool {
	var prefixes []string
	for p := range strings.SplitSeq(list, ",") {
		if p = strings.TrimSpace(p); p != "" {
			prefixes = append(prefixes, p)
		}
	}
	return func(name string) bool {
		if len(prefixes) == 0 {
			return true
		}
		for _, p := range prefixes {
			if strings.HasPrefix(name, p) {
				return true
			}
		}
		return false
	}
}

// pacingRow formats one table row.
func pacingRow(sc pacingScenario, r pacingResult) string {
	hidden := fmt.Sprintf("%.3g", sc.rate)
	if len(sc.hidden) > 0 {
		var hs []string
		if sc.hidden[0].at > 0 {
			hs = append(hs, fmt.Sprintf("%.3g", sc.rate))
		}
		for _, h := range sc.hidden {
			hs = append(hs, fmt.Sprintf("%.3g", h.rate))
		}
		hidden = strings.Join(hs, ">")
	}
	settle := "-"
	if len(r.settle) > 0 {
		var ss []string
		for _, s := range r.settle {
			if s < 0 {
				ss = append(ss, "never")
			} else {
				ss = append(ss, fmt.Sprintf("%.1f", s))
			}
		}
		settle = strings.Join(ss, " / ")
	}
	thr := fmt.Sprintf("%.2f%% of %d", r.throttled*100, r.requests)
	if len(r.settle) > 0 {
		thr += fmt.Sprintf(" (%.2f%% after settling)", r.afterSettle*100)
	}
	var codes []string
	for c, k := range r.codes {
		codes = append(codes, fmt.Sprintf("%d x%d", c, k))
	}
	sort.Strings(codes)
	if len(codes) > 0 {
		thr += "; " + strings.Join(codes, ", ")
	}
	if sc.pairEvery > 0 {
		thr += fmt.Sprintf("; pair: %d more after the first (%.1f/min), others %.1f msgs/s", r.pairMax, r.pairPerMin, r.othersRate)
	}
	conf := fmt.Sprintf("%.3g/s burst %d", sc.rate, sc.burst)
	if sc.replicas > 1 {
		conf += fmt.Sprintf(", %d replicas", sc.replicas)
	}
	return fmt.Sprintf("| %s | %s | %s | %.2f | %.1f%% | %s | %s | %d | %d |",
		sc.name, conf, hidden, r.achieved, r.utilization()*100, thr, settle, r.lost, r.dups)
}

// checkPacingScenario asserts the targets for the scenario (full
// form). The short form, in `make test-e2e`, guards against regressions with
// bounds a loaded 2-core machine meets (another measuring test runs beside
// it), yet far above what halving the rate at a throttle gave (48% of the
// limit; at 0.5/s, a throttle for every other message): nothing lost or
// doubled; the limit met at >= 80% with <= 2% throttled; a hidden limit at
// >= 70%; below 1/s, at most 2 throttles and >= 70%.
func checkPacingScenario(t *testing.T, sc pacingScenario, r pacingResult, full bool) {
	if r.lost != 0 || r.dups != 0 {
		t.Errorf("lost %d, duplicates %d; want none", r.lost, r.dups)
	}
	if !full {
		switch {
		case sc.pairEvery > 0 || sc.acctLimit > 0:
		case sc.rate < 1:
			if thr := r.codes[130429]; thr > 2 || r.utilization() < 0.7 {
				t.Errorf("%d throttles, utilization %.1f%%; want <= 2, >= 70%%", thr, r.utilization()*100)
			}
		case len(sc.hidden) == 0:
			if r.utilization() < 0.8 || r.throttled > 0.02 {
				t.Errorf("utilization %.1f%%, throttled %.2f%%; want >= 80%%, <= 2%%", r.utilization()*100, r.throttled*100)
			}
		default:
			if r.utilization() < 0.7 {
				t.Errorf("utilization %.1f%% of the hidden limit, want >= 70%%", r.utilization()*100)
			}
		}
		return
	}
	switch {
	case sc.pairEvery > 0:
		// After a pair's first throttle, at most one more per minute; the
		// key's other recipients never slow down.
		if most := int(math.Ceil(r.pairSpan.Minutes())); r.pairMax > most {
			t.Errorf("pair throttled %d more times in %.1f min after its first, want <= %d (one a minute)",
				r.pairMax, r.pairSpan.Minutes(), most)
		}
		if r.othersRate < 0.9*sc.rate {
			t.Errorf("other recipients at %.1f msgs/s, want >= 90%% of %g", r.othersRate, sc.rate)
		}
	case sc.acctLimit > 0:
		// One account throttle cools every number: each budget spent costs
		// about one refusal (and the requests already on their way).
		budgets := (sc.numbers*sc.per + sc.acctLimit - 1) / sc.acctLimit
		if n := r.codes[80007]; n > 2*budgets*sc.replicas {
			t.Errorf("%d account throttles (80007) for %d budgets spent, want <= %d", n, budgets, 2*budgets*sc.replicas)
		}
	case sc.rate < 1:
		if thr := r.codes[130429]; thr > 1 {
			t.Errorf("%d throttles, want at most one", thr)
		}
		if r.utilization() < 0.95 {
			t.Errorf("utilization %.1f%%, want >= 95%%", r.utilization()*100)
		}
	case len(sc.hidden) == 0:
		if r.utilization() < 0.97 {
			t.Errorf("utilization %.1f%%, want >= 97%%", r.utilization()*100)
		}
		if r.throttled > 0.005 {
			t.Errorf("throttled %.2f%%, want <= 0.5%%", r.throttled*100)
		}
	default:
		for i, s := range r.settle {
			bound := 15.0 // from the start to a hidden limit
			if sc.hidden[0].at > 0 {
				bound = []float64{10, 30}[min(i, 1)] // down, then up
			}
			if s < 0 || s > bound {
				t.Errorf("settle %d: %.1f s, want <= %.0f s", i, s, bound)
			}
		}
		if r.afterSettle > 0.02 {
			t.Errorf("throttled after settling %.2f%%, want <= 2%%", r.afterSettle*100)
		}
		if r.utilization() < 0.9 {
			t.Errorf("utilization %.1f%% of the hidden limit, want >= 90%%", r.utilization()*100)
		}
	}
}

// runPacingScenario publishes the campaign round-robin over 6 partitions
// (so every replica sends for every number), runs the replicas until every
// message is delivered, applies the hidden-limit schedule from the fake's
// first request, and measures.
func runPacingScenario(t *testing.T, sc pacingScenario, tag string) pacingResult {
	accounts := map[string]string{}
	_, keys := campaign(sc.numbers, 0, tag)
	for _, k := range keys {
		accounts[k] = "waba-" + tag
	}
	e := newE2E(t, whatsapptest.Config{Rate: sc.rate, Burst: sc.burst, PairRate: sc.pairRate, PairBurst: sc.pairBurst,
		AccountLimit: sc.acctLimit, AccountWindow: sc.acctWin, Accounts: accounts})
	cl := newKafkaClient(t, e.brokers, kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 6, -1, nil, e.topic); err != nil {
		t.Fatal(err)
	}
	env := append([]string{fmt.Sprintf("PACER_WHATSAPP_RATE=%g", sc.rate), fmt.Sprintf("PACER_WHATSAPP_BURST=%d", sc.burst)}, sc.extraEnv...)
	if len(sc.hidden) > 0 && sc.hidden[0].at == 0 {
		e.fake.SetRate("", sc.hidden[0].rate)
	}
	var procs []*proc
	for range sc.replicas {
		procs = append(procs, e.run(env...))
	}

	// The campaign arrives at running replicas, as in production: the group
	// has settled first, so no rebalance as replicas join (a stop of every
	// partition for its duration) falls inside the measured run.
	waitGroupSettled(t, procs)
	var recs []*kgo.Record
	for i := range sc.per {
		for n, k := range keys {
			to := fmt.Sprintf("1555%07d", n*sc.per+i)
			if sc.pairEvery > 0 && i%sc.pairEvery == 0 {
				to = "15550000000"
			}
			recs = append(recs, &kgo.Record{Topic: e.topic, Value: fmt.Appendf(nil,
				`{"id":"%s-%d-%d","key":%q,"to":%q,"payload":{"type":"text","text":{"body":"m%d"}}}`, tag, n, i, k, to, i)})
		}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// The schedule runs from the first request the fake sees.
	var first time.Time
	for deadline := time.Now().Add(60 * time.Second); first.IsZero(); time.Sleep(5 * time.Millisecond) {
		if arr := e.fake.Arrivals(); len(arr) > 0 {
			first = arr[0].At
		}
		if time.Now().After(deadline) {
			t.Fatalf("no request within 60 s\n%s", procs[0].logs())
		}
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	defer func() { close(stop); wg.Wait() }()
	wg.Go(func() {
		for _, h := range sc.hidden {
			if h.at == 0 {
				continue
			}
			select {
			case <-time.After(time.Until(first.Add(h.at))):
				e.fake.SetRate("", h.rate)
			case <-stop:
				return
			}
		}
	})
	total := sc.numbers * sc.per
	ideal := float64(sc.per) / sc.rate
	if len(sc.hidden) > 0 || sc.acctLimit > 0 || sc.pairEvery > 0 {
		ideal *= 4
	}
	e.waitDelivered(total, time.Duration(ideal*float64(time.Second))+90*time.Second, procs...)
	for i, p := range procs {
		var parts []string
		for _, m := range []string{"pacer_late_slots_total", "pacer_parked_total", "pacer_duplicates_skipped_total", "pacer_bucket_calls_total"} {
			for _, sfx := range []string{"", `{channel="whatsapp"}`} {
				if v, ok := p.metric(t, m+sfx); ok {
					parts = append(parts, fmt.Sprintf("%s %g", m, v))
				}
			}
		}
		t.Logf("replica %d: %s", i, strings.Join(parts, ", "))
	}
	for i, p := range procs {
		p.stop(t)
		if dir := os.Getenv("PACER_BENCH_LOGS"); dir != "" { // the replicas' logs, to study a run
			name := fmt.Sprintf("%s/%s-%d.log", dir, strings.NewReplacer(" ", "_", "/", "_").Replace(sc.name), i)
			if err := os.WriteFile(name, []byte(p.logs()), 0o644); err != nil {
				t.Error(err)
			}
		}
	}
	if dir := os.Getenv("PACER_BENCH_LOGS"); dir != "" {
		var b strings.Builder
		for _, a := range e.fake.Arrivals() {
			fmt.Fprintf(&b, "%.3f %s %d\n", a.At.Sub(first).Seconds(), a.ID, a.Code)
		}
		name := fmt.Sprintf("%s/%s-arrivals.txt", dir, strings.NewReplacer(" ", "_", "/", "_").Replace(sc.name))
		if err := os.WriteFile(name, []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
	t.Logf("per second from the first request, accepted/throttled: %s", perSecond(e.fake.Arrivals(), first))
	return measurePacing(sc, keys, first, e.fake.Arrivals(), e.fake.Stats(), total)
}

// waitGroupSettled waits until every replica has partitions assigned and
// none has logged an assignment or a revocation for 2 s.
func waitGroupSettled(t *testing.T, procs []*proc) {
	t.Helper()
	count := func() (n int, all bool) {
		all = true
		for _, p := range procs {
			l := p.logs()
			a := strings.Count(l, `msg="partitions assigned"`)
			n += a + strings.Count(l, `msg="partitions revoked"`)
			all = all && a > 0
		}
		return n, all
	}
	last, since := -1, time.Now()
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		n, all := count()
		if n != last {
			last, since = n, time.Now()
		}
		if all && time.Since(since) >= 2*time.Second {
			return
		}
	}
	t.Fatalf("the consumer group did not settle within 90 s\n%s", procs[0].logs())
}

// measurePacing computes the bench's figures from the fake's arrivals.
func measurePacing(sc pacingScenario, keys []string, first time.Time, arr []whatsapptest.Arrival,
	stats map[string]whatsapptest.KeyStats, total int) pacingResult {
	r := pacingResult{codes: map[int]int{}}
	ids := map[string]bool{}
	var firstOK, lastOK time.Time
	for _, a := range arr {
		r.requests++
		if a.Code != 0 {
			r.codes[a.Code]++
		}
		if a.Throttled {
			continue
		}
		if a.Code == 0 {
			ids[a.ID] = true
			if firstOK.IsZero() {
				firstOK = a.At
			}
			lastOK = a.At
		}
	}
	thr := 0
	for _, a := range arr {
		if a.Throttled {
			thr++
		}
	}
	r.throttled = float64(thr) / float64(max(r.requests, 1))
	r.lost = total - len(ids)
	for _, k := range keys {
		r.dups += stats[k].Duplicates
	}
	// One more message than intervals: n messages span n-1 slots.
	span := lastOK.Sub(firstOK).Seconds()
	r.achieved = float64(len(ids)-sc.numbers) / float64(sc.numbers) / span
	r.hiddenAvg = hiddenAverage(sc, first, firstOK, lastOK)

	// Settling: after the start (a hidden limit from the start) or each
	// change, the first second from which every 5 s window until the next
	// change (or the end) sends at 90-110% of the hidden limit: accepted
	// >= 90% of it, requests (accepted and refused) <= 110%.
	if len(sc.hidden) > 0 {
		var marks []time.Time
		var rates []float64
		if sc.hidden[0].at > 0 {
			marks, rates = append(marks, first), append(rates, sc.rate)
		}
		for _, h := range sc.hidden {
			marks, rates = append(marks, first.Add(h.at)), append(rates, h.rate)
		}
		marks = append(marks, lastOK)
		var lastSettled time.Time
		for i := range rates {
			if sc.hidden[0].at > 0 && i == 0 {
				continue // the configured limit before the first change is scenario 1
			}
			s := settleAfter(arr, marks[i], marks[i+1], rates[i]*float64(sc.numbers))
			r.settle = append(r.settle, s)
			if s >= 0 {
				lastSettled = marks[i].Add(time.Duration(s * float64(time.Second)))
			}
		}
		n, th := 0, 0
		for _, a := range arr {
			if !lastSettled.IsZero() && !a.At.Before(lastSettled) {
				n++
				if a.Throttled {
					th++
				}
			}
		}
		r.afterSettle = float64(th) / float64(max(n, 1))
	}

	if sc.pairEvery > 0 {
		firstThr := time.Time{}
		after := 0
		others := 0
		var firstOther, lastOther time.Time
		for _, a := range arr {
			if a.Code == 131056 {
				if firstThr.IsZero() {
					firstThr = a.At
				} else {
					after++
				}
			}
			if a.Code == 0 && !a.Throttled && a.To != "15550000000" {
				others++
				if firstOther.IsZero() {
					firstOther = a.At
				}
				lastOther = a.At
			}
		}
		r.pairMax = after
		if !firstThr.IsZero() {
			r.pairSpan = lastOK.Sub(firstThr)
			r.pairPerMin = float64(after) / max(lastOK.Sub(firstThr).Minutes(), 1.0/60)
		}
		// The other recipients over their own span: the pair's last
		// messages, held to the pair's rate, trail the campaign.
		r.othersRate = float64(others-sc.numbers) / float64(sc.numbers) / lastOther.Sub(firstOther).Seconds()
		r.achieved = r.othersRate
	}
	return r
}

// settleAfter returns the seconds from `from` until every 5 s window up to
// `to` accepts >= 90% of limit (msgs/s, all numbers together) and sends
// (accepted and throttled) <= 110% of it; -1 if that never holds.
func settleAfter(arr []whatsapptest.Arrival, from, to time.Time, limit float64) float64 {
	const w = 5 * time.Second
	good := func(s time.Time) bool {
		ok, thr := 0, 0
		for _, a := range arr {
			if a.At.Before(s) || !a.At.Before(s.Add(w)) {
				continue
			}
			if a.Throttled {
				thr++
			} else if a.Code == 0 {
				ok++
			}
		}
		return float64(ok) >= 0.9*limit*w.Seconds() && float64(ok+thr) <= 1.1*limit*w.Seconds()
	}
	for s := from; !s.Add(w).After(to); s = s.Add(time.Second) {
		all := true
		for u := s; !u.Add(w).After(to); u = u.Add(time.Second) {
			if !good(u) {
				all = false
				break
			}
		}
		if all {
			return s.Sub(from).Seconds()
		}
	}
	return -1
}

// hiddenAverage returns the fake's per-number rate averaged over [a, b].
func hiddenAverage(sc pacingScenario, first, a, b time.Time) float64 {
	if !b.After(a) {
		return sc.rate
	}
	rateAt := func(t time.Time) float64 {
		r := sc.rate
		for _, h := range sc.hidden {
			if !t.Before(first.Add(h.at)) {
				r = h.rate
			}
		}
		return r
	}
	sum := 0.0
	const step = 10 * time.Millisecond
	n := 0
	for t := a; t.Before(b); t = t.Add(step) {
		sum += rateAt(t)
		n++
	}
	return sum / math.Max(float64(n), 1)
}

// perSecond returns "ok/throttled" per second from first, for the log.
func perSecond(arr []whatsapptest.Arrival, first time.Time) string {
	var ok, thr []int
	for _, a := range arr {
		i := int(a.At.Sub(first) / time.Second)
		for len(ok) <= i {
			ok, thr = append(ok, 0), append(thr, 0)
		}
		if a.Throttled {
			thr[i]++
		} else if a.Code == 0 {
			ok[i]++
		}
	}
	var b strings.Builder
	for i := range ok {
		fmt.Fprintf(&b, " %d/%d", ok[i], thr[i])
	}
	return b.String()
}

// TestPacingOnly guards the bench's subset selection: prefixes, trimmed,
// and an empty list selects all.
func TestPacingOnly(t *testing.T) {
	parallel(t)
	names := []string{}
	for _, sc := range pacingScenarios(false) {
		names = append(names, sc.name)
	}
	for _, c := range []struct {
		list string
		want []string
	}{
		{"", names},
		{" , ", names},
		{"3,7 hidden", []string{"3 hidden 80>40>80", "7 hidden 30 of 80 x3"}},
		{" 4", []string{"4a 0.5/s burst 1", "4b 1 per 6 s"}},
		{"7", []string{"7 at the limit x3", "7 hidden 30 of 80 x3"}},
		{"hidden", nil},
	} {
		only := pacingOnly(c.list)
		var got []string
		for _, n := range names {
			if only(n) {
				got = append(got, n)
			}
		}
		if strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("pacingOnly(%q) selects %q, want %q", c.list, got, c.want)
		}
	}
}
