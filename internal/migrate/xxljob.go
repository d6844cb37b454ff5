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

	"github.com/axe-sched/axe/engine/cron"
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
	title       string
	addressType int
	addressList string
}

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
	xxlBlocks = map[string]string{
		"DISCARD_LATER": "DISCARD_LATER (drop a trigger while a run is going) is not an option: axe's agent and SDK refuse re-entry of a running task, which comes close",
		"COVER_EARLY":   "COVER_EARLY (kill the running run for the new one) has no equal: axe refuses re-entry of a running task instead",
	}
	safeName = regexp.MustCompile(`[^A-Za-z0-9._:-]+`)
)

// ReadXXLJob reads an XXL-JOB admin database (xxl_job_group, xxl_job_info, of either
// schema generation) and converts every job. The task of job N of executor app A is
// named xxl-A-N, in group A, with an executor callback to app A and the job's handler.
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
	groups, err := readXXLGroups(ctx, db)
	if err != nil {
		return nil, err
	}
	jobs, err := readXXLJobs(ctx, db)
	if err != nil {
		return nil, err
	}
	p := &Plan{}
	for _, g := range groups {
		if g.addressType == 1 && strings.TrimSpace(g.addressList) != "" {
			p.NotCarried = append(p.NotCarried, fmt.Sprintf("executor group %s: addresses entered by hand (%s): axe executors register themselves; start them with this app name and axe's address", g.appName, g.addressList))
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
				p.NotCarried = append(p.NotCarried, fmt.Sprintf("job %d: child job %q does not exist", j.id, s))
				continue
			}
			parents[c] = append(parents[c], j.id)
		}
	}

	items := map[int64]Item{}
	for _, j := range jobs {
		src := fmt.Sprintf("job %d", j.id)
		it, reason := convertXXLJob(j, groups, names, parents[j.id], opt)
		if reason != "" {
			p.Bad = append(p.Bad, Bad{Source: src, Reason: reason})
			continue
		}
		it.Source = src
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
	t := Task{
		Name:     names[j.id],
		Group:    app,
		Timezone: opt.Zone,
		Callback: Callback{Type: "executor", App: app, Handler: j.handler},
		Paused:   opt.Paused || j.triggerStatus == 0,
	}
	var notes []string
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
		notes = append(notes, fmt.Sprintf("retry count %d (axe allows 0 to 100; %d kept)", j.retries, retries))
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
		notes = append(notes, "sharding broadcast: axe sends each run to one executor, with no shard index or total")
	} else if d, ok := xxlRouteNames[j.route]; ok {
		notes = append(notes, fmt.Sprintf("routing %s (%s): axe routes round robin instead", j.route, d))
	} else if j.route != "" {
		notes = append(notes, fmt.Sprintf("routing %s: unknown; axe routes round robin", j.route))
	}
	if d, ok := xxlBlocks[j.block]; ok {
		notes = append(notes, "block strategy "+d)
	}
	if j.alarmEmail != "" {
		notes = append(notes, fmt.Sprintf("alarm_email %s: axe sends alerts to its webhooks, not by mail", j.alarmEmail))
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
		if j.scheduleType != "NONE" && j.scheduleConf != "" {
			notes = append(notes, fmt.Sprintf("its own schedule %s %s: a child job runs after its parents in axe, on no schedule of its own", j.scheduleType, j.scheduleConf))
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
			notes = append(notes, "FIX_RATE phase: the job never ran and has no next trigger time, so it fires on multiples of its period from 1970-01-01 UTC")
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
	var note []string
	if j.desc != "" {
		note = append(note, j.desc)
	}
	if j.author != "" {
		note = append(note, "author "+j.author)
	}
	if len(note) > 0 {
		text := fmt.Sprintf("XXL-JOB job %d: %s", j.id, strings.Join(note, "; "))
		if len(text) > 1024 {
			text = text[:1024]
		}
		if t.Paused {
			t.Note = text
		} else {
			notes = append(notes, "description and author (the task is not paused, so there is no pause note to keep them): "+text)
		}
	}
	cmd := j.handler
	if j.param != "" {
		cmd += " " + j.param
	}
	return Item{Task: t, Next: next, Command: cmd, NotCarried: notes}, ""
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

func readXXLGroups(ctx context.Context, db *sql.DB) (map[int64]xxlGroup, error) {
	rows, err := db.QueryContext(ctx, `SELECT id, app_name, title, address_type, COALESCE(address_list, '') FROM xxl_job_group`)
	if err != nil {
		return nil, fmt.Errorf("cannot read xxl_job_group: %w", err)
	}
	defer rows.Close()
	out := map[int64]xxlGroup{}
	for rows.Next() {
		var g xxlGroup
		if err := rows.Scan(&g.id, &g.appName, &g.title, &g.addressType, &g.addressList); err != nil {
			return nil, fmt.Errorf("cannot read xxl_job_group: %w", err)
		}
		out[g.id] = g
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read xxl_job_group: %w", err)
	}
	return out, nil
}

// readXXLJobs reads xxl_job_info in the generation it finds: schedule_type exists from 2.3.
func readXXLJobs(ctx context.Context, db *sql.DB) ([]xxlJob, error) {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.columns
		WHERE table_schema = DATABASE() AND table_name = 'xxl_job_info' AND column_name = 'schedule_type'`).Scan(&n); err != nil {
		return nil, fmt.Errorf("cannot read the columns of xxl_job_info: %w", err)
	}
	schedule := `'CRON', job_cron, ''` // up to 2.2: every job is a cron, misfires are not handled
	if n > 0 {
		schedule = `schedule_type, COALESCE(schedule_conf, ''), COALESCE(misfire_strategy, '')`
	}
	rows, err := db.QueryContext(ctx, `SELECT id, job_group, COALESCE(job_desc, ''), COALESCE(author, ''),
		COALESCE(alarm_email, ''), `+schedule+`, COALESCE(executor_route_strategy, ''),
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
