package channels

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxIdleConnsPerHost is the number of idle connections to one
// provider host that [NewTransport] keeps for reuse when given 0, and the
// connections per host of the WhatsApp adapter's pool.
//
// A pool never holds more idle connections than were in use at once, so a
// generous cap costs nothing until it is reached; a cap below the sends in
// flight closes the surplus after every burst and dials it again with a new
// TLS handshake (with net/http's default of 2 per host, about 0.75 new
// connections per message at 32 sends in flight). Over HTTP/2 a
// connection carries the server's SETTINGS_MAX_CONCURRENT_STREAMS sends at
// once (100-250 at the providers), so 4096 connections cover every send a
// pacer process has in hand (PACER_PROCESS_INFLIGHT, default 8192); over
// HTTP/1.1, one send each, sends beyond the bound wait for a connection of
// the pool (see [NewTransport]): raise it through the adapter's
// Config.MaxIdleConnsPerHost for more requests at once. Idle connections
// are closed after [IdleConnTimeout].
const DefaultMaxIdleConnsPerHost = 4096

// IdleConnTimeout is how long a connection made by [NewTransport] (or the
// WhatsApp adapter's pool) stays idle before it is closed, as in net/http's
// DefaultTransport.
const IdleConnTimeout = 90 * time.Second

// MaxDrain is how many bytes of a response body beyond what an adapter
// reads [ReadBody] discards so that the connection can be reused; a longer
// body closes the connection instead.
const MaxDrain = 256 << 10

// NewTransport returns the HTTP transport the default clients of the
// adapters on net/http (APNs, FCM, SendGrid) use: net/http's DefaultTransport (proxy from the environment, 30 s dial
// timeout, TCP keep-alive, 10 s TLS handshake timeout) with TLS 1.2 or
// later, HTTP/2 where the provider offers it in the TLS handshake (ALPN) and
// HTTP/1.1 keep-alive otherwise, up to maxIdlePerHost idle connections per
// host kept for reuse (0 means [DefaultMaxIdleConnsPerHost]; no cap on the
// total over all hosts) and as many connections per host at most: more
// sends at once than that wait for a connection of the pool (a few
// milliseconds, a request's time) rather than open one that the pool would
// close after the burst and dial again with a new TLS handshake, and on HTTP/2 a health PING after 1 min without
// frames, the connection dropped if it is not answered in 15 s.
//
// tlsConfig, if not nil, is used instead of the default (a clone is taken
// and its MinVersion raised to TLS 1.2); tests set RootCAs through it.
func NewTransport(maxIdlePerHost int, tlsConfig *tls.Config) *http.Transport {
	if maxIdlePerHost <= 0 {
		maxIdlePerHost = DefaultMaxIdleConnsPerHost
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	if tlsConfig != nil {
		t.TLSClientConfig = tlsConfig.Clone()
	} else {
		t.TLSClientConfig = &tls.Config{}
	}
	t.TLSClientConfig.MinVersion = max(t.TLSClientConfig.MinVersion, tls.VersionTLS12)
	t.ForceAttemptHTTP2 = true // a custom TLS config turns it off otherwise
	t.MaxIdleConns = 0
	t.MaxIdleConnsPerHost = maxIdlePerHost
	t.MaxConnsPerHost = maxIdlePerHost
	t.IdleConnTimeout = IdleConnTimeout
	// The providers' answers to a send are a few hundred bytes of JSON:
	// asking for gzip (net/http's default) saves nothing and costs a header
	// per request and a decompressor per compressed answer.
	t.DisableCompression = true
	t.HTTP2 = &http.HTTP2Config{SendPingTimeout: time.Minute, PingTimeout: 15 * time.Second}
	return t
}

// DoSend is [Do] for the one request of a send of channel made under ctx: a
// request that fails is ctx's error if ctx has ended, else a Transient
// *Error of channel wrapping the transport's *url.Error, which names the
// URL, never a header. An adapter whose URL holds a secret redacts it
// itself rather than use DoSend.
func DoSend(ctx context.Context, hc *http.Client, req *http.Request, channel string) (*http.Response, error) {
	resp, err := Do(hc, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &Error{Channel: channel, Class: Transient, Err: err}
	}
	return resp, nil
}

// ReadBody reads at most limit bytes of body, then discards up to
// [MaxDrain] more and closes it, so that the connection goes back to the
// pool: net/http reuses a connection only when its response body was read to
// the end before Close. A body longer than limit is returned cut to limit
// bytes without error. The error is the read error, if any.
func ReadBody(body io.ReadCloser, limit int64) ([]byte, error) {
	defer body.Close()
	raw, err := io.ReadAll(io.LimitReader(body, limit))
	if err == nil && int64(len(raw)) == limit {
		_, _ = io.Copy(io.Discard, io.LimitReader(body, MaxDrain))
	}
	return raw, err
}

// Do sends req through hc and returns its response as hc.Do would, for
// the one request of a send: when req's context has a deadline (the pacer
// gives every send one) and hc has neither a cookie jar nor a redirect
// policy, the request goes straight to hc's transport, without what
// http.Client adds per request for redirects and its own timeout (a copy
// of the headers, a timer and a context: a tenth of a send's CPU). A
// provider's API answers a send without redirects; a 3xx comes back as
// it is. Otherwise (no deadline: the adapter's own timeout applies) it is
// hc.Do(req). Errors are *url.Error, as from hc.Do, and name the URL,
// never a header.
func Do(hc *http.Client, req *http.Request) (*http.Response, error) {
	if _, ok := req.Context().Deadline(); !ok || hc.Jar != nil || hc.CheckRedirect != nil {
		return hc.Do(req)
	}
	rt := hc.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, &url.Error{Op: urlErrorOp(req.Method), URL: req.URL.Redacted(), Err: err}
	}
	return resp, nil
}

// urlErrorOp is the Op of the *url.Error hc.Do returns for method
// ("Post" for POST), as net/http spells it.
func urlErrorOp(method string) string {
	if method == "" {
		return "Get"
	}
	if lower := strings.ToLower(method); len(lower) > 0 {
		return strings.ToUpper(lower[:1]) + lower[1:]
	}
	return method
}

// ConnCounter counts the connections an adapter's transport opens to its
// provider: how many were opened since the process started and how many
// are open now. The pacer reports them as metrics (new connections per
// send, open connections per channel). The zero value is ready to use;
// its methods are safe for concurrent use.
type ConnCounter struct {
	opened, open atomic.Int64
}

// Opened returns how many connections were opened (TCP connections
// dialed, whether their TLS handshake then succeeded or not).
func (c *ConnCounter) Opened() int64 { return c.opened.Load() }

// Open returns how many of them are open now.
func (c *ConnCounter) Open() int64 { return c.open.Load() }

// Dial returns dial counting its connections in c: each one dialed adds
// to Opened and Open, and its first Close takes it off Open.
func (c *ConnCounter) Dial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countedConn{Conn: conn, closed: c.Opening()}, nil
	}
}

// Opening counts a connection just opened and returns the function to call
// when it closes (once; later calls do nothing), for a transport that does
// not dial through [ConnCounter.Dial].
func (c *ConnCounter) Opening() (closed func()) {
	c.opened.Add(1)
	c.open.Add(1)
	return sync.OnceFunc(func() { c.open.Add(-1) })
}

// countedConn is a connection of a ConnCounter.
type countedConn struct {
	net.Conn
	closed func()
}

func (cc *countedConn) Close() error {
	cc.closed()
	return cc.Conn.Close()
}
