package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/client"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
)

// apiStatus requires err to be the API's answer with status want and a message holding
// each of parts.
func apiStatus(t *testing.T, what string, err error, want int, parts ...string) {
	t.Helper()
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != want {
		t.Fatalf("%s: error %v, want HTTP %d", what, err, want)
	}
	for _, p := range parts {
		if !strings.Contains(ae.Message, p) {
			t.Errorf("%s: message %q does not name %q", what, ae.Message, p)
		}
	}
}

func waitWorkflowRun(t *testing.T, c *client.Client, id, state string) *client.WorkflowRunView {
	t.Helper()
	var v *client.WorkflowRunView
	testwait.For(t, daemontest.WaitTimeout, "workflow run "+id+" to be "+state, func() bool {
		var err error
		if v, err = c.GetWorkflowRun(context.Background(), id); err != nil {
			t.Fatalf("get run %s: %v", id, err)
		}
		return v.State == state
	})
	return v
}

// stepNamed returns a step's state, output, and its attempts sent (the rows with a ticket:
// the others are a step's pending, skipped or marked rows).
func stepNamed(v *client.WorkflowRunView, name string) (state string, output string, sent int) {
	for _, s := range v.Steps {
		if s.Name == name {
			for _, a := range s.Attempts {
				if a.Ticket != "" {
					sent++
				}
			}
			return s.State, string(s.Output), sent
		}
	}
	return "", "", 0
}

// attemptStates returns the states of a step's attempts sent, oldest first.
func attemptStates(v *client.WorkflowRunView, name string) []string {
	var out []string
	for _, s := range v.Steps {
		if s.Name != name {
			continue
		}
		for _, a := range s.Attempts {
			if a.Ticket != "" {
				out = append(out, a.State)
			}
		}
	}
	return out
}

// TestWorkflowClient drives every workflow call of the client against a real daemon on
// each store: create (a refusal stores nothing), get, list, update to a new version, run
// with params, a failed step marked succeeded with an output its downstream receives, a
// rerun of one step, a rerun from the failed steps refused when none failed, a cancel that
// kills the running step, pause and resume, a backfill of a week with its progress and a
// second asking that skips what ran, and delete.
func TestWorkflowClient(t *testing.T) {
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		d := daemontest.Start(t, dsn, nil)
		h := daemontest.NewHook(t)
		c, err := client.New(d.Base, d.Token, "client-test")
		if err != nil {
			t.Fatal(err)
		}
		step := func(name, path string, needs ...string) map[string]any {
			s := map[string]any{"name": name, "callback": map[string]any{"type": "http", "url": h.URL(path)}}
			if len(needs) > 0 {
				s["needs"] = needs
			}
			return s
		}
		def := map[string]any{"name": "wc", "group": "g1", "trigger": "manual", "params": map[string]any{"day": "none"},
			"steps": []map[string]any{step("a", "/ok/a"), step("b", "/fail/b", "a"), step("c", "/ok/c", "b")}}
		raw, _ := json.Marshal(def)

		bad := strings.Replace(string(raw), `"group"`, `"colour":1,"group"`, 1)
		_, err = c.CreateWorkflow(ctx, []byte(bad))
		apiStatus(t, "create with an unknown field", err, http.StatusBadRequest, "colour")
		if list, err := c.ListWorkflows(ctx); err != nil || len(list) != 0 {
			t.Fatalf("after a refused create: %v, %v", list, err)
		}

		w, err := c.CreateWorkflow(ctx, raw)
		if err != nil {
			t.Fatal(err)
		}
		if w.Name != "wc" || w.Version != 1 || len(w.Steps) != 3 || w.Group != "g1" {
			t.Fatalf("created %+v", w)
		}
		_, err = c.CreateWorkflow(ctx, raw)
		apiStatus(t, "a second create", err, http.StatusConflict)

		// A typed definition: the params change, the version goes up.
		typed := w.WorkflowDef
		typed.Params = json.RawMessage(`{"day":"default"}`)
		typed.Version, typed.CreatedAt, typed.UpdatedAt = 0, 0, 0
		w, err = c.UpdateWorkflow(ctx, "wc", typed)
		if err != nil {
			t.Fatal(err)
		}
		if w.Version != 2 || string(w.Params) != `{"day":"default"}` {
			t.Fatalf("updated %+v", w)
		}
		got, err := c.GetWorkflow(ctx, "wc")
		if err != nil || got.Version != 2 {
			t.Fatalf("get after the update: %+v, %v", got, err)
		}
		_, err = c.GetWorkflow(ctx, "nope")
		apiStatus(t, "get of an unknown workflow", err, http.StatusNotFound)

		run, err := c.RunWorkflow(ctx, "wc", json.RawMessage(`{"day":"2026-12-02"}`))
		if err != nil {
			t.Fatal(err)
		}
		if run.ID == "" || run.Workflow != "wc" || run.Version != 2 || run.Trigger != "manual" {
			t.Fatalf("run %+v", run)
		}
		v := waitWorkflowRun(t, c, run.ID, model.WorkflowFailed)
		if st, out, _ := stepNamed(v, "a"); st != model.StepSucceeded || out != `{"ok":true}` {
			t.Errorf("a: %s %s", st, out)
		}
		if st, _, _ := stepNamed(v, "b"); st != model.StepFailed {
			t.Errorf("b: %s, want failed", st)
		}
		if st, _, _ := stepNamed(v, "c"); st != model.StepSkipped {
			t.Errorf("c: %s, want skipped", st)
		}
		if string(v.Params) != `{"day":"2026-12-02"}` || v.Definition == nil || v.Definition.Version != 2 {
			t.Errorf("run view: params %s, definition %+v", v.Params, v.Definition)
		}
		runs, err := c.WorkflowRuns(ctx, "wc", 0, 10)
		if err != nil || len(runs) != 1 || runs[0].ID != run.ID || runs[0].State != model.WorkflowFailed {
			t.Fatalf("runs: %+v, %v", runs, err)
		}
		if runs, err := c.WorkflowRuns(ctx, "wc", run.ScheduledAt, 10); err != nil || len(runs) != 0 {
			t.Fatalf("runs before the run's logical time: %+v, %v", runs, err)
		}

		_, err = c.RerunWorkflowStep(ctx, run.ID, "zz")
		apiStatus(t, "rerun of an unknown step", err, http.StatusBadRequest, "zz")
		if _, err = c.SucceedWorkflowStep(ctx, run.ID, "b", json.RawMessage(`{"rows":`), ""); err == nil || !strings.HasPrefix(err.Error(), "output: ") {
			t.Errorf("succeed with output that is not JSON: %v, want an error naming output", err)
		}
		if _, err = c.RunWorkflow(ctx, "wc", json.RawMessage(`[1,`)); err == nil || !strings.HasPrefix(err.Error(), "params: ") {
			t.Errorf("run with params that are not JSON: %v, want an error naming params", err)
		}

		// b is marked succeeded with an output; c runs and receives it.
		if _, err := c.SucceedWorkflowStep(ctx, run.ID, "b", json.RawMessage(`{"rows":3}`), "done by hand"); err != nil {
			t.Fatal(err)
		}
		v = waitWorkflowRun(t, c, run.ID, model.WorkflowSucceeded)
		if st, out, _ := stepNamed(v, "b"); st != model.StepSucceeded || out != `{"rows":3}` {
			t.Errorf("b after the mark: %s %s", st, out)
		}
		calls := h.CallsOf("wc/c")
		if len(calls) != 1 {
			t.Fatalf("c was called %d times, want 1", len(calls))
		}
		var p struct {
			RunID  string                     `json:"run_id"`
			Inputs map[string]json.RawMessage `json:"inputs"`
		}
		if err := json.Unmarshal(calls[0].Body.Params, &p); err != nil || p.RunID != run.ID || string(p.Inputs["b"]) != `{"rows":3}` {
			t.Errorf("c's request params %s: want the run id and b's output as input", calls[0].Body.Params)
		}
		_, err = c.RerunWorkflowFailed(ctx, run.ID)
		apiStatus(t, "rerun from the failed steps of a run without one", err, http.StatusConflict, "no failed step")

		// c alone runs again; a and b do not.
		if _, err := c.RerunWorkflowStep(ctx, run.ID, "c"); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, daemontest.WaitTimeout, "c's second call", func() bool { return len(h.CallsOf("wc/c")) == 2 })
		v = waitWorkflowRun(t, c, run.ID, model.WorkflowSucceeded)
		if _, _, n := stepNamed(v, "c"); n != 2 {
			t.Errorf("c has %d attempts after its rerun, want 2", n)
		}
		if n := len(h.CallsOf("wc/a")); n != 1 {
			t.Errorf("a was called %d times, want 1", n)
		}

		// A cancel kills the running step.
		slow := map[string]any{"name": "slow", "steps": []map[string]any{step("hang", "/hang")}}
		if _, err := c.CreateWorkflow(ctx, slow); err != nil {
			t.Fatal(err)
		}
		srun, err := c.RunWorkflow(ctx, "slow", nil)
		if err != nil {
			t.Fatal(err)
		}
		h.WaitCalls(t, "slow/hang", 1, daemontest.WaitTimeout)
		apiStatus(t, "delete with a run in flight", c.DeleteWorkflow(ctx, "slow"), http.StatusConflict)
		crun, err := c.CancelWorkflowRun(ctx, srun.ID, "wrong day")
		if err != nil {
			t.Fatal(err)
		}
		if crun.State != model.WorkflowCancelled || !strings.Contains(crun.Error, "wrong day") {
			t.Errorf("cancel answered %+v", crun)
		}
		v = waitWorkflowRun(t, c, srun.ID, model.WorkflowCancelled)
		// The step's attempt in flight is killed: recorded cancelled.
		testwait.For(t, daemontest.WaitTimeout, "the hung step's attempt cancelled", func() bool {
			v, err = c.GetWorkflowRun(ctx, srun.ID)
			st := attemptStates(v, "hang")
			return err == nil && len(st) == 1 && st[0] == model.StepCancelled
		})
		_, err = c.CancelWorkflowRun(ctx, srun.ID, "")
		apiStatus(t, "a second cancel", err, http.StatusConflict, "ended")

		// A step's output may be 1 MiB, given by hand too; one byte more is refused.
		mib := json.RawMessage(`{"s":"` + strings.Repeat("z", 1<<20-8) + `"}`)
		over := json.RawMessage(`{"s":"` + strings.Repeat("z", 1<<20-7) + `"}`)
		_, err = c.SucceedWorkflowStep(ctx, srun.ID, "hang", over, "")
		apiStatus(t, "succeed with an output over 1 MiB", err, http.StatusBadRequest, "output")
		if _, err := c.SucceedWorkflowStep(ctx, srun.ID, "hang", mib, "the wait is over"); err != nil {
			t.Fatalf("succeed with an output of 1 MiB: %v", err)
		}
		v = waitWorkflowRun(t, c, srun.ID, model.WorkflowSucceeded)
		if st, out, _ := stepNamed(v, "hang"); st != model.StepSucceeded || out != string(mib) {
			t.Errorf("hang marked succeeded: %s, output of %d bytes; want the 1 MiB given", st, len(out))
		}

		// Pause and resume.
		pw, err := c.PauseWorkflow(ctx, "wc", "maintenance")
		if err != nil || !pw.Paused {
			t.Fatalf("pause: %+v, %v", pw, err)
		}
		pw, err = c.ResumeWorkflow(ctx, "wc", "")
		if err != nil || pw.Paused {
			t.Fatalf("resume: %+v, %v", pw, err)
		}

		// A week of a daily cron workflow, two at a time.
		daily := map[string]any{"name": "daily", "trigger": "cron", "cron": "0 3 * * *", "timezone": "UTC",
			"steps": []map[string]any{step("load", "/ok/load")}}
		if _, err := c.CreateWorkflow(ctx, daily); err != nil {
			t.Fatal(err)
		}
		_, err = c.WorkflowBackfill(ctx, "daily")
		apiStatus(t, "the progress of no backfill", err, http.StatusNotFound)
		_, err = c.BackfillWorkflow(ctx, "daily", "2026-11-01T00:00:00Z", "2026-11-08T00:00:00Z", 500)
		apiStatus(t, "a backfill too parallel", err, http.StatusBadRequest, "parallel")
		_, err = c.BackfillWorkflow(ctx, "wc", "2026-11-01T00:00:00Z", "2026-11-08T00:00:00Z", 1)
		apiStatus(t, "a backfill of a manual workflow", err, http.StatusBadRequest, "cron")
		bf, err := c.BackfillWorkflow(ctx, "daily", "2026-11-01T00:00:00Z", "2026-11-08T00:00:00Z", 2)
		if err != nil {
			t.Fatal(err)
		}
		if bf.Workflow != "daily" || bf.Times != 7 {
			t.Fatalf("backfill answered %+v, want 7 fire times", bf)
		}
		testwait.For(t, daemontest.WaitTimeout, "the backfill done", func() bool {
			bf, err = c.WorkflowBackfill(ctx, "daily")
			return err == nil && bf.Done
		})
		if bf.Started != 7 || bf.Skipped != 0 || bf.Running != 0 {
			t.Errorf("backfill progress %+v", bf)
		}
		runs, err = c.WorkflowRuns(ctx, "daily", 0, 100)
		if err != nil || len(runs) != 7 {
			t.Fatalf("daily runs: %d, %v", len(runs), err)
		}
		for i, r := range runs { // newest logical time first
			want := time.Date(2026, 11, 7-i, 3, 0, 0, 0, time.UTC).UnixMilli()
			if r.ScheduledAt != want || r.Trigger != "backfill" {
				t.Errorf("run %d: %s at %d, want a backfill run at %d", i, r.Trigger, r.ScheduledAt, want)
			}
			if r.State != model.WorkflowSucceeded {
				t.Errorf("run %d of the backfill: %s, want succeeded", i, r.State)
			}
		}
		if _, err := c.BackfillWorkflow(ctx, "daily", "2026-11-01T00:00:00Z", "2026-11-08T00:00:00Z", 2); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, daemontest.WaitTimeout, "the second backfill done", func() bool {
			bf, err = c.WorkflowBackfill(ctx, "daily")
			return err == nil && bf.Done
		})
		if bf.Times != 7 || bf.Skipped != 7 || bf.Started != 0 {
			t.Errorf("a second backfill of the same week: %+v, want every time skipped", bf)
		}
		if n := len(h.CallsOf("daily/load")); n != 7 {
			t.Errorf("the week's step was called %d times, want 7", n)
		}

		if err := c.DeleteWorkflow(ctx, "wc"); err != nil {
			t.Fatal(err)
		}
		_, err = c.GetWorkflow(ctx, "wc")
		apiStatus(t, "get after delete", err, http.StatusNotFound)
		list, err := c.ListWorkflows(ctx)
		if err != nil || len(list) != 2 {
			t.Fatalf("list after delete: %+v, %v", list, err)
		}
		if v, err := c.GetWorkflowRun(ctx, run.ID); err != nil || v.State != model.WorkflowSucceeded {
			t.Errorf("a deleted workflow's run: %+v, %v; its runs stay", v, err)
		}
	})
}
