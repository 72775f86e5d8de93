package actions_test

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
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/pacerhq/pacer/pacer/produce"
	"github.com/pacerhq/pacer/pacer/statuspage/actions"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

const channel = "whatsapp"

// The tokens of the test's credentials; the files hold their SHA-256.
const (
	viewerToken   = "viewer-token-7f3a"
	operatorToken = "operator-token-91c2"
)

func digest(tok string) string { s := sha256.Sum256([]byte(tok)); return hex.EncodeToString(s[:]) }

var (
	viewers   = []actions.Credential{{Name: "vera", TokenSHA256: digest(viewerToken)}}
	operators = []actions.Credential{{Name: "otto", TokenSHA256: digest(operatorToken)}}
)

// logBuffer is a JSON log safe to read while handlers write it.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines returns the log lines whose msg is msg, decoded.
func (l *logBuffer) lines(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(l.b.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// world is one test's page: its Redis prefix, control store, log, and
// (with Kafka) topic.
type world struct {
	t     *testing.T
	st    *control.Store
	url   string
	log   *logBuffer
	topic string
	cl    *kgo.Client // nil without Kafka
}

// newWorld serves the actions over a test Redis prefix of its own, with
// auth; withKafka also gives them a real Kafka broker and a topic.
func newWorld(t *testing.T, auth *actions.Auth, withKafka bool) *world {
	t.Helper()
	return newWorldWith(t, auth, withKafka, nil)
}

// newWorldWith is newWorld with set, if not nil, changing the Config.
func newWorldWith(t *testing.T, auth *actions.Auth, withKafka bool, set func(*actions.Config)) *world {
	t.Helper()
	opt, err := redis.ParseURL(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	var b [4]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	prefix := "actionstest-" + id
	t.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
	})
	w := &world{t: t, st: control.New(rdb, bucket.NewKeys(prefix)), log: &logBuffer{}, topic: "pacer.whatsapp.actionstest-" + id}
	cfg := actions.Config{Channel: channel, Topic: w.topic, Control: w.st, Auth: auth,
		Logger: slog.New(slog.NewJSONHandler(w.log, nil))}
	if withKafka {
		brokers := strings.Split(testenv.KafkaBrokers(t), ",")
		cfg.Kafka = func() (*kgo.Client, error) {
			return kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		}
		w.cl = testenv.KafkaClient(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	}
	if set != nil {
		set(&cfg)
	}
	// The page itself is package statuspage's: here a stand-in that
	// says which path it served.
	page := http.NewServeMux()
	page.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "<html>page</html>") })
	page.HandleFunc("GET /status.json", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"channel":"whatsapp"}`) })
	mux := http.NewServeMux()
	actions.New(cfg).Mount(mux, page)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	w.url = srv.URL
	return w
}

// do sends method path with body (JSON; "" for none) and token ("" for
// none) and returns the status and the body.
func (w *world) do(method, path, body, token string) (int, string) {
	w.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, w.url+path, rd)
	if err != nil {
		w.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func mustAuth(t *testing.T, v, o []actions.Credential, open bool) *actions.Auth {
	t.Helper()
	a, err := actions.NewAuth(v, o, open)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (w *world) state(campaign string) control.State {
	w.t.Helper()
	s, err := w.st.States(context.Background(), channel, []string{campaign})
	if err != nil {
		w.t.Fatal(err)
	}
	return s[0]
}

func (w *world) limit(key string) (control.KeyLimit, bool) {
	w.t.Helper()
	l, ok, err := w.st.Limit(context.Background(), channel, key)
	if err != nil {
		w.t.Fatal(err)
	}
	return l, ok
}

// TestActionsNeedAnOperator: every action, with no credential (401), a
// viewer's (403, nothing changed) and an operator's (200, the change
// visible in control.Store, logged with who acted and the old and new
// value).
func TestActionsNeedAnOperator(t *testing.T) {
	w := newWorld(t, mustAuth(t, viewers, operators, false), false)
	ctx := context.Background()
	if err := w.st.AddPublished(ctx, channel, map[string]int64{"spring": 10}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, body string
		before     func() string // the state the action changes, as text
		want       string        // ... after the operator's request
		logMsg     string
		logWant    map[string]any
	}{
		{"/status/api/campaign/pause", `{"campaign":"spring"}`, func() string { return string(w.state("spring")) }, "paused",
			"campaign state set", map[string]any{"by": "otto", "campaign": "spring", "old": "running", "new": "paused"}},
		{"/status/api/campaign/resume", `{"campaign":"spring"}`, func() string { return string(w.state("spring")) }, "",
			"campaign state set", map[string]any{"by": "otto", "old": "paused", "new": "running"}},
		{"/status/api/campaign/cancel", `{"campaign":"spring"}`, func() string { return string(w.state("spring")) }, "cancelled",
			"campaign state set", map[string]any{"by": "otto", "old": "running", "new": "cancelled"}},
		{"/status/api/limit/set", `{"key":"106","rate":12,"burst":3}`, func() string { l, ok := w.limit("106"); return fmt.Sprint(l, ok) }, "{106 12 3} true",
			"key limit set", map[string]any{"by": "otto", "key": "106", "old": "channel's", "rate": 12.0, "burst": 3.0}},
		{"/status/api/limit/set", `{"key":"106","rate":0.5}`, func() string { l, ok := w.limit("106"); return fmt.Sprint(l, ok) }, "{106 0.5 0} true",
			"key limit set", map[string]any{"by": "otto", "old_rate": 12.0, "old_burst": 3.0, "rate": 0.5, "burst": "channel's"}},
		{"/status/api/limit/unset", `{"key":"106"}`, func() string { l, ok := w.limit("106"); return fmt.Sprint(l, ok) }, "{ 0 0} false",
			"key limit unset", map[string]any{"by": "otto", "old_rate": 0.5, "new": "channel's"}},
	} {
		before := c.before()
		if code, body := w.do("POST", c.path, c.body, ""); code != http.StatusUnauthorized || !strings.Contains(body, "operator's token") {
			t.Errorf("%s %s without a credential: %d %s; want 401 saying an operator's token is needed", c.path, c.body, code, body)
		}
		if code, body := w.do("POST", c.path, c.body, "not-a-token"); code != http.StatusUnauthorized {
			t.Errorf("%s %s with an unknown token: %d %s; want 401", c.path, c.body, code, body)
		}
		if code, body := w.do("POST", c.path, c.body, viewerToken); code != http.StatusForbidden || !strings.Contains(body, `viewer \"vera\" may read the status but not act`) {
			t.Errorf("%s %s as a viewer: %d %s; want 403 naming the viewer", c.path, c.body, code, body)
		}
		if got := c.before(); got != before {
			t.Fatalf("%s refused, yet the state changed from %q to %q", c.path, before, got)
		}
		n := len(w.log.lines(c.logMsg))
		code, body := w.do("POST", c.path, c.body, operatorToken)
		if code != http.StatusOK {
			t.Fatalf("%s %s as an operator: %d %s; want 200", c.path, c.body, code, body)
		}
		if got := c.before(); got != c.want {
			t.Errorf("%s %s as an operator: the store holds %q, want %q", c.path, c.body, got, c.want)
		}
		lines := w.log.lines(c.logMsg)
		if len(lines) != n+1 {
			t.Fatalf("%s: %d %q log lines, want one more than the %d before", c.path, len(lines), c.logMsg, n)
		}
		for k, v := range c.logWant {
			if lines[n][k] != v {
				t.Errorf("%s: log line %v: %s = %v, want %v", c.path, lines[n], k, lines[n][k], v)
			}
		}
	}
	if refused := w.log.lines("status page action refused"); len(refused) != 6 || refused[0]["by"] != "vera" || refused[0]["role"] != "viewer" {
		t.Errorf("refusals logged: %v; want the viewer's 6, each naming her", refused)
	}
	// An action is a POST: a GET of its path is refused, and changes nothing.
	if code, _ := w.do("GET", "/status/api/campaign/pause?campaign=spring", "", operatorToken); code != http.StatusMethodNotAllowed || w.state("spring") != control.Cancelled {
		t.Errorf("GET of an action: %d, state %q; want 405 and nothing changed", code, w.state("spring"))
	}
}

// TestReadingNeedsACredential: /status.json needs a viewer's or an
// operator's token unless reading is open; a wrong token is refused
// either way. The page's HTML (no data) is served to anyone.
func TestReadingNeedsACredential(t *testing.T) {
	for _, c := range []struct {
		name string
		auth *actions.Auth
		want [4]int // status without a token, with an unknown one, with the viewer's, with the operator's
	}{
		{"closed", mustAuth(t, viewers, operators, false), [4]int{401, 401, 200, 200}},
		{"open", mustAuth(t, viewers, operators, true), [4]int{200, 401, 200, 200}},
		{"no credential configured", mustAuth(t, nil, nil, false), [4]int{401, 401, 401, 401}},
		{"open, no credential configured", mustAuth(t, nil, nil, true), [4]int{200, 401, 401, 401}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, c.auth, false)
			if code, body := w.do("GET", "/status", "", ""); code != 200 || body != "<html>page</html>" {
				t.Errorf("/status without a credential: %d %q; want the page", code, body)
			}
			for i, tok := range []string{"", "not-a-token", viewerToken, operatorToken} {
				code, body := w.do("GET", "/status.json", "", tok)
				if code != c.want[i] {
					t.Errorf("/status.json with token %q: %d %s; want %d", tok, code, body, c.want[i])
				}
				if code == 401 && !strings.Contains(body, `"status":401`) {
					t.Errorf("/status.json 401 body %s: want a problem+json", body)
				}
			}
		})
	}
}

// TestCredentialFiles: a credentials file's problems name the entry and
// the field, never a digest; two entries with one token are refused.
func TestCredentialFiles(t *testing.T) {
	d := digest("t")
	for _, c := range []struct{ file, want string }{
		{`{"name":"a"}`, "not the JSON list"},
		{`[{"name":"a","token_sha256":"` + d + `","role":"admin"}]`, "unknown field"},
		{`[{"name":"","token_sha256":"` + d + `"}]`, `entry 1 (""): name must be`},
		{`[{"name":"a","token_sha256":"t"}]`, `entry 1 ("a"): token_sha256 must be 64 hex digits`},
		{`[{"name":"a","token_sha256":"` + d + `"},{"name":"a","token_sha256":"` + digest("u") + `"}]`, `entry 2 ("a"): name is given to more than one entry`},
	} {
		_, err := actions.ParseCredentials("ops.json", []byte(c.file))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), d) || !strings.HasPrefix(err.Error(), "ops.json: ") {
			t.Errorf("%s: %v; want an error naming the file and %q, without the digest", c.file, err, c.want)
		}
	}
	same := []actions.Credential{{Name: "b", TokenSHA256: d}}
	if _, err := actions.NewAuth(same, []actions.Credential{{Name: "a", TokenSHA256: d}}, false); err == nil || !strings.Contains(err.Error(), `viewer "b" has the token of operator "a"`) {
		t.Errorf("one token for a viewer and an operator: %v; want refused naming both", err)
	}
}

// TestActionsOffWithoutOperators: with no operator configured every
// action is 403 saying actions are off, whoever asks.
func TestActionsOffWithoutOperators(t *testing.T) {
	w := newWorld(t, mustAuth(t, viewers, nil, false), false)
	for _, p := range []string{"/status/api/campaign/pause", "/status/api/limit/set", "/status/api/dlq/replay"} {
		for _, tok := range []string{"", viewerToken, operatorToken} {
			if code, body := w.do("POST", p, `{}`, tok); code != 403 || !strings.Contains(body, "actions are off") {
				t.Errorf("%s with token %q: %d %s; want 403, actions are off", p, tok, code, body)
			}
		}
	}
	code, body := w.do("GET", "/status/api/whoami", "", viewerToken)
	if code != 200 || !strings.Contains(body, `"role":"viewer"`) || !strings.Contains(body, `"actions":false`) {
		t.Errorf("whoami of the viewer: %d %s", code, body)
	}
}

// TestBadRequestsNameTheField: refused input is a 400 problem+json whose
// invalid-params name the field, and changes nothing.
func TestBadRequestsNameTheField(t *testing.T) {
	w := newWorld(t, mustAuth(t, viewers, operators, false), true)
	for _, c := range []struct{ method, path, body, field string }{
		{"POST", "/status/api/campaign/pause", `{"campaign":""}`, "campaign"},
		{"POST", "/status/api/campaign/pause", `{"campaign":"sprnig"}`, "campaign"}, // unknown: a typo
		{"POST", "/status/api/campaign/pause", `{"campaign":7}`, "campaign"},
		{"POST", "/status/api/campaign/pause", `{"campain":"spring"}`, "body"},
		{"POST", "/status/api/limit/set", `{"rate":5}`, "key"},
		{"POST", "/status/api/limit/set", `{"key":"106"}`, "rate"},
		{"POST", "/status/api/limit/set", `{"key":"106","rate":0}`, "rate"},
		{"POST", "/status/api/limit/set", `{"key":"106","rate":1e12}`, "rate"},
		{"POST", "/status/api/limit/set", `{"key":"106","rate":0.00001}`, "rate"},
		{"POST", "/status/api/limit/set", `{"key":"106","rate":5,"burst":0}`, "burst"},
		{"POST", "/status/api/limit/set", `{"key":"106","rate":5,"burst":2.5}`, "burst"},
		{"POST", "/status/api/limit/unset", `{"key":" "}`, "key"},
		{"GET", "/status/api/dlq?reason=bogus", "", "reason"},
		{"GET", "/status/api/dlq?n=0", "", "n"},
		{"GET", "/status/api/dlq/record?partition=x&offset=1", "", "partition"},
		{"GET", "/status/api/dlq/record?partition=0&offset=-1", "", "offset"},
		{"POST", "/status/api/dlq/replay", `{"records":[]}`, "records"},
		{"POST", "/status/api/dlq/replay", `{"records":[{"partition":0,"offset":0}],"reason":"bogus"}`, "reason"},
	} {
		code, body := w.do(c.method, c.path, c.body, operatorToken)
		var p struct {
			Status        int `json:"status"`
			InvalidParams []struct {
				Name   string `json:"name"`
				Reason string `json:"reason"`
			} `json:"invalid-params"`
		}
		if code != 400 || json.Unmarshal([]byte(body), &p) != nil || p.Status != 400 || len(p.InvalidParams) != 1 || p.InvalidParams[0].Name != c.field {
			t.Errorf("%s %s %s: %d %s; want 400 naming %s", c.method, c.path, c.body, code, body, c.field)
		}
	}
	if _, ok := w.limit("106"); ok {
		t.Errorf("a refused limit was set")
	}
}

// deadLetter writes records to w's DLQ as the consumer does: the
// envelope, its key, pacer-reason, pacer-detail and pacer-attempt.
func (w *world) deadLetter(recs ...[4]string) { // id, campaign, reason, attempts
	w.t.Helper()
	ctx := context.Background()
	if _, err := produce.EnsureTopic(ctx, w.cl, w.topic+".dlq", 1); err != nil {
		w.t.Fatal(err)
	}
	for _, r := range recs {
		v := fmt.Sprintf(`{"id":%q,"key":"106","to":"15550001","campaign":%q,"payload":{"type":"text","text":{"body":"hi"}}}`, r[0], r[1])
		rec := &kgo.Record{Topic: w.topic + ".dlq", Partition: 0, Key: []byte("106"), Value: []byte(v), Headers: []kgo.RecordHeader{
			{Key: envelope.HeaderReason, Value: []byte(r[2])}, {Key: envelope.HeaderDetail, Value: []byte("131026 undeliverable")},
			{Key: envelope.HeaderAttempt, Value: []byte(r[3])}}}
		if err := w.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			w.t.Fatal(err)
		}
	}
}

// TestDLQActions: an operator lists the DLQ by reason, campaign and key,
// reads one record (envelope, reason, detail, attempts) and replays a
// selection of them to the main topic, logged with who; a viewer and no
// credential are refused each step, and nothing is replayed for them.
func TestDLQActions(t *testing.T) {
	w := newWorld(t, mustAuth(t, viewers, operators, false), true)
	w.deadLetter([4]string{"m1", "spring", "permanent:131026", "0"}, [4]string{"m2", "spring", "attempts-exhausted", "5"},
		[4]string{"m3", "autumn", "permanent:131026", "0"})

	list := "/status/api/dlq?reason=permanent&campaign=spring&key=106"
	for _, tok := range []string{"", viewerToken} {
		if code, body := w.do("GET", list, "", tok); code != map[string]int{"": 401, viewerToken: 403}[tok] {
			t.Errorf("DLQ list with token %q: %d %s", tok, code, body)
		}
	}
	code, body := w.do("GET", list, "", operatorToken)
	var l struct {
		Records []struct {
			Partition int32  `json:"partition"`
			Offset    int64  `json:"offset"`
			ID        string `json:"id"`
			Reason    string `json:"reason"`
		} `json:"records"`
		Matched, Scanned int
	}
	if code != 200 || json.Unmarshal([]byte(body), &l) != nil || l.Matched != 1 || l.Scanned != 3 || len(l.Records) != 1 || l.Records[0].ID != "m1" {
		t.Fatalf("DLQ list reason permanent, campaign spring: %d %s; want m1 alone of 3", code, body)
	}
	code, body = w.do("GET", "/status/api/dlq?key=106", "", operatorToken)
	if json.Unmarshal([]byte(body), &l) != nil || code != 200 || l.Matched != 3 || len(l.Records) != 3 || l.Records[1].ID != "m2" || l.Records[1].Offset != 1 {
		t.Fatalf("DLQ list of key 106: %d %s; want m1, m2, m3", code, body)
	}

	rec := "/status/api/dlq/record?partition=0&offset=1"
	if code, _ := w.do("GET", rec, "", viewerToken); code != 403 {
		t.Errorf("DLQ record as a viewer: %d, want 403", code)
	}
	code, body = w.do("GET", rec, "", operatorToken)
	var r struct {
		ID, Reason, Detail, Campaign string
		Attempts                     int
		Envelope                     map[string]any
	}
	if code != 200 || json.Unmarshal([]byte(body), &r) != nil || r.ID != "m2" || r.Reason != "attempts-exhausted" || r.Attempts != 5 ||
		r.Detail != "131026 undeliverable" || r.Envelope["to"] != "15550001" {
		t.Errorf("DLQ record 0/1: %d %s; want m2, attempts-exhausted after 5 attempts, with its envelope", code, body)
	}
	if code, body := w.do("GET", "/status/api/dlq/record?partition=0&offset=9", "", operatorToken); code != 404 {
		t.Errorf("DLQ record 0/9 (none there): %d %s, want 404", code, body)
	}

	replay := `{"records":[{"partition":0,"offset":0},{"partition":0,"offset":2}]}`
	for _, tok := range []string{"", viewerToken} {
		if code, body := w.do("POST", "/status/api/dlq/replay", replay, tok); code != map[string]int{"": 401, viewerToken: 403}[tok] {
			t.Errorf("DLQ replay with token %q: %d %s", tok, code, body)
		}
	}
	if n, err := produce.TopicPartitions(context.Background(), w.cl, w.topic); err != nil || n != 0 {
		t.Fatalf("the main topic exists (%d partitions, %v) after refused replays", n, err)
	}
	code, body = w.do("POST", "/status/api/dlq/replay", replay, operatorToken)
	if code != 200 || !strings.Contains(body, `"replayed":2`) {
		t.Fatalf("DLQ replay of 0/0 and 0/2: %d %s; want 2 replayed", code, body)
	}
	// The main topic holds m1 and m3, marked replayed.
	got := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := testenv.KafkaClient(t, strings.Split(testenv.KafkaBrokers(t), ","), kgo.ConsumeTopics(w.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	for len(got) < 2 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			env, err := envelope.Parse(r.Value)
			if err == nil && envelope.Header(r, envelope.HeaderReplayed) == "1" {
				got[env.ID] = true
			}
		})
	}
	if len(got) != 2 || !got["m1"] || !got["m3"] {
		t.Errorf("main topic after the replay: %v; want m1 and m3, marked replayed", got)
	}
	if lines := w.log.lines("dlq replayed"); len(lines) != 1 || lines[0]["by"] != "otto" || lines[0]["replayed"] != 2.0 || lines[0]["records"] != 2.0 {
		t.Errorf("replay log: %v; want one line by otto, 2 records replayed", lines)
	}
}

// TestDescribe: what `pacer run` logs at start-up about who may read and
// who may act.
func TestDescribe(t *testing.T) {
	for _, c := range []struct {
		auth            *actions.Auth
		reading, acting string
	}{
		{mustAuth(t, nil, nil, false), "closed: no credential is configured, every reading is refused", "off: no operator is configured"},
		{mustAuth(t, nil, nil, true), "open: no credential needed", "off: no operator is configured"},
		{mustAuth(t, viewers, operators, false), "1 viewer(s) and 1 operator(s)", "1 operator(s)"},
	} {
		if r, a := c.auth.Describe(); r != c.reading || a != c.acting {
			t.Errorf("Describe() = %q, %q; want %q, %q", r, a, c.reading, c.acting)
		}
	}
}
