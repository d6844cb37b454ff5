package admin_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/client"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
)

type taskListAnswer struct {
	Tasks     []client.TaskView `json:"tasks"`
	Total     int               `json:"total"`
	TotalMore bool              `json:"total_more"`
}

type runListAnswer struct {
	Runs       []model.Run `json:"runs"`
	Count      int         `json:"count"`
	NextCursor string      `json:"next_cursor"`
	Total      int         `json:"total"`
	Scanned    int         `json:"scanned"`
}

// TestFindFailingTasks: a cron task whose callback fails every second stays SCHEDULED, and
// the task list finds it by last result and by a failure within the last minutes, with a
// total; the healthy tasks beside it are not found, and a search by callback substring
// finds what holds it.
func TestFindFailingTasks(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	h := daemontest.NewHook(t)
	for i := range 5 {
		d.Create(t, daemontest.Spec(fmt.Sprintf("ok-%d", i), h.URL("/ok/fine"), "cron", "* * * * * *", "group", "healthy"))
	}
	d.Create(t, daemontest.Spec("sad", h.URL("/fail/sad-endpoint"), "cron", "* * * * * *", "group", "sorry"))
	h.WaitCalls(t, "sad", 2, daemontest.WaitTimeout)
	h.WaitCalls(t, "ok-4", 2, daemontest.WaitTimeout)
	for _, q := range []string{"last_result=failed", "failed_within=10m", "failed_within=10m&group=sorry", "q=sad-end"} {
		var got taskListAnswer
		d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/tasks?total=1&"+q, nil, &got)
		if len(got.Tasks) != 1 || got.Tasks[0].Name != "sad" || got.Total != 1 || got.TotalMore {
			t.Errorf("%s: %d tasks %v, total %d more %v; want sad alone", q, len(got.Tasks), daemontest.Names(got.Tasks), got.Total, got.TotalMore)
		}
	}
	var ok taskListAnswer
	d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/tasks?total=1&last_result=success&sort=name", nil, &ok)
	if ok.Total != 5 || strings.Join(daemontest.Names(ok.Tasks), ",") != "ok-0,ok-1,ok-2,ok-3,ok-4" {
		t.Errorf("last_result=success: %v total %d", daemontest.Names(ok.Tasks), ok.Total)
	}
	sad := d.Get(t, "sad")
	if sad.Runtime.LastResult != model.ResultFailed || sad.Runtime.LastFailureAt == 0 || sad.Runtime.State == model.StateFailed {
		t.Errorf("sad's runtime: %+v", sad.Runtime)
	}
	// The state filter and the failure filter together: sad is SCHEDULED between its fires
	// (RUNNING for a moment in each), while failed_within finds it all along.
	testwait.For(t, daemontest.WaitTimeout, "sad SCHEDULED and failed within 10m", func() bool {
		var got taskListAnswer
		d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/tasks?total=1&failed_within=10m&state=SCHEDULED", nil, &got)
		return len(got.Tasks) == 1 && got.Tasks[0].Name == "sad" && got.Total == 1
	})
	// A bad filter is refused, naming it.
	for q, field := range map[string]string{
		"last_result=maybe": "last_result", "failed_within=soon": "failed_within", "failed_within=-1h": "failed_within",
		"breaker=closed": "breaker", "q=" + strings.Repeat("x", 300): "q",
	} {
		if msg := d.APIError(t, http.StatusBadRequest, http.MethodGet, "/api/v1/tasks?"+q, nil); !strings.HasPrefix(msg, field+":") {
			t.Errorf("%s: error %q does not name %s", q, msg, field)
		}
	}
}

// TestRunsAcrossTasks: GET /api/v1/runs pages every task's runs by cursor, each once and
// newest first, filters by result, group, task and time, and refuses bad filters.
func TestRunsAcrossTasks(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	h := daemontest.NewHook(t)
	d.Create(t, daemontest.Spec("a", h.URL("/ok/a"), "trigger", "manual", "group", "ga"))
	d.Create(t, daemontest.Spec("b", h.URL("/fail/b"), "trigger", "manual", "group", "gb"))
	var tickets []string
	for i := range 12 {
		name := "a"
		if i%3 == 0 {
			name = "b"
		}
		tickets = append(tickets, d.RunNow(t, name, nil))
	}
	for i, tk := range tickets {
		name := "a"
		if i%3 == 0 {
			name = "b"
		}
		d.WaitRun(t, name, tk)
	}
	var all []model.Run
	cursor := ""
	for range 10 {
		var page runListAnswer
		d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/runs?limit=5&total=1&cursor="+cursor, nil, &page)
		all = append(all, page.Runs...)
		if page.Total != 12 {
			t.Errorf("total %d, want 12", page.Total)
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	if len(all) != 12 {
		t.Fatalf("paged %d runs, want 12", len(all))
	}
	seen := map[string]bool{}
	for i, r := range all {
		if seen[r.Ticket] {
			t.Errorf("run %s listed twice", r.Ticket)
		}
		seen[r.Ticket] = true
		if i > 0 && (r.ScheduledAt > all[i-1].ScheduledAt || (r.ScheduledAt == all[i-1].ScheduledAt && r.Ticket > all[i-1].Ticket)) {
			t.Errorf("run %d (%s at %d) is newer than the one before it", i, r.Ticket, r.ScheduledAt)
		}
	}
	mid := all[6].ScheduledAt
	for q, want := range map[string]func(model.Run) bool{
		"result=failure":                     func(r model.Run) bool { return r.TaskName == "b" },
		"result=success,killed":              func(r model.Run) bool { return r.TaskName == "a" },
		"group=gb":                           func(r model.Run) bool { return r.TaskName == "b" },
		"task=a":                             func(r model.Run) bool { return r.TaskName == "a" },
		"task=a&result=failed":               func(model.Run) bool { return false },
		fmt.Sprintf("to=%d", mid):            func(r model.Run) bool { return r.ScheduledAt < mid },
		fmt.Sprintf("from=%d&group=ga", mid): func(r model.Run) bool { return r.ScheduledAt >= mid && r.TaskName == "a" },
	} {
		var page runListAnswer
		d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/runs?limit=100&total=1&"+q, nil, &page)
		var wantN int
		for _, r := range all {
			if want(r) {
				wantN++
			}
		}
		for _, r := range page.Runs {
			if !want(r) {
				t.Errorf("%s: listed %s of %s at %d", q, r.Ticket, r.TaskName, r.ScheduledAt)
			}
		}
		if len(page.Runs) != wantN || page.Total != wantN {
			t.Errorf("%s: %d runs, total %d; want %d", q, len(page.Runs), page.Total, wantN)
		}
	}
	for q, field := range map[string]string{
		"result=meh": "result", "cursor=!!": "cursor", "from=yesterday": "from", "limit=5000": "limit",
	} {
		if msg := d.APIError(t, http.StatusBadRequest, http.MethodGet, "/api/v1/runs?"+q, nil); !strings.HasPrefix(msg, field+":") {
			t.Errorf("%s: error %q does not name %s", q, msg, field)
		}
	}
	if code, _ := d.Call(t, http.MethodGet, "/api/v1/runs?task=nobody", nil); code != http.StatusNotFound {
		t.Errorf("runs of a task that does not exist: HTTP %d, want 404", code)
	}
}

// TestTimelinePages: a task's timeline pages by before, every event once, newest first,
// and the action filter keeps the kinds asked for.
func TestTimelinePages(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	h := daemontest.NewHook(t)
	d.Create(t, daemontest.Spec("tl", h.URL("/ok/tl"), "trigger", "manual"))
	for i := range 6 {
		d.WaitRun(t, "tl", d.RunNow(t, "tl", nil))
		d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/tasks/tl/pause", map[string]string{"note": fmt.Sprint("p", i)}, nil)
		d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/tasks/tl/resume", nil, nil)
	}
	var whole struct{ Actions []model.Action }
	d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/tasks/tl/actions?limit=1000", nil, &whole)
	var paged []model.Action
	before := int64(0)
	for range 100 {
		var page struct {
			Actions    []model.Action `json:"actions"`
			NextBefore int64          `json:"next_before"`
		}
		d.MustJSON(t, http.StatusOK, http.MethodGet, fmt.Sprintf("/api/v1/tasks/tl/actions?limit=4&before=%d", before), nil, &page)
		paged = append(paged, page.Actions...)
		if page.NextBefore == 0 {
			break
		}
		before = page.NextBefore
	}
	key := func(as []model.Action) string {
		var b strings.Builder
		for _, a := range as {
			fmt.Fprintf(&b, "%s@%d#%d;", a.Action, a.At, a.ID)
		}
		return b.String()
	}
	if key(paged) != key(whole.Actions) || len(whole.Actions) < 20 {
		t.Errorf("pages of 4 (%d events) differ from the whole timeline (%d events):\n%s\n%s", len(paged), len(whole.Actions), key(paged), key(whole.Actions))
	}
	var pauses struct{ Actions []model.Action }
	d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/tasks/tl/actions?action=pause", nil, &pauses)
	if len(pauses.Actions) != 6 || pauses.Actions[0].Detail != "p5" {
		t.Errorf("action=pause: %+v", pauses.Actions)
	}
	if msg := d.APIError(t, http.StatusBadRequest, http.MethodGet, "/api/v1/tasks/tl/actions?action=DROP%20TABLE", nil); !strings.HasPrefix(msg, "action:") {
		t.Errorf("a bad action filter: %q", msg)
	}
}

// TestMinuteStatsSurviveRestart: the fires of a minute are recorded in the store when the
// daemon stops, and a new daemon on the same store shows them in the day chart.
func TestMinuteStatsSurviveRestart(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "axe.db")
	d := daemontest.Start(t, dsn, nil)
	h := daemontest.NewHook(t)
	d.Create(t, daemontest.Spec("tick", h.URL("/ok/t"), "cron", "* * * * * *"))
	d.Create(t, daemontest.Spec("bad", h.URL("/fail/t"), "cron", "* * * * * *"))
	h.WaitCalls(t, "tick", 3, daemontest.WaitTimeout)
	h.WaitCalls(t, "bad", 3, daemontest.WaitTimeout)
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	// Counted before the second daemon starts: its own fires reach the same hook, and on a
	// loaded box they may before the statistics are read.
	failing := len(h.CallsOf("bad"))
	fired := len(h.CallsOf("tick")) + failing
	d2 := daemontest.Start(t, dsn, nil)
	var got struct {
		Minutes []struct {
			At        int64   `json:"at"`
			Fires     int64   `json:"fires"`
			Failures  int64   `json:"failures"`
			LateAvgMS float64 `json:"late_avg_ms"`
		} `json:"minutes"`
	}
	d2.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/stats/minutes", nil, &got)
	if len(got.Minutes) != 24*60 {
		t.Fatalf("%d minutes, want a day of them", len(got.Minutes))
	}
	var fires, failures int64
	for _, m := range got.Minutes {
		fires += m.Fires
		failures += m.Failures
	}
	// The first daemon's fires, all of them: the callbacks seen are at most the fires.
	if fires < int64(fired) || failures < int64(failing) || failures > fires {
		t.Errorf("after the restart the store holds %d fires and %d failures; the first daemon's callbacks saw %d fires, %d failing",
			fires, failures, fired, failing)
	}
	if last := got.Minutes[len(got.Minutes)-1].At; time.Since(time.UnixMilli(last)) > 2*time.Minute {
		t.Errorf("the newest minute is %s", time.UnixMilli(last))
	}
	if msg := d2.APIError(t, http.StatusBadRequest, http.MethodGet, "/api/v1/stats/minutes?hours=48", nil); !strings.HasPrefix(msg, "hours:") {
		t.Errorf("hours=48: %q", msg)
	}
}

// TestAlertDeliveries: without a webhook, an alert is listed as "no webhook".
func TestAlertDeliveries(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	h := daemontest.NewHook(t)
	d.Create(t, daemontest.Spec("once", h.URL("/fail/once"), "trigger", "delay", "delay_ms", 10))
	testwait.For(t, daemontest.WaitTimeout, "the final failure alert", func() bool {
		var got struct {
			Deliveries []struct {
				Kind, Task, Delivery string
			} `json:"deliveries"`
		}
		d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/alerts", nil, &got)
		return len(got.Deliveries) == 1 && got.Deliveries[0].Kind == "final_failure" && got.Deliveries[0].Task == "once" &&
			got.Deliveries[0].Delivery == "no webhook"
	})
}
