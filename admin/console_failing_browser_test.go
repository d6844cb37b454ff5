package admin_test

import (
	"fmt"
	"net/http"
	neturl "net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
)

// TestConsoleFailingNewestFirst: the overview's "Tasks failing in the last hour" opens the
// failing tasks newest failure first (one click), each with its failure time and how many of
// its runs failed in a row and in all; the sort is a column of the list, kept in the address.
func TestConsoleFailingNewestFirst(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	h := daemontest.NewHook(t)
	url := d.Base + "/"
	d.Create(t, daemontest.Spec("ff-ok", h.URL("/ok/ff-ok"), "trigger", "delay", "delay_ms", 0))
	var last int64
	for _, name := range []string{"ff-a", "ff-c", "ff-b"} { // names not in failure order
		testwait.For(t, daemontest.WaitTimeout, "a new millisecond", func() bool { return nowMS() > last })
		last = failOnce(t, d, h, name, "default")
	}
	run(t, ctx, "open the overview", chromedp.Navigate(url+"#/overview"))
	waitJS(t, ctx, "3 failing", `(document.querySelector("#ov-failing") || {}).textContent?.includes("3")`)
	run(t, ctx, "open the failing tasks", chromedp.Click("#ov-failing", chromedp.ByQuery))
	waitJS(t, ctx, "the failing tasks, newest failure first", `[...document.querySelectorAll("#task-table tbody tr")].map(r => r.dataset.task).join(",") === "ff-b,ff-c,ff-a"`)
	if v := mustEval(t, ctx, `location.hash`); !strings.Contains(v, "sort=failed") || !strings.Contains(v, "failed_within=1h") {
		t.Errorf("the address is %q, want the sort and the filter", v)
	}
	if v := mustEval(t, ctx, `document.querySelector("#task-table button.sort.active").textContent`); !strings.HasPrefix(v, "Last result, newest failure") {
		t.Errorf("the active sort reads %q", v)
	}
	rt := d.Get(t, "ff-b").Runtime
	want := ""
	if rt.ConsecutiveFailures > 0 {
		want += fmt.Sprintf("%d in a row", rt.ConsecutiveFailures)
	}
	if rt.FailureCount > 0 {
		if want != "" {
			want += ", "
		}
		want += fmt.Sprintf("%d failed in all", rt.FailureCount)
	}
	if want == "" {
		t.Fatalf("ff-b's runtime counts no failure: %+v", rt)
	}
	if v := mustEval(t, ctx, `document.querySelector('#task-table tr[data-task="ff-b"] .fail-count').textContent`); v != " · "+want {
		t.Errorf("ff-b's failure count reads %q, want %q", v, " · "+want)
	}
	// Sorted by name again, then by failure from the column: the same order.
	run(t, ctx, "sort by name", chromedp.Click(`#task-table button.sort[title="Sort by Name"]`, chromedp.ByQuery))
	waitJS(t, ctx, "by name", `[...document.querySelectorAll("#task-table tbody tr")].map(r => r.dataset.task).join(",") === "ff-a,ff-b,ff-c"`)
	run(t, ctx, "sort by failure", chromedp.Click(`#task-table button.sort[title="Sort by Last result, newest failure"]`, chromedp.ByQuery))
	waitJS(t, ctx, "by failure again", `[...document.querySelectorAll("#task-table tbody tr")].map(r => r.dataset.task).join(",") === "ff-b,ff-c,ff-a"`)
}

// TestConsoleChartMinuteRuns: a minute of the overview's chart opens the Runs list of the
// runs scheduled in that minute: the run of that minute is listed, a run of another minute
// (a backfill's, ten minutes before) is not, and the other way round.
func TestConsoleChartMinuteRuns(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	h := daemontest.NewHook(t)
	url := d.Base + "/"
	d.Create(t, daemontest.Spec("minutely", h.URL("/ok/m"), "cron", "0 * * * * *", "timezone", "UTC"))
	now := d.RunNow(t, "minutely", nil)
	d.WaitRun(t, "minutely", now)
	var nowRun model.Run
	d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/runs/"+now, nil, &nowRun)
	// A backfill of the fire ten minutes before the run-now's minute.
	minute := nowRun.ScheduledAt / 60000 * 60000
	past := minute - 10*60000
	d.MustJSON(t, http.StatusCreated, http.MethodPost, "/api/v1/tasks/minutely/backfill", map[string]any{
		"from": time.UnixMilli(past).UTC().Format(time.RFC3339), "to": time.UnixMilli(past + 30000).UTC().Format(time.RFC3339), "parallel": 1}, nil)
	var bf model.Run
	testwait.For(t, daemontest.WaitTimeout, "the backfill's run ended", func() bool {
		for _, r := range d.Runs(t, "minutely") {
			if r.Kind == model.RunBackfill && r.Result != model.ResultRunning {
				bf = r
				return true
			}
		}
		return false
	})
	if bf.ScheduledAt != past {
		t.Fatalf("the backfill's run was scheduled at %d, want %d", bf.ScheduledAt, past)
	}
	listed := `[...document.querySelectorAll("#all-runs-table tbody tr")].map(r => r.dataset.ticket)`
	for _, c := range []struct {
		at         int64
		want, not  string
		whichLabel string
	}{{minute, now, bf.Ticket, "the run-now's minute"}, {past, bf.Ticket, now, "the backfill's minute"}} {
		run(t, ctx, "open the overview", chromedp.Navigate(url+"#/overview"))
		sel := fmt.Sprintf(`#overview-chart a.minute[data-minute="%d"]`, c.at)
		waitJS(t, ctx, c.whichLabel+" in the chart", fmt.Sprintf(`!!document.querySelector(%q)`, sel))
		clickUntil(t, ctx, "click "+c.whichLabel, sel, `location.hash.startsWith("#/runs?")`)
		waitJS(t, ctx, "its runs", fmt.Sprintf(`%s.includes(%q)`, listed, c.want))
		if v := mustEval(t, ctx, listed+`.join(",")`); strings.Contains(v, c.not) {
			t.Errorf("%s lists %s, a run of another minute", c.whichLabel, v)
		}
		if v := mustEval(t, ctx, `location.hash`); !strings.Contains(v, fmt.Sprintf("from=%d", c.at)) || !strings.Contains(v, fmt.Sprintf("to=%d", c.at+60000)) {
			t.Errorf("%s opened %q", c.whichLabel, v)
		}
	}

	// The day chart: a click at the backfill's minute opens its runs.
	run(t, ctx, "open the overview", chromedp.Navigate(url+"#/overview"))
	waitJS(t, ctx, "the day chart", `!!document.querySelector("#overview-day svg") && !!document.querySelector("#overview-day").dataset.first`)
	run(t, ctx, "click the backfill's minute in the day chart", chromedp.Evaluate(fmt.Sprintf(`(() => {
		const fig = document.querySelector("#overview-day"), el = fig.querySelector("svg"), box = el.getBoundingClientRect();
		const i = (%d - Number(fig.dataset.first)) / 60000, n = 24 * 60;
		const x = 30 + (i / (n - 1)) * (900 - 30 - 40);
		// A whole pixel, as a mouse gives: on this viewport a pixel spans more than one minute.
		el.dispatchEvent(new MouseEvent("click", {bubbles: true, clientX: Math.round(box.left + x * box.width / 900), clientY: Math.round(box.top + box.height / 2)}));
		return true; })()`, past), nil))
	// The pixel's minutes: the backfill's among them, the run-now's ten minutes later not.
	waitJS(t, ctx, "the backfill's runs", fmt.Sprintf(`%s.includes(%q)`, listed, bf.Ticket))
	q := mustEval(t, ctx, `location.hash`)
	u, err := neturl.Parse(strings.TrimPrefix(q, "#"))
	if err != nil {
		t.Fatalf("the day chart opened %q: %v", q, err)
	}
	from, _ := strconv.ParseInt(u.Query().Get("from"), 10, 64)
	to, _ := strconv.ParseInt(u.Query().Get("to"), 10, 64)
	if from%60000 != 0 || to%60000 != 0 || from > past || to <= past || to-from > 5*60000 {
		t.Errorf("the day chart's click at the backfill's minute %d opened %q: want whole minutes around it, at most 5", past, q)
	}
	if v := mustEval(t, ctx, listed+`.join(",")`); strings.Contains(v, now) {
		t.Errorf("the day chart's pixel lists %s, a run ten minutes later", v)
	}
}
