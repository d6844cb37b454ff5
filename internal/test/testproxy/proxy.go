// Package testproxy is a TCP proxy for tests that need a network fault between one process
// and a server another process still reaches: the failover suite puts it between one
// scheduler node and MariaDB, then cuts that node off while the other node keeps its own
// direct connection.
//
// It owns only the connections it accepted. It never touches the server behind it beyond
// forwarding bytes, and it is test support: production code must not import it.
package testproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Sentinel errors.
var (
	// ErrClosed is returned by calls on a proxy after Close.
	ErrClosed = errors.New("testproxy: closed")
)

// dialTimeout bounds the dial to the target for one accepted connection.
const dialTimeout = 5 * time.Second

// Mode is what the proxy does with traffic.
type Mode int

// Modes of a Proxy.
const (
	// Forward copies bytes both ways: the normal state.
	Forward Mode = iota
	// Severed closes every connection at once and closes each new one as soon as it is
	// accepted: the client sees a reset or EOF, as when the server's host goes away.
	Severed
	// Blackholed keeps every connection open but forwards nothing in either direction, and
	// accepts new connections without ever dialling the target: the client sees its
	// requests hang until its own timeout, as in a network partition that drops packets.
	Blackholed
)

func (m Mode) String() string {
	switch m {
	case Forward:
		return "forward"
	case Severed:
		return "severed"
	case Blackholed:
		return "blackholed"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Proxy listens on a loopback port and forwards each connection to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	mode     Mode
	changed  chan struct{} // closed and replaced whenever mode changes
	pairs    map[*pair]struct{}
	closed   bool
	accepted int
	wg       sync.WaitGroup
}

// pair is one accepted client connection and, unless it was held, its upstream connection.
type pair struct {
	client net.Conn
	server net.Conn // nil while held by a blackhole
}

func (p *pair) close() {
	_ = p.client.Close()
	if p.server != nil {
		_ = p.server.Close()
	}
}

// New listens on 127.0.0.1 on a free port and forwards to target (host:port).
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("cannot listen for the proxy to %s: %w", target, err)
	}
	p := &Proxy{
		ln:      ln,
		target:  target,
		changed: make(chan struct{}),
		pairs:   make(map[*pair]struct{}),
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the host:port clients dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Mode returns the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Accepted returns how many connections the proxy has accepted so far, in any mode.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Active returns how many accepted connections are currently open.
func (p *Proxy) Active() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pairs)
}

// Sever closes every current connection and closes new ones as soon as they are accepted,
// until Restore.
func (p *Proxy) Sever() error { return p.setMode(Severed) }

// Blackhole stops forwarding on every connection, current and new, without closing any,
// until Restore. Connections held meanwhile are closed by Restore: whatever the client sent
// into the hole is lost, so letting the bytes through late would be a fault no network makes.
func (p *Proxy) Blackhole() error { return p.setMode(Blackholed) }

// Restore forwards new connections again. Connections cut or held before stay closed.
func (p *Proxy) Restore() error { return p.setMode(Forward) }

func (p *Proxy) setMode(m Mode) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	prev := p.mode
	p.mode = m
	close(p.changed)
	p.changed = make(chan struct{})
	var cut []*pair
	if m != prev && (m == Severed || prev == Blackholed) {
		for c := range p.pairs {
			cut = append(cut, c)
			delete(p.pairs, c)
		}
	}
	p.mu.Unlock()
	for _, c := range cut {
		c.close()
	}
	return nil
}

// Close stops listening, closes every connection and waits for the proxy's goroutines.
// Closing twice is harmless.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	err := p.ln.Close()
	close(p.changed)
	p.changed = make(chan struct{})
	for c := range p.pairs {
		c.close()
		delete(p.pairs, c)
	}
	p.mu.Unlock()
	p.wg.Wait()
	if err != nil {
		return fmt.Errorf("cannot close the proxy listener: %w", err)
	}
	return nil
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		p.accepted++
		mode, closed := p.mode, p.closed
		p.mu.Unlock()
		switch {
		case closed || mode == Severed:
			_ = client.Close()
		case mode == Blackholed:
			p.hold(client)
		default:
			p.wg.Add(1)
			go p.connect(client)
		}
	}
}

// hold keeps client open without a target until the mode changes, then closes it.
func (p *Proxy) hold(client net.Conn) {
	c := &pair{client: client}
	if !p.track(c) {
		c.close()
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		// Drain what the client sends so its writes do not block on a full window; it all
		// falls into the hole. Read returns once the mode change or Close closes client.
		_, _ = io.Copy(io.Discard, client)
		p.untrack(c)
	}()
}

// connect dials the target for client and forwards both ways.
func (p *Proxy) connect(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		_ = client.Close()
		return
	}
	c := &pair{client: client, server: server}
	if !p.track(c) {
		c.close()
		return
	}
	var copies sync.WaitGroup
	copies.Add(2)
	go func() {
		defer copies.Done()
		p.copy(c, server, client)
	}()
	go func() {
		defer copies.Done()
		p.copy(c, client, server)
	}()
	copies.Wait()
	p.untrack(c)
}

// copyChunk is the most one read forwards before the mode is checked again.
const copyChunk = 32 << 10

// copy forwards src to dst while the mode is Forward. In a blackhole it stops forwarding and
// waits for the mode to change (setMode then closes both ends). Any error ends both
// directions, as a real connection's reset would.
func (p *Proxy) copy(c *pair, dst io.Writer, src io.Reader) {
	defer c.close()
	buf := make([]byte, copyChunk)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitForward() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// waitForward reports whether bytes may pass now, waiting while the proxy is blackholed.
// It returns false once the connection must end (severed, restored after a hole, closed).
func (p *Proxy) waitForward() bool {
	p.mu.Lock()
	mode, changed, closed := p.mode, p.changed, p.closed
	p.mu.Unlock()
	if closed || mode == Severed {
		return false
	}
	if mode == Forward {
		return true
	}
	<-changed
	return false // a connection that sat in a hole is closed by setMode: drop the bytes
}

func (p *Proxy) track(c *pair) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.mode == Severed {
		return false
	}
	p.pairs[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c *pair) {
	p.mu.Lock()
	delete(p.pairs, c)
	p.mu.Unlock()
	c.close()
}
