//go:build e2e

package main

// Operating Pacer live through `pacer run` against real Kafka and Redis
// and the strict fake WhatsApp API: a per-key limit raised mid-campaign, a
// campaign paused, resumed and cancelled, a high-priority message behind a
// backlog, not_before. The Test*Short forms run in `make test-e2e`;
// TestLiveBench (PACER_BENCH_LIVE=1) prints the figures of BENCHMARKS.md.

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
	"github.com/twmb/franz-go/pkg/kadm"
)

// rateIn returns the accepted arrivals per second of key (and of ids with
// prefix idPrefix, "" for all) in [from, to).
func rateIn(as []whatsapptest.Arrival, key, idPrefix string, from, to time.Time) float64 {
	n := 0
	for _, a := range as {
		if !a.Throttled && a.Key == key && strings.HasPrefix(a.ID, idPrefix) && !a.At.Before(from) && a.At.Before(to) {
			n++
		}
	}
	return float64(n) / to.Sub(from).Seconds()
}

// countIn counts the accepted arrivals whose id starts with idPrefix, at
// or after from.
func countIn(as []whatsapptest.Arrival, idPrefix string, from time.Time) int {
	n := 0
	for _, a := range as {
		if !a.Throttled && strings.HasPrefix(a.ID, idPrefix) && !a.At.Before(from) {
			n++
		}
	}
	return n
}

// pauseAfterA is how many of campaign A's records a pause run waits to see
// sent (over both numbers) before it pauses A.
const pauseAfterA = 30

// startAndPublish starts replicas `pacer run` with env and publishes
// lines. One replica starts after the publish (the topic has 2
// partitions); more start first (the topic gets pacer run's 12 partitions)
// and the lines are published once every replica owns a partition of the
// topic, so no rebalance falls into the measurement.
func (e *e2e) startAndPublish(lines string, replicas int, env ...string) []*proc {
	e.t.Helper()
	publish := func() {
		if code, out, errs := e.publish(lines, "--partitions", "2"); code != 0 {
			e.t.Fatalf("publish: %d %s %s", code, out, errs)
		}
	}
	if replicas == 1 {
		publish()
		return []*proc{e.run(env...)}
	}
	var ps []*proc
	for range replicas {
		ps = append(ps, e.run(env...))
	}
	e.waitMembersOwn(replicas, e.topic, 90*time.Second, ps...)
	publish()
	return ps
}

// stopAll stops every process and returns their logs, joined.
func stopAll(t *testing.T, ps []*proc) string {
	var logs strings.Builder
	for _, p := range ps {
		logs.WriteString(p.logs())
		p.stop(t)
	}
	return logs.String()
}

// limitRaise is one run of a number at 50/s raised to 200/s mid-campaign.
type limitRaise struct {
	before, after float64       // msgs/s
	holds         time.Duration // from the change until a 1 s window reaches 90% of 200/s
	done          time.Duration // from the change to the last delivery
	ideal         time.Duration // the same at exactly 200/s from the change
	throttled     int
	atChange      int // throttles within 3 s of the change
}

func runLimitRaise(t *testing.T, per int, changeAfter time.Duration, replicas int) limitRaise {
	e := newE2E(t, whatsapptest.Config{Rate: 200, Burst: 2, Latency: 5 * time.Millisecond})
	key := "10654800001"
	var b strings.Builder
	lines(&b, "lr", key, per)
	// This run measures the limit change, not AIMD: at 200/s a loaded
	// machine's scheduling jitter bunches a few sends and the strict fake
	// throttles them; the default AIMD would halve the rate for a minute.
	// Throttles cost 1% here (as in the queue benchmark), and are counted.
	ps := e.startAndPublish(b.String(), replicas, "PACER_WHATSAPP_RATE=50", "PACER_WHATSAPP_BURST=1", "PACER_AIMD_DECREASE=0.99", "PACER_THROTTLE_COOLDOWN=10ms")
	e.waitProgress(0, 60*time.Second, ps...)
	time.Sleep(changeAfter)
	out := e.cli("limit", "set", "--channel", "whatsapp", "--key", key, "--rate", "200", "--burst", "1")
	changed := time.Now()
	if !strings.Contains(out, "200 msgs/s") {
		t.Errorf("limit set printed %q", out)
	}
	if got := e.cli("limit", "get", "--channel", "whatsapp", "--key", key); !strings.Contains(got, "200") {
		t.Errorf("limit get after set: %q", got)
	}
	e.waitDelivered(per, 120*time.Second, ps...)
	logs := stopAll(t, ps)
	if os.Getenv("PACER_BENCH_DEBUG") != "" {
		t.Log(logs)
	}
	if ch := grepLines(logs, "key limit changed"); !strings.Contains(ch, "old_rate=50") || !strings.Contains(ch, " rate=200") {
		t.Errorf("the pacer did not log the limit change with old and new values:\n%s", grepLines(logs, "limit", "policy"))
	}
	as := e.fake.Arrivals()
	s := e.fake.Stats()[key]
	r := limitRaise{throttled: s.Throttled, holds: -1}
	r.before = rateIn(as, key, "", changed.Add(-changeAfter+time.Second), changed)
	for at := changed; at.Before(s.Last.Add(-time.Second)); at = at.Add(50 * time.Millisecond) {
		if rateIn(as, key, "", at, at.Add(time.Second)) >= 180 {
			r.holds = at.Sub(changed)
			break
		}
	}
	if r.holds >= 0 {
		r.after = rateIn(as, key, "", changed.Add(r.holds), s.Last)
	}
	r.done = s.Last.Sub(changed)
	for _, a := range as {
		if a.Throttled && !a.At.Before(changed) && a.At.Before(changed.Add(3*time.Second)) {
			r.atChange++
		}
	}
	left := 0
	for _, a := range as {
		if !a.Throttled && a.Key == key && !a.At.Before(changed) {
			left++
		}
	}
	r.ideal = time.Duration(float64(left) / 200 * float64(time.Second))
	var rows []string
	for at := changed.Add(-3 * time.Second); at.Before(s.Last); at = at.Add(time.Second) {
		rows = append(rows, fmt.Sprintf("%+.0fs %.0f", at.Sub(changed).Seconds(), rateIn(as, key, "", at, at.Add(time.Second))))
	}
	t.Logf("arrivals/s from the change: %s", strings.Join(rows, ", "))
	for i, a := range as {
		if a.Throttled {
			var gaps []string
			for j := max(i-3, 0); j < i; j++ {
				gaps = append(gaps, a.At.Sub(as[j].At).Round(100*time.Microsecond).String())
			}
			t.Logf("throttled at %+v after the change; since the 3 before: %v", a.At.Sub(changed).Round(time.Millisecond), gaps)
		}
	}
	t.Logf("%d replica(s), %d messages of a number at 50/s raised to 200/s after %v: before %.1f msgs/s, after %.1f msgs/s, new rate holds %v after the change; last delivery %v after it (ideal %v); throttled %d (%d within 3 s of the change), duplicates %d",
		replicas, per, changeAfter, r.before, r.after, r.holds.Round(10*time.Millisecond), r.done.Round(10*time.Millisecond), r.ideal.Round(10*time.Millisecond), r.throttled, r.atChange, s.Duplicates)
	if s.Delivered != per || s.Duplicates != 0 {
		t.Errorf("delivered %d (duplicates %d), want %d once", s.Delivered, s.Duplicates, per)
	}
	return r
}

// TestLiveLimitRaiseShort: a number at 50/s raised to 200/s with pacer
// limit set: before about 50/s, then 200/s within a few seconds. 2,500
// messages: most are parked beyond the key's lookahead with due times
// estimated at 50/s (those past 30 s on retry tier 2, due 30 s after the
// start); the raise takes them early, so the last is delivered about when
// 200/s from the change would deliver it, not 30 s after the start.
func TestLiveLimitRaiseShort(t *testing.T) {
	measuredAlone(t) // 200/s against a burst of 2: starved senders meet the fake's bucket
	r := runLimitRaise(t, 2500, 3*time.Second, 1)
	if r.before < 40 || r.before > 55 {
		t.Errorf("rate before the change %.1f msgs/s, want about 50", r.before)
	}
	// The policy refresh is 1 s; 4.45 s was seen under a load of 10. Without
	// the raise reaching parked records nothing was sent for 18 s.
	if r.holds < 0 || r.holds > 8*time.Second {
		t.Errorf("200/s held %v after the change, want within 8 s (the policy refresh is 1 s)", r.holds)
	}
	if r.after < 170 {
		t.Errorf("rate after the change %.1f msgs/s, want about 200", r.after)
	}
	// The slots this process took ahead at 50/s (up to a second of them),
	// and the parked copies the raise starts early, meet the first slots
	// at 200/s against the fake's burst of 2: lone throttles, which cost
	// no rate (20 of 2,500 seen). Over 2% would mean the rates keep
	// overlapping.
	if r.atChange > 50 {
		t.Errorf("%d throttles within 3 s of the change: it overlapped slots of the two rates", r.atChange)
	}
	// Ideal about 12 s; the parked records on their old schedule took 27 s.
	if r.done > r.ideal+8*time.Second {
		t.Errorf("last delivery %v after the change, ideal %v: parked records came back on the schedule of the old rate", r.done, r.ideal)
	}
}

// campaignLines returns per envelopes of campaign camp for each key, ids
// camp-key-i, interleaved over keys.
func campaignLines(b *strings.Builder, camp string, keys []string, per int, extra string) {
	for i := range per {
		for _, k := range keys {
			fmt.Fprintf(b, `{"id":"%s-%s-%d","key":%q,"to":"1555%07d","campaign":%q%s,"payload":{"type":"text","text":{"body":"m"}}}`+"\n",
				camp, k, i, k, i, camp, extra)
		}
	}
}

// pauseRun is one run of the pause measurement.
type pauseRun struct {
	aBefore, aPaused, aAfter float64 // campaign A msgs/s per number
	bBefore, bPaused         float64 // campaign B msgs/s per number
	resumeFirst              time.Duration
	lost, dups               int
	paused, resumed          time.Time // when the pause and the resume were asked
	keys                     []string
	arrivals                 []whatsapptest.Arrival
}

// runPause: campaigns A and B interleaved on two numbers at rate/s each;
// A is paused pauseAt after the first send, or later once pauseAfterA of
// its records were sent, for pauseFor, then resumed.
func runPause(t *testing.T, rate float64, per int, pauseAt, pauseFor time.Duration, replicas int, env ...string) pauseRun {
	e := newE2E(t, whatsapptest.Config{Rate: rate, Burst: 2, Latency: 5 * time.Millisecond})
	keys := []string{"10654810001", "10654810002"}
	var b strings.Builder
	campaignLines(&b, "A", keys, per, "")
	campaignLines(&b, "B", keys, per, "")
	// Interleave A and B line by line, so both share each number's queue.
	la, lb := strings.SplitAfter(b.String(), "\n"), []string{}
	half := len(la) / 2
	for i := range half {
		lb = append(lb, la[i], la[half+i])
	}
	rs := strconv.FormatFloat(rate, 'f', -1, 64)
	ps := e.startAndPublish(strings.Join(lb, ""), replicas, append([]string{"PACER_WHATSAPP_RATE=" + rs, "PACER_WHATSAPP_BURST=1"}, env...)...)
	e.waitProgress(0, 60*time.Second, ps...)
	t0 := time.Now()
	time.Sleep(pauseAt)
	// Which of a number's records go first depends on what was parked
	// ahead: on a loaded machine A can start seconds after B. The pause
	// waits until A flows, so it has something to stop.
	if !waitFor(60*time.Second, func() bool { return countIn(e.fake.Arrivals(), "A-", t0) >= pauseAfterA }) {
		t.Fatalf("campaign A had fewer than %d sends within 60 s of the first send: the run measures nothing\n%s", pauseAfterA, ps[0].logs())
	}
	e.cli("campaign", "pause", "--channel", "whatsapp", "--campaign", "A")
	paused := time.Now()
	time.Sleep(pauseFor)
	e.cli("campaign", "resume", "--channel", "whatsapp", "--campaign", "A")
	resumed := time.Now()
	e.waitDelivered(4*per, 180*time.Second, ps...)
	stopAll(t, ps)
	as := e.fake.Arrivals()
	r := pauseRun{paused: paused, resumed: resumed, keys: keys, arrivals: as}
	for _, k := range keys {
		r.aBefore += rateIn(as, k, "A-", t0, paused) / 2
		r.bBefore += rateIn(as, k, "B-", t0, paused) / 2
		// The pause reaches the pacers within about 1 s: the window starts then.
		r.aPaused += rateIn(as, k, "A-", paused.Add(1500*time.Millisecond), resumed) / 2
		r.bPaused += rateIn(as, k, "B-", paused.Add(1500*time.Millisecond), resumed) / 2
	}
	r.resumeFirst = -1
	for _, a := range as {
		if !a.Throttled && strings.HasPrefix(a.ID, "A-") && a.At.After(resumed) {
			r.resumeFirst = a.At.Sub(resumed)
			break
		}
	}
	ids := e.deliveredIDs()
	r.lost = 4*per - len(ids)
	_, r.dups = e.delivered()
	// Arrivals per second of each campaign, summed over the numbers.
	var rows []string
	for s := t0.Truncate(time.Second); s.Before(resumed.Add(6 * time.Second)); s = s.Add(time.Second) {
		ra, rb := 0.0, 0.0
		for _, k := range keys {
			ra += rateIn(as, k, "A-", s, s.Add(time.Second))
			rb += rateIn(as, k, "B-", s, s.Add(time.Second))
		}
		rows = append(rows, fmt.Sprintf("%+.0fs A %.0f B %.0f", s.Sub(t0).Seconds(), ra, rb))
	}
	t.Logf("arrivals/s over both numbers, from the first send; pause at %+.0fs, resume at %+.0fs:\n  %s",
		paused.Sub(t0).Seconds(), resumed.Sub(t0).Seconds(), strings.Join(rows, "\n  "))
	t.Logf("%d replica(s), per number at %.0f/s: A before %.1f, while paused %.2f, B before %.1f, while A paused %.1f msgs/s; first A send %v after resume; lost %d, duplicates %d",
		replicas, rate, r.aBefore, r.aPaused, r.bBefore, r.bPaused, r.resumeFirst.Round(10*time.Millisecond), r.lost, r.dups)
	if r.lost != 0 || r.dups != 0 {
		t.Errorf("lost %d, duplicates %d: want 0", r.lost, r.dups)
	}
	return r
}

// TestLivePauseShort: while A is paused none of its records is sent, B
// keeps flowing, and after resume every record is delivered once.
func TestLivePauseShort(t *testing.T) {
	measuredAlone(t) // B's rate before the pause is the baseline its rate while A is paused is judged by
	r := runPause(t, 20, 150, 3*time.Second, 6*time.Second, 1)
	if r.aPaused != 0 {
		t.Errorf("campaign A sent %.2f msgs/s per number while paused, want 0", r.aPaused)
	}
	if r.bPaused < 0.8*r.bBefore {
		t.Errorf("campaign B fell from %.1f to %.1f msgs/s per number while A was paused: head-of-line blocking", r.bBefore, r.bPaused)
	}
	if r.resumeFirst < 0 || r.resumeFirst > 8*time.Second {
		t.Errorf("first A send %v after resume, want within 8 s", r.resumeFirst)
	}
}

// TestLivePauseLanes: a backlog deep enough that, when A is paused, B's
// records come from the park lanes, their slots estimated with A's records
// interleaved (every other slot). A copy comes back a lookahead (2 s here)
// before its slot, so B runs at the number's whole rate for about that
// long on the copies already back; from 4 s into the pause on, it keeps
// that rate only if its copies are taken before their estimated slots
// because the key has room, not at the estimate's pace (half the rate).
func TestLivePauseLanes(t *testing.T) {
	parallel(t)
	const rate = 40
	r := runPause(t, rate, 600, 5*time.Second, 10*time.Second, 1, "PACER_LOOKAHEAD=2s")
	var b float64
	for _, k := range r.keys {
		b += rateIn(r.arrivals, k, "B-", r.paused.Add(4*time.Second), r.resumed) / float64(len(r.keys))
	}
	t.Logf("B while A paused, from 4 s into the pause: %.1f msgs/s per number (rate %d)", b, rate)
	if r.aPaused != 0 {
		t.Errorf("campaign A sent %.2f msgs/s per number while paused, want 0", r.aPaused)
	}
	if b < 0.8*rate {
		t.Errorf("campaign B at %.1f msgs/s per number while A was paused, want >= %.0f: its parked copies came back at the estimate's pace", b, 0.8*rate)
	}
}

// TestLiveCancel: a campaign cancelled mid-way: cancelled in the DLQ plus
// delivered equals published, campaign status agrees, and a replay of the
// cancelled ones delivers them (a replayed record is not cancelled again).
func TestLiveCancel(t *testing.T) {
	parallel(t)
	runCancel(t, 150, 1)
}

// runCancel publishes per messages of campaign C on each of two numbers
// at 20/s, cancels C after 40 deliveries, checks and logs the counts, then
// replays the cancelled ones.
func runCancel(t *testing.T, per, replicas int) {
	e := newE2E(t, whatsapptest.Config{Rate: 20, Burst: 2, Latency: 5 * time.Millisecond})
	keys := []string{"10654820001", "10654820002"}
	var b strings.Builder
	campaignLines(&b, "C", keys, per, "")
	ps := e.startAndPublish(b.String(), replicas, "PACER_WHATSAPP_RATE=20", "PACER_WHATSAPP_BURST=1")
	p := ps[0]
	e.waitProgress(40, 60*time.Second, ps...)
	e.cli("campaign", "cancel", "--channel", "whatsapp", "--campaign", "C")
	total := 2 * per
	var st struct {
		Published   int64            `json:"published"`
		Delivered   int64            `json:"delivered"`
		DeadLetters map[string]int64 `json:"dead_letters"`
		Remaining   int64            `json:"remaining"`
	}
	if !waitFor(60*time.Second, func() bool {
		if err := json.Unmarshal([]byte(e.cli("campaign", "status", "--channel", "whatsapp", "--campaign", "C", "--json")), &st); err != nil {
			t.Fatal(err)
		}
		return st.Remaining == 0
	}) {
		t.Fatalf("campaign status never reached remaining 0: %+v\n%s", st, p.logs())
	}
	delivered, dups := e.delivered()
	reasons := e.dlqReasons(total - delivered)
	cancelled := 0
	for _, r := range reasons {
		if r == "cancelled" {
			cancelled++
		}
	}
	t.Logf("%d replica(s): published %d, delivered %d, DLQ cancelled %d (status: published %d, delivered %d, dead-lettered %v)",
		replicas, total, delivered, cancelled, st.Published, st.Delivered, st.DeadLetters)
	if cancelled+delivered != total || cancelled == 0 || dups != 0 {
		t.Errorf("cancelled %d + delivered %d != published %d (duplicates %d)", cancelled, delivered, total, dups)
	}
	if st.Published != int64(total) || st.Delivered != int64(delivered) || st.DeadLetters["cancelled"] != int64(cancelled) {
		t.Errorf("campaign status %+v disagrees with the fake (%d delivered) and the DLQ (%d cancelled)", st, delivered, cancelled)
	}
	// Replayed, the cancelled records are sent although the campaign stays
	// cancelled.
	e.cli("dlq", "replay", "--channel", "whatsapp", "--topic", e.topic, "--reason", "cancelled")
	e.waitDelivered(total, 60*time.Second, ps...)
	stopAll(t, ps)
	if d, dups := e.delivered(); d != total || dups != 0 {
		t.Errorf("after the replay: delivered %d (duplicates %d), want %d once", d, dups, total)
	}
}

// TestLiveRepublishCounted: a campaign file published again while `pacer
// run` is up, after its first publish was delivered: the provider gets
// nothing twice, and campaign status counts the second publish's records
// as duplicates, so remaining reaches 0 (it read published 80, delivered
// 40, remaining 40 for good).
func TestLiveRepublishCounted(t *testing.T) {
	parallel(t)
	runRepublish(t, republishLive)
}

// TestLiveRepublishWhileStopped: the same, published again while no
// `pacer run` is up (stopped cleanly after the first publish was
// delivered): the next run reads the second publish past the partitions'
// horizons, not as records read again, and counts it as duplicates.
func TestLiveRepublishWhileStopped(t *testing.T) {
	parallel(t)
	runRepublish(t, republishStopped)
}

// TestLiveRepublishAfterCrash: the same after a crash. The first run is
// killed once everything is delivered and committed (it leaves no stop
// horizon), a second takes over, finds nothing to read and stops cleanly,
// and the campaign is published again: the third run counts it as
// duplicates (it read as records read again, remaining 40 for good).
func TestLiveRepublishAfterCrash(t *testing.T) {
	parallel(t)
	runRepublish(t, republishAfterCrash)
}

// How runRepublish publishes the campaign again.
const (
	republishLive       = iota // pacer run up
	republishStopped           // pacer run stopped cleanly in between
	republishAfterCrash        // killed, another run up and stopped cleanly, then published
)

// runRepublish publishes 40 messages of campaign R on two numbers, waits
// until they are delivered, publishes them again (how: republish*), and
// checks the provider and campaign status.
func runRepublish(t *testing.T, how int) {
	e := newE2E(t, whatsapptest.Config{Rate: 20, Burst: 1, Latency: 5 * time.Millisecond})
	keys := []string{"10654860001", "10654860002"}
	var b strings.Builder
	campaignLines(&b, "R", keys, 20, "")
	total := 2 * 20
	env := []string{"PACER_WHATSAPP_RATE=20", "PACER_WHATSAPP_BURST=1"}
	ps := e.startAndPublish(b.String(), 1, env...)
	e.waitDelivered(total, 60*time.Second, ps...)
	switch how {
	case republishStopped:
		ps[0].stop(t)
	case republishAfterCrash:
		adm := kadm.NewClient(newKafkaClient(t, e.brokers))
		if !waitFor(60*time.Second, func() bool {
			lags, err := adm.Lag(t.Context(), "pacer-"+e.prefix)
			// Every topic of the group (main and retry): the second run
			// is to find nothing at all to read.
			_, ok := lags["pacer-"+e.prefix].Lag.TotalByTopic()[e.topic]
			return err == nil && ok && lags["pacer-"+e.prefix].Lag.Total() == 0
		}) {
			t.Fatalf("the first run never committed every record\n%s", ps[0].logs())
		}
		ps[0].kill()
		second := e.run(env...)
		// The group keeps the killed member until its session times out.
		if !waitFor(90*time.Second, func() bool {
			return strings.Contains(second.logs(), "partitions assigned") && strings.Contains(second.logs(), e.topic+":[")
		}) {
			t.Fatalf("the second run was never assigned the partitions of %s\n%s", e.topic, second.logs())
		}
		second.stop(t)
		if n := strings.Count(second.logs(), "records read again"); n != 0 {
			t.Fatalf("the second run read records again; it was to find nothing\n%s", second.logs())
		}
	}
	if code, out, errs := e.publish(b.String(), "--partitions", "2"); code != 0 {
		t.Fatalf("publish again: %d %s %s", code, out, errs)
	}
	if how != republishLive {
		ps = []*proc{e.run(env...)}
	}
	var st struct {
		Published   int64            `json:"published"`
		Delivered   int64            `json:"delivered"`
		DeadLetters map[string]int64 `json:"dead_letters"`
		Duplicates  int64            `json:"duplicates"`
		Remaining   *int64           `json:"remaining"`
	}
	if !waitFor(60*time.Second, func() bool {
		if err := json.Unmarshal([]byte(e.cli("campaign", "status", "--channel", "whatsapp", "--campaign", "R", "--json")), &st); err != nil {
			t.Fatal(err)
		}
		return st.Duplicates >= int64(total)
	}) {
		t.Fatalf("campaign status never counted the %d records published again: published %d, delivered %d, duplicates %d\n%s",
			total, st.Published, st.Delivered, st.Duplicates, ps[0].logs())
	}
	time.Sleep(1500 * time.Millisecond) // a count of more would land within a flush or two
	if err := json.Unmarshal([]byte(e.cli("campaign", "status", "--channel", "whatsapp", "--campaign", "R", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	text := e.cli("campaign", "status", "--channel", "whatsapp", "--campaign", "R")
	stopAll(t, ps)
	if d, dups := e.delivered(); d != total || dups != 0 {
		t.Errorf("the provider got %d (duplicates %d), want %d once", d, dups, total)
	}
	if st.Published != int64(2*total) || st.Delivered != int64(total) || len(st.DeadLetters) != 0 ||
		st.Duplicates != int64(total) || st.Remaining == nil || *st.Remaining != 0 {
		t.Errorf("campaign status %+v (remaining %v); want published %d, delivered %d, duplicates %d, remaining 0",
			st, st.Remaining, 2*total, total, total)
	}
	if !strings.Contains(text, fmt.Sprintf("  duplicates    %d\n", total)) || !strings.Contains(text, "  remaining     0\n") {
		t.Errorf("campaign status text lacks duplicates %d and remaining 0:\n%s", total, text)
	}
}

// runPriority publishes backlog normal messages of one number at rate/s,
// then one high one, and returns the high one's latency from the end of its
// publish to its arrival at the fake, and the handoffs counted.
func runPriority(t *testing.T, backlog int, rate float64, replicas int) (time.Duration, float64) {
	e := newE2E(t, whatsapptest.Config{Rate: rate, Burst: 2, Latency: 5 * time.Millisecond})
	key := "10654830001"
	rs := strconv.FormatFloat(rate, 'f', -1, 64)
	var ps []*proc
	for range replicas {
		ps = append(ps, e.run("PACER_WHATSAPP_RATE="+rs, "PACER_WHATSAPP_BURST=1"))
	}
	if replicas > 1 {
		e.waitMembersOwn(replicas, e.topic, 90*time.Second, ps...)
	}
	var b strings.Builder
	lines(&b, "n", key, backlog)
	if code, out, errs := e.publish(b.String(), "--partitions", "2"); code != 0 {
		t.Fatalf("publish: %d %s %s", code, out, errs)
	}
	e.waitProgress(int(rate), 60*time.Second, ps...) // the number is sending at its rate
	high := fmt.Sprintf(`{"id":"high-1","key":%q,"to":"15559999999","priority":"high","payload":{"type":"text","text":{"body":"otp"}}}`+"\n", key)
	if code, out, errs := e.publish(high, "--partitions", "2"); code != 0 {
		t.Fatalf("publish: %d %s %s", code, out, errs)
	}
	published := time.Now()
	var at time.Time
	if !waitFor(60*time.Second, func() bool {
		for _, a := range e.fake.Arrivals() {
			if a.ID == "high-1" && !a.Throttled {
				at = a.At
				return true
			}
		}
		return false
	}) {
		t.Fatalf("the high message never arrived\n%s", ps[0].logs())
	}
	time.Sleep(2 * time.Second) // the rate after it, for Max1s
	handoffs := 0.0
	for _, p := range ps {
		handoffs += p.metricSum(t, "pacer_priority_handoffs_total")
	}
	stopAll(t, ps)
	s := e.fake.Stats()[key]
	lat := at.Sub(published)
	t.Logf("%d replica(s): high message behind %d normal ones at %.0f/s: sent %v after its publish; %d normal delivered by then; handoffs %.0f; max in 1 s %d, throttled %d",
		replicas, backlog, rate, lat.Round(time.Millisecond), s.Delivered-1, handoffs, s.Max1s, s.Throttled)
	if s.Max1s > int(rate)+2 {
		t.Errorf("%d arrivals in one 1 s window: priority changed the rate (limit %.0f + burst 2)", s.Max1s, rate)
	}
	return lat, handoffs
}

// TestLivePriorityShort: a high message behind 20,000 normal ones of one
// number is sent within 2 s (it takes tens of ms: the bound leaves room for
// a loaded machine), by taking a normal one's slot; in the key's normal
// FIFO it would wait for the key's lookahead (5 s of its rate).
func TestLivePriorityShort(t *testing.T) {
	measured(t)
	lat, handoffs := runPriority(t, 20_000, 50, 1)
	if lat > 2*time.Second {
		t.Errorf("high message sent %v after its publish, want within 2 s", lat)
	}
	if handoffs < 1 {
		t.Errorf("pacer_priority_handoffs_total = %.0f: the high message did not take a normal one's slot", handoffs)
	}
}

// TestLiveNotBeforeShort: records with not_before 4 s ahead are not sent
// before it, and the number's other records are not held behind them.
func TestLiveNotBeforeShort(t *testing.T) {
	measured(t)
	e := newE2E(t, whatsapptest.Config{Rate: 50, Burst: 2, Latency: 5 * time.Millisecond})
	key := "10654840001"
	nb := time.Now().Add(8 * time.Second).UTC().Truncate(time.Millisecond)
	var b strings.Builder
	for i := range 20 {
		fmt.Fprintf(&b, `{"id":"later-%d","key":%q,"to":"1555%07d","not_before":%q}`+"\n", i, key, i, nb.Format(time.RFC3339Nano))
		fmt.Fprintf(&b, `{"id":"now-%d","key":%q,"to":"1556%07d"}`+"\n", i, key, i)
	}
	if code, out, errs := e.publish(b.String(), "--partitions", "2"); code != 0 {
		t.Fatalf("publish: %d %s %s", code, out, errs)
	}
	p := e.run("PACER_WHATSAPP_RATE=50", "PACER_WHATSAPP_BURST=1")
	e.waitDelivered(40, 90*time.Second, p)
	p.stop(t)
	var lastNow, firstLater time.Time
	for _, a := range e.fake.Arrivals() {
		switch {
		case a.Throttled:
		case strings.HasPrefix(a.ID, "now-"):
			lastNow = a.At
		case strings.HasPrefix(a.ID, "later-") && firstLater.IsZero():
			firstLater = a.At
		}
	}
	t.Logf("not_before %v: last due record sent %v before it, first scheduled one %v after it",
		nb.Format(time.RFC3339Nano), nb.Sub(lastNow).Round(time.Millisecond), firstLater.Sub(nb).Round(time.Millisecond))
	if firstLater.Before(nb) {
		t.Errorf("a not_before record was sent at %v, before %v", firstLater, nb)
	}
	if !lastNow.Before(nb) {
		t.Errorf("the due records finished at %v, not before the scheduled ones' %v: they were held behind them", lastNow, nb)
	}
}

// TestLiveBench prints the figures of BENCHMARKS.md ("Operating live"):
// every measurement through 2 replicas of pacer run (PACER_BENCH_REPLICAS
// to change it). `make bench-live` runs it.
func TestLiveBench(t *testing.T) {
	if os.Getenv("PACER_BENCH_LIVE") == "" {
		t.Skip("measurement: run with PACER_BENCH_LIVE=1 (make bench-live)")
	}
	n := envSetting(t, "PACER_BENCH_REPLICAS", 2, strconv.Atoi)
	t.Logf("load before: %s", loadavg())
	t.Run("LimitRaise", func(t *testing.T) { runLimitRaise(t, 3000, 5*time.Second, n) })
	t.Run("Pause", func(t *testing.T) { runPause(t, 20, 400, 5*time.Second, 10*time.Second, n) })
	t.Run("Cancel", func(t *testing.T) { runCancel(t, 300, n) })
	t.Run("Priority", func(t *testing.T) {
		var lats []time.Duration
		for range 10 {
			l, _ := runPriority(t, 20_000, 50, n)
			lats = append(lats, l)
		}
		slices.Sort(lats)
		t.Logf("%d replica(s): high message behind 20,000 normal ones at 50/s, 10 runs: p50 %v, max %v (all: %v)",
			n, lats[len(lats)/2].Round(time.Millisecond), lats[len(lats)-1].Round(time.Millisecond), lats)
	})
	t.Logf("load after: %s", loadavg())
}

// loadavg returns /proc/loadavg's 1, 5 and 15 minute load averages and the
// CPU count, for the record of a measurement.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return fmt.Sprintf("%s %s %s on %d CPUs", f[0], f[1], f[2], runtime.NumCPU())
}

// grepLines returns the lines of s containing any of words.
func grepLines(s string, words ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// TestLiveLimitLowerThenRaise: a number paced at the strict fake's own
// limit (50/s, burst 2: a small burst, so the fake absorbs no overlap) is
// lowered to 10/s with pacer limit set and raised back to 50/s with pacer
// limit unset 8 s later. At the raise the key's senders hold slots granted
// at 10/s (up to about 2 s of them), and others that read the key's limit
// before it are still waiting for theirs: the 50/s slots must start after
// the first, and the second must take slots at 50/s (README, per-key
// limits: "the two rates never overlap in this process"). The fake then
// throttles nothing it would not throttle without the changes: none, or
// one that a loaded machine's scheduling bunched. Slots of the two rates
// overlapping throttled 5 (7 with only the stale limits fixed, 20 with
// only the held slots waited for).
func TestLiveLimitLowerThenRaise(t *testing.T) {
	measuredAlone(t)
	e := newE2E(t, whatsapptest.Config{Rate: 50, Burst: 2, Latency: 5 * time.Millisecond})
	key := "910000000000000"
	const per = 700 // 2 s at 50/s, 8 s at 10/s, then about 10 s at 50/s
	var b strings.Builder
	lines(&b, "lu", key, per)
	ps := e.startAndPublish(b.String(), 1, "PACER_WHATSAPP_RATE=50", "PACER_WHATSAPP_BURST=2")
	e.waitProgress(0, 60*time.Second, ps...)
	time.Sleep(2 * time.Second)
	e.cli("limit", "set", "--channel", "whatsapp", "--key", key, "--rate", "10")
	time.Sleep(8 * time.Second)
	e.cli("limit", "unset", "--channel", "whatsapp", "--key", key)
	raised := time.Now()
	e.waitDelivered(per, 120*time.Second, ps...)
	logs := stopAll(t, ps)
	s := e.fake.Stats()[key]
	var at []string
	for _, a := range e.fake.Arrivals() {
		if a.Throttled {
			at = append(at, fmt.Sprintf("%+.2fs", a.At.Sub(raised).Seconds()))
		}
	}
	if s.Throttled > 1 {
		t.Errorf("the fake throttled %d sends (at %v from the unset): the slots of 10/s and 50/s overlapped\n%s",
			s.Throttled, at, grepLines(logs, "key limit changed", "throttled"))
	}
	if s.Delivered != per || s.Duplicates != 0 {
		t.Errorf("delivered %d (duplicates %d), want %d once", s.Delivered, s.Duplicates, per)
	}
}
