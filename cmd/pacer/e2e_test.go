//go:build e2e

package main

// End-to-end tests: the pacer binary against a real Kafka broker, a real
// redis-server (both from internal/testenv) and the fake WhatsApp Cloud API.
// The files of these process-level tests carry the build tag e2e: `make
// test-e2e` runs them (`go test -tags e2e`, without -race), `make test`
// runs the package's other tests. Every test here has its own topic,
// consumer group, Redis prefix and fake, so they run in parallel; see
// measured for those that measure time.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/statuspage"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

var pacerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pacer-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pacerBin = filepath.Join(dir, "pacer")
	out, err := exec.Command("go", "build", "-o", pacerBin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building pacer: %v\n%s", err, out)
		os.Exit(1)
	}
	code := testenv.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// measureSlots holds one slot per CPU for the tests that measure rates,
// throttles or latencies against a strict fake, or load the machine (a
// broker of their own, a browser): their bounds allow for a loaded 2-core
// machine, as when other packages' tests ran beside them, not for every
// test's processes on the same cores at once.
var (
	measureSlots = make(chan struct{}, runtime.GOMAXPROCS(0))
	measureTake  sync.Mutex // one test at a time takes its slots
	// alone is held for reading by the parallel tests that measure
	// nothing but start processes (parallel), and for writing by a test
	// measured alone: those run with no other process of the suite's.
	alone sync.RWMutex
)

// parallel marks t parallel, like the other tests, for a test that
// measures nothing but loads the machine (it starts pacer processes): it
// does not run beside a test measured alone.
func parallel(t *testing.T) {
	t.Helper()
	t.Parallel()
	alone.RLock()
	t.Cleanup(alone.RUnlock)
}

// measured marks t parallel, like the other tests, and holds one of
// measureSlots until t and its cleanups are done.
func measured(t *testing.T) {
	t.Helper()
	t.Parallel()
	holdSlots(t, 1)
}

// measuredAlone is measured for a test whose bound leaves no margin for
// another test's load beside it (a strict fake with no spare burst, where
// a send late by one token interval is a refusal): it holds every slot,
// and waits for the parallel tests that start processes to finish.
func measuredAlone(t *testing.T) {
	t.Helper()
	t.Parallel()
	alone.Lock()
	t.Cleanup(alone.Unlock)
	holdSlots(t, cap(measureSlots))
}

// holdSlots takes n of measureSlots until t and its cleanups are done.
func holdSlots(t *testing.T, n int) {
	measureTake.Lock()
	for range n {
		measureSlots <- struct{}{}
	}
	measureTake.Unlock()
	t.Cleanup(func() {
		for range n {
			<-measureSlots
		}
	})
}

// e2e is one test's world: unique topic, group and Redis prefix.
type e2e struct {
	t       testing.TB
	brokers string
	redis   string
	topic   string
	prefix  string
	fake    *whatsapptest.Server
	fakeURL string // if set, the fake's address instead of fake.URL()
	// rewrite, if set, changes the environment of every pacer command
	// (the secured tests replace the servers and the token).
	rewrite func([]string) []string
}

func newE2E(t testing.TB, fake whatsapptest.Config) *e2e {
	var b [4]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	fake.Token = "e2e-secret-token"
	s := whatsapptest.NewServer(fake)
	t.Cleanup(s.Close)
	return &e2e{t: t, brokers: testenv.KafkaBrokers(t), redis: testenv.RedisURL(t),
		topic: "pacer.whatsapp.e2e-" + id, prefix: "pacer-e2e-" + id, fake: s}
}

func (e *e2e) env(extra ...string) []string {
	if e.rewrite != nil {
		r := e.rewrite
		e.rewrite = nil
		defer func() { e.rewrite = r }()
		return r(e.env(extra...))
	}
	fakeURL := e.fakeURL
	if fakeURL == "" {
		fakeURL = e.fake.URL()
	}
	return append(append(os.Environ(),
		"PACER_KAFKA_BROKERS="+e.brokers,
		"PACER_REDIS_URL="+e.redis,
		"PACER_REDIS_PREFIX="+e.prefix,
		"PACER_WHATSAPP_BASE_URL="+fakeURL,
		"PACER_WHATSAPP_TOKEN=e2e-secret-token",
		"PACER_METRICS_ADDR=127.0.0.1:0",
		"PACER_PAGE_OPEN_READ=true", // the tests read /status.json without a token; TestPageActionsInChromium closes it
		"PACER_LOG_FORMAT=text",
		"PACER_DRAIN=10s",
	), extra...)
}

// publish runs `pacer publish` on lines and returns its exit code, stdout and stderr.
func (e *e2e) publish(lines string, args ...string) (int, string, string) {
	e.t.Helper()
	cmd := exec.Command(pacerBin, append([]string{"publish", "--channel", "whatsapp", "--topic", e.topic}, append(args, "-")...)...)
	cmd.Env = e.env()
	cmd.Stdin = strings.NewReader(lines)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("pacer publish: %v", err)
	}
	return code, out.String(), errb.String()
}

// proc is a running `pacer run`.
type proc struct {
	cmd     *exec.Cmd
	mu      sync.Mutex
	log     bytes.Buffer
	metrics chan string // the /metrics address, once logged
	addr    string      // the /metrics address, once read from metrics
	done    chan error
}

// metricsAddr returns the process's /metrics address, waiting up to 60 s
// for it to be logged.
func (p *proc) metricsAddr(t testing.TB) string {
	t.Helper()
	if p.addr == "" {
		select {
		case p.addr = <-p.metrics:
		case <-time.After(60 * time.Second):
			t.Fatalf("no metrics address logged within 60 s\n%s", p.logs())
		}
	}
	return p.addr
}

// metric returns the value of one series of the process's /metrics, such
// as `pacer_delivered_total{channel="whatsapp"}` (labels in the order
// Prometheus writes them: sorted by name), and whether it was there.
func (p *proc) metric(t testing.TB, series string) (float64, bool) {
	t.Helper()
	_, body := httpGet(t, "http://"+p.metricsAddr(t)+"/metrics")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("/metrics: %s: %v", line, err)
			}
			return f, true
		}
	}
	return 0, false
}

// metricSum returns the sum of every series of metric name (any labels)
// on the process's /metrics; 0 if it has none.
func (p *proc) metricSum(t testing.TB, name string) float64 {
	t.Helper()
	_, body := httpGet(t, "http://"+p.metricsAddr(t)+"/metrics")
	sum := 0.0
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, name+"{") || strings.HasPrefix(l, name+" ") {
			f := strings.Fields(l)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("/metrics: %s: %v", l, err)
			}
			sum += v
		}
	}
	return sum
}

// mustMetric is metric for a series that must be there.
func (p *proc) mustMetric(t testing.TB, series string) float64 {
	t.Helper()
	v, ok := p.metric(t, series)
	if !ok {
		t.Fatalf("/metrics lacks %s", series)
	}
	return v
}

var metricsAddrRE = regexp.MustCompile(`msg="(?:metrics|webhook) listening" (?:component=\S+ )?addr=(\S+)`)

func (e *e2e) run(extraEnv ...string) *proc {
	e.t.Helper()
	return startPacer(e.t, e.env(extraEnv...), "run", "--channel", "whatsapp", "--topic", e.topic, "--group", "pacer-"+e.prefix)
}

// startPacer starts the pacer binary with args in env (killed when t
// ends, if still running) and reads its log.
func startPacer(t testing.TB, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(pacerBin, args...)
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, metrics: make(chan string, 1), done: make(chan error, 1)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			p.mu.Unlock()
			if m := metricsAddrRE.FindStringSubmatch(line); m != nil {
				p.metrics <- m[1]
			}
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
		}
	})
	return p
}

// redisClient returns a client of e's Redis, closed when the test ends; a
// URL it cannot parse fails the test.
func (e *e2e) redisClient() *redis.Client {
	e.t.Helper()
	opt, err := redis.ParseURL(e.redis)
	if err != nil {
		e.t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	e.t.Cleanup(func() { rdb.Close() })
	return rdb
}

func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// cli runs `pacer args...` in e's environment and returns its stdout; a
// non-zero exit fails the test.
func (e *e2e) cli(args ...string) string {
	e.t.Helper()
	cmd := exec.Command(pacerBin, args...)
	cmd.Env = e.env()
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		e.t.Fatalf("pacer %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// kill ends the process as a crash does (SIGKILL: no drain, no offset
// commit) and waits until it has exited.
func (p *proc) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM and requires a clean exit within 30 s.
func (p *proc) stop(t testing.TB) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("pacer run after SIGTERM: %v\n%s", err, p.logs())
		}
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		t.Fatalf("pacer run did not exit within 30 s of SIGTERM\n%s", p.logs())
	}
}

// campaign returns numbers x per envelopes, one per line, and the keys.
func campaign(numbers, per int, tag string) (string, []string) {
	var b strings.Builder
	keys := make([]string, numbers)
	for n := range keys {
		keys[n] = fmt.Sprintf("10654%s%04d", tag, n+1)
	}
	for i := range per {
		for n, k := range keys {
			fmt.Fprintf(&b, `{"id":"%s-%d-%d","key":%q,"to":"1555%07d","payload":{"type":"text","text":{"body":"m%d"}}}`+"\n",
				tag, n, i, k, n*per+i, i)
		}
	}
	return b.String(), keys
}

// deliveredNow returns the requests the fake accepted so far.
func (e *e2e) deliveredNow() (n int) {
	for _, s := range e.fake.Stats() {
		n += s.Delivered
	}
	return n
}

// envSetting returns environment variable name as parse reads it, or def
// when it is unset or empty; a value parse refuses fails the test naming
// the variable (a measurement's knob mistyped would otherwise run with 0).
func envSetting[T any](t testing.TB, name string, def T, parse func(string) (T, error)) T {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	x, err := parse(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return x
}

// deliverySpan returns the first and the last arrival the fake accepted,
// over every key.
func (e *e2e) deliverySpan() (first, last time.Time) {
	for _, s := range e.fake.Stats() {
		if first.IsZero() || s.First.Before(first) {
			first = s.First
		}
		if s.Last.After(last) {
			last = s.Last
		}
	}
	return first, last
}

// waitProgress waits until the fake accepted more than from messages and
// returns how many; it fails the test after within. Fault injections call
// it instead of sleeping, so the fault lands while messages flow.
func (e *e2e) waitProgress(from int, within time.Duration, procs ...*proc) int {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		if n := e.deliveredNow(); n > from {
			return n
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, p := range procs {
				logs.WriteString(p.logs())
			}
			e.t.Fatalf("no delivery beyond %d within %v\n%s", from, within, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitDelivered waits until the fake accepted want messages in all.
func (e *e2e) waitDelivered(want int, within time.Duration, procs ...*proc) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := 0
		for _, s := range e.fake.Stats() {
			got += s.Delivered
		}
		if got >= want {
			time.Sleep(500 * time.Millisecond) // let a late duplicate show
			return
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, p := range procs {
				logs.WriteString(p.logs())
			}
			e.t.Fatalf("delivered %d of %d within %v\n%s", got, want, within, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkPacing asserts exactly-once delivery, at most 0.5% throttled, the
// 1 s window limit and an achieved rate >= 65% of the limit, and logs the
// figures. The rate bound catches a halving at a throttle (50%) while a
// 2-core machine under a load of 10 meets it (74% seen there: late
// wake-ups lapse slots); `make bench-pacing` and its short form measure
// the rate at the limit itself.
func (e *e2e) checkPacing(keys []string, per int, rate float64, burst int) {
	e.t.Helper()
	stats := e.fake.Stats()
	for _, k := range keys {
		s := stats[k]
		secs := s.Last.Sub(s.First).Seconds()
		achieved := float64(s.Delivered) / secs
		e.t.Logf("number %s: delivered %d, duplicates %d, throttled %d, max in 1s %d, %.2fs, %.1f msgs/s",
			k, s.Delivered, s.Duplicates, s.Throttled, s.Max1s, secs, achieved)
		if s.Delivered != per || s.Duplicates != 0 {
			e.t.Errorf("number %s: delivered %d (duplicates %d), want %d exactly once", k, s.Delivered, s.Duplicates, per)
		}
		// The fake's bucket is exactly the configured one, with no slack:
		// a send bunched with others on its way may meet the bucket's edge.
		// The pacer's headroom keeps that rare; a lone refusal costs no rate.
		if most := int(0.005 * float64(s.Delivered+s.Throttled)); s.Throttled > most {
			e.t.Errorf("number %s: %d answers 130429, want <= 0.5%% of requests (%d)", k, s.Throttled, most)
		}
		if limit := int(math.Floor(rate)) + burst; s.Max1s > limit {
			e.t.Errorf("number %s: %d arrivals in one 1 s window, limit rate+burst = %d", k, s.Max1s, limit)
		}
		if achieved < 0.65*rate {
			e.t.Errorf("number %s: achieved %.1f msgs/s, want >= 65%% of %.0f", k, achieved, rate)
		}
	}
}

func httpGet(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestEndToEndOneProcess(t *testing.T) {
	measured(t)
	const numbers, per, rate, burst = 3, 500, 50.0, 10
	e := newE2E(t, whatsapptest.Config{Rate: rate, Burst: burst})
	lines, keys := campaign(numbers, per, "1")
	code, out, stderr := e.publish(lines, "--partitions", "3")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("published %d, rejected 0", numbers*per)) {
		t.Fatalf("publish: exit %d\n%s%s", code, out, stderr)
	}
	t.Logf("publish: %s", strings.TrimSpace(out))

	p := e.run("PACER_WHATSAPP_RATE=50", "PACER_WHATSAPP_BURST=10")
	maddr := p.metricsAddr(t)
	e.waitDelivered(numbers*per, 90*time.Second, p)
	e.checkPacing(keys, per, rate, burst)

	if code, body := httpGet(t, "http://"+maddr+"/readyz"); code != 200 {
		t.Errorf("/readyz = %d %q, want 200", code, body)
	}
	_, metrics := httpGet(t, "http://"+maddr+"/metrics")
	for _, want := range []string{
		`pacer_delivered_total{channel="whatsapp"} 1500`,
		`pacer_sends_total{channel="whatsapp",class="success"} 1500`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if !strings.Contains(metrics, `pacer_consumer_lag_records{channel="whatsapp",topic="`+e.topic+`"}`) {
		t.Errorf("/metrics lacks pacer_consumer_lag_records of the topic")
	}
	// The status page lists the campaign's keys, with the running limit,
	// once the replica has published them (every 5 s).
	var st statuspage.Status
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		code, body := httpGet(t, "http://"+maddr+"/status.json?sort=key")
		if code != 200 {
			t.Fatalf("/status.json = %d %q", code, body)
		}
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatalf("/status.json: %v\n%s", err, body)
		}
		if st.Totals.Keys == numbers || time.Now().After(deadline) {
			break
		}
	}
	if st.Channel != "whatsapp" || st.Totals.Keys != numbers || len(st.Keys) != numbers || len(st.Replicas) != 1 {
		t.Fatalf("/status.json: channel %q, %d keys, %d rows, replicas %v; want whatsapp, %d keys, 1 replica", st.Channel, st.Totals.Keys, len(st.Keys), st.Replicas, numbers)
	}
	for i, k := range st.Keys {
		if k.Key != keys[i] || k.Limit != rate || k.Burst != burst || k.Rate != rate || k.Breaker != "closed" || k.Replicas != 1 {
			t.Errorf("/status.json row %d: %+v; want key %s at limit %v/%d, closed, 1 replica", i, k, keys[i], rate, burst)
		}
	}
	if code, body := httpGet(t, "http://"+maddr+"/status"); code != 200 || !strings.Contains(body, "status.json") {
		t.Errorf("/status = %d", code)
	}
	p.stop(t)
	if strings.Contains(p.logs(), "e2e-secret-token") {
		t.Error("the WhatsApp token appears in the logs")
	}
	// Everything was committed: the group has no lag.
	adm := kadm.NewClient(newKafkaClient(t, e.brokers))
	lags, err := adm.Lag(context.Background(), "pacer-"+e.prefix)
	if err != nil {
		t.Fatal(err)
	}
	if l := lags["pacer-"+e.prefix].Lag.Total(); l != 0 {
		t.Errorf("consumer group lag after shutdown = %d, want 0", l)
	}
}

// TestEndToEndTwoProcessesShareLimit publishes round-robin over 4
// partitions, so both group members send for every number at once: the
// per-number limit must hold for their sum.
func TestEndToEndTwoProcessesShareLimit(t *testing.T) {
	measured(t)
	const numbers, per, rate, burst = 3, 500, 50.0, 10
	e := newE2E(t, whatsapptest.Config{Rate: rate, Burst: burst})
	cl := newKafkaClient(t, e.brokers, kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 4, -1, nil, e.topic); err != nil {
		t.Fatal(err)
	}
	// Both members join before the campaign arrives, so the measured span
	// holds no rebalance.
	a := e.run("PACER_WHATSAPP_RATE=50", "PACER_WHATSAPP_BURST=10")
	b := e.run("PACER_WHATSAPP_RATE=50", "PACER_WHATSAPP_BURST=10")
	e.waitMembersOwn(2, e.topic, 60*time.Second, a, b)
	lines, keys := campaign(numbers, per, "2")
	var recs []*kgo.Record
	for _, l := range strings.Split(strings.TrimSpace(lines), "\n") {
		recs = append(recs, &kgo.Record{Topic: e.topic, Value: []byte(l)})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	e.waitDelivered(numbers*per, 120*time.Second, a, b)
	e.checkPacing(keys, per, rate, burst)
	// The limit was shared only if both members sent: each delivered a part,
	// and the parts add up to the campaign.
	sum := 0.0
	for i, p := range []*proc{a, b} {
		n := p.mustMetric(t, `pacer_delivered_total{channel="whatsapp"}`)
		t.Logf("process %d delivered %.0f", i, n)
		if n == 0 {
			t.Errorf("process %d delivered nothing: the other sent the whole campaign alone\n%s", i, p.logs())
		}
		sum += n
	}
	if sum != numbers*per {
		t.Errorf("the processes delivered %.0f in all, want %d", sum, numbers*per)
	}
	a.stop(t)
	b.stop(t)
}

// waitMembersOwn waits until the group has n members and each owns at least
// one partition of topic (a member owning only retry partitions sends no
// fresh record), and the group is stable.
func (e *e2e) waitMembersOwn(n int, topic string, within time.Duration, procs ...*proc) {
	e.t.Helper()
	adm := kadm.NewClient(newKafkaClient(e.t, e.brokers))
	group := "pacer-" + e.prefix
	deadline := time.Now().Add(within)
	var last string
	for {
		gs, err := adm.DescribeGroups(context.Background(), group)
		if err == nil && gs.Error() == nil {
			g := gs[group]
			owning := 0
			var desc strings.Builder
			for _, m := range g.Members {
				c, _ := m.Assigned.AsConsumer()
				parts := 0
				if c != nil {
					for _, t := range c.Topics {
						if t.Topic == topic {
							parts += len(t.Partitions)
						}
					}
				}
				fmt.Fprintf(&desc, "%s: %d of %s; ", m.MemberID, parts, topic)
				if parts > 0 {
					owning++
				}
			}
			last = fmt.Sprintf("state %s, %d members: %s", g.State, len(g.Members), desc.String())
			if g.State == "Stable" && len(g.Members) == n && owning == n {
				return
			}
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, p := range procs {
				logs.WriteString(p.logs())
			}
			e.t.Fatalf("within %v, not every one of %d members owned a partition of %s (%s)\n%s", within, n, topic, last, logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestPublishRejectsBadLines(t *testing.T) {
	parallel(t)
	e := newE2E(t, whatsapptest.Config{})
	big := `{"id":"big","key":"1","to":"2","payload":{"x":"` + strings.Repeat("a", 1<<20) + `"}}`
	lines := strings.Join([]string{
		`{"id":"ok-1","key":"106","to":"155","payload":{"type":"text","text":{"body":"a"}}}`,
		`{"id":"bad-json","key":"106",`,
		`{"key":"106","to":"155"}`,
		`{"id":"no-key","to":"155"}`,
		`{"id":"no-to","key":"106"}`,
		big,
		``,
		`{"id":"ok-2","key":"107","to":"156"}`,
		`{"id":"ok-3","key":"106","to":"157","expires_at":"tomorrow"}`,
		`{"id":"huge","key":"1","to":"2","payload":{"x":"` + strings.Repeat("a", 1<<20+64<<10) + `"}}`,
		`id=ok-4 key=106 to=158`,
		"{\"id\":\"ok-5\"}\xff",
		"caf\xe9",
	}, "\n")
	code, out, stderr := e.publish(lines, "--partitions", "2")
	if code != 1 {
		t.Fatalf("publish exit %d, want 1\n%s%s", code, out, stderr)
	}
	for _, want := range []string{
		"line 2: envelope: invalid JSON",
		"line 3: envelope: id: required\n",
		`line 4: envelope: key: required (id "no-key")`,
		`line 5: envelope: to: required (id "no-to")`,
		`line 6: envelope: payload: 1048584 bytes, at most 1048576 allowed (id "big")`,
		"line 9: envelope: expires_at:",
		`(id "ok-3")`,
		"line 10: line longer than 1114112 bytes: an envelope's payload may have at most 1048576 bytes (1 MiB)",
		`line 11: envelope: not JSON: an envelope is one JSON object per line, {"id":…,"key":…,"to":…}`,
		"line 12: envelope: invalid JSON at byte 13",
		"line 13: envelope: not JSON: invalid UTF-8 at byte 3; the file must be UTF-8 text",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "bad-json") {
		t.Errorf("line 2 is not JSON, yet its report names an id:\n%s", stderr)
	}
	if !strings.Contains(out, "published 2, rejected 10") {
		t.Errorf("summary = %q, want published 2, rejected 10", out)
	}
	got := consumeAll(t, e.brokers, e.topic, 2)
	if len(got) != 2 || !strings.Contains(string(got[0].Value)+string(got[1].Value), `"ok-2"`) {
		t.Errorf("topic holds %d records, want ok-1 and ok-2", len(got))
	}
}

// TestPoisonRecordsGoToDLQ writes records that are not envelopes with kcat
// (another producer), between good ones: they land in the DLQ with a reason
// header and the good ones are delivered.
func TestPoisonRecordsGoToDLQ(t *testing.T) {
	parallel(t)
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Fatal("kcat is required (apt-get install kcat; make test installs it)")
	}
	e := newE2E(t, whatsapptest.Config{})
	input := strings.Join([]string{
		`106:{"id":"good-1","key":"106","to":"1551"}`,
		`106:this is not json`,
		`106:{"id":"no-to","key":"106"}`,
		`106:{"id":"good-2","key":"106","to":"1552"}`,
		`106:{"id":"old","key":"106","to":"1553","expires_at":"2001-01-01T00:00:00Z"}`,
		`106:{"id":"good-3","key":"106","to":"1554"}`,
	}, "\n") + "\n"
	kc := exec.Command("kcat", "-b", e.brokers, "-P", "-t", e.topic, "-K:", "-X", "topic.partitioner=murmur2_random")
	kc.Stdin = strings.NewReader(input)
	if out, err := kc.CombinedOutput(); err != nil {
		t.Fatalf("kcat: %v\n%s", err, out)
	}
	p := e.run()
	e.waitDelivered(3, 60*time.Second, p)
	dlq := consumeAll(t, e.brokers, e.topic+".dlq", 3)
	reasons := map[string]string{}
	for _, r := range dlq {
		for _, h := range r.Headers {
			if h.Key == "pacer-reason" {
				reasons[string(r.Value)] = string(h.Value)
			}
		}
	}
	for val, want := range map[string]string{
		`this is not json`:           "malformed",
		`{"id":"no-to","key":"106"}`: "malformed",
		`{"id":"old","key":"106","to":"1553","expires_at":"2001-01-01T00:00:00Z"}`: "expired",
	} {
		if reasons[val] != want {
			t.Errorf("DLQ reason of %q = %q, want %q (DLQ: %v)", val, reasons[val], want, reasons)
		}
	}
	p.stop(t)
	if s := e.fake.Stats()["106"]; s.Delivered != 3 || s.Duplicates != 0 {
		t.Errorf("delivered %d (duplicates %d), want the 3 good records once", s.Delivered, s.Duplicates)
	}
}

// TestEndToEndRedisCluster runs `pacer run` against a real three-master
// Redis Cluster: every key of a pacing key shares a hash tag, so each
// script stays in one slot, and the limit holds as on one server.
func TestEndToEndRedisCluster(t *testing.T) {
	measured(t)
	const numbers, per, rate, burst = 2, 200, 50.0, 10
	e := newE2E(t, whatsapptest.Config{Rate: rate, Burst: burst})
	addrs := strings.Join(testenv.ClusterAddrs(t), ",")
	lines, keys := campaign(numbers, per, "6")
	if code, out, errs := e.publish(lines, "--partitions", "2"); code != 0 {
		t.Fatalf("publish: %d %s %s", code, out, errs)
	}
	p := e.run("PACER_WHATSAPP_RATE=50", "PACER_WHATSAPP_BURST=10", "PACER_REDIS_CLUSTER_ADDRS="+addrs)
	e.waitDelivered(numbers*per, 60*time.Second, p)
	e.checkPacing(keys, per, rate, burst)
	st := exec.Command(pacerBin, "status", "--channel", "whatsapp")
	st.Env = e.env("PACER_REDIS_CLUSTER_ADDRS=" + addrs)
	out, err := st.CombinedOutput()
	if err != nil || !strings.Contains(string(out), keys[0]) || !strings.Contains(string(out), keys[1]) {
		t.Errorf("pacer status on the cluster: %v\n%s", err, out)
	}
	p.stop(t)
}
