package webhook

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/pacer/portfolio"
	"github.com/pacerhq/pacer/pacer/suppress"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
)

var secret = []byte("app-secret")

// memProducer keeps what it acknowledged; while down it fails every record.
type memProducer struct {
	mu   sync.Mutex
	down bool
	recs []*kgo.Record
	// hang, when set, is waited on by ProduceSync whatever its context
	// says: a client that keeps records it has sequenced while the
	// brokers are down.
	hang chan struct{}
}

func (p *memProducer) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	if p.hang != nil {
		<-p.hang
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(kgo.ProduceResults, len(rs))
	for i, r := range rs {
		out[i].Record = r
		if p.down {
			out[i].Err = errors.New("kafka: broker not available")
			continue
		}
		p.recs = append(p.recs, r)
	}
	return out
}

func (p *memProducer) events(t *testing.T) []Event {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	var evs []Event
	for _, r := range p.recs {
		var ev Event
		if err := json.Unmarshal(r.Value, &ev); err != nil {
			t.Fatal(err)
		}
		if r.Topic != Topic(ev.Channel) || string(r.Key) != ev.Key {
			t.Fatalf("record of %s/%s went to %s keyed %q", ev.Channel, ev.Key, r.Topic, r.Key)
		}
		evs = append(evs, ev)
	}
	return evs
}

type fixture struct {
	srv  *Server
	kc   *memProducer
	reg  *prometheus.Registry
	key  *ecdsa.PrivateKey
	now  time.Time
	http *httptest.Server
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{kc: &memProducer{}, reg: prometheus.NewRegistry(), key: k, now: time.Unix(1_800_000_000, 0)}
	f.srv = New(Config{WhatsAppAppSecret: secret, WhatsAppVerifyToken: "verify-me", SendGridKey: &k.PublicKey,
		Now: func() time.Time { return f.now }}, f.kc, f.reg)
	f.http = httptest.NewServer(f.srv)
	t.Cleanup(f.http.Close)
	return f
}

func (f *fixture) requests(channel, result string) float64 {
	return testutil.ToFloat64(f.srv.m.requests.WithLabelValues(channel, result))
}

// waBody is a Cloud API status webhook for phone-number ID 1065 with one
// status per element of statuses ("wamid status code").
func waBody(statuses ...string) []byte {
	var sts []string
	for i, s := range statuses {
		f := strings.Fields(s)
		errs := ""
		if len(f) > 2 {
			errs = `,"errors":[{"code":` + f[2] + `,"title":"x"}]`
		}
		sts = append(sts, fmt.Sprintf(`{"id":%q,"status":%q,"timestamp":"1800000000","recipient_id":"155512300%02d","biz_opaque_callback_data":"env-%s"%s}`,
			f[0], f[1], i, f[0], errs))
	}
	return []byte(`{"object":"whatsapp_business_account","entry":[{"id":"waba","changes":[{"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"display_phone_number":"1555","phone_number_id":"1065"},"statuses":[` +
		strings.Join(sts, ",") + `]}}]}]}`)
}

func (f *fixture) postWA(t *testing.T, body []byte, sig string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", f.http.URL+"/webhook/whatsapp", bytes.NewReader(body))
	if sig != "" {
		req.Header.Set("X-Hub-Signature-256", sig)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 400 && resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("answer %d has Content-Type %q, want application/problem+json", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return resp.StatusCode, string(b)
}

func TestWhatsAppHandshake(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		query  string
		status int
		body   string
	}{
		{"hub.mode=subscribe&hub.verify_token=verify-me&hub.challenge=1158201444", 200, "1158201444"},
		{"hub.mode=subscribe&hub.verify_token=verify-mE&hub.challenge=1158201444", 403, ""},
		{"hub.mode=subscribe&hub.verify_token=&hub.challenge=1", 403, ""},
		{"hub.mode=unsubscribe&hub.verify_token=verify-me&hub.challenge=1", 403, ""},
		{"hub.mode=subscribe&hub.verify_token=verify-me", 400, ""}, // nothing to echo: not Meta's handshake
	} {
		req, _ := http.NewRequest("GET", f.http.URL+"/webhook/whatsapp?"+c.query, nil)
		status, body := do(t, req)
		if status != c.status || (c.status == 200 && body != c.body) {
			t.Errorf("GET ?%s: %d %q, want %d %q", c.query, status, body, c.status, c.body)
		}
	}
}

func TestWhatsAppSignature(t *testing.T) {
	f := newFixture(t)
	body := waBody("wamid.A failed 131026")
	good := WhatsAppSignature(secret, body)
	bad := WhatsAppSignature([]byte("another secret"), body)
	cases := []struct {
		name, sig string
		status    int
		result    string
	}{
		{"missing", "", 401, "unsigned"},
		{"not sha256=", "sha1=" + strings.TrimPrefix(good, "sha256="), 401, "bad-signature"},
		{"other secret", bad, 401, "bad-signature"},
		{"not hex", "sha256=zz", 401, "bad-signature"},
		{"good", good, 200, "accepted"},
	}
	for _, c := range cases {
		status, body := f.postWA(t, body, c.sig)
		if status != c.status {
			t.Errorf("%s: status %d (%s), want %d", c.name, status, body, c.status)
		}
	}
	if got := f.requests("whatsapp", "unsigned"); got != 1 {
		t.Errorf("unsigned requests counted %v, want 1", got)
	}
	if got := f.requests("whatsapp", "bad-signature"); got != 3 {
		t.Errorf("bad-signature requests counted %v, want 3", got)
	}
	evs := f.kc.events(t)
	if len(evs) != 1 {
		t.Fatalf("produced %d events, want 1 (only the signed request's)", len(evs))
	}
	want := Event{ID: "wamid.A:failed", Channel: "whatsapp", Key: "1065", Kind: "failed", Message: "env-wamid.A", ProviderID: "wamid.A",
		Recipients: []string{suppress.Hash("15551230000")}, Code: 131026, At: time.Unix(1800000000, 0).UTC(), Number: "1555"}
	if fmt.Sprint(evs[0]) != fmt.Sprint(want) {
		t.Errorf("event %+v, want %+v", evs[0], want)
	}
}

func TestMalformedNamesTheField(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		body []byte
		want string
	}{
		{[]byte(`{"object":"whatsapp_business_account"`), "body: not a WhatsApp webhook"},
		{[]byte(`{"object":"page"}`), `object: \"page\"`},
		{bytes.Replace(waBody("wamid.A sent", "wamid.B read"), []byte(`"timestamp":"1800000000","recipient_id":"15551230001"`),
			[]byte(`"timestamp":"soon","recipient_id":"15551230001"`), 1), "statuses[1].timestamp"},
	} {
		status, body := f.postWA(t, c.body, WhatsAppSignature(secret, c.body))
		if status != 400 || !strings.Contains(body, c.want) {
			t.Errorf("body %.60s...: %d %s, want 400 naming %q", c.body, status, body, c.want)
		}
	}
	if got := f.requests("whatsapp", "malformed"); got != 3 {
		t.Errorf("malformed requests counted %v, want 3", got)
	}
	if n := len(f.kc.events(t)); n != 0 {
		t.Errorf("produced %d events of malformed bodies, want 0", n)
	}
}

func (f *fixture) postSG(t *testing.T, key string, body []byte, ts time.Time, sign *ecdsa.PrivateKey) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", f.http.URL+"/webhook/sendgrid/"+key, bytes.NewReader(body))
	if sign != nil {
		stamp := strconv.FormatInt(ts.Unix(), 10)
		sig, err := SendGridSignature(sign, stamp, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Twilio-Email-Event-Webhook-Signature", sig)
		req.Header.Set("X-Twilio-Email-Event-Webhook-Timestamp", stamp)
	}
	return do(t, req)
}

const sgBody = `[{"email":"a@example.com","timestamp":1800000000,"event":"bounce","sg_event_id":"ev1","sg_message_id":"m1.x","pacer_id":"env-1","status":"5.1.1"},
{"email":"b@example.com","timestamp":1800000001,"event":"delivered","sg_event_id":"ev2","sg_message_id":"m2.x","pacer_id":"env-2"},
{"email":"c@example.com","timestamp":1800000002,"event":"group_unsubscribe","sg_event_id":"ev3","sg_message_id":"m3.x","asm_group_id":1}]`

func TestSendGridSignatureAndAge(t *testing.T) {
	f := newFixture(t)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	body := []byte(sgBody)
	if s, b := f.postSG(t, "marketing", body, f.now, nil); s != 401 || !strings.Contains(b, "X-Twilio-Email-Event-Webhook-Signature") {
		t.Errorf("unsigned: %d %s, want 401 naming the header", s, b)
	}
	if s, _ := f.postSG(t, "marketing", body, f.now, other); s != 401 {
		t.Errorf("signed with another key: %d, want 401", s)
	}
	if s, b := f.postSG(t, "marketing", body, f.now.Add(-11*time.Minute), f.key); s != 401 || !strings.Contains(b, "older than 10m0s") {
		t.Errorf("11 min old: %d %s, want 401 stale", s, b)
	}
	if s, b := f.postSG(t, "marketing", body, f.now.Add(-9*time.Minute), f.key); s != 200 {
		t.Errorf("9 min old: %d %s, want 200", s, b)
	}
	if s, b := f.postSG(t, "marketing", body, f.now.Add(time.Hour), f.key); s != 401 || !strings.Contains(b, "further ahead than 10m0s") {
		t.Errorf("an hour ahead: %d %s, want 401 saying further ahead", s, b)
	}
	for result, want := range map[string]float64{"unsigned": 1, "bad-signature": 1, "stale": 2} {
		if got := f.requests("sendgrid", result); got != want {
			t.Errorf("sendgrid %s counted %v, want %v", result, got, want)
		}
	}
	evs := f.kc.events(t)
	if len(evs) != 3 || evs[0].ID != "ev1" || evs[0].Key != "marketing" || evs[0].Message != "env-1" || evs[0].Code != 5 ||
		evs[0].Recipients[0] != suppress.Hash("a@example.com") || evs[2].Kind != "group_unsubscribe" {
		t.Errorf("events %+v", evs)
	}
}

func TestParseSendGridKey(t *testing.T) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	b64 := base64.StdEncoding.EncodeToString(der)
	pemKey := "-----BEGIN PUBLIC KEY-----\n" + b64 + "\n-----END PUBLIC KEY-----\n"
	for _, s := range []string{b64, pemKey} {
		got, err := ParseSendGridKey(s)
		if err != nil || !got.Equal(&k.PublicKey) {
			t.Errorf("ParseSendGridKey(%.20s...) = %v, %v", s, got, err)
		}
	}
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	der384, _ := x509.MarshalPKIXPublicKey(&p384.PublicKey)
	for s, want := range map[string]string{"!!": "neither PEM nor base64", "AAAA": "not a public key",
		base64.StdEncoding.EncodeToString(der384): "not an ECDSA P-256"} {
		if _, err := ParseSendGridKey(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSendGridKey(%q): %v, want %q", s, err, want)
		}
	}
}

// Kafka down: 503, nothing acknowledged, nothing lost: the provider's
// retry lands the events, and applying them twice (the retry and a
// duplicate delivery) suppresses once.
func TestKafkaDownThenRetryAppliedOnce(t *testing.T) {
	f := newFixture(t)
	body := waBody("wamid.A failed 131026", "wamid.B delivered", "wamid.C failed 131049")
	sig := WhatsAppSignature(secret, body)
	f.kc.down = true
	if s, b := f.postWA(t, body, sig); s != 503 {
		t.Fatalf("Kafka down: %d %s, want 503", s, b)
	}
	if got := f.requests("whatsapp", "kafka-failed"); got != 1 {
		t.Errorf("kafka-failed counted %v, want 1", got)
	}
	f.kc.down = false
	for range 2 { // Meta's retry, then a duplicate delivery
		if s, b := f.postWA(t, body, sig); s != 200 {
			t.Fatalf("Kafka up: %d %s, want 200", s, b)
		}
	}
	evs := f.kc.events(t)
	if len(evs) != 6 {
		t.Fatalf("produced %d events, want 6 (3 twice)", len(evs))
	}

	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	st := suppress.NewStore(rdb, bucket.NewKeys(""))
	reg := prometheus.NewRegistry()
	o := NewOutcomes(st, nil, reg)
	ctx := context.Background()
	if err := o.Apply(ctx, evs[:3]); err != nil {
		t.Fatal(err)
	}
	before := mr.Dump()
	if err := o.Apply(ctx, evs[3:]); err != nil {
		t.Fatal(err)
	}
	if after := mr.Dump(); after != before {
		t.Errorf("the duplicate changed Redis:\n%s\nthen\n%s", before, after)
	}
	if got := testutil.ToFloat64(o.m.suppressed.WithLabelValues("whatsapp", "undeliverable")); got != 1 {
		t.Errorf("undeliverable entries added %v, want 1 (the recipient, once)", got)
	}
	if got := testutil.ToFloat64(o.m.applied.WithLabelValues("whatsapp", "delivered")); got != 2 {
		t.Errorf("delivered events applied %v, want 2", got)
	}
	at := time.Unix(1800000000, 0)
	e, ok, err := st.Get(ctx, "whatsapp", "1065", suppress.Hash("+15551230000"), at.Add(6*24*time.Hour))
	if err != nil || !ok || e.Reason != suppress.Undeliverable {
		t.Errorf("131026 recipient 6 days on: %+v %v %v, want undeliverable", e, ok, err)
	}
	if _, ok, _ := st.Get(ctx, "whatsapp", "1065", suppress.Hash("+15551230000"), at.Add(8*24*time.Hour)); ok {
		t.Errorf("131026 recipient still suppressed 8 days after the event, want 7 days from the provider's timestamp")
	}
}

func TestOutcomeReasons(t *testing.T) {
	for _, c := range []struct {
		ev   Event
		want suppress.Reason
	}{
		{Event{Channel: "whatsapp", Kind: "failed", Code: 131026}, suppress.Undeliverable},
		{Event{Channel: "whatsapp", Kind: "failed", Code: 131049}, suppress.MarketingLimit},
		{Event{Channel: "whatsapp", Kind: "failed", Code: 131000}, ""},
		{Event{Channel: "whatsapp", Kind: "delivered", Code: 131026}, ""},
		{Event{Channel: "sendgrid", Kind: "bounce"}, suppress.Bounce},
		{Event{Channel: "sendgrid", Kind: "dropped"}, suppress.Dropped},
		{Event{Channel: "sendgrid", Kind: "spamreport"}, suppress.SpamReport},
		{Event{Channel: "sendgrid", Kind: "unsubscribe"}, suppress.Unsubscribe},
		{Event{Channel: "sendgrid", Kind: "group_unsubscribe"}, suppress.Unsubscribe},
		{Event{Channel: "sendgrid", Kind: "deferred"}, ""},
	} {
		if got, _ := c.ev.suppression(); got != c.want {
			t.Errorf("%s %s %d: %q, want %q", c.ev.Channel, c.ev.Kind, c.ev.Code, got, c.want)
		}
	}
}

// SendGrid's bounce and group_unsubscribe suppress their addresses for
// the key the URL names, until removed; a delivered event suppresses none.
func TestSendGridOutcomes(t *testing.T) {
	evs, err := parseSendGrid([]byte(sgBody), "marketing")
	if err != nil {
		t.Fatal(err)
	}
	mr := miniredis.RunT(t)
	st := suppress.NewStore(redis.NewClient(&redis.Options{Addr: mr.Addr()}), bucket.NewKeys(""))
	ctx := context.Background()
	if err := NewOutcomes(st, nil, nil).Apply(ctx, evs); err != nil {
		t.Fatal(err)
	}
	later := time.Unix(1800000000, 0).Add(10 * 365 * 24 * time.Hour)
	for addr, want := range map[string]suppress.Reason{"a@example.com": suppress.Bounce, "b@example.com": "", "c@example.com": suppress.Unsubscribe} {
		e, ok, err := st.Get(ctx, "sendgrid", "marketing", suppress.Hash(addr), later)
		if err != nil || e.Reason != want || ok != (want != "") {
			t.Errorf("%s ten years on: %+v %v %v, want %q", addr, e, ok, err, want)
		}
	}
}

// A record of an unknown channel or kind is counted as "other": the
// metric's labels stay bounded whatever the topic holds.
func TestAppliedLabelsBounded(t *testing.T) {
	o := NewOutcomes(nil, nil, nil)
	if err := o.Apply(context.Background(), []Event{{Channel: "pager", Kind: "exploded"}, {Channel: "whatsapp", Kind: "seen-by-cat"}}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(o.m.applied.WithLabelValues("other", "other")); got != 1 {
		t.Errorf("other/other counted %v, want 1", got)
	}
	if got := testutil.ToFloat64(o.m.applied.WithLabelValues("whatsapp", "other")); got != 1 {
		t.Errorf("whatsapp/other counted %v, want 1", got)
	}
}

type ownSecrets struct {
	wa map[string][]byte
	sg map[string]*ecdsa.PublicKey
}

func (o ownSecrets) WhatsAppAppSecret(id string) ([]byte, bool) { s, ok := o.wa[id]; return s, ok }
func (o ownSecrets) SendGridKey(key string) (*ecdsa.PublicKey, bool) {
	k, ok := o.sg[key]
	return k, ok
}

// A sender with a secret of its own is verified with it, not the
// default; a sender without one with the default; with neither, refused.
func TestSecretsPerSender(t *testing.T) {
	f := newFixture(t)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	own := ownSecrets{wa: map[string][]byte{"1065": []byte("own secret")}, sg: map[string]*ecdsa.PublicKey{"tenant-b": &other.PublicKey}}
	f.srv = New(Config{WhatsAppAppSecret: secret, WhatsAppVerifyToken: "verify-me", Secrets: own,
		Now: func() time.Time { return f.now }}, f.kc, f.reg2())
	f.http.Config.Handler = f.srv

	body := waBody("wamid.A sent") // phone-number ID 1065
	if s, b := f.postWA(t, body, WhatsAppSignature(secret, body)); s != 401 {
		t.Errorf("1065 signed with the default secret: %d %s, want 401 (it has its own)", s, b)
	}
	if s, b := f.postWA(t, body, WhatsAppSignature([]byte("own secret"), body)); s != 200 {
		t.Errorf("1065 signed with its own secret: %d %s, want 200", s, b)
	}
	body2 := bytes.ReplaceAll(body, []byte(`"1065"`), []byte(`"2077"`))
	if s, b := f.postWA(t, body2, WhatsAppSignature(secret, body2)); s != 200 {
		t.Errorf("2077 (no secret of its own) signed with the default: %d %s, want 200", s, b)
	}
	sg := []byte(sgBody)
	if s, b := f.postSG(t, "tenant-b", sg, f.now, other); s != 200 {
		t.Errorf("tenant-b signed with its own key: %d %s, want 200", s, b)
	}
	if s, b := f.postSG(t, "tenant-a", sg, f.now, other); s != 401 || !strings.Contains(b, "no verification key") {
		t.Errorf("tenant-a (no key at all): %d %s, want 401 naming the missing key", s, b)
	}
	if s, b := f.postSG(t, ".hidden", sg, f.now, other); s != 400 {
		t.Errorf("key .hidden: %d %s, want 400", s, b)
	}
}

func (f *fixture) reg2() *prometheus.Registry { f.reg = prometheus.NewRegistry(); return f.reg }

// TestKafkaHangingAnswers503InTime: a producer that does not give up on its
// records (the brokers down) still gets the provider a 503 within the
// produce timeout, not a request left open for minutes.
func TestKafkaHangingAnswers503InTime(t *testing.T) {
	prod := &memProducer{hang: make(chan struct{})}
	defer close(prod.hang)
	srv := New(Config{WhatsAppAppSecret: secret, ProduceTimeout: 300 * time.Millisecond}, prod, prometheus.NewRegistry())
	hs := httptest.NewServer(srv)
	defer hs.Close()
	body := waBody("wamid.A failed 131026")
	req, _ := http.NewRequest("POST", hs.URL+"/webhook/whatsapp", bytes.NewReader(body))
	req.Header.Set("X-Hub-Signature-256", WhatsAppSignature(secret, body))
	start := time.Now()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("hanging producer: %v after %v; want 503 within the 300ms produce timeout", err, time.Since(start))
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Errorf("hanging producer: %d; want 503", resp.StatusCode)
	}
}

// TestUnknownKindsSkipped: a status or event kind the receiver does not
// know (one the provider added later) is skipped, and the known ones of the
// same batch are stored: refusing the batch would lose them to retries.
func TestUnknownKindsSkipped(t *testing.T) {
	f := newFixture(t)
	body := bytes.Replace(waBody("wamid.A sent", "wamid.B failed 131026"), []byte(`"sent"`), []byte(`"played"`), 1)
	if s, b := f.postWA(t, body, WhatsAppSignature(secret, body)); s != 200 || !strings.Contains(b, `"events":1`) {
		t.Errorf("a played status beside a failed one: %d %s, want 200 with 1 event", s, b)
	}
	sg := []byte(`[{"email":"a@example.com","timestamp":1800000000,"event":"exploded","sg_event_id":"e1"},` +
		`{"email":"b@example.com","timestamp":1800000000,"event":"bounce","sg_event_id":"e2"}]`)
	if s, b := f.postSG(t, "marketing", sg, f.now, f.key); s != 200 || !strings.Contains(b, `"events":1`) {
		t.Errorf("an unknown event beside a bounce: %d %s, want 200 with 1 event", s, b)
	}
	evs := f.kc.events(t)
	if len(evs) != 2 || evs[0].Kind != "failed" || evs[1].Kind != "bounce" {
		t.Errorf("stored %+v, want the failed status and the bounce", evs)
	}
}

// TestCapabilityTier: a business_capability_update is read as a tier
// event of its account (a bad tier name is an error naming the field);
// applied, it sets the tier of the account's portfolio, and an account
// without a portfolio changes nothing.
func TestCapabilityTier(t *testing.T) {
	body := func(account, tier string) []byte {
		return []byte(`{"object":"whatsapp_business_account","entry":[{"id":"` + account + `","time":1800000000,"changes":[{"field":"business_capability_update",` +
			`"value":{"max_daily_conversation_per_phone":-1,"max_daily_conversations_per_business":"` + tier + `"}}]}]}`)
	}
	evs, err := parseWhatsApp(body("1029", "TIER_10K"))
	if err != nil || len(evs) != 1 || evs[0].Kind != "tier" || evs[0].Account != "1029" || evs[0].Tier != 10000 || evs[0].Channel != "whatsapp" {
		t.Fatalf("parse: %+v %v; want one tier event of account 1029, 10000", evs, err)
	}
	// Meta's reference types the field as an integer (-1: unlimited); a
	// value not understood is skipped, the batch's other events kept.
	raw := func(account, v string) []byte {
		return []byte(`{"object":"whatsapp_business_account","entry":[{"id":"` + account + `","time":1800000000,"changes":[` +
			`{"field":"messages","value":{"metadata":{"phone_number_id":"106"},"statuses":[{"id":"wamid.1","status":"delivered","timestamp":"1800000000","recipient_id":"15550001","biz_opaque_callback_data":"m1"}]}},` +
			`{"field":"business_capability_update","value":{"max_daily_conversations_per_business":` + v + `}}]}]}`)
	}
	for v, want := range map[string]int{`2000`: 2000, `-1`: portfolio.Unlimited, `"TIER_1K"`: 1000, `"TIER_2K"`: 2000, `"TIER_HUGE"`: 0, `{"x":1}`: 0, `1.5`: 0} {
		evs, err := parseWhatsApp(raw("1029", v))
		var tiers []int
		statuses := 0
		for _, ev := range evs {
			switch ev.Kind {
			case "tier":
				tiers = append(tiers, ev.Tier)
			case "delivered":
				statuses++
			}
		}
		if err != nil || statuses != 1 || (want == 0) != (len(tiers) == 0) || (want != 0 && (len(tiers) != 1 || tiers[0] != want)) {
			t.Errorf("max_daily_conversations_per_business %s: tiers %v, %d statuses, %v; want tier %d (0: none) and the status kept", v, tiers, statuses, err, want)
		}
	}
	unl, _ := parseWhatsApp(body("1029", "TIER_UNLIMITED"))
	other, _ := parseWhatsApp(body("5555", "TIER_250"))
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	ps := portfolio.NewStore(rdb, bucket.NewKeys(""))
	ctx := context.Background()
	if err := ps.Set(ctx, "whatsapp", "106", "acme", 250); err != nil {
		t.Fatal(err)
	}
	if err := ps.SetAccount(ctx, "whatsapp", "1029", "acme"); err != nil {
		t.Fatal(err)
	}
	o := NewOutcomes(suppress.NewStore(rdb, bucket.NewKeys("")), nil, nil).WithPortfolios(ps)
	tier := func() int {
		s, err := ps.Status(ctx, "whatsapp", "acme")
		if err != nil {
			t.Fatal(err)
		}
		return s.Tier
	}
	for _, c := range []struct {
		evs  []Event
		want int
	}{{evs, 10000}, {other, 10000}, {unl, portfolio.Unlimited}} {
		if err := o.Apply(ctx, c.evs); err != nil {
			t.Fatal(err)
		}
		if got := tier(); got != c.want {
			t.Errorf("after %+v: tier %d; want %d", c.evs, got, c.want)
		}
	}
}
