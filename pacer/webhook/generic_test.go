package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/redistest"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/suppress"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The generic route's two secrets (a rotation: either signs).
var genericKeys = [][]byte{bytes.Repeat([]byte("k"), 24), bytes.Repeat([]byte("n"), 32)}

// specSignature signs as the Standard Webhooks specification says, without
// the library the route verifies with: "v1,<base64 HMAC-SHA256(key,
// id.ts.body)>".
func specSignature(key []byte, id string, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + strconv.FormatInt(ts, 10) + "." + string(body)))
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

type genericFixture struct {
	srv  *Server
	kc   *memProducer
	now  time.Time
	http *httptest.Server
}

func newGenericFixture(t *testing.T, kc Producer) *genericFixture {
	t.Helper()
	f := &genericFixture{now: time.Unix(1_800_000_000, 0)}
	if kc == nil {
		f.kc = &memProducer{}
		kc = f.kc
	}
	f.srv = New(Config{GenericSecrets: genericKeys, Now: func() time.Time { return f.now }}, kc, prometheus.NewRegistry())
	f.http = httptest.NewServer(f.srv)
	t.Cleanup(f.http.Close)
	return f
}

// post sends body with the headers given ("" leaves one out).
func (f *genericFixture) post(t *testing.T, body []byte, id, ts, sig string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", f.http.URL+"/webhook/generic", bytes.NewReader(body))
	for h, v := range map[string]string{"webhook-id": id, "webhook-timestamp": ts, "webhook-signature": sig} {
		if v != "" {
			req.Header.Set(h, v)
		}
	}
	return do(t, req)
}

// signed posts body as id, signed with the first key at the fixture's now.
func (f *genericFixture) signed(t *testing.T, body []byte, id string) (int, string) {
	t.Helper()
	ts := f.now.Unix()
	return f.post(t, body, id, strconv.FormatInt(ts, 10), specSignature(genericKeys[0], id, ts, body))
}

func (f *genericFixture) requests(result string) float64 {
	return testutil.ToFloat64(f.srv.m.requests.WithLabelValues("generic", result))
}

const optOut = `{"outcomes":[{"channel":"sendgrid","key":"news","recipient":"Ann@Example.com","kind":"suppress","reason":"unsubscribe"}]}`

// TestGenericSignature: a request signed as the Standard Webhooks
// specification says, by either configured secret, within 5 minutes of the
// clock, is accepted; one unsigned, badly signed or stale is refused 401
// and counted by result, and nothing reaches Kafka.
func TestGenericSignature(t *testing.T) {
	f := newGenericFixture(t, nil)
	body := []byte(optOut)
	now := f.now.Unix()
	ts := strconv.FormatInt(now, 10)
	good := specSignature(genericKeys[0], "msg_1", now, body)
	for _, c := range []struct {
		name          string
		body          []byte
		id, ts, sig   string
		code          int
		result, words string
	}{
		{"signed", body, "msg_1", ts, good, 200, "accepted", `{"events":1}`},
		{"second secret", body, "msg_1", ts, specSignature(genericKeys[1], "msg_1", now, body), 200, "accepted", `{"events":1}`},
		{"one of a list", body, "msg_1", ts, "v1,AAAA " + good, 200, "accepted", `{"events":1}`},
		{"no id", body, "", ts, good, 401, "unsigned", "webhook-id, webhook-timestamp and webhook-signature are all required"},
		{"no timestamp", body, "msg_1", "", good, 401, "unsigned", "all required"},
		{"no signature", body, "msg_1", ts, "", 401, "unsigned", "all required"},
		{"other secret", body, "msg_1", ts, specSignature([]byte("not-the-secret-not-the-secret"), "msg_1", now, body), 401, "bad-signature", "no signature"},
		{"body changed", []byte(strings.Replace(optOut, "Ann", "Bob", 1)), "msg_1", ts, good, 401, "bad-signature", "no signature"},
		{"id changed", body, "msg_2", ts, good, 401, "bad-signature", "no signature"},
		{"no v1 prefix", body, "msg_1", ts, strings.TrimPrefix(good, "v1,"), 401, "bad-signature", "no signature"},
		{"timestamp not seconds", body, "msg_1", "soon", good, 401, "stale", "not Unix seconds"},
		{"6 min old", body, "msg_1", strconv.FormatInt(now-360, 10), specSignature(genericKeys[0], "msg_1", now-360, body), 401, "stale", "older than 5m0s"},
		{"6 min ahead", body, "msg_1", strconv.FormatInt(now+360, 10), specSignature(genericKeys[0], "msg_1", now+360, body), 401, "stale", "further ahead than 5m0s"},
		{"4 min old", body, "msg_1", strconv.FormatInt(now-240, 10), specSignature(genericKeys[0], "msg_1", now-240, body), 200, "accepted", `{"events":1}`},
		{"id with a dot", body, "msg.1", ts, specSignature(genericKeys[0], "msg.1", now, body), 400, "malformed", "webhook-id: printable ASCII"},
	} {
		before, produced := f.requests(c.result), len(f.kc.recs)
		code, answer := f.post(t, c.body, c.id, c.ts, c.sig)
		if code != c.code || !strings.Contains(answer, c.words) {
			t.Errorf("%s: answered %d %s; want %d with %q", c.name, code, answer, c.code, c.words)
		}
		if got := f.requests(c.result) - before; got != 1 {
			t.Errorf("%s: pacer_webhook_requests_total{channel=generic,result=%s} rose by %v, want 1", c.name, c.result, got)
		}
		if code != 200 && len(f.kc.recs) != produced {
			t.Errorf("%s: refused, yet %d records produced", c.name, len(f.kc.recs)-produced)
		}
	}
	evs := f.kc.events(t)
	if len(evs) != 4 {
		t.Fatalf("%d events produced, want 4 (one per accepted request)", len(evs))
	}
	want := Event{ID: "generic:msg_1:0", Channel: "sendgrid", Key: "news", Kind: KindSuppress, Reason: "unsubscribe",
		Recipients: []string{suppress.Hash("ann@example.com")}, At: f.now.UTC()}
	if ev := evs[0]; ev.ID != want.ID || ev.Channel != want.Channel || ev.Key != want.Key || ev.Kind != want.Kind || ev.Reason != want.Reason ||
		len(ev.Recipients) != 1 || ev.Recipients[0] != want.Recipients[0] || !ev.At.Equal(want.At) || !ev.Until.IsZero() {
		t.Errorf("event %+v, want %+v", ev, want)
	}
	for _, r := range f.kc.recs {
		if bytes.Contains(bytes.ToLower(r.Value), []byte("example.com")) {
			t.Errorf("record %s carries the address", r.Value)
		}
	}
}

// detail is the detail of a problem+json answer.
func detail(answer string) string {
	var p struct{ Detail string }
	json.Unmarshal([]byte(answer), &p)
	return p.Detail
}

// TestGenericMalformedNamesTheField: a signed body that is not a batch of
// outcomes is refused 400 naming the field at fault, and produces nothing.
func TestGenericMalformedNamesTheField(t *testing.T) {
	f := newGenericFixture(t, nil)
	one := func(fields string) string {
		return `{"outcomes":[{"channel":"apns","key":"com.example.app","recipient":"tok",` + fields + `}]}`
	}
	for _, c := range []struct{ body, want string }{
		{`[]`, "body: not a JSON object"},
		{`{"outcomes":[]}`, "outcomes: missing or empty"},
		{`{}`, "outcomes: missing or empty"},
		{`{"outcomes":{}}`, "outcomes: a JSON array expected, not object"},
		{`{"outcomes":[{"channel":"apns","key":7}]}`, "outcomes.key: a JSON string expected, not number"},
		{`{"outcomes":[{"channel":"sms","key":"k","recipient":"r","kind":"suppress","reason":"manual"}]}`, `outcomes[0].channel: "sms", want one of whatsapp, apns, fcm, sendgrid`},
		{`{"outcomes":[{"channel":"apns","recipient":"r","kind":"suppress","reason":"manual"}]}`, "outcomes[0].key: missing"},
		{`{"outcomes":[{"channel":"apns","key":"../x","recipient":"r","kind":"suppress","reason":"manual"}]}`, "outcomes[0].key: the pacing key may hold"},
		{`{"outcomes":[{"channel":"apns","key":"k","kind":"suppress","reason":"manual"}]}`, "outcomes[0].recipient: missing"},
		{`{"outcomes":[{"channel":"apns","key":"k","recipient":"hash:xyz","kind":"suppress","reason":"manual"}]}`, "outcomes[0].recipient: over 1024 bytes, or hash: not followed"},
		{one(`"kind":"delete"`), `outcomes[0].kind: "delete", want suppress or unsuppress`},
		{one(`"kind":"suppress"`), `outcomes[0].reason: unknown reason "" (one of unregistered, undeliverable`},
		{one(`"kind":"suppress","reason":"crm"`), `outcomes[0].reason: unknown reason "crm"`},
		{one(`"kind":"suppress","reason":"unregistered","until":"tomorrow"`), `outcomes[0].until: "tomorrow" is not an RFC 3339 time`},
		{one(`"kind":"unsuppress","reason":"unregistered"`), "outcomes[0].reason: an unsuppress removes the entry whatever its reason"},
		{one(`"kind":"unsuppress","until":"2027-01-01T00:00:00Z"`), "outcomes[0].until: an unsuppress removes the entry"},
		{`{"outcomes":[` + strings.Repeat(`{},`, MaxGenericOutcomes) + `{}]}`, "outcomes: 1001, at most 1000 per request"},
	} {
		before := f.requests("malformed")
		code, answer := f.signed(t, []byte(c.body), "msg_bad")
		if code != 400 || !strings.Contains(detail(answer), c.want) {
			t.Errorf("%.80s: answered %d %s; want 400 naming %q", c.body, code, answer, c.want)
		}
		if f.requests("malformed")-before != 1 {
			t.Errorf("%.80s: not counted malformed", c.body)
		}
	}
	if len(f.kc.recs) != 0 {
		t.Errorf("%d records produced from malformed requests", len(f.kc.recs))
	}
	// The second outcome is named by its index.
	code, answer := f.signed(t, []byte(`{"outcomes":[{"channel":"fcm","key":"p","recipient":"t","kind":"unsuppress"},{"channel":"fcm","key":"p","recipient":"t","kind":"x"}]}`), "msg_2")
	if code != 400 || !strings.Contains(detail(answer), `outcomes[1].kind: "x"`) {
		t.Errorf("answered %d %s; want 400 naming outcomes[1].kind", code, answer)
	}
}

// TestGenericDuplicateAppliedOnce: the same webhook-id delivered twice (a
// retry, with a new timestamp and signature) yields the same events, and
// applying both adds one entry, counted once; an unsuppress delivered
// twice removes it once.
func TestGenericDuplicateAppliedOnce(t *testing.T) {
	f := newGenericFixture(t, nil)
	e := redistest.Real(t)
	store := suppress.NewStore(e.RDB, bucket.NewKeys(e.Prefix))
	out := NewOutcomes(store, nil, prometheus.NewRegistry())
	ctx := context.Background()
	body := []byte(`{"outcomes":[{"channel":"fcm","key":"proj","recipient":"tok-1","kind":"suppress","reason":"unregistered","until":"2027-03-01T12:00:00+01:00"},` +
		`{"channel":"fcm","key":"proj","recipient":"tok-2","kind":"suppress","reason":"unregistered"}]}`)
	for range 2 {
		if code, answer := f.signed(t, body, "msg_dup"); code != 200 {
			t.Fatalf("answered %d %s", code, answer)
		}
		f.now = f.now.Add(time.Minute)
	}
	evs := f.kc.events(t)
	if len(evs) != 4 || evs[0].ID != evs[2].ID || evs[1].ID != evs[3].ID || evs[0].ID == evs[1].ID {
		t.Fatalf("events %+v: want the two deliveries' events to carry the same two ids", evs)
	}
	for _, ev := range evs {
		if err := out.Apply(ctx, []Event{ev}); err != nil {
			t.Fatal(err)
		}
	}
	if got := testutil.ToFloat64(out.m.suppressed.WithLabelValues("fcm", "unregistered")); got != 2 {
		t.Errorf("pacer_webhook_suppressions_added_total{fcm,unregistered} %v, want 2 (each recipient once)", got)
	}
	until := time.Date(2027, 3, 1, 11, 0, 0, 0, time.UTC)
	en, ok, err := store.Get(ctx, "fcm", "proj", suppress.Hash("tok-1"), f.now)
	if err != nil || !ok || en.Reason != suppress.Unregistered || !en.Expires.Equal(until) || !en.At.IsZero() {
		t.Errorf("tok-1's entry %+v %v %v; want unregistered until %s", en, ok, err, until)
	}
	if en, ok, _ := store.Get(ctx, "fcm", "proj", suppress.Hash("tok-2"), f.now); !ok || !en.Expires.IsZero() {
		t.Errorf("tok-2's entry %+v %v; want unregistered until removed", en, ok)
	}

	unsuppress := []byte(`{"outcomes":[{"channel":"fcm","key":"proj","recipient":"tok-1","kind":"unsuppress"}]}`)
	for range 2 {
		if code, answer := f.signed(t, unsuppress, "msg_un"); code != 200 {
			t.Fatalf("answered %d %s", code, answer)
		}
	}
	for _, ev := range f.kc.events(t)[4:] {
		if err := out.Apply(ctx, []Event{ev}); err != nil {
			t.Fatal(err)
		}
	}
	if got := testutil.ToFloat64(out.m.removed.WithLabelValues("fcm")); got != 1 {
		t.Errorf("pacer_webhook_suppressions_removed_total{fcm} %v, want 1", got)
	}
	if _, ok, _ := store.Get(ctx, "fcm", "proj", suppress.Hash("tok-1"), f.now); ok {
		t.Error("tok-1 still suppressed after the unsuppress")
	}
	if _, ok, _ := store.Get(ctx, "fcm", "proj", suppress.Hash("tok-2"), f.now); !ok {
		t.Error("tok-2 unsuppressed by tok-1's unsuppress")
	}
}

// TestGenericOrderInBatch: a suppress and an unsuppress of one recipient
// in one batch end as the later one says.
func TestGenericOrderInBatch(t *testing.T) {
	e := redistest.Real(t)
	store := suppress.NewStore(e.RDB, bucket.NewKeys(e.Prefix))
	out := NewOutcomes(store, nil, nil)
	ctx := context.Background()
	h := suppress.Hash("tok")
	sup := Event{ID: "generic:a:0", Channel: "apns", Key: "app", Kind: KindSuppress, Reason: "manual", Recipients: []string{h}}
	unsup := Event{ID: "generic:b:0", Channel: "apns", Key: "app", Kind: KindUnsuppress, Recipients: []string{h}}
	if err := out.Apply(ctx, []Event{sup, unsup}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := store.Get(ctx, "apns", "app", h, time.Now()); ok {
		t.Error("suppress then unsuppress: still suppressed")
	}
	if err := out.Apply(ctx, []Event{unsup, sup}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := store.Get(ctx, "apns", "app", h, time.Now()); !ok {
		t.Error("unsuppress then suppress: not suppressed")
	}
}

// TestGenericEndToEnd: a signed suppress outcome through the route, Kafka
// (kfake) and the outcome consumer makes its recipient suppressed in
// suppress.Store (redis-server), as `pacer suppress add` would, for the
// channel and key it names.
func TestGenericEndToEnd(t *testing.T) {
	e := redistest.Real(t)
	store := suppress.NewStore(e.RDB, bucket.NewKeys(e.Prefix))
	var topics []string
	for _, ch := range GenericChannels {
		topics = append(topics, Topic(ch))
	}
	cluster := testenv.FakeKafka(t, 2, topics...)
	pc := testenv.KafkaClient(t, cluster.ListenAddrs(), kgo.ProducerLinger(0))
	f := newGenericFixture(t, pc)
	f.now = time.Now()
	cc := testenv.KafkaClient(t, cluster.ListenAddrs(), kgo.ConsumerGroup("outcomes"),
		kgo.ConsumeTopics(topics...), kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	out := NewOutcomes(store, nil, nil)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- out.Run(ctx, cc) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	body := []byte(`{"outcomes":[{"channel":"apns","key":"com.example.app","recipient":"a1b2c3","kind":"suppress","reason":"unregistered"},` +
		`{"channel":"whatsapp","key":"1065","recipient":"+15551230001","kind":"suppress","reason":"unsubscribe"}]}`)
	if code, answer := f.signed(t, body, "msg_e2e"); code != 200 || !strings.Contains(answer, `{"events":2}`) {
		t.Fatalf("answered %d %s; want 200 with 2 events", code, answer)
	}
	get := func(channel, key, to string) (suppress.Entry, bool) {
		en, ok, err := store.Get(context.Background(), channel, key, suppress.Hash(to), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return en, ok
	}
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if _, ok := get("whatsapp", "1065", "15551230001"); ok {
			break
		}
	}
	if en, ok := get("apns", "com.example.app", "a1b2c3"); !ok || en.Reason != suppress.Unregistered {
		t.Errorf("apns token: entry %+v %v; want unregistered", en, ok)
	}
	// The number as WhatsApp's webhooks write it (no "+") is the same recipient.
	if en, ok := get("whatsapp", "1065", "15551230001"); !ok || en.Reason != suppress.Unsubscribe {
		t.Errorf("whatsapp number: entry %+v %v; want unsubscribe", en, ok)
	}
	if _, ok := get("apns", "other.app", "a1b2c3"); ok {
		t.Error("the token is suppressed for another key too")
	}
}
