package dispatch

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// probe asks the kernel, without blocking and without taking a byte, whether anything has
// arrived on a connection that is between requests: a peek of one byte (recv with MSG_PEEK
// and MSG_DONTWAIT). Nothing to read (EAGAIN) is the open connection; end of file (the
// peer's FIN), an error (its RST) or bytes nobody asked for (a peer answers nothing it was
// not sent, so they can only be a goodbye such as a 408 before it closes) mean the request
// must not start on it. The peek leaves a connection that is fine exactly as it was.
//
// It replaced a getsockopt(TCP_INFO) per request, which the kernel answers by filling some
// two hundred bytes of statistics under the socket's lock and which allocated twice: the
// peek is the cheapest question that has the answer, and a probe allocates nothing (its
// func and buffer live with the connection).
type probe struct {
	raw    syscall.RawConn
	fn     func(fd uintptr) // peek, bound once
	buf    [1]byte
	closed bool
}

func newProbe(raw syscall.RawConn) *probe {
	p := &probe{raw: raw}
	p.fn = p.peek
	return p
}

func (p *probe) peek(fd uintptr) {
	// A raw syscall: the socket is non-blocking, so the call never parks the thread.
	// Success is closed either way: 0 bytes is end of file, 1 a byte before any request.
	_, _, errno := unix.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&p.buf[0])), 1,
		unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	switch errno {
	case 0:
		p.closed = true
	case unix.EAGAIN, unix.EINTR:
		p.closed = false
	default:
		p.closed = true // ECONNRESET and the like
	}
}

// peerClosed reports whether the peer has ended the connection (or sent what only precedes
// an end); the connection must be between requests, so its read buffer is empty.
func (p *probe) peerClosed() bool {
	p.closed = false
	if err := p.raw.Control(p.fn); err != nil {
		return false // closed on our side: the write fails on its own
	}
	return p.closed
}
