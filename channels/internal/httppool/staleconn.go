package httppool

import (
	"errors"
	"net"
	"sync"
	"syscall"
)

// errStaleConn is the error of a write on a kept-alive connection that
// the peer has already closed (see [checkedConn]): nothing was written,
// so the request may go on another connection.
var errStaleConn = staleConnError{}

type staleConnError struct{}

func (staleConnError) Error() string {
	return "the provider closed the idle connection; nothing was sent on it"
}
func (staleConnError) Timeout() bool   { return false }
func (staleConnError) Temporary() bool { return false }

// checkedConn is a connection of a [Pool] that refuses to start a request
// on a connection its peer has closed. A provider (or a load balancer in
// front of it) closes a kept-alive connection after its own idle timeout
// (often 60 s, below the Pool's 90 s); a POST written to it is refused by
// the peer's kernel after it left this process, which reads as an unknown
// outcome. net/http avoids that with a goroutine reading every idle
// connection; a Pool has none, so the first write of each request (a write
// after a read) asks the kernel first whether the peer's FIN has come
// ([peerClosed]: one getsockopt(2), no wait) and, if so, fails with
// errStaleConn before writing a byte; the Pool then sends on another
// connection ([Pool] retries only that error).
type checkedConn struct {
	net.Conn
	raw     syscall.RawConn // nil: not a socket (no check)
	reading bool            // the last call was a Read: the next Write starts a request
	onClose func()          // set by the Pool
	once    sync.Once
}

// Close closes the connection (once) and drops it from its Pool.
func (c *checkedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		if c.onClose != nil {
			c.onClose()
		}
	})
	return err
}

func newCheckedConn(c net.Conn) *checkedConn {
	cc := &checkedConn{Conn: c}
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			cc.raw = raw
		}
	}
	return cc
}

func (c *checkedConn) Read(p []byte) (int, error) {
	c.reading = true
	return c.Conn.Read(p)
}

func (c *checkedConn) Write(p []byte) (int, error) {
	if c.reading {
		c.reading = false
		if c.raw != nil && peerClosed(c.raw) {
			return 0, errStaleConn
		}
	}
	return c.Conn.Write(p)
}

// isStale reports whether err is a write refused by [checkedConn].
func isStale(err error) bool { return errors.Is(err, errStaleConn) }
