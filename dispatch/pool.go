package dispatch

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// The dispatcher's worker pool. A send is a job handed to an idle worker directly (one
// channel send, which wakes it), or to a new worker while fewer than the pool's size run,
// or queued for the next worker to finish when all of them are busy: Go and Send never
// block. Workers are long-lived, so a send rarely starts on a fresh goroutine whose stack
// the fasthttp round trip and the run's end then grow; a worker idle for idleExpiry exits.
// (Parking workers with 8 KiB of stack in use, to keep the garbage collector from
// shrinking their stacks, cost more than it saved: zeroing that pad on the cold stacks of
// thousands of workers waiting on executor offers was 7% of an executor burst's CPU.)
//
// It replaced an ants pool fed by a pump goroutine: a send was a closure queued for the
// pump, which woke and submitted it to ants, which woke a worker — two hand-offs and two
// allocations a send where there is now one hand-off and none.
//
// Callback sends to one host (scheme and authority of the URL) take a worker only while
// fewer than perHost (Config.MaxConnsPerHost, the client's connections to a host) of them
// are admitted; the others wait in the host's own FIFO, and a worker that finishes a send
// to the host takes the host's next one, as a connection passes from one request to the
// next. Before, a burst to one endpoint had up to PoolSize workers, 9 in 10 of them parked
// in the client waiting for one of the host's connections (a timer, a select and a wake
// each, and a grown stack apiece), and a slow host could hold every worker while other
// hosts' sends waited. A waiting send whose deadline passes is taken out within sweepEvery
// and run at once, which fails it as a timeout without a connection, as the client would
// have at its deadline.

// idleExpiry is how long a worker waits for a job before it exits.
const idleExpiry = 10 * time.Second

// sweepEvery is how often the sends waiting for a host are checked for a passed deadline.
const sweepEvery = 200 * time.Millisecond

// job is one unit of work: a callback send (req, done) or a function (fn). host is the
// send's host key (hostKey) when it is held to perHost, else empty.
type job struct {
	fn   func()
	req  *Request
	done func(Outcome)
	host string
}

// hostQueue is one host's admitted count and its sends waiting for a slot.
type hostQueue struct {
	active  int   // admitted: running, or queued for a worker
	waiting []job // FIFO from head
	head    int
}

// hostKey is the scheme and authority of rawURL ("http://h:p"), a substring of it; empty
// when it has none.
func hostKey(rawURL string) string {
	i := strings.Index(rawURL, "://")
	if i < 0 {
		return ""
	}
	if j := strings.IndexAny(rawURL[i+3:], "/?#"); j >= 0 {
		return rawURL[:i+3+j]
	}
	return rawURL
}

// worker is a parked worker's mailbox.
type worker struct {
	wake      chan job // buffered 1; closed to retire the worker
	idleSince time.Time
}

type pool struct {
	size    int
	perHost int           // sends admitted to one host at once; 0: no bound
	expiry  time.Duration // idleExpiry; a test's shorter
	run     func(job)
	log     *slog.Logger

	mu      sync.Mutex
	queue   []job // FIFO from head
	head    int
	idle    []*worker             // LIFO: the most recently parked worker is woken first
	workers int                   // alive
	busy    int                   // running a job
	hosts   map[string]*hostQueue // hosts with a send admitted
	waiting int                   // sends waiting in hosts' queues
	started bool                  // jobs submitted before start wait in the queue
	stopped bool
	wg      sync.WaitGroup // workers and the janitor
	quit    chan struct{}  // closed by stop: the janitor exits
}

func newPool(size, perHost int, run func(job), log *slog.Logger) *pool {
	return &pool{size: size, perHost: perHost, expiry: idleExpiry, run: run, log: log,
		hosts: make(map[string]*hostQueue), quit: make(chan struct{})}
}

// start starts the janitor and workers for what was queued before it.
func (p *pool) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started || p.stopped {
		return
	}
	p.started = true
	p.wg.Add(1)
	go p.janitor()
	for p.head < len(p.queue) && p.workers < p.size {
		j := p.queue[p.head]
		p.queue[p.head] = job{}
		p.head++
		p.workers++
		p.busy++
		p.wg.Add(1)
		go p.work(j)
	}
}

// submit hands j to a worker or queues it. It never blocks.
func (p *pool) submit(j job) error {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return ErrStopped
	}
	if p.perHost <= 0 {
		j.host = ""
	}
	if j.host != "" {
		h := p.hosts[j.host]
		if h == nil {
			h = &hostQueue{}
			p.hosts[j.host] = h
		}
		if h.active >= p.perHost {
			h.waiting = append(h.waiting, j)
			p.waiting++
			p.mu.Unlock()
			return nil
		}
		h.active++
	}
	w, spawn := p.placeLocked(j)
	p.mu.Unlock()
	p.hand(w, spawn, j)
	return nil
}

// placeLocked finds j a worker: an idle one (returned, to be handed j once p.mu is let go),
// or a new one (spawn, counted here), or it queues j.
func (p *pool) placeLocked(j job) (w *worker, spawn bool) {
	if n := len(p.idle); n > 0 && p.started {
		w = p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.busy++
		return w, false
	}
	if p.workers < p.size && p.started {
		p.workers++
		p.busy++
		p.wg.Add(1)
		return nil, true
	}
	if p.head > 0 && p.head == len(p.queue) {
		p.queue, p.head = p.queue[:0], 0
	}
	p.queue = append(p.queue, j)
	return nil, false
}

// hand gives j to the worker placeLocked chose, outside p.mu.
func (p *pool) hand(w *worker, spawn bool, j job) {
	switch {
	case w != nil:
		w.wake <- j // buffered, and the worker is parked on it alone: never blocks
	case spawn:
		go p.work(j)
	}
}

func (p *pool) work(j job) {
	defer p.wg.Done()
	w := &worker{wake: make(chan job, 1)}
	for ok := true; ok; j, ok = p.next(w, j.host) {
		p.safeRun(j)
	}
}

func (p *pool) safeRun(j job) {
	defer func() {
		if r := recover(); r != nil {
			p.log.Error("dispatch worker panicked", "panic", r)
		}
	}()
	p.run(j)
}

// next returns the worker's next job, the one before it having been a send to host (empty:
// none held to perHost): that host's next waiting send, which takes over its slot, else the
// oldest queued, else the one it is woken with once parked. It reports false when the
// worker is to exit (retired, or the pool stopped with nothing queued).
func (p *pool) next(w *worker, host string) (job, bool) {
	p.mu.Lock()
	if host != "" {
		h := p.hosts[host]
		if h.head < len(h.waiting) {
			j := h.waiting[h.head]
			h.waiting[h.head] = job{}
			h.head++
			if h.head == len(h.waiting) {
				h.waiting, h.head = h.waiting[:0], 0
			}
			p.waiting--
			p.mu.Unlock()
			return j, true
		}
		if h.active--; h.active == 0 {
			delete(p.hosts, host)
		}
	}
	if p.head < len(p.queue) {
		j := p.queue[p.head]
		p.queue[p.head] = job{}
		p.head++
		p.mu.Unlock()
		return j, true
	}
	p.busy--
	if p.stopped {
		p.workers--
		p.mu.Unlock()
		return job{}, false
	}
	w.idleSince = time.Now()
	p.idle = append(p.idle, w)
	p.mu.Unlock()
	return park(w)
}

// park waits for w's next job.
func park(w *worker) (job, bool) {
	j, ok := <-w.wake
	return j, ok
}

// janitor retires workers idle for p.expiry, the longest idle first, and runs the waiting
// sends whose deadline passed (sweep).
func (p *pool) janitor() {
	defer p.wg.Done()
	t := time.NewTicker(p.expiry / 4)
	defer t.Stop()
	sweep := time.NewTicker(sweepEvery)
	defer sweep.Stop()
	for {
		select {
		case <-p.quit:
			return
		case now := <-sweep.C:
			p.sweep(now)
		case now := <-t.C:
			p.mu.Lock()
			k := 0
			for k < len(p.idle) && now.Sub(p.idle[k].idleSince) >= p.expiry {
				k++
			}
			retired := make([]*worker, k)
			copy(retired, p.idle[:k])
			n := copy(p.idle, p.idle[k:])
			clear(p.idle[n:])
			p.idle = p.idle[:n]
			p.workers -= k
			p.mu.Unlock()
			for _, w := range retired {
				close(w.wake)
			}
		}
	}
}

// sweep takes the waiting sends whose deadline is not after now out of their hosts' queues
// and runs them outside the host's bound: past its deadline a send fails as a timeout
// before it takes a connection.
func (p *pool) sweep(now time.Time) {
	p.mu.Lock()
	if p.waiting == 0 {
		p.mu.Unlock()
		return
	}
	var expired []job
	for _, h := range p.hosts {
		kept := h.waiting[:h.head]
		for _, j := range h.waiting[h.head:] {
			if !j.req.Deadline.IsZero() && !now.Before(j.req.Deadline) {
				j.host = ""
				expired = append(expired, j)
			} else {
				kept = append(kept, j)
			}
		}
		clear(h.waiting[len(kept):])
		h.waiting = kept
	}
	p.waiting -= len(expired)
	type handing struct {
		w     *worker
		spawn bool
		j     job
	}
	hands := make([]handing, 0, len(expired))
	for _, j := range expired {
		w, spawn := p.placeLocked(j)
		hands = append(hands, handing{w, spawn, j})
	}
	p.mu.Unlock()
	for _, h := range hands {
		p.hand(h.w, h.spawn, h.j)
	}
}

// running is the number of workers running a job; queued the jobs waiting for one.
func (p *pool) running() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.busy
}

func (p *pool) queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue) - p.head + p.waiting
}

// stop refuses new jobs, lets the workers run what is queued and exit, and waits for them
// until ctx ends. Past ctx the workers still finish what is queued (each send is bounded by
// its own deadline) and exit on their own. Jobs queued on a pool never started are run
// here, on the caller, so none is lost.
func (p *pool) stop(ctx context.Context) error {
	p.mu.Lock()
	if !p.started && !p.stopped {
		p.stopped = true
		left := p.queue[p.head:]
		p.queue, p.head = nil, 0
		p.mu.Unlock()
		for _, j := range left {
			p.safeRun(j)
		}
		return nil
	}
	if !p.stopped {
		p.stopped = true
		close(p.quit)
		for _, w := range p.idle {
			close(w.wake)
		}
		p.workers -= len(p.idle)
		p.idle = nil
	}
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cannot drain dispatch queue: %w", ctx.Err())
	}
}
