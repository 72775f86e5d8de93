//go:build benchingest

// The ingest load measurements (make bench-ingest): throughput, latency,
// Redis round trips and quota accuracy of the gateway on the real Kafka
// broker and redis-server, with a plain produce-only handler as baseline.
// Figures: BENCHMARKS.md.
package ingest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/pacerhq/pacer/pacer/produce"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	vegeta "github.com/tsenart/vegeta/v12/lib"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/ingest"
	"github.com/pacerhq/pacer/pacer/ingest/quota"
	"github.com/pacerhq/pacer/partitioner"
)

func loadDuration() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("PACER_BENCH_DURATION")); err == nil {
		return d
	}
	return 10 * time.Second
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type rig struct {
	brokers string
	kafka   *kgo.Client
	rdb     *redis.Client
	prefix  string
	topic   string
	reg     *prometheus.Registry
	srv     *ingest.Server
}

func newRig(t *testing.T, tenantRate float64, tenantBurst int) *rig {
	return newRigOn(t, testenv.KafkaBrokers(t), tenantRate, tenantBurst, 0)
}

// newRigOn is a rig on brokers whose gateway waits at most produceTimeout
// (0: the default) for Kafka's acknowledgement.
func newRigOn(t *testing.T, brokers string, tenantRate float64, tenantBurst int, produceTimeout time.Duration) *rig {
	r := &rig{brokers: brokers, prefix: fmt.Sprintf("bench%d", time.Now().UnixNano()), reg: prometheus.NewRegistry()}
	delivery := 5 * time.Second
	if produceTimeout > 0 {
		delivery = produceTimeout
	}
	r.topic = r.prefix + ".whatsapp"
	var err error
	r.kafka, err = kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordDeliveryTimeout(delivery), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.kafka.Close)
	if _, err := produce.EnsureTopic(context.Background(), r.kafka, r.topic, 12); err != nil {
		t.Fatal(err)
	}
	r.rdb = redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), PoolSize: 128})
	t.Cleanup(func() { r.rdb.Close() })
	ts, err := ingest.ParseTenants([]byte(tenantsJSON(tenantRate, tenantBurst, 1_000_000_000)), []string{"whatsapp", "sendgrid"})
	if err != nil {
		t.Fatal(err)
	}
	r.srv, err = ingest.New(ingest.Config{Channels: []string{"whatsapp", "sendgrid"}, TopicPrefix: r.prefix + ".",
		IPLimit: bucket.Limit{PerSecond: 1e6, Burst: 1e6}, ChannelLimit: bucket.Limit{PerSecond: 1e6, Burst: 1e6}, Partitions: 12,
		ProduceTimeout: produceTimeout},
		ingest.Deps{Kafka: r.kafka, Quota: quota.New(r.rdb), Keys: bucket.NewKeys(r.prefix), Tenants: func() *ingest.Tenants { return ts }}, r.reg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// plain is the baseline: parse, produce, wait for the ack, 202.
func (r *rig) plain() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body strings.Builder
		buf := make([]byte, 64<<10)
		for {
			n, err := req.Body.Read(buf)
			body.Write(buf[:n])
			if err != nil {
				break
			}
		}
		lines := strings.Split(strings.TrimSpace(body.String()), "\n")
		errs := make(chan error, len(lines))
		for _, l := range lines {
			env, err := envelope.Parse([]byte(l))
			if err != nil {
				errs <- err
				continue
			}
			r.kafka.Produce(req.Context(), &kgo.Record{Topic: r.topic, Key: []byte(env.Key), Value: []byte(l),
				Partition: partitioner.Partition([]byte(env.Key), 12)}, func(_ *kgo.Record, err error) { errs <- err })
		}
		for range lines {
			if err := <-errs; err != nil {
				w.WriteHeader(503)
				return
			}
		}
		w.WriteHeader(202)
	})
}

var seq atomic.Int64

// targeter makes requests of batch envelopes each, every id new.
func targeter(url string, batch int) vegeta.Targeter {
	return func(t *vegeta.Target) error {
		var b strings.Builder
		for range batch {
			n := seq.Add(1)
			fmt.Fprintf(&b, `{"id":"m%d","key":"%d","to":"15551234567","payload":{"type":"text"}}`+"\n", n, n%1000)
		}
		t.Method, t.URL, t.Body = "POST", url, []byte(b.String())
		t.Header = http.Header{"Authorization": {"Bearer " + acmeKey}, "Content-Type": {"application/x-ndjson"}}
		return nil
	}
}

type figures struct {
	name               string
	ok, total          uint64
	rps, mps, p50, p99 float64
	cpu, redisPerReq   float64
	codes              map[string]int
}

func attack(t *testing.T, name string, h http.Handler, batch int, rate vegeta.Rate, workers uint64, d time.Duration, reg *prometheus.Registry) figures {
	hs := httptest.NewServer(h)
	defer hs.Close()
	atk := vegeta.NewAttacker(vegeta.Workers(workers), vegeta.MaxWorkers(workers), vegeta.KeepAlive(true), vegeta.Timeout(30*time.Second))
	var m vegeta.Metrics
	if dir := os.Getenv("PACER_BENCH_PROFILE"); dir != "" {
		// A CPU profile of this run alone (load generator included).
		f, err := os.Create(filepath.Join(dir, strings.NewReplacer(", ", "-", " ", "-").Replace(name)+".pprof"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	c0 := cpuTime()
	calls0 := redisCalls(reg)
	// PACER_BENCH_REQUESTS=N ends each run after N answers instead of after
	// the duration: a fixed amount of work, to compare two builds by their
	// whole-process time.
	limit, _ := strconv.Atoi(os.Getenv("PACER_BENCH_REQUESTS"))
	if limit > 0 {
		d = 0
	}
	n := 0
	for res := range atk.Attack(targeter(hs.URL+"/v1/channels/whatsapp/messages", batch), rate, d, name) {
		m.Add(res)
		if n++; n == limit {
			atk.Stop()
		}
	}
	m.Close()
	cpu := (cpuTime() - c0).Seconds() / m.Duration.Seconds()
	ok := uint64(m.StatusCodes["202"])
	f := figures{name: name, ok: ok, total: m.Requests, rps: float64(ok) / m.Duration.Seconds(),
		mps: float64(ok) * float64(batch) / m.Duration.Seconds(), p50: m.Latencies.P50.Seconds() * 1000,
		p99: m.Latencies.P99.Seconds() * 1000, cpu: cpu, codes: m.StatusCodes}
	if reg != nil && m.Requests > 0 {
		f.redisPerReq = (redisCalls(reg) - calls0) / float64(m.Requests)
	}
	t.Logf("%-28s %6d req (%v) %8.0f req/s %8.0f msg/s  p50 %6.2f ms  p99 %7.2f ms  cpu %.2f cores  %.2f msg/s per core  redis %.2f calls/req",
		name, f.total, f.codes, f.rps, f.mps, f.p50, f.p99, f.cpu, f.mps/f.cpu, f.redisPerReq)
	return f
}

func redisCalls(reg *prometheus.Registry) float64 {
	if reg == nil {
		return 0
	}
	mfs, _ := reg.Gather()
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "pacer_ingest_redis_calls_total" {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestLoadThroughput: the gateway against the plain handler, single
// envelopes and batches of 100, 32 connections as fast as they go.
func TestLoadThroughput(t *testing.T) {
	r := newRig(t, 1e6, 1e6)
	d := loadDuration()
	max := vegeta.Rate{Freq: 0}
	for _, run := range []struct {
		name  string
		h     http.Handler
		batch int
		reg   *prometheus.Registry
	}{
		{"plain, single", r.plain(), 1, nil},
		{"ingest, single", r.srv, 1, r.reg},
		{"plain, batch 100", r.plain(), 100, nil},
		{"ingest, batch 100", r.srv, 100, r.reg},
	} {
		// PACER_BENCH_RUNS=ingest runs only the runs whose name holds "ingest".
		if sel := os.Getenv("PACER_BENCH_RUNS"); sel != "" && !strings.Contains(run.name, sel) {
			continue
		}
		attack(t, run.name, run.h, run.batch, max, 32, d, run.reg)
	}
	// Every 202'd id on the topic exactly once.
	counts := r.countIDs(t)
	dups := 0
	for _, n := range counts {
		if n > 1 {
			dups++
		}
	}
	t.Logf("topic %s: %d distinct ids, %d ids more than once (plain and ingest runs together)", r.topic, len(counts), dups)
	if dups > 0 {
		t.Errorf("%d ids on the topic more than once", dups)
	}
}

// TestLoadQuotaAccuracy: a tenant at 100 req/s (burst 100) hammered by 64
// connections: accepted vs 100 x seconds + burst.
func TestLoadQuotaAccuracy(t *testing.T) {
	r := newRig(t, 100, 100)
	d := loadDuration()
	f := attack(t, "quota 100/s, 64 conns", r.srv, 1, vegeta.Rate{Freq: 0}, 64, d, r.reg)
	want := 100*d.Seconds() + 100
	t.Logf("accepted %d, limit %0.f (100 x %.0f s + burst 100): %.3f of the limit", f.ok, want, d.Seconds(), float64(f.ok)/want)
	if float64(f.ok) > want*1.01+5 || float64(f.ok) < want*0.9 {
		t.Errorf("accepted %d, want about %.0f", f.ok, want)
	}
	counts := r.countIDs(t)
	if len(counts) != int(f.ok) {
		t.Errorf("%d ids on the topic, %d answered 202", len(counts), f.ok)
	}
}

func (r *rig) countIDs(t *testing.T) map[string]int {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(r.brokers, ",")...), kgo.ConsumeTopics(r.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := map[string]int{}
	idle := 0
	for idle < 3 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(rec *kgo.Record) {
			n++
			var m struct{ ID string }
			json.Unmarshal(rec.Value, &m)
			out[m.ID]++
		})
		if n == 0 {
			idle++
		} else {
			idle = 0
		}
	}
	return out
}
