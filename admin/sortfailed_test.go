package admin_test

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/client"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
)

// failOnce creates a one-shot task whose only run fails, and waits until its runtime holds
// the failure's time.
func failOnce(t *testing.T, d *daemontest.Daemon, h *daemontest.Hook, name, group string) int64 {
	t.Helper()
	d.Create(t, daemontest.Spec(name, h.URL("/fail/"+name), "trigger", "delay", "delay_ms", 0, "group", group))
	var at int64
	testwait.For(t, daemontest.WaitTimeout, name+"'s failure recorded", func() bool {
		at = d.Get(t, name).Runtime.LastFailureAt
		return at > 0
	})
	// The task lists read the store, and a run's end is written behind it (design.md, "What
	// is not waited for"): wait until the list's failed_within filter finds the failure.
	testwait.For(t, daemontest.WaitTimeout, name+"'s failure in the store", func() bool {
		var page struct {
			Tasks []client.TaskView `json:"tasks"`
		}
		d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/tasks?failed_within=1h&q="+url.QueryEscape(name)+"&limit=100", nil, &page)
		for _, tv := range page.Tasks {
			if tv.Name == name {
				return true
			}
		}
		return false
	})
	return at
}

// TestTasksSortedByNewestFailure: sort=failed lists the tasks newest failure first, those
// that never failed last, page by page with its cursor and with the failed_within filter; a
// bad cursor of that sort answers 400 naming it.
func TestTasksSortedByNewestFailure(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, nil)
		h := daemontest.NewHook(t)
		// The ok task first: never failed, it sorts last whatever its id.
		d.Create(t, daemontest.Spec("fs-ok", h.URL("/ok/fs-ok"), "trigger", "delay", "delay_ms", 0, "group", "fs"))
		var last int64
		for _, name := range []string{"fs-a", "fs-b", "fs-c"} {
			// Each failure a later millisecond than the one before.
			testwait.For(t, daemontest.WaitTimeout, "a new millisecond", func() bool { return nowMS() > last })
			at := failOnce(t, d, h, name, "fs")
			if at <= last {
				t.Fatalf("%s failed at %d, not after %d", name, at, last)
			}
			last = at
		}
		walk := func(query string) []string {
			var names []string
			cursor := ""
			for range 10 {
				var page struct {
					Tasks      []client.TaskView `json:"tasks"`
					NextCursor string            `json:"next_cursor"`
				}
				d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/tasks?sort=failed&limit=2&"+query+"&cursor="+url.QueryEscape(cursor), nil, &page)
				names = append(names, daemontest.Names(page.Tasks)...)
				if page.NextCursor == "" {
					return names
				}
				cursor = page.NextCursor
			}
			t.Fatalf("sort=failed&%s: more than 10 pages", query)
			return nil
		}
		if got := strings.Join(walk("group=fs"), ","); got != "fs-c,fs-b,fs-a,fs-ok" {
			t.Errorf("sort=failed in group fs: %s, want fs-c,fs-b,fs-a,fs-ok", got)
		}
		if got := strings.Join(walk("failed_within=1h"), ","); got != "fs-c,fs-b,fs-a" {
			t.Errorf("sort=failed, failed within 1h: %s, want fs-c,fs-b,fs-a", got)
		}
		bad := base64.RawURLEncoding.EncodeToString([]byte("soon\x001"))
		if msg := d.APIError(t, http.StatusBadRequest, http.MethodGet, "/api/v1/tasks?sort=failed&cursor="+bad, nil); !strings.Contains(msg, "cursor") {
			t.Errorf("a bad cursor of sort=failed: %q", msg)
		}
		if msg := d.APIError(t, http.StatusBadRequest, http.MethodGet, "/api/v1/tasks?sort=size", nil); !strings.Contains(msg, "failed") {
			t.Errorf("a bad sort's error does not list failed: %q", msg)
		}
	})
}

func nowMS() int64 { return time.Now().UnixMilli() }
