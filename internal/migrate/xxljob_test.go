package migrate

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/internal/migrate/xxltest"
)

// TestReadXXLJob23 reads a 2.3-generation database with a job of every kind the importer
// meets.
func TestReadXXLJob23(t *testing.T) {
	_, db := xxltest.Database(t, xxltest.Gen23)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC) // a Tuesday, 16:00 in Shanghai
	nextRate := now.Add(40 * time.Second).UnixMilli()
	xxltest.Exec(t, db,
		`INSERT INTO xxl_job_group (id, app_name, title, address_type, address_list) VALUES
			(1, 'order-app', 'Orders', 0, NULL), (2, 'billing', 'Billing', 1, '10.0.0.5:9999,10.0.0.6:9999')`,
		`INSERT INTO xxl_job_info (id, job_group, job_desc, author, alarm_email, schedule_type, schedule_conf,
			misfire_strategy, executor_route_strategy, executor_handler, executor_param, executor_block_strategy,
			executor_timeout, executor_fail_retry_count, glue_type, child_jobid, trigger_status, trigger_last_time,
			trigger_next_time) VALUES
			(1, 1, 'daily report', 'alice', 'ops@example.com', 'CRON', '0 0 12 ? * 2', 'FIRE_ONCE_NOW', 'ROUND',
			 'reportHandler', 'region=eu', 'SERIAL_EXECUTION', 60, 2, 'BEAN', '2', 1, 0, 0),
			(2, 1, 'after the report', 'bob', '', 'NONE', '', 'DO_NOTHING', 'FAILOVER', 'cleanupHandler', '',
			 'SERIAL_EXECUTION', 0, 0, 'BEAN', '', 1, 0, 0),
			(3, 1, 'poll', '', '', 'FIX_RATE', '90', 'DO_NOTHING', 'SHARDING_BROADCAST', 'pollHandler', '',
			 'DISCARD_LATER', 10, 0, 'BEAN', '', 0, 0, `+fmt.Sprint(nextRate)+`),
			(4, 1, 'a script', '', '', 'CRON', '0 * * * * ?', 'DO_NOTHING', 'ROUND', '', '', 'SERIAL_EXECUTION',
			 0, 0, 'GLUE_SHELL', '6', 1, 0, 0),
			(5, 2, 'month end', '', '', 'CRON', '0 0 12 ? * 6L', 'DO_NOTHING', 'FIRST', 'closeHandler', '',
			 'COVER_EARLY', 0, 150, 'BEAN', '', 1, 0, 0),
			(6, 1, 'after the script', '', '', 'NONE', '', 'DO_NOTHING', 'ROUND', 'afterHandler', '',
			 'SERIAL_EXECUTION', 0, 0, 'BEAN', '', 1, 0, 0),
			(7, 1, 'bad cron', '', '', 'CRON', '0 0 12 * * 2', 'DO_NOTHING', 'ROUND', 'h', '',
			 'SERIAL_EXECUTION', 0, 0, 'BEAN', '', 1, 0, 0)`)
	p, err := ReadXXLJob(context.Background(), db, XXLOptions{Zone: "Asia/Shanghai", Paused: true, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	sh := mustLoc(t, "Asia/Shanghai")
	byName := map[string]Item{}
	var order []string
	for _, it := range p.Items {
		byName[it.Task.Name] = it
		order = append(order, it.Task.Name)
	}
	if strings.Join(order, ",") != "xxl-order-app-1,xxl-order-app-2,xxl-order-app-3,xxl-billing-5" {
		t.Fatalf("tasks in order %v", order)
	}
	j1 := byName["xxl-order-app-1"]
	tk := j1.Task
	if tk.Trigger != "cron" || tk.Cron != "0 0 12 ? * 2" || tk.CronDialect != "quartz" || tk.Timezone != "Asia/Shanghai" ||
		tk.Group != "order-app" || tk.Callback.App != "order-app" || tk.Callback.Handler != "reportHandler" ||
		tk.Callback.Route != "round_robin" || string(tk.Params) != `"region=eu"` || tk.TimeoutSec != 60 ||
		*tk.RetryCount != 2 || tk.MisfirePolicy != "fire_once" || !tk.Paused ||
		tk.Note != "XXL-JOB job 1: daily report; author alice" {
		t.Errorf("job 1 = %+v", tk)
	}
	if want := time.Date(2026, 12, 7, 12, 0, 0, 0, sh); !j1.Next.Equal(want) { // Monday, as Quartz reads 2
		t.Errorf("job 1 next %s, want %s", j1.Next, want)
	}
	if !hasNote(j1, "alarm_email ops@example.com") {
		t.Errorf("job 1 notes %q", j1.NotCarried)
	}
	j2 := byName["xxl-order-app-2"].Task
	if j2.Trigger != "dependency" || strings.Join(j2.DependsOn, ",") != "xxl-order-app-1" || j2.DependsMode != "any" ||
		j2.Callback.Route != "failover" || j2.TimeoutSec != 86400 {
		t.Errorf("job 2 = %+v", j2)
	}
	j3 := byName["xxl-order-app-3"]
	if j3.Task.Cron != "@every 90s from "+time.UnixMilli(nextRate).UTC().Format(time.RFC3339) || !j3.Next.Equal(time.UnixMilli(nextRate)) ||
		j3.Task.MisfirePolicy != "skip" || !j3.Task.Paused || j3.Task.Callback.Route != "" {
		t.Errorf("job 3 = %+v next %s, want next %s", j3.Task, j3.Next, time.UnixMilli(nextRate))
	}
	if !hasNote(j3, "sharding broadcast") || !hasNote(j3, "DISCARD_LATER") {
		t.Errorf("job 3 notes %q", j3.NotCarried)
	}
	j5 := byName["xxl-billing-5"]
	if want := time.Date(2026, 12, 25, 12, 0, 0, 0, sh); !j5.Next.Equal(want) || *j5.Task.RetryCount != 100 { // the last Friday
		t.Errorf("job 5 = %+v next %s, want %s", j5.Task, j5.Next, want)
	}
	if !hasNote(j5, "routing FIRST") || !hasNote(j5, "COVER_EARLY") || !hasNote(j5, "retry count 150") {
		t.Errorf("job 5 notes %q", j5.NotCarried)
	}
	var bad []string
	for _, b := range p.Bad {
		bad = append(bad, b.Source+": "+b.Reason)
	}
	got := strings.Join(bad, "\n")
	for _, want := range []string{"job 4: a GLUE script (GLUE_SHELL)", "job 6: its parent job 4 is not imported", "job 7: cron \"0 0 12 * * 2\""} {
		if !strings.Contains(got, want) {
			t.Errorf("bad jobs lack %q:\n%s", want, got)
		}
	}
	if len(p.Bad) != 3 {
		t.Errorf("%d bad jobs, want 3:\n%s", len(p.Bad), got)
	}
	if n := strings.Join(p.NotCarried, "\n"); !strings.Contains(n, "billing: addresses entered by hand (10.0.0.5:9999,10.0.0.6:9999)") {
		t.Errorf("plan notes %q", p.NotCarried)
	}
}

// TestReadXXLJob22 reads the older generation: job_cron, no misfire strategy.
func TestReadXXLJob22(t *testing.T) {
	_, db := xxltest.Database(t, xxltest.Gen22)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	xxltest.Exec(t, db,
		`INSERT INTO xxl_job_group (id, app_name, title, address_type) VALUES (1, 'legacy', 'Legacy', 0)`,
		`INSERT INTO xxl_job_info (id, job_group, job_cron, job_desc, author, executor_route_strategy,
			executor_handler, executor_param, executor_block_strategy, executor_timeout,
			executor_fail_retry_count, glue_type, child_jobid, trigger_status) VALUES
			(1, 1, '0 0 12 ? * 1#2', 'second sunday', 'carol', 'CONSISTENT_HASH', 'sundayHandler', '', 'SERIAL_EXECUTION', 0, 1, 'BEAN', '', 1),
			(2, 1, '0 15 10 ? * MON-FRI', 'weekdays', '', 'RANDOM', 'weekdayHandler', '{"a":1}', 'SERIAL_EXECUTION', 30, 0, 'BEAN', '', 0)`)
	p, err := ReadXXLJob(context.Background(), db, XXLOptions{Zone: "UTC", Paused: false, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 2 || len(p.Bad) != 0 {
		t.Fatalf("items %+v bad %+v", p.Items, p.Bad)
	}
	a, b := p.Items[0], p.Items[1]
	if a.Task.Cron != "0 0 12 ? * 1#2" || a.Task.CronDialect != "quartz" || a.Task.Callback.Route != "consistent_hash" ||
		a.Task.Paused || a.Task.MisfirePolicy != "skip" || !a.Next.Equal(time.Date(2026, 12, 13, 12, 0, 0, 0, time.UTC)) {
		t.Errorf("job 1 = %+v next %s", a.Task, a.Next)
	}
	if !hasNote(a, "description and author") {
		t.Errorf("job 1 (not paused) notes %q", a.NotCarried)
	}
	// Stopped in XXL-JOB: paused in axe even without --paused, its note kept.
	if !b.Task.Paused || b.Task.Note != "XXL-JOB job 2: weekdays" || string(b.Task.Params) != `"{\"a\":1}"` ||
		!b.Next.Equal(time.Date(2026, 12, 1, 10, 15, 0, 0, time.UTC)) {
		t.Errorf("job 2 = %+v next %s", b.Task, b.Next)
	}
}

func hasNote(it Item, s string) bool {
	for _, n := range it.NotCarried {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}
