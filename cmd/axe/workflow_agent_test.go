package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/wire"
)

// TestWorkflowAgentOutput runs workflow steps as shell commands of a real `axe agent`
// process, against `axe serve` on each store, and reads their outputs from
// GET /api/v1/workflow-runs/{id}: what a command wrote to $AXE_OUTPUT is its step's output
// (not what it printed), the next step finds it among the inputs of the workflow context in
// $AXE_PARAMS, an output of exactly 1 MiB goes through whole (the result endpoint, the
// engine and the store keep it), one byte more fails the step saying so, and a command that
// writes no file keeps its printed output as before.
func TestWorkflowAgentOutput(t *testing.T) {
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
			srv := startServe(t, dir, nil, "--addr", "127.0.0.1:0", "--db", st.dsn(t, dir))
			env := []string{"AXE_SERVER=" + srv.url}
			mib := `printf '{"s":"'; head -c 1048568 /dev/zero | tr '\0' z; printf '"}'` // 6 + 1048568 + 2 bytes
			cfg := map[string]any{
				"app": "etl", "listen": "127.0.0.1:0", "schedulers": []string{srv.url},
				"handlers": map[string]any{
					"sync":   map[string]any{"command": []string{"/bin/sh", "-c", `echo copying; printf '{"path":"/data/%s/orders.json"}' "$AXE_TICKET" > "$AXE_OUTPUT"; echo copied`}},
					"clean":  map[string]any{"command": []string{"/bin/sh", "-c", `echo cleaning; printf '{"context":%s}' "$AXE_PARAMS" > "$AXE_OUTPUT"`}},
					"max":    map[string]any{"command": []string{"/bin/sh", "-c", "(" + mib + `) > "$AXE_OUTPUT"`}},
					"toobig": map[string]any{"command": []string{"/bin/sh", "-c", "(" + mib + `; printf x) > "$AXE_OUTPUT"`}},
					"plain":  map[string]any{"command": []string{"/bin/sh", "-c", `echo '{"printed":true}'`}},
				},
			}
			agent := exec.Command(axeBin, "agent", "-c", writeJSON(t, dir, "agent.json", cfg))
			agent.Env = cleanEnv()
			var agentOut syncBuffer
			agent.Stdout, agent.Stderr = &agentOut, &agentOut
			if err := agent.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = agent.Process.Kill(); _, _ = agent.Process.Wait() })
			testwait.For(t, waitTimeout, "the agent registered", func() bool {
				return strings.Contains(axeOK(t, env, "executors"), "alive")
			})

			step := func(name string, needs ...string) map[string]any {
				s := map[string]any{"name": name, "callback": map[string]any{"type": "executor", "app": "etl", "handler": name}}
				if len(needs) > 0 {
					s["needs"] = needs
				}
				return s
			}
			axeOK(t, env, "workflow", "create", "-f", writeJSON(t, dir, "wf.json", map[string]any{
				"name": "shell", "params": map[string]any{"table": "orders"},
				"steps": []map[string]any{step("sync"), step("clean", "sync"), step("max", "sync"), step("toobig", "sync"), step("plain")},
			}))
			id := strings.TrimSpace(axeOK(t, env, "workflow", "run", "shell"))
			var v wire.WorkflowRunView
			testwait.For(t, 2*waitTimeout, "the run to end", func() bool {
				body, err := httpGet(srv.url + "/api/v1/workflow-runs/" + id)
				if err != nil {
					return false
				}
				v = wire.WorkflowRunView{}
				if err := json.Unmarshal(body, &v); err != nil {
					t.Fatalf("GET the run: %s: %v", body, err)
				}
				return v.State != "running"
			})
			steps := map[string]wire.WorkflowStepView{}
			for _, s := range v.Steps {
				steps[s.Name] = s
			}
			if v.State != "failed" {
				t.Errorf("run %s, want failed (toobig fails)", v.State)
			}

			syncStep := steps["sync"]
			var syncOut struct {
				Path string `json:"path"`
			}
			if syncStep.State != "succeeded" || json.Unmarshal(syncStep.Output, &syncOut) != nil ||
				!strings.HasPrefix(syncOut.Path, "/data/w"+id+".sync.") || !strings.HasSuffix(syncOut.Path, "/orders.json") {
				t.Errorf("sync: %s, output %s; want the JSON its command wrote to AXE_OUTPUT", syncStep.State, syncStep.Output)
			}

			var cleanOut struct {
				Context struct {
					RunID  string                     `json:"run_id"`
					Step   string                     `json:"step"`
					Params map[string]string          `json:"params"`
					Inputs map[string]json.RawMessage `json:"inputs"`
				} `json:"context"`
			}
			clean := steps["clean"]
			if clean.State != "succeeded" || json.Unmarshal(clean.Output, &cleanOut) != nil {
				t.Fatalf("clean: %s, output %s", clean.State, clean.Output)
			}
			if c := cleanOut.Context; c.RunID != id || c.Step != "clean" || c.Params["table"] != "orders" || string(c.Inputs["sync"]) != string(syncStep.Output) {
				t.Errorf("clean's AXE_PARAMS %+v: want the run, the step, the params and sync's output as its input %s", c, syncStep.Output)
			}

			if m := steps["max"]; m.State != "succeeded" || len(m.Output) != 1<<20 || !strings.HasPrefix(string(m.Output), `{"s":"zzz`) {
				t.Errorf("max: %s, output of %d bytes; want 1 MiB whole", m.State, len(m.Output))
			}
			if tb := steps["toobig"]; tb.State != "failed" || len(tb.Output) != 0 || !strings.Contains(tb.Error, "AXE_OUTPUT file holds 1048577 bytes") {
				t.Errorf("toobig: %s, error %q; want a failure naming the file's size", tb.State, tb.Error)
			}
			if p := steps["plain"]; p.State != "succeeded" || string(p.Output) != `{"printed":true}` {
				t.Errorf("plain: %s, output %s; want its printed output", p.State, p.Output)
			}
		})
	}
}
