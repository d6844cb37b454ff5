package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/axe-sched/axe/internal/test/testproxy"
	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestWindowSliceLoadedAgainAfterAFailedLoad: the store is cut off (a network fault between
// the scheduler and MariaDB) while the loader moves the horizon over a task's due time, so
// that slice's load fails. Once the store answers again the next slice loads it too, and the
// task fires at its due time. (A loader that only logged the failure left the task behind
// the horizon, out of memory, until the process restarted.)
func TestWindowSliceLoadedAgainAfterAFailedLoad(t *testing.T) {
	t.Parallel()
	dsn := persisttest.MySQLSchemaDSN(t)
	cfg, err := mysql.ParseDSN(strings.TrimPrefix(dsn, persist.SchemeMySQL+":"))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := testproxy.New(cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	cfg.Addr = proxy.Addr()
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = 2*time.Second, 2*time.Second, 2*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := persist.Open(ctx, persist.SchemeMySQL+":"+cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })

	cs := newCallbackServer(t)
	clk := clock.NewFake(time.Now())
	e := startEngine(t, s, withFakeClock(clk)) // window 10 s, a slice every 2 s
	spec := httpSpec("beyond", cs.URL)
	spec.DelayMS = ptr(int64(25_000)) // beyond the window: loaded by a later slice
	created := mustCreate(t, e, spec)
	due := created.Runtime.NextTriggerTime
	if tasks, _ := e.API().InMemory(); tasks != 0 {
		t.Fatalf("%d tasks in memory; want the task beyond the window left in the store", tasks)
	}

	if err := proxy.Sever(); err != nil {
		t.Fatal(err)
	}
	// The horizon moves over the due time while no load can reach the store.
	waitAdvancing(t, clk, 500*time.Millisecond, 60*time.Second, "the horizon past the due time", func() bool {
		return e.loader.Horizon().UnixMilli() > due
	})
	// One more interval, so that a load is tried (and fails) after the horizon moved.
	runFor(clk, 2*time.Second, 500*time.Millisecond)
	if n := len(cs.got("beyond")); n != 0 {
		t.Fatalf("called %d times while the store was cut off", n)
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	waitAdvancing(t, clk, 100*time.Millisecond, 90*time.Second, "the task's run", func() bool {
		return len(cs.got("beyond")) == 1
	})
	waitFor(t, 30*time.Second, "the run's end", func() bool {
		pt, err := e.API().GetTask(context.Background(), "beyond")
		return err == nil && pt.Runtime.State == model.StateSuccess
	})
	runs, err := e.API().Runs(context.Background(), "beyond", 10)
	if err != nil || len(runs) != 1 || runs[0].ScheduledAt != due {
		t.Fatalf("runs = %+v, %v; want one of the fire due at %d", runs, err, due)
	}
}
