// Package httppool is an HTTP/1.1 connection pool on fasthttp's client,
// with a check that a kept-alive connection is still open before a request
// is written on it, and a send's context honoured. The WhatsApp adapter
// sent through it until HTTP/2 replaced it (docs/decisions/0026); it is
// kept for the benchmark that compares the two (h2pool's
// BenchmarkSlowProvider).
package httppool

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpproxy"

	"github.com/pacerhq/pacer/channels"
)

// Pool sends HTTP/1.1 requests over keep-alive connections to provider
// hosts, up to a number of connections per host (fasthttp's client). It is
// the default way of the adapters whose provider takes HTTP/1.1 for a send
// (WhatsApp): net/http's client spends per request two goroutines' hand-offs,
// a header map, a context watcher and their allocations; sending through a
// Pool instead took a fifth off a pacer process's CPU per message at
// thousands of sends a second (docs/decisions/0020).
//
// Connections: at most maxConns per host, reused (idle ones closed after
// [channels.IdleConnTimeout]); a send that finds every connection busy
// waits for one until its deadline; a dial gives up after 30 s (net/http's
// default) and host names are resolved at most once a minute. TLS 1.2 or
// later; HTTP_PROXY, HTTPS_PROXY and NO_PROXY are honoured as net/http
// honours them. A Pool is safe for concurrent use and meant to be shared by
// the adapters' clients of one channel.
type Pool struct {
	c       *fasthttp.Client
	watched atomic.Pointer[watched] // the context watched last (see watch)

	mu      sync.Mutex
	conns   map[*checkedConn]struct{} // open connections
	counter *channels.ConnCounter
}

// NewPool returns a Pool of at most maxConns connections per host
// ([channels.DefaultMaxIdleConnsPerHost] when 0 or less); tlsConfig (may
// be nil) is cloned, with TLS 1.2 the lowest version; conns, if not nil,
// counts its connections.
func NewPool(maxConns int, tlsConfig *tls.Config, conns *channels.ConnCounter) *Pool {
	if maxConns <= 0 {
		maxConns = channels.DefaultMaxIdleConnsPerHost
	}
	tc := &tls.Config{}
	if tlsConfig != nil {
		tc = tlsConfig.Clone()
	}
	tc.MinVersion = max(tc.MinVersion, tls.VersionTLS12)
	c := &fasthttp.Client{
		MaxConnsPerHost:     maxConns,
		MaxIdleConnDuration: channels.IdleConnTimeout,
		// A send waits for a busy pool as long as its own deadline allows
		// (fasthttp bounds the wait by the request's timeout too).
		MaxConnWaitTimeout:       24 * time.Hour,
		TLSConfig:                tc,
		NoDefaultUserAgentHeader: true,
		DisablePathNormalizing:   true, // a path-escaped key stays escaped
		// Providers answer a send with a few hundred bytes; a longer body
		// than this fails the send (ErrBodyTooLarge) where [channels.ReadBody]
		// would cut it.
		MaxResponseBodySize: 1 << 20,
		// A request is sent again only when nothing of it was written
		// (a connection the provider had closed, see checkedConn), on
		// another connection, up to once per connection of the pool: any
		// other failure after a connection was had is an outcome the
		// pacer decides on (a POST that may have left).
		RetryIfErr:                retryStale,
		MaxIdemponentCallAttempts: maxConns + 1,
	}
	d := &fasthttp.TCPDialer{DNSCacheDuration: time.Minute}
	dial := func(addr string) (net.Conn, error) { return d.DialTimeout(addr, dialTimeout) }
	if proxyFromEnv() {
		dial = fasthttpproxy.FasthttpProxyHTTPDialerTimeout(dialTimeout)
	}
	if conns == nil {
		conns = new(channels.ConnCounter)
	}
	p := &Pool{c: c, conns: map[*checkedConn]struct{}{}, counter: conns}
	c.Dial = func(addr string) (net.Conn, error) {
		conn, err := dial(addr)
		if err != nil {
			return nil, err
		}
		cc := newCheckedConn(conn)
		p.track(cc)
		return cc, nil
	}
	return p
}

// dialTimeout bounds a Pool's dial (and a proxy's CONNECT), as net/http's
// DefaultTransport does.
const dialTimeout = 30 * time.Second

// retryStale is the Pool's fasthttp.RetryIfErrFunc: again, on another
// connection, only for a request refused before its first byte.
func retryStale(_ *fasthttp.Request, _ int, err error) (resetTimeout, retry bool) {
	return false, isStale(err)
}

// proxyFromEnv reports whether the environment names an HTTP proxy.
func proxyFromEnv() bool {
	for _, v := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"} {
		if os.Getenv(v) != "" {
			return true
		}
	}
	return false
}

// Do sends one request, filled by fill, and hands its response to read
// (on the caller's goroutine; the response is valid only during read). The
// request must end by ctx's deadline, or by now + timeout when ctx has
// none. Errors: ctx.Err() itself when ctx is already done, or ends before
// the response; context.DeadlineExceeded when the deadline passed first;
// otherwise fasthttp's error (a dial, a write, a read, a body over 1 MiB),
// which names at most the host, never a header.
//
// The request runs on the caller's goroutine (no goroutine per send, which
// was a few percent of a process's CPU at thousands of sends a second). A
// context cancelled before its deadline while a request of it is in flight
// therefore ends that request by closing the Pool's connections: every
// request of the Pool then in flight fails, and each whose own context has
// ended returns that context's error. The pacer cancels its sends together
// (at the end of a shutdown's drain), so this ends exactly those; a context
// cancelled once its requests are done (the usual deferred cancel) closes
// nothing. Callers that cancel one send while others are in flight must
// not share a Pool with them.
func (p *Pool) Do(ctx context.Context, timeout time.Duration, fill func(*fasthttp.Request), read func(*fasthttp.Response)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(timeout)
	}
	if w := p.watch(ctx); w != nil {
		w.inflight.Add(1)
		defer w.inflight.Add(-1)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	fill(req)
	if err := p.c.DoDeadline(req, resp, dl); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, fasthttp.ErrTimeout) && !time.Now().Before(dl) {
			return context.DeadlineExceeded
		}
		return err
	}
	read(resp)
	return nil
}

// watch returns the watcher of ctx (nil when ctx cannot end early), which
// closes the Pool's connections when ctx is cancelled before its deadline
// with requests of it in flight (see [Pool.Do]). Sends share contexts (the
// pacer hands out one per tenth of a second), so a context is watched
// once: only one that differs from the last one watched takes the lock. A
// context watched twice (sends of two contexts in turn) has two watchers,
// each counting its own requests.
func (p *Pool) watch(ctx context.Context) *watched {
	done := ctx.Done() // a context's identity: a Context value need not be comparable
	if done == nil {
		return nil
	}
	if w := p.watched.Load(); w != nil && w.done == done {
		return w
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if w := p.watched.Load(); w != nil && w.done == done {
		return w
	}
	w := &watched{done: done}
	p.watched.Store(w)
	context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.Canceled) && w.inflight.Load() > 0 {
			p.closeAll()
		}
	})
	return w
}

// watched is a context the Pool watches: its Done channel, and its
// requests in flight.
type watched struct {
	done     <-chan struct{}
	inflight atomic.Int64
}

// closeAll closes every connection of p; requests on them fail at once.
func (p *Pool) closeAll() {
	p.mu.Lock()
	conns := make([]*checkedConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// track adds c to p's connections until it is closed.
func (p *Pool) track(c *checkedConn) {
	p.mu.Lock()
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	closed := p.counter.Opening()
	c.onClose = func() {
		closed()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}
}
