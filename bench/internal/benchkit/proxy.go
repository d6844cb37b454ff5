package benchkit

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// CommandProxy forwards TCP connections to a MySQL server and counts the commands clients
// send: every client packet with sequence number 0 starts a command (COM_QUERY, COM_PING,
// COM_STMT_EXECUTE, …), and each is one round trip the server must answer. That is the
// "database load" a scheduler causes, counted the same way for axe and for its peers
// without instrumenting either. It needs plain connections (no TLS, no compression), which
// is what the suites use.
type CommandProxy struct {
	ln       net.Listener
	upstream string
	commands atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// maxPacket is the largest MySQL packet payload (16 MiB - 1); longer payloads are split.
const maxPacket = 1<<24 - 1

// NewCommandProxy listens on a free loopback port and forwards to upstream (host:port).
func NewCommandProxy(upstream string) (*CommandProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("cannot listen for the MySQL proxy: %w", err)
	}
	p := &CommandProxy{ln: ln, upstream: upstream, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the host:port clients dial instead of the server.
func (p *CommandProxy) Addr() string { return p.ln.Addr().String() }

// Commands returns how many commands clients have sent so far.
func (p *CommandProxy) Commands() int64 { return p.commands.Load() }

// Close stops accepting, closes every forwarded connection and waits for its goroutines.
func (p *CommandProxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	err := p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *CommandProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *CommandProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *CommandProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = client.Close()
			continue
		}
		if !p.track(client) || !p.track(server) {
			_ = client.Close()
			_ = server.Close()
			return
		}
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			defer p.untrack(server)
			defer p.untrack(client)
			_ = p.forwardCommands(server, client)
		}()
		go func() {
			defer p.wg.Done()
			defer p.untrack(client)
			defer p.untrack(server)
			_, _ = io.Copy(client, server)
		}()
	}
}

// forwardCommands copies client packets to the server one whole packet per write, counting
// the packets that start a command.
func (p *CommandProxy) forwardCommands(server io.Writer, client io.Reader) error {
	r := bufio.NewReaderSize(client, 64<<10)
	buf := make([]byte, 0, 64<<10)
	continued := false // the previous packet had the maximum length: this one continues it
	for {
		buf = buf[:4]
		if _, err := io.ReadFull(r, buf); err != nil {
			return err
		}
		n := int(buf[0]) | int(buf[1])<<8 | int(buf[2])<<16
		if buf[3] == 0 && !continued {
			p.commands.Add(1)
		}
		continued = n == maxPacket
		if cap(buf) < 4+n {
			buf = append(buf[:cap(buf)], make([]byte, 4+n-cap(buf))...)
		}
		buf = buf[:4+n]
		if _, err := io.ReadFull(r, buf[4:]); err != nil {
			return err
		}
		if _, err := server.Write(buf); err != nil {
			return err
		}
		if cap(buf) > 4<<20 {
			buf = make([]byte, 0, 64<<10) // do not keep a huge INSERT's buffer forever
		}
	}
}
