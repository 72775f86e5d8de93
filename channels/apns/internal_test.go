package apns

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels/internal/channeltest"
	"github.com/pacerhq/pacer/channels/internal/h2pool"

	"github.com/pacerhq/pacer/channels"
)

// TestReasonsTable: every reason of providers.md §2.3 is in the table with
// its class, and nothing else is.
func TestReasonsTable(t *testing.T) {
	want := map[channels.Class][]string{
		channels.Throttle:  {"TooManyRequests"},
		channels.Transient: {"ServiceUnavailable", "Shutdown", "InternalServerError", "IdleTimeout"},
		channels.Permanent: {"Unregistered", "ExpiredToken", "BadDeviceToken", "DeviceTokenNotForTopic",
			"BadCollapseId", "BadExpirationDate", "BadMessageId", "BadPriority", "BadTopic", "DuplicateHeaders",
			"InvalidPushType", "MissingDeviceToken", "MissingTopic", "PayloadEmpty", "TopicDisallowed",
			"BadPath", "MethodNotAllowed", "PayloadTooLarge"},
		channels.Halt: {"TooManyProviderTokenUpdates", "ExpiredProviderToken", "InvalidProviderToken",
			"MissingProviderToken", "UnrelatedKeyIdInToken", "BadEnvironmentKeyIdInToken", "BadCertificate",
			"BadCertificateEnvironment", "Forbidden"},
	}
	channeltest.CheckClassTable(t, "reasons", len(reasons), want, func(reason string) (channels.Class, bool) {
		r, ok := reasons[reason]
		if ok && r.meaning == "" {
			t.Errorf("reasons[%q] has no meaning", reason)
		}
		if wantScope := channels.ScopeKey; reason == "TooManyRequests" {
			if r.scope != channels.ScopePair {
				t.Errorf("TooManyRequests scope = %v, want pair", r.scope)
			}
		} else if r.scope != wantScope {
			t.Errorf("reasons[%q].scope = %v, want key", reason, r.scope)
		}
		return r.class, ok
	})
}

func TestStatusClass(t *testing.T) {
	for status, want := range map[int]channels.Class{
		201: channels.Transient, 302: channels.Transient, 400: channels.Permanent, 401: channels.Permanent,
		403: channels.Halt, 404: channels.Permanent, 410: channels.Permanent, 413: channels.Permanent,
		429: channels.Throttle, 500: channels.Transient, 503: channels.Transient, 599: channels.Transient,
	} {
		if got := statusClass(status); got != want {
			t.Errorf("statusClass(%d) = %v, want %v", status, got, want)
		}
	}
}

func newTokenSource(t *testing.T, now func() time.Time) *tokenSource {
	t.Helper()
	p8 := testP8(t)
	key, err := parseKey(p8)
	if err != nil {
		t.Fatal(err)
	}
	return &tokenSource{keyID: "ABC123DEFG", teamID: "DEF123GHIJ", key: key, ttl: DefaultTokenTTL, now: now}
}

// TestTokenSourceSteps steps the token source through time: reuse within
// the TTL, renewal at it, and renew's 20-minute floor.
func TestTokenSourceSteps(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var at time.Duration
	ts := newTokenSource(t, func() time.Time { return t0.Add(at) })
	var cur string
	for i, st := range []struct {
		at      time.Duration
		renew   bool // call renew(current) instead of get
		renewed bool // renew returned ok
		mints   int  // after the step
	}{
		{0, false, false, 1},
		{time.Second, false, false, 1},
		{19*time.Minute + 59*time.Second, true, false, 1},
		{20 * time.Minute, true, true, 2},                  // floor reached: one renewal
		{20 * time.Minute, true, false, 2},                 // the new token is 0 s old
		{59*time.Minute + 59*time.Second, false, false, 2}, // 39m59s old
		{60 * time.Minute, false, false, 3},                // TTL reached
		{60*time.Minute + 500*time.Millisecond, false, false, 3},
		{-time.Hour, false, false, 3}, // the clock going back keeps the token
	} {
		at = st.at
		if st.renew {
			b, ok := ts.renew(cur)
			if ok != st.renewed || (ok && (b == cur || b == "")) {
				t.Fatalf("step %d: renew = %q, %v; want ok %v and a new token", i, b, ok, st.renewed)
			}
			if ok {
				cur = b
			}
		} else {
			b, err := ts.get()
			if err != nil {
				t.Fatal(err)
			}
			cur = b
		}
		if ts.mints != st.mints {
			t.Fatalf("step %d at %v: %d mints, want %d", i, st.at, ts.mints, st.mints)
		}
	}
	// renew with a stale token returns the current one without minting.
	at = 2 * time.Hour
	if b, ok := ts.renew("bearer old"); !ok || b != cur || ts.mints != 3 {
		t.Errorf("renew(stale) = %q, %v with %d mints; want the current token, no mint", b, ok, ts.mints)
	}
}

// TestTokenSourceConcurrent: many goroutines asking at once, at the TTL,
// and renewing the same stale token, get one token minted each time.
func TestTokenSourceConcurrent(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	now := t0
	ts := newTokenSource(t, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	run := func(f func() string) map[string]bool {
		var wg sync.WaitGroup
		var seenMu sync.Mutex
		seen := map[string]bool{}
		for range 1000 {
			wg.Go(func() {
				b := f()
				seenMu.Lock()
				seen[b] = true
				seenMu.Unlock()
			})
		}
		wg.Wait()
		return seen
	}
	get := func() string { b, _ := ts.get(); return b }
	if s := run(get); len(s) != 1 || ts.mints != 1 {
		t.Fatalf("first: %d tokens, %d mints; want 1", len(s), ts.mints)
	}
	first, _ := ts.get()
	mu.Lock()
	now = t0.Add(25 * time.Minute)
	mu.Unlock()
	if s := run(func() string { b, _ := ts.renew(first); return b }); len(s) != 1 || s[first] || ts.mints != 2 {
		t.Fatalf("renew: %d tokens, %d mints; want 1 new token, 2 mints", len(s), ts.mints)
	}
	mu.Lock()
	now = t0.Add(65 * time.Minute)
	mu.Unlock()
	if s := run(get); len(s) != 1 || ts.mints != 3 {
		t.Fatalf("at the TTL: %d tokens, %d mints; want 1, 3", len(s), ts.mints)
	}
}

// TestDefaultHTTPClient: the default client speaks HTTP/2 over TLS 1.2+
// (or without TLS to an http:// base URL) and nothing else.
func TestDefaultHTTPClient(t *testing.T) {
	hc := defaultHTTPClient(DefaultConnections, nil)
	tr := hc.Transport.(*h2pool.Pool).Transport()
	if tr.Protocols == nil || !tr.Protocols.HTTP2() || tr.Protocols.HTTP1() || !tr.Protocols.UnencryptedHTTP2() {
		t.Errorf("protocols = %v; want HTTP/2 only, over TLS or cleartext", tr.Protocols)
	}
	if tr.TLSClientConfig.MinVersion != tls.VersionTLS12 || hc.Timeout != DefaultTimeout {
		t.Errorf("min TLS %x, timeout %v", tr.TLSClientConfig.MinVersion, hc.Timeout)
	}
	trust := func(ts *httptest.Server) *http.Client {
		pool := x509.NewCertPool()
		pool.AddCert(ts.Certificate())
		return defaultHTTPClient(DefaultConnections, &tls.Config{RootCAs: pool})
	}
	h1 := httptest.NewUnstartedServer(http.NotFoundHandler())
	h1.Config.ErrorLog = log.New(io.Discard, "", 0) // it refuses our handshake, as it should
	h1.StartTLS()
	defer h1.Close()
	if resp, err := trust(h1).Get(h1.URL); err == nil {
		resp.Body.Close()
		t.Errorf("HTTP/1.1-only server answered %s; want a failure", resp.Proto)
	}
	h2 := httptest.NewUnstartedServer(http.NotFoundHandler())
	h2.EnableHTTP2 = true
	h2.StartTLS()
	defer h2.Close()
	resp, err := trust(h2).Get(h2.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Errorf("proto = %s, want HTTP/2", resp.Proto)
	}
}

func TestIsDeviceToken(t *testing.T) {
	for s, want := range map[string]bool{
		"": false, "a": false, "ab": true, "AB09": true, "0g": false, "ab cd": false, "ab/c": false,
	} {
		if got := isDeviceToken(s); got != want {
			t.Errorf("isDeviceToken(%q) = %v", s, got)
		}
	}
}

// testP8 returns a fresh .p8 key (PEM PKCS#8 P-256).
func testP8(t *testing.T) []byte {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	return channeltest.PKCS8(t, channeltest.Must(t, k, err))
}
