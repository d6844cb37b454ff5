package persist

// Workflows (docs/workflows.md): definitions with their versions, runs, and step runs.
//
// A workflow's definition is a row of workflow (its current version, pause flag and the
// schedule's next fire) and one row of workflow_version per version (the definition as
// JSON): a run reads the version it started with. Runs (workflow_run) and step runs
// (workflow_step) are upserted by the batched writer with the engine's own writes about
// them; what makes a step run exactly once is not these rows but the fire record of its
// ticket (fire.go), written in the same group.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/axe-sched/axe/model"
)

// ErrWorkflowNotFound and ErrWorkflowExists are what the workflow reads and writes report.
var (
	ErrWorkflowNotFound    = errors.New("workflow not found")
	ErrWorkflowExists      = errors.New("workflow exists")
	ErrWorkflowRunNotFound = errors.New("workflow run not found")
	ErrWorkflowRunExists   = errors.New("workflow run exists")
)

// outputLen bounds what a MEDIUMTEXT holds: a step output, a run's params, a definition.
const outputLen = 16<<20 - 1

// WorkflowPut writes a workflow's row. ExpectVersion 0 creates it (ErrWorkflowExists when
// the name is taken); otherwise the row must be at ExpectVersion (model.ErrVersionConflict
// if not). When Def.Version differs from ExpectVersion the definition is stored as that new
// version; when equal only the row's pause flag and next fire change.
type WorkflowPut struct {
	Def           model.WorkflowDef
	NextFire      int64
	ExpectVersion int
}

// WorkflowStore is what the workflow service reads from a store.
type WorkflowStore interface {
	// GetWorkflow returns the workflow by name with its current definition, or
	// ErrWorkflowNotFound.
	GetWorkflow(ctx context.Context, name string) (*model.Workflow, error)
	// ListWorkflows returns every workflow ordered by name; with a shard filter in ctx
	// (WithShards) only those of its shards.
	ListWorkflows(ctx context.Context) ([]model.Workflow, error)
	// WorkflowVersion returns one version of a workflow's definition.
	WorkflowVersion(ctx context.Context, name string, version int) (*model.WorkflowDef, error)
	// ListWorkflowRuns returns a workflow's runs, newest logical time first, at most limit,
	// those with a logical time before before when before > 0.
	ListWorkflowRuns(ctx context.Context, workflow string, before int64, limit int) ([]model.WorkflowRun, error)
	// GetWorkflowRun returns a run and every step run of it, ordered by (step, index,
	// attempt); ErrWorkflowRunNotFound when there is none.
	GetWorkflowRun(ctx context.Context, id string) (*model.WorkflowRun, []model.StepRun, error)
	// OpenWorkflowRuns returns the runs still running, oldest first; with a shard filter in
	// ctx only those of its shards' workflows.
	OpenWorkflowRuns(ctx context.Context) ([]model.WorkflowRun, error)
	// GetWorkflowBackfill returns a workflow's backfill (its latest), or
	// ErrWorkflowBackfillNotFound.
	GetWorkflowBackfill(ctx context.Context, workflow string) (*model.WorkflowBackfill, error)
	// RunningWorkflowBackfills returns the backfills whose cursor has fire times left;
	// with a shard filter in ctx only those of its shards' workflows.
	RunningWorkflowBackfills(ctx context.Context) ([]model.WorkflowBackfill, error)
	// CountOpenWorkflowRuns counts a workflow's runs of one trigger still running.
	CountOpenWorkflowRuns(ctx context.Context, workflow, trigger string) (int, error)
}

// WorkflowBackfillPut writes a workflow's backfill row. Create inserts it, or replaces a
// stored one that is no longer running (ErrWorkflowBackfillRunning when it is); otherwise
// the stored row must still have its cursor at ExpectNext (model.ErrVersionConflict if
// not): a cursor steps once, whoever pumps.
type WorkflowBackfillPut struct {
	Backfill   model.WorkflowBackfill
	Create     bool
	ExpectNext int64
}

// ErrWorkflowBackfillNotFound and ErrWorkflowBackfillRunning are what the backfill reads
// and writes report.
var (
	ErrWorkflowBackfillNotFound = errors.New("no backfill of this workflow")
	ErrWorkflowBackfillRunning  = errors.New("the workflow has a backfill in progress")
)

var wfBackfillCols = []string{"workflow", "from_ms", "to_ms", "parallel", "cron", "timezone", "total", "next_fire",
	"started", "skipped", "state", "actor", "created_at", "updated_at", "ended_at"}

func wfBackfillArgs(b *model.WorkflowBackfill) []any {
	return []any{clip(b.Workflow, nameLen), b.From, b.To, b.Parallel, clip(b.Cron, nameLen), clip(b.Timezone, 64),
		b.Total, b.Next, b.Started, b.Skipped, clip(b.State, shortLen), clip(b.Actor, nameLen), b.CreatedAt, b.UpdatedAt, b.EndedAt}
}

func (s *sqlStore) putWorkflowBackfillTx(ctx context.Context, tx batchTx, p *WorkflowBackfillPut) error {
	b := &p.Backfill
	args := wfBackfillArgs(b)
	set := strings.Join(wfBackfillCols[1:], " = ?, ") + " = ?"
	if p.Create {
		_, err := tx.exec(ctx, "INSERT INTO workflow_backfill ("+strings.Join(wfBackfillCols, ", ")+") VALUES ("+placeholders(len(wfBackfillCols))+")", args)
		if err == nil {
			return nil
		}
		if !s.d.isUniqueViolation(err) {
			return fmt.Errorf("cannot create the backfill of workflow %q: %w", b.Workflow, err)
		}
		n, err := tx.exec(ctx, "UPDATE workflow_backfill SET "+set+" WHERE workflow = ? AND state <> ?",
			append(args[1:], b.Workflow, model.BackfillRunning))
		if err != nil {
			return fmt.Errorf("cannot create the backfill of workflow %q: %w", b.Workflow, err)
		}
		if n == 0 {
			return fmt.Errorf("workflow %q: %w", b.Workflow, ErrWorkflowBackfillRunning)
		}
		return nil
	}
	n, err := tx.exec(ctx, "UPDATE workflow_backfill SET "+set+" WHERE workflow = ? AND next_fire = ? AND state = ?",
		append(args[1:], b.Workflow, p.ExpectNext, model.BackfillRunning))
	if err != nil {
		return fmt.Errorf("cannot write the backfill of workflow %q: %w", b.Workflow, err)
	}
	if n == 0 {
		return fmt.Errorf("the backfill of workflow %q is not at %d: %w", b.Workflow, p.ExpectNext, model.ErrVersionConflict)
	}
	return nil
}

const wfBackfillSelect = `SELECT workflow, from_ms, to_ms, parallel, cron, timezone, total, next_fire, started, skipped, state, actor, created_at, updated_at, ended_at FROM workflow_backfill`

func scanWorkflowBackfill(rows interface{ Scan(...any) error }) (model.WorkflowBackfill, error) {
	var b model.WorkflowBackfill
	err := rows.Scan(&b.Workflow, &b.From, &b.To, &b.Parallel, &b.Cron, &b.Timezone, &b.Total, &b.Next, &b.Started,
		&b.Skipped, &b.State, &b.Actor, &b.CreatedAt, &b.UpdatedAt, &b.EndedAt)
	return b, err
}

func (s *sqlStore) GetWorkflowBackfill(ctx context.Context, workflow string) (*model.WorkflowBackfill, error) {
	b, err := scanWorkflowBackfill(s.db.QueryRowContext(ctx, wfBackfillSelect+` WHERE workflow = ?`, workflow))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%q: %w", workflow, ErrWorkflowBackfillNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read the backfill of workflow %q: %w", workflow, err)
	}
	return &b, nil
}

func (s *sqlStore) RunningWorkflowBackfills(ctx context.Context) ([]model.WorkflowBackfill, error) {
	rows, err := s.db.QueryContext(ctx, wfBackfillSelect+` WHERE state = ?`+shardCond(ctx, "workflow")+` ORDER BY workflow`, model.BackfillRunning)
	if err != nil {
		return nil, fmt.Errorf("cannot list workflow backfills: %w", err)
	}
	defer rows.Close()
	var out []model.WorkflowBackfill
	for rows.Next() {
		b, err := scanWorkflowBackfill(rows)
		if err != nil {
			return nil, fmt.Errorf("cannot read a workflow backfill: %w", err)
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

func (s *sqlStore) CountOpenWorkflowRuns(ctx context.Context, workflow, trigger string) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM workflow_run WHERE state = ? AND workflow = ? AND trig = ?`,
		model.WorkflowRunning, workflow, trigger).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("cannot count the open runs of workflow %q: %w", workflow, err)
	}
	return n, nil
}

var (
	wfRunCols  = []string{"id", "workflow", "version", "scheduled_at", "trig", "params", "state", "created_at", "ended_at", "error"}
	wfStepCols = []string{"run_id", "step", "idx", "attempt", "state", "ticket", "started_at", "ended_at", "output", "error", "items"}
)

// hasWorkflowWrites reports whether b writes workflow rows.
func (b *Batch) hasWorkflowWrites() bool {
	return len(b.WorkflowPuts) > 0 || len(b.WorkflowDeletes) > 0 || len(b.NewWorkflowRuns) > 0 || len(b.WorkflowRuns) > 0 || len(b.StepRuns) > 0 ||
		len(b.WorkflowBackfills) > 0
}

// writeWorkflows applies b's workflow writes in tx: definitions first, then runs, then
// step runs (each upsert: for a key repeated in the batch the last row wins).
func (s *sqlStore) writeWorkflows(ctx context.Context, tx batchTx, b *Batch) error {
	for i := range b.WorkflowPuts {
		if err := s.putWorkflowTx(ctx, tx, &b.WorkflowPuts[i]); err != nil {
			return err
		}
	}
	for _, name := range b.WorkflowDeletes {
		if _, err := tx.exec(ctx, `DELETE FROM workflow WHERE name = ?`, []any{name}); err != nil {
			return fmt.Errorf("cannot delete workflow %q: %w", name, err)
		}
		if _, err := tx.exec(ctx, `DELETE FROM workflow_backfill WHERE workflow = ?`, []any{name}); err != nil {
			return fmt.Errorf("cannot delete the backfill of workflow %q: %w", name, err)
		}
	}
	for i := range b.NewWorkflowRuns {
		// A plain INSERT: the primary key refuses a stored id. No locking read first: two
		// such reads of a missing row take gap locks on MySQL that deadlock the inserts.
		r := &b.NewWorkflowRuns[i]
		if _, err := tx.exec(ctx, "INSERT INTO workflow_run ("+strings.Join(wfRunCols, ", ")+") VALUES ("+placeholders(len(wfRunCols))+")",
			[]any{clip(r.ID, ticketLen), clip(r.Workflow, nameLen), r.Version, r.ScheduledAt, clip(r.Trigger, shortLen),
				string(r.Params), clip(r.State, shortLen), r.CreatedAt, r.EndedAt, clip(r.Error, textLen)}); err != nil {
			if s.d.isUniqueViolation(err) {
				return fmt.Errorf("run %q of workflow %q: %w", r.ID, r.Workflow, ErrWorkflowRunExists)
			}
			return fmt.Errorf("cannot create workflow run %q: %w", r.ID, err)
		}
	}
	if len(b.WorkflowRuns) > 0 {
		last := make(map[string]int, len(b.WorkflowRuns))
		for i := range b.WorkflowRuns {
			last[b.WorkflowRuns[i].ID] = i
		}
		args := make([]any, 0, len(last)*len(wfRunCols))
		for i := range b.WorkflowRuns {
			r := &b.WorkflowRuns[i]
			if last[r.ID] != i {
				continue
			}
			args = append(args, clip(r.ID, ticketLen), clip(r.Workflow, nameLen), r.Version, r.ScheduledAt,
				clip(r.Trigger, shortLen), string(r.Params), clip(r.State, shortLen), r.CreatedAt, r.EndedAt,
				clip(r.Error, textLen))
		}
		head := "INSERT INTO workflow_run (" + strings.Join(wfRunCols, ", ") + ") VALUES "
		if _, err := s.execRowsText(ctx, tx, head, s.d.upsert(wfRunCols[:1], wfRunCols[1:]), len(wfRunCols), args); err != nil {
			return fmt.Errorf("cannot write workflow runs: %w", err)
		}
	}
	if len(b.StepRuns) > 0 {
		type key struct {
			run, step    string
			idx, attempt int
		}
		last := make(map[key]int, len(b.StepRuns))
		for i := range b.StepRuns {
			r := &b.StepRuns[i]
			last[key{r.RunID, r.Step, r.Index, r.Attempt}] = i
		}
		args := make([]any, 0, len(last)*len(wfStepCols))
		for i := range b.StepRuns {
			r := &b.StepRuns[i]
			if last[key{r.RunID, r.Step, r.Index, r.Attempt}] != i {
				continue
			}
			args = append(args, clip(r.RunID, ticketLen), clip(r.Step, nameLen), r.Index, r.Attempt,
				clip(r.State, shortLen), clip(r.Ticket, ticketLen), r.StartedAt, r.EndedAt, string(r.Output),
				clip(r.Error, textLen), r.Items)
		}
		head := "INSERT INTO workflow_step (" + strings.Join(wfStepCols, ", ") + ") VALUES "
		if _, err := s.execRowsText(ctx, tx, head, s.d.upsert(wfStepCols[:4], wfStepCols[4:]), len(wfStepCols), args); err != nil {
			return fmt.Errorf("cannot write step runs: %w", err)
		}
	}
	for i := range b.WorkflowBackfills {
		if err := s.putWorkflowBackfillTx(ctx, tx, &b.WorkflowBackfills[i]); err != nil {
			return err
		}
	}
	return nil
}

func (s *sqlStore) putWorkflowTx(ctx context.Context, tx batchTx, p *WorkflowPut) error {
	d := &p.Def
	paused := 0
	if d.Paused {
		paused = 1
	}
	if p.ExpectVersion == 0 {
		// As a run's insert: the primary key refuses a taken name, without a locking read.
		if _, err := tx.exec(ctx, `INSERT INTO workflow (name, version, grp, paused, next_fire, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			[]any{d.Name, d.Version, clip(d.Group, nameLen), paused, p.NextFire, d.CreatedAt, d.UpdatedAt}); err != nil {
			if s.d.isUniqueViolation(err) {
				return fmt.Errorf("workflow %q: %w", d.Name, ErrWorkflowExists)
			}
			return fmt.Errorf("cannot create workflow %q: %w", d.Name, err)
		}
	} else {
		n, err := tx.exec(ctx, `UPDATE workflow SET version = ?, grp = ?, paused = ?, next_fire = ?, updated_at = ? WHERE name = ? AND version = ?`,
			[]any{d.Version, clip(d.Group, nameLen), paused, p.NextFire, d.UpdatedAt, d.Name, p.ExpectVersion})
		if err != nil {
			return fmt.Errorf("cannot update workflow %q: %w", d.Name, err)
		}
		if n == 0 {
			return fmt.Errorf("workflow %q is not at version %d: %w", d.Name, p.ExpectVersion, model.ErrVersionConflict)
		}
	}
	if d.Version == p.ExpectVersion {
		return nil
	}
	spec, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("cannot encode workflow %q: %w", d.Name, err)
	}
	if _, err := tx.exec(ctx, `INSERT INTO workflow_version (name, version, spec, created_at) VALUES (?, ?, ?, ?)`,
		[]any{d.Name, d.Version, string(spec), d.UpdatedAt}); err != nil {
		if s.d.isUniqueViolation(err) {
			return fmt.Errorf("workflow %q version %d exists: %w", d.Name, d.Version, model.ErrVersionConflict)
		}
		return fmt.Errorf("cannot store workflow %q version %d: %w", d.Name, d.Version, err)
	}
	return nil
}

const workflowSelect = `SELECT w.name, w.version, w.paused, w.next_fire, v.spec FROM workflow w JOIN workflow_version v ON v.name = w.name AND v.version = w.version`

func scanWorkflow(rows interface{ Scan(...any) error }) (*model.Workflow, error) {
	var (
		w      model.Workflow
		name   string
		ver    int
		paused int
		spec   string
	)
	if err := rows.Scan(&name, &ver, &paused, &w.NextFire, &spec); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(spec), &w.Def); err != nil {
		return nil, fmt.Errorf("workflow %q version %d: stored definition unreadable: %w", name, ver, err)
	}
	w.Def.Name, w.Def.Version, w.Def.Paused = name, ver, paused != 0
	return &w, nil
}

func (s *sqlStore) GetWorkflow(ctx context.Context, name string) (*model.Workflow, error) {
	w, err := scanWorkflow(s.db.QueryRowContext(ctx, workflowSelect+` WHERE w.name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%q: %w", name, ErrWorkflowNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read workflow %q: %w", name, err)
	}
	return w, nil
}

func (s *sqlStore) ListWorkflows(ctx context.Context) ([]model.Workflow, error) {
	rows, err := s.db.QueryContext(ctx, workflowSelect+` WHERE 1 = 1`+shardCond(ctx, "w.name")+` ORDER BY w.name`)
	if err != nil {
		return nil, fmt.Errorf("cannot list workflows: %w", err)
	}
	defer rows.Close()
	var out []model.Workflow
	for rows.Next() {
		w, err := scanWorkflow(rows)
		if err != nil {
			return nil, fmt.Errorf("cannot read workflow: %w", err)
		}
		out = append(out, *w)
	}
	return out, rows.Err()
}

func (s *sqlStore) WorkflowVersion(ctx context.Context, name string, version int) (*model.WorkflowDef, error) {
	var spec string
	err := s.db.QueryRowContext(ctx, `SELECT spec FROM workflow_version WHERE name = ? AND version = ?`, name, version).Scan(&spec)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%q version %d: %w", name, version, ErrWorkflowNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read workflow %q version %d: %w", name, version, err)
	}
	var d model.WorkflowDef
	if err := json.Unmarshal([]byte(spec), &d); err != nil {
		return nil, fmt.Errorf("workflow %q version %d: stored definition unreadable: %w", name, version, err)
	}
	d.Name, d.Version = name, version
	return &d, nil
}

const wfRunSelect = `SELECT id, workflow, version, scheduled_at, trig, params, state, created_at, ended_at, error FROM workflow_run`

func scanWorkflowRun(rows interface{ Scan(...any) error }) (model.WorkflowRun, error) {
	var r model.WorkflowRun
	var params string
	err := rows.Scan(&r.ID, &r.Workflow, &r.Version, &r.ScheduledAt, &r.Trigger, &params, &r.State, &r.CreatedAt, &r.EndedAt, &r.Error)
	if params != "" {
		r.Params = json.RawMessage(params)
	}
	return r, err
}

func (s *sqlStore) queryWorkflowRuns(ctx context.Context, q string, args ...any) ([]model.WorkflowRun, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("cannot list workflow runs: %w", err)
	}
	defer rows.Close()
	var out []model.WorkflowRun
	for rows.Next() {
		r, err := scanWorkflowRun(rows)
		if err != nil {
			return nil, fmt.Errorf("cannot read workflow run: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func (s *sqlStore) ListWorkflowRuns(ctx context.Context, workflow string, before int64, limit int) ([]model.WorkflowRun, error) {
	if limit <= 0 {
		limit = 100
	}
	if before <= 0 {
		before = 1 << 62
	}
	return s.queryWorkflowRuns(ctx, wfRunSelect+` WHERE workflow = ? AND scheduled_at < ? ORDER BY scheduled_at DESC, id DESC LIMIT ?`, workflow, before, limit)
}

func (s *sqlStore) OpenWorkflowRuns(ctx context.Context) ([]model.WorkflowRun, error) {
	return s.queryWorkflowRuns(ctx, wfRunSelect+` WHERE state = ?`+shardCond(ctx, "workflow")+` ORDER BY created_at, id`, model.WorkflowRunning)
}

func (s *sqlStore) GetWorkflowRun(ctx context.Context, id string) (*model.WorkflowRun, []model.StepRun, error) {
	r, err := scanWorkflowRun(s.db.QueryRowContext(ctx, wfRunSelect+` WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil, fmt.Errorf("%q: %w", id, ErrWorkflowRunNotFound)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("cannot read workflow run %q: %w", id, err)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+strings.Join(wfStepCols, ", ")+` FROM workflow_step WHERE run_id = ? ORDER BY step, idx, attempt`, id)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot read the steps of workflow run %q: %w", id, err)
	}
	defer rows.Close()
	var steps []model.StepRun
	for rows.Next() {
		var sr model.StepRun
		var out string
		if err := rows.Scan(&sr.RunID, &sr.Step, &sr.Index, &sr.Attempt, &sr.State, &sr.Ticket, &sr.StartedAt, &sr.EndedAt, &out, &sr.Error, &sr.Items); err != nil {
			return nil, nil, fmt.Errorf("cannot read a step of workflow run %q: %w", id, err)
		}
		if out != "" {
			sr.Output = json.RawMessage(out)
		}
		steps = append(steps, sr)
	}
	return &r, steps, rows.Err()
}
