package startstop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestLifecycleStartOnceStopIdempotent(t *testing.T) {
	var l Lifecycle
	starts := 0
	if err := l.StartOnce(func() error { starts++; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := l.StartOnce(func() error { starts++; return nil }); !errors.Is(err, ErrStarted) {
		t.Fatalf("second start = %v, want ErrStarted", err)
	}
	if !l.Started() || starts != 1 {
		t.Fatalf("started %v after %d starts", l.Started(), starts)
	}
	release := make(chan struct{})
	var stops []bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = l.StopOnce(context.Background(), func(started bool) error {
			stops = append(stops, started)
			<-release
			return nil
		})
	}()
	for l.Started() {
		time.Sleep(time.Millisecond)
	}
	second := make(chan error, 1)
	go func() {
		second <- l.StopOnce(context.Background(), func(bool) error { t.Error("stop ran twice"); return nil })
	}()
	select {
	case <-second:
		t.Fatal("a second Stop returned before the first finished")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if len(stops) != 1 || !stops[0] {
		t.Fatalf("stop calls = %v, want one, started", stops)
	}
	if err := l.StartOnce(func() error { return nil }); !errors.Is(err, ErrStopped) {
		t.Fatalf("start after stop = %v, want ErrStopped", err)
	}
}

func TestLifecycleStopWithoutStartAndFailedStart(t *testing.T) {
	var l Lifecycle
	var got []bool
	if err := l.StopOnce(context.Background(), func(started bool) error { got = append(got, started); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] {
		t.Fatalf("stop without start called with %v, want once with started=false", got)
	}
	var f Lifecycle
	boom := errors.New("boom")
	if err := f.StartOnce(func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("failed start = %v", err)
	}
	if f.Started() {
		t.Fatal("a failed start left the service started")
	}
	if err := f.StopOnce(context.Background(), func(bool) error { t.Error("stop ran after a failed start"); return nil }); err != nil {
		t.Fatal(err)
	}
}

func TestUndoRunsInReverseAndLogsEachStep(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var order []string
	var u Undo
	for _, n := range []string{"writer", "dispatcher", "wheel"} {
		u.Push(n, func(context.Context) error {
			order = append(order, n)
			if n == "dispatcher" {
				return errors.New("stuck")
			}
			return nil
		})
	}
	err := u.Run(context.Background(), log, nil, "undo start: ")
	if strings.Join(order, ",") != "wheel,dispatcher,writer" {
		t.Errorf("order = %v, want the reverse of the starts", order)
	}
	if err == nil || !strings.Contains(err.Error(), "dispatcher: stuck") {
		t.Errorf("error = %v, want the dispatcher's", err)
	}
	for _, n := range []string{"wheel", "dispatcher", "writer"} {
		if !strings.Contains(buf.String(), `msg="undo start: `+n+`" took=`) {
			t.Errorf("no timed log line for %s in %q", n, buf.String())
		}
	}
	if err := u.Run(context.Background(), nil, nil, ""); err != nil || len(order) != 3 {
		t.Errorf("a second Run did something: %v, %v", err, order)
	}
}

func TestNothingStartedLeavesTheServiceNew(t *testing.T) {
	var l Lifecycle
	busy := errors.New("port in use")
	err := l.StartOnce(func() error { return NothingStarted(fmt.Errorf("cannot listen: %w", busy)) })
	if !errors.Is(err, busy) {
		t.Fatalf("start = %v, want the cause", err)
	}
	if _, marked := errors.AsType[nothingStarted](err); marked {
		t.Errorf("StartOnce returned the mark itself: %#v", err)
	}
	if !l.IfNew(func() {}) {
		t.Fatal("service not new after a start that started nothing")
	}
	if err := l.StartOnce(func() error { return nil }); err != nil {
		t.Fatalf("second start = %v, want it to run", err)
	}
	if !l.Started() {
		t.Fatal("not started")
	}
	if NothingStarted(nil) != nil {
		t.Error("NothingStarted(nil) is not nil")
	}
}

func TestIfNew(t *testing.T) {
	var l Lifecycle
	ran := 0
	if !l.IfNew(func() { ran++ }) || ran != 1 {
		t.Fatalf("IfNew on a new service: ran %d", ran)
	}
	if err := l.StartOnce(func() error { return errors.New("failed") }); err == nil {
		t.Fatal("start succeeded")
	}
	if l.IfNew(func() { ran++ }) || ran != 1 {
		t.Errorf("IfNew ran after a failed start")
	}
	var started Lifecycle
	_ = started.StartOnce(func() error { return nil })
	if started.IfNew(func() { ran++ }) || ran != 1 {
		t.Errorf("IfNew ran after Start")
	}
	var stopped Lifecycle
	_ = stopped.StopOnce(context.Background(), func(bool) error { return nil })
	if stopped.IfNew(func() { ran++ }) || ran != 1 {
		t.Errorf("IfNew ran after Stop")
	}
}

// TestReserve: the context Reserve returns ends a quarter of the time left before ctx, at
// most the bound; without a deadline it has none.
func TestReserve(t *testing.T) {
	parent, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	pd, _ := parent.Deadline()
	for _, c := range []struct {
		most, want time.Duration // want: how long before the parent's deadline it ends
	}{{time.Minute, 2 * time.Second}, {time.Second, time.Second}} {
		ctx, cancel := Reserve(parent, c.most)
		d, ok := ctx.Deadline()
		cancel()
		if got := pd.Sub(d); !ok || got < c.want-50*time.Millisecond || got > c.want {
			t.Errorf("Reserve(8 s left, at most %s) ends %s before the parent (deadline %v), want %s", c.most, got, ok, c.want)
		}
	}
	ctx, cancel2 := Reserve(context.Background(), time.Second)
	defer cancel2()
	if _, ok := ctx.Deadline(); ok {
		t.Error("Reserve of a context without a deadline has one")
	}
}
