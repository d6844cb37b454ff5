package admin_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/persist/persisttest"
)

// apiRequest is one API request the page sent.
type apiRequest struct {
	method, url, body string
}

// recordRequests records the API requests the page sends, with their bodies.
func recordRequests(t *testing.T, ctx context.Context) func() []apiRequest {
	t.Helper()
	var mu sync.Mutex
	var reqs []apiRequest
	chromedp.ListenTarget(ctx, func(ev any) {
		e, ok := ev.(*network.EventRequestWillBeSent)
		if !ok || !strings.Contains(e.Request.URL, "/api/v1/") {
			return
		}
		var body strings.Builder
		for _, p := range e.Request.PostDataEntries {
			b, _ := base64.StdEncoding.DecodeString(p.Bytes)
			body.Write(b)
		}
		mu.Lock()
		reqs = append(reqs, apiRequest{e.Request.Method, e.Request.URL, body.String()})
		mu.Unlock()
	})
	run(t, ctx, "enable the network domain", network.Enable())
	return func() []apiRequest {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(reqs)
	}
}

// TestConsoleBrowserBulk: the task list's bulk actions go through the bulk API, a ticked
// selection as {"names": [...]}, "all matching the filter" as the filter's selector whose
// dry-run count the confirmation shows; a cancelled confirmation changes nothing.
func TestConsoleBrowserBulk(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	dir := artifacts(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), func(c *axedaemon.Config) { c.BasePath = consoleBase })
	api := consoleBase + "/api/v1"
	url := d.Base + consoleBase + "/"
	for i := range 8 {
		d.MustJSON(t, http.StatusCreated, http.MethodPost, api+"/tasks", daemontest.Spec(fmt.Sprintf("etl-%02d", i), "http://127.0.0.1:1/x", "trigger", "manual", "group", "etl"), nil)
	}
	for i := range 4 {
		d.MustJSON(t, http.StatusCreated, http.MethodPost, api+"/tasks", daemontest.Spec(fmt.Sprintf("web-%02d", i), "http://127.0.0.1:1/x", "trigger", "manual", "group", "web"), nil)
	}
	requests := recordRequests(t, ctx)
	rows := func(n int, prefix string) string {
		return fmt.Sprintf(`(() => { const r = [...document.querySelectorAll("#task-table tbody tr")].map(x => x.dataset.task);
			return r.length === %d && r.every(n => n.startsWith(%q)); })()`, n, prefix)
	}
	confirmText := func() string {
		var s string
		run(t, ctx, "read the confirmation", chromedp.WaitVisible("#confirm-ok", chromedp.ByQuery), chromedp.Text("#confirm-text", &s, chromedp.ByQuery))
		return s
	}
	count := func() int {
		var page struct{ Count int }
		d.MustJSON(t, http.StatusOK, http.MethodGet, api+"/tasks?limit=100", nil, &page)
		return page.Count
	}
	state := func(name string) string { return string(getAt(t, d, api, name).Runtime.State) }

	// A ticked selection: {"names": [...]}.
	run(t, ctx, "open the etl group", chromedp.Navigate(url+"#/tasks?group=etl"))
	waitJS(t, ctx, "eight etl rows", rows(8, "etl-"))
	run(t, ctx, "tick two rows and pause",
		chromedp.Click(`#task-table tr[data-task="etl-01"] input[type=checkbox]`, chromedp.ByQuery),
		chromedp.Click(`#task-table tr[data-task="etl-03"] input[type=checkbox]`, chromedp.ByQuery),
		chromedp.Click("#bulk-pause", chromedp.ByQuery))
	if s := confirmText(); s != "Pause 2 task(s)?" {
		t.Errorf("confirmation %q", s)
	}
	run(t, ctx, "confirm", chromedp.Click("#confirm-ok", chromedp.ByQuery))
	waitJS(t, ctx, "two rows paused", `[...document.querySelectorAll("#task-table tbody tr")].filter(r => r.textContent.includes("PAUSED")).length === 2`)
	if state("etl-01") != "PAUSED" || state("etl-03") != "PAUSED" || state("etl-00") == "PAUSED" {
		t.Errorf("after pausing the ticked rows: etl-00 %s, etl-01 %s, etl-03 %s", state("etl-00"), state("etl-01"), state("etl-03"))
	}

	// All matching group=etl and state=PAUSED: the confirmation counts them by a dry run.
	run(t, ctx, "filter the paused etl tasks",
		chromedp.SetValue("#f-state", "PAUSED", chromedp.ByQuery), chromedp.Click("#f-apply", chromedp.ByQuery))
	waitJS(t, ctx, "two paused rows", rows(2, "etl-"))
	run(t, ctx, "select all matching and resume",
		chromedp.Click("#bulk-all", chromedp.ByQuery), chromedp.Click("#bulk-resume", chromedp.ByQuery))
	if s := confirmText(); s != "Resume all 2 task(s) matching group = etl, state = PAUSED?" {
		t.Errorf("confirmation %q", s)
	}
	run(t, ctx, "confirm", chromedp.Click("#confirm-ok", chromedp.ByQuery))
	waitJS(t, ctx, "no paused row left", `document.querySelectorAll("#task-table tbody tr").length === 0`)
	if state("etl-01") == "PAUSED" || state("etl-03") == "PAUSED" {
		t.Errorf("after resuming all matching: etl-01 %s, etl-03 %s", state("etl-01"), state("etl-03"))
	}

	// Delete all of group web: cancelled first (nothing changes), then confirmed.
	run(t, ctx, "filter group web",
		chromedp.SetValue("#f-state", "", chromedp.ByQuery), setField("#f-group", "web"), chromedp.Click("#f-apply", chromedp.ByQuery))
	waitJS(t, ctx, "four web rows", rows(4, "web-"))
	run(t, ctx, "select all matching and delete", chromedp.Click("#bulk-all", chromedp.ByQuery), chromedp.Click("#bulk-delete", chromedp.ByQuery))
	if s := confirmText(); s != "Delete all 4 task(s) matching group = web? Their runs and records are removed." {
		t.Errorf("confirmation %q", s)
	}
	shot(t, ctx, dir, "tasks-bulk-confirm.png")
	run(t, ctx, "cancel", chromedp.Click("#confirm-cancel", chromedp.ByQuery))
	if n := count(); n != 12 {
		t.Fatalf("after a cancelled bulk delete %d tasks are left, want 12", n)
	}
	run(t, ctx, "delete again and confirm", chromedp.Click("#bulk-delete", chromedp.ByQuery))
	confirmText()
	run(t, ctx, "confirm", chromedp.Click("#confirm-ok", chromedp.ByQuery))
	waitJS(t, ctx, "no web row left", `document.querySelectorAll("#task-table tbody tr").length === 0`)
	testwait.For(t, daemontest.WaitTimeout, "the web tasks to be gone", func() bool { return count() == 8 })

	// Every write went through the bulk API; none task by task.
	var got []string
	perTask := regexp.MustCompile(`/api/v1/tasks/[^/?]+(/(pause|resume|run))?$`)
	for _, r := range requests() {
		if r.method == http.MethodGet {
			continue
		}
		path := r.url[strings.Index(r.url, "/api/v1/"):]
		if perTask.MatchString(path) && !strings.Contains(path, "/bulk/") {
			t.Errorf("a per-task write: %s %s", r.method, path)
		}
		got = append(got, r.method+" "+path)
		if path == "/api/v1/tasks/bulk/pause" {
			var sel struct {
				Names []string `json:"names"`
				Note  string   `json:"note"`
			}
			if err := json.Unmarshal([]byte(r.body), &sel); err != nil || !slices.Equal(slices.Sorted(slices.Values(sel.Names)), []string{"etl-01", "etl-03"}) {
				t.Errorf("bulk pause body %s (%v), want the two names", r.body, err)
			}
		}
		if strings.HasPrefix(path, "/api/v1/tasks/bulk/delete") && !strings.Contains(r.body, `"group":"web"`) {
			t.Errorf("bulk delete body %s, want the group selector", r.body)
		}
	}
	want := []string{
		"POST /api/v1/tasks/bulk/pause",
		"POST /api/v1/tasks/bulk/resume?dry_run=true", "POST /api/v1/tasks/bulk/resume",
		"POST /api/v1/tasks/bulk/delete?dry_run=true", "POST /api/v1/tasks/bulk/delete?dry_run=true", "POST /api/v1/tasks/bulk/delete",
	}
	if !slices.Equal(got, want) {
		t.Errorf("the page's writes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestConsoleBrowserBackup opens a backup's console with two HA nodes on MariaDB: the
// banner names the primary, and a pause from the backup's console (task page and bulk) is
// done by the primary, recorded with the console's actor.
func TestConsoleBrowserBackup(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	dsn := persisttest.MySQLSchemaDSN(t)
	ctx := browser(t)
	dir := artifacts(t)
	mod := func(c *axedaemon.Config) { c.BasePath = consoleBase }
	a := haConsoleNodeNoToken(t, dsn, "a", mod)
	a.WaitRole(t, "primary", daemontest.WaitTimeout)
	b := haConsoleNodeNoToken(t, dsn, "b", mod)
	b.WaitRole(t, "backup", daemontest.WaitTimeout)
	testwait.For(t, daemontest.WaitTimeout, "the backup to name the primary", func() bool {
		_, r := b.Readyz(t, "")
		return r.Primary == a.Base
	})
	api := consoleBase + "/api/v1"
	for _, n := range []string{"report-a", "report-b", "report-c"} {
		a.MustJSON(t, http.StatusCreated, http.MethodPost, api+"/tasks", daemontest.Spec(n, "http://127.0.0.1:1/x", "trigger", "manual", "group", "reports"), nil)
	}

	run(t, ctx, "open the backup's console", chromedp.Navigate(b.Base+consoleBase+"/#/tasks/report-a"))
	waitJS(t, ctx, "the backup banner", fmt.Sprintf(`(document.querySelector("#banner-primary") || {}).textContent === %q &&
		!document.querySelector("#banner").hidden`, a.Base))
	// The button is clicked as an element, not at a point: on a loaded machine the page may
	// still be laying out the sections that load after it, and a click at the point chromedp
	// measured meets another element (the task stayed WAITING).
	run(t, ctx, "pause with a note on the backup",
		chromedp.WaitVisible("#pause-note", chromedp.ByQuery),
		chromedp.SetValue("#pause-note", "paused on the backup", chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector("#act-pause").click()`, nil))
	waitJS(t, ctx, "the note on the page", `(document.querySelector("#task-note") || {}).textContent === "Note: paused on the backup"`)
	shot(t, ctx, dir, "backup-console.png")
	if v := getAt(t, a, api, "report-a"); v.Runtime.State != "PAUSED" || v.Runtime.Note != "paused on the backup" {
		t.Errorf("the primary holds report-a as %s %q, want paused with the note", v.Runtime.State, v.Runtime.Note)
	}
	var acts struct {
		Actions []struct{ Action, Actor string }
	}
	a.MustJSON(t, http.StatusOK, http.MethodGet, api+"/tasks/report-a/actions", nil, &acts)
	if i := slices.IndexFunc(acts.Actions, func(x struct{ Action, Actor string }) bool { return x.Action == "pause" }); i < 0 || acts.Actions[i].Actor != "api:console" {
		t.Errorf("report-a's actions %+v, want a pause by api:console", acts.Actions)
	}

	run(t, ctx, "bulk pause the group on the backup",
		chromedp.Navigate(b.Base+consoleBase+"/#/tasks?group=reports"),
		chromedp.WaitVisible(`#task-table tr[data-task="report-c"]`, chromedp.ByQuery),
		chromedp.Click("#bulk-all", chromedp.ByQuery), chromedp.Click("#bulk-pause", chromedp.ByQuery),
		chromedp.WaitVisible("#confirm-ok", chromedp.ByQuery))
	var s string
	run(t, ctx, "read and confirm", chromedp.Text("#confirm-text", &s, chromedp.ByQuery), chromedp.Click("#confirm-ok", chromedp.ByQuery))
	if s != "Pause all 3 task(s) matching group = reports?" {
		t.Errorf("confirmation %q", s)
	}
	testwait.For(t, daemontest.WaitTimeout, "the primary to hold the group paused", func() bool {
		return getAt(t, a, api, "report-b").Runtime.State == "PAUSED" && getAt(t, a, api, "report-c").Runtime.State == "PAUSED"
	})
	waitJS(t, ctx, "three paused rows", `[...document.querySelectorAll("#task-table tbody tr")].filter(r => r.textContent.includes("PAUSED")).length === 3`)
}

// haConsoleNodeNoToken is an HA node without a token.
func haConsoleNodeNoToken(t *testing.T, dsn, id string, mod func(*axedaemon.Config)) *daemontest.Daemon {
	t.Helper()
	return haConsoleNode(t, dsn, id, func(c *axedaemon.Config) {
		c.Token = ""
		mod(c)
	})
}
