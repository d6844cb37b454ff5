package persist

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/axe-sched/axe/lib/startstop"
	"github.com/axe-sched/axe/model"
)

// Defaults of WriterConfig.
const (
	// WriterMaxBatchRowsDefault bounds a batch so one commit stays a short transaction. A
	// batch only grows this large when groups queue faster than commits finish (an idle
	// writer flushes after MaxDelay), so the bound trades nothing at a steady rate; under a
	// burst, larger batches gain less and less while each commit grows longer (BENCHMARKS.md,
	// "B3 batched writer", rows per batch).
	WriterMaxBatchRowsDefault = 2048
	// WriterMaxDelayDefault is the longest a lone group waits for company when the writer is
	// idle; it is the latency batching may add to a dispatch (docs/design.md, "Write path").
	WriterMaxDelayDefault = 2 * time.Millisecond
	// WriterCreateMaxDelayDefault is the longest a batch holding a create waits for company.
	// Each create has a client waiting on its commit, and the company a batch waits for is
	// mostly those clients' next creates, which cannot come before this commit answers: at 64
	// clients, waiting 2 ms held a commit back more than it grew it (BENCHMARKS.md, B6).
	WriterCreateMaxDelayDefault = 500 * time.Microsecond
	// WriterQueueSizeDefault is how many groups may be queued before Submit blocks.
	WriterQueueSizeDefault = 16384
	// WriterRetryMinDefault is the first backoff after a failed commit.
	WriterRetryMinDefault = 10 * time.Millisecond
	// WriterRetryMaxDefault caps the backoff between retries of a failed commit.
	WriterRetryMaxDefault = 2 * time.Second
)

// writerMetrics are the writer's series, in WriterConfig.Metrics. They are got or
// created, so the writers of one set (an engine's lanes) add to the same series.
type writerMetrics struct {
	batchRows      *metrics.PrometheusHistogram
	commitDuration *metrics.PrometheusHistogram
	commits        *metrics.Counter
	commitErrors   *metrics.Counter
	leaseLost      *metrics.Counter
	conflicts      *metrics.Counter
	queueDepth     *metrics.Gauge
	failedByFences *metrics.Counter
	refused        *metrics.Counter
	refusals       *metrics.Counter
	rejected       *metrics.Counter
	// foundLanded counts commits whose outcome was unknown and which the writer then found
	// in the store (apply, probe).
	foundLanded *metrics.Counter
}

func newWriterMetrics(s *metrics.Set) *writerMetrics {
	return &writerMetrics{
		batchRows: s.GetOrCreatePrometheusHistogramExt("axe_writer_batch_rows",
			metrics.ExponentialBuckets(1, 2, 13)), // 1 .. 4096 rows
		commitDuration: s.GetOrCreatePrometheusHistogramExt("axe_writer_commit_duration_seconds",
			metrics.ExponentialBuckets(0.0005, 2, 14)), // 0.5ms .. ~4s
		commits:        s.GetOrCreateCounter("axe_writer_commits_total"),
		commitErrors:   s.GetOrCreateCounter(`axe_writer_commit_errors_total{reason="transient"}`),
		leaseLost:      s.GetOrCreateCounter(`axe_writer_commit_errors_total{reason="lease_lost"}`),
		conflicts:      s.GetOrCreateCounter("axe_writer_conflicts_total"),
		queueDepth:     s.GetOrCreateGauge("axe_writer_queue_depth", nil),
		failedByFences: s.GetOrCreateCounter("axe_writer_fenced_groups_total"),
		refused:        s.GetOrCreateCounter("axe_writer_refused_groups_total"),
		refusals:       s.GetOrCreateCounter(`axe_writer_commit_errors_total{reason="rejected"}`),
		rejected:       s.GetOrCreateCounter("axe_writer_rejected_groups_total"),
		foundLanded:    s.GetOrCreateCounter("axe_writer_unknown_commits_landed_total"),
	}
}

// WriterConfig configures a Writer. The zero value is usable: every zero field takes its
// default.
type WriterConfig struct {
	// MaxBatchRows flushes a batch once it holds this many rows (transitions + runs +
	// actions). A group larger than this is committed alone; groups are never split.
	// Defaults to WriterMaxBatchRowsDefault (2048).
	MaxBatchRows int
	// MaxDelay flushes a batch once its oldest group has waited this long since Submit.
	// Defaults to WriterMaxDelayDefault (2ms).
	MaxDelay time.Duration
	// CreateMaxDelay flushes a batch once a group in it that creates tasks has waited this
	// long, when that comes before MaxDelay. Defaults to WriterCreateMaxDelayDefault (500µs).
	CreateMaxDelay time.Duration
	// QueueSize is how many groups may wait before Submit blocks (backpressure).
	// Defaults to WriterQueueSizeDefault (16384).
	QueueSize int
	// RetryMin is the backoff after the first failed commit; it doubles per failure.
	// Defaults to WriterRetryMinDefault (10ms).
	RetryMin time.Duration
	// RetryMax caps the backoff. Defaults to WriterRetryMaxDefault (2s).
	RetryMax time.Duration
	// LeaseName names the lease row that fences batches (docs/ha.md, "Fencing"). Required when
	// Epoch is set. Defaults to "" (unfenced).
	LeaseName string
	// Epoch returns the lease epoch this process holds; it is read once per batch, and the
	// batch (with its retries) is fenced by that value. nil, or a return of 0, leaves the
	// batch unfenced. Defaults to nil.
	Epoch func() int64
	// Logger receives commit failures and the shutdown summary. Defaults to slog.Default().
	Logger *slog.Logger
	// Metrics is the set the writer's series are registered in (axe_writer_*); the engine
	// passes its own, which its lanes share. Defaults to a new set of this writer's own,
	// which nothing exposes.
	Metrics *metrics.Set
	// ShardLost, when set, hears of each shard fence (Group.Fence) a batch found stale:
	// another node holds the shard now. It is called on the writer goroutine and must not
	// block. Defaults to nil.
	ShardLost func(f ShardFence, err error)
}

// WithDefaults returns a copy of c with every zero field set to its default.
func (c WriterConfig) WithDefaults() WriterConfig {
	if c.MaxBatchRows == 0 {
		c.MaxBatchRows = WriterMaxBatchRowsDefault
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = WriterMaxDelayDefault
	}
	if c.CreateMaxDelay == 0 {
		c.CreateMaxDelay = WriterCreateMaxDelayDefault
	}
	if c.QueueSize == 0 {
		c.QueueSize = WriterQueueSizeDefault
	}
	if c.RetryMin == 0 {
		c.RetryMin = WriterRetryMinDefault
	}
	if c.RetryMax == 0 {
		c.RetryMax = WriterRetryMaxDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = metrics.NewSet()
	}
	return c
}

func (c WriterConfig) validate() error {
	switch {
	case c.MaxBatchRows < 1:
		return fmt.Errorf("MaxBatchRows must be positive, got %d", c.MaxBatchRows)
	case c.MaxDelay <= 0:
		return fmt.Errorf("MaxDelay must be positive, got %s", c.MaxDelay)
	case c.CreateMaxDelay <= 0:
		return fmt.Errorf("CreateMaxDelay must be positive, got %s", c.CreateMaxDelay)
	case c.QueueSize < 1:
		return fmt.Errorf("QueueSize must be positive, got %d", c.QueueSize)
	case c.RetryMin <= 0:
		return fmt.Errorf("RetryMin must be positive, got %s", c.RetryMin)
	case c.RetryMax < c.RetryMin:
		return fmt.Errorf("RetryMax (%s) must not be below RetryMin (%s)", c.RetryMax, c.RetryMin)
	case c.Epoch != nil && c.LeaseName == "":
		return errors.New("LeaseName is required when Epoch is set")
	}
	return nil
}

// Group is the unit the engine hands to the Writer: everything one decision writes (for a
// dispatch, its SCHEDULED→RUNNING transition, the run row and the action record). A group is
// atomic: it lands whole or not at all, and never straddles two batches.
type Group struct {
	Transitions []Transition
	Runs        []model.Run
	Actions     []model.Action
	// Done is called exactly once, from the writer goroutine, when the group is durable
	// (nil; each of Transitions then has Runtime.Version = ExpectVersion+1) or definitively
	// failed: a *ConflictError (indexes into this group's
	// Transitions), a *FireRefusedError (indexes into this group's Fires), a *RejectedError
	// (the database refused its values), an error wrapping ErrLeaseLost, or the error of
	// Stop's context. It must not block: it runs on the only
	// goroutine that commits. May be nil.
	Done func(err error)
	// Fires are fire records (Batch.Fires): inserted, refused when the run exists.
	Fires []model.Run

	// Task writes (see Batch). A create whose name is taken under CreateFail fails its group
	// with a *ConflictError whose Creates indexes into this group's Creates; it unwraps to
	// ErrTaskExists.
	Creates    []*TaskCreate
	DefUpdates []model.TaskDef
	Deletes    []int64

	// Workflow runs and step runs (Batch.WorkflowRuns, Batch.StepRuns), upserted.
	WorkflowRuns []model.WorkflowRun
	StepRuns     []model.StepRun

	// Fence, when its Epoch is > 0, fences the group by one shard (scale-out): the batch it
	// lands in names the shard at that epoch (Batch.Shards), and when the shard's fence no
	// longer carries it the group fails with an error wrapping ErrLeaseLost while the
	// batch's other groups are applied without it. Defaults to the zero fence: none.
	Fence ShardFence
}

// checkGroup refuses what the writer cannot queue: a nil group, or one fenced by a number
// that is no shard (the writer indexes its fences by shard).
func checkGroup(g *Group, verb string) error {
	if g == nil {
		return fmt.Errorf("cannot %s a nil group", verb)
	}
	if f := g.Fence; f.Epoch > 0 && (f.Shard < 0 || f.Shard >= model.ShardCount) {
		return fmt.Errorf("cannot %s group: its fence names shard %d, not a shard 0-%d", verb, f.Shard, model.ShardCount-1)
	}
	return nil
}

func (g *Group) rows() int {
	n := len(g.Transitions) + len(g.Runs) + len(g.Actions) + len(g.Fires) + len(g.DefUpdates) + len(g.Deletes) + len(g.WorkflowRuns) + len(g.StepRuns)
	for _, c := range g.Creates {
		n += c.rows()
	}
	return n
}

// Writer group-commits state transitions, runs and actions (docs/design.md, "Write path"): one
// goroutine gathers the queued groups into batches and applies each with Store.ApplyBatch, so one
// commit (one fsync) carries many tasks.
//
// Invariants the engine relies on:
//
//   - Order. Groups are applied in submission order (the order Submit calls returned, for
//     calls that are not concurrent), and their Done callbacks fire in that same order,
//     whatever their outcome. Two groups that transition the same task one after the other
//     may share a batch: the store applies a batch's transitions in order.
//   - Atomicity. A group is never split across batches; it lands whole or fails whole.
//   - Latency. A batch is flushed when it reaches MaxBatchRows, or when its first group has
//     waited MaxDelay since Submit, or a group of creates in it CreateMaxDelay, whichever
//     comes first. Under load batches fill up; an idle writer adds at most MaxDelay to a lone
//     group (CreateMaxDelay to a create); a batch that is full goes at once.
//   - Conflicts. When ApplyBatch reports a *ConflictError, only the groups owning the failed
//     transitions fail (Done gets a *ConflictError with indexes into the group); the rest of
//     the batch is applied again without them, until it lands. A non-conflicting group is
//     never dropped because of another group's stale version.
//   - Refused fires (docs/ha.md, "The fire record"). A *FireRefusedError fails only the groups
//     owning the refused fire records, as a conflict does; the rest of the batch is applied again
//     without them.
//   - Fencing (docs/ha.md, "Fencing"). The lease epoch is read once per batch, and the batch and
//     its retries carry it. ErrLeaseLost fails every group of the batch with an error wrapping
//     ErrLeaseLost, and every later batch fails the same way without touching the database while
//     Epoch still returns that stale value. The engine must stop dispatching on it. The epoch is
//     that of the batch, not of the decision: groups decided under an epoch must not still be
//     queued when Epoch starts returning a newer one (a deposed primary stops its writer before it
//     campaigns again).
//   - Fencing per shard (scale-out). A group fenced by a shard (Group.Fence) fails alone
//     when the shard's fence has moved past its epoch: the batch names every shard of its
//     groups (Batch.Shards), a *ShardsLostError names the stale ones, their groups fail with
//     it and the rest of the batch is applied again without them, as for a conflict. A
//     group whose epoch is below another of the same shard in the batch, or at or below an
//     epoch found stale before, fails without going to the database: epochs of a shard only
//     grow.
//   - Refusals. When the database refuses a batch for the values it holds (invalid UTF-8, a
//     string over its column, a number out of range: isRefusal, by the MySQL error number or
//     the SQLite result code), retrying it cannot help. The writer commits ever smaller
//     prefixes of the batch until the refused group is alone, fails that group with a
//     *RejectedError (ErrRejected), and goes on with the rest; every group that can land
//     lands, in submission order. A refusal is an answer, not a stall. The engine keeps what
//     the store could refuse out of the writer in the first place (CheckTaskDef); this is
//     what keeps one that slipped through from stalling every later write.
//   - Transient errors (database down, deadlock, reset connection, anything not a refusal)
//     are logged and the same batch is retried with exponential backoff RetryMin..RetryMax,
//     without end, until Stop's context ends. Nothing is dropped or reordered meanwhile;
//     Submit blocks once the queue is full.
//
// A commit whose outcome is unknown (the connection broke after COMMIT was sent, a Galera
// node killed while its write set was replicated) may have landed. When its batch holds a
// fire record, the writer asks the store before it retries: a fire record's row is unique to
// its (task, fire time, attempt) and written only under its fence, so a stored row with the
// batch's ticket and dispatch instant is that commit's own, and the whole batch landed with
// it (all or nothing): its groups succeed, as after any commit that landed, and the engine
// sends the runs it recorded. Without that, the retry would meet its own fire records,
// every group would fail with a *FireRefusedError, and runs recorded but never sent would
// end lost. A batch without a fire record is retried as is; if it had landed, the retry's
// transitions conflict and their groups fail with a *ConflictError (safe: nothing is sent
// twice, but the engine sees a lost write).
type Writer struct {
	store Store
	cfg   WriterConfig
	m     *writerMetrics

	queue    chan queuedGroup
	stopping chan struct{} // closed when Stop begins: blocked Submits give up
	abort    chan struct{} // closed when Stop's context ends before the queue is flushed
	exited   chan struct{} // closed when the writer goroutine returns
	abortErr error         // Stop's ctx.Err(); written before abort is closed

	// sendMu is held shared by Submit while it sends and exclusively by Stop while it closes
	// the queue, so no Submit ever sends on a closed channel.
	sendMu sync.RWMutex
	closed bool // under sendMu

	life      startstop.Lifecycle
	runCtx    context.Context
	cancelRun context.CancelFunc

	pending atomic.Int64
	// committing is set while the writer goroutine applies a batch and calls its Dones, so
	// Lanes can send creates to a lane that is gathering instead (Lanes.createLane).
	committing atomic.Bool

	// Owned by the writer goroutine.
	carry       *queuedGroup // a group that did not fit the previous batch
	timer       *time.Timer
	items       []queuedGroup
	errs        []error
	live        []int // indexes into items still to be applied
	offsets     []int // per live entry: index of its first transition in batch
	owner       []int // per batch transition: index into live
	fireOffsets []int // per live entry: index of its first fire record in batch
	fireOwner   []int // per batch fire record: index into live
	cOffsets    []int // per live entry: index of its first create in batch
	cOwner      []int // per batch create: index into live
	batch       Batch
	fencedEpoch int64 // an epoch ApplyBatch refused; batches carrying it fail at once
	// fencedShards is, per shard, the highest epoch a batch found stale (0: none): groups
	// fenced by that shard at that epoch or below fail at once.
	fencedShards [model.ShardCount]int64
	newest       [model.ShardCount]int64 // scratch of dropStaleShards: each shard's highest epoch among the live groups

	stall atomic.Pointer[Stall] // the current run of failed commits; nil while commits land (stall.go)
}

type queuedGroup struct {
	g  *Group
	at time.Time // Submit time: MaxDelay counts from here
}

// NewWriter returns a Writer applying batches to s. It starts nothing; see Start.
func NewWriter(s Store, cfg WriterConfig) (*Writer, error) {
	if s == nil {
		return nil, errors.New("cannot create writer: nil store")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("cannot create writer: %w", err)
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	return &Writer{
		store:    s,
		cfg:      cfg,
		m:        newWriterMetrics(cfg.Metrics),
		queue:    make(chan queuedGroup, cfg.QueueSize),
		stopping: make(chan struct{}),
		abort:    make(chan struct{}),
		exited:   make(chan struct{}),
		timer:    timer,
	}, nil
}

// Start launches the writer goroutine and returns once it runs. ctx only bounds Start: its
// cancellation does not stop the writer (Stop does), so a cancelled request context cannot
// strand queued transitions. Starting a running writer is a no-op; starting a stopped one
// gives ErrWriterClosed.
func (w *Writer) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cannot start writer: %w", err)
	}
	err := w.life.StartOnce(func() error {
		w.runCtx, w.cancelRun = context.WithCancel(context.WithoutCancel(ctx))
		go w.run()
		return nil
	})
	switch {
	case errors.Is(err, startstop.ErrStarted):
		return nil
	case errors.Is(err, startstop.ErrStopped):
		return ErrWriterClosed
	}
	return err
}

// Stop shuts the writer down, in this order:
//
//  1. Submit stops accepting groups: later calls get ErrWriterClosed, and a call blocked on
//     a full queue either gets its group in (it will be flushed) or gets ErrWriterClosed.
//  2. Every queued group is committed; failed commits are retried as usual.
//  3. If ctx ends first, the ApplyBatch in flight is cancelled and every group still
//     unwritten gets Done with an error wrapping ctx's error.
//  4. Stop returns once the writer goroutine has exited: every Done has been called.
//
// It returns an error wrapping ctx's error when the flush was cut short.
//
// Stop is idempotent, and safe on a writer never started: the groups submitted before are
// flushed all the same.
func (w *Writer) Stop(ctx context.Context) error {
	return w.life.StopOnce(ctx, func(started bool) error { return w.stop(ctx, !started) })
}

func (w *Writer) stop(ctx context.Context, neverStarted bool) error {
	start := time.Now()
	close(w.stopping)
	w.sendMu.Lock() // waits for every Submit in progress to give up or enqueue
	w.closed = true
	close(w.queue)
	w.sendMu.Unlock()
	queued := w.Pending()
	if neverStarted {
		// Flush what was submitted before Start on a goroutine of our own, so the Done
		// callbacks still come from one writer goroutine.
		w.runCtx, w.cancelRun = context.WithCancel(context.WithoutCancel(ctx))
		go w.run()
	}

	var err error
	select {
	case <-w.exited:
	case <-ctx.Done():
		err = ctx.Err()
		w.abortErr = err
		close(w.abort)
		w.cancelRun()
		<-w.exited
	}
	w.cancelRun()
	if err != nil {
		w.cfg.Logger.Error("writer stopped before its queue was flushed",
			"queued_groups", queued, "took", time.Since(start), "error", err)
		return fmt.Errorf("cannot flush writer before deadline: %w", err)
	}
	w.cfg.Logger.Info("writer stopped", "flushed_groups", queued, "took", time.Since(start))
	return nil
}

// Submit queues g for the next batch. It blocks while the queue is full (backpressure) and
// gives up with ctx's error when ctx ends first; after Stop it returns ErrWriterClosed. On a
// nil return Done will be called exactly once; on an error it will not. g must not be
// changed after Submit.
func (w *Writer) Submit(ctx context.Context, g *Group) error {
	if err := checkGroup(g, "submit"); err != nil {
		return err
	}
	w.sendMu.RLock()
	defer w.sendMu.RUnlock()
	if w.closed {
		return ErrWriterClosed
	}
	// Count before sending so Pending never dips below zero when the writer finishes the
	// group before this goroutine runs again.
	w.pending.Add(1)
	w.m.queueDepth.Inc()
	q := queuedGroup{g: g, at: time.Now()}
	select {
	case w.queue <- q:
		return nil
	default:
	}
	select {
	case w.queue <- q:
		return nil
	case <-ctx.Done():
		w.unpend(1)
		return fmt.Errorf("cannot submit group: %w", ctx.Err())
	case <-w.stopping:
		w.unpend(1)
		return ErrWriterClosed
	}
}

// Offer queues g like Submit, but only while the queue is less than half full, and never
// blocks: otherwise it returns ErrWriterBusy at once. It is how API creates enter the writer:
// a client that creates faster than the database commits is told to come back later (HTTP
// 429) instead of queueing without bound, and the half of the queue left keeps room for the
// firing path, which uses Submit.
func (w *Writer) Offer(g *Group) error {
	if err := checkGroup(g, "offer"); err != nil {
		return err
	}
	if w.Pending() >= max(1, w.cfg.QueueSize/2) { // half the queue stays free for firing
		w.m.refused.Inc()
		return ErrWriterBusy
	}
	w.sendMu.RLock()
	defer w.sendMu.RUnlock()
	if w.closed {
		return ErrWriterClosed
	}
	w.pending.Add(1)
	w.m.queueDepth.Inc()
	select {
	case w.queue <- queuedGroup{g: g, at: time.Now()}:
		return nil
	default:
		w.unpend(1)
		w.m.refused.Inc()
		return ErrWriterBusy
	}
}

// Busy reports how full the queue is, from 0 (empty) to 1 (full): the pruner backs off as it
// rises.
func (w *Writer) Busy() float64 { return float64(w.Pending()) / float64(w.cfg.QueueSize) }

// Write submits g and waits until it is durable: the call a dispatch makes before it sends
// (docs/design.md, "Write path"). It returns what g's Done would get, or ctx's error if ctx ends
// first (the group may still land later, so the caller must not act as if it had). g.Done, if set,
// is still called.
func (w *Writer) Write(ctx context.Context, g *Group) error {
	if g == nil {
		return errors.New("cannot write a nil group")
	}
	result := make(chan error, 1)
	own := *g
	callerDone := g.Done
	own.Done = func(err error) {
		if callerDone != nil {
			callerDone(err)
		}
		result <- err
	}
	if err := w.Submit(ctx, &own); err != nil {
		return err
	}
	select {
	case err := <-result:
		return err
	case <-ctx.Done():
		return fmt.Errorf("cannot wait for group to be durable: %w", ctx.Err())
	}
}

// Pending returns how many submitted groups have not had their Done called yet (queued or
// in the batch being committed).
func (w *Writer) Pending() int { return int(w.pending.Load()) }

func (w *Writer) unpend(n int) {
	w.pending.Add(-int64(n))
	w.m.queueDepth.Add(-float64(n))
}

// run is the writer goroutine: gather a batch, commit it, until the queue is closed and
// drained.
func (w *Writer) run() {
	defer close(w.exited)
	for {
		items, more := w.collect()
		if len(items) > 0 {
			w.committing.Store(true)
			w.commit(items)
			w.committing.Store(false)
		}
		if !more {
			return
		}
	}
}

// collect gathers the next batch. It waits for a first group, then takes whatever is queued
// until the batch is full; when the queue runs dry it waits for more only until the first
// group's MaxDelay is up. more is false once the queue is closed and drained.
func (w *Writer) collect() (items []queuedGroup, more bool) {
	items = w.items[:0]
	defer func() { w.items = items }()

	var first queuedGroup
	if w.carry != nil {
		first, w.carry = *w.carry, nil
	} else {
		q, ok := <-w.queue
		if !ok {
			return items, false
		}
		first = q
	}
	items = append(items, first)
	rows := first.g.rows()
	deadline := first.at.Add(w.maxDelay(first.g))

	for rows < w.cfg.MaxBatchRows {
		var (
			q  queuedGroup
			ok bool
		)
		select {
		case q, ok = <-w.queue:
		default:
			wait := time.Until(deadline)
			if wait <= 0 {
				return items, true
			}
			w.timer.Reset(wait)
			select {
			case q, ok = <-w.queue:
				w.timer.Stop()
			case <-w.timer.C:
				return items, true
			}
		}
		if !ok {
			return items, false
		}
		n := q.g.rows()
		if rows+n > w.cfg.MaxBatchRows {
			w.carry = &q
			return items, true
		}
		rows += n
		items = append(items, q)
		if d := q.at.Add(w.maxDelay(q.g)); d.Before(deadline) {
			deadline = d
		}
	}
	return items, true
}

// maxDelay is how long g may wait in a batch for company: CreateMaxDelay for a group that
// creates tasks, when that is shorter, else MaxDelay.
func (w *Writer) maxDelay(g *Group) time.Duration {
	if len(g.Creates) > 0 {
		return min(w.cfg.CreateMaxDelay, w.cfg.MaxDelay)
	}
	return w.cfg.MaxDelay
}

// commit applies items as one batch (minus conflicting groups) and then calls every Done in
// submission order.
func (w *Writer) commit(items []queuedGroup) {
	w.errs = slices.Grow(w.errs[:0], len(items))[:len(items)]
	clear(w.errs)
	w.live = w.live[:0]
	for i := range items {
		w.live = append(w.live, i)
	}

	var epoch int64
	if w.cfg.Epoch != nil {
		epoch = w.cfg.Epoch()
	}
	w.dropStaleShards(items)
	switch {
	case len(w.live) == 0:
	case w.aborted():
		w.failLive(w.abortError())
	case epoch > 0 && epoch == w.fencedEpoch:
		w.m.failedByFences.Add(len(w.live))
		w.failLive(fmt.Errorf("cannot commit batch at lease epoch %d: %w", epoch, model.ErrLeaseLost))
	default:
		w.apply(items, epoch)
	}

	// Each group leaves the pending count as its Done is called, not after the whole batch's:
	// a Write returns from within its group's Done, and Pending must not count it then. The
	// queue-depth gauge, which nothing waits on, follows once for the batch.
	for i := range items {
		w.pending.Add(-1)
		if done := items[i].g.Done; done != nil {
			done(w.errs[i])
		}
	}
	w.m.queueDepth.Add(-float64(len(items)))
	clear(items) // drop references to the groups until the slice is reused
	clear(w.errs)
}

// apply commits the live groups, dropping conflicting ones, isolating refused ones and
// retrying transient failures, until every group landed or failed.
//
// It commits a prefix of the live groups at a time, w.live[:n]: all of them at first. When
// the store refuses that prefix for the values it holds (isRefusal), the prefix is halved
// until the group it refuses is alone; that group fails with a *RejectedError, and the rest
// is tried whole again. Each commit lands a prefix of what is left, so the groups that land
// still land in submission order, each whole, and only the refused ones fail. A batch with
// one refused group of k costs about 2·log2(k) more commits.
func (w *Writer) apply(items []queuedGroup, epoch int64) {
	backoff := w.cfg.RetryMin
	n := len(w.live)
	// landed ends the first n live groups as committed.
	landed := func(rows int) {
		w.stall.Store(nil)
		w.m.commits.Inc()
		w.m.batchRows.Update(float64(rows))
		for _, i := range w.live[:n] {
			ts := items[i].g.Transitions
			for j := range ts {
				ts[j].Runtime.Version = ts[j].ExpectVersion + 1
			}
		}
		w.live = w.live[n:]
		n = len(w.live)
	}
	// probe, when set, is a fire record of the first n live groups, whose last commit
	// failed with an unknown outcome: before they are tried again, the store says whether
	// that commit landed (Writer).
	var probe *model.Run
	var probeRows int
	for attempt := 1; len(w.live) > 0; attempt++ {
		if probe != nil {
			found, err := w.store.GetRun(w.runCtx, probe.Ticket)
			switch {
			case err == nil && sameFire(found, probe):
				w.m.foundLanded.Inc()
				w.cfg.Logger.Warn("a commit whose outcome was unknown had landed; its groups succeed",
					"groups", n, "rows", probeRows, "fire", probe.Ticket)
				landed(probeRows)
				probe, attempt, backoff = nil, 0, w.cfg.RetryMin
				continue
			case err == nil, errors.Is(err, model.ErrRunNotFound):
				probe = nil // it did not land: commit it again
			default:
				if !w.retryAfter(err, &backoff, attempt, n, probeRows) {
					return
				}
				continue
			}
		}
		rows := w.build(items, n, epoch)
		start := time.Now()
		err := w.store.ApplyBatch(w.runCtx, &w.batch)
		w.m.commitDuration.UpdateDuration(start)
		if err == nil {
			landed(rows)
			attempt, backoff = 0, w.cfg.RetryMin
			continue
		}

		before := len(w.live)
		var conflict *ConflictError
		var refused *FireRefusedError
		var lostShards *ShardsLostError
		if errors.As(err, &conflict) && w.dropConflicts(conflict) || errors.As(err, &refused) && w.dropRefused(refused) ||
			errors.As(err, &lostShards) && w.dropLostShards(items, lostShards) {
			// A conflict or a refused fire is an answer, not a failure: no backoff. The
			// failed groups were all of the prefix tried; an emptied prefix is the rest.
			if n -= before - len(w.live); n == 0 {
				n = len(w.live)
			}
			attempt = 0
			continue
		}
		if errors.Is(err, model.ErrLeaseLost) && !errors.As(err, &lostShards) {
			// The primary's lease (Epoch). A shard's lost fence that names no live group is
			// not this branch: it is retried as transient below.
			w.m.leaseLost.Inc()
			w.m.failedByFences.Add(len(w.live))
			if epoch > 0 {
				w.fencedEpoch = epoch
			}
			w.cfg.Logger.Error("writer fenced: lease epoch is stale, batch failed",
				"lease", w.cfg.LeaseName, "epoch", epoch, "groups", len(w.live), "error", err)
			w.failLive(fmt.Errorf("cannot commit batch at lease epoch %d: %w", epoch, err))
			return
		}
		if w.aborted() {
			w.failLive(w.abortError())
			return
		}
		if isRefusal(err) {
			w.m.refusals.Inc()
			attempt = 0 // an answer: retrying the same rows cannot help
			if n > 1 {
				level := slog.LevelDebug // each halving of one isolation
				if n == len(w.live) {
					level = slog.LevelWarn
				}
				w.cfg.Logger.Log(w.runCtx, level, "the store refused a batch for its values; isolating the refused group",
					"groups", n, "rows", rows, "error", err)
				n = (n + 1) / 2
				continue
			}
			w.stall.Store(nil)
			w.m.rejected.Inc()
			w.cfg.Logger.Error("the store refused a group for its values; failing it", "rows", rows, "error", err)
			w.errs[w.live[0]] = &RejectedError{Err: err}
			w.live = w.live[1:]
			n = len(w.live)
			continue
		}
		if len(w.batch.Fires) > 0 {
			p := w.batch.Fires[0]
			probe, probeRows = &p, rows
		}
		if !w.retryAfter(err, &backoff, attempt, n, rows) {
			return
		}
	}
}

// retryAfter counts and logs the transient failure err of a commit of n groups and waits out
// the backoff, which it doubles up to RetryMax. It reports false, having failed the live
// groups, when Stop's context ends meanwhile.
func (w *Writer) retryAfter(err error, backoff *time.Duration, attempt, n, rows int) bool {
	w.m.commitErrors.Inc()
	w.stalled(err)
	w.cfg.Logger.Warn("cannot commit batch, retrying",
		"attempt", attempt, "groups", n, "rows", rows, "backoff", *backoff, "error", err)
	w.timer.Reset(*backoff)
	select {
	case <-w.timer.C:
	case <-w.abort:
		w.timer.Stop()
		w.failLive(w.abortError())
		return false
	}
	*backoff = min(2**backoff, w.cfg.RetryMax)
	return true
}

// sameFire reports whether stored is the row the fire record want wrote: the same ticket
// made at the same instant, by the same fire (its later writes, an end or a held-back mark,
// change neither).
func sameFire(stored, want *model.Run) bool {
	return stored.Ticket == want.Ticket && stored.TaskID == want.TaskID && stored.Kind == want.Kind &&
		stored.Attempt == want.Attempt && stored.ScheduledAt == want.ScheduledAt &&
		stored.DispatchedAt == want.DispatchedAt
}

// build fills w.batch with the first n live groups and returns its row count.
func (w *Writer) build(items []queuedGroup, n int, epoch int64) int {
	b := &w.batch
	b.Epoch, b.LeaseName = 0, ""
	if epoch > 0 {
		b.Epoch, b.LeaseName = epoch, w.cfg.LeaseName
	}
	b.Shards = b.Shards[:0]
	var inBatch model.ShardSet
	b.Transitions, b.Runs, b.Actions, b.Fires = b.Transitions[:0], b.Runs[:0], b.Actions[:0], b.Fires[:0]
	b.Creates, b.DefUpdates, b.Deletes = b.Creates[:0], b.DefUpdates[:0], b.Deletes[:0]
	b.WorkflowRuns, b.StepRuns = b.WorkflowRuns[:0], b.StepRuns[:0]
	w.offsets, w.owner = w.offsets[:0], w.owner[:0]
	w.fireOffsets, w.fireOwner = w.fireOffsets[:0], w.fireOwner[:0]
	w.cOffsets, w.cOwner = w.cOffsets[:0], w.cOwner[:0]
	rows := 0
	for li, i := range w.live[:n] {
		g := items[i].g
		w.offsets = append(w.offsets, len(b.Transitions))
		for range g.Transitions {
			w.owner = append(w.owner, li)
		}
		w.fireOffsets = append(w.fireOffsets, len(b.Fires))
		for range g.Fires {
			w.fireOwner = append(w.fireOwner, li)
		}
		w.cOffsets = append(w.cOffsets, len(b.Creates))
		for range g.Creates {
			w.cOwner = append(w.cOwner, li)
		}
		b.Transitions = append(b.Transitions, g.Transitions...)
		b.Runs = append(b.Runs, g.Runs...)
		b.Actions = append(b.Actions, g.Actions...)
		b.Fires = append(b.Fires, g.Fires...)
		b.Creates = append(b.Creates, g.Creates...)
		b.DefUpdates = append(b.DefUpdates, g.DefUpdates...)
		b.Deletes = append(b.Deletes, g.Deletes...)
		b.WorkflowRuns = append(b.WorkflowRuns, g.WorkflowRuns...)
		b.StepRuns = append(b.StepRuns, g.StepRuns...)
		rows += g.rows()
		if f := g.Fence; f.Epoch > 0 && !inBatch.Has(f.Shard) {
			inBatch.Add(f.Shard) // dropStaleShards left one epoch a shard
			b.Shards = append(b.Shards, f)
		}
	}
	return rows
}

// dropStaleShards fails, before the batch goes to the database, the live groups fenced by a
// shard at an epoch known to be stale: at or below one a batch found stale, or below another
// group's of the same shard in this batch (a shard's epochs only grow, so the node that
// holds the higher one took the shard after the lower one was given).
func (w *Writer) dropStaleShards(items []queuedGroup) {
	fenced := false
	for _, i := range w.live {
		if f := items[i].g.Fence; f.Epoch > 0 {
			if !fenced {
				clear(w.newest[:])
				fenced = true
			}
			w.newest[f.Shard] = max(w.newest[f.Shard], f.Epoch)
		}
	}
	if !fenced {
		return
	}
	dropped := 0
	for _, i := range w.live {
		f := items[i].g.Fence
		if f.Epoch <= 0 {
			continue
		}
		if f.Epoch <= w.fencedShards[f.Shard] || f.Epoch < w.newest[f.Shard] {
			w.errs[i] = &ShardsLostError{Lost: []ShardFence{f}}
			dropped++
		}
	}
	if dropped > 0 {
		w.m.failedByFences.Add(dropped)
		w.live = slices.DeleteFunc(w.live, func(i int) bool { return w.errs[i] != nil })
	}
}

// dropLostShards fails the live groups fenced by the shards e names at their stale epochs
// (or below), remembers those epochs as stale and tells ShardLost; the rest of the batch is
// applied again without them. It returns false, changing nothing, when e names no shard of
// a live group: such an error is treated as transient.
func (w *Writer) dropLostShards(items []queuedGroup, e *ShardsLostError) bool {
	var stale [model.ShardCount]int64
	for _, f := range e.Lost {
		if f.Shard >= 0 && f.Shard < model.ShardCount {
			stale[f.Shard] = max(stale[f.Shard], f.Epoch)
		}
	}
	dropped := 0
	for _, i := range w.live {
		f := items[i].g.Fence
		if f.Epoch > 0 && f.Epoch <= stale[f.Shard] {
			w.errs[i] = e
			dropped++
		}
	}
	if dropped == 0 {
		return false
	}
	w.m.leaseLost.Inc()
	w.m.failedByFences.Add(dropped)
	for n, ep := range stale {
		w.fencedShards[n] = max(w.fencedShards[n], ep)
	}
	w.live = slices.DeleteFunc(w.live, func(i int) bool { return w.errs[i] != nil })
	w.cfg.Logger.Warn("writer fenced per shard: another node holds these shards; their groups failed",
		"error", e, "groups", dropped)
	if w.cfg.ShardLost != nil {
		for _, f := range e.Lost {
			w.cfg.ShardLost(f, e)
		}
	}
	return true
}

// dropRefused fails the groups owning the fire records in r (each with its own
// *FireRefusedError) and removes them from w.live, as dropConflicts does for conflicts; the
// other groups of the batch are applied again without them. It returns false, changing
// nothing, when r names no fire record of the batch.
func (w *Writer) dropRefused(r *FireRefusedError) bool {
	if len(r.Indexes) == 0 {
		return false
	}
	for _, idx := range r.Indexes {
		if idx < 0 || idx >= len(w.fireOwner) {
			return false
		}
	}
	indexes := slices.Clone(r.Indexes)
	slices.Sort(indexes)
	indexes = slices.Compact(indexes)
	for _, idx := range indexes {
		li := w.fireOwner[idx]
		i := w.live[li]
		fe, ok := w.errs[i].(*FireRefusedError)
		if !ok {
			fe = &FireRefusedError{}
			w.errs[i] = fe
		}
		fe.Indexes = append(fe.Indexes, idx-w.fireOffsets[li])
	}
	w.live = slices.DeleteFunc(w.live, func(i int) bool { return w.errs[i] != nil })
	return true
}

// dropConflicts fails the groups owning the transitions in c (each with its own
// *ConflictError) and removes them from w.live. It returns false, changing nothing, when c
// names no transition of the batch: such an error is treated as transient rather than
// trusted to pick a victim.
func (w *Writer) dropConflicts(c *ConflictError) bool {
	if len(c.Indexes) == 0 && len(c.Creates) == 0 {
		return false
	}
	for _, idx := range c.Indexes {
		if idx < 0 || idx >= len(w.owner) {
			return false
		}
	}
	for _, idx := range c.Creates {
		if idx < 0 || idx >= len(w.cOwner) {
			return false
		}
	}
	w.m.conflicts.Add(len(c.Indexes) + len(c.Creates))
	// blame gives each batch-wide index in idxs to the group that owns it, as that group's
	// own index, in the ConflictError field that pick names.
	blame := func(idxs, owner, offsets []int, pick func(*ConflictError) *[]int) {
		idxs = slices.Clone(idxs)
		slices.Sort(idxs)
		for _, idx := range slices.Compact(idxs) {
			li := owner[idx]
			i := w.live[li]
			ce, _ := w.errs[i].(*ConflictError)
			if ce == nil {
				ce = &ConflictError{}
				w.errs[i] = ce
			}
			f := pick(ce)
			*f = append(*f, idx-offsets[li])
		}
	}
	blame(c.Creates, w.cOwner, w.cOffsets, func(ce *ConflictError) *[]int { return &ce.Creates })
	blame(c.Indexes, w.owner, w.offsets, func(ce *ConflictError) *[]int { return &ce.Indexes })
	w.live = slices.DeleteFunc(w.live, func(i int) bool { return w.errs[i] != nil })
	return true
}

func (w *Writer) failLive(err error) {
	for _, i := range w.live {
		w.errs[i] = err
	}
	w.live = w.live[:0]
}

func (w *Writer) aborted() bool {
	select {
	case <-w.abort:
		return true
	default:
		return false
	}
}

func (w *Writer) abortError() error {
	// ErrWriterClosed too: the group was never committed, and the caller may try again
	// elsewhere (an API client, on the node that holds the lease now).
	return fmt.Errorf("cannot commit group before writer stop deadline: %w (%w)", w.abortErr, ErrWriterClosed)
}
