package admin

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var metricName = regexp.MustCompile(`\baxe_[a-z_]+\b`)

// knownFamily resolves a metric name as PromQL uses it (with _bucket, _sum or _count) to
// its family in metricHelp.
func knownFamily(name string) bool {
	if _, ok := metricHelp[name]; ok {
		return true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if m, ok := metricHelp[base]; ok && (m.Type == "histogram" || m.Type == "summary") {
				return true
			}
		}
	}
	return false
}

// TestOperationsDocs checks the operations kit against the metric table: every axe_ metric
// is documented in docs/operations.md, and the dashboard and the alert rules use only
// metrics that exist. The dashboard must be valid JSON with the panels the runbook names;
// the rules pass `promtool check rules` when promtool is installed.
func TestOperationsDocs(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "docs", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	ops := read("operations.md")
	for name := range metricHelp {
		if strings.HasPrefix(name, "axe_") && !strings.Contains(ops, "`"+name+"`") {
			t.Errorf("docs/operations.md does not describe %s", name)
		}
	}
	for _, file := range []string{"operations.md", "grafana/axe.json", "prometheus/alerts.yml"} {
		for _, name := range metricName.FindAllString(read(file), -1) {
			if !knownFamily(name) {
				t.Errorf("docs/%s uses %s, which axe does not expose", file, name)
			}
		}
	}

	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(read("grafana/axe.json")), &dash); err != nil {
		t.Fatalf("docs/grafana/axe.json: %v", err)
	}
	rows := map[string]bool{}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			rows[p.Title] = true
			continue
		}
		if len(p.Targets) == 0 || p.Targets[0].Expr == "" {
			t.Errorf("panel %q has no query", p.Title)
		}
	}
	for _, want := range []string{"HA", "Lateness", "Throughput", "Failures", "Writer", "Executors"} {
		if !rows[want] {
			t.Errorf("the dashboard has no %q row", want)
		}
	}

	alerts := read("prometheus/alerts.yml")
	for _, want := range []string{"AxeNoPrimary", "AxeExecutorLost", "AxeBreakerOpen", "AxeFireLatenessP99High",
		"AxeWriterQueueGrowing", "AxeDuplicateFiresSuppressed"} {
		if !strings.Contains(alerts, "alert: "+want) {
			t.Errorf("alerts.yml has no %s", want)
		}
	}
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("AXE_REQUIRE_PROMTOOL") == "1" {
			t.Fatal("promtool not found and AXE_REQUIRE_PROMTOOL=1")
		}
		t.Skip("promtool not found (apt-get install prometheus)")
	}
	out, err := exec.Command(path, "check", "rules", filepath.Join("..", "docs", "prometheus", "alerts.yml")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS: 6 rules found") {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
}
