package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/axe-sched/axe/protocol"
)

// KillTimeoutDefault bounds a kill call whose context carries no deadline.
const KillTimeoutDefault = 5 * time.Second

// Kill asks the SDK executor x to cancel the run with ticket, over x's scheme (HTTPS when it
// registered so), signed with x's dispatch key, or else carrying token as the legacy bearer
// token when it is set. It runs on the calling goroutine and returns
// once the executor answered: nil when it confirmed (2xx), an error naming the status
// otherwise (404: the ticket is not running there). The run's result still arrives by
// callback. The call ends at ctx's deadline, or after KillTimeoutDefault when it has none.
func (d *Dispatcher) Kill(ctx context.Context, x *Executor, ticket, token string) error {
	return d.KillAt(ctx, x, protocol.Kill{Ticket: ticket}, token)
}

// KillAt is Kill with the kill's body given: its ticket, and the epoch (and shard) of the
// run it kills, which go in the X-Axe-Epoch header too.
func (d *Dispatcher) KillAt(ctx context.Context, x *Executor, k protocol.Kill, token string) error {
	addr, ticket := x.Address, k.Ticket
	body, err := json.Marshal(k)
	if err != nil {
		return fmt.Errorf("cannot encode kill of %s: %w", ticket, err)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(KillTimeoutDefault)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cannot kill %s on %s: %w", ticket, addr, err)
	}
	o := d.Post(&Request{URL: x.URL(protocol.PathKill), Ticket: ticket, Body: body, Epoch: k.Epoch,
		Deadline: deadline, Key: x.DispatchKey(), Address: x.Address, Incarnation: x.Incarnation(), Token: token})
	switch {
	case o.Err != nil:
		return fmt.Errorf("cannot kill %s on %s: %w", ticket, addr, o.Err)
	case !o.OK():
		return fmt.Errorf("cannot kill %s on %s: HTTP %d: %s", ticket, addr, o.Status, o.Body)
	}
	return nil
}
