package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImport runs axe task import against a real axe serve: batches, the line of each bad
// item, --continue, on-conflict and the summary; and axe task bulk.
func TestImport(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServe(t, dir, nil, "--addr", "127.0.0.1:0", "--db", "sqlite:"+filepath.Join(dir, "axe.db"), "--timezone", "UTC")
	env := []string{"AXE_SERVER=" + srv.url}
	line := func(name string) string {
		return fmt.Sprintf(`{"name":%q,"group":"imp","delay_ms":3600000,"callback":{"url":"http://127.0.0.1:1/"}}`, name)
	}
	var good strings.Builder
	for i := range 250 {
		good.WriteString(line(fmt.Sprintf("imp-%03d", i)) + "\n")
		if i == 100 {
			good.WriteString("\n") // blank lines are skipped but counted
		}
	}
	goodFile := filepath.Join(dir, "good.ndjson")
	if err := os.WriteFile(goodFile, []byte(good.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	r := axe(t, env, "task", "import", "-f", goodFile, "--batch", "100")
	if r.code != 0 || !strings.Contains(r.stderr, "250 created, 0 skipped, 0 replaced, 0 failed") {
		t.Fatalf("import: exit %d, stderr %q", r.code, r.stderr)
	}
	if n := strings.Count(r.stderr, "tasks, "); n != 3 {
		t.Errorf("a pipe gets one plain progress line per batch; got %d in %q", n, r.stderr)
	}
	if got := getTask(t, env, "imp-249"); got.Runtime.State != "SCHEDULED" {
		t.Errorf("imp-249 is %s", got.Runtime.State)
	}

	// Again: every name is taken. Stop at the first batch, naming the file lines.
	r = axe(t, env, "task", "import", "-f", goodFile, "--batch", "100")
	if r.code == 0 || !strings.Contains(r.stderr, "line 1: ") || !strings.Contains(r.stderr, "0 created") ||
		!strings.Contains(r.stderr, "100 failed (1 refused batch(es))") {
		t.Fatalf("re-import: exit %d, stderr %.600q", r.code, r.stderr)
	}
	r = axeStdin(t, good.String(), env, "task", "import", "-f", "-", "--on-conflict", "skip")
	if r.code != 0 || !strings.Contains(r.stderr, "0 created, 250 skipped") {
		t.Fatalf("re-import with skip: exit %d, stderr %q", r.code, r.stderr)
	}

	// A bad item in the second batch: --continue goes on; its line is named.
	var mixed strings.Builder
	for i := range 30 {
		switch i {
		case 14:
			mixed.WriteString(`{"name":"bad-prio","priority":9,"trigger":"manual","callback":{"url":"http://127.0.0.1:1/"}}` + "\n")
		case 25:
			mixed.WriteString("{not json\n")
		default:
			mixed.WriteString(line(fmt.Sprintf("mix-%02d", i)) + "\n")
		}
	}
	r = axeStdin(t, mixed.String(), env, "task", "import", "-f", "-", "--batch", "10", "--continue")
	if r.code == 0 || !strings.Contains(r.stderr, "line 15: priority") || !strings.Contains(r.stderr, "line 26: not valid JSON") ||
		!strings.Contains(r.stderr, "10 created, 0 skipped, 0 replaced, 20 failed (2 refused batch(es))") {
		t.Fatalf("mixed import: exit %d, stderr %q", r.code, r.stderr)
	}

	out := axeOK(t, env, "task", "bulk", "pause", "--group", "imp", "--prefix", "mix-", "--dry-run")
	if out != "pause would affect 10 task(s)\n" {
		t.Errorf("bulk dry run printed %q", out)
	}
	out = axeOK(t, env, "task", "bulk", "delete", "--prefix", "mix-", "--note", "cleanup")
	if out != "delete: 10 task(s)\n" {
		t.Errorf("bulk delete printed %q", out)
	}
	r = axe(t, env, "task", "bulk", "pause")
	if r.code == 0 || !strings.Contains(r.stderr, "selector") {
		t.Errorf("empty selector: exit %d, stderr %q", r.code, r.stderr)
	}
}
