package persist

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/axe-sched/axe/model"
)

// Browser is implemented by the SQL stores: the console's listings beyond a task's own
// history, each a keyset walk of an index with a bounded count beside it.
type Browser interface {
	// CountMatching counts the tasks f matches (its cursor and limit ignored), stopping at
	// bound: the answer is min(matches, bound+1), so bound+1 means "more than bound".
	CountMatching(ctx context.Context, f TaskFilter, bound int) (int64, error)
	// ListRunsPage returns one page of the runs f matches, newest first (by scheduled_at,
	// then ticket), and the key the next page starts after.
	ListRunsPage(ctx context.Context, f RunFilter) (RunPage, error)
	// CountRuns counts the runs f matches (cursor and limit ignored) among the newest
	// RunScanMax runs of its task or time range, stopping at bound as CountMatching does.
	CountRuns(ctx context.Context, f RunFilter, bound int) (int64, error)
	// ListActionsPage returns the task's action records written before f.BeforeAt (0: the
	// newest), newest first, of the kinds in f.Actions (none: every kind).
	ListActionsPage(ctx context.Context, f ActionFilter) ([]model.Action, error)
	// CountActionKinds counts the task's action records by kind among its newest scan
	// (ActionScanMax when 0): a bounded walk of its index, however many records it has.
	CountActionKinds(ctx context.Context, taskID int64, scan int) (map[string]int64, error)
	// AddMinuteStats adds each row's counts to the stored row of its (minute, node),
	// creating it when missing, and deletes the rows of minutes before dropBefore.
	AddMinuteStats(ctx context.Context, rows []MinuteStat, dropBefore int64) error
	// MinuteStats returns the minutes in [from, to) that have rows, oldest first, each
	// summed over the nodes.
	MinuteStats(ctx context.Context, from, to int64) ([]MinuteStat, error)
}

var _ Browser = (*sqlStore)(nil)

// RunScanMax bounds how many runs one page of a filtered run listing examines: a result or
// group that few runs have would otherwise walk the whole history (no index holds the
// result: writing it would move every run's entry, schema step 2). A page that reached it
// says so (RunPage.Scanned), and its cursor continues the walk where it stopped.
const RunScanMax = 20000

// RunFilter narrows ListRunsPage. Zero fields do not filter.
type RunFilter struct {
	TaskID  int64    // one task's runs (idx_task_run_task); 0: every task's
	Group   string   // runs of the tasks now in this group
	Results []string // any of these results
	From    int64    // scheduled_at >= From (Unix ms)
	To      int64    // scheduled_at < To
	// BeforeAt and BeforeTicket are the key of the previous page's last row: the page holds
	// only older rows. BeforeAt 0 starts at the newest.
	BeforeAt     int64
	BeforeTicket string
	Limit        int // rows per page; 0 means 100
	// ScanMax bounds the runs a filtered page examines; 0 means RunScanMax.
	ScanMax int
}

// RunPage is one page of ListRunsPage.
type RunPage struct {
	Runs []model.Run
	// More tells whether older rows may follow; the next page starts after NextAt and
	// NextTicket, the last row examined, which is not always the last row returned.
	More       bool
	NextAt     int64
	NextTicket string
	// Scanned is how many runs the page examined; RunScanMax means it stopped there.
	Scanned int
}

// ActionFilter narrows ListActionsPage.
type ActionFilter struct {
	TaskID   int64
	BeforeAt int64    // only records with at < BeforeAt; 0: from the newest
	Actions  []string // any of these kinds; none: all
	Limit    int      // 0 means 100
}

// MinuteStat is one minute of one node's counters, or of all nodes summed.
type MinuteStat struct {
	Minute    int64  `json:"at"` // the minute's start, Unix ms
	Node      string `json:"-"`
	Fires     int64  `json:"fires"`
	Failures  int64  `json:"failures"`
	LateSumMS int64  `json:"late_sum_ms"` // the fires' lateness, summed
	LateCount int64  `json:"late_count"`  // how many fires it sums
}

// taskTerms returns the WHERE terms and arguments of f's filters on columns of d and r.
func (s *sqlStore) taskTerms(f TaskFilter) ([]string, []any) {
	var (
		where []string
		args  []any
	)
	if f.Group != "" {
		where = append(where, "d.grp = ?")
		args = append(args, f.Group)
	}
	switch f.State {
	case "":
	case model.StateRunning:
		// A fire in flight whose end is not written yet: its runtime keeps the state it fired
		// from, and its fire record is the RUNNING marker (ListOpenFires). Callers show it
		// RUNNING ...
		where = append(where, "(r.state = ? OR "+openFireOfRuntime+")")
		args = append(args, string(f.State))
	case model.StateScheduled, model.StateRetrying:
		// ... and these pages leave them out.
		where = append(where, "r.state = ? AND NOT "+openFireOfRuntime)
		args = append(args, string(f.State))
	default:
		where = append(where, "r.state = ?")
		args = append(args, string(f.State))
	}
	if f.LastResult != "" {
		where = append(where, "r.last_result = ?")
		args = append(args, f.LastResult)
	}
	if f.FailedSince > 0 {
		where = append(where, "r.last_failure_at >= ?")
		args = append(args, f.FailedSince)
	}
	if f.IDs != nil {
		if len(f.IDs) == 0 {
			where = append(where, "1 = 0")
		} else {
			where = append(where, "d.id IN ("+placeholders(len(f.IDs))+")")
			for _, id := range f.IDs {
				args = append(args, id)
			}
		}
	}
	// Each word of the search is a substring of the name, the group or the callback's JSON
	// (URL, app, handler), without case (LOWER: every letter on MySQL, the ASCII ones on
	// SQLite; INSTR, not LIKE, so % and _ are plain characters). Every word must be found.
	// No index serves it, so a page walks the order's index until it is full.
	for _, w := range SearchWords(f.Search) {
		where = append(where, "(INSTR(LOWER(d.name), ?) > 0 OR INSTR(LOWER(d.grp), ?) > 0 OR INSTR(LOWER(d.callback), ?) > 0)")
		args = append(args, w, w, w)
	}
	return where, args
}

// likeEscaper escapes LIKE's wildcards with '!'.
var likeEscaper = strings.NewReplacer("!", "!!", "%", "!%", "_", "!_")

// runtimeOnly reports whether f filters on runtime columns, which the runtime table is
// best read first for when few rows match (see listFrom).
func (f TaskFilter) runtimeOnly() bool {
	return f.State != "" || f.LastResult != "" || f.FailedSince > 0
}

// CountMatching counts up to bound+1 of the tasks f matches. It reads at most bound+1
// matching rows: an unfiltered count of a million tasks reads 10,001 index entries for a
// bound of 10,000, not the table. A filter that few tasks match reads every row it must
// reject, as the page of the same filter does.
func (s *sqlStore) CountMatching(ctx context.Context, f TaskFilter, bound int) (int64, error) {
	where, args := s.taskTerms(f)
	if p := f.NamePrefix; p != "" {
		kf := TaskFilter{NamePrefix: p, Order: OrderName}
		var err error
		if where, args, _, err = kf.keyset(where, args); err != nil {
			return 0, err
		}
	}
	from := taskJoin
	if len(where) == 0 {
		from = " FROM task_def d"
	} else if f.runtimeOnly() {
		from = " FROM " + s.d.stateFrom
	}
	q := "SELECT COUNT(*) FROM (SELECT 1 AS one" + from
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " LIMIT " + strconv.Itoa(bound+1) + ") c"
	var n int64
	if err := s.db.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("cannot count tasks: %w", err)
	}
	return n, nil
}

// runRange returns the WHERE terms of f's time range and, with cursor, of its page cursor.
func runRange(f RunFilter, cursor bool) ([]string, []any) {
	var (
		where []string
		args  []any
	)
	if f.From > 0 {
		where = append(where, "scheduled_at >= ?")
		args = append(args, f.From)
	}
	if f.To > 0 {
		where = append(where, "scheduled_at < ?")
		args = append(args, f.To)
	}
	if cursor && f.BeforeAt > 0 {
		where = append(where, "(scheduled_at < ? OR (scheduled_at = ? AND ticket < ?))")
		args = append(args, f.BeforeAt, f.BeforeAt, f.BeforeTicket)
	}
	return where, args
}

// runWindow returns the inner walk of a run listing: up to scan rows of f's task or of all
// runs in f's time range and before its cursor, newest first, read in index order.
func (s *sqlStore) runWindow(f RunFilter, cols string, scan int, cursor bool) (string, []any) {
	where, args := runRange(f, cursor)
	idx := s.d.runsByTime
	if f.TaskID > 0 {
		where = append([]string{"task_id = ?"}, where...)
		args = append([]any{f.TaskID}, args...)
		idx = s.d.runsByTask
	} else if s.d.runsAllCond != "" {
		where = append([]string{s.d.runsAllCond}, where...)
	}
	q := "SELECT " + cols + " FROM task_run " + idx
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY scheduled_at DESC, ticket DESC LIMIT " + strconv.Itoa(scan)
	return q, args
}

// runOuter filters the rows of a run window w by result and group.
func runOuter(f RunFilter) (string, []any) {
	var (
		join  string
		where []string
		args  []any
	)
	if f.Group != "" {
		join = " JOIN task_def d ON d.id = w.task_id"
		where = append(where, "d.grp = ?")
		args = append(args, f.Group)
	}
	if len(f.Results) > 0 {
		where = append(where, "w.result IN ("+placeholders(len(f.Results))+")")
		for _, r := range f.Results {
			args = append(args, r)
		}
	}
	if len(where) == 0 {
		return join, nil
	}
	return join + " WHERE " + strings.Join(where, " AND "), args
}

func (f RunFilter) filtered() bool { return f.Group != "" || len(f.Results) > 0 }

func (f RunFilter) scanMax() int {
	if f.ScanMax > 0 {
		return f.ScanMax
	}
	return RunScanMax
}

// ListRunsPage returns one page of the runs f matches, newest first. Unfiltered (or by
// task alone) it reads the page's rows off the index; with a result or group filter it
// examines at most RunScanMax runs. On MySQL the open run-now instances are outside the
// time index's NULL part (schema step 7) and are merged in from their own part.
func (s *sqlStore) ListRunsPage(ctx context.Context, f RunFilter) (RunPage, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	scan := f.Limit + 1
	if f.filtered() {
		scan = f.scanMax()
	}
	cols := strings.Join(runCols, ", ")
	inner, args := s.runWindow(f, cols, scan, true)
	outer, oargs := runOuter(f)
	q := "SELECT w." + strings.ReplaceAll(cols, ", ", ", w.") + " FROM (" + inner + ") w" + outer +
		" ORDER BY w.scheduled_at DESC, w.ticket DESC LIMIT " + strconv.Itoa(f.Limit+1)
	runs, err := s.queryRuns(ctx, q, append(args, oargs...)...)
	if err != nil {
		return RunPage{}, err
	}
	var page RunPage
	page.Scanned = len(runs)
	// A filtered walk may end at the window's bound before the page is full: where it
	// ended (the smallest key of its oldest time) is where the next page starts.
	var end *model.Run
	if f.filtered() {
		kq, kargs := s.runWindow(f, "scheduled_at, ticket", scan, true)
		var at int64
		if err := s.db.QueryRowContext(ctx, "SELECT COUNT(*), COALESCE(MIN(scheduled_at), 0) FROM ("+kq+") k", kargs...).Scan(&page.Scanned, &at); err != nil {
			return RunPage{}, fmt.Errorf("cannot read where the run window ended: %w", err)
		}
		if page.Scanned >= scan {
			end = &model.Run{ScheduledAt: at}
			if err := s.db.QueryRowContext(ctx, "SELECT ticket FROM ("+kq+") k WHERE scheduled_at = ? ORDER BY ticket LIMIT 1",
				append(kargs, at)...).Scan(&end.Ticket); err != nil {
				return RunPage{}, fmt.Errorf("cannot read where the run window ended: %w", err)
			}
		}
	}
	if f.TaskID == 0 && s.d.runsOpenCond != "" {
		open, err := s.openRunsPage(ctx, f, cols)
		if err != nil {
			return RunPage{}, err
		}
		if end != nil {
			// Those older than the window's end belong to the pages after it.
			open = slices.DeleteFunc(open, func(r model.Run) bool { return newerRun(end, &r) })
		}
		runs = mergeRuns(runs, open)
	}
	switch {
	case len(runs) > f.Limit:
		runs = runs[:f.Limit]
		last := runs[len(runs)-1]
		page.More, page.NextAt, page.NextTicket = true, last.ScheduledAt, last.Ticket
	case end != nil:
		page.More, page.NextAt, page.NextTicket = true, end.ScheduledAt, end.Ticket
	}
	page.Runs = runs
	return page, nil
}

// openRunsPage reads the open run-now instances f matches from the index part that holds
// them (MySQL), up to a page and a row.
func (s *sqlStore) openRunsPage(ctx context.Context, f RunFilter, cols string) ([]model.Run, error) {
	where, args := runRange(f, true)
	where = append([]string{s.d.runsOpenCond}, where...)
	inner := "SELECT " + cols + " FROM task_run WHERE " + strings.Join(where, " AND ") +
		" ORDER BY scheduled_at DESC, ticket DESC LIMIT " + strconv.Itoa(f.Limit+1)
	outer, oargs := runOuter(f)
	q := "SELECT w." + strings.ReplaceAll(cols, ", ", ", w.") + " FROM (" + inner + ") w" + outer
	return s.queryRuns(ctx, q, append(args, oargs...)...)
}

// mergeRuns merges two lists sorted newest first into one.
func mergeRuns(a, b []model.Run) []model.Run {
	if len(b) == 0 {
		return a
	}
	out := make([]model.Run, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		if j == len(b) || (i < len(a) && newerRun(&a[i], &b[j])) {
			out = append(out, a[i])
			i++
		} else {
			out = append(out, b[j])
			j++
		}
	}
	return out
}

func newerRun(x, y *model.Run) bool {
	if x.ScheduledAt != y.ScheduledAt {
		return x.ScheduledAt > y.ScheduledAt
	}
	return x.Ticket > y.Ticket
}

// CountRuns counts up to bound+1 of the runs f matches among the newest RunScanMax of its
// window.
func (s *sqlStore) CountRuns(ctx context.Context, f RunFilter, bound int) (int64, error) {
	scan := bound + 1
	if f.filtered() {
		scan = f.scanMax()
	}
	inner, args := s.runWindow(f, "task_id, result", scan, false)
	outer, oargs := runOuter(f)
	q := "SELECT COUNT(*) FROM (SELECT 1 AS one FROM (" + inner + ") w" + outer + " LIMIT " + strconv.Itoa(bound+1) + ") c"
	var n int64
	if err := s.db.QueryRowContext(ctx, q, append(args, oargs...)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("cannot count runs: %w", err)
	}
	if f.TaskID == 0 && s.d.runsOpenCond != "" {
		var k int64
		where, oa := runRange(f, false)
		oq := "SELECT COUNT(*) FROM (SELECT task_id, result FROM task_run WHERE " +
			strings.Join(append([]string{s.d.runsOpenCond}, where...), " AND ") + ") w" + outer
		if err := s.db.QueryRowContext(ctx, oq, append(oa, oargs...)...).Scan(&k); err != nil {
			return 0, fmt.Errorf("cannot count runs: %w", err)
		}
		n = min(n+k, int64(bound+1))
	}
	return n, nil
}

// ListActionsPage returns a page of the task's action records, newest first, read off
// idx_task_action_task (task_id, id); a kind filter is applied on the way.
func (s *sqlStore) ListActionsPage(ctx context.Context, f ActionFilter) ([]model.Action, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	where := []string{"task_id = ?"}
	args := []any{f.TaskID}
	if f.BeforeAt > 0 {
		// Ids follow time, so the walk down the (task_id, id) index meets the first record
		// before BeforeAt after the page's newer records only.
		where = append(where, "at < ?")
		args = append(args, f.BeforeAt)
	}
	if len(f.Actions) > 0 {
		where = append(where, "action IN ("+placeholders(len(f.Actions))+")")
		for _, a := range f.Actions {
			args = append(args, a)
		}
	}
	return s.queryActions(ctx, "SELECT id, "+strings.Join(actionCols, ", ")+" FROM task_action WHERE "+strings.Join(where, " AND ")+
		" ORDER BY id DESC"+limitClause(f.Limit), args...)
}

// ActionScanMax bounds how many of a task's newest action records CountActionKinds reads.
const ActionScanMax = 100000

// CountActionKinds counts the task's newest scan action records by kind, read off
// idx_task_action_task (task_id, id).
func (s *sqlStore) CountActionKinds(ctx context.Context, taskID int64, scan int) (map[string]int64, error) {
	if scan <= 0 {
		scan = ActionScanMax
	}
	rows, err := s.db.QueryContext(ctx, `SELECT action, COUNT(*) FROM (SELECT action FROM task_action WHERE task_id = ?
		ORDER BY id DESC LIMIT ?) newest GROUP BY action`, taskID, scan)
	if err != nil {
		return nil, fmt.Errorf("cannot count actions: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var (
			kind string
			n    int64
		)
		if err := rows.Scan(&kind, &n); err != nil {
			return nil, fmt.Errorf("cannot scan action count: %w", err)
		}
		out[kind] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot count actions: %w", err)
	}
	return out, nil
}

// AddMinuteStats adds rows to minute_stats and drops the minutes before dropBefore, in one
// transaction. It is a node's one write a minute, outside the batch path.
func (s *sqlStore) AddMinuteStats(ctx context.Context, rows []MinuteStat, dropBefore int64) error {
	tx, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("cannot begin writing minute statistics: %w", err)
	}
	defer rollback(tx)
	for _, m := range rows {
		// An update first, then an insert where none matched: the same two statements on
		// both stores, and a restart within a minute adds to the row its predecessor wrote.
		res, err := tx.ExecContext(ctx, `UPDATE minute_stats SET fires = fires + ?, failures = failures + ?,
			late_sum_ms = late_sum_ms + ?, late_count = late_count + ?
			WHERE minute = ? AND node = ?`,
			m.Fires, m.Failures, m.LateSumMS, m.LateCount, m.Minute, clip(m.Node, nameLen))
		if err != nil {
			return fmt.Errorf("cannot write minute statistics: %w", err)
		}
		if n, err := res.RowsAffected(); err == nil && n > 0 {
			continue
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO minute_stats (minute, node, fires, failures, late_sum_ms, late_count)
			VALUES (?, ?, ?, ?, ?, ?)`, m.Minute, clip(m.Node, nameLen), m.Fires, m.Failures, m.LateSumMS, m.LateCount); err != nil {
			return fmt.Errorf("cannot write minute statistics: %w", err)
		}
	}
	if dropBefore > 0 {
		if _, err := tx.ExecContext(ctx, `DELETE FROM minute_stats WHERE minute < ?`, dropBefore); err != nil {
			return fmt.Errorf("cannot prune minute statistics: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("cannot commit minute statistics: %w", err)
	}
	return nil
}

// MinuteStats sums minute_stats over the nodes for the minutes in [from, to), a range of
// the primary key.
func (s *sqlStore) MinuteStats(ctx context.Context, from, to int64) ([]MinuteStat, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT minute, SUM(fires), SUM(failures), SUM(late_sum_ms), SUM(late_count)
		FROM minute_stats WHERE minute >= ? AND minute < ? GROUP BY minute ORDER BY minute`, from, to)
	if err != nil {
		return nil, fmt.Errorf("cannot read minute statistics: %w", err)
	}
	defer rows.Close()
	var out []MinuteStat
	for rows.Next() {
		var m MinuteStat
		var sums [4]sql.NullInt64
		if err := rows.Scan(&m.Minute, &sums[0], &sums[1], &sums[2], &sums[3]); err != nil {
			return nil, fmt.Errorf("cannot scan minute statistics: %w", err)
		}
		m.Fires, m.Failures, m.LateSumMS, m.LateCount = sums[0].Int64, sums[1].Int64, sums[2].Int64, sums[3].Int64
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read minute statistics: %w", err)
	}
	return out, nil
}
