//go:build e2e

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
	"github.com/pacerhq/pacer/pacer/callback"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// tenantReceiver is a tenant's callback endpoint as a tenant would write
// it: it verifies the signature with the Standard Webhooks library,
// answers 503 until up, and dedupes by webhook-id; it counts every
// outcome of the batches it took, by tenant, message id and outcome.
type tenantReceiver struct {
	t      *testing.T
	wh     *standardwebhooks.Webhook
	upAt   time.Time // 503 before it
	mu     sync.Mutex
	posts  int
	failed int                 // answered 503
	seen   map[string]bool     // webhook-ids taken
	counts map[string]int      // "<tenant>/<message id>/<outcome>" -> times received
	ids    map[string]struct{} // message ids received
}

func newTenantReceiver(t *testing.T, secret []byte, upAt time.Time) (*tenantReceiver, string) {
	wh, err := standardwebhooks.NewWebhookRaw(secret)
	if err != nil {
		t.Fatal(err)
	}
	r := &tenantReceiver{t: t, wh: wh, upAt: upAt, seen: map[string]bool{}, counts: map[string]int{}, ids: map[string]struct{}{}}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv.URL
}

func (r *tenantReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if err := r.wh.Verify(body, req.Header); err != nil {
		r.t.Errorf("callback signature not verified: %v", err)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.posts++
	if time.Now().Before(r.upAt) {
		r.failed++
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	id := req.Header.Get("webhook-id")
	if !r.seen[id] { // a receiver dedupes by webhook-id
		r.seen[id] = true
		var b callback.Body
		if err := json.Unmarshal(body, &b); err != nil {
			r.t.Errorf("callback body: %v", err)
		}
		for _, o := range b.Data.Outcomes {
			r.counts[o.Tenant+"/"+o.MessageID+"/"+o.Outcome]++
			r.ids[o.MessageID] = struct{}{}
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (r *tenantReceiver) received() (distinct int, counts map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	counts = map[string]int{}
	for k, v := range r.counts {
		counts[k] = v
	}
	return len(r.ids), counts
}

// TestCallbacksEndToEnd: two tenants publish a campaign each through one
// real `pacer ingest` and one `pacer run` (real Kafka, redis-server, the
// WhatsApp fake). Tenant a's receiver answers 503 until 30 s after the
// campaigns were accepted;
// meanwhile b's gets all of b's outcomes, and `pacer ingest` is restarted
// (what it had not had acknowledged is read again). Once a's receiver is
// up it gets all of a's. The outcomes topic is then replayed whole. Each
// receiver ends with every outcome of its own tenant's messages exactly
// once (after its own dedupe by webhook-id), and none of the other's.
func TestCallbacksEndToEnd(t *testing.T) {
	parallel(t)
	e := newE2E(t, whatsapptest.Config{})
	id := e.prefix[len("pacer-e2e-"):]
	tenantA, tenantB := "a-"+id, "b-"+id
	start := time.Now()
	secretA, secretB := bytes.Repeat([]byte{'a'}, 32), bytes.Repeat([]byte{'b'}, 32)
	rcvA, urlA := newTenantReceiver(t, secretA, start.Add(time.Hour)) // down until the campaigns are in
	rcvB, urlB := newTenantReceiver(t, secretB, start)

	dir := t.TempDir()
	secretFile := func(name string, key []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("whsec_"+base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	digest := func(k string) string { s := sha256.Sum256([]byte(k)); return hex.EncodeToString(s[:]) }
	tenants := fmt.Sprintf(`{"tenants":[
	 {"id":%q,"key_sha256":[%q],"requests_per_second":50,"messages_per_day":100000,"channels":["whatsapp"],"callback_url":%q,"callback_secret_file":%q},
	 {"id":%q,"key_sha256":[%q],"requests_per_second":50,"messages_per_day":100000,"channels":["whatsapp"],"callback_url":%q,"callback_secret_file":%q}]}`,
		tenantA, digest("key-a-"+id), urlA, secretFile("a", secretA), tenantB, digest("key-b-"+id), urlB, secretFile("b", secretB))
	tenantsFile := filepath.Join(dir, "tenants.json")
	if err := os.WriteFile(tenantsFile, []byte(tenants), 0o600); err != nil {
		t.Fatal(err)
	}
	outTopic := "pacer.outcomes.e2e-" + id
	topicPrefix := "pacer.e2e-" + id + "."
	ingestEnv := e.env("PACER_INGEST_ADDR=127.0.0.1:0", "PACER_INGEST_TENANTS="+tenantsFile, "PACER_INGEST_TOPIC_PREFIX="+topicPrefix,
		"PACER_CALLBACK_TOPIC="+outTopic, "PACER_CALLBACK_GROUP=cb-"+e.prefix, "PACER_CALLBACK_WAIT=200ms",
		"PACER_CALLBACK_MAX_BACKOFF=2s", "PACER_CALLBACK_BATCH=40", "PACER_INGEST_PARTITIONS=4")
	ingestAddr := regexp.MustCompile(`msg="ingest listening" (?:component=\S+ )?addr=(\S+)`)
	startIngest := func() (*proc, string) {
		p := startPacer(t, ingestEnv, "ingest")
		var addr string
		if !waitFor(60*time.Second, func() bool {
			m := ingestAddr.FindStringSubmatch(p.logs())
			if m != nil {
				addr = m[1]
			}
			return m != nil
		}) {
			t.Fatalf("pacer ingest did not listen within 60 s\n%s", p.logs())
		}
		return p, addr
	}
	ing, addr := startIngest()
	run := startPacer(t, e.env("PACER_CALLBACK_TOPIC="+outTopic), "run", "--channel", "whatsapp",
		"--topic", topicPrefix+"whatsapp", "--group", "pacer-"+e.prefix)

	const n = 100 // messages per tenant
	publish := func(tenant, key string) []string {
		var b strings.Builder
		var ids []string
		first := 0 // a pacing key belongs to its first tenant: each its own three
		if tenant == tenantB {
			first = 3
		}
		for i := range n {
			mid := fmt.Sprintf("%s-%03d", tenant, i)
			ids = append(ids, mid)
			fmt.Fprintf(&b, `{"id":%q,"key":"1065%s%d","to":"1555%07d","campaign":"camp-%s","payload":{"type":"text","text":{"body":"m"}}}`+"\n",
				mid, id, first+i%3, i, tenant)
		}
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/channels/whatsapp/messages", strings.NewReader(b.String()))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/x-ndjson")
		var resp *http.Response
		if !waitFor(60*time.Second, func() bool { // 503 until Kafka and Redis answer
			r, err := http.DefaultClient.Do(req.Clone(context.Background()))
			if err != nil {
				return false
			}
			if r.StatusCode == http.StatusAccepted {
				resp = r
				return true
			}
			r.Body.Close()
			req.Body = io.NopCloser(strings.NewReader(b.String()))
			return false
		}) {
			t.Fatalf("ingest did not accept %s's campaign within 60 s\n%s", tenant, ing.logs())
		}
		defer resp.Body.Close()
		var ans struct {
			Accepted []json.RawMessage `json:"accepted"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil || len(ans.Accepted) != n {
			t.Fatalf("ingest accepted %d of %s's %d lines (%v)", len(ans.Accepted), tenant, n, err)
		}
		return ids
	}
	idsA := publish(tenantA, "key-a-"+id)
	idsB := publish(tenantB, "key-b-"+id)
	// a's receiver is down (503) for 30 s from here.
	rcvA.mu.Lock()
	upAt := time.Now().Add(30 * time.Second)
	rcvA.upAt = upAt
	rcvA.mu.Unlock()

	// b's outcomes arrive while a's receiver is down.
	if !waitFor(90*time.Second, func() bool { d, _ := rcvB.received(); return d == n }) {
		d, _ := rcvB.received()
		t.Fatalf("b's receiver got %d of %d outcomes within 90 s while a's was down\n%s\n%s", d, n, ing.logs(), run.logs())
	}
	if d, _ := rcvA.received(); d != 0 || time.Now().After(upAt.Add(-5*time.Second)) {
		t.Fatalf("a's receiver took %d outcomes, %v before it came up: b's outcomes came too late to show a's did not hold them back",
			d, time.Until(upAt).Round(time.Second))
	}
	// Restarted while a's receiver is down: the next one sends what was
	// not acknowledged.
	ing.stop(t)
	ing, addr = startIngest()
	if !waitFor(120*time.Second, func() bool { d, _ := rcvA.received(); return d == n }) {
		d, _ := rcvA.received()
		t.Fatalf("a's receiver got %d of %d outcomes within 120 s\n%s", d, n, ing.logs())
	}
	rcvA.mu.Lock()
	failedA := rcvA.failed
	rcvA.mu.Unlock()
	if failedA < 3 {
		t.Errorf("a's receiver refused %d POSTs while down, want several (retries with back-off)", failedA)
	}

	// A replay of the outcomes topic: every outcome read again.
	cl := newKafkaClient(t, e.brokers, kgo.ConsumeTopics(outTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(context.Background(), outTopic)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	var copies []*kgo.Record
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	for int64(len(copies)) < total && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			copies = append(copies, &kgo.Record{Topic: outTopic, Key: r.Key, Value: r.Value})
		})
	}
	cancel()
	if int64(len(copies)) != total || total < 2*n {
		t.Fatalf("read %d of the outcomes topic's %d records, want at least %d", len(copies), total, 2*n)
	}
	if err := cl.ProduceSync(context.Background(), copies...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	group := "cb-" + e.prefix
	if !waitFor(60*time.Second, func() bool {
		lags, err := adm.Lag(context.Background(), group)
		return err == nil && len(lags[group].Lag) > 0 && lags[group].Lag.Total() == 0
	}) {
		t.Fatalf("the callback group still lags 60 s after the replay\n%s", ing.logs())
	}

	for _, c := range []struct {
		rcv    *tenantReceiver
		tenant string
		ids    []string
	}{{rcvA, tenantA, idsA}, {rcvB, tenantB, idsB}} {
		distinct, counts := c.rcv.received()
		if distinct != n || len(counts) != n {
			t.Errorf("%s's receiver: %d distinct messages, %d distinct outcomes, want %d each", c.tenant, distinct, len(counts), n)
		}
		for _, mid := range c.ids {
			if k := c.tenant + "/" + mid + "/delivered"; counts[k] != 1 {
				t.Errorf("%s's receiver got the outcome of %s %d times, want once", c.tenant, mid, counts[k])
			}
		}
		for k := range counts {
			if !strings.HasPrefix(k, c.tenant+"/") {
				t.Errorf("%s's receiver got %s, another tenant's outcome", c.tenant, k)
			}
		}
	}
	_, metrics := httpGet(t, "http://"+addr+"/metrics")
	dups := 0.0
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "pacer_callback_duplicates_total ") {
			var v float64
			fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v)
			dups += v
		}
	}
	if v := dups; v < 2*n {
		t.Errorf("pacer_callback_duplicates_total %v after the replay, want >= %d", v, 2*n)
	}
	t.Logf("a: %d POSTs refused while down; %d outcome records replayed; %.0f s in all", failedA, len(copies), time.Since(start).Seconds())
	ing.stop(t)
	run.stop(t)
}
