package apns

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"
)

const (
	// DefaultConnections is the bound on HTTP/2 connections per APNs host
	// when Config.Connections is 0: one, as Apple's own guidance and the
	// Pushy client (concurrentConnections, default 1) suggest. One
	// connection carries as many sends at once as APNs allows streams on it
	// (1,000 were seen, providers.md §2.1), far above PACER_INFLIGHT's
	// default of 32 per partition; raise it when a process keeps more sends
	// than that in flight to one team.
	DefaultConnections = 1
	// MaxConnections is the largest Config.Connections accepted.
	MaxConnections = 64

	// connIdleTimeout is how long an APNs connection stays open without a
	// request. Apple asks providers to keep connections open rather than
	// open and close them ([A-SR], providers.md §2.1); health PINGs find a
	// dead one meanwhile.
	connIdleTimeout = 15 * time.Minute
	// dialTimeout bounds one connection attempt (TCP and TLS), shared by
	// every send waiting for it, so that no single send's deadline cuts it.
	dialTimeout = 30 * time.Second
	// dialBackoff is how long after a failed connection attempt sends fail
	// with its error instead of dialing again: a host that refuses us is not
	// hammered with handshakes.
	dialBackoff = time.Second
)

// pool is an http.RoundTripper that sends every request over at most max
// HTTP/2 connections per host. A request beyond the streams the
// connections allow waits for one to finish, or for the server to allow
// more (APNs allows 1 stream until a valid provider token is posted, then
// raises the limit with SETTINGS), instead of opening a connection: APNs
// treats rapid connection and disconnection as a denial-of-service attack
// ([A-LEG], providers.md §2.1). net/http's own pool dials a new connection
// for each request waiting for a stream, and its StrictMaxConcurrentRequests
// stalls requests when more wait than the server allows streams
// (golang/go#70809), so the pool is ours, on net/http's ClientConn.
//
// A new connection takes one request until its first answer arrives, by
// which time the server's SETTINGS (sent first) have been read: before
// them net/http assumes 100 streams, and APNs would refuse all but one.
type pool struct {
	t   *http.Transport // HTTP/2 only; dials the connections
	max int             // connections per host

	mu    sync.Mutex
	hosts map[string]*hostPool // by host:port
}

func newPool(t *http.Transport, max int) *pool {
	return &pool{t: t, max: max, hosts: map[string]*hostPool{}}
}

// hostPool is the connections to one host.
type hostPool struct {
	p      *pool
	scheme string
	addr   string // host:port

	mu      sync.Mutex
	conns   []*poolConn
	dial    *dialCall // the connection attempt under way, or nil
	lastErr error     // the last failed attempt's error, for dialBackoff
	lastAt  time.Time

	wmu  sync.Mutex
	wake chan struct{} // closed when a slot may have come free
}

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
func (p *pool) RoundTrip(req *http.Request) (*http.Response, error) {
	h := p.host(req.URL.Scheme, req.URL.Host)
	c, err := h.get(req.Context())
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
func (p *pool) host(scheme, hostport string) *hostPool {
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

// get returns a connection on which a stream is reserved for the caller.
// It dials only when every connection is at its stream limit and fewer
// than the bound are open; otherwise it waits until a stream comes free,
// the dial ends or ctx is done.
func (h *hostPool) get(ctx context.Context) (*poolConn, error) {
	for {
		wake := h.waitChan()
		h.mu.Lock()
		h.conns = slices.DeleteFunc(h.conns, func(c *poolConn) bool { return c.cc.Err() != nil })
		var best *poolConn
		bestAvail := 0
		for _, c := range h.conns {
			if !c.warm && c.cc.InFlight() > 0 {
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
		if call == nil && best == nil && len(h.conns) < h.p.max {
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
	cc, err := h.p.t.NewClientConn(ctx, h.scheme, h.addr)
	cancel()
	h.mu.Lock()
	if err == nil {
		h.conns = append(h.conns, &poolConn{cc: cc})
		h.lastErr = nil
		// Called when streams come free, the server allows more or the
		// connection closes.
		cc.SetStateHook(func(*http.ClientConn) { h.signal() })
	} else {
		err = fmt.Errorf("apns: connect: %w", err)
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
