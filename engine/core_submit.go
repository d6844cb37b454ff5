package engine

// The engine's side of the batched writer: the one way a group goes in (submit), the
// per-task order groups go in by (the outbox), and the goroutines that hear how each group
// went (completions).
//
// Invariants (design.md, "Write path"):
//
//  1. The writer goroutine runs no engine code. A group's Done, as the writer calls it, only
//     appends the callback to a completion lane's queue, which takes that lane's own lock
//     and never blocks; an engine-side completion goroutine runs it. So the writer never
//     waits on a task's lock, on the dispatcher or on its own queue, and drains whatever the
//     engine is doing.
//  2. No engine lock is held across Writer.Submit. A decision made under t.mu puts its group
//     in t's outbox; the caller hands it to the writer as it unlocks (unlock). A submitter
//     blocked on a full queue (backpressure) therefore holds nothing the writer's
//     completions need.
//  3. A task's groups reach the writer in the order they were decided: the outbox is a FIFO
//     and one flusher at a time empties it. The writer reports them in that order, and the
//     completion lane (chosen by task id) runs the callbacks in that order.
//  4. submit is the only call of the writer's Submit and Offer in the engine.

import (
	"context"
	"sync"

	"github.com/axe-sched/axe/persist"
)

// submitMode is how submit hands a group to the writer.
type submitMode uint8

const (
	// submitWait waits while the writer's queue is full: the writer's backpressure.
	submitWait submitMode = iota
	// submitOffer never waits: a full (half-full) queue refuses the group with
	// persist.ErrWriterBusy (API creates, persist.Writer.Offer).
	submitOffer
)

// submit is the engine's one entry point into the writer. It routes g's Done to an
// engine-side completion goroutine (invariant 1) and submits g. As with Writer.Submit, Done
// is called exactly once on a nil return and never on an error. The caller must not hold an
// engine lock (invariant 2); groups of a task decided under its lock go through the outbox
// (commitGroupLocked) instead.
func (e *Engine) submit(ctx context.Context, g *persist.Group, mode submitMode) error {
	if err := e.own.fenceGroup(g, nil); err != nil {
		return err
	}
	if done := g.Done; done != nil {
		sh := e.completions.lane(groupTask(g))
		g.Done = func(err error) { sh.push(done, err) }
	}
	var fenced *shardSlot
	if f := g.Fence; f.Epoch > 0 {
		// Counted until durable or failed: a shard handed over is released only after
		// (Ownership.InFlight).
		s := &e.shards[f.Shard]
		s.writes.Add(1)
		fenced = s
		done := g.Done
		g.Done = func(err error) {
			s.writes.Add(-1)
			if done != nil {
				done(err)
			}
		}
	}
	var err error
	if mode == submitOffer {
		err = e.writer.Offer(g)
	} else {
		err = e.writer.Submit(ctx, g)
	}
	if err != nil && fenced != nil {
		fenced.writes.Add(-1) // refused: Done will not be called
	}
	return err
}

// groupTask is the id of the task g writes, 0 for none: the key its completions are ordered
// by.
func groupTask(g *persist.Group) int64 {
	switch {
	case len(g.Deletes) > 0:
		return g.Deletes[0]
	case len(g.Transitions) > 0:
		return g.Transitions[0].Runtime.TaskID
	case len(g.Runs) > 0:
		return g.Runs[0].TaskID
	case len(g.Fires) > 0:
		return g.Fires[0].TaskID
	case len(g.Actions) > 0:
		return g.Actions[0].TaskID
	}
	return 0
}

// outgoing is a group decided under a task's lock and not yet submitted.
type outgoing struct {
	g *persist.Group
	// dropped, when set, is called under t.mu if the writer refuses g (it has stopped):
	// Done will not be called, so it undoes what the decision counted on (t.pending).
	dropped func(err error)
}

// commitGroupLocked puts g in t's outbox, after every group decided for t before it. The
// caller holds t.mu and must let go of it with e.unlock (or e.release, which places it first);
// until then g is not submitted.
func (e *Engine) commitGroupLocked(t *task, g *persist.Group, dropped func(error)) {
	_ = e.own.fenceGroup(g, t) // by t's epoch: never fails with a task given
	t.outbox = append(t.outbox, outgoing{g: g, dropped: dropped})
}

// unlock releases t.mu and submits t's outbox in order, without holding t.mu across a
// submit (invariant 2). One caller at a time flushes a task; a caller that finds another
// flushing leaves its groups to it, which takes every group queued before it stops. The
// flusher is whoever decided: the consumer that fired, the dispatch worker that completed,
// the API handler. It is the one that waits on a full writer queue, as it was before it took
// the lock off.
func (e *Engine) unlock(t *task) {
	if len(t.outbox) == 0 || t.flushing {
		t.mu.Unlock()
		return
	}
	t.flushing = true
	e.flushLocked(t)
}

// flushLocked submits the outbox for unlock, once the caller, holding t.mu, has set
// t.flushing. It returns with t.mu released.
func (e *Engine) flushLocked(t *task) {
	for i := 0; i < len(t.outbox); i++ {
		o := t.outbox[i]
		t.outbox[i] = outgoing{}
		t.mu.Unlock()
		// Not the caller's context: a decision already made in memory is written whatever
		// became of the call that made it, or memory and store part ways.
		err := e.submit(context.Background(), o.g, submitWait)
		t.mu.Lock()
		if err != nil {
			e.log.Warn("write dropped: writer closed", "task", t.def.Name, "error", err)
			if o.dropped != nil {
				o.dropped(err)
			}
		}
	}
	// Kept for the task's next decision: most tasks decide one group at a time.
	t.outbox = t.outbox[:0]
	t.flushing = false
	t.mu.Unlock()
}

// completions runs the writer's Done callbacks on engine-side goroutines (invariant 1), one
// per lane. Lanes are as many as writer lanes: the callbacks ran on the lanes' goroutines
// before, so as many goroutines keep their throughput, and a task's callbacks stay in one
// lane, in order.
type completions struct {
	lanes []*completionLane
	wg    sync.WaitGroup
	once  sync.Once
}

// completionLane is a FIFO of callbacks with one goroutine running them. push never blocks:
// the queue grows instead. It is bounded by the groups in the writer, since each callback
// comes from one.
type completionLane struct {
	mu      sync.Mutex
	q       []completion
	closed  bool
	running bool          // a goroutine drains it (start); else stop drains it inline
	wake    chan struct{} // capacity 1: a push while the goroutine sleeps wakes it
}

type completion struct {
	fn  func(error)
	err error
}

func (c *completions) init(n int) {
	c.lanes = make([]*completionLane, max(1, n))
	for i := range c.lanes {
		c.lanes[i] = &completionLane{wake: make(chan struct{}, 1)}
	}
}

func (c *completions) lane(task int64) *completionLane {
	if task < 0 {
		task = -task
	}
	return c.lanes[task%int64(len(c.lanes))]
}

// start launches one goroutine per lane.
func (c *completions) start() {
	for _, s := range c.lanes {
		s.mu.Lock()
		s.running = true
		s.mu.Unlock()
		c.wg.Add(1)
		go func() { defer c.wg.Done(); s.run() }()
	}
}

// stop runs every callback pushed so far and returns once the goroutines have exited. The
// writer must have stopped first: its last callbacks are pushed by then. Stopping twice, or
// without start, is harmless.
func (c *completions) stop(context.Context) error {
	c.once.Do(func() {
		for _, s := range c.lanes {
			s.mu.Lock()
			s.closed = true
			s.mu.Unlock()
			select {
			case s.wake <- struct{}{}:
			default:
			}
		}
		c.wg.Wait()
		for _, s := range c.lanes {
			s.drain() // a lane never started (Stop without Start)
		}
	})
	return nil
}

func (s *completionLane) push(fn func(error), err error) {
	s.mu.Lock()
	s.q = append(s.q, completion{fn: fn, err: err})
	inline := s.closed && !s.running
	s.mu.Unlock()
	if inline {
		// After stop: nothing drains the queue any more; run it here, in order.
		s.drain()
		return
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *completionLane) run() {
	var batch []completion
	for {
		s.mu.Lock()
		batch, s.q = s.q, batch[:0]
		closed := s.closed
		if len(batch) == 0 && closed {
			s.running = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		for i := range batch {
			batch[i].fn(batch[i].err)
			batch[i] = completion{}
		}
		if len(batch) == 0 {
			<-s.wake
		}
	}
}

// drain runs what is queued on the calling goroutine, when no goroutine runs the lane.
func (s *completionLane) drain() {
	for {
		s.mu.Lock()
		if s.running || len(s.q) == 0 {
			s.mu.Unlock()
			return
		}
		c := s.q[0]
		s.q[0] = completion{}
		s.q = s.q[1:]
		s.mu.Unlock()
		c.fn(c.err)
	}
}
