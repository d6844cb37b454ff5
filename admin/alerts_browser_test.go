package admin_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/protocol"
)

// TestConsoleBrowserAlertKinds: the alerts page counts the stored records by kind and its
// kind filter lists only the kind chosen, so a flood of refused results does not hide an
// executor's loss.
func TestConsoleBrowserAlertKinds(t *testing.T) {
	t.Parallel() // its own daemon, database and browser
	ctx := browser(t)
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), func(c *axedaemon.Config) {
		c.Engine.LostAfter, c.Engine.HeartbeatInterval = 3*time.Second, 200*time.Millisecond
	})
	// Registered at once, so that one reap finds both.
	var regs sync.WaitGroup
	for _, addr := range []string{"127.0.0.1:1001", "127.0.0.1:1002"} {
		regs.Add(1)
		go func() {
			defer regs.Done()
			if code, body := d.Call(t, http.MethodPost, protocol.PathRegister, map[string]any{"app": "gone", "address": addr, "handlers": []string{"h"}}); code != http.StatusOK {
				t.Errorf("register %s: %d %s", addr, code, body)
			}
		}()
	}
	regs.Wait()
	testwait.For(t, 4*daemontest.WaitTimeout, "the lost alert", func() bool {
		return getAlerts(t, d, "?kind=executor_lost&counts=1").Counts["executor_lost"] == 1
	})
	results := make([]map[string]any, 300)
	for i := range results {
		results[i] = map[string]any{"ticket": fmt.Sprintf("999999-%d-0", i), "app": "gone", "status": "failed"}
	}
	d.MustJSON(t, http.StatusOK, http.MethodPost, protocol.PathCallbackBatch, map[string]any{"results": results}, nil)
	testwait.For(t, daemontest.WaitTimeout, "the refused result recorded", func() bool {
		return getAlerts(t, d, "?counts=1").Counts["refused_result"] == 1
	})

	run(t, ctx, "open alerts", chromedp.Navigate(d.Base+"/#/alerts"), chromedp.WaitVisible("#alerts-kind", chromedp.ByQuery))
	waitJS(t, ctx, "the counts by kind", `(t => t.includes("executor_lost: 1") && t.includes("refused_result: 1"))(document.querySelector("#alerts-counts").textContent)`)
	waitJS(t, ctx, "the kinds offered with their counts", `[...document.querySelectorAll("#alerts-kind option")].some(o => o.value === "executor_lost" && o.textContent === "executor_lost (1)")`)
	for _, kind := range []string{"refused_result", "executor_lost"} {
		run(t, ctx, "choose "+kind, setField("#alerts-kind", kind))
		waitJS(t, ctx, "only "+kind+" listed", fmt.Sprintf(`(rows => rows.length === 1 && rows.every(r => r.dataset.action === %q))(
			[...document.querySelectorAll("#stored-alerts-table tbody tr")])`, kind))
	}
	waitJS(t, ctx, "the loss named with both executors", `document.querySelector("#stored-alerts-table tbody tr").textContent.includes("2 executors of gone")`)
}
