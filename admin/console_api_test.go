package admin_test

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/axe-sched/axe/admin"
	"github.com/axe-sched/axe/internal/test/daemontest"

	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/testwait"
)

// TestTaskListPages walks the task list by cursor in every indexed order, with and without
// the name-prefix and group filters, on both stores, and checks that the pages together are
// exactly the matching tasks in order, each once.
func TestTaskListPages(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, nil)
		var all []string
		for i := 0; i < 23; i++ {
			grp := []string{"b", "a", "c"}[i%3]
			name := fmt.Sprintf("%s-%02d", []string{"zeta", "alpha", "mid"}[i%3], 22-i)
			all = append(all, name)
			d.Create(t, daemontest.Spec(name, "http://127.0.0.1:1/x", "trigger", "manual", "group", grp))
		}
		walk := func(query string) []string {
			t.Helper()
			var got []string
			cursor := ""
			for page := 0; page < 50; page++ {
				var v struct {
					Tasks []struct {
						Name  string `json:"name"`
						Group string `json:"group"`
					} `json:"tasks"`
					NextCursor string `json:"next_cursor"`
				}
				q := query + "&limit=4"
				if cursor != "" {
					q += "&cursor=" + url.QueryEscape(cursor)
				}
				d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/tasks?"+q, nil, &v)
				for _, x := range v.Tasks {
					got = append(got, x.Name)
				}
				if v.NextCursor == "" {
					return got
				}
				cursor = v.NextCursor
			}
			t.Fatalf("%s: more than 50 pages", query)
			return nil
		}
		byName := slices.Clone(all)
		sort.Strings(byName)
		if got := walk("sort=name"); !slices.Equal(got, byName) {
			t.Errorf("sort=name: %v, want %v", got, byName)
		}
		var alpha []string
		for _, n := range byName {
			if strings.HasPrefix(n, "alpha-") {
				alpha = append(alpha, n)
			}
		}
		if got := walk("sort=name&name_prefix=alpha-"); !slices.Equal(got, alpha) {
			t.Errorf("name_prefix=alpha-: %v, want %v", got, alpha)
		}
		if got := walk("sort=id"); !slices.Equal(got, all) {
			t.Errorf("sort=id: %v, want %v", got, all)
		}
		var groupA []string // group a holds the alpha- tasks, here in creation (id) order
		for _, n := range all {
			if strings.HasPrefix(n, "alpha-") {
				groupA = append(groupA, n)
			}
		}
		if got := walk("sort=id&group=a"); !slices.Equal(got, groupA) {
			t.Errorf("group=a: %v, want %v", got, groupA)
		}
		byGroup := walk("sort=group")
		if len(byGroup) != len(all) || byGroup[0][:5] != "alpha" || byGroup[len(byGroup)-1][:3] != "mid" {
			t.Errorf("sort=group: %v, want the alpha- (group a) tasks first and mid- (group c) last", byGroup)
		}
		if got := walk("sort=next"); len(got) != len(all) {
			t.Errorf("sort=next: %d tasks, want %d", len(got), len(all))
		}

		for _, c := range []struct{ query, field string }{
			{"sort=size", "sort"},
			{"cursor=%%%", "cursor"},
			{"name_prefix=%C3%A9", "name_prefix"},
			{"sort=next&cursor=" + url.QueryEscape("bm90LWEtbnVtYmVyADE"), "cursor"},
		} {
			if msg := d.APIError(t, http.StatusBadRequest, http.MethodGet, "/api/v1/tasks?"+c.query, nil); !strings.HasPrefix(msg, c.field) {
				t.Errorf("%s: error %q does not start with the field %s", c.query, msg, c.field)
			}
		}
	})
}

// TestConsoleAPI checks the console's additions to the API: whoami, groups, overview, the
// DST marks and from= of cron/next, and the base path.
func TestConsoleAPI(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, "sqlite:"+t.TempDir()+"/axe.db", func(c *axedaemon.Config) { c.BasePath = "/ops/axe"; c.Token = "tok-0123456789abcdef" })
	h := daemontest.NewHook(t)
	api := "/ops/axe/api/v1"

	var who map[string]string
	d.MustJSON(t, http.StatusOK, http.MethodGet, api+"/whoami", nil, &who)
	if who["name"] != admin.DefaultTokenName || who["scope"] != "write" {
		t.Errorf("whoami = %v", who)
	}
	d.Token = ""
	d.APIError(t, http.StatusUnauthorized, http.MethodGet, api+"/whoami", nil)
	// The API is under the prefix only; health and metrics stay at the root.
	if code, _ := d.Call(t, http.MethodGet, "/api/v1/tasks", nil, "Authorization", "Bearer tok-0123456789abcdef"); code != http.StatusNotFound {
		t.Errorf("/api/v1/tasks at the root under a base path: %d, want 404", code)
	}
	for _, p := range []string{"/healthz", "/readyz", "/ops/axe/", "/ops/axe/ui/app.js"} {
		if code, _ := d.Call(t, http.MethodGet, p, nil); code != http.StatusOK {
			t.Errorf("%s: %d, want 200", p, code)
		}
	}
	// /metrics stays at the root too, and needs the read scope once tokens are configured.
	if code, _ := d.Call(t, http.MethodGet, "/metrics", nil); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d, want 401", code)
	}
	if code, _ := d.Call(t, http.MethodGet, "/metrics", nil, "Authorization", "Bearer tok-0123456789abcdef"); code != http.StatusOK {
		t.Errorf("/metrics with the token: %d, want 200", code)
	}
	d.Token = "tok-0123456789abcdef"

	for i, g := range []string{"etl", "etl", "web"} {
		d.MustJSON(t, http.StatusCreated, http.MethodPost, api+"/tasks",
			daemontest.Spec(fmt.Sprintf("t%d", i), h.URL("/ok/x"), "trigger", "manual", "group", g), nil)
	}
	d.MustJSON(t, http.StatusOK, http.MethodPost, api+"/tasks/t1/pause", map[string]string{"note": "n"}, nil)
	var groups struct {
		Groups []struct {
			Group  string           `json:"group"`
			Total  int64            `json:"total"`
			States map[string]int64 `json:"states"`
		} `json:"groups"`
	}
	d.MustJSON(t, http.StatusOK, http.MethodGet, api+"/groups", nil, &groups)
	if len(groups.Groups) != 2 || groups.Groups[0].Group != "etl" || groups.Groups[0].Total != 2 ||
		groups.Groups[0].States["PAUSED"] != 1 || groups.Groups[1].Total != 1 {
		t.Errorf("groups = %+v", groups.Groups)
	}

	d.MustJSON(t, http.StatusAccepted, http.MethodPost, api+"/tasks/t0/run", nil, nil)
	h.WaitCalls(t, "t0", 1, daemontest.WaitTimeout)
	var ov struct {
		Minutes []struct{ At, Fires, Failures int64 } `json:"minutes"`
		Node    string                                `json:"node"`
	}
	testwait.For(t, daemontest.WaitTimeout, "the run in this minute's count", func() bool {
		d.MustJSON(t, http.StatusOK, http.MethodGet, api+"/overview", nil, &ov)
		return len(ov.Minutes) == 60 && ov.Minutes[59].Fires+ov.Minutes[58].Fires >= 1
	})
	if ov.Node != "test-node" {
		t.Errorf("overview node = %q", ov.Node)
	}

	// New York skips 02:00-03:00 on 8 March 2026 and repeats 01:00-02:00 on 1 November.
	var next struct {
		Next  []string `json:"next"`
		Fires []struct {
			At     string  `json:"at"`
			Offset string  `json:"offset"`
			DST    *string `json:"dst"`
		} `json:"fires"`
	}
	d.MustJSON(t, http.StatusOK, http.MethodGet, api+"/cron/next?expr="+url.QueryEscape("30 2 * * *")+
		"&tz=America/New_York&n=2&from=2026-03-07T12:00:00Z", nil, &next)
	if len(next.Fires) != 2 || next.Fires[0].At != "2026-03-08T03:00:00-04:00" || next.Fires[0].DST == nil ||
		*next.Fires[0].DST != "gap" || next.Fires[1].DST != nil || next.Fires[1].Offset != "-04:00" || next.Next[0] != next.Fires[0].At {
		t.Errorf("spring forward: %+v", next)
	}
	d.MustJSON(t, http.StatusOK, http.MethodGet, api+"/cron/next?expr="+url.QueryEscape("30 1 * * *")+
		"&tz=America/New_York&n=1&from=1793448000000", nil, &next)
	if len(next.Fires) != 1 || next.Fires[0].DST == nil || *next.Fires[0].DST != "repeat" {
		t.Errorf("fall back (from 2026-10-31T12:00Z as Unix ms): %+v", next)
	}
	if msg := d.APIError(t, http.StatusBadRequest, http.MethodGet, api+"/cron/next?expr=@hourly&from=yesterday", nil); !strings.HasPrefix(msg, "from:") {
		t.Errorf("bad from: %q", msg)
	}
}

// TestPprof checks that --pprof serves the profiles behind the token, and that without it
// there is nothing at /debug/pprof.
func TestPprof(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, "sqlite:"+t.TempDir()+"/axe.db", func(c *axedaemon.Config) { c.Pprof = true; c.Token = "tok-0123456789abcdef" })
	d.Token = ""
	d.APIError(t, http.StatusUnauthorized, http.MethodGet, "/debug/pprof/heap", nil)
	d.Token = "tok-0123456789abcdef"
	code, body := d.Call(t, http.MethodGet, "/debug/pprof/goroutine?debug=1", nil)
	if code != http.StatusOK || !strings.Contains(string(body), "goroutine profile") {
		t.Errorf("/debug/pprof/goroutine: %d %.80s", code, body)
	}
	off := daemontest.Start(t, "sqlite:"+t.TempDir()+"/axe.db", nil)
	if code, _ := off.Call(t, http.MethodGet, "/debug/pprof/heap", nil); code != http.StatusNotFound {
		t.Errorf("/debug/pprof without --pprof: %d, want 404", code)
	}
}
