package executor

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"

	"github.com/axe-sched/axe/protocol"
)

// Result delivery. Finished runs queue their outcome in the outbox; Config.ResultSenders goroutines
// take what is queued and post it. A sender that finds one result posts it alone to
// /api/v1/callback, so an idle executor reports each result the moment it exists; a sender
// that finds several (a burst finishing while the senders wait on the scheduler) posts up to
// resultBatchMax of them in one call to /api/v1/callback/batch. Batching is what keeps a burst
// from costing one HTTP exchange per result on both sides: the batch grows exactly when the
// scheduler is the bottleneck.
const (
	// resultBatchMax bounds the results in one batch call (the scheduler accepts up to
	// 1,000).
	resultBatchMax = 256
	// resultBatchBytes bounds a batch body, well under the scheduler's limit
	// (protocol.MaxResultBodyBytes). A single result is never split: one larger than this goes
	// alone, and fits that limit however its output is escaped.
	resultBatchBytes = 512 << 10
)

// enqueue hands o to the senders. The caller has counted it in sendWG.
func (e *Executor) enqueue(o *outcome) {
	e.outMu.Lock()
	e.outbox = append(e.outbox, o)
	e.outMu.Unlock()
	e.wakeSender()
}

func (e *Executor) wakeSender() {
	select {
	case e.outReady <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// sendResults is one sender: it delivers what the outbox holds until Stop ends deliveries.
func (e *Executor) sendResults() {
	defer e.sendersWG.Done()
	var batch []*outcome
	for {
		batch = e.takeResults(batch[:0])
		if len(batch) == 0 {
			return
		}
		e.deliver(batch)
		clear(batch)
	}
}

// takeResults waits for queued results and takes as many as one call carries; it returns
// none once deliveries are abandoned.
func (e *Executor) takeResults(batch []*outcome) []*outcome {
	for {
		e.outMu.Lock()
		if len(e.outbox) > 0 {
			n, size := 0, 0
			for n < len(e.outbox) && n < resultBatchMax {
				size += len(e.outbox[n].body) + 1
				if n > 0 && size > resultBatchBytes {
					break
				}
				n++
			}
			batch = append(batch, e.outbox[:n]...)
			clear(e.outbox[:n])
			e.outbox = e.outbox[n:]
			if len(e.outbox) == 0 {
				e.outbox = nil // let a drained backlog's array go
			}
			more := len(e.outbox) > 0
			e.outMu.Unlock()
			if more {
				e.wakeSender() // another sender takes the rest meanwhile
			}
			return batch
		}
		e.outMu.Unlock()
		select {
		case <-e.outReady:
		case <-e.sendCtx.Done():
			return batch
		}
	}
}

// deliver sends batch until the scheduler has acknowledged (200) or finally refused (404
// unknown ticket, 409 stale ticket, 400 malformed) every result in it. Anything else —
// connection errors, 5xx, 401 while an operator fixes a token — is retried with doubling
// backoff, which is how a result survives a scheduler restart or failover.
func (e *Executor) deliver(batch []*outcome) {
	wait := e.cfg.ResendMin
	for attempt := 1; ; attempt++ {
		if e.sendCtx.Err() != nil {
			e.log.Warn("abandoned unsent results", "results", len(batch), "attempt", attempt)
			for _, o := range batch {
				e.endDelivery(o)
				e.sendWG.Done()
			}
			return
		}
		var retry []*outcome
		if len(batch) == 1 {
			retry = e.postOne(batch[0], attempt, wait)
		} else {
			retry = e.postBatch(batch, attempt, wait)
		}
		if len(retry) == 0 {
			return
		}
		batch = retry
		select {
		case <-e.sendCtx.Done():
		case <-e.clock.After(wait):
		}
		wait = min(2*wait, e.cfg.ResendMax)
	}
}

// postOne sends one result to /api/v1/callback; it returns the result when it must be sent
// again.
func (e *Executor) postOne(o *outcome, attempt int, wait time.Duration) []*outcome {
	status, resp, err := e.sched.post(protocol.PathCallback, o.body)
	if err != nil {
		e.log.Warn("cannot deliver result", "attempt", attempt, "retry_in", wait, "err", err)
		return []*outcome{o}
	}
	msg := ""
	if status != http.StatusOK {
		msg = errorText(resp)
	}
	if e.settle(o, status, msg, attempt, wait) {
		return []*outcome{o}
	}
	return nil
}

// postBatch sends several results to /api/v1/callback/batch and settles each by its own
// answer; it returns those to send again.
func (e *Executor) postBatch(batch []*outcome, attempt int, wait time.Duration) []*outcome {
	var body bytes.Buffer
	body.WriteString(`{"results":[`)
	for i, o := range batch {
		if i > 0 {
			body.WriteByte(',')
		}
		body.Write(o.body)
	}
	body.WriteString(`]}`)
	status, resp, err := e.sched.post(protocol.PathCallbackBatch, body.Bytes())
	if err != nil {
		e.log.Warn("cannot deliver results", "results", len(batch), "attempt", attempt, "retry_in", wait, "err", err)
		return batch
	}
	if status != http.StatusOK {
		e.log.Warn("cannot deliver results", "results", len(batch), "attempt", attempt, "retry_in", wait,
			"err", statusError(protocol.PathCallbackBatch, status, resp))
		return batch
	}
	var ack protocol.CallbackBatchAnswer
	if err := json.Unmarshal(resp, &ack); err != nil || len(ack.Results) != len(batch) {
		// Results are idempotent by ticket at the scheduler: sending the whole batch again
		// is safe.
		e.log.Warn("cannot read the scheduler's answer to a batch; re-sending it", "results", len(batch),
			"answers", len(ack.Results), "attempt", attempt, "retry_in", wait, "err", err)
		return batch
	}
	var retry []*outcome
	for i, o := range batch {
		if e.settle(o, ack.Results[i].Status, ack.Results[i].Error, attempt, wait) {
			retry = append(retry, o)
		}
	}
	return retry
}

// settle acts on the scheduler's answer to one result and reports whether it must be sent
// again. A result the scheduler is done with leaves the delivery, unless a repeated dispatch
// asked for one more send meanwhile: then it goes back to the outbox.
func (e *Executor) settle(o *outcome, status int, errText string, attempt int, wait time.Duration) bool {
	switch status {
	case http.StatusOK:
		e.log.Debug("result acknowledged", "attempt", attempt)
	case http.StatusNotFound, http.StatusConflict, http.StatusBadRequest:
		e.log.Warn("scheduler refused the result; not re-sending", "status", status, "err", errText)
	default:
		e.log.Warn("cannot deliver result", "attempt", attempt, "retry_in", wait,
			"status", status, "err", errText)
		return true
	}
	if e.endDelivery(o) {
		e.sendWG.Done()
	} else {
		e.enqueue(o)
	}
	return false
}
