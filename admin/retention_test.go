package admin_test

import (
	"database/sql"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axe-sched/axe/client"
	"github.com/axe-sched/axe/internal/test/daemontest"

	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/testwait"
)

// openRaw opens the daemon's database directly, to count rows.
func openRaw(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	driver, src, _ := strings.Cut(dsn, ":")
	db, err := sql.Open(driver, src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func rowCounts(t *testing.T, db *sql.DB) (runs, acts, defs int) {
	t.Helper()
	for _, c := range []struct {
		table string
		n     *int
	}{{"task_run", &runs}, {"task_action", &acts}, {"task_def", &defs}} {
		if err := db.QueryRow("SELECT COUNT(*) FROM " + c.table).Scan(c.n); err != nil {
			t.Fatal(err)
		}
	}
	return runs, acts, defs
}

// TestRetentionLevelsOff: under a constant load of one-shot tasks with short retention, the
// run, action and definition row counts level off instead of growing; axe prune counts and
// deletes; a pruned one-shot created again under its name is a new task.
func TestRetentionLevelsOff(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, func(c *axedaemon.Config) {
			c.Engine.Retention.History = 1500 * time.Millisecond
			c.Engine.Retention.Finished = 500 * time.Millisecond
			c.Engine.Retention.Interval = 200 * time.Millisecond
		})
		h := daemontest.NewHook(t)
		db := openRaw(t, dsn)
		var created atomic.Int64
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { // 50 one-shot tasks a second, each firing at once
			defer close(done)
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				code, _ := d.Call(t, http.MethodPost, "/api/v1/tasks", daemontest.Spec(fmt.Sprintf("once-%d", i), h.URL("/ok/once"), "delay_ms", 0))
				if code == http.StatusCreated {
					created.Add(1)
				}
			}
		}()
		// At least 8 s and 60 tasks: a loaded box creates fewer a second, so the load runs
		// longer there (up to a minute) rather than the test judging too few tasks.
		var samples []int
		for len(samples) < 16 || (created.Load() < 60 && len(samples) < 120) {
			time.Sleep(500 * time.Millisecond)
			runs, acts, defs := rowCounts(t, db)
			samples = append(samples, runs+acts+defs)
		}
		close(stop)
		<-done
		early, late := samples[5], 0
		for _, s := range samples[6:] {
			late = max(late, s)
		}
		t.Logf("created %d tasks; rows (runs+actions+defs) every 0.5s: %v", created.Load(), samples)
		if created.Load() < 60 {
			t.Fatalf("only %d tasks created in %s", created.Load(), time.Duration(len(samples))*500*time.Millisecond)
		}
		// Each task writes about 8 rows; kept for at most ~2 s of 50 tasks/s that is ~800.
		if late > early*3/2+200 {
			t.Errorf("rows kept growing: %d at 3s, up to %d later (samples %v)", early, late, samples)
		}
		// A task writes 7 rows: its definition and runtime, a run and 4 actions.
		if total := int(created.Load()) * 7; late > total/2 {
			t.Errorf("rows %d are not well below the %d written", late, total)
		}

		// axe prune through the API: a dry run counts, a real run deletes.
		var res client.PruneResult
		d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/prune", map[string]any{"before": time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "dry_run": true}, &res)
		// The pruner goes on meanwhile and runs in flight are still being recorded, so the
		// table moves both ways; the dry run must see the finished runs and delete none.
		runs, _, _ := rowCounts(t, db)
		if res.Runs == 0 || runs == 0 {
			t.Errorf("dry run counts %d runs, the table then has %d", res.Runs, runs)
		}
		d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/prune", map[string]any{"before": "1ms"}, nil)
		d.APIError(t, http.StatusBadRequest, http.MethodPost, "/api/v1/prune", map[string]any{"before": "yesterday"})
		testwait.For(t, daemontest.WaitTimeout, "every run pruned", func() bool { r, _, _ := rowCounts(t, db); return r == 0 })

		// once-0 was pruned long ago: the name is free, and a new task gets it.
		v := d.Create(t, daemontest.Spec("once-0", h.URL("/ok/again"), "delay_ms", 3_600_000))
		if acts := d.Actions(t, "once-0"); len(acts) != 1 || acts[0].TaskID != v.ID || acts[0].Action != "create" {
			t.Errorf("re-created once-0 (id %d) has action records %+v, want only its own create", v.ID, acts)
		}
	})
}
