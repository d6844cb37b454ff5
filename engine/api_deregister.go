package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/protocol"
)

// Executor protocol version 2 on the scheduler's side: deregistration, and the incarnation
// a heartbeat must name (docs/protocol.md).

// DeregisterExecutor ends the registration of the executor (app, addr): from now on it gets
// no new run, while the runs it holds go on and their results are taken. With incarnation
// set, only the registration of that incarnation ends. It is idempotent: an executor that is
// unknown, of another incarnation or already gone is no error. The store records the
// executor as left, so every node (a promoted one, the other nodes of a sharded cluster)
// stops sending it runs too; its heartbeats while it drains keep it so (the store keeps
// "left" until a registration), and once they stop it is reaped without an alert.
func (ex *Executors) Deregister(ctx context.Context, app, addr, incarnation string) error {
	x := ex.reg.Deregister(app, addr, incarnation)
	if x == nil {
		return nil
	}
	if err := ex.store.SetExecutorStatus(ctx, app, addr, dispatch.StatusLeft); err != nil && !errors.Is(err, model.ErrExecutorNotFound) {
		return fmt.Errorf("cannot record the deregistration of executor %s at %s: %w", app, addr, err)
	}
	ex.log.Info("executor deregistered", "app", app, "address", addr, "in_flight", x.Inflight())
	return nil
}

// CheckIncarnation refuses a heartbeat of (app, addr) that names another incarnation than
// the registered one ("" for none, on either side) with ErrUnknownExecutor: the executor
// restarted, or its registration was restored without one, and it registers again, so that
// the calls made to it are signed for the process that runs now. An executor not registered
// here is left to ExecutorHeartbeat.
func (ex *Executors) CheckIncarnation(app, addr, incarnation string) error {
	if incarnation == "" {
		return nil
	}
	if x := ex.reg.Get(app, addr); x != nil && x.Incarnation() != incarnation {
		return ErrUnknownExecutor
	}
	return nil
}

// offerAgainToIncarnation takes the answer o to an offer made to x while x was registered
// as signedFor (registered: x.Registered() read before the offer) and, when x refused it as
// signed for another incarnation of itself (401, protocol.IsOtherIncarnation), makes it once
// more with offer after x registered again, waiting at most until by. Such a refusal means x
// restarted and the call went out signed for its previous process: the executor read nothing
// of it, so the run was not delivered, and it is no failure of the task. The new process
// registers at its start; once it has, the offer is signed for it. If it does not register
// by then, the refusal stands and the run goes on to the next candidate, as after any
// refusal.
func offerAgainToIncarnation(x *dispatch.Executor, by time.Time, registered <-chan struct{}, signedFor string,
	o dispatch.Outcome, offer func() dispatch.Outcome) dispatch.Outcome {
	if o.Err != nil || o.Status != 401 || signedFor == "" || !protocol.IsOtherIncarnation(o.Body) {
		return o
	}
	if x.Incarnation() == signedFor {
		// by is the offer's deadline, which the dispatcher enforces in real time, so the wait
		// is on clock.Real too (design.md, "Time").
		wait := clock.Real.NewTimer(clock.Until(clock.Real, by))
		defer wait.Stop()
		select {
		case <-registered:
		case <-wait.C():
			return o
		}
	}
	return offer()
}

// executorStatus is how the API shows an executor: lost when silent, else left when it
// deregistered (it drains and gets no new run), else alive.
func executorStatus(x dispatch.ExecutorInfo) string {
	switch {
	case !x.Alive:
		return dispatch.StatusLost
	case x.Left:
		return dispatch.StatusLeft
	}
	return dispatch.StatusAlive
}
