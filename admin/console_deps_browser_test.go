package admin_test

import (
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/axe-sched/axe/internal/test/daemontest"
)

// TestConsoleDependencyLinks: a task's page names the tasks it depends on as links, and a
// click on one opens that task's page (a name with ':' and '.' too).
func TestConsoleDependencyLinks(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	h := daemontest.NewHook(t)
	url := d.Base + "/"
	d.Create(t, daemontest.Spec("extract", h.URL("/ok/extract"), "trigger", "manual"))
	d.Create(t, daemontest.Spec("etl:load.v2", h.URL("/ok/load"), "trigger", "manual"))
	d.Create(t, daemontest.Spec("report", h.URL("/ok/report"), "depends_on", []string{"extract", "etl:load.v2"}))

	run(t, ctx, "open the downstream task", chromedp.Navigate(url+"#/tasks/report"))
	waitJS(t, ctx, "its dependencies", `document.querySelectorAll("#task-deps a").length === 2`)
	if v := mustEval(t, ctx, `document.querySelector("#task-deps").textContent`); v != "extract, etl:load.v2" {
		t.Errorf("Depends on reads %q, want extract, etl:load.v2", v)
	}
	run(t, ctx, "click the second dependency", chromedp.Click(`#task-deps a[data-task="etl:load.v2"]`, chromedp.ByQuery))
	waitJS(t, ctx, "the upstream task's page", `decodeURIComponent(location.hash) === "#/tasks/etl:load.v2" &&
		[...document.querySelectorAll("h1")].some(e => e.textContent === "etl:load.v2")`)
	if v := mustEval(t, ctx, `String(!!document.querySelector("#task-deps"))`); v != "false" {
		t.Errorf("the upstream task, which depends on none, shows a Depends on")
	}
}
