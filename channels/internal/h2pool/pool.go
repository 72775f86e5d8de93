// Package h2pool is the connection pool the adapters send through:
// HTTP/2 (multiplexed streams) where the provider speaks it, over TLS
// (ALPN) or, to an http:// base URL such as a local fake, without TLS
// (h2c, prior knowledge); HTTP/1.1 keep-alive only as a bounded fallback.
package h2pool

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacerhq/pacer/channels"
)

const (
	// dialTimeout bounds one connection attempt (TCP and TLS), shared by
	// every send waiting for it, so that no single send's deadline cuts it.
	dialTimeout = 30 * time.Second
	// dialBackoff is how long after a failed connection attempt sends fail
	// with its error instead of dialing again: a host that refuses us is not
	// hammered with handshakes.
	dialBackoff = time.Second
)

// Config configures a [Pool].
type Config struct {
	// Name prefixes the pool's errors ("apns: connect: ...").
	Name string
	// MaxConns bounds the connections per host; at least 1.
	MaxConns int
	// TLSConfig, if not nil, is cloned for the connections, its
	// MinVersion raised to TLS 1.2; tests set RootCAs through it.
	TLSConfig *tls.Config
	// HTTP2Only refuses HTTP/1.1: a host that does not offer HTTP/2 in its
	// TLS handshake fails the send, and an http:// host is spoken to in
	// h2c without a check (APNs).
	HTTP2Only bool
	// H2C speaks HTTP/2 without TLS (prior knowledge) to an http:// host,
	// as HTTP2Only does; without either, HTTP/1.1. A host that does not
	// speak h2c fails the sends (its answer to the HTTP/2 preface is not
	// HTTP/2), so it is for a host known to: a local fake.
	H2C bool
	// FirstAnswer makes a new connection take one request until its first
	// answer arrives, by which time the server's SETTINGS (sent first) have
	// been read: before them net/http assumes 100 streams, and a server
	// that allows fewer (APNs: 1 until a valid provider token was posted)
	// would refuse the rest.
	FirstAnswer bool
	// IdleTimeout closes a connection without a request for that long;
	// default [channels.IdleConnTimeout].
	IdleTimeout time.Duration
	// Conns, if not nil, counts the pool's connections.
	Conns *channels.ConnCounter
}

// Pool is an http.RoundTripper that sends every request over at most
// Config.MaxConns connections per host, each HTTP/2 where the host speaks
// it (each then carries as many requests at once as the server's
// SETTINGS_MAX_CONCURRENT_STREAMS allows) and HTTP/1.1 otherwise (one
// request at a time). A request beyond what the connections take waits
// for a stream to come free, or for the server to allow more, and a
// connection is dialed only when every open one is full: the pool grows
// with the requests in flight, to in flight / streams per connection,
// never beyond the bound. net/http's own pool dials a new connection for
// each request waiting for a stream, and its StrictMaxConcurrentRequests
// stalls requests when more wait than the server allows streams
// (golang/go#70809), so the pool is ours, on net/http's ClientConn.
//
// An https host speaks HTTP/2 if it offers it in the TLS handshake (ALPN).
// An http:// host is spoken to in h2c (prior knowledge) with
// Config.HTTP2Only or Config.H2C, else in HTTP/1.1. A host in HTTP/1.1
// (found so on the first connection) is sent to through net/http's own
// pool of keep-alive connections, at most MaxConns too: one request per
// connection at a time, so the bound should be the requests in flight. A
// Pool is safe for concurrent use.
type Pool struct {
	cfg Config
	t   *http.Transport // dials the connections: HTTP/2 (and HTTP/1.1 unless HTTP2Only)
	t1  *http.Transport // HTTP/1.1 only: to an http:// host without h2c
	h2c *http.Transport // h2c only: to an http:// host with Config.H2C

	mu    sync.Mutex
	hosts map[string]*hostPool // by scheme://host:port
}

// New returns a Pool for cfg.
func New(cfg Config) *Pool {
	cfg.MaxConns = max(cfg.MaxConns, 1)
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = channels.IdleConnTimeout
	}
	if cfg.Conns == nil {
		cfg.Conns = new(channels.ConnCounter)
	}
	var p1, p2 http.Protocols
	p1.SetHTTP1(true)
	p2.SetHTTP2(true)
	p2.SetHTTP1(!cfg.HTTP2Only)
	p2.SetUnencryptedHTTP2(cfg.HTTP2Only) // h2c to any http:// host
	var pc http.Protocols
	pc.SetUnencryptedHTTP2(true)
	t, t1, h2c := cfg.transport(p2), cfg.transport(p1), cfg.transport(pc)
	t1.MaxConnsPerHost = cfg.MaxConns // net/http's own pool, not ClientConns
	return &Pool{cfg: cfg, t: t, t1: t1, h2c: h2c, hosts: map[string]*hostPool{}}
}

// Default returns the Pool of an adapter's default client: named name, at
// most maxConns connections per host ([channels.DefaultMaxIdleConnsPerHost]
// when 0 or less), h2c to an http:// host with h2c, counted in conns.
func Default(name string, maxConns int, h2c bool, conns *channels.ConnCounter) *Pool {
	if maxConns <= 0 {
		maxConns = channels.DefaultMaxIdleConnsPerHost
	}
	return New(Config{Name: name, MaxConns: maxConns, H2C: h2c, Conns: conns})
}

// transport returns a transport for the pool's connections that speaks
// protocols. Protocols must be set before the transport is first used or
// cloned: net/http reads them once.
func (cfg Config) transport(protocols http.Protocols) *http.Transport {
	t := channels.NewTransport(cfg.MaxConns, cfg.TLSConfig)
	t.Protocols = &protocols
	t.IdleConnTimeout = cfg.IdleTimeout
	// The pool bounds its connections; net/http's count of them is for
	// its own pool, and closing an HTTP/1.1 ClientConn with a bound set
	// takes one off a count it never added to (a panic, Go 1.26).
	t.MaxConnsPerHost = 0
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	t.DialContext = cfg.Conns.Dial(d.DialContext)
	return t
}

// Transport returns the transport that dials the pool's connections.
func (p *Pool) Transport() *http.Transport { return p.t }

// Conns returns the counter of the pool's connections.
func (p *Pool) Conns() *channels.ConnCounter { return p.cfg.Conns }

// CloseIdleConnections closes the connections without a request in flight.
func (p *Pool) CloseIdleConnections() {
	p.t1.CloseIdleConnections()
	p.mu.Lock()
	hosts := make([]*hostPool, 0, len(p.hosts))
	for _, h := range p.hosts {
		hosts = append(hosts, h)
	}
	p.mu.Unlock()
	for _, h := range hosts {
		h.mu.Lock()
		h.conns = slices.DeleteFunc(h.conns, func(c *poolConn) bool {
			if c.cc.InFlight() == 0 {
				c.cc.Close()
				return true
			}
			return false
		})
		h.mu.Unlock()
	}
}

// errHTTP1 is the error of get for a host found not to speak HTTP/2.
var errHTTP1 = errors.New("the host speaks HTTP/1.1")

// poolConn is one connection.
type poolConn struct {
	cc   *http.ClientConn
	warm bool // an answer has arrived on it; guarded by hostPool.mu
}

// dialCall is one connection attempt; err is set before done is closed.
type dialCall struct {
	done chan struct{}
	err  error
}

// RoundTrip sends req on a connection of the pool, waiting for a free
// stream up to req's context.
func (p *Pool) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && !p.cfg.HTTP2Only && !p.cfg.H2C {
		return p.t1.RoundTrip(req)
	}
	h := p.host(req.URL.Scheme, req.URL.Host)
	if h.h1.Load() {
		return p.t1.RoundTrip(req)
	}
	c, err := h.get(req.Context())
	if errors.Is(err, errHTTP1) {
		return p.t1.RoundTrip(req)
	}
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	resp, err := c.cc.RoundTrip(req)
	h.mu.Lock()
	first := !c.warm
	c.warm = true
	h.mu.Unlock()
	if first {
		h.signal()
	}
	return resp, err
}

// host returns the pool of scheme://hostport, made on first use.
func (p *Pool) host(scheme, hostport string) *hostPool {
	addr := hostport
	if _, _, err := net.SplitHostPort(hostport); err != nil {
		port := "443"
		if scheme == "http" {
			port = "80"
		}
		addr = net.JoinHostPort(hostport, port)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.hosts[scheme+"://"+addr]
	if h == nil {
		h = &hostPool{p: p, scheme: scheme, addr: addr, wake: make(chan struct{})}
		p.hosts[scheme+"://"+addr] = h
	}
	return h
}

// hostPool is the connections to one host.
type hostPool struct {
	p      *Pool
	scheme string
	addr   string          // host:port
	t      *http.Transport // the transport of its connections; set by the first connect
	h1     atomic.Bool     // the host does not speak HTTP/2: its requests go through Pool.t1

	mu      sync.Mutex
	conns   []*poolConn
	dial    *dialCall // the connection attempt under way, or nil
	lastErr error     // the last failed attempt's error, for dialBackoff
	lastAt  time.Time

	wmu  sync.Mutex
	wake chan struct{} // closed when a slot may have come free
}

// get returns a connection on which a stream is reserved for the caller.
// It dials only when every connection is at its stream limit and fewer
// than the bound are open; otherwise it waits until a stream comes free,
// the dial ends or ctx is done.
func (h *hostPool) get(ctx context.Context) (*poolConn, error) {
	for {
		if h.h1.Load() {
			return nil, errHTTP1
		}
		wake := h.waitChan()
		h.mu.Lock()
		h.conns = slices.DeleteFunc(h.conns, func(c *poolConn) bool { return c.cc.Err() != nil })
		var best *poolConn
		bestAvail := 0
		for _, c := range h.conns {
			if h.p.cfg.FirstAnswer && !c.warm && c.cc.InFlight() > 0 {
				continue // one request until the server's SETTINGS are known
			}
			if a := c.cc.Available(); a > bestAvail {
				best, bestAvail = c, a
			}
		}
		if best != nil && best.cc.Reserve() == nil {
			h.mu.Unlock()
			return best, nil
		}
		call := h.dial
		if call == nil && best == nil && len(h.conns) < h.p.cfg.MaxConns {
			if h.lastErr != nil && time.Since(h.lastAt) < dialBackoff {
				err := h.lastErr
				h.mu.Unlock()
				return nil, err
			}
			call = &dialCall{done: make(chan struct{})}
			h.dial = call
			go h.connect(call)
		}
		h.mu.Unlock()

		var done chan struct{}
		if call != nil {
			done = call.done
		}
		select {
		case <-wake:
		case <-done:
			if call.err != nil {
				return nil, call.err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// connect opens one connection for call and adds it to the pool.
func (h *hostPool) connect(call *dialCall) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	if h.t == nil {
		h.t = h.p.transport(h.scheme)
	}
	cc, err := h.t.NewClientConn(ctx, h.scheme, h.addr)
	cancel()
	h.mu.Lock()
	if err == nil && !h.p.cfg.HTTP2Only && cc.Available() == 1 {
		// HTTP/1.1 (an HTTP/2 connection allows 100 streams until the
		// server's SETTINGS say otherwise): the host's requests go through
		// net/http's own pool of keep-alive connections, bounded too,
		// which scales to many connections where this one does not.
		cc.Close()
		h.h1.Store(true)
		err = errHTTP1
	} else if err == nil {
		h.conns = append(h.conns, &poolConn{cc: cc})
		h.lastErr = nil
		// Called when streams come free, the server allows more or the
		// connection closes.
		cc.SetStateHook(func(*http.ClientConn) { h.signal() })
	} else if err != errHTTP1 {
		err = fmt.Errorf("%s: connect: %w", h.p.cfg.Name, err)
		h.lastErr, h.lastAt = err, time.Now()
	}
	call.err = err
	h.dial = nil
	h.mu.Unlock()
	close(call.done)
	h.signal()
}

// waitChan returns the channel that the next signal closes.
func (h *hostPool) waitChan() chan struct{} {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	return h.wake
}

// signal wakes every get waiting for a stream. It takes only wmu, since
// net/http may call it from inside Reserve or RoundTrip.
func (h *hostPool) signal() {
	h.wmu.Lock()
	close(h.wake)
	h.wake = make(chan struct{})
	h.wmu.Unlock()
}

// transport returns the transport of the connections to scheme://addr:
// the pool's own for https, or for http when HTTP/2 is all the pool
// speaks (h2c); for http, the h2c one with Config.H2C, else the HTTP/1.1
// one.
func (p *Pool) transport(scheme string) *http.Transport {
	switch {
	case scheme != "http" || p.cfg.HTTP2Only:
		return p.t
	case p.cfg.H2C:
		return p.h2c
	}
	return p.t1
}
