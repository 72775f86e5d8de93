package fcm

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/internal/channeltest"
)

// TestClassifyTable pins [codes] to providers.md §3.3, so an edit to one of
// them shows up here.
func TestClassifyTable(t *testing.T) {
	want := map[channels.Class][]string{
		channels.Throttle:  {"QUOTA_EXCEEDED", "RESOURCE_EXHAUSTED"},
		channels.Transient: {"UNAVAILABLE", "INTERNAL", "UNSPECIFIED_ERROR"},
		channels.Permanent: {"UNREGISTERED", "SENDER_ID_MISMATCH", "INVALID_ARGUMENT", "THIRD_PARTY_AUTH_ERROR", "APNS_AUTH_ERROR"},
		channels.Halt:      {"UNAUTHENTICATED", "PERMISSION_DENIED"},
	}
	channeltest.CheckClassTable(t, "codes", len(codes), want, func(code string) (channels.Class, bool) {
		c, ok := codes[code]
		return c, ok
	})
	for _, c := range []struct {
		status int
		class  channels.Class
	}{
		{400, channels.Permanent}, {404, channels.Permanent}, {409, channels.Permanent}, {413, channels.Permanent},
		{401, channels.Halt}, {403, channels.Halt},
		{429, channels.Throttle},
		{500, channels.Transient}, {502, channels.Transient}, {503, channels.Transient}, {504, channels.Transient},
	} {
		if got := statusClass(c.status); got != c.class {
			t.Errorf("statusClass(%d) = %v, want %v", c.status, got, c.class)
		}
	}
}

// TestThrottleScope: only the shapes Google documents or was seen to send
// decide a throttle's scope; a QuotaFailure's subject, whose fields FCM
// does not document, decides nothing (unknown: the tokens refused decide).
func TestThrottleScope(t *testing.T) {
	const quotaFailure = `"type.googleapis.com/google.rpc.QuotaFailure"`
	type want struct {
		scope channels.Scope
		known bool
	}
	unknown := want{channels.ScopeKey, false}
	for _, c := range []struct {
		name    string
		details string
		want    want
	}{
		{"none", `[]`, unknown},
		{"project subject", `[{"@type":` + quotaFailure + `,"violations":[{"subject":"project:p","description":"Message rate exceeded."}]}]`, unknown},
		{"device subject", `[{"@type":` + quotaFailure + `,"violations":[{"subject":"device:fcm-token-1","description":"Device message rate exceeded."}]}]`, unknown},
		{"registration token subject", `[{"@type":` + quotaFailure + `,"violations":[{"subject":"registration_token:abc"}]}]`, unknown},
		{"error info of #719", `[{"@type":"` + typeErrorInfo + `","reason":"RATE_LIMIT_EXCEEDED","metadata":{"quota_limit":"SendsPerMinutePerProject","quota_unit":"1/min/{project}"}}]`, want{channels.ScopeKey, true}},
		{"error info of a project named device", `[{"@type":"` + typeErrorInfo + `","reason":"RATE_LIMIT_EXCEEDED","metadata":{"consumer":"projects/device","quota_unit":"1/min/{project}"}}]`, want{channels.ScopeKey, true}},
		{"error info of an undocumented unit", `[{"@type":"` + typeErrorInfo + `","metadata":{"quota_unit":"1/min/{project}/{device}"}}]`, unknown},
		{"apns 429", `[{"@type":"` + typeApnsError + `","statusCode":429,"reason":"TooManyRequests"}]`, want{channels.ScopePair, true}},
		{"apns 400", `[{"@type":"` + typeApnsError + `","statusCode":400,"reason":"BadDeviceToken"}]`, unknown},
		{"odd details skipped", `["x",42,{"@type":"` + typeApnsError + `","statusCode":429}]`, want{channels.ScopePair, true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var raw []json.RawMessage
			if err := json.Unmarshal([]byte(c.details), &raw); err != nil {
				t.Fatal(err)
			}
			if scope, known := throttleScope(decodeDetails(raw)); scope != c.want.scope || known != c.want.known {
				t.Errorf("throttleScope = %v, %v; want %v, %v", scope, known, c.want.scope, c.want.known)
			}
		})
	}
}

// TestQuotaRefusals: a QUOTA_EXCEEDED of unknown scope throttles its token
// alone, again for the same token; a second token of the project within
// QuotaWindow throttles the project, and the count starts again after it;
// other projects and refusals older than the window count apart.
func TestQuotaRefusals(t *testing.T) {
	var q quotaRefusals
	t0 := time.Unix(1_700_000_000, 0)
	for _, c := range []struct {
		project, token string
		at             time.Duration
		want           channels.Scope
	}{
		{"p", "tok-a", 0, channels.ScopePair},
		{"p", "tok-a", time.Second, channels.ScopePair},                 // the same device again
		{"q", "tok-b", 2 * time.Second, channels.ScopePair},             // another project
		{"p", "tok-b", 3 * time.Second, channels.ScopeKey},              // two tokens of p within the window
		{"p", "tok-c", 4 * time.Second, channels.ScopePair},             // counted anew after the project throttle
		{"p", "tok-d", 4*time.Second + QuotaWindow, channels.ScopePair}, // tok-c is a window old
		{"p", "tok-e", 5*time.Second + QuotaWindow, channels.ScopeKey},
	} {
		if got := q.scope(c.project, c.token, t0.Add(c.at)); got != c.want {
			t.Errorf("%s %s at %v: scope %v, want %v", c.project, c.token, c.at, got, c.want)
		}
	}
}

func TestErrorCode(t *testing.T) {
	ds := decodeDetails([]json.RawMessage{
		json.RawMessage(`{"@type":"` + typeErrorInfo + `","reason":"X"}`),
		json.RawMessage(`{"@type":"` + typeFcmError + `","errorCode":"UNREGISTERED"}`),
	})
	if got := errorCode(ds, "NOT_FOUND"); got != "UNREGISTERED" {
		t.Errorf("errorCode = %q, want the FcmError's", got)
	}
	if got := errorCode(ds[:1], "NOT_FOUND"); got != "NOT_FOUND" {
		t.Errorf("errorCode without FcmError = %q, want the status", got)
	}
	empty := decodeDetails([]json.RawMessage{json.RawMessage(`{"@type":"` + typeFcmError + `"}`)})
	if got := errorCode(empty, "INTERNAL"); got != "INTERNAL" {
		t.Errorf("errorCode of an FcmError without errorCode = %q, want the status", got)
	}
}

func TestTokensCache(t *testing.T) {
	var fetches atomic.Int32
	exp := time.Now().Add(time.Hour)
	ts := newTokens(func(ctx context.Context) (*oauth2.Token, error) {
		n := fetches.Add(1)
		time.Sleep(10 * time.Millisecond) // let the others pile up on the semaphore
		return &oauth2.Token{AccessToken: "t" + strconv.Itoa(int(n)), Expiry: exp}, nil
	})
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if tok, err := ts.get(t.Context()); err != nil || tok.AccessToken != "t1" {
				t.Errorf("get = %v, %v; want t1", tok, err)
			}
		})
	}
	wg.Wait()
	if n := fetches.Load(); n != 1 {
		t.Fatalf("%d fetches for 50 concurrent gets, want 1", n)
	}
	ts.invalidate("someone-else") // a token no longer cached: no effect
	if tok, _ := ts.get(t.Context()); tok.AccessToken != "t1" {
		t.Fatalf("invalidate of another token dropped t1")
	}
	ts.invalidate("t1")
	if tok, _ := ts.get(t.Context()); tok.AccessToken != "t2" || fetches.Load() != 2 {
		t.Fatalf("after invalidate: %v, %d fetches; want t2, 2", tok, fetches.Load())
	}
}

func TestTokensExpiry(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		name string
		tok  *oauth2.Token
		want bool
	}{
		{"nil", nil, false},
		{"empty", &oauth2.Token{Expiry: now.Add(time.Hour)}, false},
		{"no expiry", &oauth2.Token{AccessToken: "a"}, true},
		{"an hour left", &oauth2.Token{AccessToken: "a", Expiry: now.Add(time.Hour)}, true},
		{"just over the margin", &oauth2.Token{AccessToken: "a", Expiry: now.Add(tokenMargin + time.Second)}, true},
		{"within the margin", &oauth2.Token{AccessToken: "a", Expiry: now.Add(tokenMargin - time.Second)}, false},
		{"expired", &oauth2.Token{AccessToken: "a", Expiry: now.Add(-time.Second)}, false},
	} {
		if got := fresh(c.tok, now); got != c.want {
			t.Errorf("%s: fresh = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestTokensWaitHonoursContext(t *testing.T) {
	release := make(chan struct{})
	ts := newTokens(func(ctx context.Context) (*oauth2.Token, error) {
		<-release
		return &oauth2.Token{AccessToken: "a"}, nil
	})
	go ts.get(context.Background()) // holds the semaphore until release
	for len(ts.sem) == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := ts.get(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiting get = %v, want DeadlineExceeded", err)
	}
	close(release)
}

func TestTokensEmptyToken(t *testing.T) {
	ts := newTokens(func(ctx context.Context) (*oauth2.Token, error) { return &oauth2.Token{}, nil })
	if _, err := ts.get(t.Context()); err == nil {
		t.Error("an empty access token was accepted")
	}
}

func TestTokenURIAllowed(t *testing.T) {
	for u, want := range map[string]bool{
		"https://oauth2.googleapis.com/token": true,
		"http://127.0.0.1:4321/token":         true,
		"http://[::1]:4321/token":             true,
		"http://localhost/token":              true,
		"http://oauth2.googleapis.com/token":  false,
		"http://10.0.0.1/token":               false,
		"ftp://127.0.0.1/token":               false,
		"/token":                              false,
		"%zz":                                 false,
	} {
		if got := tokenURIAllowed(u); got != want {
			t.Errorf("tokenURIAllowed(%q) = %v, want %v", u, got, want)
		}
	}
}
