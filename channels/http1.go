package channels

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
)

// Pool sends HTTP/1.1 requests over keep-alive connections to provider
// hosts, up to a number of connections per host (fasthttp's client). It is
// the default way of the adapters whose provider takes HTTP/1.1 for a send
// (WhatsApp): net/http's client spends per request two goroutines' hand-offs,
// a header map, a context watcher and their allocations, which at thousands
// of sends a second were about a sixth of a pacer process's CPU
// (BENCHMARKS.md, "One process near the hardware").
//
// Connections: at most maxConns per host, reused (idle ones closed after
// [IdleConnTimeout]); a send that finds every connection busy waits for one
// until its deadline. TLS 1.2 or later; HTTP_PROXY, HTTPS_PROXY and
// NO_PROXY are honoured as net/http honours them. A Pool is safe for
// concurrent use and meant to be shared by the adapters' clients of one
// channel.
type Pool struct {
	c *fasthttp.Client
}

// NewPool returns a Pool of at most maxConns connections per host
// ([DefaultMaxIdleConnsPerHost] when 0 or less); tlsConfig (may be nil) is
// cloned, with TLS 1.2 the lowest version.
func NewPool(maxConns int, tlsConfig *tls.Config) *Pool {
	if maxConns <= 0 {
		maxConns = DefaultMaxIdleConnsPerHost
	}
	tc := &tls.Config{}
	if tlsConfig != nil {
		tc = tlsConfig.Clone()
	}
	tc.MinVersion = max(tc.MinVersion, tls.VersionTLS12)
	c := &fasthttp.Client{
		MaxConnsPerHost:     maxConns,
		MaxIdleConnDuration: IdleConnTimeout,
		// A send waits for a busy pool as long as its own deadline allows
		// (fasthttp bounds the wait by the request's timeout too).
		MaxConnWaitTimeout:            24 * time.Hour,
		TLSConfig:                     tc,
		NoDefaultUserAgentHeader:      true,
		DisablePathNormalizing:        true, // a path-escaped key stays escaped
		DisableHeaderNamesNormalizing: false,
		// Providers answer a send with a few hundred bytes; a longer body
		// than this fails the send (ErrBodyTooLarge), as [ReadBody] cuts it.
		MaxResponseBodySize: 1 << 20,
		// A request is sent again only when nothing of it was written
		// (a connection the provider had closed, see checkedConn), on
		// another connection, up to once per connection of the pool: any
		// other failure after a connection was had is an outcome the
		// pacer decides on (a POST that may have left).
		RetryIfErr:                retryStale,
		MaxIdemponentCallAttempts: maxConns + 1,
	}
	dial := (&fasthttp.TCPDialer{DNSCacheDuration: time.Minute}).Dial
	if proxyFromEnv() {
		dial = fasthttpproxy.FasthttpProxyHTTPDialerTimeout(30 * time.Second)
	}
	c.Dial = func(addr string) (net.Conn, error) {
		conn, err := dial(addr)
		if err != nil {
			return nil, err
		}
		return newCheckedConn(conn), nil
	}
	return &Pool{c: c}
}

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

// call is one request of [Pool.Do] run on its own goroutine.
type call struct {
	req   *fasthttp.Request
	resp  *fasthttp.Response
	err   error
	state atomic.Int32 // callRunning, callDone, callAbandoned
	done  chan struct{}
}

const (
	callRunning int32 = iota
	callDone
	callAbandoned
)

var calls = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// Do sends one request, filled by fill, and hands its response to read
// (on the caller's goroutine; the response is valid only during read). The
// request must end by ctx's deadline, or by now + timeout when ctx has
// none. Errors: ctx.Err() itself when ctx is already done, or ends before
// the response (its request then runs on until its deadline, in the
// background, and its answer is dropped); context.DeadlineExceeded when
// the deadline passed first; otherwise fasthttp's error (a dial, a write, a
// read, a body over 1 MiB), which names at most the host, never a header.
func (p *Pool) Do(ctx context.Context, timeout time.Duration, fill func(*fasthttp.Request), read func(*fasthttp.Response)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(timeout)
	}
	c := calls.Get().(*call)
	c.req, c.resp, c.err = fasthttp.AcquireRequest(), fasthttp.AcquireResponse(), nil
	c.state.Store(callRunning)
	fill(c.req)
	if ctx.Done() == nil { // never cancelled: no goroutine needed
		c.err = p.c.DoDeadline(c.req, c.resp, dl)
		return c.finish(ctx, dl, read)
	}
	go c.run(p.c, dl)
	select {
	case <-c.done:
		return c.finish(ctx, dl, read)
	case <-ctx.Done():
		if c.state.CompareAndSwap(callRunning, callAbandoned) {
			return ctx.Err() // run releases c
		}
		<-c.done // it finished meanwhile
		return c.finish(ctx, dl, read)
	}
}

func (c *call) run(fc *fasthttp.Client, dl time.Time) {
	c.err = fc.DoDeadline(c.req, c.resp, dl)
	if c.state.CompareAndSwap(callRunning, callDone) {
		c.done <- struct{}{}
		return
	}
	c.release() // the caller has gone
}

// finish reads c's response (or maps its error) and releases c.
func (c *call) finish(ctx context.Context, dl time.Time, read func(*fasthttp.Response)) error {
	defer c.release()
	if err := c.err; err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, fasthttp.ErrTimeout) && !time.Now().Before(dl) {
			return context.DeadlineExceeded
		}
		return err
	}
	read(c.resp)
	return nil
}

func (c *call) release() {
	fasthttp.ReleaseRequest(c.req)
	fasthttp.ReleaseResponse(c.resp)
	c.req, c.resp, c.err = nil, nil, nil
	calls.Put(c)
}
