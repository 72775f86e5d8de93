//go:build !linux

package httppool

import "syscall"

// peerClosed reports false: the check is Linux's (TCP_INFO); elsewhere a
// request on a connection the peer closed fails as net/http's would in the
// same race.
func peerClosed(syscall.RawConn) bool { return false }
