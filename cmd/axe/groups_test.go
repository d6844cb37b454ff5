package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist/persisttest"
)

// shardedServes starts n `axe serve --ha` processes (the default mode: every node schedules
// its shards) on one MariaDB database and waits until they share the 256 shards.
func shardedServes(t *testing.T, n int) []*serveProc {
	t.Helper()
	dsn := persisttest.MySQLSchemaDSN(t)
	var ps []*serveProc
	for i := range n {
		addr := freePort(t)
		// Leases a loaded box renews in time (3 s ones lapsed beside a CPU hog, and the
		// shards went round without settling); the test waits for no expiry.
		ps = append(ps, startServe(t, t.TempDir(), nil, "--addr", addr, "--db", dsn, "--ha",
			"--node-id", fmt.Sprintf("n%d", i+1), "--advertise", "http://"+addr,
			"--lease-ttl", "10s", "--lease-renew", "2s"))
	}
	testwait.For(t, 3*startTimeout, "the shards shared by the three nodes", func() bool {
		total := 0
		for _, p := range ps {
			resp, err := http.Get(p.url + "/readyz")
			if err != nil {
				return false
			}
			var r struct {
				Shards string `json:"shards"`
			}
			err = json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
			set, perr := model.ParseShardSet(r.Shards)
			if err != nil || perr != nil || resp.StatusCode != http.StatusOK || set.Len() == 0 {
				return false
			}
			total += set.Len()
		}
		return total == model.ShardCount
	})
	return ps
}

// TestCLIGroupPauseResumeSharded: on three sharded nodes, `axe group pause` through any node
// pauses the group's tasks on every node (each node its own shards, the counts added up),
// and `axe group resume` through another resumes what the group's pause paused and names,
// and leaves paused with its note, the task paused on its own before (an incident's pause).
func TestCLIGroupPauseResumeSharded(t *testing.T) {
	ps := shardedServes(t, 3)
	env := []string{"AXE_SERVER=" + ps[0].url}
	var specs []map[string]any
	var names []string
	for i := range 20 {
		name := fmt.Sprintf("g1-%02d", i)
		names = append(names, name)
		specs = append(specs, map[string]any{"name": name, "group": "g1", "trigger": "manual",
			"callback": map[string]any{"type": "http", "url": "http://127.0.0.1:9/never"}})
	}
	axeOK(t, env, "task", "import", "-f", writeJSONLines(t, t.TempDir(), "g1.ndjson", specs))
	shards := map[int]bool{}
	for _, n := range names {
		shards[model.ShardOf(n)] = true
	}
	if len(shards) < 3 {
		t.Fatalf("the tasks fall in %d shards; the test wants them spread", len(shards))
	}
	axeOK(t, []string{"AXE_SERVER=" + ps[2].url}, "task", "pause", "g1-07", "--note", "INC-4411")

	out := axeOK(t, []string{"AXE_SERVER=" + ps[1].url}, "group", "pause", "g1", "--note", "deploy 7")
	if !strings.Contains(out, "paused 19 task(s); 1 were paused already") {
		t.Fatalf("axe group pause printed %q; want 19 paused and 1 paused already", out)
	}
	for _, n := range names {
		if got := getTask(t, env, n); got.Runtime.State != string(model.StatePaused) {
			t.Errorf("%s is %s after the group's pause, want PAUSED", n, got.Runtime.State)
		}
	}

	out = axeOK(t, []string{"AXE_SERVER=" + ps[2].url}, "group", "resume", "g1", "--note", "deploy 7 done")
	if !strings.Contains(out, "resumed 19 task(s)") || !strings.Contains(out, "left paused, not paused by the group's pause: 1 task(s)") {
		t.Fatalf("axe group resume printed %q; want 19 resumed and 1 left", out)
	}
	rows := tableRows(t, out[strings.Index(out, "NAME"):], "NAME")
	if len(rows) != 1 || rows[0][0] != "g1-07" || rows[0][1] != model.PausedByTask || !strings.Contains(out, "INC-4411") {
		t.Errorf("the tasks left paused = %q, want g1-07 paused by its own pause with its note", rows)
	}
	for _, n := range names {
		want := model.StateWaiting
		if n == "g1-07" {
			want = model.StatePaused
		}
		if got := getTask(t, env, n); got.Runtime.State != string(want) {
			t.Errorf("%s is %s after the group's resume, want %s", n, got.Runtime.State, want)
		}
	}
	var v struct {
		Runtime struct {
			Note     string `json:"note"`
			PausedBy string `json:"paused_by"`
		} `json:"runtime"`
	}
	if err := json.Unmarshal([]byte(axeOK(t, env, "task", "get", "g1-07")), &v); err != nil || v.Runtime.Note != "INC-4411" || v.Runtime.PausedBy != model.PausedByTask {
		t.Errorf("g1-07 after the group's resume: %+v, %v; want its own pause and note kept", v, err)
	}
}

// writeJSONLines writes vs as NDJSON to dir/name and returns its path.
func writeJSONLines(t *testing.T, dir, name string, vs []map[string]any) string {
	t.Helper()
	var b strings.Builder
	for _, v := range vs {
		line, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
