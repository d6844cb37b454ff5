package executor_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axe-sched/axe/executor"
	"github.com/axe-sched/axe/executor/internal/schedpeer"
	"github.com/axe-sched/axe/protocol"
)

// A call signed for one process of an executor is refused by the process that replaced it
// at the same address: the signature names the incarnation the first one registered. A call
// without the X-Axe-Incarnation header, or naming an incarnation the signature does not
// cover, is refused too. Nothing runs.
func TestCallForAnotherIncarnationIsRefused(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{Token: "exec-token"})
	var calls atomic.Int32
	counting := func(context.Context, executor.Run) (executor.Result, error) {
		calls.Add(1)
		return executor.Result{}, nil
	}
	first := newExecutor(t, executor.Config{Token: "exec-token"}, peer)
	first.Handle("h", counting)
	start(t, first)
	addr := first.Addr()
	oldInc := peer.Registrations()[0].Incarnation
	if !protocol.ValidIncarnation(oldInc) || peer.Registrations()[0].Version != protocol.Version {
		t.Fatalf("registration %+v: want version %d and an incarnation", peer.Registrations()[0], protocol.Version)
	}
	// What an eavesdropper captures: a run signed for the first process.
	body := []byte(`{"ticket":"t-1","task":"a","handler":"h","attempt":1,"deadline":0}`)
	at := time.Now()
	captured := protocol.SignCallV2(protocol.DispatchKey("exec-token"), at, addr, protocol.PathRun, "", oldInc, body)
	stop(t, first)

	second := newExecutor(t, executor.Config{Token: "exec-token", Addr: addr}, peer)
	second.Handle("h", counting)
	start(t, second)
	waitCalls(t, peer, schedpeer.PathRegister, 2)
	newInc := peer.Registrations()[1].Incarnation
	if newInc == oldInc {
		t.Fatalf("the restarted executor registered the same incarnation %q", newInc)
	}
	replay := func(headers map[string]string) schedpeer.Response {
		t.Helper()
		return postRaw(t, addr, protocol.PathRun, body, headers)
	}
	resp := replay(map[string]string{"Authorization": captured, protocol.HeaderIncarnation: oldInc})
	if resp.Status != http.StatusUnauthorized || !strings.Contains(string(resp.Body), "signed for another incarnation") {
		t.Errorf("replayed run: %d %s, want 401 signed for another incarnation", resp.Status, resp.Body)
	}
	for name, h := range map[string]map[string]string{
		"without the incarnation header":     {"Authorization": captured},
		"claiming the current incarnation":   {"Authorization": captured, protocol.HeaderIncarnation: newInc},
		"a v1 signature of the same call":    {"Authorization": protocol.SignCall(protocol.DispatchKey("exec-token"), at, addr, protocol.PathRun, "", body)},
		"a v1 signature with the new header": {"Authorization": protocol.SignCall(protocol.DispatchKey("exec-token"), at, addr, protocol.PathRun, "", body), protocol.HeaderIncarnation: newInc},
	} {
		if resp := replay(h); resp.Status != http.StatusUnauthorized {
			t.Errorf("%s: %d %s, want 401", name, resp.Status, resp.Body)
		}
	}
	// The same run signed for the current incarnation is taken, and runs once.
	fresh := protocol.SignCallV2(protocol.DispatchKey("exec-token"), time.Now(), addr, protocol.PathRun, "", newInc, body)
	if resp := replay(map[string]string{"Authorization": fresh, protocol.HeaderIncarnation: newInc}); resp.Status != http.StatusAccepted {
		t.Fatalf("the run signed for the current incarnation: %d %s", resp.Status, resp.Body)
	}
	waitCallbacks(t, peer, 1)
	if n := calls.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want once (the signed run only)", n)
	}
}

// postRaw posts body to path on the executor at addr with exactly these headers.
func postRaw(t *testing.T, addr, path string, body []byte, headers map[string]string) schedpeer.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+path, strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf strings.Builder
	_, _ = io.Copy(&buf, resp.Body)
	return schedpeer.Response{Status: resp.StatusCode, Body: []byte(buf.String())}
}

// Stop deregisters after it starts refusing runs (503) and before the running handlers end:
// the scheduler learns at once that no new run may come, while the run in flight finishes
// and its result is delivered after the deregistration.
func TestStopDeregistersBeforeTheRunsFinish(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	exe := newExecutor(t, executor.Config{}, peer)
	started, release := make(chan string, 1), make(chan struct{})
	exe.Handle("h", blockingHandler(started, release))
	start(t, exe)
	dispatch(t, peer, exe, runFor("t-1", "a", "h"), http.StatusAccepted)
	recv(t, started, "the handler start")
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		stopped <- exe.Stop(ctx)
	}()
	deregs := waitCalls(t, peer, schedpeer.PathDeregister, 1)
	d := peer.Deregistrations()[0]
	if d.App != "billing" || d.Address != exe.Addr() || d.Incarnation != peer.Registrations()[0].Incarnation {
		t.Errorf("deregistration %s: want this executor and its incarnation", deregs[0].Body)
	}
	if resp, err := peer.Dispatch(exe.Addr(), runFor("t-2", "b", "h")); err != nil || resp.Status != http.StatusServiceUnavailable {
		t.Errorf("a run after the deregistration: %d %s (%v), want 503", resp.Status, resp.Body, err)
	}
	if n := len(peer.Calls(schedpeer.PathCallback)) + len(peer.Calls(schedpeer.PathCallbackBatch)); n != 0 {
		t.Errorf("%d results before the running handler ended", n)
	}
	close(release)
	cbs := waitCallbacks(t, peer, 1)
	if cbs[0].Ticket != "t-1" || cbs[0].Status != protocol.StatusSuccess {
		t.Errorf("result %+v, want t-1 success", cbs[0])
	}
	if err := recv(t, stopped, "Stop"); err != nil {
		t.Errorf("Stop: %v", err)
	}
}
