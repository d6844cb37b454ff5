package executor_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/executor"
	"github.com/axe-sched/axe/executor/internal/schedpeer"
)

// A Start refused by the scheduler has already listened, started the result senders, the
// feeder and the HTTP server: it stops all of them again before it returns (the goroutines are
// also checked by TestMain's leak check).
func TestRefusedStartUndoesWhatItStarted(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{Token: "s3cret"})
	exe := newExecutor(t, executor.Config{Token: "wrong"}, peer)
	exe.Handle("h", okHandler(""))
	if err := exe.Start(context.Background()); !errors.Is(err, executor.ErrUnauthorized) {
		t.Fatalf("Start = %v, want ErrUnauthorized", err)
	}
	addr := exe.Addr()
	if addr == "" {
		t.Fatal("no address: the refusal came before the executor listened, so this test tests nothing")
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		_ = c.Close()
		t.Errorf("%s still accepts connections after the failed Start", addr)
	}
	if err := exe.Start(context.Background()); !errors.Is(err, executor.ErrStopped) {
		t.Errorf("Start after a refused Start = %v, want ErrStopped", err)
	}
	mustPanic(t, "Handle after a refused Start", func() { exe.Handle("late", okHandler("")) })
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := exe.Stop(ctx); err != nil {
		t.Errorf("Stop after a refused Start = %v", err)
	}
}

// A Start that fails once it listens but before it serves closes the listener again, and the
// executor stays new.
func TestStartFailingAfterListenClosesTheListener(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	probe, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	port := probe.Addr().(*net.TCPAddr).Port
	_ = probe.Close()
	addr := "0.0.0.0:" + strconv.Itoa(port)

	// A wildcard listen without AdvertiseAddr fails after listening (the address to advertise
	// is only known then).
	exe := newExecutor(t, executor.Config{Addr: addr, Token: "t"}, peer)
	exe.Handle("h", okHandler(""))
	if err := exe.Start(context.Background()); !errors.Is(err, executor.ErrInvalidConfig) || !strings.Contains(err.Error(), "AdvertiseAddr") {
		t.Fatalf("Start = %v, want an AdvertiseAddr config error", err)
	}
	again, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the failed Start left %s bound: %v", addr, err)
	}
	_ = again.Close()
	if err := exe.Start(context.Background()); errors.Is(err, executor.ErrStopped) || !errors.Is(err, executor.ErrInvalidConfig) {
		t.Errorf("second Start = %v, want the same config error (the executor stays new)", err)
	}
}

// A Start that started nothing (no handlers yet, a port in use) may be tried again, as before
// the executor shared the services' lifecycle.
func TestStartThatStartedNothingMayBeRetried(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	exe := newExecutor(t, executor.Config{Addr: busy.Addr().String()}, peer)
	if err := exe.Start(context.Background()); !errors.Is(err, executor.ErrNoHandlers) {
		t.Fatalf("Start without handlers = %v", err)
	}
	exe.Handle("h", okHandler("")) // still new: registering is allowed
	if err := exe.Start(context.Background()); err == nil || errors.Is(err, executor.ErrStopped) {
		t.Fatalf("Start on a port in use = %v, want a listen error", err)
	}
	_ = busy.Close()
	start(t, exe)
	if exe.Addr() == "" {
		t.Error("no address after a successful Start")
	}
	waitCalls(t, peer, schedpeer.PathRegister, 1)
	stop(t, exe)
}
