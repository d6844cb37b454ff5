package admin_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/client"
	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/executor"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestKillRunByTicket, on SQLite and MariaDB with real SDK executors over HTTP: a run-now
// run is killed by its ticket with a reason (its task is WAITING, which the task's kill
// used to answer 409 for); the handler's context is cancelled with executor.ErrKilled, the
// run is recorded killed with the reason, what the handler printed before the kill is kept on
// the run, the task's last result is killed and the kill is in the audit log. The task's
// kill then ends every run of it in flight (two run-nows at once). An unknown ticket is 404,
// a run that ended 409, a reason too long 400 naming the field.
func TestKillRunByTicket(t *testing.T) {
	for _, store := range []struct {
		name string
		dsn  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "axe.db") }},
		{"mysql", func(t *testing.T) string { return persisttest.MySQLSchemaDSN(t) }},
	} {
		t.Run(store.name, func(t *testing.T) { testKillRunByTicket(t, store.dsn(t)) })
	}
}

func testKillRunByTicket(t *testing.T, dsn string) {
	ctx := context.Background()
	// An executor is lost after 10 s without a heartbeat, not 1.5 s: on a loaded box a late
	// heartbeat left one executor of the two, already busy with the task, and the second
	// run-now was refused by it.
	base, c := e2eDaemon(t, dsn, func(c *engine.Config) { c.LostAfter = 10 * time.Second })
	started := make(chan string, 4)
	causes := make(chan error, 4)
	// Two executors of the app: an executor runs one run of a task at a time, and the
	// task's kill below ends two at once.
	for range 2 {
		exe, err := executor.New(executor.Config{
			App: "billing", Addr: "127.0.0.1:0", Schedulers: []string{base},
			HeartbeatInterval: 300 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		exe.Handle("hang", func(ctx context.Context, run executor.Run) (executor.Result, error) {
			started <- run.Ticket
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return executor.Result{Output: "step 1 of 3 done\n"}, context.Cause(ctx)
		})
		if err := exe.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = exe.Stop(sctx)
		})
	}
	testwait.For(t, daemontest.WaitTimeout, "the executor registered", func() bool {
		list, err := c.Executors(ctx)
		return err == nil && len(list) == 2
	})
	if _, err := c.CreateTask(ctx, []byte(`{"name":"report","trigger":"manual","timeout_sec":300,
		"callback":{"type":"executor","app":"billing","handler":"hang"}}`)); err != nil {
		t.Fatal(err)
	}
	waitStarted := func() string {
		t.Helper()
		select {
		case ticket := <-started:
			return ticket
		case <-time.After(daemontest.WaitTimeout):
			runs, err := c.Runs(ctx, "report", 10)
			t.Fatalf("the run never reached the executor; the task's runs: %+v, %v", runs, err)
			return ""
		}
	}
	waitCause := func() {
		t.Helper()
		select {
		case err := <-causes:
			if !errors.Is(err, executor.ErrKilled) {
				t.Fatalf("the handler's context ended with %v, want executor.ErrKilled", err)
			}
		case <-time.After(daemontest.WaitTimeout):
			t.Fatal("the executor's handler was never cancelled: the kill did not reach it")
		}
	}

	ticket, err := c.RunNow(ctx, "report", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := waitStarted(); got != ticket {
		t.Fatalf("the executor runs %s, the run-now is %s", got, ticket)
	}
	run, err := c.KillRun(ctx, ticket, "INC-4411: wrong month")
	if err != nil {
		t.Fatalf("kill by ticket: %v", err)
	}
	if run.Ticket != ticket || run.Kind != model.RunManual || run.Result != model.ResultKilled ||
		!strings.Contains(run.Error, "INC-4411: wrong month") || run.EndedAt == 0 {
		t.Errorf("the killed run = %+v; want a run-now killed with the reason", run)
	}
	waitCause()
	testwait.For(t, 20*time.Second, "the output printed before the kill on the run", func() bool {
		r, err := c.GetRun(ctx, ticket)
		return err == nil && r.Output == "step 1 of 3 done\n"
	})
	if r, _ := c.GetRun(ctx, ticket); r == nil || r.Result != model.ResultKilled {
		t.Errorf("the run after its late output = %+v; want it still killed", r)
	}
	if tv, err := c.GetTask(ctx, "report"); err != nil || tv.Runtime.LastResult != model.ResultKilled {
		t.Errorf("the task after the kill = %+v, %v; want last result killed", tv, err)
	}
	acts, err := c.Actions(ctx, "report", 20)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range acts {
		found = found || (a.Action == engine.ActKill && a.Ticket == ticket && strings.Contains(a.Detail, "INC-4411"))
	}
	if !found {
		t.Errorf("actions %+v lack the kill of %s with its reason", acts, ticket)
	}
	var ae *client.APIError
	if _, err := c.KillRun(ctx, ticket, ""); !errors.As(err, &ae) || ae.Status != 409 {
		t.Errorf("a second kill of %s = %v, want 409", ticket, err)
	}
	if _, err := c.KillRun(ctx, "no-such-ticket", ""); !errors.As(err, &ae) || ae.Status != 404 {
		t.Errorf("a kill of an unknown ticket = %v, want 404", err)
	}
	if _, err := c.KillRun(ctx, ticket, strings.Repeat("x", 2000)); !errors.As(err, &ae) || ae.Status != 400 || !strings.Contains(ae.Message, "reason") {
		t.Errorf("a kill with a reason of 2000 characters = %v, want 400 naming reason", err)
	}

	// The task's kill ends every run of it in flight: two run-nows at once.
	var tickets []string
	for range 2 {
		tk, err := c.RunNow(ctx, "report", nil)
		if err != nil {
			t.Fatal(err)
		}
		tickets = append(tickets, tk)
	}
	waitStarted()
	waitStarted()
	if _, err := c.KillTask(ctx, "report", "maintenance"); err != nil {
		t.Fatalf("the task's kill: %v", err)
	}
	waitCause()
	waitCause()
	for _, tk := range tickets {
		r, err := c.GetRun(ctx, tk)
		if err != nil || r.Result != model.ResultKilled || !strings.Contains(r.Error, "maintenance") {
			t.Errorf("run %s after the task's kill = %+v, %v; want killed", tk, r, err)
		}
	}
	if _, err := c.KillTask(ctx, "report", ""); !errors.As(err, &ae) || ae.Status != 409 {
		t.Errorf("the task's kill with nothing in flight = %v, want 409", err)
	}
}
