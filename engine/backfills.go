package engine

// Backfills: one run of a cron task for every fire time its schedule would have produced in
// a past range (api_backfill.go makes and reads them). A backfill is a stored row with a
// cursor (persist/backfill.go), never a list of runs: the loop of Backfills, which runs only on the
// lease holder because an engine runs only there, creates its runs a few at a time as its
// parallelism frees slots.
//
// Exactly once. A backfill run of fire time T has the ticket the schedule's own fire of T
// has (scheduledTicket, attempt 1), and is written as a fire record: the run table's
// primary key is the record, so no two runs of (task, T) ever exist, whoever asks (the
// schedule, the same backfill after a restart, another backfill of an overlapping range).
// A fire time whose record exists is not run again: the backfill counts it as skipped
// (when the record is another's) or as its own run (when the record names this backfill,
// which a restart meets between the last saved cursor and the last started run). The
// backfill never takes a fire time the schedule may still fire itself: none at or after
// the due time of the task's pending fire (periodicFloor), so the schedule never meets a
// backfill's record either.
//
// Progress. The row's cursor (Next) and counters are saved at most every
// backfillSaveEvery, and at every change of status. A crash loses at most the counts since
// the last save: recover recounts the backfill's runs before its saved cursor from
// the run rows, re-attaches its runs still in flight (found from Low on) as run-now
// instances are re-attached (lost for an HTTP callback, awaited for an executor), and the
// cursor then meets again the fire times started after the last save, each already
// recorded: none runs twice.
//
// A backfill run is outside the periodic state machine, as run-now is: it goes through
// the same send path (executor routing, the task's timeout_sec, the executor protocol),
// but not through the rate gate's buffer: it takes its downstream's rate token itself, and
// counts in its group's and key's concurrency limits as run-now does, taking a free slot
// and a token or waiting for the next pass (it never queues as a waiter), it is not retried (its one
// attempt is recorded with its result: retry_count does not apply), it does not feed the
// circuit breaker or pause-on-failure, and it does not release dependent tasks.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/axe-sched/axe/lib/cron"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// Bounds of a backfill.
const (
	// BackfillParallelMax bounds a backfill's parallelism (runs of it in flight at once).
	BackfillParallelMax = 256
	// BackfillRunsMax bounds the fire times of one backfill: a year of a once-a-minute
	// schedule (525,600) fits, a year of a once-a-second one does not.
	BackfillRunsMax = 1_000_000
	// backfillBatch bounds the fire records one pass creates for one backfill.
	backfillBatch = 64
	// backfillSaveEvery is how often a backfill's cursor and counters are saved while it runs.
	backfillSaveEvery = 250 * time.Millisecond
	// backfillPoll is how often the backfills' loop looks at its backfills without being woken.
	backfillPoll = time.Second
	// backfillRetry is how long a backfill waits after a failed read or write.
	backfillRetry = time.Second
)

// Action names of backfills (task actions; the runs themselves are their run rows).
const (
	ActBackfillStart  = "backfill_start"
	ActBackfillEnd    = "backfill_end"
	ActBackfillCancel = "backfill_cancel"
)

// bfFlight is one run of a backfill in flight here. count says whether its end counts in
// the backfill's counters: false for a run re-attached at start that lies past the saved
// cursor, which the cursor counts when it meets the run's record again.
type bfFlight struct {
	sched int64
	count bool
}

// backfill is a backfill held by this engine while it runs or has runs in flight.
type backfill struct {
	mu       sync.Mutex
	row      model.Backfill // row.Next is the cursor in memory: the next fire time not yet submitted
	sched    cron.Schedule
	loc      *time.Location
	detail   string // the detail of its runs: "backfill <id>"
	inflight map[string]bfFlight
	// ahead holds the tickets started here past a cursor a failed write moved back: when
	// the cursor meets their records again, they were counted already.
	ahead map[string]bool
	// endedAhead holds the results of runs re-attached after a restart past the saved
	// cursor (not counted at their end: the cursor counts them when it meets their records)
	// that ended before the cursor met them: a record the cursor read as running may have
	// ended since, and its end is counted from here.
	endedAhead map[string]string
	dirty      bool // row differs from the saved one
	savedAt    time.Time
	retryAt    time.Time
}

// backfillsCore is what the backfills ask of the core: the task to hold, and a run to
// admit, start or give back (core_backfillruns.go).
type backfillsCore interface {
	checkRunning() error
	acquire(ctx context.Context, id int64, o acquireOpts) (*task, error)
	release(t *task)
	write(ctx context.Context, g *persist.Group) error
	submit(ctx context.Context, g *persist.Group, mode submitMode) error
	startBackfill(t *task, def *model.TaskDef, run model.Run, slot concSlot)
}

// Backfills is the backfill service: the API's backfills (api_backfill.go), their loop
// that starts their runs (run, feed) and saves their progress, and their recovery.
type Backfills struct {
	base
	core backfillsCore
	// recovery takes over a backfill run left in flight, as a run-now's (core_recover.go).
	recovery *Recovery
	// gates admit a backfill run (its slot and rate token); the loader places its task
	// again when a run did not start (core_backfillruns.go).
	gates  *gates
	loader *Loader
	set    backfillSet
	loop   loop
}

// Backfills is the backfill service, which the API's backfill endpoints call.
func (e *API) Backfills() *Backfills { return e.backfills }

func (bf *Backfills) start() error { return bf.loop.start(bf.run) }

func (bf *Backfills) stop(ctx context.Context) error { return bf.loop.stop(ctx) }

// backfillSet is the engine's backfills in memory.
type backfillSet struct {
	mu       sync.Mutex
	m        map[int64]*backfill
	byTicket map[string]*backfill
	wake     chan struct{}
}

func (s *backfillSet) init() {
	s.m = make(map[int64]*backfill)
	s.byTicket = make(map[string]*backfill)
	s.wake = make(chan struct{}, 1)
}

func (s *backfillSet) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *backfillSet) get(id int64) *backfill {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[id]
}

func (s *backfillSet) add(b *backfill) {
	s.mu.Lock()
	s.m[b.row.ID] = b
	s.mu.Unlock()
	s.poke()
}

func (s *backfillSet) list() []*backfill {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*backfill, 0, len(s.m))
	for _, b := range s.m {
		out = append(out, b)
	}
	return out
}

// dropShards forgets the backfills of the tasks of set and their runs in flight: the node
// that takes the shards resumes them from their rows (Backfills.recover).
func (s *backfillSet) dropShards(set model.ShardSet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, b := range s.m {
		if set.Has(model.ShardOf(b.row.TaskName)) {
			delete(s.m, id)
		}
	}
	for ticket, b := range s.byTicket {
		if set.Has(model.ShardOf(b.row.TaskName)) {
			delete(s.byTicket, ticket)
		}
	}
}

func (s *backfillSet) remove(b *backfill) {
	s.mu.Lock()
	delete(s.m, b.row.ID)
	s.mu.Unlock()
}

// track notes that ticket is a run of b in flight here. Caller holds b.mu.
func (s *backfillSet) track(b *backfill, ticket string, f bfFlight) {
	b.inflight[ticket] = f
	s.mu.Lock()
	s.byTicket[ticket] = b
	s.mu.Unlock()
}

// ended records the end of a backfill run: it leaves its backfill's flights, and counts
// when its end is durable.
func (s *backfillSet) ended(ticket, result string, err error) {
	s.mu.Lock()
	b := s.byTicket[ticket]
	delete(s.byTicket, ticket)
	s.mu.Unlock()
	if b == nil {
		return
	}
	b.mu.Lock()
	f, ok := b.inflight[ticket]
	delete(b.inflight, ticket)
	switch {
	case ok && f.count && err == nil:
		b.countResult(result)
	case ok && err == nil:
		b.endedAhead[ticket] = result // the cursor counts it when it meets its record
	}
	b.dirty = true
	b.mu.Unlock()
	s.poke()
}

// countResult counts one of b's runs that ended as result. Caller holds b.mu.
func (b *backfill) countResult(result string) {
	if result == model.ResultSuccess {
		b.row.Succeeded++
	} else {
		b.row.Failed++
	}
}

func backfillDetail(id int64) string { return "backfill " + strconv.FormatInt(id, 10) }

// newBackfill prepares a stored row for this engine.
func newBackfill(row model.Backfill) (*backfill, error) {
	sched, err := parseCached(row.Cron, row.CronDialect)
	if err != nil {
		return nil, fmt.Errorf("cannot parse the schedule of backfill %d: %w", row.ID, err)
	}
	loc, err := cron.LoadLocation(row.Timezone)
	if err != nil {
		return nil, fmt.Errorf("cannot load the time zone of backfill %d: %w", row.ID, err)
	}
	return &backfill{row: row, sched: sched, loc: loc, detail: backfillDetail(row.ID),
		inflight: make(map[string]bfFlight), ahead: make(map[string]bool), endedAhead: make(map[string]string)}, nil
}

// fireAfter returns the first fire time of sched strictly after after (ms), 0 when none.
func fireAfterMS(sched cron.Schedule, loc *time.Location, after int64) int64 {
	n := sched.Next(time.UnixMilli(after), loc)
	if n.IsZero() {
		return 0
	}
	return n.UnixMilli()
}

// next is the fire time after x within b's range, 0 when none.
func (b *backfill) next(x int64) int64 {
	n := fireAfterMS(b.sched, b.loc, x)
	if n > b.row.To {
		return 0
	}
	return n
}

// low is Low as it stands: the oldest fire time in flight, or the cursor, whichever is
// earlier; past To when neither is left. Caller holds b.mu.
func (b *backfill) low() int64 {
	low := b.row.Next
	if low == 0 {
		low = b.row.To + 1
	}
	for _, f := range b.inflight {
		low = min(low, f.sched)
	}
	return low
}

// periodicFloor is the earliest fire time the task's own schedule may still fire: the due
// time of the fire it has armed or in flight (RUNNING keeps the due of its run; a retry
// counts from the fire it retries). 0 when no cycle is pending: a paused or waiting task
// computes its next fire from the clock when it resumes. Caller holds t.mu.
func periodicFloor(t *task) int64 {
	switch t.rt.State {
	case model.StateScheduled, model.StateRunning, model.StateRetrying:
		floor := t.rt.NextTriggerTime
		if t.retryOf > 0 && (floor == 0 || t.retryOf < floor) {
			floor = t.retryOf
		}
		return floor
	}
	return 0
}

// run feeds the backfills this engine holds until ctx ends.
func (bf *Backfills) run(ctx context.Context) {
	tick := bf.clk.NewTicker(backfillPoll)
	defer tick.Stop()
	for {
		for _, b := range bf.set.list() {
			if ctx.Err() != nil {
				break
			}
			if bf.feed(ctx, b) {
				bf.set.poke() // more may be passed or started at once
			}
			bf.save(ctx, b, false)
		}
		select {
		case <-ctx.Done():
			// The last progress, so that a clean restart resumes from it; a crash loses
			// it, and recovery recounts (see the top of this file).
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			for _, b := range bf.set.list() {
				bf.save(sctx, b, true)
			}
			cancel()
			return
		case <-tick.C():
		case <-bf.set.wake:
		}
	}
}

// save writes b's progress when it changed and the last save is older than
// backfillSaveEvery (or now, when force), and lets go of a backfill that has ended and
// has no run in flight.
func (bf *Backfills) save(ctx context.Context, b *backfill, force bool) {
	b.mu.Lock()
	finished := b.row.Status != model.BackfillRunning && len(b.inflight) == 0
	if finished {
		b.row.Low = b.row.To + 1
	} else {
		b.row.Low = b.low()
	}
	if !b.dirty || (!force && !finished && bf.since(b.savedAt) < backfillSaveEvery) {
		b.mu.Unlock()
		return
	}
	row := b.row
	row.UpdatedAt = bf.nowMS()
	b.dirty = false
	b.savedAt = bf.clk.Now()
	b.mu.Unlock()
	fctx, err := bf.own.fencedFor(ctx, row.TaskName) // under the task's shard's fence
	if err == nil {
		err = bf.store.SaveBackfill(fctx, &row)
	}
	if err != nil {
		bf.log.Warn("cannot save backfill progress; retrying", "backfill", row.ID, "error", err)
		b.mu.Lock()
		b.dirty = true
		b.mu.Unlock()
		return
	}
	if finished {
		bf.set.remove(b)
	}
}

// feed moves b's cursor over its next fire times (at most backfillBatch): those
// with a run already are passed as found, the others start as b's free slots allow; and it
// ends b when its range is done. It reports whether the cursor moved. It waits for the fire
// records it submitted, so the cursor moves only past fire times whose record is durable
// or found.
func (bf *Backfills) feed(ctx context.Context, b *backfill) bool {
	b.mu.Lock()
	if b.row.Status != model.BackfillRunning || bf.clk.Now().Before(b.retryAt) {
		b.mu.Unlock()
		return false
	}
	if b.row.Next == 0 {
		if len(b.inflight) == 0 {
			bf.endLocked(b, model.BackfillDone, ActorScheduler, "")
		}
		b.mu.Unlock()
		return false
	}
	slots := b.row.Parallel - len(b.inflight)
	if slots <= 0 {
		b.mu.Unlock()
		return false
	}
	times := make([]int64, 0, backfillBatch)
	for x := b.row.Next; x != 0 && len(times) < backfillBatch; x = b.next(x) {
		times = append(times, x)
	}
	taskID := b.row.TaskID
	b.mu.Unlock()

	retry := func(what string, err error) bool {
		bf.log.Warn("cannot "+what+" of a backfill; retrying", "backfill", b.row.ID, "error", err)
		b.mu.Lock()
		b.retryAt = bf.clk.Now().Add(backfillRetry)
		b.mu.Unlock()
		return false
	}
	tickets := make([]string, len(times))
	for i, x := range times {
		tickets[i] = scheduledTicket(taskID, x, 1)
	}
	// The fire times that have a record already are passed without a write: one read for
	// the batch, so a range asked for again is walked at the speed of reads.
	found, err := bf.store.RunsByTicket(ctx, tickets)
	if err != nil {
		return retry("read the runs", err)
	}
	stored := make(map[string]model.Run, len(found))
	for _, r := range found {
		stored[r.Ticket] = r
	}
	t, err := bf.core.acquire(ctx, taskID, acquireOpts{})
	if errors.Is(err, model.ErrTaskNotFound) {
		b.mu.Lock()
		bf.endLocked(b, model.BackfillAborted, ActorScheduler, "the task was deleted")
		b.mu.Unlock()
		return false
	}
	if errors.Is(err, model.ErrShardNotHeld) {
		return false // its shard is another node's now, or being taken over: it resumes there
	}
	if err != nil {
		return retry("load the task", err)
	}
	if bf.own.shardGate(t.shard, t.sepoch, true) != nil {
		bf.core.release(t) // being handed over: no new run; the next owner resumes the backfill
		return false
	}
	def := t.def
	if t.deleted {
		bf.core.release(t)
		b.mu.Lock()
		bf.endLocked(b, model.BackfillAborted, ActorScheduler, "the task was deleted")
		b.mu.Unlock()
		return false
	}
	floor := periodicFloor(t)
	now := bf.nowMS()
	var runs []model.Run
	var concSlots []concSlot
	runAt := make(map[int]int) // index in times → index in runs
	passed, owned := len(times), false
	for i, x := range times {
		if floor > 0 && x >= floor {
			passed, owned = i, true // the schedule's pending fire and every one after it
			break
		}
		if _, ok := stored[tickets[i]]; ok {
			continue
		}
		if len(runs) == slots {
			passed = i
			break
		}
		// A backfill run counts in its group's and key's concurrency limits as a run-now
		// does; over a limit, the cursor stops here until a later pass finds room.
		// And it takes a token of its downstream's rate limit (and the global one), as every
		// fire does: without a token the cursor stops here too, and a later pass (each run's
		// end or the poll) asks again. The rate is never exceeded; a backfill run may take a
		// token ahead of a fire the rate gate holds, which then waits for the next one.
		slot, wait, ok := bf.admitBackfill(def, tickets[i], t.shard, t.sepoch)
		if !ok {
			passed = i
			if wait > 0 && wait < backfillPoll { // the next pass when the token is due, not at the poll
				bf.clk.AfterFunc(wait, bf.set.poke)
			}
			break
		}
		concSlots = append(concSlots, slot)
		runAt[i] = len(runs)
		runs = append(runs, model.Run{
			Ticket: tickets[i], TaskID: t.id, TaskName: def.Name, Kind: model.RunBackfill,
			Attempt: 1, ScheduledAt: x, DispatchedAt: now, Result: model.ResultRunning,
			Executor: downstreamOf(def), Detail: b.detail,
		})
	}
	t.flying += len(runs) // keeps t in memory while the records are written
	bf.core.release(t)

	type written struct {
		i   int
		err error
	}
	results := make(chan written, len(runs))
	for i := range runs {
		run, slot := runs[i], concSlots[i]
		g := &persist.Group{Fires: []model.Run{run}, Done: func(err error) {
			if err == nil {
				b.mu.Lock()
				bf.set.track(b, run.Ticket, bfFlight{sched: run.ScheduledAt, count: true})
				b.mu.Unlock()
				bf.core.startBackfill(t, def, run, slot)
			} else {
				bf.unstartBackfill(t, slot)
			}
			results <- written{i, err}
		}}
		if err := bf.core.submit(ctx, g, submitWait); err != nil {
			bf.unstartBackfill(t, slot)
			results <- written{i, err}
		}
	}
	errs := make([]error, len(runs))
	for range runs {
		w := <-results
		errs[w.i] = w.err
	}
	// A record refused by the database was written meanwhile by another (a race with an
	// overlapping backfill): read it as the batch's were read.
	var refused []string
	failedAt := -1 // the first fire time whose record could not be written
	for i := range times[:passed] {
		k, ok := runAt[i]
		if !ok {
			continue
		}
		switch err := errs[k]; {
		case err == nil:
		case errors.Is(err, persist.ErrDuplicateFire):
			refused = append(refused, tickets[i])
		default:
			if failedAt < 0 {
				failedAt = i
			}
		}
	}
	if len(refused) > 0 {
		more, err := bf.store.RunsByTicket(ctx, refused)
		if err != nil {
			bf.log.Warn("cannot read the runs a backfill met; retrying", "backfill", b.row.ID, "error", err)
			failedAt = 0
		}
		for _, r := range more {
			stored[r.Ticket] = r
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if failedAt >= 0 {
		passed, owned = failedAt, false
		b.retryAt = bf.clk.Now().Add(backfillRetry)
		bf.log.Warn("cannot write a backfill's fire record; retrying", "backfill", b.row.ID)
	}
	for i := range times {
		ticket := tickets[i]
		k, isRun := runAt[i]
		if i >= passed {
			if isRun && errs[k] == nil {
				b.ahead[ticket] = true // started: counted now, not when the cursor meets it again
				b.row.Started++
			}
			continue
		}
		if isRun && errs[k] == nil {
			b.row.Started++
			continue
		}
		if b.ahead[ticket] {
			delete(b.ahead, ticket) // counted when it started
			continue
		}
		b.row.Started++
		r, ok := stored[ticket]
		if result, ended := b.endedAhead[ticket]; ended {
			// Its own run re-attached after a restart, which ended after the read above
			// (that may still say running) and before the cursor met it.
			delete(b.endedAhead, ticket)
			b.countResult(result)
			continue
		}
		switch {
		case !ok || r.Kind != model.RunBackfill || r.Detail != b.detail:
			b.row.Skipped++ // another's record (or one pruned since)
		case r.Result == model.ResultRunning:
			// Its own run from before a restart, re-attached: its end counts.
			if f, in := b.inflight[ticket]; in {
				f.count = true
				b.inflight[ticket] = f
			}
		default:
			b.countResult(r.Result)
		}
	}
	switch {
	case owned:
		for x := times[passed]; x != 0; x = b.next(x) {
			b.row.Started++
			b.row.Skipped++
		}
		b.row.Next = 0
	case passed < len(times):
		b.row.Next = times[passed]
	default:
		b.row.Next = b.next(times[len(times)-1])
	}
	b.dirty = true
	return passed > 0 || owned
}

// endLocked ends b as status says and records it. Caller holds b.mu.
func (bf *Backfills) endLocked(b *backfill, status, actor, note string) {
	now := bf.nowMS()
	b.row.Status, b.row.EndedAt, b.dirty = status, now, true
	if note != "" {
		b.row.Note = note
	}
	name := ActBackfillEnd
	if status == model.BackfillCanceled {
		name = ActBackfillCancel
	}
	detail := fmt.Sprintf("%s %s: %d of %d fire times started (%d succeeded, %d failed, %d skipped: a run existed), %d in flight",
		b.detail, status, b.row.Started, b.row.Total, b.row.Succeeded, b.row.Failed, b.row.Skipped, len(b.inflight))
	if status == model.BackfillCanceled {
		detail += " finish; no new run starts"
	}
	if note != "" {
		detail += "; " + note
	}
	act := model.Action{TaskID: b.row.TaskID, TaskName: b.row.TaskName, Action: name, Actor: actor,
		At: now, Detail: detail}
	if err := bf.core.submit(context.Background(), &persist.Group{Actions: []model.Action{act}}, submitWait); err != nil {
		bf.log.Warn("cannot record the end of a backfill", "backfill", b.row.ID, "error", err)
	}
}

// recover takes over the backfills a previous primary left open: their counters
// recounted from the run rows before their saved cursor, their runs still in flight
// re-attached as run-now instances are (Recovery.manualRuns). Called at start, before
// run.
func (bf *Backfills) recover(ctx context.Context) error {
	open, err := bf.store.ListOpenBackfills(ctx)
	if err != nil {
		return fmt.Errorf("cannot list open backfills: %w", err)
	}
	for _, row := range open {
		b, err := newBackfill(row)
		if err != nil {
			bf.log.Error("cannot resume backfill", "backfill", row.ID, "error", err)
			continue
		}
		if row.Status == model.BackfillRunning {
			upTo := row.To
			if row.Next > 0 {
				upTo = row.Next - 1
			}
			counts, err := bf.store.CountBackfillRuns(ctx, row.TaskID, row.From, upTo, b.detail)
			if err != nil {
				return fmt.Errorf("cannot recount backfill %d: %w", row.ID, err)
			}
			var ours int64
			b.row.Succeeded, b.row.Failed = 0, 0
			for result, n := range counts {
				ours += n
				switch result {
				case model.ResultRunning:
				case model.ResultSuccess:
					b.row.Succeeded += n
				default:
					b.row.Failed += n
				}
			}
			b.row.Skipped = max(0, b.row.Started-ours)
			b.dirty = true
		}
		runs, err := bf.store.ListBackfillOpenRuns(ctx, row.TaskID, row.Low, row.To)
		if err != nil {
			return fmt.Errorf("cannot list the open runs of backfill %d: %w", row.ID, err)
		}
		bf.set.add(b)
		for _, run := range runs {
			if run.Detail != b.detail {
				continue // another backfill's, which recovers it
			}
			track := func() {
				b.mu.Lock()
				bf.set.track(b, run.Ticket, bfFlight{sched: run.ScheduledAt, count: row.Next == 0 || run.ScheduledAt < row.Next})
				b.mu.Unlock()
			}
			// As a run-now's (adoptInstance): an HTTP run lost in the restart holds its
			// concurrency slot until its deadline, since its endpoint may still be running it.
			if err := bf.recovery.adoptInstance(ctx, run, track); err != nil {
				return err
			}
		}
		if len(runs) > 0 || row.Status == model.BackfillRunning {
			bf.log.Info("resuming backfill", "backfill", row.ID, "task", row.TaskName, "next", row.Next, "status", row.Status)
		}
	}
	return nil
}
