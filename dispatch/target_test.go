package dispatch

import (
	"bufio"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// requestLines is a raw TCP receiver: it records the first line of every request it reads
// and answers 200, so a test sees the request line exactly as it crossed the wire.
type requestLines struct {
	ln    net.Listener
	mu    sync.Mutex
	lines []string
	conns int
	wg    sync.WaitGroup
}

func newRequestLines(t *testing.T) *requestLines {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &requestLines{ln: ln}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			r.conns++
			r.mu.Unlock()
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				br := bufio.NewReader(c)
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				r.mu.Lock()
				r.lines = append(r.lines, strings.TrimRight(line, "\r\n"))
				r.mu.Unlock()
				_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); r.wg.Wait() })
	return r
}

func (r *requestLines) seen() ([]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...), r.conns
}

// TestRequestLineIsTheURLsTarget sends callbacks to a raw receiver: a percent-encoded URL
// arrives as exactly its target, and a URL holding a space, a CR or LF, a control byte or
// a byte beyond ASCII is refused before any connection is made, so no request line is ever
// split into a header or a second request.
func TestRequestLineIsTheURLsTarget(t *testing.T) {
	rx := newRequestLines(t)
	base := "http://" + rx.ln.Addr().String()
	d := newDispatcher(t, Config{})
	send := func(u string) Outcome {
		done := make(chan Outcome, 1)
		if err := d.Send(&Request{URL: u, Task: "t", Ticket: "1-1-0", Body: []byte(`{}`), Deadline: time.Now().Add(20 * time.Second)},
			func(o Outcome) { done <- o }); err != nil {
			t.Fatal(err)
		}
		return <-done
	}
	if o := send(base + "/x%20y?a=b%20c&d=%0D%0Ae"); !o.OK() {
		t.Fatalf("encoded URL: %+v", o)
	}
	lines, _ := rx.seen()
	if want := "POST /x%20y?a=b%20c&d=%0D%0Ae HTTP/1.1"; len(lines) != 1 || lines[0] != want {
		t.Fatalf("request lines %q, want [%q]", lines, want)
	}
	for _, bad := range []string{
		"/x?a=b HTTP/1.1\r\nX-Injected: yes",
		"/x?a=b HTTP/1.1 X-Injected: yes",
		"/x y",
		"/x?a=\nb",
		"/x?a=\x00",
		"/x\x7f",
		"/caf\xc3\xa9",
		"/x\tb",
	} {
		o := send(base + bad)
		if !errors.Is(o.Err, ErrBadRequestTarget) || o.OK() {
			t.Errorf("URL %q: outcome %+v, want ErrBadRequestTarget", bad, o)
		}
	}
	lines, conns := rx.seen()
	if len(lines) != 1 || conns != 1 {
		t.Fatalf("after the refused URLs the receiver saw %d connection(s) and lines %q, want only the first", conns, lines)
	}
}

func TestCheckURLBytes(t *testing.T) {
	for _, ok := range []string{"http://h/x", "https://h:1/a%20b?c=%22d%22#f", "http://[::1]:80/~x!$&'()*+,;=:@"} {
		if err := CheckURLBytes(ok); err != nil {
			t.Errorf("CheckURLBytes(%q) = %v, want nil", ok, err)
		}
	}
	for bad, says := range map[string]string{"http://h/a b": "byte 10 is a space", "http://h/\r": "0x0d", "http://h/é": "not ASCII"} {
		if err := CheckURLBytes(bad); !errors.Is(err, ErrBadRequestTarget) || !strings.Contains(err.Error(), says) {
			t.Errorf("CheckURLBytes(%q) = %v, want ErrBadRequestTarget saying %q", bad, err, says)
		}
	}
}
