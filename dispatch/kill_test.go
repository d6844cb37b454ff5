package dispatch

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axe-sched/axe/protocol"
)

// TestKillSpeaksTheProtocol: Kill posts {"ticket": …} to /axe/kill with the bearer token,
// returns nil on the executor's 200 and an error naming the status on its 404.
func TestKillSpeaksTheProtocol(t *testing.T) {
	var mu sync.Mutex
	var paths, auths []string
	running := map[string]bool{"t-1": true}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var k protocol.Kill
		err := json.NewDecoder(r.Body).Decode(&k)
		mu.Lock()
		paths = append(paths, r.URL.Path)
		auths = append(auths, r.Header.Get("Authorization"))
		ok := running[k.Ticket]
		delete(running, k.Ticket)
		mu.Unlock()
		switch {
		case err != nil || r.URL.Path != protocol.PathKill:
			w.WriteHeader(http.StatusBadRequest)
		case !ok:
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(protocol.Error{Error: "ticket " + k.Ticket + " is not running here"})
		default:
			_ = json.NewEncoder(w).Encode(protocol.KillAnswer{Killed: true})
		}
	}))
	defer srv.Close()
	x := executorAt(strings.TrimPrefix(srv.URL, "http://"), protocol.ProtocolHTTP)
	d := newDispatcher(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	if err := d.Kill(ctx, x, "t-1", "sekret"); err != nil {
		t.Fatalf("kill of a running ticket: %v", err)
	}
	err := d.Kill(ctx, x, "t-1", "sekret")
	if err == nil || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), "t-1") {
		t.Fatalf("second kill of t-1 = %v, want an error naming 404 and the ticket", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) != 2 || paths[0] != "/axe/kill" || auths[0] != "Bearer sekret" {
		t.Errorf("requests went to %v with %v", paths, auths)
	}
}

// TestKillUnreachable: an executor that does not answer gives an error, within the deadline.
func TestKillUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	x := executorAt(ln.Addr().String(), protocol.ProtocolHTTP)
	ln.Close()
	d := newDispatcher(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.Kill(ctx, x, "t-9", ""); err == nil {
		t.Fatal("kill on a closed port succeeded")
	}
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	if err := d.Kill(done, x, "t-9", ""); err == nil || !strings.Contains(err.Error(), "canceled") {
		t.Fatalf("kill with a cancelled context = %v", err)
	}
}

// executorAt registers one executor at addr, dialled with proto, in a registry of its own.
func executorAt(addr, proto string) *Executor {
	x, _, _ := NewRegistry().Register("app", addr, proto, []string{"h"}, 1)
	return x
}
