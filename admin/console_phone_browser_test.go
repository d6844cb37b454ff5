package admin_test

import (
	"path/filepath"
	"strconv"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/axe-sched/axe/internal/test/daemontest"
)

// phoneOverflow is a script that answers "" when the page is no wider than the screen,
// else how much wider it is and the outermost elements that stick out.
const phoneOverflow = `(() => {
	const W = document.documentElement.clientWidth;
	const extra = document.documentElement.scrollWidth - W;
	if (extra <= 0) return "";
	const out = [...document.querySelectorAll("body *")].filter(e => {
		const r = e.getBoundingClientRect();
		return r.width > 0 && r.right > W + 0.5 && !(e.parentElement && e.parentElement.getBoundingClientRect().right > W + 0.5);
	}).slice(0, 5).map(e => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (e.className && typeof e.className === "string" ? "." + e.className.replace(/ /g, ".") : "") + " " + Math.round(e.getBoundingClientRect().right) + "px");
	return extra + "px wider than " + W + ": " + out.join(", ");
})()`

// TestConsoleBrowserPhone: at 390 px on a phone, no page of the daily round (overview, tasks,
// a task, its edit form, the new-task form, runs, a run) is wider than the screen; the nav
// is one Menu button until opened; a row of the runs list is at most four short lines high.
func TestConsoleBrowserPhone(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	h := daemontest.NewHook(t)
	url := d.Base + "/"
	d.Create(t, daemontest.Spec("a-rather-long-task-name-for-a-phone-screen", h.URL("/fail/with-a-long-callback-path/that/goes/on"),
		"cron", "*/2 * * * * *", "group", "team-with-a-long-name", "timezone", "America/Argentina/Buenos_Aires"))
	d.Create(t, daemontest.Spec("report", h.URL("/ok/r"), "cron", "0 */15 * * * *", "group", "team-1"))
	h.WaitCalls(t, "a-rather-long-task-name-for-a-phone-screen", 2, daemontest.WaitTimeout)
	runs := d.Runs(t, "a-rather-long-task-name-for-a-phone-screen")
	long := "a-rather-long-task-name-for-a-phone-screen"

	run(t, ctx, "phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	pages := []struct{ name, hash, ready string }{
		{"overview", "#/overview", `!!document.querySelector("#ov-failing .value") && !!document.querySelector("#overview-day svg")`},
		{"tasks", "#/tasks", `document.querySelectorAll("#task-table tbody tr").length === 2`},
		{"task", "#/tasks/" + long, `document.querySelectorAll("#runs-table tbody tr").length > 1 && document.querySelectorAll("#task-timeline li").length > 1`},
		{"edit", "#/tasks/" + long + "/edit", `!!document.querySelector("#cron-preview #fires-table")`},
		{"new", "#/new", `!!document.querySelector("#cron-preview #fires-table")`},
		{"runs", "#/runs", `document.querySelectorAll("#all-runs-table tbody tr").length > 1`},
		{"run", "#/run/" + runs[len(runs)-1].Ticket, `document.querySelector("#run-error").textContent.length > 5`},
	}
	for _, p := range pages {
		run(t, ctx, "open "+p.name, chromedp.Navigate(url+"#"+p.hash[1:]))
		waitJS(t, ctx, p.name+" rendered", "(() => { try { return "+p.ready+"; } catch { return false; } })()")
		if over := mustEval(t, ctx, phoneOverflow); over != "" {
			t.Errorf("%s at 390 px: %s", p.name, over)
		}
	}

	// The nav is one button until opened; opened, its links show and one of them navigates.
	navH := func() int {
		n, _ := strconv.Atoi(mustEval(t, ctx, `String(Math.round(document.querySelector("header.top").getBoundingClientRect().height))`))
		return n
	}
	closed := navH()
	if v := mustEval(t, ctx, `String(document.querySelector('nav a[data-nav="tasks"]').offsetParent === null)`); v != "true" {
		t.Errorf("the nav's links show at 390 px before the menu is opened")
	}
	if closed > 60 {
		t.Errorf("the closed header is %d px high, want one line", closed)
	}
	clickUntil(t, ctx, "open the menu", "#nav-toggle", `document.querySelector('nav a[data-nav="tasks"]').offsetParent !== null`)
	if v := mustEval(t, ctx, `document.querySelector("#nav-toggle").getAttribute("aria-expanded")`); v != "true" {
		t.Errorf("the open menu's button says aria-expanded=%q", v)
	}
	run(t, ctx, "go to tasks", chromedp.Click(`nav a[data-nav="tasks"]`, chromedp.ByQuery))
	waitJS(t, ctx, "the tasks, the menu closed", `location.hash === "#/tasks" && document.querySelector('nav a[data-nav="tasks"]').offsetParent === null`)

	// Compact rows: a run row is at most four short lines (ticket, task, time with duration
	// and result, the error's first line), 90 px; the table's seven columns took 190.
	run(t, ctx, "open runs", chromedp.Navigate(url+"#/runs"))
	waitJS(t, ctx, "runs", `document.querySelectorAll("#all-runs-table tbody tr").length > 1`)
	tall, _ := strconv.Atoi(mustEval(t, ctx, `String(Math.round(Math.max(...[...document.querySelectorAll("#all-runs-table tbody tr")].map(r => r.getBoundingClientRect().height))))`))
	t.Logf("runs list at 390 px: the tallest row is %d px", tall)
	if tall > 90 {
		t.Errorf("a runs row at 390 px is %d px high, want at most four short lines (90 px)", tall)
	}
	if over := mustEval(t, ctx, phoneOverflow); over != "" {
		t.Errorf("runs at 390 px: %s", over)
	}
	shot(t, ctx, artifacts(t), "phone-runs.png")
}
