package callback_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/callback"
	"github.com/pacerhq/pacer/pacer/outcomes"
	"github.com/pacerhq/pacer/pacer/produce"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// env is one test's outcomes topic, Redis key prefix and producer.
type env struct {
	t      *testing.T
	topic  string
	group  string
	prefix string
	kopts  []kgo.Opt
	rdb    *redis.Client
	prod   *kgo.Client
}

func newEnv(t *testing.T, partitions int) *env {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	e := &env{t: t, topic: "pacer.outcomes.test-" + id, group: "pacer-callbacks-test-" + id, prefix: "pacer-test-" + id + ":",
		kopts: []kgo.Opt{kgo.SeedBrokers(strings.Split(testenv.KafkaBrokers(t), ",")...)}}
	e.rdb = redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), DB: testenv.RedisDB})
	t.Cleanup(func() { e.rdb.Close() })
	e.prod = testenv.KafkaClient(t, strings.Split(testenv.KafkaBrokers(t), ","), kgo.ProducerLinger(0))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := produce.EnsureTopic(ctx, e.prod, e.topic, partitions); err != nil {
		t.Fatal(err)
	}
	return e
}

// publish writes outcome records of tenant for ids (outcome delivered).
func (e *env) publish(tenant string, ids ...string) {
	e.t.Helper()
	var rs []*kgo.Record
	for _, id := range ids {
		v, _ := json.Marshal(outcomes.Record{Tenant: tenant, MessageID: id, Campaign: "c1", Channel: "whatsapp",
			Outcome: outcomes.Delivered, At: time.Now().UTC()})
		rs = append(rs, &kgo.Record{Topic: e.topic, Key: []byte(tenant), Value: v})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.prod.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

// secretFile writes secrets (raw keys) as a callback secret file.
func secretFile(t *testing.T, keys ...[]byte) string {
	t.Helper()
	var parts []string
	for _, k := range keys {
		parts = append(parts, "whsec_"+base64.StdEncoding.EncodeToString(k))
	}
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(strings.Join(parts, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func key(n byte) []byte { return []byte(strings.Repeat(string(rune('a'+n)), 32)) }

// receiver is a tenant's callback endpoint: it verifies every request
// with the Standard Webhooks library and the secret it knows, answers
// with status() and records what it was sent.
type receiver struct {
	t      *testing.T
	wh     *standardwebhooks.Webhook
	status func() int

	mu       sync.Mutex
	attempts []attempt
	ids      map[string]int // message ids of acknowledged batches, after dedupe by webhook-id
	seen     map[string]bool
}

type attempt struct {
	id   string
	at   time.Time
	code int
}

func newReceiver(t *testing.T, secret []byte, status func() int) (*receiver, *httptest.Server) {
	wh, err := standardwebhooks.NewWebhook("whsec_" + base64.StdEncoding.EncodeToString(secret))
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{t: t, wh: wh, status: status, ids: map[string]int{}, seen: map[string]bool{}}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if err := rc.wh.Verify(body, req.Header); err != nil {
		rc.t.Errorf("receiver: signature not verified: %v", err)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	code := rc.status()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	id := req.Header.Get("webhook-id")
	rc.attempts = append(rc.attempts, attempt{id, time.Now(), code})
	if code/100 == 2 && !rc.seen[id] {
		rc.seen[id] = true
		var b callback.Body
		if err := json.Unmarshal(body, &b); err != nil {
			rc.t.Errorf("receiver: body: %v", err)
		}
		for _, o := range b.Data.Outcomes {
			rc.ids[b.Data.Tenant+"/"+o.MessageID+"/"+o.Outcome]++
		}
	}
	w.WriteHeader(code)
}

func (rc *receiver) got() map[string]int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	m := map[string]int{}
	for k, v := range rc.ids {
		m[k] = v
	}
	return m
}

// start runs a dispatcher until the test ends or stop is called.
func (e *env) start(cfg callback.Config, rcv map[string]callback.Receiver) (d *callback.Dispatcher, reg *prometheus.Registry, stop func()) {
	e.t.Helper()
	cfg.Topic, cfg.Group, cfg.KeyPrefix = e.topic, e.group, e.prefix
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(tlog{e.t}, nil))
	}
	reg = prometheus.NewRegistry()
	var mu sync.Mutex
	d, err := callback.New(cfg, e.rdb, func(id string) (callback.Receiver, bool) {
		mu.Lock()
		defer mu.Unlock()
		r, ok := rcv[id]
		return r, ok
	}, reg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, e.kopts) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					e.t.Errorf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				e.t.Error("Run did not return within 30s of its context's end")
			}
		})
	}
	e.t.Cleanup(stop)
	return d, reg, stop
}

func ids(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s-%03d", prefix, i))
	}
	return out
}

func wantOnce(t *testing.T, got map[string]int, tenant string, ids []string) {
	t.Helper()
	if len(got) != len(ids) {
		t.Errorf("%s: receiver got %d distinct outcomes, want %d", tenant, len(got), len(ids))
	}
	for _, id := range ids {
		if n := got[tenant+"/"+id+"/delivered"]; n != 1 {
			t.Errorf("%s: outcome of %s received %d times, want once", tenant, id, n)
		}
	}
}

func ok() int { return http.StatusOK }

// A batch is signed with every secret of the tenant's file (rotation):
// a receiver knowing only one of them verifies it with the Standard
// Webhooks library, and the body carries each outcome's fields.
func TestCallbackSignedBatch(t *testing.T) {
	e := newEnv(t, 3)
	rcvOld, srvOld := newReceiver(t, key(1), ok)
	rcvNew, srvNew := newReceiver(t, key(2), ok)
	both := secretFile(t, key(1), key(2))
	e.start(callback.Config{Wait: 200 * time.Millisecond, Batch: 100}, map[string]callback.Receiver{
		"old": {URL: srvOld.URL, SecretFile: both}, "new": {URL: srvNew.URL, SecretFile: both}})
	e.publish("old", ids("o", 3)...)
	e.publish("new", ids("n", 3)...)
	if !testenv.WaitFor(30*time.Second, 20*time.Millisecond, func() bool {
		return len(rcvOld.got()) == 3 && len(rcvNew.got()) == 3
	}) {
		t.Fatalf("within 30s: old got %v, new got %v", rcvOld.got(), rcvNew.got())
	}
	wantOnce(t, rcvOld.got(), "old", ids("o", 3))
	wantOnce(t, rcvNew.got(), "new", ids("n", 3))
	rcvOld.mu.Lock()
	defer rcvOld.mu.Unlock()
	if len(rcvOld.attempts) != 1 {
		t.Errorf("old: %d POSTs, want 1 batch of 3 (Wait 200ms)", len(rcvOld.attempts))
	}
	if id := rcvOld.attempts[0].id; !strings.HasPrefix(id, "msg_") {
		t.Errorf("webhook-id %q, want msg_...", id)
	}
}

// A receiver that answers 503 gets the same batch again, under the same
// webhook-id, after waits that grow (exponential back-off), until it
// answers 2xx; the failed attempts are counted.
func TestCallbackRetryBackoffKeepsWebhookID(t *testing.T) {
	e := newEnv(t, 1)
	var mu sync.Mutex
	calls := 0
	rcv, srv := newReceiver(t, key(3), func() int {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls <= 4 {
			return http.StatusServiceUnavailable
		}
		return http.StatusNoContent
	})
	_, reg, _ := e.start(callback.Config{Wait: 50 * time.Millisecond, FirstBackoff: 100 * time.Millisecond, MaxBackoff: 2 * time.Second},
		map[string]callback.Receiver{"acme": {URL: srv.URL, SecretFile: secretFile(t, key(3))}})
	e.publish("acme", ids("m", 5)...)
	if !testenv.WaitFor(30*time.Second, 20*time.Millisecond, func() bool { return len(rcv.got()) == 5 }) {
		t.Fatalf("within 30s the receiver got %v", rcv.got())
	}
	wantOnce(t, rcv.got(), "acme", ids("m", 5))
	rcv.mu.Lock()
	as := append([]attempt(nil), rcv.attempts...)
	rcv.mu.Unlock()
	if len(as) != 5 {
		t.Fatalf("%d attempts, want 5 (4 answered 503)", len(as))
	}
	for _, a := range as[1:] {
		if a.id != as[0].id {
			t.Errorf("a retry's webhook-id %s, want the first attempt's %s", a.id, as[0].id)
		}
	}
	// Waits 100ms, 200ms, 400ms, 800ms, each ±20%.
	for i := 1; i < len(as); i++ {
		gap := as[i].at.Sub(as[i-1].at)
		least := time.Duration(float64(100*time.Millisecond) * float64(int(1)<<(i-1)) * 0.8)
		if gap < least {
			t.Errorf("wait before attempt %d: %v, want >= %v (back-off doubling from 100ms)", i+1, gap, least)
		}
	}
	if n := metric(reg, "pacer_callback_attempts_failed_total", "acme"); n != 4 {
		t.Errorf("pacer_callback_attempts_failed_total (tenant acme alone) = %v, want 4", n)
	}
	if n := metric(reg, "pacer_callback_batches_sent_total", "acme"); n != 1 {
		t.Errorf("pacer_callback_batches_sent_total (tenant acme alone) = %v, want 1", n)
	}
}

// Offsets are committed only once the receiver acknowledged: a
// dispatcher stopped while its receiver refuses leaves the outcomes to the
// next one, which sends them all.
func TestCallbackCommitsOnlyAcknowledged(t *testing.T) {
	e := newEnv(t, 2)
	var mu sync.Mutex
	up := false
	status := func() int {
		mu.Lock()
		defer mu.Unlock()
		if up {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	}
	rcv, srv := newReceiver(t, key(4), status)
	rcvs := map[string]callback.Receiver{"acme": {URL: srv.URL, SecretFile: secretFile(t, key(4))}}
	cfg := callback.Config{Wait: 50 * time.Millisecond, FirstBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}
	_, _, stop := e.start(cfg, rcvs)
	e.publish("acme", ids("m", 20)...)
	if !testenv.WaitFor(30*time.Second, 20*time.Millisecond, func() bool {
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		return len(rcv.attempts) >= 3
	}) {
		t.Fatal("the receiver saw fewer than 3 attempts within 30s")
	}
	stop()
	mu.Lock()
	up = true
	mu.Unlock()
	e.start(cfg, rcvs)
	if !testenv.WaitFor(60*time.Second, 20*time.Millisecond, func() bool { return len(rcv.got()) == 20 }) {
		t.Fatalf("within 60s the next dispatcher sent %d of 20 outcomes: the first committed outcomes never acknowledged", len(rcv.got()))
	}
	wantOnce(t, rcv.got(), "acme", ids("m", 20))
}

// An outcome read twice (copies in the topic at once, and the topic
// replayed after it was acknowledged) reaches its receiver once.
func TestCallbackDedupe(t *testing.T) {
	e := newEnv(t, 1)
	rcv, srv := newReceiver(t, key(5), ok)
	_, reg, _ := e.start(callback.Config{Wait: 100 * time.Millisecond}, map[string]callback.Receiver{
		"acme": {URL: srv.URL, SecretFile: secretFile(t, key(5))}})
	ms := ids("m", 10)
	e.publish("acme", append(ms, ms...)...) // each twice, before any is sent
	if !testenv.WaitFor(30*time.Second, 20*time.Millisecond, func() bool { return len(rcv.got()) == 10 }) {
		t.Fatalf("within 30s the receiver got %v", rcv.got())
	}
	rcv.mu.Lock()
	before := len(rcv.attempts)
	rcv.mu.Unlock()
	e.publish("acme", ms...) // a replay, after they were acknowledged
	if !testenv.WaitFor(30*time.Second, 20*time.Millisecond, func() bool {
		rcv.mu.Lock()
		sentAgain := len(rcv.attempts) > before
		rcv.mu.Unlock()
		return sentAgain || metric(reg, "pacer_callback_duplicates_total", "acme") == 10
	}) {
		t.Fatalf("pacer_callback_duplicates_total (tenant acme alone) = %v within 30s, want 10",
			metric(reg, "pacer_callback_duplicates_total", "acme"))
	}
	wantOnce(t, rcv.got(), "acme", ms)
	if n := metric(reg, "pacer_callback_duplicates_total", "acme"); n != 10 {
		t.Errorf("pacer_callback_duplicates_total (tenant acme alone) = %v, want 10", n)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for _, a := range rcv.attempts {
		if a.code != http.StatusOK {
			t.Errorf("attempt answered %d", a.code)
		}
	}
	if len(rcv.seen) != len(rcv.attempts) {
		t.Errorf("%d POSTs under %d webhook-ids: a batch acknowledged was sent again", len(rcv.attempts), len(rcv.seen))
	}
}

// A tenant whose receiver is down holds back neither the other tenant's
// outcomes on the same partition, nor its own once it is up again.
func TestCallbackDownTenantDoesNotBlockAnother(t *testing.T) {
	e := newEnv(t, 1) // both tenants on one partition
	var mu sync.Mutex
	aUp := false
	rcvA, srvA := newReceiver(t, key(6), func() int {
		mu.Lock()
		defer mu.Unlock()
		if aUp {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	})
	rcvB, srvB := newReceiver(t, key(7), ok)
	_, reg, _ := e.start(callback.Config{Wait: 50 * time.Millisecond, Batch: 10, FirstBackoff: 100 * time.Millisecond, MaxBackoff: 300 * time.Millisecond},
		map[string]callback.Receiver{"a": {URL: srvA.URL, SecretFile: secretFile(t, key(6))}, "b": {URL: srvB.URL, SecretFile: secretFile(t, key(7))}})
	// a's first outcomes, then b's once a's receiver refused a batch,
	// interleaved with more of a's.
	e.publish("a", ids("a0", 10)...)
	if !testenv.WaitFor(30*time.Second, 20*time.Millisecond, func() bool {
		return metric(reg, "pacer_callback_attempts_failed_total", "a") >= 1
	}) {
		t.Fatal("no failed attempt to a's receiver within 30s")
	}
	for i := range 5 {
		if i > 0 {
			e.publish("a", ids(fmt.Sprintf("a%d", i), 10)...)
		}
		e.publish("b", ids(fmt.Sprintf("b%d", i), 10)...)
	}
	if !testenv.WaitFor(30*time.Second, 20*time.Millisecond, func() bool { return len(rcvB.got()) == 50 }) {
		t.Fatalf("within 30s, while a's receiver is down, b's got %d of 50 outcomes", len(rcvB.got()))
	}
	if n := len(rcvA.got()); n != 0 {
		t.Fatalf("a's receiver, answering 503, acknowledged %d outcomes", n)
	}
	if n := metric(reg, "pacer_callback_attempts_failed_total", "a"); n < 1 {
		t.Errorf("pacer_callback_attempts_failed_total (tenant a alone) = %v, want >= 1", n)
	}
	mu.Lock()
	aUp = true
	mu.Unlock()
	if !testenv.WaitFor(30*time.Second, 20*time.Millisecond, func() bool { return len(rcvA.got()) == 50 }) {
		t.Fatalf("within 30s of a's receiver coming up it got %d of 50 outcomes", len(rcvA.got()))
	}
	var wantA, wantB []string
	for i := range 5 {
		wantA = append(wantA, ids(fmt.Sprintf("a%d", i), 10)...)
		wantB = append(wantB, ids(fmt.Sprintf("b%d", i), 10)...)
	}
	wantOnce(t, rcvA.got(), "a", wantA)
	wantOnce(t, rcvB.got(), "b", wantB)
}

// A secret file that is not whsec_<base64> is refused naming the file and
// the secret's place, never the secret.
func TestReadSecretsErrors(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s")
	if err := os.WriteFile(p, []byte("whsec_"+base64.StdEncoding.EncodeToString(key(1))+" hunter2-not-a-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := callback.ReadSecrets(p)
	if err == nil || !strings.Contains(err.Error(), "secret 2 of 2: not whsec_ followed by base64") || !strings.Contains(err.Error(), p) {
		t.Fatalf("err = %v, want secret 2 of 2 of %s named", err, p)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("err %q shows the secret", err)
	}
}

// metric returns the value of reg's counter name, 0 when absent; tenant
// names the only tenant whose outcomes count in it (the metrics carry no
// tenant label).
func metric(reg *prometheus.Registry, name, _ string) float64 {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// tlog writes a dispatcher's log lines to the test's log.
type tlog struct{ t *testing.T }

func (w tlog) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// lockedBuf is a log sink the test reads while the dispatcher writes.
type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A callback_url with user:password is logged with the password
// redacted on each retry, never in clear.
func TestCallbackRetryLogRedactsPassword(t *testing.T) {
	e := newEnv(t, 1)
	var mu sync.Mutex
	calls := 0
	rcv, srv := newReceiver(t, key(8), func() int {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls <= 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusNoContent
	})
	withPass := strings.Replace(srv.URL, "http://", "http://user:pa55word@", 1)
	var logs lockedBuf
	e.start(callback.Config{Wait: 50 * time.Millisecond, FirstBackoff: 50 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		map[string]callback.Receiver{"acme": {URL: withPass, SecretFile: secretFile(t, key(8))}})
	e.publish("acme", ids("p", 2)...)
	if !testenv.WaitFor(30*time.Second, 20*time.Millisecond, func() bool { return len(rcv.got()) == 2 }) {
		t.Fatalf("within 30s the receiver got %v", rcv.got())
	}
	out := logs.String()
	want := "url=" + strings.Replace(srv.URL, "http://", "http://user:xxxxx@", 1)
	if strings.Contains(out, "pa55word") || strings.Count(out, want) != 2 {
		t.Errorf("logs hold the password, or not %q twice (two retries):\n%s", want, out)
	}
}
