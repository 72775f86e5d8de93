//go:build e2e

package main

// TestE2EBench (PACER_BENCH_E2E=1, `make bench-e2e`) puts one `pacer run`
// process side by side with a minimal baseline (internal/bench/baseline: a
// franz-go consumer group that POSTs each record with one pooled HTTP
// client and commits after the send; bench tooling, not part of Pacer), on
// the real Kafka broker and redis-server, against the same unlimited fake
// WhatsApp Cloud API (over h2c; slow shapes with the fake's own answer
// time), and prints what BENCHMARKS.md records: msgs/s, each key's share of
// its rate, the most one key sent in 1 s, CPU seconds per 1,000 messages,
// new connections per 1,000 messages (Pacer: its
// pacer_provider_connections_opened_total, with
// pacer_provider_connections_open sampled each second; the baseline:
// counted at the fake), and, for Pacer, Redis round trips and commands per
// delivered message.
//
// Redis is counted in a database of its own (benchDB) through MONITOR, so
// other clients of a shared server do not count: a line "[db addr]" is a
// command a client sent, "[db lua]" one a script ran. Round trips are the
// process's own count (pacer_redis_round_trips_total: a pipeline is one).

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
	"github.com/pacerhq/pacer/internal/answertime"
	"github.com/pacerhq/pacer/internal/testenv"
)

// benchDB is the Redis database of the bench's Pacer (the tests use 9):
// 12, or PACER_BENCH_DB (the keys bench uses the next one).
var benchDB = func() int {
	if n, err := strconv.Atoi(os.Getenv("PACER_BENCH_DB")); err == nil && n > 0 {
		return n
	}
	return 12
}()

// benchShape is one workload: keys x per messages, paced at rate msgs/s
// per key (burst), against the fake provider with answer as its answer
// time (whatsapptest.Config.AnswerTime, in answertime.Parse's form:
// "250ms-350ms", "lognormal:300ms,p99=2s"; "" answers at once). Pacer
// speaks HTTP/2 to it (h2c: PACER_WHATSAPP_H2C=true), as it does to the
// Cloud API over TLS, and so does the baseline. Rate 0 keeps the channel's
// default limit (WhatsApp: 80/s per number, far above what one process
// delivers over 200 numbers, so the fake's pace is the limit). Pacer runs
// with its default in-flight bounds (by Little's law); inflight, when not
// 0, sets PACER_INFLIGHT (the upper bound per key).
type benchShape struct {
	name     string
	keys     int
	per      int
	rate     float64
	burst    int
	inflight int
	answer   string
	// longest is the answer time the baseline's concurrency is sized by
	// (Little's law): the uniform's top, the log-normal's p99.
	longest time.Duration
}

// The slow provider of issue #31's shapes: uniform over 250-350 ms (as
// the WhatsApp Cloud API answers), and log-normal with a tail.
const (
	slowUniform   = "250ms-350ms"
	slowLogNormal = "lognormal:300ms,p99=2s"
)

// benchResult is what one run measured.
type benchResult struct {
	delivered, duplicates int
	seconds               float64   // first to last arrival at the fake
	cpu                   float64   // CPU seconds of the process from first to last arrival
	conns                 int64     // TCP connections the fake accepted
	connsOpen             []float64 // pacer_provider_connections_open, sampled each second of the run (Pacer only)
	connsOpened           float64   // pacer_provider_connections_opened_total at the end (Pacer only)
	maxInFlight           int       // most requests the fake answered at once (sampled)
	keyShare              []float64 // each key's msgs/s from its first to its last arrival, over its rate, sorted
	max1s                 int       // most arrivals of one key in any 1 s window (fake's count)
	roundTrips            float64   // Redis round trips (Pacer only)
	commands              int64     // Redis commands, scripts' included (Pacer only)
	clientCmds            int64     // of which sent by a client
	byCmd                 map[string]int64
	load                  string
	machineCPU            float64 // CPU seconds of the whole machine (every process) over the same span
	perSecond             []int   // deliveries counted at the fake in each second from the first
	ramp                  []int   // deliveries in each 200 ms of the first 2 s from the first
	topCPU                string  // the processes that used the most CPU over the run
}

func TestE2EBench(t *testing.T) {
	if os.Getenv("PACER_BENCH_E2E") == "" {
		t.Skip("measurement: run with PACER_BENCH_E2E=1 (make bench-e2e)")
	}
	baseline := filepath.Join(t.TempDir(), "baseline")
	if out, err := exec.Command("go", "build", "-o", baseline, "../../internal/bench/baseline").CombinedOutput(); err != nil {
		t.Fatalf("building the baseline: %v\n%s", err, out)
	}
	shapes := []benchShape{
		// 1,000/s per number: a limit that does not bind (the unlimited
		// fake's pace is the limit; the channel's 80/s x 200 would cap
		// this shape at 16,000 msgs/s, below the baseline's figure).
		{"200 keys unlimited", 200, 500, 1000, 10, 0, "", 0},
		{"20 numbers at 80/s", 20, 1600, 80, 10, 0, "", 0},
		{"2 numbers at 1000/s", 2, 15000, 1000, 10, 0, "", 0},
		// The same against a provider that answers in 250-350 ms (as the
		// WhatsApp Cloud API does), and issue #31's shapes: one number on
		// the 1,000 msgs/s tier, and 50 numbers at 80/s.
		{"20 numbers at 80/s, 250-350 ms", 20, 1600, 80, 10, 0, slowUniform, 350 * time.Millisecond},
		{"2 numbers at 1000/s, 250-350 ms", 2, 15000, 1000, 10, 0, slowUniform, 350 * time.Millisecond},
		{"1 number at 1000/s, 250-350 ms", 1, 30000, 1000, 10, 0, slowUniform, 350 * time.Millisecond},
		{"50 numbers at 80/s, 250-350 ms", 50, 1600, 80, 10, 0, slowUniform, 350 * time.Millisecond},
		// Its instant twin, for Redis commands per message in one run
		// (PACER_BENCH_SHAPES=7,6).
		{"50 numbers at 80/s", 50, 1600, 80, 10, 0, "", 0},
		// One number at 1,000/s against a log-normal answer time (median
		// 300 ms, p99 2 s).
		{"1 number at 1000/s, log-normal 300 ms p99 2 s", 1, 30000, 1000, 10, 0, slowLogNormal, 2 * time.Second},
		// Overload (PACER_BENCH_SHAPES=9,10,11,12,13,14): 200 numbers whose
		// rates add up to a quarter of what one process carries on 2
		// cores, then half, about all, twice and three times that, and
		// twice the most it delivered
		// (PACER_BENCH_NO_BASELINE=1: Pacer alone). What it delivers at
		// twice its best load against its best, its slots lapsed, and
		// whether it said so (pacer_overloaded, the "overloaded" log).
		{"200 numbers at 20/s", 200, 600, 20, 10, 0, "", 0},
		{"200 numbers at 40/s", 200, 800, 40, 10, 0, "", 0},
		{"200 numbers at 80/s", 200, 1200, 80, 10, 0, "", 0},
		{"200 numbers at 160/s", 200, 1600, 160, 10, 0, "", 0},
		{"200 numbers at 240/s", 200, 1600, 240, 10, 0, "", 0},
		// Twice the most it delivered (about 11,000 msgs/s): 22,000 asked.
		{"200 numbers at 110/s", 200, 1600, 110, 10, 0, "", 0},
	}
	if v := os.Getenv("PACER_BENCH_SHAPES"); v != "" { // e.g. "0,2"
		var pick []benchShape
		for _, f := range strings.Split(v, ",") {
			i, _ := strconv.Atoi(f)
			pick = append(pick, shapes[i])
		}
		shapes = pick
	}
	var table strings.Builder
	table.WriteString("| shape | run | msgs/s | per key, % of its rate (min / median) | most in 1 s (one key; rate + burst) | CPU s per 1,000 msgs | connections open (median / most) | new conns per 1,000 msgs | Redis round trips per msg | Redis commands per msg | load (1/5/15 min) |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, sh := range shapes {
		t.Run(strings.ReplaceAll(sh.name, " ", "_"), func(t *testing.T) {
			p, b := benchShapeRun(t, baseline, sh)
			n := float64(p.delivered)
			limit := "-"
			if sh.rate > 0 {
				limit = fmt.Sprintf("%g", sh.rate+float64(sh.burst))
			}
			fmt.Fprintf(&table, "| %s | Pacer | %.0f | %s | %d (%s) | %.3f | %s | %.2f | %.3f | %.2f | %s |\n", sh.name,
				n/p.seconds, sharesOf(p.keyShare), p.max1s, limit, p.cpu/n*1000, openOf(p.connsOpen), p.connsOpened/n*1000,
				p.roundTrips/n, float64(p.commands)/n, p.load)
			nb := float64(b.delivered)
			fmt.Fprintf(&table, "| | baseline | %.0f | %s | %d (%s) | %.3f | - | %.2f | 0 | 0 | %s |\n",
				nb/b.seconds, sharesOf(b.keyShare), b.max1s, limit, b.cpu/nb*1000, float64(b.conns)/nb*1000, b.load)
			var cmds []string
			for c, k := range p.byCmd {
				cmds = append(cmds, fmt.Sprintf("%s %.3f", c, float64(k)/n))
			}
			sort.Strings(cmds)
			t.Logf("Pacer: delivered %d (duplicates %d) in %.2fs; CPU %.2fs; %d connections accepted at the fake (%.0f opened by its metric; open each second: %v); at most %d requests at once; Redis: %.0f round trips, %d commands (%d sent by a client; -1: not counted); per message: %s",
				p.delivered, p.duplicates, p.seconds, p.cpu, p.conns, p.connsOpened, p.connsOpen, p.maxInFlight, p.roundTrips, p.commands, p.clientCmds, strings.Join(cmds, ", "))
			t.Logf("baseline: delivered %d (duplicates %d) in %.2fs; CPU %.2fs; %d connections; at most %d requests at once",
				b.delivered, b.duplicates, b.seconds, b.cpu, b.conns, b.maxInFlight)
			for _, r := range []struct {
				name string
				r    benchResult
			}{{"Pacer", p}, {"baseline", b}} {
				t.Logf("%s: machine CPU %.2fs over the run (%.2f of %d cores busy; %.3f s per 1,000 msgs, the process %.3f); delivered per second: %v (per 200 ms of the first 2 s: %v); most CPU: %s",
					r.name, r.r.machineCPU, r.r.machineCPU/r.r.seconds, runtime.NumCPU(), r.r.machineCPU/float64(r.r.delivered)*1000,
					r.r.cpu/float64(r.r.delivered)*1000, r.r.perSecond, r.r.ramp, r.r.topCPU)
			}
		})
	}
	t.Logf("GOMAXPROCS %d, NumCPU %d\n%s", runtime.GOMAXPROCS(0), runtime.NumCPU(), table.String())
}

// benchShapeRun publishes sh's messages once and has Pacer, then the
// baseline (its own consumer group), deliver all of them.
func benchShapeRun(t *testing.T, baseline string, sh benchShape) (pacerRes, baseRes benchResult) {
	e := newE2E(t, whatsapptest.Config{})
	addr := testenv.RedisAddr(t)
	e.redis = fmt.Sprintf("redis://%s/%d", addr, benchDB)
	lines, _ := campaign(sh.keys, sh.per, "bx")
	if code, out, errs := e.publish(lines, "--partitions", "12"); code != 0 {
		t.Fatalf("publish: %d %s %s", code, out, errs)
	}
	n := sh.keys * sh.per
	rate := sh.rate
	if rate == 0 {
		rate = 80
	}
	within := time.Duration(float64(n)/float64(sh.keys)/rate*3+120) * time.Second

	fake := newSlowFake(t, e, sh.answer)
	mon := startMonitor(t, addr, benchDB)
	load0 := loadAvg()
	env := []string{"PACER_WHATSAPP_H2C=true"}
	if sh.inflight > 0 {
		env = append(env, fmt.Sprintf("PACER_INFLIGHT=%d", sh.inflight))
	}
	if sh.rate > 0 {
		env = append(env, fmt.Sprintf("PACER_WHATSAPP_RATE=%g", sh.rate), fmt.Sprintf("PACER_WHATSAPP_BURST=%d", sh.burst))
	}
	prof := os.Getenv("PACER_BENCH_CPUPROFILE")
	if prof != "" {
		env = append(env, "PACER_PPROF=true")
	}
	p := e.run(append(env, os.Getenv("PACER_BENCH_ENV_EXTRA"))...)
	var profDone chan struct{}
	if prof != "" { // a CPU profile of the process while it delivers
		profDone = make(chan struct{})
		go func() {
			defer close(profDone)
			benchCPUProfile(t, p, n, fake, prof)
		}()
	}
	var overloadedSeconds atomic.Int64 // seconds of the run pacer_overloaded read 1
	sampled := make(chan []float64)
	stopSampling := make(chan struct{})
	go func() { // the connections open, each second while it delivers
		var open []float64
		defer func() { sampled <- open }()
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(time.Second):
			}
			if v, ok := p.metric(t, `pacer_provider_connections_open{channel="whatsapp"}`); ok {
				open = append(open, v)
			}
			if v, ok := p.metric(t, `pacer_overloaded{channel="whatsapp"}`); ok && v > 0 {
				overloadedSeconds.Add(1)
			}
		}
	}()
	pacerRes = fake.measure(t, p.cmd.Process.Pid, n, within, p.logs)
	close(stopSampling)
	pacerRes.connsOpen = <-sampled
	pacerRes.connsOpened, _ = p.metric(t, `pacer_provider_connections_opened_total{channel="whatsapp"}`)
	pacerRes.keyShare = fake.keyShares(rate)
	if rss, ok := p.metric(t, "process_resident_memory_bytes"); ok {
		t.Logf("Pacer: RSS %.1f MB after the run", rss/1e6)
	}
	if profDone != nil {
		<-profDone
	}
	rt, ok := p.metric(t, `pacer_redis_round_trips_total{channel="whatsapp"}`)
	if !ok {
		rt = -1
	}
	late, _ := p.metric(t, `pacer_late_slots_total{channel="whatsapp"}`)
	calls, _ := p.metric(t, `pacer_bucket_calls_total{channel="whatsapp"}`)
	parked, ok := p.metric(t, `pacer_parked_total{channel="whatsapp"}`)
	if !ok {
		parked, _ = p.metric(t, `pacer_parked_total`)
	}
	slots, _ := p.metric(t, `pacer_slot_lateness_seconds_count{channel="whatsapp"}`)
	t.Logf("Pacer: %.0f slots given up as late (%.2f%% of %.0f), %.0f bucket calls, %.0f records parked, %d rebalances (partitions revoked); pacer_overloaded 1 in %d of the run's seconds, %d \"overloaded\" log lines",
		late, late/max(slots, 1)*100, slots, calls, parked, strings.Count(p.logs(), `msg="partitions revoked"`),
		overloadedSeconds.Load(), strings.Count(p.logs(), "overloaded:"))
	{ // where the records that went back to Kafka went, by reason
		_, body := httpGet(t, "http://"+p.metricsAddr(t)+"/metrics")
		var back []string
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "pacer_requeued_total{") || strings.HasPrefix(line, "pacer_retries_total{") || strings.HasPrefix(line, "pacer_parked_total") {
				back = append(back, line)
			}
		}
		t.Logf("Pacer: back to Kafka: %s", strings.Join(back, "; "))
	}
	if count, ok := p.metric(t, `pacer_slot_lateness_seconds_count{channel="whatsapp"}`); ok && count > 0 {
		var dist []string
		for _, le := range []string{"0.0004", "0.0008", "0.0016", "0.0032", "0.0064", "0.0128", "0.0256"} {
			v, _ := p.metric(t, `pacer_slot_lateness_seconds_bucket{channel="whatsapp",le="`+le+`"}`)
			dist = append(dist, fmt.Sprintf("<= %s s %.1f%%", le, v/count*100))
		}
		t.Logf("Pacer: senders woke after their slot (of %.0f slots): %s", count, strings.Join(dist, ", "))
	}
	p.stop(t)
	pacerRes.load = load0 + " → " + loadAvg()
	pacerRes.commands, pacerRes.clientCmds, pacerRes.byCmd = mon.stop()
	pacerRes.roundTrips = rt
	if rt < 0 { // no metric: every client command was its own round trip
		pacerRes.roundTrips = float64(pacerRes.clientCmds)
	}
	flushBenchDB(t, addr)
	if os.Getenv("PACER_BENCH_NO_BASELINE") != "" { // Pacer's figures alone, in half the time
		return pacerRes, benchResult{delivered: 1, seconds: 1, load: "-"}
	}

	fake = newSlowFake(t, e, sh.answer)
	load0 = loadAvg()
	// The baseline's concurrency: 32 per key as Pacer had, or, against a
	// slow provider, what Little's law asks (every key's rate x the
	// longest answer, with 20% headroom, and 10 more per key).
	conc := min(sh.keys*32, 1024)
	if sh.longest > 0 {
		conc = max(conc, int(float64(sh.keys)*rate*sh.longest.Seconds()*1.2)+10*sh.keys)
	}
	cmd := exec.Command(baseline, "-brokers", e.brokers, "-topic", e.topic, "-group", "baseline-"+e.prefix,
		"-url", e.fakeURL, "-token", "e2e-secret-token", "-concurrency", strconv.Itoa(conc), "-h2c")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	baseRes = fake.measure(t, cmd.Process.Pid, n, within, stderr.String)
	baseRes.keyShare = fake.keyShares(rate)
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	baseRes.load = load0 + " → " + loadAvg()
	return pacerRes, baseRes
}

// benchCPUProfile writes to file (PACER_BENCH_CPUPROFILE; the shape's
// name is added when several run) a CPU profile of p, taken once the fake
// has the first message, for PACER_BENCH_CPUPROFILE_SECONDS (default 10).
func benchCPUProfile(t *testing.T, p *proc, n int, fake *countingFake, file string) {
	secs := 10
	if v, err := strconv.Atoi(os.Getenv("PACER_BENCH_CPUPROFILE_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		got := 0
		for _, s := range fake.srv.Stats() {
			got += s.Delivered
		}
		if got > 0 {
			break
		}
	}
	if g := os.Getenv("PACER_BENCH_GOROUTINES"); g != "" {
		// A goroutine dump 3 s into the sends: where the records in hand
		// wait (go tool pprof -traces, or read it: debug=1).
		after := 3 * time.Second
		if ms, err := strconv.Atoi(os.Getenv("PACER_BENCH_GOROUTINES_AFTER_MS")); err == nil {
			after = time.Duration(ms) * time.Millisecond
		}
		time.Sleep(after)
		if resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/goroutine?debug=1", p.metricsAddr(t))); err == nil {
			var buf bytes.Buffer
			buf.ReadFrom(resp.Body)
			resp.Body.Close()
			os.WriteFile(g, buf.Bytes(), 0o644)
		}
	}
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.metricsAddr(t), secs))
	if err != nil {
		t.Errorf("CPU profile: %v", err)
		return
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("CPU profile: %s %s", resp.Status, buf.String())
		return
	}
	_, sub, _ := strings.Cut(t.Name(), "/")
	name := file + "." + strings.NewReplacer("/", "_", " ", "_").Replace(sub)
	if err := os.WriteFile(name, buf.Bytes(), 0o644); err != nil {
		t.Errorf("CPU profile: %v", err)
		return
	}
	t.Logf("CPU profile of %ds written to %s", secs, name)
	// And what the process allocated since it started (go tool pprof
	// -sample_index=alloc_space): the garbage collector's work.
	if resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/allocs", p.metricsAddr(t))); err == nil {
		var buf bytes.Buffer
		buf.ReadFrom(resp.Body)
		resp.Body.Close()
		if err := os.WriteFile(name+".allocs", buf.Bytes(), 0o644); err == nil {
			t.Logf("allocation profile written to %s.allocs", name)
		}
	}
}

// countingFake is an unlimited fake Cloud API that counts the TCP
// connections it accepts and samples the requests it answers at once.
type countingFake struct {
	srv   *whatsapptest.Server
	conns atomic.Int64
}

func newCountingFake(t *testing.T, e *e2e) *countingFake { return newSlowFake(t, e, "") }

// newSlowFake is newCountingFake with answer as the fake's own answer time
// (whatsapptest.Config.AnswerTime, answertime.Parse's form; "" answers at
// once): it counts each request on arrival and answers it that long
// after. It serves HTTP/1.1 and h2c.
func newSlowFake(t *testing.T, e *e2e, answer string) *countingFake {
	at, err := answertime.Parse(answer)
	if answer == "" {
		at, err = answertime.Fixed(0), nil
	}
	if err != nil {
		t.Fatal(err)
	}
	f := &countingFake{srv: whatsapptest.New(whatsapptest.Config{Token: "e2e-secret-token", AnswerTime: at})}
	ts := httptest.NewUnstartedServer(f.srv.Handler())
	ts.Config.Protocols = new(http.Protocols)
	ts.Config.Protocols.SetHTTP1(true)
	ts.Config.Protocols.SetUnencryptedHTTP2(true)
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			f.conns.Add(1)
		}
	}
	ts.Start()
	t.Cleanup(ts.Close)
	e.fake, e.fakeURL = f.srv, ts.URL
	return f
}

// measure waits until the fake accepted n messages and returns the
// figures; process pid's CPU time is read at the first and at the last
// arrival.
func (f *countingFake) measure(t *testing.T, pid, n int, within time.Duration, logs func() string) benchResult {
	t.Helper()
	var r benchResult
	deadline := time.Now().Add(within)
	var cpu0, machine0 float64
	var procs0 map[string]float64
	var counted int
	var secondAt, rampAt time.Time
	var ramped int
	started := false
	for {
		got, dups := 0, 0
		for _, s := range f.srv.Stats() {
			got += s.Delivered
			dups += s.Duplicates
		}
		r.maxInFlight = max(r.maxInFlight, f.srv.InFlight())
		if got > 0 && !started {
			cpu0, machine0, started = procCPU(t, pid), machineCPU(), true
			procs0 = allProcCPU()
			secondAt = time.Now().Add(time.Second)
			rampAt = time.Now().Add(200 * time.Millisecond)
		}
		if started && len(r.ramp) < 10 && !time.Now().Before(rampAt) {
			r.ramp = append(r.ramp, got-ramped)
			ramped, rampAt = got, rampAt.Add(200*time.Millisecond)
		}
		if started && !time.Now().Before(secondAt) {
			r.perSecond = append(r.perSecond, got-counted)
			counted, secondAt = got, secondAt.Add(time.Second)
		}
		if got >= n {
			r.cpu = procCPU(t, pid) - cpu0
			r.machineCPU = machineCPU() - machine0
			r.topCPU = topCPU(procs0, allProcCPU(), 6)
			r.delivered, r.duplicates = got, dups
			break
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGQUIT) // its goroutines, into the log
			time.Sleep(2 * time.Second)
			t.Fatalf("delivered %d of %d within %v\n%s", got, n, within, logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	var first, last time.Time
	for _, s := range f.srv.Stats() {
		if first.IsZero() || s.First.Before(first) {
			first = s.First
		}
		if s.Last.After(last) {
			last = s.Last
		}
	}
	r.seconds = last.Sub(first).Seconds()
	r.conns = f.conns.Load()
	for _, s := range f.srv.Stats() {
		r.max1s = max(r.max1s, s.Max1s)
	}
	return r
}

// keyShares returns each key's msgs/s from its first to its last arrival
// at the fake, over rate, sorted.
func (f *countingFake) keyShares(rate float64) []float64 {
	var out []float64
	for _, s := range f.srv.Stats() {
		if d := s.Last.Sub(s.First).Seconds(); s.Delivered > 1 && d > 0 {
			out = append(out, float64(s.Delivered-1)/d/rate)
		}
	}
	sort.Float64s(out)
	return out
}

// openOf is "median / most" of the connections open sampled over a run.
func openOf(open []float64) string {
	if len(open) == 0 {
		return "-"
	}
	s := slices.Sorted(slices.Values(open))
	return fmt.Sprintf("%.0f / %.0f", s[len(s)/2], s[len(s)-1])
}

// sharesOf is "min / median" of sorted shares, in %.
func sharesOf(s []float64) string {
	if len(s) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%% / %.1f%%", s[0]*100, s[len(s)/2]*100)
}

// allProcCPU returns the CPU seconds of every process now, by "pid name".
func allProcCPU() map[string]float64 {
	m := map[string]float64{}
	ds, _ := os.ReadDir("/proc")
	for _, d := range ds {
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		i, j := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if i < 0 || j < i {
			continue
		}
		f := strings.Fields(string(b[j+2:]))
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		m[d.Name()+" "+string(b[i+1:j])] = (ut + st) / 100
	}
	return m
}

// topCPU names the n processes that used the most CPU between two
// readings of allProcCPU, with their seconds.
func topCPU(before, after map[string]float64, n int) string {
	type pc struct {
		name string
		s    float64
	}
	var ps []pc
	for k, v := range after {
		ps = append(ps, pc{k, v - before[k]})
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].s > ps[j].s })
	var out []string
	for _, p := range ps[:min(n, len(ps))] {
		out = append(out, fmt.Sprintf("%s %.2fs", p.name, p.s))
	}
	return strings.Join(out, ", ")
}

// machineCPU returns the CPU seconds every process of the machine has
// used so far (/proc/stat: all but idle and iowait, in 1/100 s).
func machineCPU() float64 {
	b, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(b), "\n")
	var busy float64
	for i, f := range strings.Fields(line)[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		v, _ := strconv.ParseFloat(f, 64)
		busy += v
	}
	return busy / 100
}

// procCPU returns the user + system CPU seconds of process pid so far
// (/proc/pid/stat, clock ticks of 1/100 s).
func procCPU(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("reading the CPU time of %d: %v", pid, err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], "/")
}

// monitor counts the commands Redis runs while a shape's Pacer runs: by
// default from INFO commandstats (a script's commands included; every
// database and client of the server, so the bench wants a Redis to itself),
// or with PACER_BENCH_MONITOR=1 from MONITOR, in the bench's database only,
// split into commands clients sent and those scripts ran. MONITOR makes
// Redis write every command to the monitor (the ledger's batches are
// thousands of arguments each): it costs Redis and the bench about as much
// CPU as the Pacer process itself on a 2-core machine, so its runs are not
// for throughput.
type monitor struct {
	addr    string
	stats   map[string]int64 // INFO commandstats at the start; nil under MONITOR
	conn    net.Conn
	wg      sync.WaitGroup
	total   int64
	clients int64
	byCmd   map[string]int64
}

func startMonitor(t *testing.T, addr string, db int) *monitor {
	t.Helper()
	if os.Getenv("PACER_BENCH_MONITOR") == "" {
		return &monitor{addr: addr, stats: commandStats(t, addr)}
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	m := &monitor{conn: c, byCmd: map[string]int64{}}
	tag := []byte(fmt.Sprintf("[%d ", db))
	br := bufio.NewReaderSize(c, 1<<20)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		t.Fatalf("MONITOR: %q %v", line, err)
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for {
			line, err := br.ReadSlice('\n')
			if err != nil && err != bufio.ErrBufferFull {
				return
			}
			i := bytes.Index(line, tag)
			if i < 0 {
				continue
			}
			rest := line[i+len(tag):]
			j := bytes.IndexByte(rest, ']')
			if j < 0 {
				continue
			}
			m.total++
			src := "lua:"
			if !bytes.Equal(rest[:j], []byte("lua")) {
				m.clients++
				src = ""
			}
			name := rest[j+1:]
			if q := bytes.IndexByte(name, '"'); q >= 0 {
				name = name[q+1:]
				if q2 := bytes.IndexByte(name, '"'); q2 >= 0 {
					name = name[:q2]
				}
			}
			m.byCmd[src+strings.ToLower(string(name))]++
		}
	}()
	return m
}

// commandStats returns the calls of each command the Redis server at addr
// has run (INFO commandstats: a script's commands included).
func commandStats(t *testing.T, addr string) map[string]int64 {
	host, port, _ := strings.Cut(addr, ":")
	out, err := exec.Command("redis-cli", "-h", host, "-p", port, "INFO", "commandstats").Output()
	if err != nil && t != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	m := map[string]int64{}
	for _, line := range strings.Split(string(out), "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		m[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return m
}

// stop ends the count and returns commands in all, those clients sent, and
// the count by command ("lua:" prefixed when a script ran it).
func (m *monitor) stop() (total, clients int64, byCmd map[string]int64) {
	if m.stats != nil {
		byCmd = map[string]int64{}
		for c, n := range commandStats(nil, m.addr) {
			if d := n - m.stats[c]; d > 0 {
				byCmd[c] = d
				total += d
			}
		}
		return total, -1, byCmd
	}
	time.Sleep(200 * time.Millisecond) // the last lines
	m.conn.Close()
	m.wg.Wait()
	return m.total, m.clients, m.byCmd
}

// flushBenchDB empties the bench's database, so the next shape starts clean
// and the shared server keeps nothing of the bench.
func flushBenchDB(t *testing.T, addr string) { flushDB(t, addr, benchDB) }

func flushDB(t *testing.T, addr string, db int) {
	t.Helper()
	out, err := exec.Command("redis-cli", "-h", strings.Split(addr, ":")[0], "-p", strings.Split(addr, ":")[1],
		"-n", strconv.Itoa(db), "FLUSHDB").CombinedOutput()
	if err != nil {
		t.Logf("FLUSHDB %d: %v %s", db, err, out)
	}
}

// TestLedgerMemoryBench (PACER_BENCH_MEMORY=1, part of `make bench-e2e`)
// measures what the idempotency ledger keeps in Redis: used_memory and the
// bench database's keys before a campaign of PACER_BENCH_MEMORY_N messages
// (default 1,000,000; 200 numbers, the channel's default limit), right
// after it, PACER_BENCH_IDLE later (default 10m), and again once the
// ledger's longest lifetime has passed (1.25 x PACER_LEDGER_TTL, 8.75 min,
// plus 30 s: a generation's hash expires whole). used_memory is the
// whole server's: on a shared server other clients move it, so the keys of
// the bench's own database and a sample of their MEMORY USAGE are printed
// beside it.
func TestLedgerMemoryBench(t *testing.T) {
	if os.Getenv("PACER_BENCH_MEMORY") == "" {
		t.Skip("measurement: run with PACER_BENCH_MEMORY=1 (make bench-e2e)")
	}
	n := envSetting(t, "PACER_BENCH_MEMORY_N", 1_000_000, strconv.Atoi)
	idle := envSetting(t, "PACER_BENCH_IDLE", 10*time.Minute, time.ParseDuration)
	const keys = 200
	e := newE2E(t, whatsapptest.Config{})
	addr := testenv.RedisAddr(t)
	e.redis = fmt.Sprintf("redis://%s/%d", addr, benchDB)
	flushBenchDB(t, addr)
	lines, _ := campaign(keys, n/keys, "mm")
	if code, out, errs := e.publish(lines, "--partitions", "12"); code != 0 {
		t.Fatalf("publish: %d %s %s", code, out, errs)
	}
	lines = ""
	fake := newCountingFake(t, e)
	before := redisMemory(t, addr)
	t.Logf("before: %s", before)
	p := e.run()
	r := fake.measure(t, p.cmd.Process.Pid, n/keys*keys, 2*time.Hour, p.logs)
	p.stop(t)
	after := redisMemory(t, addr)
	t.Logf("after %d messages in %.0fs (%d duplicates): %s", r.delivered, r.seconds, r.duplicates, after)
	time.Sleep(idle)
	t.Logf("after %v idle: %s", idle, redisMemory(t, addr))
	if last := 12*time.Minute + 30*time.Second + 30*time.Second; idle < last {
		time.Sleep(last - idle)
		t.Logf("after %v idle: %s", last, redisMemory(t, addr))
	}
	flushBenchDB(t, addr)
}

// redisMemory describes the server's used_memory and the bench database's
// keys, with their mean MEMORY USAGE: of all of them when there are at most
// 1,000 (the ledger's few large hashes, each counted exactly), else of 200
// random ones.
func redisMemory(t *testing.T, addr string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	cli := func(args ...string) string {
		out, err := exec.Command("redis-cli", append([]string{"-h", host, "-p", port, "-n", strconv.Itoa(benchDB)}, args...)...).Output()
		if err != nil {
			t.Fatalf("redis-cli %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	used := ""
	for _, l := range strings.Split(cli("INFO", "memory"), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "used_memory:"); ok {
			used = v
		}
	}
	size, _ := strconv.Atoi(cli("DBSIZE"))
	var sum, k int
	usage := func(key string) {
		if b, err := strconv.Atoi(cli("MEMORY", "USAGE", key, "SAMPLES", "0")); err == nil {
			sum += b
			k++
		}
	}
	if size <= 1000 {
		for _, key := range strings.Fields(cli("--scan")) {
			usage(key)
		}
	} else {
		for range 200 {
			usage(cli("RANDOMKEY"))
		}
	}
	mean := 0
	if k > 0 {
		mean = sum / k
	}
	return fmt.Sprintf("used_memory %s B (whole server); database %d: %d keys, mean MEMORY USAGE %d B (%d sampled), about %.1f MB",
		used, benchDB, size, mean, k, float64(size*mean)/1e6)
}

// TestKeysMemoryBench (PACER_BENCH_KEYS=1) measures one `pacer run`
// process's memory per active pacing key: RSS and Go heap in use when it
// has just sent one message to each of PACER_BENCH_KEYS_N numbers (default
// 100,000), against the same process idle before, and again after
// PACER_BENCH_KEYS_IDLE (default 7m: keys are freed 5 minutes after their
// last send, by a sweep every minute).
func TestKeysMemoryBench(t *testing.T) {
	if os.Getenv("PACER_BENCH_KEYS") == "" {
		t.Skip("measurement: run with PACER_BENCH_KEYS=1")
	}
	n := envSetting(t, "PACER_BENCH_KEYS_N", 100_000, strconv.Atoi)
	idle := envSetting(t, "PACER_BENCH_KEYS_IDLE", 7*time.Minute, time.ParseDuration)
	e := newE2E(t, whatsapptest.Config{})
	e.redis = fmt.Sprintf("redis://%s/%d", testenv.RedisAddr(t), benchDB+1)
	fake := newCountingFake(t, e)
	if code, out, errs := e.publish(`{"id":"warm","key":"1065400000","to":"15550000000"}`+"\n", "--partitions", "12"); code != 0 {
		t.Fatalf("publish: %d %s %s", code, out, errs)
	}
	heapProf := os.Getenv("PACER_BENCH_HEAPPROFILE") // a file: the live heap a minute after the last send
	var p *proc
	if heapProf != "" {
		p = e.run("PACER_PPROF=true")
	} else {
		p = e.run()
	}
	fake.measure(t, p.cmd.Process.Pid, 1, time.Minute, p.logs)
	time.Sleep(5 * time.Second)
	mem := func(when string) (rss, heap float64) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
				rss = kb * 1024
			}
		}
		heap, _ = p.metric(t, "go_memstats_heap_inuse_bytes")
		active, _ := p.metric(t, `pacer_keys_active{channel="whatsapp"}`)
		t.Logf("%s: RSS %.1f MB, Go heap in use %.1f MB, keys active %.0f", when, rss/1e6, heap/1e6, active)
		return rss, heap
	}
	rss0, heap0 := mem("idle, before")
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"id":"k-%d","key":"2065%07d","to":"1555%07d"}`+"\n", i, i, i)
	}
	if code, out, errs := e.publish(b.String(), "--partitions", "12"); code != 0 {
		t.Fatalf("publish: %d %s %s", code, out, errs)
	}
	r := fake.measure(t, p.cmd.Process.Pid, n+1, 30*time.Minute, p.logs)
	rss1, heap1 := mem(fmt.Sprintf("%d keys just sent (%.0fs)", n, r.seconds))
	// The keys stay active (their state kept) for 5 minutes after their
	// last send; a minute on, no record is in hand any more, so what the
	// process holds is the keys' state.
	settle := min(time.Minute, idle)
	time.Sleep(settle)
	rss15, heap15 := mem(fmt.Sprintf("%d keys active, %v after the last send", n, settle))
	if heapProf != "" {
		if resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/heap?gc=1", p.metricsAddr(t))); err == nil {
			var buf bytes.Buffer
			buf.ReadFrom(resp.Body)
			resp.Body.Close()
			os.WriteFile(heapProf, buf.Bytes(), 0o644)
		}
	}
	// The provider connections of the burst stay open 90 s idle
	// (channels.IdleConnTimeout): a reading after that holds the keys'
	// state without them, the keys still active.
	rss2m, heap2m := rss15, heap15
	if after := 2 * time.Minute; idle > after+time.Minute {
		time.Sleep(after - settle)
		rss2m, heap2m = mem(fmt.Sprintf("%d keys active, %v after the last send (idle connections closed)", n, after))
		settle = after
	}
	time.Sleep(idle - settle)
	rss2, heap2 := mem(fmt.Sprintf("after %v idle", idle))
	p.stop(t)
	t.Logf("per key just sent: RSS %.0f B, heap %.0f B; active a minute later: RSS %.0f B, heap %.0f B; active 2 minutes later: RSS %.0f B, heap %.0f B; after idle, over the idle process before: RSS %.0f B, heap %.0f B per key",
		(rss1-rss0)/float64(n), (heap1-heap0)/float64(n), (rss15-rss0)/float64(n), (heap15-heap0)/float64(n),
		(rss2m-rss0)/float64(n), (heap2m-heap0)/float64(n), (rss2-rss0)/float64(n), (heap2-heap0)/float64(n))
	flushDB(t, testenv.RedisAddr(t), benchDB+1)
}
