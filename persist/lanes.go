package persist

import (
	"context"
	"errors"
	"fmt"
)

// Lanes spreads groups over several Writers by task, so that commits of different tasks
// overlap in the database (InnoDB group-commits concurrent transactions into one log flush)
// while each task's writes stay in one lane, in submission order. Every invariant of Writer
// holds per task; across tasks, groups may become durable in any order.
type Lanes struct {
	ws []*Writer
}

// NewLanes builds n writers on s, each configured with cfg. n < 1 means one.
func NewLanes(s Store, cfg WriterConfig, n int) (*Lanes, error) {
	if n < 1 {
		n = 1
	}
	l := &Lanes{}
	cfg = cfg.WithDefaults() // one metric set for every lane, even when cfg names none
	for i := 0; i < n; i++ {
		w, err := NewWriter(s, cfg)
		if err != nil {
			return nil, fmt.Errorf("cannot create writer lane %d: %w", i, err)
		}
		l.ws = append(l.ws, w)
	}
	return l, nil
}

// laneOf keys a group by the task it writes: its first transition, else its first run, else
// its fire record, else its first action. Groups of no task (system actions) go to lane 0.
func (l *Lanes) laneOf(g *Group) *Writer {
	var id int64
	switch {
	case len(g.Creates) > 0:
		return l.createLane()
	case len(g.Deletes) > 0:
		id = g.Deletes[0]
	case len(g.Transitions) > 0:
		id = g.Transitions[0].Runtime.TaskID
	case len(g.Runs) > 0:
		id = g.Runs[0].TaskID
	case len(g.Fires) > 0:
		id = g.Fires[0].TaskID
	case len(g.Actions) > 0:
		id = g.Actions[0].TaskID
	}
	if id < 0 {
		id = -id
	}
	return l.ws[id%int64(len(l.ws))]
}

// createLane is the lane for a group of creates. A new task has no id yet, and a create's
// group is durable before the task can be written again, so any lane will do.
//
// Creates gather in the first lane that is not committing. Concurrent creates then share
// one batch, and its statements and round trips: spread by name over four lanes, batches
// were a quarter the size, and on two cores the server spent 85 µs of CPU per create
// against 52 µs in one lane, and the daemon 104 µs against 84 µs. And while that lane
// commits, the next creates gather in another lane instead of queueing behind the commit,
// so one batch forms while another is in the database (BENCHMARKS.md, B6). When every lane
// is committing, creates wait in lane 0.
func (l *Lanes) createLane() *Writer {
	for _, w := range l.ws {
		if !w.committing.Load() {
			return w
		}
	}
	return l.ws[0]
}

// Start starts every lane.
func (l *Lanes) Start(ctx context.Context) error {
	for _, w := range l.ws {
		if err := w.Start(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Stop stops every lane, flushing what is queued (see Writer.Stop).
func (l *Lanes) Stop(ctx context.Context) error {
	errs := make([]error, len(l.ws))
	done := make(chan int, len(l.ws))
	for i, w := range l.ws {
		go func() { errs[i] = w.Stop(ctx); done <- i }()
	}
	for range l.ws {
		<-done
	}
	return errors.Join(errs...)
}

// Submit enqueues g on its task's lane (see Writer.Submit).
func (l *Lanes) Submit(ctx context.Context, g *Group) error { return l.laneOf(g).Submit(ctx, g) }

// Offer queues g on its task's lane unless that lane is busy (see Writer.Offer).
func (l *Lanes) Offer(g *Group) error { return l.laneOf(g).Offer(g) }

// Busy is the fullest lane's queue fill, 0 to 1 (see Writer.Busy).
func (l *Lanes) Busy() float64 {
	b := 0.0
	for _, w := range l.ws {
		b = max(b, w.Busy())
	}
	return b
}

// Write submits g and waits until it is durable (see Writer.Write).
func (l *Lanes) Write(ctx context.Context, g *Group) error { return l.laneOf(g).Write(ctx, g) }

// Pending is the number of groups queued in all lanes.
func (l *Lanes) Pending() int {
	n := 0
	for _, w := range l.ws {
		n += w.Pending()
	}
	return n
}
