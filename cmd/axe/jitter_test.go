package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/engine"
)

// TestCLICronNextJitter: axe cron next --jitter N --task NAME prints each fire's nominal
// time, its jitter and when it leaves, as the engine computes them; a bound the schedule's
// gap refuses is the server's 400 naming jitter_sec, and --task alone is refused.
func TestCLICronNextJitter(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServe(t, dir, nil, "--addr", "127.0.0.1:0", "--db", "sqlite:"+filepath.Join(dir, "axe.db"), "--timezone", "UTC")
	env := []string{"AXE_SERVER=" + srv.url}

	out := axeOK(t, env, "cron", "next", "0 3 * * *", "--tz", "UTC", "-n", "3", "--jitter", "600", "--task", "nightly")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || lines[0] != "# 0 3 * * * in UTC, jitter_sec 600 for task nightly: nominal time, jitter, leaves at" {
		t.Fatalf("cron next --jitter printed %q", out)
	}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != 4 {
			t.Fatalf("line %q: want nominal time, +N, ms, leaves-at", l)
		}
		at, err := time.Parse(time.RFC3339, f[0])
		if err != nil || at.Hour() != 3 || at.Minute() != 0 {
			t.Fatalf("line %q: nominal time %q is not 03:00 UTC", l, f[0])
		}
		j := engine.JitterOffset("nightly", at.UnixMilli(), 600)
		leaves, err := time.Parse(time.RFC3339Nano, f[3])
		if f[1] != fmt.Sprintf("+%d", j) || f[2] != "ms" || err != nil || !leaves.Equal(at.Add(time.Duration(j)*time.Millisecond)) {
			t.Errorf("line %q: want +%d ms and %s", l, j, at.Add(time.Duration(j)*time.Millisecond).Format(time.RFC3339Nano))
		}
	}
	r := axe(t, env, "cron", "next", "*/1 * * * *", "--tz", "UTC", "--jitter", "60", "--task", "x")
	if r.code == 0 || !strings.Contains(r.stderr, "400") || !strings.Contains(r.stderr, "jitter_sec") {
		t.Errorf("--jitter 60 on every minute: exit %d, stderr %q; want the 400 naming jitter_sec", r.code, r.stderr)
	}
	r = axe(t, env, "cron", "next", "0 3 * * *", "--jitter", "5")
	if r.code == 0 || !strings.Contains(r.stderr, "task") {
		t.Errorf("--jitter without --task: exit %d, stderr %q; want task named", r.code, r.stderr)
	}
	r = axe(t, env, "cron", "next", "0 3 * * *", "--task", "x")
	if r.code == 0 || !strings.Contains(r.stderr, "--task") {
		t.Errorf("--task without --jitter: exit %d, stderr %q", r.code, r.stderr)
	}
}
