package daemon_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/wire"
)

// stepSink is the HTTP endpoint every step of the test pipelines calls: it records each
// request by ticket (a second request of a ticket is a duplicate) and answers by step.
type stepSink struct {
	mu      sync.Mutex
	calls   map[string]int             // ticket → requests
	bodies  map[string]json.RawMessage // step → the params of its last request
	failing map[string]int             // step → requests still to fail with 500
	srv     *httptest.Server
}

func newStepSink(t *testing.T) *stepSink {
	s := &stepSink{calls: map[string]int{}, bodies: map[string]json.RawMessage{}, failing: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Ticket string          `json:"ticket"`
			Params json.RawMessage `json:"params"`
		}
		raw, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(raw, &body)
		var p struct {
			Step   string                     `json:"step"`
			Item   json.RawMessage            `json:"item"`
			Inputs map[string]json.RawMessage `json:"inputs"`
			Params map[string]any             `json:"params"`
		}
		_ = json.Unmarshal(body.Params, &p)
		s.mu.Lock()
		s.calls[body.Ticket]++
		s.bodies[p.Step] = body.Params
		fail := s.failing[p.Step] > 0
		if fail {
			s.failing[p.Step]--
		}
		s.mu.Unlock()
		if fail {
			http.Error(w, "step failed on purpose", 500)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch p.Step {
		case "sync":
			fmt.Fprintf(w, `{"path": "/data/%v/orders.parquet", "days": [1, 2, 3]}`, p.Params["day"])
		case "clean":
			var in struct {
				Path string `json:"path"`
			}
			_ = json.Unmarshal(p.Inputs["sync"], &in)
			fmt.Fprintf(w, `{"cleaned": %q}`, in.Path)
		case "per_day":
			fmt.Fprintf(w, `{"day": %s}`, p.Item)
		default:
			fmt.Fprint(w, `{}`)
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *stepSink) duplicates() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var d []string
	for t, n := range s.calls {
		if n > 1 {
			d = append(d, t)
		}
	}
	return d
}

func (s *stepSink) params(step string) map[string]json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	var m map[string]json.RawMessage
	_ = json.Unmarshal(s.bodies[step], &m)
	return m
}

func waitRunState(t *testing.T, d *daemontest.Daemon, id, want string) wire.WorkflowRunView {
	t.Helper()
	var v wire.WorkflowRunView
	testwait.For(t, daemontest.WaitTimeout, "workflow run "+id+" to be "+want, func() bool {
		v = wire.WorkflowRunView{}
		d.MustJSON(t, 200, "GET", "/api/v1/workflow-runs/"+id, nil, &v)
		return v.State == want
	})
	return v
}

func stepOf(v wire.WorkflowRunView, name string) wire.WorkflowStepView {
	for _, s := range v.Steps {
		if s.Name == name {
			return s
		}
	}
	return wire.WorkflowStepView{}
}

// TestWorkflowPipeline runs the pipeline of docs/workflows.md on both stores: sync → clean
// → report with sync's file path passed to clean, a fan-out over sync's days that fans back
// in to report, and a cleanup step that runs only when an upstream failed. clean fails (its
// one retry too), the run fails, report is skipped and the cleanup runs; a rerun from the
// failed steps runs clean and report only (sync keeps its output and is not called again),
// and the run succeeds. No step attempt reaches the endpoint twice.
func TestWorkflowPipeline(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		sink := newStepSink(t)
		d := daemontest.Start(t, dsn, nil)
		url := sink.srv.URL
		def := map[string]any{
			"name": "orders", "group": "etl", "params": map[string]any{"day": "2026-12-01"},
			"steps": []map[string]any{
				{"name": "sync", "callback": map[string]any{"type": "http", "url": url}},
				{"name": "clean", "needs": []string{"sync"}, "retry_count": 1, "callback": map[string]any{"type": "http", "url": url}},
				{"name": "per_day", "needs": []string{"sync"}, "fan_out": "sync.days", "parallelism": 2, "callback": map[string]any{"type": "http", "url": url}},
				{"name": "report", "needs": []string{"clean", "per_day"}, "callback": map[string]any{"type": "http", "url": url}},
				{"name": "cleanup", "needs": []string{"clean", "report"}, "condition": "any_failed", "callback": map[string]any{"type": "http", "url": url}},
			},
		}
		var created wire.WorkflowView
		d.MustJSON(t, 201, "POST", "/api/v1/workflows", def, &created)
		if created.Version != 1 || len(created.Steps) != 5 {
			t.Fatalf("created %+v", created)
		}
		sink.mu.Lock()
		sink.failing["clean"] = 2 // the attempt and its retry
		sink.mu.Unlock()

		var run struct {
			ID string `json:"id"`
		}
		d.MustJSON(t, 202, "POST", "/api/v1/workflows/orders/run", map[string]any{"params": map[string]any{"day": "2026-12-02"}}, &run)
		v := waitRunState(t, d, run.ID, "failed")
		if s := stepOf(v, "clean"); s.State != "failed" || len(s.Attempts) != 2 {
			t.Fatalf("clean: %+v", s)
		}
		if s := stepOf(v, "report"); s.State != "skipped" {
			t.Fatalf("report should be skipped after clean failed: %+v", s)
		}
		if s := stepOf(v, "cleanup"); s.State != "succeeded" {
			t.Fatalf("cleanup should run when an upstream failed: %+v", s)
		}
		pd := stepOf(v, "per_day")
		if pd.State != "succeeded" || pd.Items != 3 || string(pd.Output) != `[{"day":1},{"day":2},{"day":3}]` && !strings.Contains(string(pd.Output), `"day": 1`) {
			t.Fatalf("per_day fan-out: %+v output %s", pd, pd.Output)
		}
		syncOut := stepOf(v, "sync").Output
		if !strings.Contains(string(syncOut), "/data/2026-12-02/orders.parquet") {
			t.Fatalf("sync output %s does not carry the run's params", syncOut)
		}
		// clean got sync's output as its input.
		in := sink.params("clean")
		if !strings.Contains(string(in["inputs"]), "/data/2026-12-02/orders.parquet") || !strings.Contains(string(in["run_id"]), run.ID) {
			t.Fatalf("clean's request lacks sync's output or the run id: %s", sink.bodies["clean"])
		}
		syncCalls := func() int {
			sink.mu.Lock()
			defer sink.mu.Unlock()
			n := 0
			for tk, c := range sink.calls {
				if strings.Contains(tk, ".sync.") {
					n += c
				}
			}
			return n
		}
		if n := syncCalls(); n != 1 {
			t.Fatalf("sync called %d times before the rerun", n)
		}

		// Bad reruns are refused and change nothing.
		if msg := d.APIError(t, 400, "POST", "/api/v1/workflow-runs/"+run.ID+"/rerun", map[string]any{"from": "everything"}); !strings.Contains(msg, "from") {
			t.Fatalf("bad rerun: %s", msg)
		}
		if msg := d.APIError(t, 400, "POST", "/api/v1/workflow-runs/"+run.ID+"/rerun", map[string]any{"step": "nope"}); !strings.Contains(msg, "nope") {
			t.Fatalf("rerun of an unknown step: %s", msg)
		}

		d.MustJSON(t, 202, "POST", "/api/v1/workflow-runs/"+run.ID+"/rerun", map[string]any{"from": "failed"}, nil)
		v = waitRunState(t, d, run.ID, "succeeded")
		if s := stepOf(v, "report"); s.State != "succeeded" {
			t.Fatalf("report after the rerun: %+v", s)
		}
		if s := stepOf(v, "clean"); s.State != "succeeded" || !strings.Contains(string(s.Output), "orders.parquet") {
			t.Fatalf("clean after the rerun: %+v", s)
		}
		if n := syncCalls(); n != 1 {
			t.Fatalf("sync called %d times: a rerun from the failed steps ran a step that had succeeded", n)
		}
		if dup := sink.duplicates(); len(dup) > 0 {
			t.Fatalf("step attempts sent twice: %v", dup)
		}
		var runs wire.WorkflowRunList
		d.MustJSON(t, 200, "GET", "/api/v1/workflows/orders/runs", nil, &runs)
		if len(runs.Runs) != 1 || runs.Runs[0].ID != run.ID || runs.Runs[0].State != "succeeded" {
			t.Fatalf("runs: %+v", runs)
		}
	})
}

// TestWorkflowDefinitionsRefused: definitions a run could not follow are refused at create
// with the field named, and nothing is stored.
func TestWorkflowDefinitionsRefused(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, "sqlite:"+t.TempDir()+"/axe.db", nil)
	cb := map[string]any{"type": "http", "url": "http://127.0.0.1:1/x"}
	cases := []struct {
		name  string
		steps []map[string]any
		want  string
	}{
		{"cycle", []map[string]any{{"name": "a", "needs": []string{"b"}, "callback": cb}, {"name": "b", "needs": []string{"a"}, "callback": cb}}, "cycle"},
		{"unknown", []map[string]any{{"name": "a", "needs": []string{"zz"}, "callback": cb}}, "zz"},
		{"fanout-not-upstream", []map[string]any{{"name": "a", "callback": cb}, {"name": "b", "fan_out": "a.items", "callback": cb}}, "not among its needs"},
		{"fanout-unknown", []map[string]any{{"name": "b", "fan_out": "x.items", "callback": cb}}, "not a step"},
		{"condition", []map[string]any{{"name": "a", "condition": "sometimes", "callback": cb}}, "condition"},
		{"no-steps", nil, "steps"},
	}
	for _, c := range cases {
		msg := d.APIError(t, 400, "POST", "/api/v1/workflows", map[string]any{"name": "w-" + c.name, "steps": c.steps})
		if !strings.Contains(msg, c.want) {
			t.Errorf("%s: error %q does not name %q", c.name, msg, c.want)
		}
	}
	var list wire.WorkflowList
	d.MustJSON(t, 200, "GET", "/api/v1/workflows", nil, &list)
	if len(list.Workflows) != 0 {
		t.Fatalf("refused definitions were stored: %+v", list)
	}
}

// TestWorkflowStepTasksChangeOnlyWithTheirWorkflow: the task a step runs as cannot be
// edited, paused, run or deleted on its own; its workflow's delete removes it.
func TestWorkflowStepTasksChangeOnlyWithTheirWorkflow(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, "sqlite:"+t.TempDir()+"/axe.db", nil)
	def := map[string]any{"name": "w1", "steps": []map[string]any{{"name": "s1", "callback": map[string]any{"type": "http", "url": "http://127.0.0.1:1/x"}}}}
	d.MustJSON(t, 201, "POST", "/api/v1/workflows", def, nil)
	for _, c := range []struct{ method, path string }{
		{"POST", "/api/v1/tasks/w1%2Fs1/pause"}, {"POST", "/api/v1/tasks/w1%2Fs1/run"},
		{"DELETE", "/api/v1/tasks/w1%2Fs1"}, {"PUT", "/api/v1/tasks/w1%2Fs1"},
	} {
		if msg := d.APIError(t, 409, c.method, c.path, map[string]any{}); !strings.Contains(msg, "workflow") {
			t.Errorf("%s %s: %s", c.method, c.path, msg)
		}
	}
	d.MustJSON(t, 200, "GET", "/api/v1/tasks/w1%2Fs1", nil, nil)
	code, _ := d.Call(t, "DELETE", "/api/v1/workflows/w1", nil)
	if code != 204 {
		t.Fatalf("delete workflow: %d", code)
	}
	if code, _ := d.Call(t, "GET", "/api/v1/tasks/w1%2Fs1", nil); code != 404 {
		t.Fatalf("the step task outlived its workflow: %d", code)
	}
}

// TestWorkflowOnPrimaryBackup: under --ha-mode primary the primary runs workflows and the
// backup reads them; a primary's kill hands open runs to the new primary, which ends them.
func TestWorkflowOnPrimaryBackup(t *testing.T) {
	t.Parallel()
	dsn := persisttest.MySQLSchemaDSN(t)
	sink := newStepSink(t)
	a := daemontest.HANode(t, dsn, "a", 3*time.Second, time.Second)
	a.WaitRole(t, "primary", daemontest.WaitTimeout)
	b := daemontest.HANode(t, dsn, "b", 3*time.Second, time.Second)
	b.WaitRole(t, "backup", daemontest.WaitTimeout)
	def := map[string]any{"name": "pb", "steps": []map[string]any{
		{"name": "sync", "callback": map[string]any{"type": "http", "url": sink.srv.URL}},
		{"name": "clean", "needs": []string{"sync"}, "callback": map[string]any{"type": "http", "url": sink.srv.URL}},
	}}
	a.MustJSON(t, 201, "POST", "/api/v1/workflows", def, nil)
	var run struct {
		ID string `json:"id"`
	}
	a.MustJSON(t, 202, "POST", "/api/v1/workflows/pb/run", nil, &run)
	waitRunState(t, a, run.ID, "succeeded")
	v := waitRunState(t, b, run.ID, "succeeded") // the backup reads it from the database
	if s := stepOf(v, "clean"); !strings.Contains(string(s.Output), "orders.parquet") {
		t.Fatalf("clean's output on the backup: %s", s.Output)
	}
	if dup := sink.duplicates(); len(dup) > 0 {
		t.Fatalf("step attempts sent twice: %v", dup)
	}
}

// TestWorkflowFollowsAnother: a workflow with trigger workflow runs once for each succeeded
// run of the one it follows, for that run's logical time; after pause_after_failures failed
// runs in a row its trigger pauses.
func TestWorkflowFollowsAnother(t *testing.T) {
	t.Parallel()
	sink := newStepSink(t)
	d := daemontest.Start(t, "sqlite:"+t.TempDir()+"/axe.db", nil)
	cb := map[string]any{"type": "http", "url": sink.srv.URL}
	d.MustJSON(t, 201, "POST", "/api/v1/workflows", map[string]any{"name": "up", "steps": []map[string]any{{"name": "sync", "callback": cb}}}, nil)
	d.MustJSON(t, 201, "POST", "/api/v1/workflows", map[string]any{"name": "down", "trigger": "workflow", "after": "up",
		"pause_after_failures": 2, "steps": []map[string]any{{"name": "report", "callback": cb}}}, nil)
	if msg := d.APIError(t, 400, "POST", "/api/v1/workflows", map[string]any{"name": "self", "trigger": "workflow", "after": "self",
		"steps": []map[string]any{{"name": "x", "callback": cb}}}); !strings.Contains(msg, "after") {
		t.Fatalf("a workflow following itself: %s", msg)
	}
	var ups []string
	for range 2 {
		var run struct {
			ID          string `json:"id"`
			ScheduledAt int64  `json:"scheduled_at"`
		}
		d.MustJSON(t, 202, "POST", "/api/v1/workflows/up/run", nil, &run)
		waitRunState(t, d, run.ID, "succeeded")
		ups = append(ups, run.ID)
	}
	var runs wire.WorkflowRunList
	testwait.For(t, daemontest.WaitTimeout, "down to run after each run of up", func() bool {
		runs = wire.WorkflowRunList{}
		d.MustJSON(t, 200, "GET", "/api/v1/workflows/down/runs", nil, &runs)
		return len(runs.Runs) == 2 && runs.Runs[0].State == "succeeded" && runs.Runs[1].State == "succeeded"
	})
	var upRuns wire.WorkflowRunList
	d.MustJSON(t, 200, "GET", "/api/v1/workflows/up/runs", nil, &upRuns)
	for i := range 2 {
		if runs.Runs[i].ScheduledAt != upRuns.Runs[i].ScheduledAt || runs.Runs[i].Trigger != "workflow" {
			t.Fatalf("down's run %d: %+v; up's: %+v", i, runs.Runs[i], upRuns.Runs[i])
		}
	}
	// Two failed runs in a row pause down.
	sink.mu.Lock()
	sink.failing["report"] = 2
	sink.mu.Unlock()
	for range 2 {
		var run struct {
			ID string `json:"id"`
		}
		d.MustJSON(t, 202, "POST", "/api/v1/workflows/down/run", nil, &run)
		waitRunState(t, d, run.ID, "failed")
	}
	testwait.For(t, daemontest.WaitTimeout, "down to pause after 2 failed runs", func() bool {
		var w wire.WorkflowView
		d.MustJSON(t, 200, "GET", "/api/v1/workflows/down", nil, &w)
		return w.Paused
	})
	// Paused, it does not follow up's next run.
	var run struct {
		ID string `json:"id"`
	}
	d.MustJSON(t, 202, "POST", "/api/v1/workflows/up/run", nil, &run)
	waitRunState(t, d, run.ID, "succeeded")
	time.Sleep(2 * time.Second) // a scan or two
	runs = wire.WorkflowRunList{}
	d.MustJSON(t, 200, "GET", "/api/v1/workflows/down/runs", nil, &runs)
	if len(runs.Runs) != 4 {
		t.Fatalf("a paused follower ran: %d runs", len(runs.Runs))
	}
}

// TestWorkflowCancelAndMark: cancelling a run kills its running step and starts nothing
// after it; a step marked succeeded with an operator's output releases what follows it,
// which gets that output as its input.
func TestWorkflowCancelAndMark(t *testing.T) {
	t.Parallel()
	sink := newStepSink(t)
	release := make(chan struct{}) // the slow step answers once its kill is recorded
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(free)
	d := daemontest.Start(t, "sqlite:"+t.TempDir()+"/axe.db", nil)
	d.MustJSON(t, 201, "POST", "/api/v1/workflows", map[string]any{"name": "c1", "steps": []map[string]any{
		{"name": "slow", "timeout_sec": 120, "callback": map[string]any{"type": "http", "url": slow.URL}},
		{"name": "after", "needs": []string{"slow"}, "callback": map[string]any{"type": "http", "url": sink.srv.URL}},
	}}, nil)
	var run struct {
		ID string `json:"id"`
	}
	d.MustJSON(t, 202, "POST", "/api/v1/workflows/c1/run", nil, &run)
	testwait.For(t, daemontest.WaitTimeout, "the slow step to run", func() bool {
		var v wire.WorkflowRunView
		d.MustJSON(t, 200, "GET", "/api/v1/workflow-runs/"+run.ID, nil, &v)
		return stepOf(v, "slow").State == "running"
	})
	if msg := d.APIError(t, 409, "POST", "/api/v1/workflow-runs/"+run.ID+"/rerun", map[string]any{"from": "failed"}); !strings.Contains(msg, "still running") {
		t.Fatalf("rerun of a running run: %s", msg)
	}
	d.MustJSON(t, 200, "POST", "/api/v1/workflow-runs/"+run.ID+"/cancel", map[string]any{"reason": "INC-7"}, nil)
	v := waitRunState(t, d, run.ID, "cancelled")
	if !strings.Contains(v.Error, "INC-7") {
		t.Fatalf("cancelled run's error %q lacks the reason", v.Error)
	}
	testwait.For(t, daemontest.WaitTimeout, "the slow step's attempt to be recorded killed", func() bool {
		v = wire.WorkflowRunView{}
		d.MustJSON(t, 200, "GET", "/api/v1/workflow-runs/"+run.ID, nil, &v)
		s := stepOf(v, "slow")
		return len(s.Attempts) == 1 && s.Attempts[0].State == "cancelled"
	})
	free() // its late answer changes nothing
	if s := stepOf(v, "after"); len(s.Attempts) != 0 {
		t.Fatalf("a step after the cancel started: %+v", s)
	}
	// Mark slow succeeded with an output: after runs with it as its input.
	d.MustJSON(t, 202, "POST", "/api/v1/workflow-runs/"+run.ID+"/steps/slow/succeed", map[string]any{"output": map[string]any{"path": "/by/hand"}, "note": "loaded by hand"}, nil)
	v = waitRunState(t, d, run.ID, "succeeded")
	if !strings.Contains(string(sink.params("after")["inputs"]), "/by/hand") {
		t.Fatalf("after did not get the operator's output: %s", sink.params("after")["inputs"])
	}
	if s := stepOf(v, "slow"); s.State != "succeeded" || !strings.Contains(string(s.Output), "/by/hand") {
		t.Fatalf("slow after the mark: %+v", s)
	}
}

// TestWorkflowCronOverlapSkip: a cron workflow every second whose run takes about 2.5 s,
// with overlap_policy skip, never has two runs in flight: the fires due meanwhile are
// skipped. Each run's logical time is a fire time of the schedule.
func TestWorkflowCronOverlapSkip(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := 0
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		mu.Unlock()
		time.Sleep(2500 * time.Millisecond)
		fmt.Fprint(w, `{}`)
	}))
	t.Cleanup(slow.Close)
	d := daemontest.Start(t, "sqlite:"+t.TempDir()+"/axe.db", nil)
	d.MustJSON(t, 201, "POST", "/api/v1/workflows", map[string]any{"name": "tick", "trigger": "cron", "cron": "@every 1s",
		"overlap_policy": "skip", "jitter_sec": 0,
		"steps": []map[string]any{{"name": "s", "callback": map[string]any{"type": "http", "url": slow.URL}}}}, nil)
	var runs wire.WorkflowRunList
	testwait.For(t, daemontest.WaitTimeout, "three cron runs to end", func() bool {
		runs = wire.WorkflowRunList{}
		d.MustJSON(t, 200, "GET", "/api/v1/workflows/tick/runs", nil, &runs)
		ended := 0
		for _, r := range runs.Runs {
			if r.State == "succeeded" {
				ended++
			}
		}
		return ended >= 3
	})
	d.MustJSON(t, 200, "POST", "/api/v1/workflows/tick/pause", nil, nil)
	runs = wire.WorkflowRunList{}
	d.MustJSON(t, 200, "GET", "/api/v1/workflows/tick/runs", nil, &runs)
	for i := 0; i+1 < len(runs.Runs); i++ {
		newer, older := runs.Runs[i], runs.Runs[i+1]
		if older.EndedAt == 0 || newer.CreatedAt < older.EndedAt {
			t.Fatalf("runs overlap under overlap_policy skip: %+v began before %+v ended", newer, older)
		}
		if newer.ScheduledAt%1000 != 0 || newer.Trigger != "cron" {
			t.Fatalf("a cron run's logical time %d is not a fire time", newer.ScheduledAt)
		}
	}
}

// TestWorkflowDelayTrigger: a workflow with trigger delay starts one run delay_ms after it
// is created, with that time as its logical time, and no other (an update that keeps the
// delay, a pause and a resume after it ran start none); delay_ms without trigger delay, or
// a negative one, is refused naming the field.
func TestWorkflowDelayTrigger(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		sink := newStepSink(t)
		d := daemontest.Start(t, dsn, nil)
		for _, bad := range []struct {
			def   map[string]any
			field string
		}{
			{map[string]any{"name": "bad", "trigger": "manual", "delay_ms": 1000}, "delay_ms"},
			{map[string]any{"name": "bad", "trigger": "delay", "delay_ms": -1}, "delay_ms"},
			{map[string]any{"name": "bad", "trigger": "delay", "cron": "* * * * *"}, "cron"},
		} {
			bad.def["steps"] = []map[string]any{{"name": "s", "callback": map[string]any{"type": "http", "url": sink.srv.URL}}}
			if msg := d.APIError(t, 400, "POST", "/api/v1/workflows", bad.def); !strings.HasPrefix(msg, bad.field+":") {
				t.Errorf("%v: error %q does not name %s", bad.def, msg, bad.field)
			}
		}
		def := map[string]any{"name": "later", "trigger": "delay", "delay_ms": 1500,
			"steps": []map[string]any{{"name": "s", "callback": map[string]any{"type": "http", "url": sink.srv.URL}}}}
		var created wire.WorkflowView
		d.MustJSON(t, 201, "POST", "/api/v1/workflows", def, &created)
		var got wire.WorkflowView
		d.MustJSON(t, 200, "GET", "/api/v1/workflows/later", nil, &got)
		if got.NextFire != created.CreatedAt+1500 {
			t.Errorf("next_fire %d, want created_at %d + 1500", got.NextFire, created.CreatedAt)
		}
		var runs wire.WorkflowRunList
		testwait.For(t, daemontest.WaitTimeout, "the delay run to succeed", func() bool {
			runs = wire.WorkflowRunList{}
			d.MustJSON(t, 200, "GET", "/api/v1/workflows/later/runs", nil, &runs)
			return len(runs.Runs) == 1 && runs.Runs[0].State == "succeeded"
		})
		if r := runs.Runs[0]; r.Trigger != "delay" || r.ScheduledAt != created.CreatedAt+1500 {
			t.Errorf("the delay run is %+v: want trigger delay at created_at + 1500", r)
		}
		def["group"] = "g2" // an update that keeps the delay
		d.MustJSON(t, 200, "PUT", "/api/v1/workflows/later", def, nil)
		d.MustJSON(t, 200, "POST", "/api/v1/workflows/later/pause", nil, nil)
		d.MustJSON(t, 200, "POST", "/api/v1/workflows/later/resume", nil, nil)
		time.Sleep(2500 * time.Millisecond) // a second run would have been due by now
		runs = wire.WorkflowRunList{}
		d.MustJSON(t, 200, "GET", "/api/v1/workflows/later/runs", nil, &runs)
		if len(runs.Runs) != 1 {
			t.Errorf("a delay workflow ran %d times, want once: %+v", len(runs.Runs), runs.Runs)
		}
		if dup := sink.duplicates(); len(dup) > 0 {
			t.Errorf("step attempts received twice: %v", dup)
		}
	})
}

// TestWorkflowBackfillSurvivesRestart: a backfill of a cron workflow is stored: the daemon
// stopped in the middle of it and started again on the same database goes on from its
// cursor, and every minute of the range ends with exactly one run, succeeded. A second
// backfill while one runs is refused (409).
func TestWorkflowBackfillSurvivesRestart(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(200 * time.Millisecond)
			fmt.Fprint(w, `{}`)
		}))
		t.Cleanup(slow.Close)
		d := daemontest.Start(t, dsn, nil)
		// One retry: a step in flight at the stop is recorded lost when the node starts again
		// (it may have run), and runs again as its next attempt.
		d.MustJSON(t, 201, "POST", "/api/v1/workflows", map[string]any{"name": "hourly", "trigger": "cron", "cron": "* * * * *",
			"steps": []map[string]any{{"name": "s", "callback": map[string]any{"type": "http", "url": slow.URL},
				"retry_count": 1, "retry_interval_sec": 1}}}, nil)
		to := time.Now().Truncate(time.Minute)
		from := to.Add(-12 * time.Minute)
		body := map[string]any{"from": from.UTC().Format(time.RFC3339), "to": to.UTC().Format(time.RFC3339), "parallel": 1}
		d.MustJSON(t, 202, "POST", "/api/v1/workflows/hourly/backfill", body, nil)
		if msg := d.APIError(t, 409, "POST", "/api/v1/workflows/hourly/backfill", body); !strings.Contains(msg, "backfill in progress") {
			t.Errorf("a second backfill while one runs: %q", msg)
		}
		var st wire.WorkflowBackfillStatus
		testwait.For(t, daemontest.WaitTimeout, "two backfill runs to start", func() bool {
			st = wire.WorkflowBackfillStatus{}
			d.MustJSON(t, 200, "GET", "/api/v1/workflows/hourly/backfill", nil, &st)
			return st.Started >= 2
		})
		if err := d.Stop(); err != nil {
			t.Fatal(err)
		}
		d = daemontest.Start(t, dsn, nil)
		st = wire.WorkflowBackfillStatus{}
		d.MustJSON(t, 200, "GET", "/api/v1/workflows/hourly/backfill", nil, &st)
		if st.Times != 12 || st.Started >= st.Times {
			t.Fatalf("after the restart the backfill reads %+v: want 12 times, some not started yet", st)
		}
		testwait.For(t, daemontest.WaitTimeout, "the backfill to end", func() bool {
			st = wire.WorkflowBackfillStatus{}
			d.MustJSON(t, 200, "GET", "/api/v1/workflows/hourly/backfill", nil, &st)
			return st.Done
		})
		if st.Started != 12 || st.Skipped != 0 || st.Running != 0 {
			t.Errorf("the backfill ended as %+v: want 12 started", st)
		}
		var runs wire.WorkflowRunList
		d.MustJSON(t, 200, "GET", "/api/v1/workflows/hourly/runs?limit=1000", nil, &runs)
		at := map[int64]int{}
		for _, r := range runs.Runs {
			if r.Trigger == "backfill" {
				at[r.ScheduledAt]++
				if r.State != "succeeded" {
					t.Errorf("backfill run %s of %d is %s", r.ID, r.ScheduledAt, r.State)
				}
			}
		}
		for m := from; m.Before(to); m = m.Add(time.Minute) {
			if at[m.UnixMilli()] != 1 {
				t.Errorf("minute %s has %d backfill runs, want 1", m.UTC().Format(time.RFC3339), at[m.UnixMilli()])
			}
		}
	})
}

// TestWorkflowStepKeyTemplates: a step's concurrency_key is a template over the step's
// request (tenant:{params.params.tenant}: the run's params). A run whose params render it runs
// the step, counted in the tenant's key; a run whose params lack the tenant fails the step
// with the reason recorded on its attempt, without calling the endpoint; a template that does
// not parse is refused when the workflow is defined, naming the step's field.
func TestWorkflowStepKeyTemplates(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + t.TempDir() + "/axe.db"
	sink := newStepSink(t)
	d := daemontest.Start(t, dsn, nil)
	d.MustJSON(t, http.StatusOK, "PUT", "/api/v1/concurrency-limits/key/tenant:*", map[string]any{"max": 1}, nil)
	step := func(key string) map[string]any {
		return map[string]any{"name": "bill", "concurrency_key": key, "rate_key": "bill:{params.params.tenant}",
			"callback": map[string]any{"type": "http", "url": sink.srv.URL}}
	}
	if msg := d.APIError(t, http.StatusBadRequest, "POST", "/api/v1/workflows",
		map[string]any{"name": "bad", "steps": []map[string]any{step("tenant:{tenant}")}}); !strings.Contains(msg, "concurrency_key") {
		t.Errorf("a step key that does not parse: %q, want it named", msg)
	}
	d.MustJSON(t, 201, "POST", "/api/v1/workflows", map[string]any{"name": "billing", "steps": []map[string]any{step("tenant:{params.params.tenant}")}}, nil)
	var ok, bad struct {
		ID string `json:"id"`
	}
	d.MustJSON(t, 202, "POST", "/api/v1/workflows/billing/run", map[string]any{"params": map[string]any{"tenant": "acme"}}, &ok)
	d.MustJSON(t, 202, "POST", "/api/v1/workflows/billing/run", map[string]any{"params": map[string]any{"other": 1}}, &bad)
	if s := stepOf(waitRunState(t, d, ok.ID, "succeeded"), "bill"); s.State != "succeeded" {
		t.Errorf("the step of tenant acme: %+v", s)
	}
	v := waitRunState(t, d, bad.ID, "failed")
	s := stepOf(v, "bill")
	if s.State != "failed" || len(s.Attempts) != 1 || !strings.Contains(s.Attempts[0].Error, "params.params.tenant is missing") {
		t.Errorf("the step whose params lack the tenant: %+v", s)
	}
	sink.mu.Lock()
	calls := len(sink.calls)
	sink.mu.Unlock()
	if calls != 1 {
		t.Errorf("the endpoint got %d step calls, want the one of tenant acme", calls)
	}
}

// TestWorkflowRunKey: a start with a key starts one run; the same start sent again (as a
// client does after an answer that never came) starts nothing and answers that run, 200 not
// 202, with its own params; another key starts another run, a key of another workflow is
// that workflow's own, and a key too long or with a control character is a 400 naming key.
func TestWorkflowRunKey(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		sink := newStepSink(t)
		d := daemontest.Start(t, dsn, nil)
		for _, name := range []string{"k1", "k2"} {
			d.MustJSON(t, 201, "POST", "/api/v1/workflows", map[string]any{"name": name, "steps": []map[string]any{
				{"name": "only", "callback": map[string]any{"type": "http", "url": sink.srv.URL}},
			}}, nil)
		}
		var first, again, other, elsewhere model.WorkflowRun
		d.MustJSON(t, 202, "POST", "/api/v1/workflows/k1/run", map[string]any{"key": "orders-2026-12-06", "params": map[string]any{"n": 1}}, &first)
		d.MustJSON(t, 200, "POST", "/api/v1/workflows/k1/run", map[string]any{"key": "orders-2026-12-06", "params": map[string]any{"n": 2}}, &again)
		if again.ID != first.ID || string(again.Params) != string(first.Params) {
			t.Fatalf("the start sent again answered %s with %s; want the first run %s with %s", again.ID, again.Params, first.ID, first.Params)
		}
		d.MustJSON(t, 202, "POST", "/api/v1/workflows/k1/run", map[string]any{"key": "orders-2026-12-07"}, &other)
		d.MustJSON(t, 202, "POST", "/api/v1/workflows/k2/run", map[string]any{"key": "orders-2026-12-06"}, &elsewhere)
		if other.ID == first.ID || elsewhere.ID == first.ID {
			t.Fatalf("another key (%s) or workflow (%s) named the first run %s", other.ID, elsewhere.ID, first.ID)
		}
		for _, bad := range []string{strings.Repeat("x", 129), "a\nb"} {
			if msg := d.APIError(t, 400, "POST", "/api/v1/workflows/k1/run", map[string]any{"key": bad}); !strings.HasPrefix(msg, "key: ") {
				t.Errorf("key %q: %q, want a 400 naming key", bad, msg)
			}
		}
		var list wire.WorkflowRunList
		d.MustJSON(t, 200, "GET", "/api/v1/workflows/k1/runs", nil, &list)
		if len(list.Runs) != 2 {
			t.Fatalf("k1 has %d runs, want 2 (one a key)", len(list.Runs))
		}
		for _, id := range []string{first.ID, other.ID, elsewhere.ID} {
			waitRunState(t, d, id, "succeeded")
		}
		if dups := sink.duplicates(); len(dups) > 0 {
			t.Fatalf("step attempts received twice: %v", dups)
		}
	})
}
