package persist_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// buildAxe builds cmd/axe once per test binary.
func buildAxe(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "axe")
	build := exec.Command("go", "build", "-o", bin, "github.com/axe-sched/axe/cmd/axe")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("cannot build axe: %v\n%s", err, out)
	}
	return bin
}

// serveUntilPaused starts `axe serve` on dsn with the migration held at point
// (persist.EnvMigratePause), waits for it to say it is held there, and kills it with
// SIGKILL: a crash at exactly that point of the migration.
func serveUntilPaused(t *testing.T, bin, dsn, point string) {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "AXE_DB="+dsn, persist.EnvMigratePause+"="+point)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	paused := make(chan bool, 1)
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			log.WriteString(line + "\n")
			if strings.Contains(line, "axe: migration paused at "+point) {
				paused <- true
				break
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		close(paused)
	}()
	select {
	case ok := <-paused:
		if !ok {
			_ = cmd.Wait()
			t.Fatalf("axe ended without reaching migration point %s:\n%s", point, log.String())
		}
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("axe did not reach migration point %s in 2 minutes", point)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("axe was not killed by SIGKILL: %v", err)
	}
}

// appliedSteps lists the versions schema_migrations records, in order, repeats included.
func appliedSteps(t *testing.T, dsn string) []int {
	t.Helper()
	scheme, rest, _ := strings.Cut(dsn, ":")
	driver := "sqlite"
	if scheme == persist.SchemeMySQL {
		driver = "mysql"
	}
	db, err := sql.Open(driver, rest)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// TestInterruptedMigrationRestarts kills a real axe process with SIGKILL at every statement
// of every migration step after version 2 while it upgrades the v2 fixture, on SQLite and
// MySQL, then starts axe again on the same database. The restarted migration must finish:
// every step recorded once, and the store reading exactly what an uninterrupted upgrade
// reads (every task with its next fire, every run and action once).
func TestInterruptedMigrationRestarts(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs axe")
	}
	bin := buildAxe(t)
	var adjust func(*storeSnapshot)
	for _, fx := range upgradeFixtures {
		if fx.name == "v2" {
			adjust = fx.adjust
		}
	}
	for _, scheme := range []string{persist.SchemeSQLite, persist.SchemeMySQL} {
		t.Run(scheme, func(t *testing.T) {
			t.Parallel()
			steps := persist.MigrationStatements(scheme)
			var versions []int
			for v := range steps {
				if v > 2 {
					versions = append(versions, v)
				}
			}
			sort.Ints(versions)
			// The schema an uninterrupted upgrade of the same fixture ends with.
			ref := fixtureDSN(t, scheme)
			rs, err := persist.Open(context.Background(), ref)
			if err != nil {
				t.Fatal(err)
			}
			_ = rs.Close()
			wantSchema := schemaOf(t, ref)
			for _, v := range versions {
				for k := 1; k <= steps[v]; k++ {
					point := fmt.Sprintf("%d.%d", v, k)
					t.Run("kill-at-"+point, func(t *testing.T) {
						t.Parallel() // each its own copy of the fixture and its own axe
						want := readWant(t, "v2")
						adjust(want)
						dsn := fixtureDSN(t, scheme)
						serveUntilPaused(t, bin, dsn, point)
						got := appliedSteps(t, dsn)
						for _, s := range got {
							if s >= v {
								t.Fatalf("killed inside step %d, schema_migrations already lists %v", v, got)
							}
						}
						// The restart: a second axe on the same database, held once migrated.
						serveUntilPaused(t, bin, dsn, "done")
						all := make([]int, 0, len(steps))
						for s := range steps {
							all = append(all, s)
						}
						sort.Ints(all)
						if got := appliedSteps(t, dsn); fmt.Sprint(got) != fmt.Sprint(all) {
							t.Fatalf("after the restart schema_migrations lists %v, want %v", got, all)
						}
						if got := schemaOf(t, dsn); got != wantSchema {
							t.Errorf("schema after the restart:\n%s\nwant, as after an uninterrupted upgrade:\n%s", got, wantSchema)
						}
						checkUpgrade(t, dsn, want)
					})
				}
			}
		})
	}
}

// schemaOf describes the schema of dsn: every table's SHOW CREATE TABLE on MySQL (without
// the AUTO_INCREMENT counter), every object's SQL on SQLite.
func schemaOf(t *testing.T, dsn string) string {
	t.Helper()
	scheme, rest, _ := strings.Cut(dsn, ":")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var b strings.Builder
	if scheme == persist.SchemeSQLite {
		db, err := sql.Open("sqlite", rest)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		rows, err := db.QueryContext(ctx, `SELECT type, name, COALESCE(sql, '') FROM sqlite_master ORDER BY type, name`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var typ, name, text string
			if err := rows.Scan(&typ, &name, &text); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s %s: %s\n", typ, name, text)
		}
		return b.String()
	}
	db, err := sql.Open("mysql", rest)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() ORDER BY TABLE_NAME`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	rows.Close()
	for _, table := range tables {
		var name, create string
		if err := db.QueryRowContext(ctx, "SHOW CREATE TABLE `"+table+"`").Scan(&name, &create); err != nil {
			t.Fatal(err)
		}
		fields := strings.Fields(create)
		for i, f := range fields {
			if strings.HasPrefix(f, "AUTO_INCREMENT=") {
				fields[i] = "AUTO_INCREMENT=…"
			}
		}
		fmt.Fprintf(&b, "%s\n", strings.Join(fields, " "))
	}
	return b.String()
}

// fixtureDSN is a fresh copy of the v2 fixture on scheme.
func fixtureDSN(t *testing.T, scheme string) string {
	t.Helper()
	if scheme == persist.SchemeSQLite {
		path := filepath.Join(t.TempDir(), "axe.db")
		copyFile(t, fixturePath("v2", "sqlite"), path)
		return "sqlite:" + path
	}
	dsn := persisttest.MySQLDSN(t)
	loadMySQLDump(t, dsn, fixturePath("v2", "mysql.sql"))
	return dsn
}

// TestUpgradedFixturesServe starts a real axe on each fixture, which upgrades it, and checks
// that the daemon comes up ready and serves every task of the fixture with its definition.
func TestUpgradedFixturesServe(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs axe")
	}
	bin := buildAxe(t)
	for _, fx := range upgradeFixtures {
		want := readWant(t, fx.name)
		for _, scheme := range []string{persist.SchemeSQLite, persist.SchemeMySQL} {
			t.Run(fx.name+"/"+scheme, func(t *testing.T) {
				var dsn string
				if scheme == persist.SchemeSQLite {
					path := filepath.Join(t.TempDir(), "axe.db")
					copyFile(t, fixturePath(fx.name, "sqlite"), path)
					dsn = "sqlite:" + path
				} else {
					dsn = persisttest.MySQLDSN(t)
					loadMySQLDump(t, dsn, fixturePath(fx.name, "mysql.sql"))
				}
				base := startAxe(t, bin, dsn)
				testwait.For(t, time.Minute, "axe to be ready", func() bool {
					resp, err := http.Get(base + "/readyz")
					if err != nil {
						return false
					}
					resp.Body.Close()
					return resp.StatusCode == http.StatusOK
				})
				resp, err := http.Get(base + "/api/v1/tasks?limit=1000")
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var page struct {
					Tasks []struct {
						Name    string `json:"name"`
						Trigger string `json:"trigger"`
						Cron    string `json:"cron"`
					} `json:"tasks"`
				}
				if err := json.NewDecoder(resp.Body).Decode(&page); err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("GET /api/v1/tasks: %d, %v", resp.StatusCode, err)
				}
				got := map[string]string{}
				for _, tk := range page.Tasks {
					got[tk.Name] = tk.Trigger + " " + tk.Cron
				}
				if len(got) != len(want.Tasks) {
					t.Errorf("axe serves %d tasks, the fixture holds %d: %v", len(got), len(want.Tasks), got)
				}
				for _, tk := range want.Tasks {
					if g := got[tk.Def.Name]; g != tk.Def.Trigger+" "+tk.Def.Cron {
						t.Errorf("task %s served as %q, want %q", tk.Def.Name, g, tk.Def.Trigger+" "+tk.Def.Cron)
					}
				}
			})
		}
	}
}

// startAxe runs `axe serve` on dsn until the test ends (then SIGTERM) and returns its base URL.
func startAxe(t *testing.T, bin, dsn string) string {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "AXE_DB="+dsn)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("axe did not stop cleanly: %v\n%s", err, stderr.String())
			}
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			t.Errorf("axe did not stop within a minute of SIGTERM")
		}
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), " listening on "); ok {
				u, _, _ := strings.Cut(rest, " ")
				addr <- u
				break
			}
		}
		close(addr)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case u, ok := <-addr:
		if !ok {
			t.Fatalf("axe ended before listening:\n%s", stderr.String())
		}
		return u
	case <-time.After(2 * time.Minute):
		t.Fatalf("axe did not listen within 2 minutes:\n%s", stderr.String())
	}
	return ""
}
