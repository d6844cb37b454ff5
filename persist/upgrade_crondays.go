package persist

import (
	"context"
	"fmt"
	"time"

	"github.com/axe-sched/axe/lib/cron"
)

// cronDaysStep is schema step 8 on both stores. The unix dialect now combines its two day
// fields as cron does (a field starting with * makes both apply); before, either field
// matched whenever both were restricted. A stored task must fire on the same days after an
// upgrade as before it, so this step rewrites each stored unix expression that the two
// rules read differently to a spelling both read alike ("*/2" in the day of month becomes
// "1-31/2", "5,*" becomes "*"; cron.KeepDays), and records an update action on the task
// that says so. Only a day field holding a * or a ? beside other text can read differently
// (a bare * or ? covers the whole field under both rules): the query takes every expression
// with either, and KeepDays skips the rest without comparing fire days. It changes no table, and a re-run after a crash finds the rewritten expressions
// unchanged by KeepDays, so it is re-runnable. An expression that no spelling keeps fails
// the step, naming the task: axe then refuses to start rather than move its fires.
//
// persist imports lib/cron here only: the package is a leaf (it imports nothing of axe),
// and the rewrite must happen before any engine reads the tasks.
var cronDaysStep = migration{
	version: 8,
	name:    "cron day fields as cron combines them",
	fn:      keepCronDays,
}

func keepCronDays(ctx context.Context, q execQuerier) error {
	rows, err := q.QueryContext(ctx, `SELECT d.id, d.name, d.cron, COALESCE(r.state, '')
		FROM task_def d LEFT JOIN task_runtime r ON r.task_id = d.id
		WHERE d.trigger_type = 'cron' AND d.cron_dialect = 'unix' AND (d.cron LIKE '%*%' OR d.cron LIKE '%?%')`)
	if err != nil {
		return fmt.Errorf("cannot read cron tasks: %w", err)
	}
	type rewrite struct {
		id             int64
		name, from, to string
		state          string
	}
	var todo []rewrite
	for rows.Next() {
		var r rewrite
		if err := rows.Scan(&r.id, &r.name, &r.from, &r.state); err != nil {
			rows.Close()
			return fmt.Errorf("cannot read cron tasks: %w", err)
		}
		to, changed, err := cron.KeepDays(r.from)
		if err != nil {
			rows.Close()
			return fmt.Errorf("task %q: cron %q: %w; edit it with an axe of the version before, then upgrade", r.name, r.from, err)
		}
		if !changed {
			continue
		}
		if len(to) > nameLen {
			rows.Close()
			return fmt.Errorf("task %q: cron %q would need %q (%d bytes, over %d) to keep its days; shorten it with an axe of the version before, then upgrade", r.name, r.from, to, len(to), nameLen)
		}
		r.to = to
		todo = append(todo, r)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("cannot read cron tasks: %w", err)
	}
	rows.Close()
	now := time.Now().UnixMilli()
	for _, r := range todo {
		if _, err := q.ExecContext(ctx, `UPDATE task_def SET cron = ? WHERE id = ? AND cron = ?`, r.to, r.id, r.from); err != nil {
			return fmt.Errorf("cannot rewrite the cron of task %q: %w", r.name, err)
		}
		detail := fmt.Sprintf("cron %q is now %q: it fires on the same days; axe now combines the day fields as cron does, and reads %q as the days matching both fields (docs/migrating.md)", r.from, r.to, r.from)
		if _, err := q.ExecContext(ctx, `INSERT INTO task_action (task_id, task_name, ticket, action, from_state, to_state, actor, at, detail)
			VALUES (?, ?, '', 'update', ?, ?, 'upgrade', ?, ?)`, r.id, r.name, r.state, r.state, now, detail); err != nil {
			return fmt.Errorf("cannot record the cron rewrite of task %q: %w", r.name, err)
		}
	}
	return nil
}
