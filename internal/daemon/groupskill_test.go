package daemon_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/axe-sched/axe/admin"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestShardsGroupPauseResumeAndKillByTicket: on three nodes that schedule by shard, a
// group's pause through any node pauses the group's tasks on every node (each node its own
// shards; the answer adds their counts); a group's resume through another resumes them all
// but the task paused on its own, which it names with its note, summed over the nodes. A run
// killed by its ticket through a node that does not schedule its task reaches the owner.
func TestShardsGroupPauseResumeAndKillByTicket(t *testing.T) {
	t.Parallel()
	dsn := persisttest.MySQLSchemaDSN(t)
	hook := daemontest.NewHook(t)
	ds := shardNodes(t, dsn, 3, nil)
	var names []string
	owners := map[string]bool{}
	for i := range 20 {
		name := fmt.Sprintf("g1-%02d", i)
		names = append(names, name)
		ds[i%3].Create(t, daemontest.Spec(name, hook.URL("/ok"), "trigger", "manual", "group", "g1"))
		owners[owner(t, ds, name).Addr] = true
	}
	if len(owners) != 3 {
		t.Fatalf("the group's tasks are scheduled by %d nodes, want the three", len(owners))
	}
	ds[2].MustJSON(t, http.StatusOK, "POST", "/api/v1/tasks/g1-07/pause", map[string]string{"note": "INC-4411"}, nil)

	var p struct {
		Tasks         int `json:"tasks"`
		AlreadyPaused int `json:"already_paused"`
	}
	ds[0].MustJSON(t, http.StatusOK, "POST", "/api/v1/groups/g1/pause", map[string]string{"note": "deploy 7"}, &p)
	if p.Tasks != 19 || p.AlreadyPaused != 1 {
		t.Errorf("group pause through one node = %+v; want 19 paused and 1 paused already", p)
	}
	for _, n := range names {
		if got := ds[1].Get(t, n); got.Runtime.State != model.StatePaused {
			t.Errorf("%s is %s after the group's pause", n, got.Runtime.State)
		}
	}
	var r struct {
		Tasks           int `json:"tasks"`
		LeftPausedCount int `json:"left_paused_count"`
		LeftPaused      []struct {
			Name     string `json:"name"`
			PausedBy string `json:"paused_by"`
			Note     string `json:"note"`
		} `json:"left_paused"`
	}
	ds[1].MustJSON(t, http.StatusOK, "POST", "/api/v1/groups/g1/resume", nil, &r)
	if r.Tasks != 19 || r.LeftPausedCount != 1 || len(r.LeftPaused) != 1 || r.LeftPaused[0].Name != "g1-07" ||
		r.LeftPaused[0].PausedBy != model.PausedByTask || r.LeftPaused[0].Note != "INC-4411" {
		t.Errorf("group resume through another node = %+v; want 19 resumed and g1-07 left with its note", r)
	}
	for _, n := range names {
		want := model.StateWaiting
		if n == "g1-07" {
			want = model.StatePaused
		}
		if got := ds[2].Get(t, n); got.Runtime.State != want {
			t.Errorf("%s is %s after the group's resume, want %s", n, got.Runtime.State, want)
		}
	}

	// Kill by ticket through a node that does not schedule the task.
	ds[0].Create(t, daemontest.Spec("hang", hook.URL("/hang"), "trigger", "manual", "timeout_sec", 300))
	own := owner(t, ds, "hang")
	var via *daemontest.Daemon
	for _, d := range ds {
		if d != own {
			via = d
			break
		}
	}
	ticket := via.RunNow(t, "hang", nil)
	hook.WaitCalls(t, "hang", 1, daemontest.WaitTimeout)
	code, hdr, body := via.Send(t, "POST", "/api/v1/runs/"+ticket+"/kill", map[string]string{"reason": "stuck"}, true)
	if code != http.StatusOK || !strings.Contains(string(body), `"result":"killed"`) || !strings.Contains(string(body), "stuck") || hdr.Get(admin.ForwardedHeader) != "http://"+own.Addr {
		t.Fatalf("kill by ticket through %s (the owner is %s) = %d %s", via.Addr, own.Addr, code, body)
	}
	if run := own.WaitRun(t, "hang", ticket); run.Result != model.ResultKilled || !strings.Contains(run.Error, "stuck") {
		t.Errorf("the run killed through another node = %+v", run)
	}
	// The scheduler stopped waiting; the downstream's call ends at the run's deadline unless
	// it answers: let it, so the nodes stop without waiting for that.
	hook.ReleaseHung()
}
