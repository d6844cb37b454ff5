package dispatch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/axe-sched/axe/protocol"
	"github.com/valyala/fasthttp"
)

// The SDK executor endpoints that take runs (docs/protocol.md).
const (
	// RunPath takes one run.
	RunPath = protocol.PathRun
	// RunsPath takes several runs in one call and answers each as RunPath would.
	RunsPath = protocol.PathRuns
)

// Offer batching. At most offerSenders calls to one executor are in flight; a run offered
// while all of them are busy waits, and the next free sender takes every waiting run (up to
// offerBatchMax, offerBatchBytes) in one call to RunsPath. Under a light load every offer
// finds a free sender and goes alone to RunPath, as before; in a burst the batches grow
// exactly while the executor is the bottleneck, so one HTTP exchange carries many runs.
const (
	offerSenders    = 8
	offerBatchMax   = 256
	offerBatchBytes = 512 << 10
)

// offerQueue is an executor's runs waiting for a sender.
type offerQueue struct {
	mu      sync.Mutex
	waiting []*offer
	senders int  // senders running for this executor
	single  bool // the executor answered RunsPath with 404/405/501: offer runs one by one
}

// offer is one run waiting for its answer: on done (Offer) or given to then (OfferFunc).
type offer struct {
	req  *Request
	done chan Outcome
	then func(Outcome)
}

// answer hands o its outcome.
func (d *Dispatcher) answer(o *offer, out Outcome) {
	if o.then == nil {
		o.done <- out
		return
	}
	defer d.offersOut.Add(-1)
	o.then(out)
}

// Offer sends req (a run's JSON) to the SDK executor x and returns the executor's answer
// for it: the status and body RunPath answers, or the transport error. It blocks until then,
// and coalesces with runs offered to x concurrently (see offerSenders). req.URL is ignored:
// the URLs come from x (its scheme and address).
func (d *Dispatcher) Offer(x *Executor, req *Request) Outcome {
	o := &offer{req: req, done: make(chan Outcome, 1)}
	d.queueOffer(x, o)
	return <-o.done
}

// OfferFunc is Offer without the wait: it queues req for x and returns at once, and then
// gets the answer on the goroutine that got it (one of x's senders, which answers the
// other runs of its batch after it). then must not block: a run refused goes on on a
// worker (Go). No goroutine waits for the offer meanwhile, where Offer holds its caller
// (a dispatch worker in a burst) until the batch that carries the run is answered. Stop
// waits for every offer made to be answered.
func (d *Dispatcher) OfferFunc(x *Executor, req *Request, then func(Outcome)) {
	d.offersOut.Add(1)
	d.queueOffer(x, &offer{req: req, then: then})
}

// queueOffer queues o for x, starting a sender unless offerSenders run.
func (d *Dispatcher) queueOffer(x *Executor, o *offer) {
	q := &x.offers
	q.mu.Lock()
	q.waiting = append(q.waiting, o)
	start := q.senders < offerSenders
	if start {
		q.senders++
	}
	q.mu.Unlock()
	if start {
		go d.sendOffers(x)
	}
}

// sendOffers is one sender for x: it answers waiting offers until none is left.
func (d *Dispatcher) sendOffers(x *Executor) {
	q := &x.offers
	var batch []*offer
	for {
		q.mu.Lock()
		if len(q.waiting) == 0 {
			q.senders--
			q.mu.Unlock()
			return
		}
		n, size := 0, 0
		for n < len(q.waiting) && n < offerBatchMax {
			size += len(q.waiting[n].req.Body) + 1
			if n > 0 && size > offerBatchBytes {
				break
			}
			n++
		}
		if q.single {
			n = 1
		}
		batch = append(batch[:0], q.waiting[:n]...)
		clear(q.waiting[:n])
		q.waiting = q.waiting[n:]
		if len(q.waiting) == 0 {
			q.waiting = nil
		}
		q.mu.Unlock()
		if len(batch) == 1 {
			d.offerOne(x, batch[0])
		} else {
			d.offerBatch(x, batch)
		}
		clear(batch)
	}
}

func (d *Dispatcher) offerOne(x *Executor, o *offer) {
	req := *o.req
	req.URL = x.URL(RunPath)
	req.Key, req.Address, req.Incarnation = x.DispatchKey(), x.Address, x.Incarnation()
	d.answer(o, d.Post(&req))
}

// offerBatch sends batch to RunsPath and hands each offer its own answer. An executor
// without RunsPath gets these runs, and every later one, one by one.
func (d *Dispatcher) offerBatch(x *Executor, batch []*offer) {
	now := time.Now()
	var live []*offer
	deadline := time.Time{}
	for _, o := range batch {
		if !o.req.Deadline.After(now) {
			d.answer(o, Outcome{Err: ErrTimeout, Started: now})
			continue
		}
		if o.req.Gate != nil {
			// The runs of one batch may be of different shards, each with its gate: one
			// closed keeps only its own run back.
			if err := d.gate(o.req.Gate); err != nil {
				d.answer(o, Outcome{Err: err, Started: now})
				continue
			}
		}
		live = append(live, o)
		if o.req.Deadline.After(deadline) {
			deadline = o.req.Deadline
		}
	}
	switch len(live) {
	case 0:
		return
	case 1:
		d.offerOne(x, live[0])
		return
	}
	size := len(`{"runs":[]}`) + len(live) - 1
	for _, o := range live {
		size += len(o.req.Body)
	}
	var body bytes.Buffer
	body.Grow(size)
	body.WriteString(`{"runs":[`)
	for i, o := range live {
		if i > 0 {
			body.WriteByte(',')
		}
		body.Write(o.req.Body)
	}
	body.WriteString(`]}`)

	r := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(r)
	defer fasthttp.ReleaseResponse(resp)
	r.SetRequestURI(x.URL(RunsPath))
	r.Header.SetMethod(fasthttp.MethodPost)
	r.Header.SetContentType("application/json")
	// One epoch header for the batch when its runs share one (each run's body carries its
	// own, and its shard's, which the executor judges run by run); none when they differ.
	epoch := live[0].req.Epoch
	for _, o := range live[1:] {
		if o.req.Epoch != epoch {
			epoch = -1
			break
		}
	}
	if epoch >= 0 {
		d.setEpoch(r, epoch)
	}
	d.authorize(r, x.DispatchKey(), x.Address, x.Incarnation(), live[0].req.Token, body.Bytes())
	r.SetBodyRaw(body.Bytes())
	start := time.Now()
	// The runs' own gates were asked above; the batch asks Config.Gate once more as it leaves.
	err := d.do(d.client, r, resp, deadline, true, nil)
	whole := Outcome{Started: start, Duration: time.Since(start)}
	switch {
	case errors.Is(err, ErrGated):
		whole.Err = err
	case errors.Is(err, fasthttp.ErrTimeout):
		whole.Err = ErrTimeout
	case err != nil:
		whole.Err = d.explainClosed(x.URL(RunsPath), err, deadline)
	default:
		whole.Status = resp.StatusCode()
		whole.Body = d.tail(resp.Body())
	}
	if whole.Err == nil {
		switch whole.Status {
		case fasthttp.StatusNotFound, fasthttp.StatusMethodNotAllowed, fasthttp.StatusNotImplemented:
			x.offers.mu.Lock()
			x.offers.single = true
			x.offers.mu.Unlock()
			d.cfg.Logger.Info("executor takes no run batches; offering its runs one by one",
				"address", x.Address, "status", whole.Status)
			for _, o := range live {
				d.offerOne(x, o)
			}
			return
		case fasthttp.StatusOK:
			var ans protocol.RunBatchAnswer
			if jerr := json.Unmarshal(resp.Body(), &ans); jerr != nil || len(ans.Results) != len(live) {
				whole.Status = 0
				whole.Err = fmt.Errorf("unreadable answer to %d runs (%d items): %v", len(live), len(ans.Results), jerr)
				break
			}
			d.m.offerBatches.Inc()
			d.m.offerBatchedRuns.Add(len(live))
			for i, o := range live {
				out := whole
				out.Status = ans.Results[i].Code
				out.Body = d.tail(ans.Results[i].Body)
				d.answer(o, out)
			}
			return
		}
	}
	// The call failed as a whole: every run gets what a lone call would have got.
	for _, o := range live {
		d.answer(o, whole)
	}
}

// tail copies the last MaxBodyTail bytes of body.
func (d *Dispatcher) tail(body []byte) []byte {
	if n := d.cfg.MaxBodyTail; len(body) > n {
		body = body[len(body)-n:]
	}
	return append([]byte(nil), body...)
}
