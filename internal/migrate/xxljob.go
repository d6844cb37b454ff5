package migrate

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/axe-sched/axe/lib/cron"
)

// XXLOptions configures ReadXXLJob.
type XXLOptions struct {
	// Zone is the zone XXL-JOB's server computed its schedules in. Required.
	Zone string
	// Paused imports every task paused, so that XXL-JOB and axe never both fire a job;
	// jobs stopped in XXL-JOB are imported paused either way.
	Paused bool
	// Timeout is the timeout of jobs without one (executor_timeout 0). Defaults to
	// CrontabTimeoutDefault.
	Timeout time.Duration
	// Now is the reference time of the dry run's next fires. Defaults to time.Now().
	Now time.Time
}

// xxlJob is one row of xxl_job_info, both schema generations read into one shape: up to
// 2.2 the schedule is job_cron (always a Quartz cron); from 2.3 it is schedule_type and
// schedule_conf, with misfire_strategy.
type xxlJob struct {
	id                               int64
	group                            int64
	desc, author, alarmEmail         string
	scheduleType, scheduleConf       string
	misfire                          string
	route, handler, param, block     string
	timeoutSec, retries              int
	glueType, childIDs               string
	triggerStatus                    int
	triggerLastTime, triggerNextTime int64
}

type xxlGroup struct {
	id          int64
	appName     string
	addressType int
	addressList string
	// hasToken is set when the group keeps an access token of its own (newer schemas).
	hasToken bool
}

// StoppedGroupSuffix ends the group of a job stopped in XXL-JOB: job N of app A that was
// stopped (trigger_status 0) becomes task xxl-A-N in group A.stopped, paused, so that
// resuming group A for the cut-over never starts it; resuming the task by name does.
const StoppedGroupSuffix = ".stopped"

// XXL-JOB's values of the columns the importer maps.
var (
	// xxlRoutes maps executor_route_strategy to the axe route that does the same.
	xxlRoutes = map[string]string{
		"ROUND":           "round_robin",
		"RANDOM":          "random",
		"CONSISTENT_HASH": "consistent_hash",
		"FAILOVER":        "failover",
	}
	// xxlRouteNames describes the strategies axe has no equal of.
	xxlRouteNames = map[string]string{
		"FIRST":                 "always the first executor",
		"LAST":                  "always the last executor",
		"LEAST_FREQUENTLY_USED": "the least frequently used executor",
		"LEAST_RECENTLY_USED":   "the least recently used executor",
		"BUSYOVER":              "the first idle executor",
	}
	// xxlBlocks maps executor_block_strategy, what XXL-JOB's executor does with a trigger
	// that reaches it while the job runs there, to the overlap policy that does the same
	// for a fire due while the task's run is in flight.
	//   - SERIAL_EXECUTION (the default): the trigger joins the job's FIFO queue and runs
	//     after the ones before it: buffer_all, each fire after the run before it.
	//   - DISCARD_LATER: the trigger is dropped (and its trigger log marked failed): skip.
	//   - COVER_EARLY: the running one is killed, the queue cleared, and the trigger runs:
	//     cancel_other.
	xxlBlocks = map[string]string{
		"":                 "buffer_all", // columns of jobs saved before the strategy existed read ""
		"SERIAL_EXECUTION": "buffer_all",
		"DISCARD_LATER":    "skip",
		"COVER_EARLY":      "cancel_other",
	}
	// xxlBlockNotes says how a mapped block strategy differs from its overlap policy.
	xxlBlockNotes = map[string]string{
		"SERIAL_EXECUTION": "block strategy SERIAL_EXECUTION: overlap_policy buffer_all runs the fires due during a run one after another, oldest first, as XXL-JOB's queue does; " +
			"XXL-JOB's queue has no bound and is the executor's, so one queue per executor; axe keeps the newest 100 fires of the task (older ones are skipped and recorded) whichever executor runs them",
		"DISCARD_LATER": "block strategy DISCARD_LATER: overlap_policy skip drops the fires due during a run as XXL-JOB drops those triggers; " +
			"XXL-JOB logs each as a failed trigger (alarm and fail-retry included), axe records them as skipped in the task's timeline",
	}
	safeName = regexp.MustCompile(`[^A-Za-z0-9._:-]+`)
)

// ReadXXLJob reads an XXL-JOB admin database (xxl_job_group, xxl_job_info, of any schema
// generation from 2.1 on; see readXXLSchema) and converts every job. The task of job N of
// executor app A is named xxl-A-N, in group A, with an executor callback to app A and the
// job's handler. A job stopped in XXL-JOB goes to group A.stopped instead (see
// StoppedGroupSuffix), paused; a child job, which XXL-JOB runs after its parent whatever
// its own trigger_status, stays in group A.
func ReadXXLJob(ctx context.Context, db *sql.DB, opt XXLOptions) (*Plan, error) {
	if opt.Timeout == 0 {
		opt.Timeout = CrontabTimeoutDefault
	}
	if opt.Now.IsZero() {
		opt.Now = time.Now()
	}
	if _, err := cron.LoadLocation(opt.Zone); err != nil {
		return nil, fmt.Errorf("cannot read XXL-JOB: timezone: %w", err)
	}
	schema, err := readXXLSchema(ctx, db)
	if err != nil {
		return nil, err
	}
	groups, err := readXXLGroups(ctx, db, schema)
	if err != nil {
		return nil, err
	}
	jobs, err := readXXLJobs(ctx, db, schema)
	if err != nil {
		return nil, err
	}
	p := &Plan{Notes: []string{"XXL-JOB schema: " + schema.generation}}
	apps := map[string]bool{}
	for _, g := range groups {
		apps[safeName.ReplaceAllString(g.appName, "-")] = true
		if g.addressType == 1 && strings.TrimSpace(g.addressList) != "" {
			p.NotCarried = append(p.NotCarried, routine("addresses", "executor group %s: addresses entered by hand (%s): axe executors register themselves; start them with this app name and axe's address", g.appName, g.addressList))
		}
		if g.hasToken {
			p.NotCarried = append(p.NotCarried, routine("access_token", "executor group %s: its access token: axe executors authenticate with axe's token (--token)", g.appName))
		}
	}

	// Names first: children refer to their parents by name.
	byID := map[int64]*xxlJob{}
	names := map[int64]string{}
	for i := range jobs {
		j := &jobs[i]
		byID[j.id] = j
		if g, ok := groups[j.group]; ok {
			names[j.id] = "xxl-" + safeName.ReplaceAllString(g.appName, "-") + "-" + strconv.FormatInt(j.id, 10)
		}
	}
	parents := map[int64][]int64{} // child id -> parent ids
	for _, j := range jobs {
		for _, s := range strings.Split(j.childIDs, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			c, err := strconv.ParseInt(s, 10, 64)
			if _, ok := byID[c]; err != nil || !ok {
				p.NotCarried = append(p.NotCarried, change("child", "job %d: its child job %q does not exist, so nothing runs after it", j.id, s))
				continue
			}
			parents[c] = append(parents[c], j.id)
		}
	}

	items := map[int64]Item{}
	stopped := 0
	for _, j := range jobs {
		src := fmt.Sprintf("job %d", j.id)
		it, reason := convertXXLJob(j, groups, names, parents[j.id], opt)
		if reason == "" && strings.HasSuffix(it.Task.Group, StoppedGroupSuffix) && apps[it.Task.Group] {
			reason = fmt.Sprintf("it is stopped in XXL-JOB and goes to group %s, but an executor app of that name exists; rename one of them", it.Task.Group)
		}
		if reason != "" {
			p.Bad = append(p.Bad, Bad{Source: src, Reason: reason})
			continue
		}
		it.Source = src
		// The server's own rules, so that the dry run says what --yes would meet.
		one := Plan{Items: []Item{it}}
		if validateTasks(&one); len(one.Bad) > 0 {
			p.Bad = append(p.Bad, one.Bad...)
			continue
		}
		if strings.HasSuffix(it.Task.Group, StoppedGroupSuffix) {
			stopped++
		}
		items[j.id] = it
	}
	// A child whose parent did not convert cannot depend on it.
	for changed := true; changed; {
		changed = false
		for id, it := range items {
			for _, par := range parents[id] {
				if _, ok := items[par]; !ok {
					p.Bad = append(p.Bad, Bad{Source: it.Source, Reason: fmt.Sprintf("its parent job %d is not imported, and a child job becomes a task that runs after its parents", par)})
					delete(items, id)
					changed = true
					break
				}
			}
		}
	}
	order, cyclic := topoOrder(items, parents)
	for _, id := range cyclic {
		p.Bad = append(p.Bad, Bad{Source: items[id].Source, Reason: "its child jobs lead back to it; axe refuses dependency cycles"})
	}
	for _, id := range order {
		p.Items = append(p.Items, items[id])
	}
	if stopped > 0 {
		p.Notes = append(p.Notes, fmt.Sprintf("%d job(s) stopped in XXL-JOB (trigger_status 0) go to group APP%s, paused: resuming group APP leaves them stopped; axe task resume NAME starts one", stopped, StoppedGroupSuffix))
	}
	slices.SortFunc(p.Bad, func(a, b Bad) int { return strings.Compare(a.Source, b.Source) })
	return p, nil
}

// convertXXLJob maps one job, or returns why it cannot be.
func convertXXLJob(j xxlJob, groups map[int64]xxlGroup, names map[int64]string, parents []int64, opt XXLOptions) (Item, string) {
	g, ok := groups[j.group]
	if !ok {
		return Item{}, fmt.Sprintf("its executor group %d does not exist", j.group)
	}
	if j.glueType != "" && j.glueType != "BEAN" {
		return Item{}, fmt.Sprintf("a GLUE script (%s): axe does not ship code to executors; move the script into a handler of an executor or an agent command", j.glueType)
	}
	if strings.TrimSpace(j.handler) == "" {
		return Item{}, "no executor_handler"
	}
	app := safeName.ReplaceAllString(g.appName, "-")
	// XXL-JOB fires a child after its parent succeeds whatever the child's trigger_status
	// (a NONE job's is always 0), and a NONE job never fires on its own: only a job with
	// a schedule of its own and no parent is stopped in the sense that matters.
	stopped := j.triggerStatus == 0 && len(parents) == 0 && j.scheduleType != "NONE"
	t := Task{
		Name:     names[j.id],
		Group:    app,
		Timezone: opt.Zone,
		Callback: Callback{Type: "executor", App: app, Handler: j.handler},
		Paused:   opt.Paused || stopped,
	}
	if stopped {
		t.Group = app + StoppedGroupSuffix
	}
	var notes []Note
	if j.param != "" {
		b, _ := json.Marshal(j.param) // a JSON string: the handler gets the text it had
		t.Params = b
	}
	t.TimeoutSec = j.timeoutSec
	if t.TimeoutSec <= 0 {
		t.TimeoutSec = int(opt.Timeout / time.Second)
	}
	retries := min(max(j.retries, 0), 100)
	if retries != j.retries {
		notes = append(notes, change("retries", "retry count %d: axe allows 0 to 100, so it retries %d times", j.retries, retries))
	}
	t.RetryCount = &retries
	switch j.misfire {
	case "", "DO_NOTHING":
		t.MisfirePolicy = "skip"
	case "FIRE_ONCE_NOW":
		t.MisfirePolicy = "fire_once"
	default:
		return Item{}, fmt.Sprintf("unknown misfire_strategy %q", j.misfire)
	}
	if r, ok := xxlRoutes[j.route]; ok {
		t.Callback.Route = r
	} else if j.route == "SHARDING_BROADCAST" {
		notes = append(notes, change("broadcast", "SHARDING_BROADCAST: XXL-JOB runs it on every executor of the group, each with its shard index and total; axe runs it on one executor, with neither"))
	} else if d, ok := xxlRouteNames[j.route]; ok {
		notes = append(notes, change("routing", "routing %s (%s): axe routes round robin instead", j.route, d))
	} else if j.route != "" {
		notes = append(notes, change("routing", "routing %s: unknown; axe routes round robin", j.route))
	}
	overlap, ok := xxlBlocks[j.block]
	if !ok {
		return Item{}, fmt.Sprintf("executor_block_strategy %q: axe knows SERIAL_EXECUTION, DISCARD_LATER and COVER_EARLY; "+
			"it runs one run of a task at a time, so a parallel strategy has no equal", j.block)
	}

	if j.alarmEmail != "" {
		notes = append(notes, routine("alarm_email", "axe sends alerts to its webhooks (--alert-webhook), not by mail"))
	}

	var next time.Time
	switch {
	case len(parents) > 0:
		t.Trigger = "dependency"
		t.DependsMode = "any" // XXL-JOB fires a child after any one parent succeeds
		for _, par := range parents {
			t.DependsOn = append(t.DependsOn, names[par])
		}
		slices.Sort(t.DependsOn)
		if j.scheduleType != "NONE" && j.scheduleConf != "" && j.triggerStatus == 1 {
			notes = append(notes, change("child schedule", "its own schedule %s %s: XXL-JOB also fires it on that schedule; axe runs a child job only after its parents", j.scheduleType, j.scheduleConf))
		}
		t.MisfirePolicy = "" // a dependency task has no fires to miss
	case j.scheduleType == "NONE":
		t.Trigger = "manual"
		t.MisfirePolicy = ""
	case j.scheduleType == "CRON":
		if _, err := cron.ParseIn(j.scheduleConf, cron.DialectQuartz); err != nil {
			return Item{}, fmt.Sprintf("cron %q: %v", j.scheduleConf, err)
		}
		t.Trigger, t.Cron, t.CronDialect = "cron", j.scheduleConf, string(cron.DialectQuartz)
		n, err := nextFire(t.Cron, cron.DialectQuartz, opt.Zone, opt.Now)
		if err != nil {
			return Item{}, err.Error()
		}
		next = n
	case j.scheduleType == "FIX_RATE":
		sec, err := strconv.Atoi(strings.TrimSpace(j.scheduleConf))
		if err != nil || sec < 1 {
			return Item{}, fmt.Sprintf("FIX_RATE %q is not a whole number of seconds", j.scheduleConf)
		}
		// XXL-JOB counts a fixed rate from its last trigger; axe's @every from an
		// anchor keeps that phase: the anchor is the next fire XXL-JOB had computed.
		anchor := j.triggerNextTime
		if anchor == 0 && j.triggerLastTime > 0 {
			anchor = j.triggerLastTime + int64(sec)*1000
		}
		t.Trigger = "cron"
		t.Cron = fmt.Sprintf("@every %ds", sec)
		if anchor > 0 {
			t.Cron += " from " + time.UnixMilli(anchor).UTC().Truncate(time.Second).Format(time.RFC3339)
		} else {
			notes = append(notes, change("FIX_RATE phase", "FIX_RATE phase: the job never ran and has no next trigger time, so it fires on multiples of its period from 1970-01-01 UTC"))
		}
		t.CronDialect = string(cron.DialectUnix)
		n, err := nextFire(t.Cron, cron.DialectUnix, opt.Zone, opt.Now)
		if err != nil {
			return Item{}, err.Error()
		}
		next = n
	default:
		return Item{}, fmt.Sprintf("schedule_type %s is not supported", j.scheduleType)
	}
	if t.Trigger == "cron" {
		t.OverlapPolicy = overlap
		if n, ok := xxlBlockNotes[j.block]; ok {
			notes = append(notes, change("block strategy", "%s", n))
		}
	} else if overlap != "buffer_all" {
		// Overlap policies decide cron fires; a child or a manual job is released by its
		// parents or by hand, one run of it at a time.
		notes = append(notes, change("block strategy", "block strategy %s: axe's overlap policies decide cron fires only; "+
			"this %s task runs when released, one run at a time", j.block, t.Trigger))
	}
	var note []string
	if stopped {
		note = append(note, "stopped in XXL-JOB")
	}
	if j.desc != "" {
		note = append(note, j.desc)
	}
	if j.author != "" {
		note = append(note, "author "+j.author)
	}
	if len(note) > 0 {
		text := truncateUTF8(strings.ToValidUTF8(fmt.Sprintf("XXL-JOB job %d: %s", j.id, strings.Join(note, "; ")), "\uFFFD"), maxNoteBytes)
		if t.Paused {
			t.Note = text
		} else {
			notes = append(notes, routine("description", "a job's description and author: the task is not paused, so there is no pause note to keep them"))
		}
	}
	cmd := j.handler
	if j.param != "" {
		cmd += " " + j.param
	}
	return Item{Task: t, Next: next, Command: cmd, NotCarried: notes}, ""
}

// maxNoteBytes is the server's limit on a pause note (engine's maxNoteBytes).
const maxNoteBytes = 1024

// truncateUTF8 cuts s to at most n bytes on a character boundary: a cut inside a
// character would leave invalid UTF-8, which JSON turns into replacement characters the
// server then counts as longer than the limit.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// topoOrder returns the ids of items with every parent before its children, lowest id
// first among equals, and the ids caught in cycles.
func topoOrder(items map[int64]Item, parents map[int64][]int64) (order, cyclic []int64) {
	indeg := map[int64]int{}
	children := map[int64][]int64{}
	for id := range items {
		for _, par := range parents[id] {
			if _, ok := items[par]; ok {
				indeg[id]++
				children[par] = append(children[par], id)
			}
		}
	}
	var ready []int64
	for id := range items {
		if indeg[id] == 0 {
			ready = append(ready, id)
		}
	}
	for len(ready) > 0 {
		slices.Sort(ready)
		id := ready[0]
		ready = ready[1:]
		order = append(order, id)
		for _, c := range children[id] {
			if indeg[c]--; indeg[c] == 0 {
				ready = append(ready, c)
			}
		}
	}
	for id := range items {
		if indeg[id] > 0 {
			cyclic = append(cyclic, id)
		}
	}
	slices.Sort(cyclic)
	return order, cyclic
}

// xxlSchema is what readXXLSchema found: the generation, and the columns of the two tables.
type xxlSchema struct {
	generation  string
	group, info map[string]bool
	// desc is the column holding a job's description.
	desc string
}

// The columns the importer maps; every generation it reads has them.
var (
	xxlGroupColumns = []string{"id", "app_name", "address_type", "address_list"}
	xxlInfoColumns  = []string{"id", "job_group", "executor_route_strategy", "executor_handler",
		"executor_param", "executor_block_strategy", "executor_timeout", "executor_fail_retry_count",
		"glue_type", "child_jobid", "trigger_status", "trigger_last_time", "trigger_next_time"}
)

// readXXLSchema tells the schema generation from the columns of the admin tables. XXL-JOB
// 2.1 and 2.2 keep the schedule in job_cron (always a Quartz cron); 2.3 and later in
// schedule_type and schedule_conf, with misfire_strategy. Later versions add columns (an
// executor group's access_token, names), which the importer reads where it maps them and
// otherwise ignores. 2.0 and older keep jobs in XXL_JOB_QRTZ_TRIGGER_INFO and whether a job
// runs in Quartz's own tables: refused, naming the generation. A missing column the
// importer maps is refused by name: guessing would import wrong.
func readXXLSchema(ctx context.Context, db *sql.DB) (xxlSchema, error) {
	rows, err := db.QueryContext(ctx, `SELECT LOWER(table_name), LOWER(column_name) FROM information_schema.columns
		WHERE table_schema = DATABASE() AND LOWER(table_name) IN
		('xxl_job_group', 'xxl_job_info', 'xxl_job_qrtz_trigger_group', 'xxl_job_qrtz_trigger_info')`)
	if err != nil {
		return xxlSchema{}, fmt.Errorf("cannot read the tables of the XXL-JOB database: %w", err)
	}
	defer rows.Close()
	cols := map[string]map[string]bool{}
	for rows.Next() {
		var table, col string
		if err := rows.Scan(&table, &col); err != nil {
			return xxlSchema{}, fmt.Errorf("cannot read the tables of the XXL-JOB database: %w", err)
		}
		if cols[table] == nil {
			cols[table] = map[string]bool{}
		}
		cols[table][col] = true
	}
	if err := rows.Err(); err != nil {
		return xxlSchema{}, fmt.Errorf("cannot read the tables of the XXL-JOB database: %w", err)
	}
	const supported = "axe reads XXL-JOB 2.1 to 2.2 (job_cron) and 2.3 and later (schedule_type)"
	sc := xxlSchema{group: cols["xxl_job_group"], info: cols["xxl_job_info"]}
	switch {
	case sc.info == nil && cols["xxl_job_qrtz_trigger_info"] != nil:
		return sc, fmt.Errorf("cannot read XXL-JOB: this database is of XXL-JOB 2.0 or older (XXL_JOB_QRTZ_TRIGGER_INFO, with whether each job runs kept in Quartz's tables); %s. Upgrade the XXL-JOB database to 2.1 or later with XXL-JOB's own upgrade script, then import", supported)
	case sc.info == nil || sc.group == nil:
		return sc, fmt.Errorf("cannot read XXL-JOB: the database has no xxl_job_info or xxl_job_group table; is --dsn the XXL-JOB admin database? (%s)", supported)
	}
	switch {
	case sc.info["schedule_type"]:
		sc.generation = "2.3 or later (schedule_type, schedule_conf, misfire_strategy)"
	case sc.info["job_cron"]:
		sc.generation = "2.1 to 2.2 (job_cron)"
	default:
		return sc, fmt.Errorf("cannot read XXL-JOB: xxl_job_info has neither job_cron nor schedule_type, so no generation axe knows (%s)", supported)
	}
	var missing []string
	for _, c := range xxlGroupColumns {
		if !sc.group[c] {
			missing = append(missing, "xxl_job_group."+c)
		}
	}
	need := xxlInfoColumns
	if sc.info["schedule_type"] {
		need = append(slices.Clone(need), "schedule_conf", "misfire_strategy")
	}
	for _, c := range need {
		if !sc.info[c] {
			missing = append(missing, "xxl_job_info."+c)
		}
	}
	if len(missing) > 0 {
		return sc, fmt.Errorf("cannot read XXL-JOB %s: no column %s, which the import maps; %s", sc.generation, strings.Join(missing, ", "), supported)
	}
	for _, c := range []string{"job_desc", "job_name", "name"} {
		if sc.info[c] {
			sc.desc = c
			break
		}
	}
	return sc, nil
}

// column selects a text column, or an empty text where the table lacks it.
func column(cols map[string]bool, name string) string {
	if cols[name] {
		return "COALESCE(" + name + ", '')"
	}
	return "''"
}

func readXXLGroups(ctx context.Context, db *sql.DB, sc xxlSchema) (map[int64]xxlGroup, error) {
	rows, err := db.QueryContext(ctx, `SELECT id, app_name, address_type, COALESCE(address_list, ''), `+
		column(sc.group, "access_token")+` FROM xxl_job_group`)
	if err != nil {
		return nil, fmt.Errorf("cannot read xxl_job_group: %w", err)
	}
	defer rows.Close()
	out := map[int64]xxlGroup{}
	for rows.Next() {
		var g xxlGroup
		var tok string
		if err := rows.Scan(&g.id, &g.appName, &g.addressType, &g.addressList, &tok); err != nil {
			return nil, fmt.Errorf("cannot read xxl_job_group: %w", err)
		}
		g.hasToken = tok != ""
		out[g.id] = g
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read xxl_job_group: %w", err)
	}
	return out, nil
}

// readXXLJobs reads xxl_job_info in the generation sc found.
func readXXLJobs(ctx context.Context, db *sql.DB, sc xxlSchema) ([]xxlJob, error) {
	schedule := `'CRON', job_cron, ''` // 2.1 and 2.2: every job is a cron, misfires are not handled
	if sc.info["schedule_type"] {
		schedule = `schedule_type, COALESCE(schedule_conf, ''), COALESCE(misfire_strategy, '')`
	}
	desc := "''"
	if sc.desc != "" {
		desc = column(sc.info, sc.desc)
	}
	rows, err := db.QueryContext(ctx, `SELECT id, job_group, `+desc+`, `+column(sc.info, "author")+`,
		`+column(sc.info, "alarm_email")+`, `+schedule+`, COALESCE(executor_route_strategy, ''),
		COALESCE(executor_handler, ''), COALESCE(executor_param, ''), COALESCE(executor_block_strategy, ''),
		executor_timeout, executor_fail_retry_count, COALESCE(glue_type, ''), COALESCE(child_jobid, ''),
		trigger_status, trigger_last_time, trigger_next_time
		FROM xxl_job_info ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("cannot read xxl_job_info: %w", err)
	}
	defer rows.Close()
	var out []xxlJob
	for rows.Next() {
		var j xxlJob
		if err := rows.Scan(&j.id, &j.group, &j.desc, &j.author, &j.alarmEmail, &j.scheduleType, &j.scheduleConf,
			&j.misfire, &j.route, &j.handler, &j.param, &j.block, &j.timeoutSec, &j.retries, &j.glueType,
			&j.childIDs, &j.triggerStatus, &j.triggerLastTime, &j.triggerNextTime); err != nil {
			return nil, fmt.Errorf("cannot read xxl_job_info: %w", err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read xxl_job_info: %w", err)
	}
	return out, nil
}
