package webhook

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/channels/sendgrid/sendgridtest"
	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/suppress"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
)

// flaky passes records to a Kafka client but fails them while down.
type flaky struct {
	kc   *kgo.Client
	down atomic.Bool
}

func (f *flaky) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	if f.down.Load() {
		out := make(kgo.ProduceResults, len(rs))
		for i, r := range rs {
			out[i] = kgo.ProduceResult{Record: r, Err: kgo.ErrRecordTimeout}
		}
		return out
	}
	return f.kc.ProduceSync(ctx, rs...)
}

// The WhatsApp fake's status webhooks, every one sent twice and half of
// the messages' statuses reversed, reach the outcome consumer through
// Kafka while Kafka refuses the first ones: the fake retries, and each
// 131026 and 131049 recipient is suppressed once, nobody else.
func TestFakeWebhooksThroughKafka(t *testing.T) {
	cluster := testenv.FakeKafka(t, 2, Topic("whatsapp"))
	pc := testenv.KafkaClient(t, cluster.ListenAddrs())
	prod := &flaky{kc: pc}
	prod.down.Store(true)
	reg := prometheus.NewRegistry()
	srv := New(Config{WhatsAppAppSecret: secret, WhatsAppVerifyToken: "v"}, prod, reg)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)

	fake := whatsapptest.NewServer(whatsapptest.Config{})
	t.Cleanup(fake.Close)
	fake.SendWebhooks(whatsapptest.Webhooks{URL: hs.URL + "/webhook/whatsapp", AppSecret: secret,
		Undeliverable: 0.2, MarketingLimit: 0.1, Duplicate: 1, Reorder: 0.5, Retry: 20 * time.Millisecond})
	const n = 200
	bodies := make([]string, n)
	for i := range n {
		bodies[i] = fmt.Sprintf(`{"messaging_product":"whatsapp","to":"+1555000%04d","type":"text","text":{"body":"hi"},"biz_opaque_callback_data":"env-%d"}`, i, i)
	}
	if err := fake.Send("1065", bodies...); err != nil {
		t.Fatal(err)
	}
	// Kafka comes back once the fake has met its refusals.
	deadline := time.Now().Add(30 * time.Second)
	for testutil.ToFloat64(srv.m.requests.WithLabelValues("whatsapp", "kafka-failed")) < 50 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	prod.down.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := fake.WaitWebhooks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Dropped != 0 || st.Retries < 50 {
		t.Fatalf("fake webhooks %+v: want none dropped and at least 50 retries while Kafka refused", st)
	}
	if st.Failed131026 == 0 || st.Failed131049 == 0 || st.Sent+st.Failed131026+st.Failed131049 != n || st.Delivered != st.Sent {
		t.Fatalf("fake webhooks %+v: want each of %d messages sent+delivered or failed, some of each failure", st, n)
	}
	statuses := st.Sent + st.Delivered + st.Failed131026 + st.Failed131049
	if st.Posts != 2*statuses {
		t.Fatalf("fake posted %d webhooks answered 2xx, want every one of %d statuses twice", st.Posts, statuses)
	}

	mr := miniredis.RunT(t)
	store := suppress.NewStore(redis.NewClient(&redis.Options{Addr: mr.Addr()}), bucket.NewKeys(""))
	out := NewOutcomes(store, nil, reg)
	cc, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumerGroup("outcomes"),
		kgo.ConsumeTopics(Topic("whatsapp")), kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Close)
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- out.Run(rctx, cc) }()
	applied := func() (total float64) {
		for _, k := range []string{"sent", "delivered", "failed"} {
			total += testutil.ToFloat64(out.m.applied.WithLabelValues("whatsapp", k))
		}
		return total
	}
	for applied() < float64(2*statuses) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := applied(); got != float64(2*statuses) {
		t.Fatalf("applied %v events, want %d (every status twice)", got, 2*statuses)
	}
	count := map[suppress.Reason]int64{}
	err = store.List(context.Background(), "whatsapp", "1065", time.Now(), func(e suppress.Entry) error {
		count[e.Reason]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// One entry per recipient (its number's hash takes it with or without "+").
	if count[suppress.Undeliverable] != st.Failed131026 || count[suppress.MarketingLimit] != st.Failed131049 || len(count) != 2 {
		t.Errorf("suppressions %v, want %d undeliverable and %d marketing-limit", count, st.Failed131026, st.Failed131049)
	}
	if got := testutil.ToFloat64(out.m.suppressed.WithLabelValues("whatsapp", "undeliverable")); got != float64(st.Failed131026) {
		t.Errorf("undeliverable entries added %v, want %d: each duplicate added none", got, st.Failed131026)
	}
}

// The SendGrid fake's signed Event Webhook batches, every one sent twice,
// suppress its bounced, spam-reporting and unsubscribing recipients for
// the key the URL names, each once, and nobody it delivered to.
func TestFakeSendGridWebhooks(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	prod := &memProducer{}
	srv := New(Config{SendGridKey: &key.PublicKey}, prod, nil)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	fake := sendgridtest.NewServer(sendgridtest.Config{})
	t.Cleanup(fake.Close)
	fake.SendWebhooks(sendgridtest.Webhooks{URL: hs.URL + "/webhook/sendgrid/news", Key: key,
		Bounce: 0.1, SpamReport: 0.05, Unsubscribe: 0.05, Duplicate: 1})
	const n = 200
	for i := range n {
		body := fmt.Sprintf(`{"personalizations":[{"to":[{"email":"u%d@example.com"}],"custom_args":{"pacer_id":"env-%d"}}],`+
			`"from":{"email":"news@example.org"},"subject":"Hi","content":[{"type":"text/plain","value":"Hello"}]}`, i, i)
		req, _ := http.NewRequest("POST", fake.URL()+"/v3/mail/send", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer SG.any")
		req.Header.Set("Accept", "application/json")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 202 {
			t.Fatalf("fake answered mail %d with %d", i, resp.StatusCode)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := fake.WaitWebhooks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Dropped != 0 || st.Posts != 2*n || st.Bounce == 0 || st.SpamReport == 0 || st.Unsubscribe == 0 {
		t.Fatalf("fake webhooks %+v: want %d posts (every batch twice), none dropped, some of each fate", st, 2*n)
	}
	evs := prod.events(t)
	for _, ev := range evs {
		if ev.Key != "news" || ev.Message == "" {
			t.Fatalf("event %+v: want key news and the envelope id", ev)
		}
	}
	mr := miniredis.RunT(t)
	store := suppress.NewStore(redis.NewClient(&redis.Options{Addr: mr.Addr()}), bucket.NewKeys(""))
	reg := prometheus.NewRegistry()
	out := NewOutcomes(store, nil, reg)
	if err := out.Apply(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	count := map[suppress.Reason]int64{}
	store.List(context.Background(), "sendgrid", "news", time.Now(), func(e suppress.Entry) error { count[e.Reason]++; return nil })
	want := map[suppress.Reason]int64{suppress.Bounce: st.Bounce, suppress.SpamReport: st.SpamReport, suppress.Unsubscribe: st.Unsubscribe}
	if fmt.Sprint(count) != fmt.Sprint(want) {
		t.Errorf("suppressions %v, want %v", count, want)
	}
	if got := testutil.ToFloat64(out.m.suppressed.WithLabelValues("sendgrid", "bounce")); got != float64(st.Bounce) {
		t.Errorf("bounce entries added %v, want %d (duplicates add none)", got, st.Bounce)
	}
}
