package channels_test

import (
	"bytes"
	"crypto/tls"
	"io"
	"strings"
	"testing"

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
