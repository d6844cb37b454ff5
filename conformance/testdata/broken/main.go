// Command broken is an executor with deliberate protocol faults, for the conformance
// suite's own tests: the suite must report these faults and fail. It registers, heartbeats
// and runs the echo handler correctly, but it checks no signature (any call runs), forgets
// every ticket (a repeated ticket runs again) and exits on SIGTERM without deregistering.
// With BROKEN_RUNS_REFUSED set it also runs a run of an unknown handler, reporting its result
// before it answers the run 404.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/axe-sched/axe/protocol"
)

const incarnation = "broken0123456789abcdef"

var (
	scheduler = strings.Split(os.Getenv("AXE_SCHEDULERS"), ",")[0]
	address   = os.Getenv("AXE_LISTEN")
	token     = os.Getenv("AXE_TOKEN")
	app       = os.Getenv("AXE_APP")

	mu      sync.Mutex
	running = map[string]context.CancelFunc{}
)

func main() {
	ln, err := net.Listen("tcp", address)
	if err != nil {
		fmt.Fprintln(os.Stderr, "broken:", err)
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+protocol.PathRun, handleRun)
	mux.HandleFunc("POST "+protocol.PathKill, handleKill)
	mux.HandleFunc("GET "+protocol.PathBeat, func(w http.ResponseWriter, _ *http.Request) {
		reply(w, 200, protocol.Beat{App: app, Handlers: []string{"echo"}})
	})
	go func() { _ = http.Serve(ln, mux) }()
	register()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(300 * time.Millisecond):
			if post(protocol.PathHeartbeat, map[string]any{"app": app, "address": address, "incarnation": incarnation}) == 404 {
				register()
			}
		}
	}
}

func register() {
	post(protocol.PathRegister, map[string]any{"app": app, "address": address, "protocol": "http",
		"handlers": []string{"echo"}, "auth": protocol.AuthSigned, "version": 2, "incarnation": incarnation})
}

func post(path string, v any) int {
	b, _ := json.Marshal(v)
	req, _ := http.NewRequest(http.MethodPost, scheduler+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

func reply(w http.ResponseWriter, code int, v any) {
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func handleRun(w http.ResponseWriter, r *http.Request) {
	var run protocol.Run
	if err := json.NewDecoder(r.Body).Decode(&run); err != nil || run.Ticket == "" {
		reply(w, 400, protocol.Error{Error: "ticket: malformed run"})
		return
	}
	if run.Handler != "echo" && os.Getenv("BROKEN_RUNS_REFUSED") != "" {
		echo(context.Background(), run)
		reply(w, 404, protocol.Error{Error: "unknown handler"})
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.UnixMilli(run.Deadline))
	mu.Lock()
	running[run.Ticket] = cancel
	mu.Unlock()
	go echo(ctx, run)
	reply(w, 202, protocol.Accepted{Accepted: true})
}

func handleKill(w http.ResponseWriter, r *http.Request) {
	var k protocol.Kill
	_ = json.NewDecoder(r.Body).Decode(&k)
	mu.Lock()
	cancel, ok := running[k.Ticket]
	mu.Unlock()
	if ok {
		cancel()
	}
	reply(w, 200, protocol.KillAnswer{Killed: ok})
}

func echo(ctx context.Context, run protocol.Run) {
	var p struct {
		SleepMS int64  `json:"sleep_ms"`
		Fail    string `json:"fail"`
	}
	_ = json.Unmarshal(run.Params, &p)
	res := protocol.Result{Ticket: run.Ticket, Task: run.Task, App: app, Address: address, Status: protocol.StatusSuccess,
		StartedAt: time.Now().UnixMilli(), Output: "{}"}
	if len(run.Params) > 0 {
		res.Output = string(run.Params)
	}
	select {
	case <-time.After(time.Duration(p.SleepMS) * time.Millisecond):
		if p.Fail != "" {
			res.Status, res.Error = protocol.StatusFailed, p.Fail
		}
	case <-ctx.Done():
		res.Status, res.Error = protocol.StatusFailed, "cancelled: "+ctx.Err().Error()
	}
	res.EndedAt = time.Now().UnixMilli()
	for range 5 {
		if post(protocol.PathCallback, res) == 200 {
			return
		}
		time.Sleep(time.Second)
	}
}
