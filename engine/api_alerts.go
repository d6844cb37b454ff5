package engine

import (
	"context"
	"sync"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/wire"
)

// The delivery state of this node's recent alerts, for the console's alerts page. The
// action records keep every alert durably; this keeps what only the sender knows: whether
// each webhook took it.

// Delivery states of an alert.
const (
	DeliveryNone      = "no webhook" // no --alert-webhook is configured
	DeliveryQueued    = "queued"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"
	DeliveryDropped   = "dropped" // the queue was full
)

// alertLogSize is how many recent alerts the delivery log keeps.
const alertLogSize = 200

// alertLog is a ring of the newest alertLogSize alerts.
type alertLog struct {
	mu   sync.Mutex
	next uint64
	ring [alertLogSize]wire.AlertDelivery
	ids  [alertLogSize]uint64
}

// add records al in state and returns its id.
func (l *alertLog) add(al wire.Alert, state string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	i := l.next % alertLogSize
	l.ring[i] = wire.AlertDelivery{Alert: al, State: state}
	l.ids[i] = l.next
	return l.next
}

// finish records the outcome of alert id, unless newer alerts pushed it out.
func (l *alertLog) finish(id uint64, state string, attempts int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := id % alertLogSize
	if l.ids[i] != id {
		return
	}
	d := &l.ring[i]
	d.Attempts += attempts
	// With several webhooks the worst outcome stands.
	if d.State != DeliveryFailed {
		d.State = state
	}
	if err != nil {
		d.Error = err.Error()
	}
}

// recent returns the alerts newest first.
func (l *alertLog) recent() []wire.AlertDelivery {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]wire.AlertDelivery, 0, min(l.next, alertLogSize))
	for id := l.next; id > 0 && l.next-id < alertLogSize; id-- {
		out = append(out, l.ring[id%alertLogSize])
	}
	return out
}

// Alerts is the alerts service, for what the console shows of them.
func (e *API) Alerts() *Alerts { return e.alerts }

// Recent returns this node's newest alerts (at most 200, since it started) with their
// webhook delivery state, newest first.
func (a *Alerts) Recent() []wire.AlertDelivery { return a.deliveries.recent() }

// AlertFilter narrows Alerts.Records.
type AlertFilter struct {
	// Kinds are the action kinds to list (executor_lost, refused_result, …); none: every kind.
	Kinds []string
	// Task lists that task's records; "" lists the records that belong to no task (alerts
	// about executors, refused results of unknown tickets, rate-limit changes).
	Task string
	// Limit is the most records returned; 0 means 100.
	Limit int
	// Counts asks for the number of records of each kind, every kind, among the newest
	// persist.ActionScanMax of the task (or of no task), whatever Kinds says: a flood of one
	// kind shows as its count and cannot hide the others.
	Counts bool
}

// Records returns the stored action records f selects, newest first, and with f.Counts
// their counts by kind.
func (a *Alerts) Records(ctx context.Context, f AlertFilter) ([]model.Action, map[string]int64, error) {
	b, err := a.browser()
	if err != nil {
		return nil, nil, err
	}
	var id int64
	if f.Task != "" {
		if id, err = a.lookup(ctx, f.Task); err != nil {
			return nil, nil, err
		}
	}
	acts, err := b.ListActionsPage(ctx, persist.ActionFilter{TaskID: id, Actions: f.Kinds, Limit: f.Limit})
	if err != nil {
		return nil, nil, err
	}
	if !f.Counts {
		return acts, nil, nil
	}
	counts, err := b.CountActionKinds(ctx, id, 0)
	if err != nil {
		return nil, nil, err
	}
	return acts, counts, nil
}
