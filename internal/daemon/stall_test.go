package daemon_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	axedaemon "github.com/axe-sched/axe/internal/daemon"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestShardsRideOutAStalledDatabase: a database that stalls for longer than TTL − renew
// but less than TTL (as a Galera view change does, about 6 s) holds a scheduling node's
// shard renewal and every write. The node closes its gates at its local deadline and keeps
// its shards; once the renewal goes through, what it held back is sent by the node itself
// under the same epochs: no shard changes hands, no run is recorded lost or failed, and
// every one-shot task due during the stall is delivered exactly once.
//
// The stall is a real one: a second connection locks every row of the lease table (the
// shard leases and their fences), which the renewal updates and every fenced batch reads.
// It begins just after a renewal committed, so the next renewal is caught at once, and it
// ends 15 s after that commit was seen: with TTL 24 s and renew 10 s, past the old local
// deadline (TTL − renew = 14 s after the last renewal was sent, where every shard used to be
// dropped) and 9 s before the lease's expiry (24 s). Those 9 s take up what a loaded box
// adds: taking the lock, releasing it, and the renewal's commit after it. (TTL 16 s, renew
// 6 s and an 11 s stall counted from the lock: beside a CPU hog the lock was held 14.7 s,
// the renewal missed the expiry and the node rightly dropped its shards.)
func TestShardsRideOutAStalledDatabase(t *testing.T) {
	t.Parallel()
	dsn := persisttest.MySQLSchemaDSN(t)
	hook := daemontest.NewHook(t)
	const ttl, renew, stall = 24 * time.Second, 10 * time.Second, 15 * time.Second
	ds := shardNodes(t, dsn, 1, func(c *axedaemon.Config) { c.LeaseTTL, c.LeaseRenew = ttl, renew })
	d := ds[0]

	db, err := sql.Open("mysql", strings.TrimPrefix(dsn, persist.SchemeMySQL+":"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	epochs := func() map[string]int64 {
		t.Helper()
		rows, err := db.Query(`SELECT name, epoch FROM lease WHERE name LIKE 'shard/%' AND name NOT LIKE '%#fence'`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]int64{}
		for rows.Next() {
			var name string
			var epoch int64
			if err := rows.Scan(&name, &epoch); err != nil {
				t.Fatal(err)
			}
			out[name] = epoch
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	renewedAt := func() string {
		t.Helper()
		var at string
		if err := db.QueryRow(`SELECT CAST(MAX(expiry) AS CHAR) FROM lease WHERE name LIKE 'shard/%' AND name NOT LIKE '%#fence'`).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}

	// Every-second cron tasks keep firing through the stall; one-shot tasks fall due in it.
	const cron, oneShot = 10, 40
	var specs []map[string]any
	for i := range cron {
		specs = append(specs, daemontest.Spec(fmt.Sprintf("tick-%02d", i), hook.URL("/ok"), "trigger", "cron", "cron", "* * * * * *"))
	}
	d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/tasks/batch", specs, nil)
	hook.WaitCalls(t, "tick-00", 2, daemontest.WaitTimeout)
	before := epochs()
	if len(before) != model.ShardCount {
		t.Fatalf("%d shard leases, want %d", len(before), model.ShardCount)
	}

	// One-shot tasks due about a second into the stall, which begins at the next renewal
	// (within renew): their fires are decided on time and written once the stall ends.
	oneShots := make([]map[string]any, oneShot)
	for i := range oneShots {
		oneShots[i] = daemontest.Spec(fmt.Sprintf("once-%02d", i), hook.URL("/ok"), "trigger", "delay", "delay_ms", (renew + time.Second).Milliseconds())
	}
	d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/tasks/batch", oneShots, nil)

	// Catch the stall's start just after a renewal committed.
	last := renewedAt()
	testwait.For(t, daemontest.WaitTimeout, "a shard renewal", func() bool { return renewedAt() != last })
	renewed := time.Now() // at or after the renewal's commit, so after it was sent
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT name FROM lease FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	stalled := time.Now()
	time.Sleep(time.Until(renewed.Add(stall)))
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	t.Logf("the lease table was locked for %s, from %s after the renewal was seen to %s after it",
		time.Since(stalled).Round(time.Millisecond), stalled.Sub(renewed).Round(time.Millisecond), time.Since(renewed).Round(time.Millisecond))

	for i := range oneShot {
		name := fmt.Sprintf("once-%02d", i)
		testwait.For(t, 60*time.Second, name+" recorded", func() bool {
			code, _, _ := d.Send(t, http.MethodGet, "/api/v1/tasks/"+name, nil, true)
			return code == http.StatusOK && d.Get(t, name).Runtime.LastResult != ""
		})
		if r := d.Get(t, name).Runtime.LastResult; r != model.ResultSuccess {
			t.Errorf("%s ended %q, want success", name, r)
		}
		if n := len(hook.CallsOf(name)); n != 1 {
			t.Errorf("%s reached the hook %d times, want once", name, n)
		}
	}
	// Every-second fires go on after the stall.
	resumed := time.Now().UnixMilli()
	testwait.For(t, 60*time.Second, "every-second fires after the stall", func() bool {
		return len(hook.CallsAfter("tick-00", resumed+1000)) >= 2
	})

	after := epochs()
	for name, e := range before {
		if after[name] != e {
			t.Errorf("%s went from epoch %d to %d: the node dropped its shards during the stall", name, e, after[name])
		}
	}
	var bad struct {
		Runs []model.Run `json:"runs"`
	}
	d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/runs?result=failure&limit=100", nil, &bad)
	for _, r := range bad.Runs {
		t.Errorf("run %s of %s ended %s: %s", r.Ticket, r.TaskName, r.Result, r.Error)
	}
	for i := range cron {
		seen := map[string]bool{}
		for _, c := range hook.CallsOf(fmt.Sprintf("tick-%02d", i)) {
			if seen[c.Ticket] {
				t.Errorf("ticket %s reached the hook twice", c.Ticket)
			}
			seen[c.Ticket] = true
		}
	}
	code, _, body := d.Send(t, http.MethodGet, "/metrics", nil, true)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics = %d", code)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "axe_sends_held_total ") {
			t.Logf("sends held back by the closed gate and sent after the stall: %s", strings.TrimPrefix(line, "axe_sends_held_total "))
		}
	}
}
