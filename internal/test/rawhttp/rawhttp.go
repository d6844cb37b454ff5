// Package rawhttp sends the requests axe's tests cannot send through an HTTP client: a
// request that announces a body and sends only part of it, or headers of any size, written
// byte for byte on a fresh connection, so that a test sees what a server answers before it
// has read the rest.
package rawhttp

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// Request is one request written as is: Method and Path on the request line, Header lines
// ("Name: value") after Host, a Content-Length of Announce when it is not negative, and then
// Send, whatever Announce said.
type Request struct {
	Method, Path string
	Header       []string
	Announce     int
	Send         []byte
}

// Do writes r to addr on a new connection and reads the one answer, within timeout in all.
func Do(addr string, r Request, timeout time.Duration) (status int, body []byte, err error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return 0, nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	var head strings.Builder
	fmt.Fprintf(&head, "%s %s HTTP/1.1\r\nHost: %s\r\n", r.Method, r.Path, addr)
	for _, h := range r.Header {
		head.WriteString(h + "\r\n")
	}
	if r.Announce >= 0 {
		fmt.Fprintf(&head, "Content-Length: %d\r\n", r.Announce)
	}
	head.WriteString("\r\n")
	if _, err := io.WriteString(conn, head.String()); err != nil {
		return 0, nil, err
	}
	if len(r.Send) > 0 {
		_, _ = conn.Write(r.Send) // the server may answer and close before taking it all
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, nil, fmt.Errorf("no answer to %s %s: %w", r.Method, r.Path, err)
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}
