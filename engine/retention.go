package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/wire"
)

// Defaults of RetentionConfig (docs/retention.md).
const (
	// RetainHistoryDefault keeps run and action rows for a week.
	RetainHistoryDefault = 7 * 24 * time.Hour
	// RetainFinishedDefault keeps a finished one-shot task for a day.
	RetainFinishedDefault = 24 * time.Hour
	// PruneIntervalDefault is how often the pruner starts a pass.
	PruneIntervalDefault = time.Minute
	// PruneBatchDefault is how many rows one prune statement deletes: a short transaction
	// that holds its locks for milliseconds, not seconds.
	PruneBatchDefault = 1000
)

// pruneBusy is the writer queue fill above which the pruner backs off: the firing path
// comes first.
const pruneBusy = 0.1

// RetentionConfig configures the pruner. The zero value is usable.
type RetentionConfig struct {
	// History is how long run and action rows are kept. Defaults to RetainHistoryDefault
	// (7d); negative keeps them for ever.
	History time.Duration
	// Finished is how long a one-shot task is kept after it finished. Defaults to
	// RetainFinishedDefault (24h); negative keeps them for ever.
	Finished time.Duration
	// Interval is the time between two passes. Defaults to PruneIntervalDefault (1m).
	Interval time.Duration
	// Batch is how many rows one delete takes. Defaults to PruneBatchDefault (1000).
	Batch int
	// Primary gates the pruner: a pass runs only while it returns true, so that only the
	// primary of an HA pair deletes. Defaults to nil: always (a single node is primary).
	Primary func() bool
}

// WithDefaults returns c with zero fields set to their defaults.
func (c RetentionConfig) WithDefaults() RetentionConfig {
	if c.History == 0 {
		c.History = RetainHistoryDefault
	}
	if c.Finished == 0 {
		c.Finished = RetainFinishedDefault
	}
	if c.Interval == 0 {
		c.Interval = PruneIntervalDefault
	}
	if c.Batch == 0 {
		c.Batch = PruneBatchDefault
	}
	return c
}

func (c RetentionConfig) validate() error {
	switch {
	case c.Interval <= 0:
		return fmt.Errorf("prune interval must be positive, got %s", c.Interval)
	case c.Batch < 1:
		return fmt.Errorf("prune batch must be positive, got %d", c.Batch)
	}
	return nil
}

// errNoPruner: the store cannot prune.
var errNoPruner = errors.New("the store does not support pruning")

// retentionCore is what retention asks of the core.
type retentionCore interface {
	checkRunning() error
	// forgetReplaced drops the copy in memory of a task pruned.
	forgetReplaced(id int64)
}

// Retention is the pruner (docs/retention.md): a pass every Interval, off the firing path,
// and the passes axe prune asks for (Prune).
type Retention struct {
	base
	core retentionCore
	busy func() float64 // the writer's queue fill
	loop loop
}

func (r *Retention) start() error                   { return r.loop.start(r.run) }
func (r *Retention) stop(ctx context.Context) error { return r.loop.stop(ctx) }

// run runs a pass every Interval: it deletes in batches and waits between them, longer
// while the writer is busy.
func (r *Retention) run(ctx context.Context) {
	rc := r.cfg.Retention
	if _, ok := r.store.(persist.Pruner); !ok || (rc.History < 0 && rc.Finished < 0) {
		return
	}
	r.every(ctx, rc.Interval, func() {
		if rc.Primary != nil && !rc.Primary() {
			return
		}
		now := r.nowMS()
		var hist, fin int64 = -1, -1
		if rc.History > 0 {
			hist = now - rc.History.Milliseconds()
		}
		if rc.Finished > 0 {
			fin = now - rc.Finished.Milliseconds()
		}
		start := r.clk.Now()
		res, err := r.prune(ctx, hist, fin, false, true)
		if err != nil && ctx.Err() == nil {
			r.log.Warn("prune pass failed", "error", err)
		}
		if res.Runs+res.Actions+res.Finished > 0 {
			r.log.Info("pruned", "task_run", res.Runs, "task_action", res.Actions, "task_def", res.Finished,
				"took", r.since(start))
		}
	})
}

// Retention is the pruner, for the passes axe prune asks for.
func (e *API) Retention() *Retention { return e.retention }

// Prune deletes runs and actions from before historyBefore and finished one-shot tasks that
// ended before finishedBefore (Unix ms; -1 skips that kind), in bounded batches; with dryRun
// it only counts. It is what axe prune calls.
func (r *Retention) Prune(ctx context.Context, historyBefore, finishedBefore int64, dryRun bool) (wire.PruneResult, error) {
	if err := r.core.checkRunning(); err != nil {
		return wire.PruneResult{}, err
	}
	return r.prune(ctx, historyBefore, finishedBefore, dryRun, false)
}

func (r *Retention) prune(ctx context.Context, hist, fin int64, dryRun, paced bool) (wire.PruneResult, error) {
	var res wire.PruneResult
	p, ok := r.store.(persist.Pruner)
	if !ok {
		return res, errNoPruner
	}
	now := r.nowMS()
	batch := r.cfg.Retention.Batch
	// A sharded node prunes the finished tasks of the shards it schedules, their deletes
	// fenced by them; the history (runs and actions, of no shard's state) only the holder
	// of shard 0 prunes on its own, so that one pruner at a time walks it.
	ctx = r.own.readyFenced(ctx)
	if paced && !r.own.holdsShardZero() {
		hist = -1
	}
	// Finished tasks first: their runs and actions then age out with the rest.
	if fin >= 0 {
		if dryRun {
			_, n, err := p.PruneFinished(ctx, fin, now, batch, true)
			if err != nil {
				return res, err
			}
			res.Finished = n
		} else {
			for {
				ids, n, err := p.PruneFinished(ctx, fin, now, batch, false)
				if err != nil {
					return res, err
				}
				for _, id := range ids {
					r.core.forgetReplaced(id)
				}
				res.Finished += n
				r.m.prunedFinished.Add(int(n))
				if int(n) < batch || !r.pause(ctx, paced) {
					break
				}
			}
		}
	}
	if hist < 0 {
		return res, nil
	}
	for _, kind := range []struct {
		fn  func(context.Context, int64, int64, int, bool) (int64, error)
		sum *int64
		m   *metrics.Counter
	}{{p.PruneRuns, &res.Runs, r.m.prunedRuns}, {p.PruneActions, &res.Actions, r.m.prunedActions}} {
		for {
			n, err := kind.fn(ctx, hist, now, batch, dryRun)
			if err != nil {
				return res, err
			}
			*kind.sum += n
			if dryRun {
				break
			}
			kind.m.Add(int(n))
			if int(n) < batch || !r.pause(ctx, paced) {
				break
			}
		}
	}
	return res, nil
}

// pause waits between two prune batches: briefly, and backing off up to a second while
// the writer is busy. It returns false when ctx ended.
func (r *Retention) pause(ctx context.Context, paced bool) bool {
	wait := time.Millisecond
	if paced {
		wait = 10 * time.Millisecond
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-r.clk.After(wait):
		}
		if !paced || r.busy() <= pruneBusy {
			return true
		}
		wait = min(2*wait, time.Second)
	}
}
