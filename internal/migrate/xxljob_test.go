package migrate

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

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
			 'SERIAL_EXECUTION', 0, 0, 'BEAN', '', 0, 0, 0),
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
	if !hasNote(j1, "not by mail", false) {
		t.Errorf("job 1 notes %+v", j1.NotCarried)
	}
	// A child of schedule type NONE has trigger_status 0, as XXL-JOB always sets it, and
	// XXL-JOB still runs it after its parent (its completer triggers children by id,
	// whatever their status): it is a cut-over task of its app's group, not a stopped one.
	j2 := byName["xxl-order-app-2"].Task
	if j2.Trigger != "dependency" || strings.Join(j2.DependsOn, ",") != "xxl-order-app-1" || j2.DependsMode != "any" ||
		j2.Callback.Route != "failover" || j2.TimeoutSec != 86400 || j2.Group != "order-app" || !j2.Paused ||
		strings.Contains(j2.Note, "stopped") {
		t.Errorf("job 2 = %+v", j2)
	}
	j3 := byName["xxl-order-app-3"]
	// Stopped in XXL-JOB (a FIX_RATE job with trigger_status 0): its own group, so that
	// resuming order-app for the cut-over leaves it stopped.
	if j3.Task.Cron != "@every 90s from "+time.UnixMilli(nextRate).UTC().Format(time.RFC3339) || !j3.Next.Equal(time.UnixMilli(nextRate)) ||
		j3.Task.MisfirePolicy != "skip" || !j3.Task.Paused || j3.Task.Callback.Route != "" || j3.Task.Group != "order-app.stopped" ||
		j3.Task.Note != "XXL-JOB job 3: stopped in XXL-JOB; poll" {
		t.Errorf("job 3 = %+v next %s, want next %s", j3.Task, j3.Next, time.UnixMilli(nextRate))
	}
	if !hasNote(j3, "SHARDING_BROADCAST", true) || !hasNote(j3, "DISCARD_LATER", true) {
		t.Errorf("job 3 notes %+v", j3.NotCarried)
	}
	j5 := byName["xxl-billing-5"]
	if want := time.Date(2026, 12, 25, 12, 0, 0, 0, sh); !j5.Next.Equal(want) || *j5.Task.RetryCount != 100 { // the last Friday
		t.Errorf("job 5 = %+v next %s, want %s", j5.Task, j5.Next, want)
	}
	if !hasNote(j5, "routing FIRST", true) || hasNote(j5, "COVER_EARLY", true) || !hasNote(j5, "retry count 150", true) {
		t.Errorf("job 5 notes %+v", j5.NotCarried)
	}
	// Block strategies are overlap policies (COVER_EARLY is cancel_other exactly: no note).
	if j1.Task.OverlapPolicy != "buffer_all" || !hasNote(j1, "XXL-JOB's queue has no bound", true) ||
		j3.Task.OverlapPolicy != "skip" || !hasNote(j3, "DISCARD_LATER: overlap_policy skip", true) ||
		j5.Task.OverlapPolicy != "cancel_other" || j2.OverlapPolicy != "" {
		t.Errorf("overlap policies: job 1 %q, job 3 %q, job 5 %q, job 2 %q", j1.Task.OverlapPolicy, j3.Task.OverlapPolicy,
			j5.Task.OverlapPolicy, j2.OverlapPolicy)
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
	if len(p.NotCarried) != 1 || !strings.Contains(p.NotCarried[0].Text, "billing: addresses entered by hand (10.0.0.5:9999,10.0.0.6:9999)") || p.NotCarried[0].Changes {
		t.Errorf("plan notes %+v", p.NotCarried)
	}
	// The dry run puts what changes behaviour first, in full, and the routine last.
	var out strings.Builder
	if err := p.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	dry := out.String()
	changes, routines := strings.Index(dry, "RUNS DIFFERENTLY IN AXE"), strings.Index(dry, "routine, not carried over:")
	broadcast := strings.Index(dry, "job 3 (xxl-order-app-3): SHARDING_BROADCAST")
	if changes < 0 || routines < changes || broadcast < changes || broadcast > routines ||
		!strings.Contains(dry, "  alarm_email (job 1): ") || !strings.Contains(dry, "note: 1 job(s) stopped in XXL-JOB") {
		t.Errorf("dry run:\n%s", dry)
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
	if !hasNote(a, "description and author", false) {
		t.Errorf("job 1 (not paused) notes %+v", a.NotCarried)
	}
	// Stopped in XXL-JOB: paused in axe even without --paused, in its own group, its note kept.
	if !b.Task.Paused || b.Task.Group != "legacy.stopped" || b.Task.Note != "XXL-JOB job 2: stopped in XXL-JOB; weekdays" ||
		string(b.Task.Params) != `"{\"a\":1}"` || !b.Next.Equal(time.Date(2026, 12, 1, 10, 15, 0, 0, time.UTC)) {
		t.Errorf("job 2 = %+v next %s", b.Task, b.Next)
	}
}

func hasNote(it Item, s string, changes bool) bool {
	for _, n := range it.NotCarried {
		if strings.Contains(n.Text, s) && n.Changes == changes {
			return true
		}
	}
	return false
}

// TestReadXXLJobGenerations reads the same jobs from a database of every generation the
// importer supports and checks each gives the same tasks; 2.0, whose job states live in
// Quartz's tables, is refused with a message naming it and the generations supported.
func TestReadXXLJobGenerations(t *testing.T) {
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	groupCols := map[string]string{
		xxltest.Gen21: "(id, app_name, title, `order`, address_type, address_list) VALUES (1, 'app', 'App', 1, 0, NULL)",
		xxltest.Gen22: "(id, app_name, title, address_type, address_list) VALUES (1, 'app', 'App', 0, NULL)",
		xxltest.Gen23: "(id, app_name, title, address_type, address_list) VALUES (1, 'app', 'App', 0, NULL)",
		// The later schema names a group rather than titling it, and keeps a token.
		xxltest.GenLater: "(id, app_name, name, access_token, address_type, address_list) VALUES (1, 'app', 'App', 's3cret', 0, NULL)",
	}
	var want []Item
	for _, gen := range []string{xxltest.Gen21, xxltest.Gen22, xxltest.Gen23, xxltest.GenLater} {
		t.Run(gen, func(t *testing.T) {
			_, db := xxltest.Database(t, gen)
			schedule, values := "job_cron", []string{"'0 0 12 ? * MON-FRI/2'", "'0 30 9 1 JAN-DEC/3 ?'"}
			if gen == xxltest.Gen23 || gen == xxltest.GenLater {
				schedule, values = "schedule_type, schedule_conf", []string{"'CRON', '0 0 12 ? * MON-FRI/2'", "'CRON', '0 30 9 1 JAN-DEC/3 ?'"}
			}
			xxltest.Exec(t, db, "INSERT INTO xxl_job_group "+groupCols[gen],
				`INSERT INTO xxl_job_info (id, job_group, job_desc, author, `+schedule+`, executor_route_strategy,
					executor_handler, executor_param, executor_block_strategy, executor_timeout,
					executor_fail_retry_count, glue_type, child_jobid, trigger_status) VALUES
					(1, 1, 'weekdays', 'ann', `+values[0]+`, 'ROUND', 'a', '', 'SERIAL_EXECUTION', 0, 0, 'BEAN', '2', 1),
					(2, 1, 'quarterly', '', `+values[1]+`, 'ROUND', 'b', '', 'SERIAL_EXECUTION', 0, 0, 'BEAN', '', 0)`)
			p, err := ReadXXLJob(context.Background(), db, XXLOptions{Zone: "UTC", Paused: true, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Items) != 2 || len(p.Bad) != 0 {
				t.Fatalf("items %+v bad %+v", p.Items, p.Bad)
			}
			// Quartz ignores the step after a name: MON-FRI/2 is every weekday, and
			// JAN-DEC/3 every month (checked against Quartz in lib/cron).
			if got := p.Items[0].Next; !got.Equal(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)) {
				t.Errorf("weekdays next %s, want Tuesday 2026-12-01 12:00, as Quartz reads MON-FRI/2", got)
			}
			// Job 2 is a child: XXL-JOB runs it after job 1 though it is stopped.
			if c := p.Items[1].Task; c.Trigger != "dependency" || c.Group != "app" {
				t.Errorf("child = %+v", c)
			}
			hasToken := false
			for _, n := range p.NotCarried {
				hasToken = hasToken || n.Kind == "access_token"
			}
			if hasToken != (gen == xxltest.GenLater) {
				t.Errorf("access token note %v in %+v", hasToken, p.NotCarried)
			}
			if want == nil {
				want = p.Items
				return
			}
			for i := range want {
				g, _ := json.Marshal(p.Items[i].Task)
				w, _ := json.Marshal(want[i].Task)
				if string(g) != string(w) {
					t.Errorf("task %d differs from 2.1's:\n got %s\nwant %s", i, g, w)
				}
			}
		})
	}
	t.Run("2.0", func(t *testing.T) {
		_, db := xxltest.Database(t, xxltest.Gen20)
		_, err := ReadXXLJob(context.Background(), db, XXLOptions{Zone: "UTC", Now: now})
		if err == nil || !strings.Contains(err.Error(), "XXL-JOB 2.0 or older") || !strings.Contains(err.Error(), "2.1 to 2.2 (job_cron) and 2.3 and later") {
			t.Errorf("2.0: %v", err)
		}
	})
	t.Run("missing column", func(t *testing.T) {
		_, db := xxltest.Database(t, xxltest.Gen23)
		xxltest.Exec(t, db, "ALTER TABLE xxl_job_info DROP COLUMN trigger_status")
		_, err := ReadXXLJob(context.Background(), db, XXLOptions{Zone: "UTC", Now: now})
		if err == nil || !strings.Contains(err.Error(), "no column xxl_job_info.trigger_status") || !strings.Contains(err.Error(), "2.3 or later") {
			t.Errorf("missing trigger_status: %v", err)
		}
	})
}

// TestXXLNoteOnCharacterBoundary: a description of 4-byte characters is cut to the
// server's 1024 bytes on a character boundary, and the server's own rules accept the task
// (the dry run checks with them, so it predicts the real run).
func TestXXLNoteOnCharacterBoundary(t *testing.T) {
	_, db := xxltest.Database(t, xxltest.Gen23)
	desc := strings.Repeat("😀", 63) // 252 bytes in a VARCHAR(255) of utf8mb4 characters
	xxltest.Exec(t, db,
		`INSERT INTO xxl_job_group (id, app_name, title, address_type) VALUES (1, 'app', 'App', 0)`,
		`ALTER TABLE xxl_job_info MODIFY job_desc VARCHAR(1000) CHARACTER SET utf8mb4 NOT NULL`,
		`ALTER TABLE xxl_job_info MODIFY author VARCHAR(1000) CHARACTER SET utf8mb4 NULL`,
		`INSERT INTO xxl_job_info (id, job_group, job_desc, author, schedule_type, schedule_conf, executor_route_strategy,
			executor_handler, glue_type, trigger_status) VALUES
			(1, 1, '`+desc+`', '`+strings.Repeat("😀", 300)+`', 'CRON', '0 0 12 * * ?', 'ROUND', 'h', 'BEAN', 1)`)
	p, err := ReadXXLJob(context.Background(), db, XXLOptions{Zone: "UTC", Paused: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 1 || len(p.Bad) != 0 {
		t.Fatalf("items %+v bad %+v", p.Items, p.Bad)
	}
	note := p.Items[0].Task.Note
	if len(note) > 1024 || len(note) < 1020 || !utf8.ValidString(note) || !strings.HasPrefix(note, "XXL-JOB job 1: "+desc) {
		t.Errorf("note of %d bytes, valid %v: %q", len(note), utf8.ValidString(note), note)
	}
	// Cut in the middle of a character, the note turns into more than 1024 bytes of JSON
	// replacement characters, which the server refuses: the check the dry run makes.
	bad := Plan{Items: []Item{p.Items[0]}}
	bad.Items[0].Task.Note = note[:len(note)-1]
	if validateTasks(&bad); len(bad.Bad) != 1 || !strings.Contains(bad.Bad[0].Reason, "note") {
		t.Errorf("a note cut inside a character: %+v", bad)
	}
}

// TestXXLBlockStrategyUnknownIsRefused: a block strategy axe has no overlap policy for (a
// fork's parallel one) refuses the job, naming the column.
func TestXXLBlockStrategyUnknownIsRefused(t *testing.T) {
	j := xxlJob{id: 9, group: 1, handler: "h", block: "CONCURRENT_EXECUTION", scheduleType: "CRON", scheduleConf: "0 0 12 * * ?",
		glueType: "BEAN", triggerStatus: 1}
	groups := map[int64]xxlGroup{1: {appName: "app"}}
	_, why := convertXXLJob(j, groups, map[int64]string{9: "xxl-app-9"}, nil, XXLOptions{Zone: "UTC", Now: time.Now()})
	if !strings.Contains(why, `executor_block_strategy "CONCURRENT_EXECUTION"`) {
		t.Errorf("refusal %q, want it to name executor_block_strategy", why)
	}
	j.block = "COVER_EARLY"
	it, why := convertXXLJob(j, groups, map[int64]string{9: "xxl-app-9"}, nil, XXLOptions{Zone: "UTC", Now: time.Now()})
	if why != "" || it.Task.OverlapPolicy != "cancel_other" {
		t.Errorf("COVER_EARLY: %q, %+v", why, it.Task)
	}
}
