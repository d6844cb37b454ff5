package admin_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/axe-sched/axe/admin"
	"github.com/axe-sched/axe/engine"
	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/protocol"
)

// alertsAnswer is the part of GET /api/v1/alerts these tests read.
type alertsAnswer struct {
	Actions []model.Action   `json:"actions"`
	Count   int              `json:"count"`
	Counts  map[string]int64 `json:"counts"`
}

func getAlerts(t *testing.T, d *daemontest.Daemon, query string) alertsAnswer {
	t.Helper()
	var a alertsAnswer
	d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/alerts"+query, nil, &a)
	return a
}

// execSQL runs stmt on the database behind dsn, as an operator at a SQL prompt would.
func execSQL(t *testing.T, dsn, stmt string) {
	t.Helper()
	var (
		db  *sql.DB
		err error
	)
	switch {
	case strings.HasPrefix(dsn, persist.SchemeSQLite+":"):
		// Waits for the daemon's write lock, as the store's own connections do, rather than
		// failing with SQLITE_BUSY while a batch commits.
		db, err = sql.Open("sqlite", strings.TrimPrefix(dsn, persist.SchemeSQLite+":")+"?_pragma=busy_timeout(30000)")
	default:
		var cfg *mysql.Config
		if cfg, err = mysql.ParseDSN(strings.TrimPrefix(dsn, persist.SchemeMySQL+":")); err == nil {
			db, err = sql.Open("mysql", cfg.FormatDSN())
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), daemontest.WaitTimeout)
	defer cancel()
	if _, err := db.ExecContext(ctx, stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// TestExecutorTokenCannotFloodTheAuditTrail: what one app-bound executor token can make axe
// keep and write is bounded. Executors of one app lost together raise one alert; a batch
// of 1,000 results for tickets that do not exist writes one record (the rest are counted in
// the metric and summed up once its window closes), so the real alerts stay on the first
// page, and the alerts are filtered by kind and counted by kind; registrations over the
// app's and the token's bounds are refused with 429 naming the bound; and executors whose
// rows an operator deletes leave the registry.
func TestExecutorTokenCannotFloodTheAuditTrail(t *testing.T) {
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		const floodTok = "flood-exec-0123456789"
		file := filepath.Join(t.TempDir(), "tokens.json")
		writeTokenFile(t, file, []admin.TokenEntry{
			{Name: "ops", Scope: "write", Token: writeTok},
			{Name: "flood-exec", Scope: "executor", Token: floodTok, Apps: []string{"flood", "spare"}},
		})
		d := daemontest.Start(t, dsn, func(c *axedaemon.Config) {
			c.Security.TokenFile = file
			c.Engine.LostAfter, c.Engine.HeartbeatInterval = 3*time.Second, 200*time.Millisecond
			c.Engine.MaxExecutorsPerApp, c.Engine.MaxExecutorsPerToken = 4, 6
		})
		d.Token = writeTok
		register := func(app, addr string) (int, string) {
			code, body := d.Call(t, http.MethodPost, protocol.PathRegister, map[string]any{"app": app, "address": addr,
				"handlers": []string{"h"}, "auth": "signed"}, bearer(floodTok)...)
			return code, string(body)
		}

		// Three executors of one app fall silent: one alert names them. They register at
		// once, so that one reap (every tenth of the lost-after period) finds them all.
		var regs sync.WaitGroup
		for i := 1; i <= 3; i++ {
			regs.Add(1)
			go func() {
				defer regs.Done()
				if code, body := register("flood", fmt.Sprintf("127.0.0.1:%d", 1000+i)); code != 200 {
					t.Errorf("register: %d %s", code, body)
				}
			}()
		}
		regs.Wait()
		testwait.For(t, 4*daemontest.WaitTimeout, "the lost alert", func() bool {
			return len(getAlerts(t, d, "?kind=executor_lost").Actions) > 0
		})
		lost := getAlerts(t, d, "?kind=executor_lost&counts=1")
		if len(lost.Actions) != 1 || !strings.Contains(lost.Actions[0].Detail, "3 executors of flood") || lost.Counts["executor_lost"] != 1 {
			t.Fatalf("lost alerts %+v, counts %v; want one naming the 3 executors of flood", lost.Actions, lost.Counts)
		}

		// 1,000 results for tickets that do not exist.
		results := make([]map[string]any, 1000)
		for i := range results {
			results[i] = map[string]any{"ticket": fmt.Sprintf("999999-%d-0", i), "app": "flood", "address": "127.0.0.1:1001", "status": "success"}
		}
		// A result answered 503 (the store did not answer its lookup in time, on a loaded
		// box) is sent again, as an executor does; every one must end refused 404.
		refused, sends, floodAt := 0, 0, time.Now()
		for pending := results; len(pending) > 0; sends++ {
			if sends == 20 {
				t.Fatalf("after %d sends %d results are still answered 503; %d refused 404", sends, len(pending), refused)
			}
			var ans protocol.CallbackBatchAnswer
			d.MustJSON(t, http.StatusOK, http.MethodPost, protocol.PathCallbackBatch, map[string]any{"results": pending}, &ans, bearer(floodTok)...)
			byStatus := map[int]int{}
			var again []map[string]any
			for i, r := range ans.Results {
				byStatus[r.Status]++
				if r.Status == http.StatusServiceUnavailable && i < len(pending) {
					again = append(again, pending[i])
				}
			}
			if len(ans.Results) != len(pending) || byStatus[http.StatusNotFound]+byStatus[http.StatusServiceUnavailable] != len(pending) {
				t.Fatalf("batch answer: %d results for %d, by status %v (first %+v); want each refused 404 (or 503: again)", len(ans.Results), len(pending), byStatus, ans.Results[0])
			}
			refused += byStatus[http.StatusNotFound]
			if len(again) > 0 {
				time.Sleep(time.Second)
			}
			pending = again
		}
		if refused != 1000 {
			t.Fatalf("%d of 1000 results refused 404", refused)
		}
		// One key writes its first refusal of a window at once and sums the others up when
		// the window (a minute) closes: one record while the flood is inside a window, at most
		// two a window it spans when a loaded box stretched it (results sent again) past one.
		all := getAlerts(t, d, "?limit=100&counts=1")
		most := int64(1)
		if took := time.Since(floodAt); took >= engine.RefusalWindowDefault {
			most = 2 * int64(took/engine.RefusalWindowDefault+2)
		}
		if n := all.Counts["refused_result"]; n < 1 || n > most || all.Counts["executor_lost"] != 1 {
			t.Errorf("counts after the flood (%d sends over %s): %v; want 1 to %d refused_result records (the others summed up later) and the lost alert",
				sends, time.Since(floodAt).Round(time.Second), all.Counts, most)
		}
		if !hasKind(all.Actions, "executor_lost") {
			t.Errorf("the first page of alerts lost the executor_lost alert under the flood: %d records", len(all.Actions))
		}
		if got := metricValue(t, d, `axe_refused_results_total{reason="unknown_ticket"}`); got != 1000 {
			t.Errorf(`axe_refused_results_total{reason="unknown_ticket"} = %v, want 1000`, got)
		}
		for _, q := range []string{"?kind=refused_result", "?kind=executor_lost,refused_result"} {
			for _, a := range getAlerts(t, d, q).Actions {
				if !strings.Contains(q, a.Action) {
					t.Errorf("%s listed a %s record", q, a.Action)
				}
			}
		}
		if msg := d.APIError(t, http.StatusBadRequest, http.MethodGet, "/api/v1/alerts?kind=Lost%20OR%201=1", nil); !strings.Contains(msg, "kind") {
			t.Errorf("a bad kind: %q does not name kind", msg)
		}
		if msg := d.APIError(t, http.StatusNotFound, http.MethodGet, "/api/v1/alerts?task=ghost", nil); !strings.Contains(msg, "ghost") {
			t.Errorf("an unknown task: %q does not name it", msg)
		}
		// A task's records, by kind, and counted.
		d.Create(t, map[string]any{"name": "seed", "trigger": "manual", "callback": map[string]any{"url": "http://127.0.0.1:9/x"}})
		d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/tasks/seed/pause", map[string]any{"note": "quiet"}, nil)
		seed := getAlerts(t, d, "?task=seed&kind=pause&counts=1")
		if len(seed.Actions) != 1 || seed.Actions[0].TaskName != "seed" || seed.Actions[0].Action != "pause" || seed.Counts["pause"] != 1 ||
			len(seed.Counts) < 2 {
			t.Errorf("seed's pause records %+v, counts %v; want its pause alone listed, and every kind of its records counted", seed.Actions, seed.Counts)
		}

		// The app's bound: the lost executors make room for new ones, alive ones do not.
		var beat sync.WaitGroup
		stop := make(chan struct{})
		defer func() { close(stop); beat.Wait() }()
		heartbeat := func(app, addr string) {
			beat.Add(1)
			go func() {
				defer beat.Done()
				for {
					select {
					case <-stop:
						return
					case <-time.After(200 * time.Millisecond):
					}
					d.Call(t, http.MethodPost, protocol.PathHeartbeat, map[string]any{"app": app, "address": addr}, bearer(floodTok)...)
				}
			}()
		}
		for i := 1; i <= 4; i++ {
			addr := fmt.Sprintf("127.0.0.1:%d", 2000+i)
			if code, body := register("flood", addr); code != 200 {
				t.Fatalf("register %s (room made by a lost one): %d %s", addr, code, body)
			}
			heartbeat("flood", addr)
		}
		if code, body := register("flood", "127.0.0.1:2005"); code != http.StatusTooManyRequests ||
			!strings.Contains(body, "max-executors-per-app") || !strings.Contains(body, "flood") {
			t.Errorf("a 5th live executor of flood: %d %s; want 429 naming the bound", code, body)
		}
		// The token's bound, across its apps.
		for i := 1; i <= 2; i++ {
			addr := fmt.Sprintf("127.0.0.1:%d", 3000+i)
			if code, body := register("spare", addr); code != 200 {
				t.Fatalf("register %s: %d %s", addr, code, body)
			}
		}
		if code, body := register("spare", "127.0.0.1:3003"); code != http.StatusTooManyRequests || !strings.Contains(body, "max-executors-per-token") {
			t.Errorf("a 7th executor of the token: %d %s; want 429 naming the bound", code, body)
		}
		var xs struct {
			Executors []struct{ App, Address string } `json:"executors"`
		}
		d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/executors", nil, &xs)
		if len(xs.Executors) != 6 {
			t.Errorf("executors registered: %+v; want the 4 live ones of flood and the 2 of spare", xs.Executors)
		}
		store, err := persist.Open(t.Context(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		if rows, err := store.ListExecutors(t.Context()); err != nil || len(rows) != 6 {
			t.Errorf("executor rows: %d, %v; want the 6 registered (the lost ones made room and were forgotten)", len(rows), err)
		}

		// An operator deletes spare's rows: once they are lost they leave the registry too,
		// and a registration has room again.
		execSQL(t, dsn, `DELETE FROM executor WHERE app = 'spare'`)
		testwait.For(t, 4*daemontest.WaitTimeout, "spare's executors to leave the registry", func() bool {
			d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/executors", nil, &xs)
			for _, x := range xs.Executors {
				if x.App == "spare" {
					return false
				}
			}
			return true
		})
		if code, body := register("spare", "127.0.0.1:3003"); code != 200 {
			t.Errorf("a registration once the rows were deleted: %d %s", code, body)
		}
		// A live executor whose row is deleted is asked to register again at its next heartbeat.
		execSQL(t, dsn, `DELETE FROM executor WHERE app = 'spare'`)
		code, _ := d.Call(t, http.MethodPost, protocol.PathHeartbeat, map[string]any{"app": "spare", "address": "127.0.0.1:3003"}, bearer(floodTok)...)
		if code != http.StatusNotFound {
			t.Errorf("heartbeat of a deleted executor: %d, want 404 (register again)", code)
		}
	})
}

func hasKind(acts []model.Action, kind string) bool {
	for _, a := range acts {
		if a.Action == kind {
			return true
		}
	}
	return false
}
