package admin_test

import (
	"bufio"
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
)

// Not parallel: metrics are process-wide, and this test must see one daemon's series.

// scrape reads /metrics: the samples by series, and the HELP and TYPE of each family.
type scrapeResult struct {
	raw     []byte
	samples map[string]float64
	help    map[string]string
	typ     map[string]string
}

func scrape(t *testing.T, d *daemontest.Daemon) scrapeResult {
	t.Helper()
	code, body := d.Call(t, http.MethodGet, "/metrics", nil)
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	r := scrapeResult{raw: body, samples: map[string]float64{}, help: map[string]string{}, typ: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, help, _ := strings.Cut(rest, " ")
			r.help[name] = help
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(rest, " ")
			r.typ[name] = typ
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample line %q", line)
		}
		r.samples[line[:i]] = v
	}
	return r
}

// TestMetricsExposition checks /metrics as Prometheus reads it: every family has real help text and a
// type, promtool finds nothing, no label holds a task name, and the counters move as tasks
// fire, fail and are killed.
func TestMetricsExposition(t *testing.T) {
	d := daemontest.Start(t, "sqlite:"+filepath.Join(t.TempDir(), "axe.db"), nil)
	h := daemontest.NewHook(t)
	before := scrape(t, d)
	d.Create(t, daemontest.Spec("metrics-tick", h.URL("/ok/x"), "cron", "* * * * * *"))
	d.Create(t, daemontest.Spec("metrics-fail", h.URL("/fail/x"), "trigger", "manual"))
	d.Create(t, daemontest.Spec("metrics-hang", h.URL("/hang/x"), "trigger", "delay", "delay_ms", 10, "timeout_sec", 300))
	h.WaitCalls(t, "metrics-tick", 3, daemontest.WaitTimeout)
	d.WaitRun(t, "metrics-fail", d.RunNow(t, "metrics-fail", nil))
	h.WaitCalls(t, "metrics-hang", 1, daemontest.WaitTimeout)
	d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/tasks/metrics-hang/kill", nil, nil)
	var after scrapeResult
	testwait.For(t, daemontest.WaitTimeout, "the success counter to move", func() bool {
		after = scrape(t, d)
		return after.samples[`axe_results_total{result="success"}`] >= 3
	})

	for _, c := range []struct {
		series  string
		atLeast float64
	}{
		{"axe_triggers_total", 5},
		{"axe_dispatches_total", 5},
		{"axe_fire_lateness_seconds_count", 3},
		{"axe_dispatch_latency_seconds_count", 5},
		{`axe_results_total{result="success"}`, 3},
		{`axe_results_total{result="failed"}`, 1},
		{"axe_kills_total", 1},
		{"axe_writer_commits_total", 1},
		{"axe_writer_batch_rows_count", 1},
	} {
		if got := after.samples[c.series] - before.samples[c.series]; got < c.atLeast {
			t.Errorf("%s moved by %v, want at least %v", c.series, got, c.atLeast)
		}
	}
	for _, s := range []string{"axe_lease_epoch", "axe_ha_primary", "axe_executors_lost", "axe_breakers_open",
		`axe_ready_queue_depth_by_priority{priority="0"}`, `axe_wheel_shard_pending{shard="0"}`, `axe_build_info{version="dev"}`,
		"axe_writer_queue_depth", "axe_writer_commit_duration_seconds_count", "axe_duplicate_fires_suppressed_total"} {
		if _, ok := after.samples[s]; !ok {
			t.Errorf("series %s is missing", s)
		}
	}
	if after.samples["axe_ha_primary"] != 1 {
		t.Errorf("axe_ha_primary = %v on a single node, want 1", after.samples["axe_ha_primary"])
	}

	families := map[string]bool{}
	for series := range after.samples {
		name := series
		if i := strings.IndexByte(series, '{'); i >= 0 {
			name = series[:i]
			if strings.Contains(series[i:], "metrics-") {
				t.Errorf("series %s has a task name in a label", series)
			}
		}
		families[name] = true
	}
	for name := range families {
		fam := name
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suf); ok && (after.typ[base] == "histogram" || after.typ[base] == "summary") {
				fam = base
			}
		}
		if help := after.help[fam]; help == "" || strings.HasPrefix(help, "Not described") {
			t.Errorf("family %s has no help text in the table (%q)", fam, help)
		}
		if after.typ[fam] == "" || after.typ[fam] == "untyped" {
			t.Errorf("family %s has no type", fam)
		}
	}
	if typ := after.typ["axe_fire_lateness_seconds"]; typ != "histogram" {
		t.Errorf("axe_fire_lateness_seconds is %q, want histogram", typ)
	}

	promtool(t, after.raw, "check", "metrics")
}

// promtool runs Debian's promtool on stdin and fails on any finding. Without promtool it
// skips, unless AXE_REQUIRE_PROMTOOL=1 (scripts/test.sh installs it and sets that).
func promtool(t *testing.T, stdin []byte, args ...string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("AXE_REQUIRE_PROMTOOL") == "1" {
			t.Fatal("promtool not found and AXE_REQUIRE_PROMTOOL=1")
		}
		t.Logf("promtool not found (apt-get install prometheus): skipping promtool %s", strings.Join(args, " "))
		return
	}
	cmd := exec.Command(path, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		return
	}
	if args[1] == "metrics" && len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics found:\n%s", out)
	}
}
