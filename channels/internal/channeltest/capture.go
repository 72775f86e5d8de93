package channeltest

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pacerhq/pacer/channels"
)

// Captured is one request a [Capture] server saw.
type Captured struct {
	Method, Path string // Path is the escaped path, as sent
	Header       http.Header
	Body         []byte
}

// Capture returns a server, closed at the end of the test, that records
// each request (up to 10 not yet read) and then lets answer write the
// response.
func Capture(t testing.TB, answer http.HandlerFunc) (*httptest.Server, <-chan Captured) {
	t.Helper()
	got := make(chan Captured, 10)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- Captured{r.Method, r.URL.EscapedPath(), r.Header.Clone(), b}
		answer(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts, got
}

// JSONObject decodes body as a JSON object of raw fields, failing the test
// when it is not one.
func JSONObject(t testing.TB, body []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Errorf("request body %s: %v", body, err)
	}
	return m
}

// CheckFields checks that the JSON object got has exactly the fields of
// want, each with want's raw JSON text; what names the object in errors.
func CheckFields(t testing.TB, what string, got map[string]json.RawMessage, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s has %d fields, want %d: %v", what, len(got), len(want), got)
	}
	for k, v := range want {
		if string(got[k]) != v {
			t.Errorf("%s[%q] = %s, want %s", what, k, got[k], v)
		}
	}
}

// SendCaptured sends m through send with its Payload replaced by payload
// (none when "") and its Key by key (kept when ""), fails the test unless
// send returns the ProviderID wantID, and returns the request got
// received.
func SendCaptured(t testing.TB, got <-chan Captured, send func(channels.Message) (channels.Result, error),
	m channels.Message, payload, key, wantID string) Captured {
	t.Helper()
	m.Payload = nil
	if payload != "" {
		m.Payload = json.RawMessage(payload)
	}
	if key != "" {
		m.Key = key
	}
	res, err := send(m)
	if err != nil || res.ProviderID != wantID {
		t.Fatalf("Send = %+v, %v", res, err)
	}
	return <-got
}

// CheckPost checks that rq is a POST to path with "Authorization: Bearer
// token" and a Content-Type of application/json: exactly that, or with
// parameters after it unless exact.
func CheckPost(t testing.TB, rq Captured, path, token string, exact bool) {
	t.Helper()
	auth, ctype := rq.Header.Get("Authorization"), rq.Header.Get("Content-Type")
	okType := ctype == "application/json" || !exact && strings.HasPrefix(ctype, "application/json")
	if rq.Method != "POST" || rq.Path != path || auth != "Bearer "+token || !okType {
		t.Errorf("got %s %s auth=%q type=%q; want POST %s, bearer token, application/json",
			rq.Method, rq.Path, auth, ctype, path)
	}
}

// CountAnswers sends n messages through send, the i-th msg(i), and counts
// them accepted (no error, and accepted(res)) or throttled (a
// *channels.Error of class Throttle, for which wantThrottle must hold, or
// the test fails naming it). Any other answer fails the test at once.
func CountAnswers(t testing.TB, n int, msg func(i int) channels.Message, send func(channels.Message) (channels.Result, error),
	accepted func(channels.Result) bool, wantThrottle func(*channels.Error) bool) (ok, throttled int) {
	t.Helper()
	for i := range n {
		res, err := send(msg(i))
		var e *channels.Error
		switch {
		case err == nil && accepted(res):
			ok++
		case channels.ClassOf(err) == channels.Throttle && errors.As(err, &e):
			if !wantThrottle(e) {
				t.Errorf("throttle = %+v", e)
			}
			throttled++
		default:
			t.Fatalf("Send %d = %+v, %v", i, res, err)
		}
	}
	return ok, throttled
}

// ServeHTTP2 starts a server of h, closed at the end of the test, speaking
// HTTP/2 with at most streams concurrent streams per connection (0: Go's
// default, 250): over TLS (and HTTP/1.1) with overTLS, else HTTP/1.1 and
// cleartext HTTP/2 (h2c, prior knowledge). It counts the connections it
// accepts in conns.
func ServeHTTP2(t testing.TB, h http.Handler, overTLS bool, streams int, conns *atomic.Int64) *httptest.Server {
	t.Helper()
	ts := httptest.NewUnstartedServer(h)
	ts.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: streams}
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	if overTLS {
		ts.EnableHTTP2 = true
		ts.StartTLS()
	} else {
		ts.Config.Protocols = new(http.Protocols)
		ts.Config.Protocols.SetHTTP1(true)
		ts.Config.Protocols.SetUnencryptedHTTP2(true)
		ts.Start()
	}
	t.Cleanup(ts.Close)
	return ts
}

// Trust returns a TLS config that trusts the certificate of ts, a server
// started with StartTLS.
func Trust(ts *httptest.Server) *tls.Config {
	roots := x509.NewCertPool()
	roots.AddCert(ts.Certificate())
	return &tls.Config{RootCAs: roots}
}
