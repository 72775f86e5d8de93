package httppool

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TCP states of Linux's tcp_info.tcpi_state (include/net/tcp_states.h).
const (
	tcpClose     = 7 // TCP_CLOSE: reset, or closed
	tcpCloseWait = 8 // TCP_CLOSE_WAIT: the peer's FIN has come
)

// peerClosed reports whether the peer of raw's TCP socket has closed it
// (its FIN came, or it was reset): the first byte of TCP_INFO, read
// without waiting. Any error (not TCP) reports false.
func peerClosed(raw syscall.RawConn) bool {
	var state [1]byte
	closed := false
	_ = raw.Control(func(fd uintptr) {
		n := uint32(len(state))
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.IPPROTO_TCP, unix.TCP_INFO,
			uintptr(unsafe.Pointer(&state[0])), uintptr(unsafe.Pointer(&n)), 0)
		closed = errno == 0 && n >= 1 && (state[0] == tcpCloseWait || state[0] == tcpClose)
	})
	return closed
}
