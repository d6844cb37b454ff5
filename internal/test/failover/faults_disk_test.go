package failover

import (
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the driver the embedded store uses, to audit its file
)

// fillDisk writes zeros to path until the file system is full and returns how much it wrote.
func fillDisk(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatalf("cannot create the filler: %v", err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	var n int64
	for {
		w, err := f.Write(buf)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			_ = f.Sync()
			return n
		}
		if err != nil {
			t.Fatalf("filling the disk: %v", err)
		}
	}
}

// TestFaultDiskFull runs `axe serve` on the embedded SQLite store in a 4 MiB tmpfs, fills the
// file system under load, and expects: a write through the API refused with a clear error,
// /readyz 503 while commits fail, and, once space returns, the daemon firing again by itself,
// every task accepted before the fault present, and the database file intact
// (PRAGMA integrity_check), with the audit's 0 lost and 0 duplicates. It needs root for the
// mount and says so when it skips.
func TestFaultDiskFull(t *testing.T) {
	scenario(t) // each scenario has its own database, ports and processes
	if os.Geteuid() != 0 {
		t.Skip("the disk-full scenario mounts a 4 MiB tmpfs, which needs root (CI runs as root)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs at %s (%v: %s): the disk-full scenario needs it", dir, err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	dbPath := filepath.Join(dir, "axe.db")
	db, err := sql.Open("sqlite", "file:"+dbPath+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	c := &cluster{t: t, dsn: "sqlite:" + dbPath, db: db, target: newTarget(t),
		http: &http.Client{Timeout: 5 * time.Second}}
	t.Cleanup(c.http.CloseIdleConnections)
	c.nodeLogsOnFailure()
	n := c.addNode("solo", false)
	c.start(n)
	c.waitReady(n, roleTimeout)

	var specs []faultTask
	for i := range 10 {
		specs = append(specs, faultTask{Name: fmt.Sprintf("disk-%02d", i), Group: "disk", Cron: "* * * * * *",
			TimeoutSec: 5, Callback: c.httpCallback(50), MisfirePolicy: []string{"fire_once", "skip"}[i%2]})
	}
	for i := range 10 {
		d := int64(3000 + 1500*i)
		specs = append(specs, faultTask{Name: fmt.Sprintf("disk-d%02d", i), Group: "disk", DelayMS: &d,
			TimeoutSec: 5, Callback: c.httpCallback(50)})
	}
	l := c.createTasks(specs)
	from := spanFrom(l)
	time.Sleep(time.Until(time.UnixMilli(from).Add(3 * time.Second)))

	filler := filepath.Join(dir, "filler")
	full := time.Now()
	wrote := fillDisk(t, filler)
	t.Logf("disk full: the filler took %d KiB", wrote>>10)

	// A write through the API: refused with an error that says what is wrong, or it may
	// still land in the space SQLite had (then it must be in the store afterwards).
	extra := faultTask{Name: "during-full", Group: "disk", Cron: "0 0 1 1 *", TimeoutSec: 5, Callback: c.httpCallback(0)}
	status, body, err := c.post(n.url, "/api/v1/tasks", extra)
	acceptedDuring := false
	switch {
	case err != nil:
		t.Errorf("create during the fault: %v (want an answer)", err)
	case status == http.StatusCreated || status == http.StatusOK:
		acceptedDuring = true
		t.Logf("disk full: a create still landed (%d): SQLite had room left in its pages", status)
	case status >= 500 && strings.Contains(strings.ToLower(string(body)), "full"):
		t.Logf("disk full: create refused %d %s", status, strings.TrimSpace(string(body)))
	default:
		t.Errorf("create during the fault = %d %s, want a 5xx naming the full disk", status, body)
	}

	// /readyz must turn 503 while the writer's commits fail.
	var notReady string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		resp, err := c.http.Get(n.url + "/readyz")
		if err != nil {
			t.Fatalf("the node stopped answering /readyz on a full disk: %v", err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			notReady = strings.TrimSpace(string(raw))
			break
		}
	}
	if notReady == "" {
		t.Errorf("/readyz never answered 503 in 15 s on a full disk")
	} else {
		t.Logf("disk full: /readyz 503 %s after the fill: %s", time.Since(full).Round(time.Millisecond), notReady)
	}
	time.Sleep(2 * time.Second)

	freed := time.Now()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	c.waitReady(n, 30*time.Second)
	t.Logf("disk full: ready again %s after space returned", time.Since(freed).Round(time.Millisecond))
	time.Sleep(4 * time.Second)
	if got, _ := sentBy(c.target.all(), 0, freed.Add(time.Second)); got == 0 {
		t.Errorf("nothing was dispatched after space returned: the daemon did not recover")
	}
	c.auditReceipts("disk full", l, Span{From: from, To: spanTo()}, []Fault{Fault(full.UnixMilli()), Fault(freed.UnixMilli())}, c.target.all)

	// Every task accepted before the fault (and the one accepted during it) is there.
	want := map[string]bool{}
	for _, s := range specs {
		want[s.Name] = true
	}
	if acceptedDuring {
		want[extra.Name] = true
	}
	rows, err := db.Query(`SELECT name FROM task_def`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		delete(want, name)
	}
	rows.Close()
	if len(want) > 0 {
		t.Errorf("tasks accepted before the fault are missing from the store: %v", want)
	}

	// Stop the daemon and check the file.
	n.signal(t, syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("the node ignored SIGTERM for 20 s")
	}
	var check string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil {
		t.Fatal(err)
	}
	if check != "ok" {
		t.Errorf("PRAGMA integrity_check = %q after the disk was full, want ok", check)
	}
}
