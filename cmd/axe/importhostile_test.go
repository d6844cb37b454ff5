package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImportCrontabHostileText runs `axe import crontab` on crontabs holding terminal
// escapes, bytes that are not UTF-8 and a NUL: the dry run shows every control character
// escaped, refuses what the real run could not carry exactly, and predicts the real run,
// which leaves no agent config, whole or partial, where it refuses.
func TestImportCrontabHostileText(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Nothing listens there: a case that got as far as creating tasks would fail loudly,
	// after having written its agent config.
	env := []string{"AXE_SERVER=http://127.0.0.1:1"}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	// Escapes that would erase their own row of the table are shown, not obeyed.
	tab := write("escapes", "* * * * * echo hi\x1b[2K\r\x1b[1Agone\u009b\n")
	r := axe(t, env, "import", "crontab", tab, "--app", "ops", "--agent-config", filepath.Join(dir, "escapes.json"))
	if r.code != 0 {
		t.Fatalf("dry run of a crontab with escapes: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if strings.ContainsAny(r.stdout+r.stderr, "\x1b\r") || strings.Contains(r.stdout, "\u009b") {
		t.Errorf("the dry run printed control characters raw: %q", r.stdout)
	}
	if !strings.Contains(r.stdout, `echo hi\x1b[2K\r\x1b[1Agone`) {
		t.Errorf("the dry run does not show the command with its escapes visible: %q", r.stdout)
	}

	for _, c := range []struct {
		name, line, says string
	}{
		{"not UTF-8", "* * * * * echo caf\xe9\n", "not UTF-8"},
		{"not UTF-8 in the environment", "GREETING=caf\xe9\n* * * * * echo $GREETING\n", "line 1"},
		{"NUL", "* * * * * echo a\x00b\n", "NUL"},
	} {
		tab := write("crontab", c.line)
		cfg := filepath.Join(dir, "agent.json")
		dry := axe(t, env, "import", "crontab", tab, "--app", "ops", "--agent-config", cfg)
		if dry.code == 0 || !strings.Contains(dry.stderr, c.says) || !strings.Contains(dry.stderr, "nothing was created") {
			t.Errorf("%s: dry run exit %d, stderr %q; want a refusal saying %q", c.name, dry.code, dry.stderr, c.says)
		}
		if strings.ContainsAny(dry.stdout+dry.stderr, "\x00\xe9") {
			t.Errorf("%s: the dry run printed the bad bytes raw: %q %q", c.name, dry.stdout, dry.stderr)
		}
		real := axe(t, env, "import", "crontab", tab, "--app", "ops", "--agent-config", cfg, "--yes")
		if real.code == 0 || real.stderr != dry.stderr {
			t.Errorf("%s: the dry run did not predict the real run:\ndry run exit %d: %s\nreal run exit %d: %s",
				c.name, dry.code, dry.stderr, real.code, real.stderr)
		}
		if _, err := os.Stat(cfg); !os.IsNotExist(err) {
			b, _ := os.ReadFile(cfg)
			t.Errorf("%s: the refused import left %s: %q", c.name, cfg, b)
		}
	}

	// An existing config of another app: refused in the dry run as in the real run, and the
	// file stays as it was, with nothing beside it.
	other := write("other.json", `{"app": "billing", "schedulers": ["http://127.0.0.1:1"], "handlers": {"x": {"command": ["true"]}}}`+"\n")
	before, _ := os.ReadFile(other)
	tab = write("good", "* * * * * echo ok\n")
	dry := axe(t, env, "import", "crontab", tab, "--app", "ops", "--agent-config", other)
	real := axe(t, env, "import", "crontab", tab, "--app", "ops", "--agent-config", other, "--yes")
	if dry.code == 0 || real.code == 0 || !strings.Contains(dry.stderr, `"billing"`) || real.stderr != dry.stderr {
		t.Errorf("another app's config: dry run exit %d %q, real run exit %d %q; want the same refusal", dry.code, dry.stderr, real.code, real.stderr)
	}
	if after, _ := os.ReadFile(other); string(after) != string(before) {
		t.Errorf("the refused import changed %s: %q", other, after)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("a temporary file stayed: %s", e.Name())
		}
	}
}

// TestTaskImportRefusesBadCallbackURL imports NDJSON whose callback URL would split the
// request line: the server refuses the batch naming the line and callback.url, nothing is
// created, and the refusal is printed without the control characters it quotes.
func TestTaskImportRefusesBadCallbackURL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServe(t, dir, nil, "--addr", "127.0.0.1:0", "--db", "sqlite:"+filepath.Join(dir, "axe.db"))
	env := []string{"AXE_SERVER=" + srv.url}
	for _, url := range []string{
		`http://127.0.0.1:9/x?a=b HTTP/1.1 X-Injected: yes`,
		`http://127.0.0.1:9/x?a=b\r\nX-Injected: yes`,
		`http://127.0.0.1:9/caf\u00e9`,
		`http://127.0.0.1:9/x\u001b[2K`,
	} {
		f := filepath.Join(dir, "tasks.ndjson")
		line := `{"name":"ok-task","trigger":"manual","callback":{"url":"http://127.0.0.1:9/ok"}}` + "\n" +
			`{"name":"bad-url","trigger":"manual","callback":{"url":"` + url + `"}}` + "\n"
		if err := os.WriteFile(f, []byte(line), 0o600); err != nil {
			t.Fatal(err)
		}
		r := axe(t, env, "task", "import", "-f", f)
		if r.code == 0 || !strings.Contains(r.stderr, "line 2") || !strings.Contains(r.stderr, "callback.url") {
			t.Errorf("URL %s: exit %d, stderr %q; want line 2 refused naming callback.url", url, r.code, r.stderr)
		}
		if strings.ContainsAny(r.stderr, "\x1b\r") {
			t.Errorf("URL %s: the refusal printed control characters raw: %q", url, r.stderr)
		}
		if g := axe(t, env, "task", "get", "ok-task"); g.code == 0 {
			t.Fatalf("URL %s: the refused batch created ok-task", url)
		}
	}
}
