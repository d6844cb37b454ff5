package dispatch

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// Connection reuse. fasthttp keeps idle keep-alive connections and hands the next request
// the most recent one without looking at it; a peer that restarted (or closed an idle
// connection) in the meantime leaves a connection whose FIN or RST has already arrived.
// fasthttp writes the request into it, reads end of file, and fails with ErrConnectionClosed,
// which cannot tell "never delivered" from "delivered, answer lost". watchedConn tells them
// apart where it can: before the first write of a request on a connection that has carried
// one already, it asks the kernel whether the peer has closed it (a non-blocking peek,
// conn_linux.go), and if so it fails the
// write with errStaleConn without sending a byte. The client's RetryIfErr retries exactly
// that error, on the next idle connection or a new one, so a run is never counted against a
// connection it never left on. A connection that dies after the request went out is in doubt
// (inDoubt), and what follows is the caller's policy (post).

// watchedConn is a client connection that refuses to start a request on a connection its
// peer has closed (see above).
type watchedConn struct {
	net.Conn
	probe *probe // nil: the state cannot be asked; every write goes through
	// between is set by a read and cleared by the next write: the connection has carried a
	// request and its answer, and the next write begins another request.
	between atomic.Bool
	// written is set by the first write: a request has begun on the connection.
	written atomic.Bool
	// gate, when set, is asked before the first write of every request; an error fails the
	// write before a byte is sent.
	gate func() error
}

func watch(c net.Conn, gate func() error) net.Conn {
	w := &watchedConn{Conn: c, gate: gate}
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			w.probe = newProbe(raw)
		}
	}
	return w
}

func (c *watchedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.between.Store(true)
	}
	return n, err
}

func (c *watchedConn) Write(b []byte) (int, error) {
	reused := c.between.Swap(false)
	if begins := !c.written.Swap(true) || reused; begins && c.gate != nil {
		if err := c.gate(); err != nil {
			return 0, err
		}
	}
	if reused && c.probe != nil && c.probe.peerClosed() {
		return 0, errStaleConn
	}
	return c.Conn.Write(b)
}

// watchedDial wraps a dial function so that its connections are watched, gate asked before
// each request they carry.
func watchedDial(dial fasthttp.DialFuncWithTimeout, gate func() error) fasthttp.DialFuncWithTimeout {
	return func(addr string, timeout time.Duration) (net.Conn, error) {
		c, err := dial(addr, timeout)
		if err != nil {
			return nil, err
		}
		return watch(c, gate), nil
	}
}

// plainDial is the dialer of clients without a Guard.
func plainDial(addr string, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", addr, timeout)
}

// retryStale is the clients' RetryIfErr: only a request that provably was not sent is tried
// again by fasthttp itself.
func retryStale(_ *fasthttp.Request, _ int, err error) (resetTimeout, retry bool) {
	return false, errors.Is(err, errStaleConn)
}

// inDoubt reports whether err is a connection that failed after the request was written
// (or while it was being written): the peer may have received it and acted on it.
func inDoubt(err error) bool {
	if errors.Is(err, errStaleConn) || errors.Is(err, fasthttp.ErrTimeout) {
		return false
	}
	if errors.Is(err, fasthttp.ErrConnectionClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && (op.Op == "read" || op.Op == "write") {
		return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
	}
	return false
}
