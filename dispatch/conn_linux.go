package dispatch

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// tcpEstablished is TCP_ESTABLISHED of the kernel's TCP states (include/net/tcp_states.h).
const tcpEstablished = 1

// peerClosed reports whether the kernel has seen the peer end the connection: a FIN
// (CLOSE_WAIT) or a RST (CLOSE), or any state but ESTABLISHED. It does not read, so a
// connection that is fine is left exactly as it was.
func peerClosed(raw syscall.RawConn) bool {
	var state uint8 = tcpEstablished
	_ = raw.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			state = info.State
		}
	})
	return state != tcpEstablished
}
