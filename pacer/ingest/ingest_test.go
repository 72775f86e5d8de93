package ingest_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	verrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"sigs.k8s.io/yaml"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/ingest"
	"github.com/pacerhq/pacer/pacer/ingest/quota"
	"github.com/pacerhq/pacer/pacer/message"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

const (
	acmeKey  = "acme-secret-key"
	otherKey = "other-secret-key"
)

func digest(k string) string { s := sha256.Sum256([]byte(k)); return hex.EncodeToString(s[:]) }

func tenantsJSON(rate float64, burst, day int) string {
	return fmt.Sprintf(`{"tenants":[
 {"id":"acme","key_sha256":[%q],"requests_per_second":%v,"burst":%d,"messages_per_day":%d,"channels":["whatsapp"]},
 {"id":"other","key_sha256":[%q],"requests_per_second":100,"burst":100,"messages_per_day":100000,"channels":["sendgrid"]}]}`,
		digest(acmeKey), rate, burst, day, digest(otherKey))
}

// env is one gateway on miniredis and kfake.
type env struct {
	t     *testing.T
	mr    *miniredis.Miniredis
	kc    *kfake.Cluster
	kafka *kgo.Client
	srv   *ingest.Server
	reg   *prometheus.Registry
	ctl   *control.Store // campaign counters on the same miniredis
	rdb   *redis.Client  // the miniredis, or the redis-server of opts.realRedis
	keys  bucket.Keys    // the gateway's key names
	url   string
	oapi  validator.Validator
}

type opts struct {
	rate       float64
	burst, day int
	ip         bucket.Limit
	failure    string
	trusted    []netip.Prefix
	kafkaAddrs []string // default: the kfake cluster
	tenants    string   // the tenants file; default tenantsJSON(rate, burst, day)
	// realRedis runs the gateway on the test redis-server (testenv) under
	// a key prefix of its own, instead of miniredis (e.mr is then nil).
	realRedis bool
}

func newEnv(t *testing.T, o opts) *env {
	t.Helper()
	if o.rate == 0 {
		o.rate, o.burst, o.day = 100, 100, 100000
	}
	if o.ip.PerSecond == 0 {
		o.ip = bucket.Limit{PerSecond: 1000, Burst: 1000}
	}
	e := &env{t: t, reg: prometheus.NewRegistry()}
	addr, db, keys := "", 0, bucket.NewKeys("")
	if o.realRedis {
		addr, db, keys = testenv.RedisAddr(t), testenv.RedisDB, bucket.NewKeys("ingest-test-"+rand.Text())
	} else {
		e.mr = miniredis.RunT(t)
		e.mr.SetTime(t0) // TIME in scripts; the test moves it
		addr = e.mr.Addr()
	}
	e.kc = testenv.FakeKafka(t, 4, "pacer.whatsapp", "pacer.sendgrid")
	addrs := o.kafkaAddrs
	if addrs == nil {
		addrs = e.kc.ListenAddrs()
	}
	e.kafka = testenv.KafkaClient(t, addrs, kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordDeliveryTimeout(2*time.Second))
	if o.tenants == "" {
		o.tenants = tenantsJSON(o.rate, o.burst, o.day)
	}
	ts, err := ingest.ParseTenants([]byte(o.tenants), []string{"whatsapp", "sendgrid"})
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, DB: db, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	e.keys = keys
	e.ctl = control.New(rdb, keys)
	e.rdb = rdb
	e.srv, err = ingest.New(ingest.Config{
		Channels: []string{"whatsapp", "sendgrid"}, IPLimit: o.ip, ChannelLimit: bucket.Limit{PerSecond: 5000, Burst: 5000},
		TrustedProxies: o.trusted, RedisFailure: o.failure, ProduceTimeout: 3 * time.Second, Partitions: 4,
	}, ingest.Deps{Kafka: e.kafka, Quota: quota.New(rdb), Fallback: quota.NewLocal(2), Keys: keys,
		Tenants: func() *ingest.Tenants { return ts }, Campaigns: e.ctl, Control: e.ctl, KafkaPing: e.kafka.Ping,
		Messages: message.NewStore(rdb, keys, 0),
		Metrics:  promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{})}, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(e.srv)
	t.Cleanup(hs.Close)
	e.url = hs.URL
	doc, err := libopenapi.NewDocument(ingest.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		t.Fatalf("openapi.yaml is not a valid OpenAPI document: %v", verrs)
	}
	e.oapi = v
	return e
}

type answer struct {
	status int
	h      http.Header
	body   []byte
}

func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("body %q: %v", a.body, err)
	}
	return m
}

// send sends the request mk makes and checks the answer against
// openapi.yaml (mk is called again for the request the check reads).
func (e *env) send(mk func() *http.Request) answer {
	e.t.Helper()
	resp, err := http.DefaultClient.Do(mk())
	if err != nil {
		e.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	a := answer{status: resp.StatusCode, h: resp.Header, body: b}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	vr := mk()
	vr.URL.Host = "localhost:8080"
	if ok, verrs := e.oapi.ValidateHttpResponse(vr, resp); !ok {
		var msgs []string
		for _, v := range verrs {
			msgs = append(msgs, v.Message+": "+v.Reason)
			for _, s := range v.SchemaValidationErrors {
				msgs = append(msgs, "  "+s.Reason)
			}
		}
		e.t.Errorf("answer %d %s drifts from openapi.yaml:\n%s", a.status, b, strings.Join(msgs, "\n"))
	}
	return a
}

// do sends a request and checks request and answer against openapi.yaml.
func (e *env) do(key, channel, ctype, body string, hdr ...string) answer {
	e.t.Helper()
	mk := func() *http.Request {
		r, _ := http.NewRequest("POST", e.url+"/v1/channels/"+channel+"/messages", strings.NewReader(body))
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		if ctype != "" {
			r.Header.Set("Content-Type", ctype)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		return r
	}
	a := e.send(mk)
	b := a.body
	// A JSON request the API accepted whole must be one the document
	// describes: a client generated from it must be able to send it.
	if a.status == 202 && strings.HasPrefix(ctype, "application/json") && !bytes.Contains(b, []byte(`"rejected":[{`)) {
		rq := mk()
		rq.URL.Host = "localhost:8080"
		if ok, verrs := e.oapi.ValidateHttpRequest(rq); !ok {
			var msgs []string
			for _, v := range verrs {
				msgs = append(msgs, v.Message+": "+v.Reason)
				for _, s := range v.SchemaValidationErrors {
					msgs = append(msgs, "  "+s.Reason)
				}
			}
			e.t.Errorf("request accepted (202) but not valid by openapi.yaml: %s\n%s", body, strings.Join(msgs, "\n"))
		}
	}
	return a
}

// records returns the ids on topic and the envelopes by id.
func (e *env) records(topic string) map[string][]map[string]any {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kc.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	// Every record the topic holds, counted from its offsets: a first fetch
	// slower than a fixed wait (a loaded machine, -race) read as none.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		e.t.Fatal(err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		e.t.Fatal(err)
	}
	want := 0
	ends.Each(func(o kadm.ListedOffset) {
		s, _ := starts.Lookup(o.Topic, o.Partition)
		want += int(o.Offset - s.Offset)
	})
	out := map[string][]map[string]any{}
	for n := 0; n < want && ctx.Err() == nil; {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			n++
			var m map[string]any
			json.Unmarshal(r.Value, &m)
			out[m["id"].(string)] = append(out[m["id"].(string)], m)
		})
	}
	return out
}

func env1(id string) string {
	return fmt.Sprintf(`{"id":%q,"key":"106540352242922","to":"15551234567"}`, id)
}

// t0 is midnight: the day window starts there.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func init() { redis.SetLogger(quietLogger{}) }

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

var rateLimitRE = regexp.MustCompile(`^"([a-z-]+)";r=(\d+);t=(\d+)$`)

func TestAcceptSingleAndBatch(t *testing.T) {
	e := newEnv(t, opts{})
	a := e.do(acmeKey, "whatsapp", "application/json", env1("m1"))
	if a.status != 202 || !strings.Contains(string(a.body), `"id":"m1"`) {
		t.Fatalf("single: %d %s", a.status, a.body)
	}
	if a.h.Get("RateLimit-Policy") != `"ip";q=1000;w=1;pacer-burst=1000, "tenant";q=100;w=1;pacer-burst=100, "tenant-day";q=100000;w=86400;pacer-unit="messages", "channel";q=5000;w=1;pacer-burst=5000;pacer-unit="messages"` {
		t.Errorf("RateLimit-Policy: %q", a.h.Get("RateLimit-Policy"))
	}
	if m := rateLimitRE.FindStringSubmatch(a.h.Get("RateLimit")); m == nil || m[1] != "tenant" || m[2] != "99" {
		t.Errorf("RateLimit: %q, want the tenant bucket (99 of 100 left) as closest to its limit", a.h.Get("RateLimit"))
	}
	batch := env1("b1") + "\n" + `{"id":"b2","key":"k"}` + "\n\n" + env1("b3") + "\n" + env1("b1") + "\n"
	a = e.do(acmeKey, "whatsapp", "application/x-ndjson", batch)
	if a.status != 202 {
		t.Fatalf("batch: %d %s", a.status, a.body)
	}
	var ans ingest.Answer
	json.Unmarshal(a.body, &ans)
	want := ingest.Answer{
		Accepted: []ingest.Accepted{{Line: 1, ID: "b1"}, {Line: 4, ID: "b3"}, {Line: 5, ID: "b1", Duplicate: true}},
		Rejected: []ingest.Rejected{{Line: 2, ID: "b2", Field: "to", Error: "envelope: to: required"}},
	}
	if fmt.Sprint(ans) != fmt.Sprint(want) {
		t.Fatalf("batch answer:\n got %+v\nwant %+v", ans, want)
	}
	recs := e.records("pacer.whatsapp")
	for _, id := range []string{"m1", "b1", "b3"} {
		if len(recs[id]) != 1 || recs[id][0]["tenant"] != "acme" {
			t.Errorf("id %s: %d records %v, want 1 with tenant acme", id, len(recs[id]), recs[id])
		}
	}
	if len(recs) != 3 {
		t.Errorf("%d ids on the topic, want 3", len(recs))
	}
}

// TestRejectedLinesCounted: every invalid line counts as rejected, those
// of an all-invalid 400 as well as one inside a 202, and a line that is not
// a JSON object names the field "envelope".
func TestRejectedLinesCounted(t *testing.T) {
	e := newEnv(t, opts{})
	for i := range 8 {
		a := e.do(acmeKey, "whatsapp", "application/json", fmt.Sprintf(`{"id":"x%d","key":"k"}`, i))
		if a.status != 400 {
			t.Fatalf("invalid envelope %d: %d %s, want 400", i, a.status, a.body)
		}
		p := isProblem(t, "invalid envelope", a, 400)
		if got, want := fmt.Sprint(p["invalid-params"]), fmt.Sprintf("[map[id:x%d line:1 name:to reason:envelope: to: required]]", i); got != want {
			t.Errorf("invalid-params %s, want %s (the line's id named)", got, want)
		}
	}
	a := e.do(acmeKey, "whatsapp", "application/x-ndjson", "[1]\n\"text\"")
	p := isProblem(t, "two lines not objects", a, 400)
	if got := fmt.Sprint(p["invalid-params"]); got != "[map[line:1 name:envelope reason:envelope: not a JSON object: a JSON array] map[line:2 name:envelope reason:envelope: not a JSON object: a JSON string]]" {
		t.Errorf("invalid-params %s", got)
	}
	a = e.do(acmeKey, "whatsapp", "application/x-ndjson", env1("ok1")+"\n42")
	var ans ingest.Answer
	json.Unmarshal(a.body, &ans)
	if want := []ingest.Rejected{{Line: 2, Field: "envelope", Error: "envelope: not a JSON object: a JSON number"}}; a.status != 202 || fmt.Sprint(ans.Rejected) != fmt.Sprint(want) {
		t.Errorf("batch with a number line: %d %s, want 202 rejecting line 2 as %+v", a.status, a.body, want)
	}
	if got := testutil.ToFloat64(e.srvMetric("pacer_ingest_messages_total", "rejected")); got != 11 {
		t.Errorf("rejected lines counted %v, want 11 (8 + 2 in 400s, 1 in a 202)", got)
	}
}

func TestRetryIsSafe(t *testing.T) {
	e := newEnv(t, opts{})
	first := e.do(acmeKey, "whatsapp", "application/json", env1("r1"))
	again := e.do(acmeKey, "whatsapp", "application/json", env1("r1"))
	if first.status != 202 || again.status != 202 || !strings.Contains(string(again.body), `"duplicate":true`) {
		t.Fatalf("retry by envelope id: %d %s / %d %s", first.status, first.body, again.status, again.body)
	}
	k1 := e.do(acmeKey, "whatsapp", "application/x-ndjson", env1("r2")+"\n"+env1("r3"), "Idempotency-Key", "req-1")
	k2 := e.do(acmeKey, "whatsapp", "application/x-ndjson", env1("r2")+"\n"+env1("r3"), "Idempotency-Key", "req-1")
	if k1.status != 202 || k2.status != 202 || string(k1.body) != string(k2.body) || k2.h.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("Idempotency-Key replay: %d %s / %d %s %v", k1.status, k1.body, k2.status, k2.body, k2.h)
	}
	// The same key with new content would silently drop that content:
	// refused, naming the header.
	k3 := e.do(acmeKey, "whatsapp", "application/x-ndjson", env1("r4"), "Idempotency-Key", "req-1")
	if k3.status != 422 || !strings.Contains(string(k3.body), "Idempotency-Key") {
		t.Fatalf("Idempotency-Key reused with another body: %d %s, want 422 naming the header", k3.status, k3.body)
	}
	recs := e.records("pacer.whatsapp")
	if len(recs["r4"]) != 0 {
		t.Errorf("r4, sent with a reused Idempotency-Key, reached the topic")
	}
	for _, id := range []string{"r1", "r2", "r3"} {
		if len(recs[id]) != 1 {
			t.Errorf("id %s on the topic %d times, want once", id, len(recs[id]))
		}
	}
	// The tenant's day window counted each message once.
	if got := testutil.ToFloat64(e.srvMetric("pacer_ingest_messages_total", "duplicate")); got != 1 {
		t.Errorf("duplicates counted %v, want 1 (the replay produced no new answer lines)", got)
	}
}

// TestCampaignPublishedCounts: the envelopes accepted per campaign are
// added to the campaign's published counter once: not the rejected ones,
// not a duplicate in the batch, not a retry of the same ids, not a replay
// of an Idempotency-Key.
func TestCampaignPublishedCounts(t *testing.T) {
	e := newEnv(t, opts{})
	ctx := context.Background()
	camp := func(id, c string) string {
		return fmt.Sprintf(`{"id":%q,"key":"106540352242922","to":"15551234567","campaign":%q}`, id, c)
	}
	batch := strings.Join([]string{camp("s1", "spring"), camp("s2", "spring"), camp("s1", "spring"),
		`{"id":"s3","key":"106540352242922","campaign":"spring"}`, camp("f1", "fall"), env1("n1")}, "\n")
	if a := e.do(acmeKey, "whatsapp", "application/x-ndjson", batch); a.status != 202 {
		t.Fatalf("batch: %d %s", a.status, a.body)
	}
	// The client retries the whole batch, and again with an Idempotency-Key twice.
	if a := e.do(acmeKey, "whatsapp", "application/x-ndjson", batch); a.status != 202 {
		t.Fatalf("retry: %d %s", a.status, a.body)
	}
	more := camp("s4", "spring") + "\n" + camp("s5", "spring")
	for range 2 {
		if a := e.do(acmeKey, "whatsapp", "application/x-ndjson", more, "Idempotency-Key", "k-spring"); a.status != 202 {
			t.Fatalf("with Idempotency-Key: %d %s", a.status, a.body)
		}
	}
	for c, want := range map[string]int64{"spring": 4, "fall": 1} {
		st, err := e.ctl.CampaignStatus(ctx, "whatsapp", c)
		if err != nil {
			t.Fatal(err)
		}
		if st.Published != want || st.Remaining != want {
			t.Errorf("campaign %s: published %d, remaining %d; want %d accepted once", c, st.Published, st.Remaining, want)
		}
	}
	// Both are in the channel's index, the latest first.
	recent, err := e.ctl.Recent(ctx, "whatsapp", time.Now().Add(-time.Minute), 10)
	if err != nil || len(recent) != 2 || recent[0].Published+recent[1].Published != 5 {
		t.Errorf("recent campaigns %+v, %v; want spring and fall", recent, err)
	}
	if recs := e.records("pacer.whatsapp"); len(recs) != 6 {
		t.Errorf("%d ids on the topic, want 6 (s1, s2, f1, n1, s4, s5)", len(recs))
	}
}

func (e *env) srvMetric(name, label string) prometheus.Collector {
	mfs, _ := e.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "x"}, func() float64 {
						if m.Counter != nil {
							return m.Counter.GetValue()
						}
						return m.Gauge.GetValue()
					})
				}
			}
		}
	}
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "x"}, func() float64 { return 0 })
}

func TestAuth(t *testing.T) {
	e := newEnv(t, opts{})
	for _, c := range []struct {
		name, key, channel, body string
		status                   int
		field                    string
	}{
		{"no key", "", "whatsapp", env1("a"), 401, ""},
		{"unknown key", "nope", "whatsapp", env1("a"), 401, ""},
		{"channel not allowed", otherKey, "whatsapp", env1("a"), 403, ""},
		{"unknown channel", acmeKey, "telegram", env1("a"), 404, ""},
		{"tenant from the body", acmeKey, "whatsapp", `{"id":"a","key":"k","to":"t","tenant":"other"}`, 400, "tenant"},
		{"invalid envelope", acmeKey, "whatsapp", `{"id":"a","key":"k"}`, 400, "to"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := e.do(c.key, c.channel, "application/json", c.body)
			if a.status != c.status || a.h.Get("Content-Type") != "application/problem+json" || a.h.Get("RateLimit") == "" {
				t.Fatalf("got %d %v %s", a.status, a.h, a.body)
			}
			if c.status == 401 && a.h.Get("WWW-Authenticate") == "" {
				t.Errorf("401 without WWW-Authenticate")
			}
			if c.field != "" && !strings.Contains(string(a.body), `"name":"`+c.field+`"`) {
				t.Errorf("400 does not name field %s: %s", c.field, a.body)
			}
			if strings.Contains(string(a.body), acmeKey) || strings.Contains(string(a.body), "nope") {
				t.Errorf("the API key is echoed: %s", a.body)
			}
		})
	}
	if n := len(e.records("pacer.whatsapp")); n != 0 {
		t.Errorf("%d records produced by refused requests", n)
	}
}

func TestQuotaRefusal(t *testing.T) {
	e := newEnv(t, opts{rate: 1, burst: 2, day: 1000})
	for i := range 2 {
		if a := e.do(acmeKey, "whatsapp", "application/json", env1(fmt.Sprint("q", i))); a.status != 202 {
			t.Fatalf("request %d: %d %s", i, a.status, a.body)
		}
	}
	a := e.do(acmeKey, "whatsapp", "application/json", env1("q2"))
	p := a.json(t)
	if a.status != 429 || p["tier"] != "tenant" || a.h.Get("Retry-After") != "1" || !strings.HasPrefix(a.h.Get("RateLimit"), `"tenant";r=0;t=1`) {
		t.Fatalf("third request: %d %v %s", a.status, a.h, a.body)
	}
	// The refusal took nothing from the day window: 2 of 1000 counted.
	e.mr.SetTime(t0.Add(2 * time.Second))
	a = e.do(acmeKey, "whatsapp", "application/json", env1("q3"))
	if a.status != 202 {
		t.Fatalf("after refill: %d %s", a.status, a.body)
	}
	day := e.mr.HGet("pacer:{ingest}:tenant-day:acme", "cur")
	if day != "3" {
		t.Fatalf("day window counted %q messages, want 3 (a refused request counts none)", day)
	}
}

func TestIPTierAndProxies(t *testing.T) {
	e := newEnv(t, opts{ip: bucket.Limit{PerSecond: 1, Burst: 1}, trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	a := e.do(acmeKey, "whatsapp", "application/json", env1("i1"), "X-Forwarded-For", "198.51.100.7")
	b := e.do(acmeKey, "whatsapp", "application/json", env1("i2"), "X-Forwarded-For", "198.51.100.8")
	c := e.do(acmeKey, "whatsapp", "application/json", env1("i3"), "X-Forwarded-For", "198.51.100.7")
	if a.status != 202 || b.status != 202 || c.status != 429 || c.json(t)["tier"] != "ip" {
		t.Fatalf("ip tier behind a trusted proxy: %d %d %d %s", a.status, b.status, c.status, c.body)
	}
	// Not trusted: X-Forwarded-For is ignored, every request is 127.0.0.1's.
	e2 := newEnv(t, opts{ip: bucket.Limit{PerSecond: 1, Burst: 1}})
	a = e2.do(acmeKey, "whatsapp", "application/json", env1("j1"), "X-Forwarded-For", "198.51.100.7")
	b = e2.do(acmeKey, "whatsapp", "application/json", env1("j2"), "X-Forwarded-For", "198.51.100.8")
	if a.status != 202 || b.status != 429 {
		t.Fatalf("X-Forwarded-For from an untrusted peer was believed: %d %d", a.status, b.status)
	}
}

func TestTooLarge(t *testing.T) {
	e := newEnv(t, opts{})
	big := `{"id":"x","key":"k","to":"t","payload":{"a":"` + strings.Repeat("x", ingest.MaxEnvelopeBytes) + `"}}`
	if a := e.do(acmeKey, "whatsapp", "application/json", big); a.status != 413 {
		t.Errorf("envelope over 1 MiB: %d", a.status)
	}
	var sb strings.Builder
	for i := 0; sb.Len() <= ingest.MaxRequestBytes; i++ {
		sb.WriteString(`{"id":"` + fmt.Sprint(i) + `","key":"k","to":"t","payload":{"a":"` + strings.Repeat("x", 900<<10) + `"}}` + "\n")
	}
	if a := e.do(acmeKey, "whatsapp", "application/x-ndjson", sb.String()); a.status != 413 {
		t.Errorf("request over 10 MiB: %d", a.status)
	}
	var lines []string
	for i := range ingest.MaxBatch + 1 {
		lines = append(lines, env1(fmt.Sprint("n", i)))
	}
	if a := e.do(acmeKey, "whatsapp", "application/x-ndjson", strings.Join(lines, "\n")); a.status != 413 {
		t.Errorf("%d envelopes: %d", ingest.MaxBatch+1, a.status)
	}
	if a := e.do(acmeKey, "whatsapp", "text/plain", env1("z")); a.status != 415 {
		t.Errorf("text/plain: %d", a.status)
	}
}

func TestKafkaDown(t *testing.T) {
	e := newEnv(t, opts{kafkaAddrs: []string{"127.0.0.1:1"}})
	a := e.do(acmeKey, "whatsapp", "application/json", env1("k1"))
	if a.status != 503 || a.h.Get("Retry-After") == "" {
		t.Fatalf("Kafka unreachable: %d %v %s, want 503 with Retry-After", a.status, a.h, a.body)
	}
	// The id was released: once Kafka is back, the retry is produced.
	if v := e.mr.Exists("pacer:{ingest}:id:acme:whatsapp:k1"); v {
		t.Errorf("the failed id is still claimed")
	}
}

func TestRedisDown(t *testing.T) {
	t.Run("closed", func(t *testing.T) {
		e := newEnv(t, opts{})
		e.mr.Close()
		a := e.do(acmeKey, "whatsapp", "application/json", env1("c1"))
		if a.status != 503 || a.h.Get("Retry-After") == "" {
			t.Fatalf("closed: %d %s", a.status, a.body)
		}
	})
	t.Run("local", func(t *testing.T) {
		// Tenant burst 4 over 2 expected replicas: this process grants 2.
		e := newEnv(t, opts{rate: 0.01, burst: 4, day: 1000, failure: "local"})
		e.mr.Close()
		var got []int
		for i := range 3 {
			got = append(got, e.do(acmeKey, "whatsapp", "application/json", env1(fmt.Sprint("l", i))).status)
		}
		if fmt.Sprint(got) != "[202 202 429]" {
			t.Fatalf("local quotas: %v, want [202 202 429] (half the burst of 4)", got)
		}
		if v := testutil.ToFloat64(e.srvMetric("pacer_ingest_redis_fallback", "")); v != 0 {
			// srvMetric matches by label; the gauge has none: read it directly.
		}
		mfs, _ := e.reg.Gather()
		found := false
		for _, mf := range mfs {
			if mf.GetName() == "pacer_ingest_redis_fallback" {
				found = mf.GetMetric()[0].GetGauge().GetValue() == 1
			}
		}
		if !found {
			t.Errorf("pacer_ingest_redis_fallback is not 1 while Redis is down")
		}
		if a := e.do(acmeKey, "whatsapp", "application/json", env1("l0")); a.status != 429 {
			// the retry of l0 is still refused by the tenant tier, as it would be on Redis
			t.Logf("retry: %d", a.status)
		}
	})
}

func TestConcurrentSameID(t *testing.T) {
	e := newEnv(t, opts{})
	var wg sync.WaitGroup
	codes := make([]int, 16)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = e.do(acmeKey, "whatsapp", "application/json", env1("same")).status
		}()
	}
	wg.Wait()
	for _, c := range codes {
		if c != 202 && c != 409 {
			t.Fatalf("codes %v: want only 202 and 409", codes)
		}
	}
	if n := len(e.records("pacer.whatsapp")["same"]); n != 1 {
		t.Fatalf("id on the topic %d times under 16 concurrent requests, want 1", n)
	}
}

// TestTenantsFileMissingLogsOnceAMinute: a tenants file missing for 150 s,
// polled every second, logs "not reloaded" three times (at once, a minute
// on, two minutes on), then once "readable again" when it is back.
func TestTenantsFileMissingLogsOnceAMinute(t *testing.T) {
	path := t.TempDir() + "/tenants.json"
	os.WriteFile(path, []byte(tenantsJSON(1, 1, 1)), 0o600)
	tf, err := ingest.LoadTenantFile(path, []string{"whatsapp", "sendgrid"})
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return buf.Write(p)
		}), nil))
		ctx, cancel := context.WithCancel(t.Context())
		go tf.Watch(ctx, time.Second, log)
		os.Remove(path)
		time.Sleep(150*time.Second + time.Second/2)
		os.WriteFile(path, []byte(tenantsJSON(1, 1, 1)), 0o600)
		time.Sleep(2 * time.Second)
		cancel()
		synctest.Wait()
		mu.Lock()
		out := buf.String()
		mu.Unlock()
		if n := strings.Count(out, "tenants file not reloaded"); n != 3 {
			t.Errorf("%d not-reloaded lines while the file was missing 150 s, want 3:\n%s", n, out)
		}
		if n := strings.Count(out, "tenants file readable again"); n != 1 {
			t.Errorf("%d readable-again lines, want 1:\n%s", n, out)
		}
	})
	if tf.Tenants().Lookup(acmeKey) == nil {
		t.Error("the tenants were lost while the file was missing")
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestTenantsFile(t *testing.T) {
	_, err := ingest.ParseTenants([]byte(`{"tenants":[{"id":"a b","key_sha256":["zz"],"requests_per_second":0,"messages_per_day":0,"channels":["telegram"]}]}`), []string{"whatsapp"})
	for _, want := range []string{"id: must be", "key_sha256: entry 1", "requests_per_second", "messages_per_day", `"telegram" is not a channel`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %q", err, want)
		}
	}
	dir := t.TempDir()
	path := dir + "/tenants.json"
	os.WriteFile(path, []byte(tenantsJSON(1, 1, 1)), 0o600)
	tf, err := ingest.LoadTenantFile(path, []string{"whatsapp", "sendgrid"})
	if err != nil {
		t.Fatal(err)
	}
	if tf.Tenants().Lookup(acmeKey) == nil || tf.Tenants().Lookup("new-key") != nil {
		t.Fatal("lookup before reload")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go tf.Watch(ctx, 10*time.Millisecond, testLogger(t))
	os.WriteFile(path+".tmp", []byte(strings.Replace(tenantsJSON(1, 1, 1), digest(acmeKey), digest("new-key"), 1)), 0o600)
	os.Rename(path+".tmp", path)
	deadline := time.Now().Add(10 * time.Second)
	for tf.Tenants().Lookup("new-key") == nil {
		if time.Now().After(deadline) {
			t.Fatal("the new key was not loaded within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if tf.Tenants().Lookup(acmeKey) != nil {
		t.Error("the removed key still works")
	}
	// A bad file keeps the tenants before.
	os.WriteFile(path, []byte(`{"tenants":[{"id":""}]}`), 0o600)
	time.Sleep(200 * time.Millisecond)
	if tf.Tenants().Lookup("new-key") == nil {
		t.Error("a bad file replaced the good tenants")
	}
}

// raw sends method to path with the header pairs h, without the OpenAPI
// check (the document describes the API's operations, not every method).
func (e *env) raw(method, path, body string, h ...string) answer {
	e.t.Helper()
	r, _ := http.NewRequest(method, e.url+path, strings.NewReader(body))
	for i := 0; i+1 < len(h); i += 2 {
		r.Header.Set(h[i], h[i+1])
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		e.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return answer{status: resp.StatusCode, h: resp.Header, body: b}
}

// isProblem checks that a is an RFC 9457 problem of status with the
// RateLimit fields, and returns its members.
func isProblem(t *testing.T, what string, a answer, status int) map[string]any {
	t.Helper()
	if a.status != status || a.h.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%s: %d %q %s, want %d application/problem+json", what, a.status, a.h.Get("Content-Type"), a.body, status)
	}
	p := a.json(t)
	if p["status"] != float64(status) || p["type"] == "" || p["title"] == "" || p["detail"] == "" {
		t.Errorf("%s: problem %v lacks status %d, type, title or detail", what, p, status)
	}
	if a.h.Get("RateLimit") == "" || a.h.Get("RateLimit-Policy") == "" {
		t.Errorf("%s: no RateLimit fields: %v", what, a.h)
	}
	return p
}

// TestNotFoundAndMethodNotAllowed: every error of the API is problem+json,
// the ones the router gives too: 405 names the allowed methods in Allow,
// 404 the path.
func TestNotFoundAndMethodNotAllowed(t *testing.T) {
	e := newEnv(t, opts{})
	for _, m := range []string{"GET", "PUT", "DELETE", "PATCH"} {
		a := e.raw(m, "/v1/channels/whatsapp/messages", "", "Authorization", "Bearer "+acmeKey)
		p := isProblem(t, m+" messages", a, 405)
		if a.h.Get("Allow") != "POST" || !strings.Contains(p["detail"].(string), m) {
			t.Errorf("%s messages: Allow %q, detail %q; want Allow POST and the method named", m, a.h.Get("Allow"), p["detail"])
		}
	}
	a := e.raw("POST", "/openapi.yaml", "")
	if isProblem(t, "POST /openapi.yaml", a, 405); a.h.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /openapi.yaml: Allow %q, want GET, HEAD", a.h.Get("Allow"))
	}
	a = e.raw("GET", "/v1/channels/whatsapp/mesages", "")
	if p := isProblem(t, "unknown path", a, 404); !strings.Contains(p["detail"].(string), "/v1/channels/whatsapp/mesages") {
		t.Errorf("404 does not name the path: %v", p)
	}
	if a := e.raw("GET", "/openapi.yaml", ""); a.status != 200 || !bytes.Equal(a.body, ingest.OpenAPI) {
		t.Errorf("GET /openapi.yaml: %d", a.status)
	}
	// They count against the client IP like any unauthenticated request.
	e2 := newEnv(t, opts{ip: bucket.Limit{PerSecond: 1, Burst: 1}})
	e2.raw("GET", "/v1/channels/whatsapp/messages", "")
	if a := e2.raw("GET", "/nothing", ""); a.status != 429 || a.h.Get("Content-Type") != "application/problem+json" {
		t.Errorf("second request from a spent IP: %d %s, want 429 problem+json", a.status, a.body)
	}
}

// TestContentType: the body's type is never guessed: a missing or other
// Content-Type, a charset other than UTF-8 and a compressed body get 415
// naming the expected types (and Accept-Post listing them); nothing is
// produced. application/json and application/x-ndjson, with or without
// charset=utf-8, are accepted.
func TestContentType(t *testing.T) {
	e := newEnv(t, opts{})
	for i, c := range []struct {
		ctype, encoding string
		want            string
	}{
		{"", "", "no Content-Type"},
		{"text/plain", "", `"text/plain"`},
		{"application/x-www-form-urlencoded", "", "application/x-www-form-urlencoded"},
		{"application/json; charset=iso-8859-1", "", "iso-8859-1"},
		{"application/json;;", "", "is not a media type"},
		{"application/json", "gzip", "gzip"},
	} {
		h := []string{"Authorization", "Bearer " + acmeKey}
		if c.ctype != "" {
			h = append(h, "Content-Type", c.ctype)
		}
		if c.encoding != "" {
			h = append(h, "Content-Encoding", c.encoding)
		}
		a := e.raw("POST", "/v1/channels/whatsapp/messages", env1(fmt.Sprint("ct", i)), h...)
		p := isProblem(t, fmt.Sprintf("Content-Type %q, Content-Encoding %q", c.ctype, c.encoding), a, 415)
		d, _ := p["detail"].(string)
		if !strings.Contains(d, c.want) || a.h.Get("Accept-Post") != ingest.AcceptPost {
			t.Errorf("Content-Type %q: detail %q, Accept-Post %q; want the detail to say %q and Accept-Post %q",
				c.ctype, d, a.h.Get("Accept-Post"), c.want, ingest.AcceptPost)
		}
		if c.encoding == "" && (!strings.Contains(d, "application/json") || !strings.Contains(d, "application/x-ndjson")) {
			t.Errorf("Content-Type %q: detail %q does not name the expected types", c.ctype, d)
		}
	}
	// The OpenAPI check of a 415 too (with a Content-Type the document's
	// request body does not list).
	if a := e.do(acmeKey, "whatsapp", "text/plain", env1("ct-oapi")); a.status != 415 {
		t.Errorf("text/plain: %d", a.status)
	}
	for i, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON; charset=UTF-8", "application/x-ndjson; charset=utf-8"} {
		if a := e.do(acmeKey, "whatsapp", ct, env1(fmt.Sprint("ok", i))); a.status != 202 {
			t.Errorf("Content-Type %q: %d %s, want 202", ct, a.status, a.body)
		}
	}
	recs := e.records("pacer.whatsapp")
	if len(recs) != 4 {
		t.Errorf("%d ids on the topic, want the 4 accepted ones: %v", len(recs), recs)
	}
}

// TestTenantSetOnEveryRecord: whatever form the envelope takes (no tenant,
// the key's tenant, tenant null or "", the member's name escaped, the word
// in the payload), the record on the topic is one envelope that
// envelope.Parse accepts (no member given twice) with the key's
// tenant and the rest of the content unchanged.
func TestTenantSetOnEveryRecord(t *testing.T) {
	e := newEnv(t, opts{})
	bodies := map[string]string{
		"plain":   `{"id":"t1","key":"k","to":"1555","payload":{"text":"hi"}}`,
		"spaces":  "  \t{ \"id\":\"t2\" , \"key\":\"k\",\"to\":\"1555\"}  ",
		"same":    `{"id":"t3","key":"k","to":"1555","tenant":"acme"}`,
		"null":    `{"id":"t4","key":"k","to":"1555","tenant":null}`,
		"empty":   `{"id":"t5","key":"k","to":"1555","tenant":""}`,
		"escaped": `{"id":"t6","key":"k","to":"1555","te\u006eant":null}`,
		"payload": `{"id":"t7","key":"k","to":"1555","payload":{"text":"dear tenant"}}`,
	}
	var lines []string
	for _, b := range bodies {
		lines = append(lines, b)
	}
	a := e.do(acmeKey, "whatsapp", "application/x-ndjson", strings.Join(lines, "\n")+"\r\n")
	if a.status != 202 {
		t.Fatalf("%d %s", a.status, a.body)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.kc.ListenAddrs()...), kgo.ConsumeTopics("pacer.whatsapp"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string]envelope.Envelope{}
	for len(got) < len(bodies) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		fs := cl.PollFetches(ctx)
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut {
			break
		}
		fs.EachRecord(func(r *kgo.Record) {
			env, err := envelope.Parse(r.Value)
			if err != nil {
				t.Errorf("record %s: %v", r.Value, err)
				return
			}
			got[env.ID] = env
		})
	}
	for name, id := range map[string]string{"plain": "t1", "spaces": "t2", "same": "t3", "null": "t4", "empty": "t5", "escaped": "t6", "payload": "t7"} {
		env, ok := got[id]
		if !ok || env.Tenant != "acme" || env.Key != "k" || env.To != "1555" {
			t.Errorf("%s: record %+v (found %v), want tenant acme, key k, to 1555", name, env, ok)
		}
	}
	if p := string(got["t7"].Payload); p != `{"text":"dear tenant"}` || string(got["t1"].Payload) != `{"text":"hi"}` {
		t.Errorf("payloads changed: %s, %s", got["t7"].Payload, got["t1"].Payload)
	}
}

// TestProduceTimeoutWhileKafkaSilent: Kafka takes a produce request and
// does not answer (a paused broker). The client gets its 503 at the
// produce timeout (3 s here), not when Kafka answers; once Kafka answers
// and the record is written, a retry of the same id is answered duplicate
// and the topic holds the record once.
func TestProduceTimeoutWhileKafkaSilent(t *testing.T) {
	e := newEnv(t, opts{})
	// The topic's partitions are known before Kafka goes silent.
	if a := e.do(acmeKey, "whatsapp", "application/json", env1("warm")); a.status != 202 {
		t.Fatalf("warm-up: %d %s", a.status, a.body)
	}
	release := make(chan struct{})
	var once sync.Once
	wake := func() { once.Do(func() { close(release) }) }
	t.Cleanup(wake)
	e.kc.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.kc.SleepControl(func() { <-release })
		return nil, nil, false // then handled as usual: the record is written
	})
	// Kafka answers after 15 s: without the bound the 503 would come then.
	timer := time.AfterFunc(15*time.Second, wake)
	defer timer.Stop()
	start := time.Now()
	a := e.do(acmeKey, "whatsapp", "application/json", env1("slow1"))
	took := time.Since(start)
	p := isProblem(t, "Kafka silent", a, 503)
	if a.h.Get("Retry-After") == "" || p["type"] != "https://pacer.dev/problems/kafka-unavailable" {
		t.Errorf("Kafka silent: %v %s, want a kafka-unavailable problem with Retry-After", a.h, a.body)
	}
	if took > 9*time.Second {
		t.Fatalf("Kafka silent: answered after %v, want about the 3 s produce timeout", took)
	}
	wake()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := e.do(acmeKey, "whatsapp", "application/json", env1("slow1"))
		if r.status == 202 {
			if !strings.Contains(string(r.body), `"duplicate":true`) {
				t.Fatalf("retry after Kafka wrote the record: %s, want duplicate", r.body)
			}
			break
		}
		if r.status != 409 || time.Now().After(deadline) {
			t.Fatalf("retry while the late record settles: %d %s, want 409 then 202 duplicate", r.status, r.body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := len(e.records("pacer.whatsapp")["slow1"]); n != 1 {
		t.Errorf("slow1 on the topic %d times, want once", n)
	}
}

// TestProduceTimeoutBoundsPartitionLookup: a freshly started ingest, which
// does not know the topic's partition count yet, meets a silent Kafka (it
// answers neither metadata nor produce requests). The lookup of the count
// and the produce share the one produce timeout (3 s here): the client gets
// its 503 at about 3 s, not after a lookup's own wait and then 3 s more.
func TestProduceTimeoutBoundsPartitionLookup(t *testing.T) {
	e := newEnv(t, opts{})
	release := make(chan struct{})
	var once sync.Once
	wake := func() { once.Do(func() { close(release) }) }
	t.Cleanup(wake)
	for _, k := range []kmsg.Key{kmsg.Metadata, kmsg.Produce, kmsg.CreateTopics} {
		e.kc.ControlKey(int16(k), func(kmsg.Request) (kmsg.Response, error, bool) {
			e.kc.SleepControl(func() { <-release })
			return nil, nil, false
		})
	}
	timer := time.AfterFunc(30*time.Second, wake)
	defer timer.Stop()
	start := time.Now()
	a := e.do(acmeKey, "whatsapp", "application/json", env1("fresh1"))
	took := time.Since(start)
	isProblem(t, "Kafka silent on a fresh ingest", a, 503)
	// 3 s plus room for a loaded machine; the lookup's own 5 s wait before
	// the 3 s of the produce made it 8 s.
	if took > 6*time.Second {
		t.Fatalf("Kafka silent on a fresh ingest: answered after %v, want about the 3 s produce timeout", took)
	}
	if took < 2500*time.Millisecond {
		t.Fatalf("Kafka silent on a fresh ingest: answered after %v, before the 3 s produce timeout", took)
	}
}

// TestReadyNeedsKafka: the gateway is ready with Kafka answering and not
// with Kafka unreachable (each request would wait out its produce timeout
// for a 503).
func TestReadyNeedsKafka(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if e := newEnv(t, opts{}); !e.srv.Ready(ctx) {
		t.Error("Kafka answering: not ready")
	}
	if e := newEnv(t, opts{kafkaAddrs: []string{"127.0.0.1:1"}}); e.srv.Ready(ctx) {
		t.Error("Kafka unreachable: ready")
	}
}

// TestRateLimitRemaining: RateLimit's r is the quota units left of the
// policy's q: a tenant bucket of 5/s with a burst of 10, advertised as
// q=5, says r=5 with 9 tokens left, not 9; and a batch refused by the day
// quota because it is larger than what remains says what remains (400),
// not 0.
func TestRateLimitRemaining(t *testing.T) {
	e := newEnv(t, opts{rate: 5, burst: 10, day: 1000})
	a := e.do(acmeKey, "whatsapp", "application/json", env1("r0"))
	if a.status != 202 || a.h.Get("RateLimit") != `"tenant";r=5;t=1` {
		t.Errorf("first request: %d, RateLimit %q; want 202, \"tenant\";r=5;t=1 (9 tokens of q=5)", a.status, a.h.Get("RateLimit"))
	}
	batch := func(prefix string, n int) string {
		var b strings.Builder
		for i := range n {
			b.WriteString(env1(fmt.Sprintf("%s%d", prefix, i)) + "\n")
		}
		return b.String()
	}
	if a := e.do(acmeKey, "whatsapp", "application/x-ndjson", batch("b", 599)); a.status != 202 {
		t.Fatalf("batch of 599: %d %s", a.status, a.body)
	}
	a = e.do(acmeKey, "whatsapp", "application/x-ndjson", batch("c", 500))
	if p := a.json(t); a.status != 429 || p["tier"] != "tenant-day" || !strings.HasPrefix(a.h.Get("RateLimit"), `"tenant-day";r=400;`) {
		t.Errorf("batch of 500 with 400 left of the day: %d tier %v, RateLimit %q; want 429 tenant-day, r=400", a.status, p["tier"], a.h.Get("RateLimit"))
	}
}

// TestRateLimitResetDayWindow: the t of the day quota on its last 202 is
// the Retry-After of the next request's 429, not the end of the fixed
// day: the sliding count falls gradually, so 1000 messages accepted an
// hour after midnight leave room for one more 86.4 s into the next day
// (23 h 1 min 26.4 s, 82,887 s rounded up), not at midnight (82,800 s).
func TestRateLimitResetDayWindow(t *testing.T) {
	e := newEnv(t, opts{rate: 100, burst: 100, day: 1000})
	e.mr.SetTime(t0.Add(time.Hour))
	var b strings.Builder
	for i := range 1000 {
		b.WriteString(env1(fmt.Sprintf("d%d", i)) + "\n")
	}
	a := e.do(acmeKey, "whatsapp", "application/x-ndjson", b.String())
	if a.status != 202 || a.h.Get("RateLimit") != `"tenant-day";r=0;t=82887` {
		t.Errorf("last 202 of the day: %d, RateLimit %q; want \"tenant-day\";r=0;t=82887", a.status, a.h.Get("RateLimit"))
	}
	next := e.do(acmeKey, "whatsapp", "application/json", env1("over"))
	if next.status != 429 || next.h.Get("Retry-After") != "82887" {
		t.Errorf("next request: %d, Retry-After %q; want 429 after 82887 s, the t of the last 202", next.status, next.h.Get("Retry-After"))
	}
}

// verrs renders validation errors of openapi.yaml.
func verrs(errs []*verrors.ValidationError) string {
	var msgs []string
	for _, v := range errs {
		msgs = append(msgs, v.Message+": "+v.Reason)
		for _, s := range v.SchemaValidationErrors {
			msgs = append(msgs, "  "+s.Reason)
		}
	}
	return strings.Join(msgs, "\n")
}

// TestOpsPathsInOpenAPI: /healthz, /readyz (ready, and not ready naming
// Kafka), /metrics and /openapi.yaml are described by openapi.yaml: each
// real request is valid by it and so is its answer; and every path's 405
// for another method is problem+json with Allow, as the document's
// MethodNotAllowed says (validated against the path's own operation,
// under which the document lists it).
func TestOpsPathsInOpenAPI(t *testing.T) {
	e := newEnv(t, opts{})
	down := newEnv(t, opts{kafkaAddrs: []string{"127.0.0.1:1"}})
	check := func(e *env, method, path, docMethod string, want int, h ...string) answer {
		t.Helper()
		a := e.raw(method, path, "", h...)
		if a.status != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, a.status, a.body, want)
		}
		vr, _ := http.NewRequest(docMethod, "http://localhost:8080"+path, nil)
		for i := 0; i+1 < len(h); i += 2 {
			vr.Header.Set(h[i], h[i+1])
		}
		if method == docMethod {
			if ok, errs := e.oapi.ValidateHttpRequest(vr); !ok {
				t.Errorf("%s %s: request not valid by openapi.yaml:\n%s", method, path, verrs(errs))
			}
		}
		resp := &http.Response{StatusCode: a.status, Header: a.h, Body: io.NopCloser(bytes.NewReader(a.body)), Request: vr}
		if ok, errs := e.oapi.ValidateHttpResponse(vr, resp); !ok {
			t.Errorf("%s %s: answer %d %q drifts from openapi.yaml:\n%s", method, path, a.status, a.body, verrs(errs))
		}
		return a
	}
	if a := check(e, "GET", "/healthz", "GET", 200); string(a.body) != "ok\n" {
		t.Errorf("/healthz: %q", a.body)
	}
	if a := check(e, "GET", "/readyz", "GET", 200); string(a.body) != "ready\n" {
		t.Errorf("/readyz: %q", a.body)
	}
	if a := check(down, "GET", "/readyz", "GET", 503); !strings.HasPrefix(string(a.body), "not ready: kafka: ") {
		t.Errorf("/readyz with Kafka unreachable: %q, want it named", a.body)
	}
	if a := check(e, "GET", "/metrics", "GET", 200); !strings.Contains(string(a.body), "pacer_ingest_redis_fallback 0") {
		t.Errorf("/metrics: no pacer_ingest_redis_fallback in %.200q", a.body)
	}
	check(e, "GET", "/metrics", "GET", 200, "Accept", "application/openmetrics-text; version=1.0.0")
	check(e, "GET", "/openapi.yaml", "GET", 200)
	for _, c := range []struct{ method, path, doc, allow string }{
		{"GET", "/v1/channels/whatsapp/messages", "POST", "POST"},
		{"POST", "/openapi.yaml", "GET", "GET, HEAD"},
		{"POST", "/healthz", "GET", "GET, HEAD"},
		{"DELETE", "/readyz", "GET", "GET, HEAD"},
		{"PUT", "/metrics", "GET", "GET, HEAD"},
	} {
		a := check(e, c.method, c.path, c.doc, 405)
		p := isProblem(t, c.method+" "+c.path, a, 405)
		if a.h.Get("Allow") != c.allow || !strings.Contains(p["detail"].(string), c.method) {
			t.Errorf("%s %s: Allow %q, detail %q; want Allow %q and the method named", c.method, c.path, a.h.Get("Allow"), p["detail"], c.allow)
		}
	}
	// The ops paths are not answers of the API: of the 200s only GET
	// /openapi.yaml's counts.
	if got := testutil.ToFloat64(e.srvMetric("pacer_ingest_requests_total", "200")); got != 1 {
		t.Errorf("pacer_ingest_requests_total{code=\"200\"} = %v, want 1 (GET /openapi.yaml)", got)
	}
}

// TestInvalidParamsNamesDocumented: every 422 the API answers (an
// Idempotency-Key reused with another body is the only one) names in
// invalid-params only values openapi.yaml's 422 lists.
func TestInvalidParamsNamesDocumented(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]struct {
				Content map[string]struct {
					Schema struct {
						AllOf []struct {
							Properties map[string]struct {
								Items struct {
									Properties map[string]struct {
										Enum []string
									}
								}
							}
						} `json:"allOf"`
					}
				}
			}
		}
	}
	if err := yaml.Unmarshal(ingest.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, part := range doc.Paths["/v1/channels/{channel}/messages"]["post"].Responses["422"].Content["application/problem+json"].Schema.AllOf {
		names = append(names, part.Properties["invalid-params"].Items.Properties["name"].Enum...)
	}
	if len(names) == 0 {
		t.Fatal("openapi.yaml's 422 lists no invalid-params names")
	}
	e := newEnv(t, opts{})
	if a := e.do(acmeKey, "whatsapp", "application/json", env1("k1"), "Idempotency-Key", "reused"); a.status != 202 {
		t.Fatalf("first use of the key: %d %s", a.status, a.body)
	}
	a := e.do(acmeKey, "whatsapp", "application/json", env1("k2"), "Idempotency-Key", "reused")
	p := isProblem(t, "reused Idempotency-Key", a, 422)
	params, _ := p["invalid-params"].([]any)
	if len(params) == 0 {
		t.Fatalf("422 without invalid-params: %s", a.body)
	}
	for _, v := range params {
		if name, _ := v.(map[string]any)["name"].(string); !slices.Contains(names, name) {
			t.Errorf("422 names %q; openapi.yaml lists %v", name, names)
		}
	}
}

// TestEnvelopeFieldsInOpenAPI: an envelope with every field the consumer
// reads (priority and not_before too) is accepted and valid by
// openapi.yaml's Envelope, whose additionalProperties is false.
func TestEnvelopeFieldsInOpenAPI(t *testing.T) {
	e := newEnv(t, opts{})
	body := `{"id":"full-1","key":"106540352242922","to":"15551234567","campaign":"spring","priority":"high",` +
		`"not_before":"2030-01-01T00:00:00Z","category":"utility","expires_at":"2030-01-02T00:00:00Z","payload":{"type":"text","text":{"body":"hi"}}}`
	if a := e.do(acmeKey, "whatsapp", "application/json", body); a.status != 202 {
		t.Fatalf("full envelope: %d %s", a.status, a.body)
	}
}

// TestOpenAPIEnvelopeIsTheEnvelope: openapi.yaml's Envelope lists exactly
// the JSON fields of envelope.Envelope, so a field added to one is added
// to the other (additionalProperties false: a generated client would
// refuse a valid envelope otherwise).
func TestOpenAPIEnvelopeIsTheEnvelope(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage
			}
		}
	}
	if err := yaml.Unmarshal(ingest.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	var spec []string
	for name := range doc.Components.Schemas["Envelope"].Properties {
		spec = append(spec, name)
	}
	var code []string
	rt := reflect.TypeFor[envelope.Envelope]()
	for i := range rt.NumField() {
		if name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			code = append(code, name)
		}
	}
	slices.Sort(spec)
	slices.Sort(code)
	if !slices.Equal(spec, code) {
		t.Errorf("openapi.yaml Envelope properties %v; envelope.Envelope's JSON fields %v", spec, code)
	}
}

// TestTenantsFileNotJSON: a tenants file written in YAML (as a manifest
// once named it) is refused saying the JSON object expected.
func TestTenantsFileNotJSON(t *testing.T) {
	_, err := ingest.ParseTenants([]byte("tenants:\n  - id: acme\n"), []string{"whatsapp"})
	if err == nil || !strings.Contains(err.Error(), `JSON object {"tenants":[...]}`) || !strings.Contains(err.Error(), "YAML is not read") {
		t.Errorf("YAML tenants file: %v; want an error saying JSON is expected", err)
	}
}

// TestQuotaRefusalDetailAgreesWithRetryAfter: a 429 whose wait is under a
// millisecond says "retry in 1s" in its detail, as its Retry-After does
// (both rounded up to whole seconds), never "retry in 0s".
func TestQuotaRefusalDetailAgreesWithRetryAfter(t *testing.T) {
	e := newEnv(t, opts{rate: 1, burst: 1, day: 1000})
	if a := e.do(acmeKey, "whatsapp", "application/json", env1("d0")); a.status != 202 {
		t.Fatalf("first request: %d %s", a.status, a.body)
	}
	e.mr.SetTime(t0.Add(time.Second - 200*time.Microsecond))
	a := e.do(acmeKey, "whatsapp", "application/json", env1("d1"))
	if p := a.json(t); a.status != 429 || a.h.Get("Retry-After") != "1" || p["detail"] != `quota "tenant" exceeded; retry in 1s` {
		t.Errorf("request 200µs before the refill: %d, Retry-After %q, detail %q; want 429, 1, %q",
			a.status, a.h.Get("Retry-After"), p["detail"], `quota "tenant" exceeded; retry in 1s`)
	}
}
