package channels_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/channels"
)

// body is a response body that records how far it was read and whether it
// was closed.
type body struct {
	*bytes.Reader
	closed bool
}

func (b *body) Close() error { b.closed = true; return nil }

// TestReadBody: a body up to limit + MaxDrain is read to its end (net/http
// reuses the connection only then) and returned cut to limit; a longer one
// is left unread and closed.
func TestReadBody(t *testing.T) {
	const limit = 100
	for _, c := range []struct {
		size    int
		wantEnd bool // read to the end
	}{
		{0, true}, {limit - 1, true}, {limit, true}, {limit + 1, true},
		{limit + channels.MaxDrain, true}, {limit + channels.MaxDrain + 1, false},
	} {
		b := &body{Reader: bytes.NewReader([]byte(strings.Repeat("x", c.size)))}
		raw, err := channels.ReadBody(b, limit)
		if err != nil || len(raw) != min(c.size, limit) {
			t.Errorf("size %d: ReadBody = %d bytes, %v; want %d bytes", c.size, len(raw), err, min(c.size, limit))
		}
		if atEnd := b.Len() == 0; atEnd != c.wantEnd {
			t.Errorf("size %d: %d bytes left unread, want read to the end: %v", c.size, b.Len(), c.wantEnd)
		}
		if !b.closed {
			t.Errorf("size %d: body not closed", c.size)
		}
	}
}

// TestNewTransport: the idle pool per host, its default, HTTP/2 and the
// TLS floor.
func TestNewTransport(t *testing.T) {
	tr := channels.NewTransport(0, nil)
	if tr.MaxIdleConnsPerHost != channels.DefaultMaxIdleConnsPerHost || tr.MaxIdleConns != 0 {
		t.Errorf("MaxIdleConnsPerHost, MaxIdleConns = %d, %d; want %d, 0 (no total cap)",
			tr.MaxIdleConnsPerHost, tr.MaxIdleConns, channels.DefaultMaxIdleConnsPerHost)
	}
	if !tr.ForceAttemptHTTP2 || tr.TLSClientConfig.MinVersion != tls.VersionTLS12 || tr.IdleConnTimeout != channels.IdleConnTimeout {
		t.Errorf("ForceAttemptHTTP2 %v, MinVersion %x, IdleConnTimeout %v", tr.ForceAttemptHTTP2, tr.TLSClientConfig.MinVersion, tr.IdleConnTimeout)
	}
	own := &tls.Config{ServerName: "fake", MinVersion: tls.VersionTLS13}
	tr = channels.NewTransport(7, own)
	if tr.MaxIdleConnsPerHost != 7 || tr.TLSClientConfig == own || tr.TLSClientConfig.ServerName != "fake" ||
		tr.TLSClientConfig.MinVersion != tls.VersionTLS13 {
		t.Errorf("NewTransport(7, own): MaxIdleConnsPerHost %d, TLS config copied %v, ServerName %q, MinVersion %x",
			tr.MaxIdleConnsPerHost, tr.TLSClientConfig != own, tr.TLSClientConfig.ServerName, tr.TLSClientConfig.MinVersion)
	}
}

var _ io.ReadCloser = (*body)(nil)

// TestDo: a request with a deadline goes straight to the transport (a
// redirect comes back as it is; the client's own Timeout does not apply);
// one without a deadline goes through the client (the redirect is
// followed). A transport failure is a *url.Error naming the method and URL.
func TestDo(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/from" {
			http.Redirect(w, r, "/to", http.StatusTemporaryRedirect)
			return
		}
		io.WriteString(w, "to")
	}))
	defer srv.Close()
	hc := srv.Client()
	post := func(ctx context.Context, u string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		return channels.Do(hc, req)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := post(ctx, srv.URL+"/from")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect {
		t.Errorf("with a deadline: status %d, want the redirect itself (307)", resp.StatusCode)
	}
	resp, err = post(context.Background(), srv.URL+"/from")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("without a deadline: status %d, want the redirect followed (200)", resp.StatusCode)
	}

	_, err = post(ctx, "http://127.0.0.1:1/messages")
	var ue *url.Error
	if !errors.As(err, &ue) || ue.Op != "Post" || ue.URL != "http://127.0.0.1:1/messages" {
		t.Errorf("transport failure: %#v, want *url.Error Op Post naming the URL", err)
	}
}

// TestConnCounter: a counted dial adds to Opened and Open, its first
// Close takes it off Open (a second does nothing), a failed dial counts
// nothing.
func TestConnCounter(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var c channels.ConnCounter
	var d net.Dialer
	dial := c.Dial(d.DialContext)
	a, err := dial(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := dial(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if c.Opened() != 2 || c.Open() != 2 {
		t.Fatalf("after 2 dials: opened %d, open %d", c.Opened(), c.Open())
	}
	a.Close()
	a.Close()
	if c.Opened() != 2 || c.Open() != 1 {
		t.Errorf("after closing one twice: opened %d, open %d; want 2, 1", c.Opened(), c.Open())
	}
	b.Close()
	if _, err := dial(t.Context(), "tcp", "127.0.0.1:1"); err == nil {
		t.Fatal("dial to port 1 succeeded")
	}
	if c.Opened() != 2 || c.Open() != 0 {
		t.Errorf("after a failed dial: opened %d, open %d; want 2, 0", c.Opened(), c.Open())
	}
}

// TestDoSend: a failed request is ctx's error once ctx has ended, else a
// Transient *Error of the channel wrapping the transport's *url.Error.
func TestDoSend(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	ts.Close() // connections are refused
	req := func(ctx context.Context) *http.Request {
		r, err := http.NewRequestWithContext(ctx, "POST", ts.URL+"/send", nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	_, err := channels.DoSend(t.Context(), http.DefaultClient, req(t.Context()), "x")
	var e *channels.Error
	var ue *url.Error
	if !errors.As(err, &e) || e.Channel != "x" || e.Class != channels.Transient || !errors.As(e.Err, &ue) {
		t.Errorf("refused: %v; want a transient *channels.Error of x wrapping a *url.Error", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := channels.DoSend(ctx, http.DefaultClient, req(ctx), "x"); err != context.Canceled {
		t.Errorf("cancelled: %v; want context.Canceled", err)
	}
}
