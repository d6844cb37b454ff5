package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/axe-sched/axe/dispatch"
	"github.com/axe-sched/axe/lib/startstop"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/wire"
)

// Alert kinds.
const (
	AlertBreakerOpen  = "breaker_open"
	AlertBreakerClose = "breaker_close"
	AlertFinalFailure = "final_failure"
	AlertExecutorLost = "executor_lost"
	AlertExecutorBack = "executor_back"
)

// Alert delivery defaults.
const (
	alertQueueSize    = 4096
	alertAttempts     = 6
	alertFirstBackoff = 500 * time.Millisecond
	alertTimeout      = 5 * time.Second
)

// queuedAlert is an alert on its way to the webhooks, with its id in the delivery log.
type queuedAlert struct {
	wire.Alert
	id uint64
}

// alertsCore is what the alerts ask of the core.
type alertsCore interface {
	// submit records an alert's action.
	submit(ctx context.Context, g *persist.Group, mode submitMode) error
}

// Alerts is the alerts service: it raises operator alerts (log, metric, action record) and
// posts them to the configured webhooks on its own goroutine, and answers what the console
// shows of them (api_alerts.go). It never blocks the scheduler: a full queue drops the alert
// (it is still in the log, the metrics and the action records), and a failing webhook is
// retried with backoff a bounded number of times.
type Alerts struct {
	base
	core   alertsCore
	life   startstop.Lifecycle
	urls   []string
	client *http.Client
	ch     chan queuedAlert
	wg     sync.WaitGroup
	quit   chan struct{}
	once   sync.Once
	drops  func()
	fails  func()

	deliveries alertLog // the recent alerts' delivery state (api_alerts.go)
}

// newAlerts makes the alerts service. Webhooks pass the same outbound guard as HTTP
// callbacks (when guard is set), and a redirect is the answer, never followed.
func newAlerts(b base, core alertsCore, urls []string, guard *dispatch.Guard, drops, fails func()) *Alerts {
	client := &http.Client{Timeout: alertTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if guard != nil {
		client.Transport = &http.Transport{DialContext: guard.DialContext, ForceAttemptHTTP2: true,
			MaxIdleConns: 8, IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: 10 * time.Second}
	}
	return &Alerts{base: b, core: core, urls: urls, client: client,
		ch: make(chan queuedAlert, alertQueueSize), quit: make(chan struct{}), drops: drops, fails: fails}
}

// start starts the webhooks' sender, if there are webhooks.
func (a *Alerts) start() error {
	return a.life.StartOnce(func() error {
		if len(a.urls) > 0 {
			a.wg.Add(1)
			go a.loop()
		}
		return nil
	})
}

// stop delivers what is queued until ctx expires, then gives up.
func (a *Alerts) stop(ctx context.Context) error {
	return a.life.StopOnce(ctx, func(bool) error {
		a.once.Do(func() { close(a.quit) })
		done := make(chan struct{})
		go func() { a.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
		}
		return nil
	})
}

func (a *Alerts) send(al wire.Alert) {
	q := queuedAlert{Alert: al}
	if len(a.urls) == 0 {
		a.deliveries.add(al, DeliveryNone)
		return
	}
	q.id = a.deliveries.add(al, DeliveryQueued)
	select {
	case a.ch <- q:
	default:
		a.deliveries.finish(q.id, DeliveryDropped, 0, nil)
		a.drops()
		a.log.Error("alert queue full; webhook delivery dropped", "kind", al.Kind, "message", al.Message)
	}
}

func (a *Alerts) loop() {
	defer a.wg.Done()
	for {
		select {
		case al := <-a.ch:
			a.deliver(al)
		case <-a.quit:
			for {
				select {
				case al := <-a.ch:
					a.deliver(al)
				default:
					return
				}
			}
		}
	}
}

func (a *Alerts) deliver(al queuedAlert) {
	body, _ := json.Marshal(al.Alert)
	for _, url := range a.urls {
		backoff := alertFirstBackoff
		for attempt := 1; ; attempt++ {
			err := a.post(url, body)
			if err == nil {
				a.deliveries.finish(al.id, DeliveryDelivered, attempt, nil)
				break
			}
			if attempt == alertAttempts {
				a.deliveries.finish(al.id, DeliveryFailed, attempt, err)
				a.fails()
				a.log.Error("alert webhook failed; giving up", "url", url, "kind", al.Kind, "attempts", attempt, "error", err)
				break
			}
			select {
			case <-a.clk.After(backoff):
			case <-a.quit:
				// Stopping: one last try without waiting.
				if err := a.post(url, body); err != nil {
					a.deliveries.finish(al.id, DeliveryFailed, attempt+1, err)
					a.fails()
				} else {
					a.deliveries.finish(al.id, DeliveryDelivered, attempt+1, nil)
				}
				attempt = alertAttempts
			}
			if attempt == alertAttempts {
				break
			}
			backoff *= 2
		}
	}
}

func (a *Alerts) post(url string, body []byte) error {
	resp, err := a.client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}

// raiseFor raises an operator alert: log, metric, action record and webhooks. taskID, task
// and group name the task the alert is about; zero values mean it concerns no task (raise).
// The caller passes copies of them, so it need not hold t.mu, and may call this without it.
func (a *Alerts) raiseFor(ctx context.Context, kind string, taskID int64, task, group, msg string) {
	a.log.Warn("alert: "+msg, "alert", kind, "task", task)
	a.m.alerts(kind).Inc()
	now := a.nowMS()
	act := model.Action{TaskID: taskID, TaskName: task, Action: kind, Actor: ActorScheduler, At: now, Detail: msg}
	if err := a.core.submit(ctx, &persist.Group{Actions: []model.Action{act}}, submitWait); err != nil {
		a.log.Error("cannot record alert", "error", err)
	}
	a.send(wire.Alert{Kind: kind, Message: msg, Task: task, Group: group, Node: a.cfg.NodeID, At: now})
}

// raise raises an alert about no task.
func (a *Alerts) raise(ctx context.Context, kind, msg string) { a.raiseFor(ctx, kind, 0, "", "", msg) }

// recordHealth feeds a run's end to the task's breaker (brk) and raises the alerts of its
// opening and closing. Caller must not
// hold t.mu.
func (a *Alerts) recordHealth(brk *breakers, id int64, name, group string, feed breakerFeed) {
	if a.cfg.Breaker.Disabled || feed == feedNone {
		return // killed and lost say nothing about the task's health
	}
	changed, open := brk.record(a.cfg.Breaker, id, a.nowMS(), feed == feedOK)
	if !changed {
		return
	}
	if open {
		a.raiseFor(context.Background(), AlertBreakerOpen, id, name, group, fmt.Sprintf(
			"circuit breaker of %s opened: more than %.0f%% of its runs failed over %s; only one fire in %d is dispatched",
			name, a.cfg.Breaker.FailureRate*100, a.cfg.Breaker.Window, a.cfg.Breaker.ProbeEvery))
	} else {
		a.raiseFor(context.Background(), AlertBreakerClose, id, name, group,
			"circuit breaker of "+name+" closed: the failure rate fell back; full trigger rate restored")
	}
}
