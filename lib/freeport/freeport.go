// Package freeport hands out loopback ports for servers a test, a benchmark or the conformance
// suite starts in another process (or binds later), where the port must be named before
// anything listens on it.
//
// A port the kernel picks for a listener ("127.0.0.1:0") comes from the ephemeral range, the
// same range every outgoing connection takes its local port from. Between the moment such a
// port is found free and the moment the child binds it, a connection made by any test on the
// machine may take it, and the child fails with "address already in use"; on a box running
// many test packages side by side that happens. The ports handed out here lie below the
// ephemeral range, where no outgoing connection lands, are checked free by binding them, and
// are never handed out twice by one process.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

const (
	// floor is the lowest port handed out: above the well-known services a test machine
	// runs (MariaDB 3306, PostgreSQL 5432, Redis 6379, Galera 4567/4568/4444).
	floor = 20000
	// minSpan is the fewest ports the range below the ephemeral ones must hold to be used.
	minSpan = 2000
	tries   = 200
)

var (
	mu    sync.Mutex
	given = map[int]bool{}
)

// span is the range ports are drawn from: from floor to just below the kernel's ephemeral
// range. ok is false where that leaves too few (an ephemeral range starting low), and the
// kernel's own choice is used instead.
func span() (lo, hi int, ok bool) {
	lo, hi = floor, 32767
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 1 {
			if first, err := strconv.Atoi(f[0]); err == nil {
				hi = first - 1
			}
		}
	}
	return lo, hi, hi-lo+1 >= minSpan
}

// Ports returns n distinct free ports on 127.0.0.1, none handed out before by this process.
func Ports(n int) ([]int, error) {
	mu.Lock()
	defer mu.Unlock()
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	lo, hi, ok := span()
	out := make([]int, 0, n)
	for len(out) < n {
		var l net.Listener
		var err error
		if ok {
			for i := 0; i < tries; i++ {
				p := lo + rand.IntN(hi-lo+1)
				if given[p] {
					continue
				}
				if l, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
					break
				}
			}
		} else {
			l, err = net.Listen("tcp", "127.0.0.1:0")
		}
		if l == nil {
			if err == nil {
				err = fmt.Errorf("every port tried was handed out before")
			}
			return nil, fmt.Errorf("cannot find a free loopback port: %w", err)
		}
		held = append(held, l)
		p := l.Addr().(*net.TCPAddr).Port
		if given[p] {
			continue
		}
		given[p] = true
		out = append(out, p)
	}
	return out, nil
}

// Addr returns "127.0.0.1:port" for one port from Ports.
func Addr() (string, error) {
	ps, err := Ports(1)
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(ps[0]), nil
}

// TB is the part of testing.TB that MustAddr uses.
type TB interface {
	Helper()
	Fatal(args ...any)
}

// MustAddr is Addr for a test: it fails t if no port is found.
func MustAddr(t TB) string {
	t.Helper()
	a, err := Addr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}
