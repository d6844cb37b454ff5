package dispatch

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitUntil polls cond until it holds or a generous bound passes.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// The pool runs at most size jobs at once, queues the rest without blocking the submitter
// and runs them in order as workers free up; a job submitted before start waits for it.
func TestPoolBoundsAndQueues(t *testing.T) {
	release := make(chan struct{})
	var (
		mu    sync.Mutex
		order []int
		now   atomic.Int32
		peak  atomic.Int32
	)
	p := newPool(2, 0, func(j job) { j.fn() }, slog.Default())
	submit := func(i int) {
		t.Helper()
		if err := p.submit(job{fn: func() {
			n := now.Add(1)
			for {
				m := peak.Load()
				if n <= m || peak.CompareAndSwap(m, n) {
					break
				}
			}
			mu.Lock()
			order = append(order, i) // the order the jobs start in
			mu.Unlock()
			<-release
			now.Add(-1)
		}}); err != nil {
			t.Fatal(err)
		}
	}
	submit(0)
	if p.running() != 0 || p.queued() != 1 {
		t.Fatalf("before start: running %d, queued %d; want 0 and 1", p.running(), p.queued())
	}
	p.start()
	for i := 1; i < 6; i++ {
		submit(i)
	}
	waitUntil(t, "two jobs to run", func() bool { return now.Load() == 2 })
	if q := p.queued(); q != 4 {
		t.Errorf("queued = %d with both workers busy, want 4", q)
	}
	if r := p.running(); r != 2 {
		t.Errorf("running = %d, want 2", r)
	}
	close(release)
	waitUntil(t, "every job to start", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 6 })
	waitUntil(t, "every job to finish", func() bool { return p.running() == 0 })
	if m := peak.Load(); m != 2 {
		t.Errorf("%d jobs ran at once, want the pool's size, 2", m)
	}
	// The queue is FIFO: the jobs queued behind the busy workers are taken in the order
	// given (two workers take them, so neighbours may start in either order).
	mu.Lock()
	got := append([]int(nil), order[2:]...)
	mu.Unlock()
	for i := 2; i < len(got); i++ {
		if got[i] < got[i-2] {
			t.Errorf("jobs started in order %v, want the queued ones (2…5) taken in order", order)
			break
		}
	}
	if err := p.stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.submit(job{fn: func() {}}); err != ErrStopped {
		t.Errorf("submit after stop = %v, want ErrStopped", err)
	}
}

// A worker is reused for the next job while it is idle, and retired once it has been idle
// for the pool's expiry; stop waits for the jobs already queued.
func TestPoolReusesAndRetiresWorkers(t *testing.T) {
	var ran atomic.Int32
	p := newPool(4, 0, func(j job) { j.fn() }, slog.Default())
	p.expiry = 50 * time.Millisecond
	p.start()
	for range 3 {
		if err := p.submit(job{fn: func() { ran.Add(1) }}); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the job to finish", func() bool { return p.running() == 0 })
	}
	p.mu.Lock()
	workers := p.workers
	p.mu.Unlock()
	if workers != 1 {
		t.Errorf("%d workers after three jobs one after the other, want 1 reused", workers)
	}
	waitUntil(t, "the idle worker to retire", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.workers == 0 && len(p.idle) == 0
	})

	block := make(chan struct{})
	if err := p.submit(job{fn: func() { <-block }}); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := p.submit(job{fn: func() { ran.Add(1) }}); err != nil {
			t.Fatal(err)
		}
	}
	stopped := make(chan error, 1)
	go func() { stopped <- p.stop(context.Background()) }()
	close(block)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if n := ran.Load(); n != 13 {
		t.Errorf("%d jobs ran, want 13: stop runs what was queued", n)
	}
}

// A panicking job is logged and the worker goes on with the next.
func TestPoolSurvivesAPanic(t *testing.T) {
	var ran atomic.Int32
	p := newPool(1, 0, func(j job) { j.fn() }, slog.New(slog.DiscardHandler))
	p.start()
	_ = p.submit(job{fn: func() { panic("boom") }})
	_ = p.submit(job{fn: func() { ran.Add(1) }})
	waitUntil(t, "the job after the panic", func() bool { return ran.Load() == 1 })
	if err := p.stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Sends to one host take at most perHost workers (here 1); the rest wait in the host's queue, in
// order, without holding a worker, so another host's send starts at once; a waiting send
// whose deadline passes is run (and so fails fast) without waiting for the host's slot.
func TestPoolBoundsSendsPerHost(t *testing.T) {
	release := make(chan struct{})
	var (
		mu      sync.Mutex
		started []string
	)
	p := newPool(100, 1, func(j job) {
		mu.Lock()
		started = append(started, j.req.Ticket)
		mu.Unlock()
		if j.req.Task == "block" && time.Now().Before(j.req.Deadline) {
			<-release
		}
		j.done(Outcome{})
	}, slog.Default())
	p.start()
	var done atomic.Int32
	send := func(url, ticket, task string, deadline time.Time) {
		t.Helper()
		req := &Request{URL: url, Ticket: ticket, Task: task, Deadline: deadline}
		if err := p.submit(job{req: req, done: func(Outcome) { done.Add(1) }, host: hostKey(url)}); err != nil {
			t.Fatal(err)
		}
	}
	later := time.Now().Add(time.Hour)
	for i := range 5 {
		send("http://a.example:80/hook", fmt.Sprint("a", i), "block", later)
	}
	send("http://a.example:80/other?x=1", "a-expiring", "block", time.Now().Add(300*time.Millisecond))
	send("http://b.example:80/hook", "b0", "quick", later)
	waitUntil(t, "b's send to run beside a's first", func() bool { return done.Load() == 1 })
	if r := p.running(); r != 1 {
		t.Errorf("running = %d with host a at its bound, want 1", r)
	}
	if q := p.queued(); q != 5 {
		t.Errorf("queued = %d, want a's five waiting sends", q)
	}
	waitUntil(t, "a's expiring send to be run past its deadline", func() bool { return done.Load() == 2 })
	close(release)
	waitUntil(t, "every send to end", func() bool { return done.Load() == 7 })
	mu.Lock()
	var a []string
	for _, s := range started {
		if s != "b0" && s != "a-expiring" {
			a = append(a, s)
		}
	}
	if got := strings.Join(a, ","); got != "a0,a1,a2,a3,a4" {
		t.Errorf("host a's sends started in order %s, want a0,a1,a2,a3,a4", got)
	}
	mu.Unlock()
	waitUntil(t, "the workers to go idle", func() bool { return p.running() == 0 })
	p.mu.Lock()
	if len(p.hosts) != 0 || p.waiting != 0 {
		t.Errorf("after the sends: %d hosts tracked, %d waiting; want none", len(p.hosts), p.waiting)
	}
	p.mu.Unlock()
	if err := p.stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestHostKey(t *testing.T) {
	for in, want := range map[string]string{
		"http://h:1/p?q": "http://h:1",
		"https://h?x":    "https://h",
		"http://h":       "http://h",
		"http://u@h:2#f": "http://u@h:2",
		"no-scheme/path": "",
	} {
		if got := hostKey(in); got != want {
			t.Errorf("hostKey(%q) = %q, want %q", in, got, want)
		}
	}
}
