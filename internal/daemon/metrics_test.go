package daemon_test

import (
	"bytes"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"

	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
)

// scrape reads d's /metrics into its samples, keyed by series (name and labels).
func scrape(t *testing.T, d *daemontest.Daemon) map[string]float64 {
	t.Helper()
	resp, err := d.HTTP.Get(d.Base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body := daemontest.ReadAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, body)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		if _, dup := out[line[:i]]; dup {
			t.Errorf("series %s written twice", line[:i])
		}
		out[line[:i]] = v
	}
	return out
}

// TestMetricsOfTwoDaemonsApart: two daemons in one process write each its own /metrics from
// the sets it holds: one's fires, build and store series are not the other's, and nothing
// lands in the metrics library's default set.
func TestMetricsOfTwoDaemonsApart(t *testing.T) {
	t.Parallel()
	open := func(version string) *daemontest.Daemon {
		return daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), func(c *axedaemon.Config) { c.Version = version })
	}
	a, b := open("v-a"), open("v-b")
	h := daemontest.NewHook(t)
	a.Create(t, daemontest.Spec("only-on-a", h.URL("/ok/a"), "delay_ms", 0))
	a.WaitRun(t, "only-on-a", h.WaitCalls(t, "only-on-a", 1, daemontest.WaitTimeout)[0].Ticket)

	ma, mb := scrape(t, a), scrape(t, b)
	if ma["axe_triggers_total"] < 1 {
		t.Errorf("a: axe_triggers_total = %v, want >= 1 after its fire", ma["axe_triggers_total"])
	}
	if v, ok := mb["axe_triggers_total"]; !ok || v != 0 {
		t.Errorf("b: axe_triggers_total = %v (present %v), want 0: the fire was a's", v, ok)
	}
	if ma["axe_writer_commits_total"] < 1 {
		t.Errorf("a: axe_writer_commits_total = %v, want >= 1", ma["axe_writer_commits_total"])
	}
	for name, m := range map[string]map[string]float64{"a": ma, "b": mb} {
		own, other := `axe_build_info{version="v-`+name+`"}`, `axe_build_info{version="v-a"}`
		if name == "a" {
			other = `axe_build_info{version="v-b"}`
		}
		if m[own] != 1 {
			t.Errorf("%s: %s = %v, want 1", name, own, m[own])
		}
		if _, ok := m[other]; ok {
			t.Errorf("%s writes the other daemon's %s", name, other)
		}
		for _, s := range []string{"axe_ha_primary", "axe_lease_epoch", "axe_store_batch_guard_misses_total", "axe_dispatch_resends_in_doubt_total", `axe_pruned_rows_total{table="task_run"}`} {
			if _, ok := m[s]; !ok {
				t.Errorf("%s: no %s on /metrics", name, s)
			}
		}
		if m["axe_ha_primary"] != 1 {
			t.Errorf("%s: axe_ha_primary = %v on a single node, want 1", name, m["axe_ha_primary"])
		}
	}
	var buf bytes.Buffer
	metrics.WritePrometheus(&buf, false)
	if strings.Contains(buf.String(), "axe_") {
		t.Errorf("the default metric set holds axe series:\n%s", buf.String())
	}
}
