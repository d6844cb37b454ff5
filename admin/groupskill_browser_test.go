package admin_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/axe-sched/axe/engine"
	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/model"
)

// TestConsoleBrowserGroupsAndKill: on the Groups page a group's pause and resume each ask
// first with a note box; the resume leaves the task paused on its own (with its note) paused
// and lists it with who paused it. A run-now run is killed with a reason from its run page,
// another from its running row on the task page.
func TestConsoleBrowserGroupsAndKill(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	dir := artifacts(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), func(c *axedaemon.Config) {
		c.BasePath = consoleBase
		c.Engine = engine.Config{HeartbeatInterval: 300 * time.Millisecond, LostAfter: 1500 * time.Millisecond}
	})
	hook := daemontest.NewHook(t)
	api := consoleBase + "/api/v1"
	url := d.Base + consoleBase + "/"
	for _, n := range []string{"web-1", "web-2", "web-3"} {
		d.MustJSON(t, http.StatusCreated, "POST", api+"/tasks", daemontest.Spec(n, hook.URL("/ok"), "trigger", "manual", "group", "web"), nil)
	}
	d.MustJSON(t, http.StatusCreated, "POST", api+"/tasks", daemontest.Spec("hang", hook.URL("/hang"), "trigger", "manual", "timeout_sec", 300), nil)
	d.MustJSON(t, http.StatusOK, "POST", api+"/tasks/web-2/pause", map[string]string{"note": "INC-4411"}, nil)

	// The group's pause, with a note typed in the confirmation.
	run(t, ctx, "open groups", chromedp.Navigate(url+"#/groups"),
		chromedp.WaitVisible(`#groups-table tr[data-group="web"] .group-pause`, chromedp.ByQuery))
	clickUntil(t, ctx, "group pause", `#groups-table tr[data-group="web"] .group-pause`, `document.getElementById("confirm").open`)
	waitJS(t, ctx, "the note box", `!document.getElementById("confirm-note-label").hidden`)
	run(t, ctx, "confirm the pause with a note", setField("#confirm-note", "deploy 7"),
		chromedp.Click("#confirm-ok", chromedp.ByQuery))
	waitJS(t, ctx, "group web paused", `(() => { const c = document.querySelectorAll('#groups-table tr[data-group="web"] td');
		return c.length > 9 && c[2 + 6].textContent === "3"; })()`)
	if got := getAt(t, d, api, "web-1"); got.Runtime.Note != "deploy 7" || got.Runtime.PausedBy != model.PausedByGroup("web") {
		t.Errorf("web-1 after the group's pause: note %q, paused by %q", got.Runtime.Note, got.Runtime.PausedBy)
	}

	// The group's resume, confirmed: web-2, paused on its own, stays paused and is listed.
	clickUntil(t, ctx, "group resume", `#groups-table tr[data-group="web"] .group-resume`, `document.getElementById("confirm").open`)
	run(t, ctx, "confirm the resume", setField("#confirm-note", "deploy 7 done"), chromedp.Click("#confirm-ok", chromedp.ByQuery))
	waitJS(t, ctx, "the task left paused listed", `(() => { const r = document.querySelector('#groups-left-table tr[data-task="web-2"]');
		return !!r && r.textContent.includes("its own pause") && r.textContent.includes("INC-4411"); })()`)
	shot(t, ctx, dir, "groups-resume-left.png")
	for n, want := range map[string]model.State{"web-1": model.StateWaiting, "web-3": model.StateWaiting, "web-2": model.StatePaused} {
		if got := getAt(t, d, api, n); got.Runtime.State != want {
			t.Errorf("%s after the group's resume: %s, want %s", n, got.Runtime.State, want)
		}
	}
	if got := getAt(t, d, api, "web-2"); got.Runtime.Note != "INC-4411" {
		t.Errorf("web-2's note after the group's resume = %q, want INC-4411", got.Runtime.Note)
	}

	// A run-now run killed from its run page, with a reason.
	var started struct {
		Ticket string `json:"ticket"`
	}
	d.MustJSON(t, http.StatusAccepted, "POST", api+"/tasks/hang/run", nil, &started)
	hook.WaitCalls(t, "hang", 1, 20*time.Second)
	run(t, ctx, "open the run", chromedp.Navigate(url+"#/run/"+started.Ticket), chromedp.WaitVisible("#run-kill", chromedp.ByQuery))
	clickUntil(t, ctx, "kill the run", "#run-kill", `document.getElementById("confirm").open`)
	run(t, ctx, "confirm the kill with a reason", setField("#confirm-note", "wrong params"), chromedp.Click("#confirm-ok", chromedp.ByQuery))
	waitJS(t, ctx, "the run killed", `(document.getElementById("run-result") || {}).textContent === "killed"`)
	var r model.Run
	d.MustJSON(t, http.StatusOK, "GET", api+"/runs/"+started.Ticket, nil, &r)
	if r.Result != model.ResultKilled || !strings.Contains(r.Error, "wrong params") {
		t.Errorf("the run killed from its page = %+v", r)
	}

	// Another killed from its running row on the task page.
	d.MustJSON(t, http.StatusAccepted, "POST", api+"/tasks/hang/run", nil, &started)
	hook.WaitCalls(t, "hang", 2, 20*time.Second)
	row := `#runs-table tr[data-ticket="` + started.Ticket + `"]`
	run(t, ctx, "open the task", chromedp.Navigate(url+"#/tasks/hang"), chromedp.WaitVisible(row+" .run-kill", chromedp.ByQuery))
	clickUntil(t, ctx, "kill the running row", row+" .run-kill", `document.getElementById("confirm").open`)
	run(t, ctx, "confirm the row's kill", chromedp.Click("#confirm-ok", chromedp.ByQuery))
	waitJS(t, ctx, "the row killed", `(document.querySelector('`+row+`') || {dataset: {}}).dataset.result === "killed"`)
	if got := getAt(t, d, api, "hang"); got.Runtime.LastResult != model.ResultKilled {
		t.Errorf("hang's last result after the kills = %q, want killed", got.Runtime.LastResult)
	}
}
