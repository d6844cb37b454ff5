package main

import (
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the store's driver, to set a due time as an outage leaves it
)

// TestCLIOverlapFlags: --overlap-policy and --catchup-window-sec of task create and update
// set the fields over the file's; allow_all with retries and a window with misfire_policy
// skip are the server's 400 naming the field; a word for the window names the flag.
func TestCLIOverlapFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServe(t, dir, nil, "--addr", "127.0.0.1:0", "--db", "sqlite:"+filepath.Join(dir, "axe.db"), "--timezone", "UTC")
	h := newHook(t)
	env := []string{"AXE_SERVER=" + srv.url}
	get := func(name string) (policy string, window int) {
		t.Helper()
		var v struct {
			OverlapPolicy    string `json:"overlap_policy"`
			CatchupWindowSec int    `json:"catchup_window_sec"`
		}
		out := axeOK(t, env, "task", "get", name)
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("axe task get %s printed %q: %v", name, out, err)
		}
		return v.OverlapPolicy, v.CatchupWindowSec
	}
	file := writeJSON(t, dir, "ov.json", map[string]any{
		"name": "ov", "cron": "0 3 * * *", "overlap_policy": "skip", "callback": map[string]string{"url": h.srv.URL + "/ov"},
	})
	axeOK(t, env, "task", "create", "-f", file, "--overlap-policy", "buffer_all", "--catchup-window-sec", "600")
	if p, w := get("ov"); p != "buffer_all" || w != 600 {
		t.Errorf("created with --overlap-policy buffer_all --catchup-window-sec 600 over the file's skip: %q %d", p, w)
	}
	axeOK(t, env, "task", "update", "ov", "-f", file)
	if p, w := get("ov"); p != "skip" || w != 0 {
		t.Errorf("updated from the file alone: %q %d, want its skip and no window", p, w)
	}
	axeOK(t, env, "task", "update", "ov", "-f", file, "--overlap-policy", "allow_all")
	if p, _ := get("ov"); p != "allow_all" {
		t.Errorf("updated with --overlap-policy allow_all: %q", p)
	}
	retryFile := writeJSON(t, dir, "ov-retry.json", map[string]any{
		"name": "ov", "cron": "0 3 * * *", "retry_count": 2, "callback": map[string]string{"url": h.srv.URL + "/ov"},
	})
	r := axe(t, env, "task", "update", "ov", "-f", retryFile, "--overlap-policy", "allow_all")
	if r.code == 0 || !strings.Contains(r.stderr, "retry_count") || !strings.Contains(r.stderr, "400") {
		t.Errorf("allow_all with retries: exit %d, stderr %q; want the 400 naming retry_count", r.code, r.stderr)
	}
	axeOK(t, env, "task", "update", "ov", "-f", file)
	skipFile := writeJSON(t, dir, "ov-skip.json", map[string]any{
		"name": "ov", "cron": "0 3 * * *", "misfire_policy": "skip", "callback": map[string]string{"url": h.srv.URL + "/ov"},
	})
	r = axe(t, env, "task", "update", "ov", "-f", skipFile, "--catchup-window-sec", "60")
	if r.code == 0 || !strings.Contains(r.stderr, "misfire_policy") || !strings.Contains(r.stderr, "catchup_window_sec") {
		t.Errorf("a window with misfire_policy skip: exit %d, stderr %q; want the 400 naming both", r.code, r.stderr)
	}
	r = axe(t, env, "task", "create", "-f", file, "--catchup-window-sec", "ten")
	if r.code == 0 || !strings.Contains(r.stderr, "catchup-window-sec") {
		t.Errorf("create with a word: exit %d, stderr %q; want the flag named", r.code, r.stderr)
	}
	if p, w := get("ov"); p != "skip" || w != 0 {
		t.Errorf("after the refused updates: %q %d, want skip and 0 still", p, w)
	}
}

// TestCatchupAfterTenMinuteOutage is the real process: `axe serve` runs a cron task that
// fires every minute with a catch-up window of an hour, is stopped, and its store is left as
// ten minutes of outage leave it (the task's due time ten minutes in the past: nothing
// else of an outage is in the store). The restarted server runs each fire of those ten
// minutes once, oldest first, with its own scheduled_at, and records the catch-up.
func TestCatchupAfterTenMinuteOutage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "axe.db")
	args := []string{"--addr", "127.0.0.1:0", "--db", "sqlite:" + db, "--timezone", "UTC"}
	srv := startServe(t, dir, nil, args...)
	h := newHook(t)
	env := []string{"AXE_SERVER=" + srv.url}
	file := writeJSON(t, dir, "minutely.json", map[string]any{
		"name": "minutely", "cron": "0 * * * * *", "callback": map[string]string{"url": h.srv.URL + "/m"},
	})
	axeOK(t, env, "task", "create", "-f", file, "--overlap-policy", "skip", "--catchup-window-sec", "3600")
	if code := srv.signal(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("axe serve exited %d on SIGTERM", code)
	}

	// The outage: the due time is the minute ten minutes before the current one.
	sdb, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	due := start.Truncate(time.Minute).Add(-10 * time.Minute).UnixMilli()
	res, err := sdb.Exec(`UPDATE task_runtime SET next_trigger_time = ? WHERE task_id = (SELECT id FROM task_def WHERE name = 'minutely')`, due)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("%d runtime rows set", n)
	}
	if err := sdb.Close(); err != nil {
		t.Fatal(err)
	}

	srv = startServe(t, dir, nil, args...)
	env = []string{"AXE_SERVER=" + srv.url}
	// The minutes due..start are missed: 11 fires (10 if a minute turned meanwhile, then
	// the new minute's fire comes too: either way each minute once).
	missed := int((start.Truncate(time.Minute).UnixMilli()-due)/60_000) + 1
	deadline := time.Now().Add(60 * time.Second)
	for len(h.callsOf("minutely")) < missed {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d missed fires ran within 60 s", len(h.callsOf("minutely")), missed)
		}
		time.Sleep(50 * time.Millisecond)
	}
	calls := h.callsOf("minutely")
	seen := map[int64]bool{}
	for i, c := range calls {
		if seen[c.ScheduledAt] {
			t.Errorf("fire %d ran twice", c.ScheduledAt)
		}
		seen[c.ScheduledAt] = true
		if i < missed && c.ScheduledAt != due+int64(i)*60_000 {
			t.Errorf("call %d scheduled at %s, want %s", i, time.UnixMilli(c.ScheduledAt).UTC(), time.UnixMilli(due+int64(i)*60_000).UTC())
		}
	}
	out := axeOK(t, env, "task", "actions", "minutely")
	if !strings.Contains(out, "catchup") || !strings.Contains(out, "run one after another") {
		t.Errorf("actions lack the catch-up record:\n%s", out)
	}
}
