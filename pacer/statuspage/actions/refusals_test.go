package actions_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacerhq/pacer/pacer/statuspage/actions"
	"github.com/prometheus/client_golang/prometheus"
)

// problemOf decodes a problem+json answer: its status and its
// invalid-params by name.
func problemOf(t *testing.T, body string) (status int, detail string, params map[string]string) {
	t.Helper()
	var p struct {
		Status        int    `json:"status"`
		Detail        string `json:"detail"`
		InvalidParams []struct {
			Name   string `json:"name"`
			Reason string `json:"reason"`
		} `json:"invalid-params"`
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("answer %q is not a problem+json: %v", body, err)
	}
	params = map[string]string{}
	for _, ip := range p.InvalidParams {
		params[ip.Name] = ip.Reason
	}
	return p.Status, p.Detail, params
}

// TestEveryAPIAnswerIsAProblem: under /status/api/, a known path with
// another method is a 405 problem+json with Allow, an unknown path a 404
// problem+json naming it.
func TestEveryAPIAnswerIsAProblem(t *testing.T) {
	w := newWorld(t, mustAuth(t, viewers, operators, false), false)
	for _, c := range []struct {
		method, path string
		status       int
		allow, in    string
	}{
		{"GET", "/status/api/campaign/pause", 405, "POST", "GET /status/api/campaign/pause: this path answers POST only"},
		{"GET", "/status/api/dlq/replay", 405, "POST", "answers POST only"},
		{"POST", "/status/api/whoami", 405, "GET, HEAD", "answers GET, HEAD only"},
		{"POST", "/status/api/dlq", 405, "GET, HEAD", "answers GET, HEAD only"},
		{"POST", "/status/api/campaign/frobnicate", 404, "", "/status/api/campaign/frobnicate is not a path of the status page's API"},
		{"GET", "/status/api/", 404, "", "/status/api/ is not a path"},
	} {
		req, _ := http.NewRequest(c.method, w.url+c.path, strings.NewReader(`{"campaign":"spring"}`))
		req.Header.Set("Authorization", "Bearer "+operatorToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Status int    `json:"status"`
			Detail string `json:"detail"`
		}
		jerr := json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if resp.StatusCode != c.status || jerr != nil || p.Status != c.status || !strings.Contains(p.Detail, c.in) ||
			resp.Header.Get("Content-Type") != "application/problem+json" || resp.Header.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d %s, Allow %q, problem %+v (%v); want %d problem+json saying %q, Allow %q",
				c.method, c.path, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Allow"), p, jerr, c.status, c.in, c.allow)
		}
	}
}

// TestBodyIsOneJSONObject: a body is one JSON object of the fields'
// JSON types, nothing after it; a refusal names the field and JSON's
// types, never Go's; numbers are JSON numbers and burst is bounded.
func TestBodyIsOneJSONObject(t *testing.T) {
	w := newWorld(t, mustAuth(t, viewers, operators, false), false)
	for _, c := range []struct{ path, body, field, reason string }{
		{"/status/api/campaign/pause", `{"campaign":"x"} {"campaign":"y"}`, "body", "must be one JSON object with nothing after it"},
		{"/status/api/campaign/pause", `{"campaign":"x"} x`, "body", "must be one JSON object with nothing after it"},
		{"/status/api/campaign/pause", `["spring"]`, "body", "must be a JSON object"},
		{"/status/api/campaign/pause", `"spring"`, "body", "must be a JSON object"},
		{"/status/api/campaign/pause", `{"campaign":123}`, "campaign", "must be a string"},
		{"/status/api/campaign/pause", `{"campaign":"x","force":"yes"}`, "force", "must be true or false"},
		{"/status/api/limit/set", `{"key":"106","rate":"20"}`, "rate", "must be a number"},
		{"/status/api/limit/set", `{"key":"106","rate":20,"burst":"5"}`, "burst", "must be a number"},
		{"/status/api/limit/set", `{"key":106,"rate":20}`, "key", "must be a string"},
		{"/status/api/limit/set", `{"key":"106","rate":20,"burst":1000000001}`, "burst", "1000000001 is above the highest a pacer accepts (1000000000 messages)"},
		{"/status/api/limit/set", `{"key":"106","rate":0.001,"burst":1000000000}`, "burst", "1000000000 takes longer than 100 years to refill at 0.001 msgs/s: at most 3153600 at that rate"},
		{"/status/api/dlq/replay", `{"records":{"partition":0}}`, "records", "must be a list"},
		{"/status/api/dlq/replay", `{"records":[{"partition":"0","offset":1}]}`, "records.partition", "must be a number"},
	} {
		code, body := w.do("POST", c.path, c.body, operatorToken)
		status, _, params := problemOf(t, body)
		if code != 400 || status != 400 || len(params) != 1 || params[c.field] != c.reason || strings.Contains(body, "Go ") || strings.Contains(body, "struct") {
			t.Errorf("%s %s: %d %s; want 400 naming %s: %q", c.path, c.body, code, body, c.field, c.reason)
		}
	}
	if _, ok := w.limit("106"); ok {
		t.Errorf("a refused limit was set")
	}
	// The bound itself is accepted.
	if code, body := w.do("POST", "/status/api/limit/set", `{"key":"106","rate":20,"burst":1000000000}`, operatorToken); code != 200 {
		t.Errorf("burst 1000000000: %d %s; want 200", code, body)
	}
}

// TestUnknownTokensAreLoggedAndCounted: a token no file lists is logged
// at WARN with the remote address and the path, never the token, once a
// second per address at most (the rest counted in the next line), and
// counted in pacer_page_refused_total{reason}, as a viewer acting is.
func TestUnknownTokensAreLoggedAndCounted(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	reg := prometheus.NewRegistry()
	w := newWorldWith(t, mustAuth(t, viewers, operators, false), false, func(c *actions.Config) {
		c.Metrics = reg
		c.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	const bad = "guessed-token-5d1e"
	for range 3 {
		w.do("POST", "/status/api/campaign/pause", `{"campaign":"x"}`, bad)
	}
	w.do("GET", "/status.json", "", bad)
	lines := w.log.lines("status page token refused")
	if len(lines) != 1 || lines[0]["level"] != "WARN" || lines[0]["remote"] != "127.0.0.1" || lines[0]["path"] != "/status/api/campaign/pause" ||
		lines[0]["method"] != "POST" || lines[0]["suppressed"] != 0.0 {
		t.Fatalf("refusals logged within a second: %v; want one WARN line with the remote address and the path", lines)
	}
	mu.Lock()
	now = now.Add(1500 * time.Millisecond)
	mu.Unlock()
	w.do("GET", "/status/api/whoami", "", bad)
	lines = w.log.lines("status page token refused")
	if len(lines) != 2 || lines[1]["path"] != "/status/api/whoami" || lines[1]["suppressed"] != 3.0 {
		t.Errorf("refusals logged 1.5s later: %v; want a second line counting the 3 not logged", lines)
	}
	w.do("POST", "/status/api/campaign/pause", `{"campaign":"x"}`, viewerToken)
	w.log.mu.Lock()
	all := w.log.b.String()
	w.log.mu.Unlock()
	if strings.Contains(all, bad) {
		t.Errorf("the log holds the refused token: %s", all)
	}
	if got := refusedCount(t, reg, actions.RefusedUnknownToken); got != 5 {
		t.Errorf("pacer_page_refused_total{reason=unknown-token} = %v, want 5", got)
	}
	if got := refusedCount(t, reg, actions.RefusedNotOperator); got != 1 {
		t.Errorf("pacer_page_refused_total{reason=not-operator} = %v, want 1", got)
	}
}

// refusedCount returns pacer_page_refused_total{reason} of reg.
func refusedCount(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "pacer_page_refused_total" && m.GetLabel()[0].GetValue() == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no pacer_page_refused_total{reason=%q}", reason)
	return 0
}

// TestTokenWrittenWronglyInAFile: nothing tells a token of 64 hex digits
// from a SHA-256 when a file is read, so a token written in a file as is,
// or hashed with echo's newline, is refused when used, saying how to fix
// the file.
func TestTokenWrittenWronglyInAFile(t *testing.T) {
	const hexToken = "3f0c9a7be21d45c6a8f07b3e9d2c1a4b5e6f708192a3b4c5d6e7f8091a2b3c4d" // openssl rand -hex 32
	const echoed = "echoed-token-22aa"
	auth := mustAuth(t, nil, []actions.Credential{{Name: "otto", TokenSHA256: hexToken}, {Name: "eve", TokenSHA256: digest(echoed + "\n")}}, false)
	w := newWorld(t, auth, false)
	for _, c := range []struct{ token, want string }{
		{hexToken, `a credentials file holds this token itself as token_sha256, not its SHA-256; write the output of printf %s \"$TOKEN\" | sha256sum there instead`},
		{echoed, `a credentials file holds the SHA-256 of this token followed by a newline (echo adds one); write the output of printf %s \"$TOKEN\" | sha256sum there instead`},
	} {
		if code, body := w.do("POST", "/status/api/campaign/pause", `{"campaign":"x"}`, c.token); code != 401 || !strings.Contains(body, c.want) {
			t.Errorf("a token the file holds wrongly: %d %s; want 401 saying %s", code, body, c.want)
		}
	}
	if code, body := w.do("GET", "/status/api/whoami", "", "some-other-token"); code != 401 || strings.Contains(body, "credentials file") {
		t.Errorf("an unknown token: %d %s; want 401 without a file's hint", code, body)
	}
}

// TestDLQReplayOfNoRecord: replaying a position the DLQ has no record at
// (a partition it lacks, an offset past its end) is a 404 naming records,
// as reading that record is, and nothing is replayed; a bad reason is
// said once.
func TestDLQReplayOfNoRecord(t *testing.T) {
	w := newWorld(t, mustAuth(t, viewers, operators, false), true)
	w.deadLetter([4]string{"m1", "spring", "permanent:131026", "0"})
	for _, c := range []struct{ body, reason string }{
		{`{"records":[{"partition":99,"offset":0}]}`, ".dlq has no partition 99 (partitions 0..0); nothing was replayed"},
		{`{"records":[{"partition":0,"offset":0},{"partition":0,"offset":5}]}`, ".dlq partition 0 has no offset 5 (it holds offsets 0..0); nothing was replayed"},
	} {
		code, body := w.do("POST", "/status/api/dlq/replay", c.body, operatorToken)
		status, _, params := problemOf(t, body)
		if code != 404 || status != 404 || !strings.HasSuffix(params["records"], c.reason) {
			t.Errorf("replay %s: %d %s; want 404 naming records: ...%s", c.body, code, body, c.reason)
		}
	}
	if lines := w.log.lines("dlq replayed"); len(lines) != 0 {
		t.Errorf("replays of no record logged: %v", lines)
	}
	code, body := w.do("GET", "/status/api/dlq?reason=bogus", "", operatorToken)
	_, detail, params := problemOf(t, body)
	want := `"bogus" is not a DLQ reason: malformed, expired, permanent, attempts-exhausted, unknown-outcome, too-large, cancelled, no-credentials, suppressed, permanent:<provider code> or suppressed:<reason>`
	if code != 400 || params["reason"] != want || strings.Count(detail, "is not a DLQ reason") != 1 {
		t.Errorf("DLQ list of reason bogus: %d %s; want 400, reason: %s", code, body, want)
	}
}
