package main

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/axe-sched/axe/client"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestBackfillSurvivesSIGKILL kills `axe serve` with SIGKILL in the middle of a backfill,
// starts it again on the same store, and checks that the backfill resumes from its cursor
// and ends with every fire time of the range called exactly once: none twice across the
// crash, none left out. The runs cut off by the kill are recorded lost, not re-sent.
func TestBackfillSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	stores := []struct {
		name string
		dsn  func(t *testing.T, dir string) string
	}{
		{persist.SchemeSQLite, func(t *testing.T, dir string) string { return "sqlite:" + filepath.Join(dir, "axe.db") }},
		{persist.SchemeMySQL, func(t *testing.T, _ string) string { return persisttest.MySQLSchemaDSN(t) }},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			dsn := st.dsn(t, dir)
			h := newHook(t)
			args := []string{"--addr", "127.0.0.1:0", "--db", dsn}
			first := startServe(t, dir, nil, args...)
			env := []string{"AXE_SERVER=" + first.url}
			spec := writeJSON(t, dir, "bf.json", map[string]any{
				"name": "bf", "cron": "* * * * *", "timezone": "UTC",
				"callback": map[string]string{"url": h.srv.URL + "/bf?ms=40"},
			})
			axeOK(t, env, "task", "create", "-f", spec)
			r := axe(t, env, "task", "backfill", "bf", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:00:00+01:00", "--parallel", "300")
			if r.code == 0 || !regexp.MustCompile(`--parallel: must be 1\.\.256`).MatchString(r.stderr) {
				t.Errorf("--parallel 300: exit %d, stderr %q; want a refusal naming --parallel", r.code, r.stderr)
			}
			out := axeOK(t, env, "task", "backfill", "bf", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T04:59:00Z", "--parallel", "4")
			m := regexp.MustCompile(`^backfill (\d+) of bf: 300 fire times`).FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("backfill answered %q", out)
			}
			id := m[1]
			testwait.For(t, waitTimeout, "a part of the backfill", func() bool { return len(h.callsOf("bf")) >= 60 })
			if err := first.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			<-first.exited
			before := len(h.callsOf("bf"))
			if before >= 300 {
				t.Skip("the backfill ended before the kill")
			}

			second := startServe(t, dir, nil, args...)
			env = []string{"AXE_SERVER=" + second.url}
			var v client.BackfillView
			testwait.For(t, 2*waitTimeout, "the backfill to end after the restart", func() bool {
				if err := json.Unmarshal([]byte(axeOK(t, env, "task", "backfills", "bf", "--id", id)), &v); err != nil {
					t.Fatal(err)
				}
				return v.Status == "done"
			})
			calls := h.callsOf("bf")
			seen := map[int64]int{}
			for _, c := range calls {
				seen[c.ScheduledAt]++
			}
			// Every fire time has one run; a run whose record was durable when the process died
			// is lost, whether or not its call had left: it is never sent (again) after.
			c, err := client.New(second.url, "", "test")
			if err != nil {
				t.Fatal(err)
			}
			runs, err := c.Runs(t.Context(), "bf", 1000)
			if err != nil {
				t.Fatal(err)
			}
			result := map[int64]string{}
			for _, r := range runs {
				if r.Kind != "backfill" {
					continue
				}
				if _, dup := result[r.ScheduledAt]; dup {
					t.Errorf("fire time %d has two runs", r.ScheduledAt)
				}
				result[r.ScheduledAt] = r.Result
			}
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			lost := 0
			for i := 0; i < 300; i++ {
				at := start.Add(time.Duration(i) * time.Minute).UnixMilli()
				name := time.UnixMilli(at).UTC().Format(time.RFC3339)
				switch {
				case seen[at] > 1:
					t.Errorf("fire time %s called %d times", name, seen[at])
				case result[at] == "lost":
					lost++
				case seen[at] != 1 || result[at] != "success":
					t.Errorf("fire time %s called %d times, run %q; want once and success", name, seen[at], result[at])
				}
			}
			if int64(lost) != v.Failed {
				t.Errorf("%d runs lost, the backfill counts %d failed", lost, v.Failed)
			}
			if v.Total != 300 || v.Done != 300 || v.Succeeded+v.Failed != 300 || v.Skipped != 0 || v.Running != 0 {
				t.Errorf("progress after the restart: %+v", v)
			}
			if v.Failed > 4 {
				t.Errorf("%d runs failed; only the (at most 4) in flight at the kill may, as lost", v.Failed)
			}
			t.Logf("%d calls before the kill; %d lost in it", before, v.Failed)
		})
	}
}
