package testproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/axe-sched/axe/internal/test/leaktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leaktest.Options()...)
}

// ioTimeout bounds every read and write of the tests: generous, never a pacing sleep.
const ioTimeout = 5 * time.Second

// echoServer answers each line it receives with the same line, on every connection.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	conns := make(chan net.Conn, 64)
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		close(conns)
		for c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// roundTrip writes line and returns what comes back, or the read error.
func roundTrip(c net.Conn, line string, timeout time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSuffix(got, "\n"), err
}

func mustEcho(t *testing.T, c net.Conn, line string) {
	t.Helper()
	got, err := roundTrip(c, line, ioTimeout)
	if err != nil {
		t.Fatalf("round trip %q: %v", line, err)
	}
	if got != line {
		t.Fatalf("round trip %q: got %q", line, got)
	}
}

// isTimeout reports whether err is a deadline expiry, i.e. the peer said nothing.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestForward(t *testing.T) {
	p := newProxy(t, echoServer(t))
	a, b := dial(t, p.Addr()), dial(t, p.Addr())
	mustEcho(t, a, "one")
	mustEcho(t, b, "two")
	mustEcho(t, a, strings.Repeat("x", 3*copyChunk)) // larger than one chunk
	if got := p.Accepted(); got != 2 {
		t.Errorf("Accepted = %d, want 2", got)
	}
	if got := p.Active(); got != 2 {
		t.Errorf("Active = %d, want 2", got)
	}
	if p.Mode() != Forward {
		t.Errorf("Mode = %v, want forward", p.Mode())
	}
}

func TestSeverAndRestore(t *testing.T) {
	target := echoServer(t)
	p := newProxy(t, target)
	old := dial(t, p.Addr())
	mustEcho(t, old, "before")
	direct := dial(t, target) // a second client that does not go through the proxy

	if err := p.Sever(); err != nil {
		t.Fatal(err)
	}
	// The open connection is closed: a read ends with EOF or a reset, not a timeout.
	if _, err := roundTrip(old, "during", ioTimeout); err == nil || isTimeout(err) {
		t.Fatalf("round trip on a severed connection: err = %v, want EOF or reset", err)
	}
	// A new one is accepted and closed at once.
	fresh := dial(t, p.Addr())
	if _, err := roundTrip(fresh, "during", ioTimeout); err == nil || isTimeout(err) {
		t.Fatalf("round trip on a connection made while severed: err = %v, want EOF or reset", err)
	}
	if got := p.Active(); got != 0 {
		t.Errorf("Active while severed = %d, want 0", got)
	}
	// The target itself is untouched for others.
	mustEcho(t, direct, "direct")

	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	mustEcho(t, dial(t, p.Addr()), "after")
	// The connection cut before stays cut.
	if _, err := roundTrip(old, "after", ioTimeout); err == nil {
		t.Fatal("a connection severed before Restore works again")
	}
}

func TestBlackhole(t *testing.T) {
	p := newProxy(t, echoServer(t))
	old := dial(t, p.Addr())
	mustEcho(t, old, "before")

	if err := p.Blackhole(); err != nil {
		t.Fatal(err)
	}
	// Nothing comes back, and the connection is not closed either: the read times out.
	if _, err := roundTrip(old, "into the hole", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("round trip in a blackhole: err = %v, want a timeout", err)
	}
	fresh := dial(t, p.Addr())
	if _, err := roundTrip(fresh, "into the hole", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("round trip on a connection made in a blackhole: err = %v, want a timeout", err)
	}

	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	// Connections that sat in the hole are closed, so their lost bytes never arrive late.
	for name, c := range map[string]net.Conn{"old": old, "fresh": fresh} {
		_ = c.SetReadDeadline(time.Now().Add(ioTimeout))
		if _, err := c.Read(make([]byte, 64)); err == nil || isTimeout(err) {
			t.Errorf("%s connection after Restore: err = %v, want EOF or reset", name, err)
		}
	}
	mustEcho(t, dial(t, p.Addr()), "after")
}

func TestSeverFromBlackhole(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c := dial(t, p.Addr())
	mustEcho(t, c, "before")
	if err := p.Blackhole(); err != nil {
		t.Fatal(err)
	}
	if err := p.Sever(); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(c, "x", ioTimeout); err == nil || isTimeout(err) {
		t.Fatalf("round trip after Sever: err = %v, want EOF or reset", err)
	}
}

func TestClose(t *testing.T) {
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p.Addr())
	mustEcho(t, c, "before")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := roundTrip(c, "x", ioTimeout); err == nil || isTimeout(err) {
		t.Fatalf("round trip after Close: err = %v, want EOF or reset", err)
	}
	if err := p.Sever(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Sever after Close: err = %v, want ErrClosed", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), ioTimeout); err == nil {
		t.Fatal("the proxy still accepts after Close")
	}
}

func TestUnreachableTarget(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	p := newProxy(t, target)
	c := dial(t, p.Addr())
	if _, err := roundTrip(c, "x", ioTimeout); err == nil || isTimeout(err) {
		t.Fatalf("round trip to a dead target: err = %v, want EOF or reset", err)
	}
}
