package bench

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/axe-sched/axe/bench/internal/benchkit"
	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// B2, window load: a table of n tasks, half of them due within the engine's 5-minute window,
// loaded by engine.Start into the wheel, beside the same rows read by a plain SELECT of
// whole tasks (the database and the driver alone), by a plain SELECT of the (id, due time)
// references the engine holds for tasks not due within its promote lead (the ceiling of
// what it reads), and by Store.LoadDue (whole rows decoded into model.Task). Targets at
// 1M due: >= 200K tasks/s (<= 5 s), RSS increase <= 300 MB.
//
//	go test -run '^$' -bench WindowLoad -benchtime 5x ./bench/ -args -size=2e6

// windowSelect is the statement Store.LoadDue runs on MySQL, columns, index hint, join
// order and sort included, so the ceiling reads exactly the rows the engine loads.
const windowSelect = `SELECT d.id, d.name, d.grp, d.trigger_type, d.cron, d.delay_ms, d.depends_on,
	d.depends_mode, d.timezone, d.timeout_sec, d.retry_count, d.retry_interval_sec, d.priority,
	d.callback, d.params, d.misfire_policy, d.paused, d.created_at, d.updated_at,
	r.state, r.current_ticket, r.attempt, r.next_trigger_time, r.last_trigger_time,
	r.last_end_time, r.last_executor, r.success_count, r.failure_count, r.note, r.version
	FROM task_runtime r FORCE INDEX (idx_task_runtime_next) STRAIGHT_JOIN task_def d ON d.id = r.task_id
	WHERE r.next_trigger_time > 0 AND r.next_trigger_time >= ? AND r.next_trigger_time < ?
	AND r.state IN ('SCHEDULED', 'RETRYING') ORDER BY r.next_trigger_time, r.task_id`

// refsSelect is the statement Store.LoadDueRefs runs: what the engine reads for the
// tasks of the window that are not due within its promote lead.
const refsSelect = `SELECT task_id, next_trigger_time FROM task_runtime
	WHERE next_trigger_time > 0 AND next_trigger_time >= ? AND next_trigger_time < ?
	AND state IN ('SCHEDULED', 'RETRYING')`

// windowFixture is a database holding the B2 table, and the frozen instant it is due from.
type windowFixture struct {
	n, due int
	now    time.Time
	store  persist.Store
	db     *sql.DB

	tableBytes int64
	server     benchkit.ServerInfo
}

// mix64 scatters i (splitmix64), so due times are not in id order: the index range scan
// then visits the clustered rows in random order, as it does in production.
func mix64(i uint64) uint64 {
	i += 0x9e3779b97f4a7c15
	i = (i ^ i>>30) * 0xbf58476d1ce4e5b9
	i = (i ^ i>>27) * 0x94d049bb133111eb
	return i ^ i>>31
}

func newWindowFixture(tb testing.TB, n int) *windowFixture {
	tb.Helper()
	ctx := context.Background()
	store, db := scratchStore(tb, 8)
	f := &windowFixture{n: n, due: (n + 1) / 2, now: time.Now().Truncate(time.Millisecond), store: store, db: db}
	now, window := f.now.UnixMilli(), engine.WindowDefault.Milliseconds()
	start := time.Now()
	err := benchkit.InsertTasks(ctx, db, benchkit.Tasks{
		N: n,
		Due: func(i int) int64 {
			h := int64(mix64(uint64(i)) >> 1)
			if i%2 == 0 {
				return now + 1000 + h%(window-2000) // inside the window
			}
			return now + window + 1000 + h%(55*60*1000) // later within the hour
		},
		// Nothing fires on the frozen clock; the URL is never called.
		Callback:  model.Callback{Type: model.CallbackHTTP, URL: "http://127.0.0.1:9/never"},
		CreatedAt: now,
	})
	if err != nil {
		tb.Fatal(err)
	}
	// Fresh statistics, as a long-lived table would have.
	if _, err := db.ExecContext(ctx, "ANALYZE TABLE task_runtime, task_def"); err != nil {
		tb.Fatal(err)
	}
	took := time.Since(start)
	if f.tableBytes, err = benchkit.TableBytes(ctx, db); err != nil {
		tb.Fatal(err)
	}
	if f.server, err = benchkit.ReadServerInfo(ctx, db); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("fixture: %d tasks (%d due in the window, %d MiB of tables) inserted in %s",
		n, f.due, f.tableBytes>>20, took.Round(time.Millisecond))
	return f
}

func (f *windowFixture) horizon() int64 { return f.now.Add(engine.WindowDefault).UnixMilli() }

// selectRows reads the window's whole rows with a plain SELECT into reused buffers.
func (f *windowFixture) selectRows(ctx context.Context) (int, time.Duration, error) {
	return f.selectQuery(ctx, windowSelect, 30)
}

// selectRefs reads the window's (id, due time) pairs with a plain SELECT.
func (f *windowFixture) selectRefs(ctx context.Context) (int, time.Duration, error) {
	return f.selectQuery(ctx, refsSelect, 2)
}

func (f *windowFixture) selectQuery(ctx context.Context, q string, ncols int) (int, time.Duration, error) {
	start := time.Now()
	rows, err := f.db.QueryContext(ctx, q, 1, f.horizon())
	if err != nil {
		return 0, 0, fmt.Errorf("cannot select the window: %w", err)
	}
	defer rows.Close()
	cols := make([]sql.RawBytes, ncols)
	dest := make([]any, len(cols))
	for i := range cols {
		dest[i] = &cols[i]
	}
	n := 0
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return 0, 0, fmt.Errorf("cannot scan the window: %w", err)
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return 0, 0, fmt.Errorf("cannot read the window: %w", err)
	}
	return n, time.Since(start), nil
}

// loadDue reads the window through Store.LoadDue, as the engine does, and discards it.
func (f *windowFixture) loadDue(ctx context.Context) (int, time.Duration, error) {
	start := time.Now()
	n := 0
	err := f.store.LoadDue(ctx, 1, f.horizon(), []model.State{model.StateScheduled, model.StateRetrying},
		func(t *model.Task) error {
			n++
			return nil
		})
	return n, time.Since(start), err
}

// engineLoad is one engine.Start on the fixture.
type engineLoad struct {
	tasks, armed int // tasks held in full (due within the promote lead), entries armed
	took         time.Duration
	rssGrowth    int64 // bytes of RSS the engine added from New to the end of Start
	heapPerTask  float64
}

// startEngine builds an engine on the frozen clock, starts it (which loads the window),
// measures it and stops it, returning the memory it took to the OS.
func (f *windowFixture) startEngine(ctx context.Context) (engineLoad, error) {
	var l engineLoad
	runtime.GC()
	debug.FreeOSMemory()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rss0, err := benchkit.RSS()
	if err != nil {
		return l, err
	}
	// A fake clock never advanced: the engine loads its window and then fires nothing, which
	// is what a load benchmark needs.
	eng, err := engine.New(engine.Config{Store: f.store, Clock: clock.NewFake(f.now), Logger: discardLogger()})
	if err != nil {
		return l, err
	}
	start := time.Now()
	if err := eng.Start(ctx); err != nil {
		return l, err
	}
	l.took = time.Since(start)
	rss1, err := benchkit.RSS()
	if err != nil {
		return l, err
	}
	l.rssGrowth = rss1 - rss0
	l.tasks, l.armed = eng.API().InMemory()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if path := os.Getenv(envHeapProfile); path != "" {
		// What the loaded window holds, by allocation site: go tool pprof -sample_index=inuse_space.
		if err := writeHeapProfile(path); err != nil {
			return l, err
		}
	}
	l.heapPerTask = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(max(l.armed, 1))
	if err := eng.Stop(ctx); err != nil {
		return l, err
	}
	runtime.KeepAlive(eng)
	return l, nil
}

// writeHeapProfile writes the live heap to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("cannot write heap profile: %w", err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		return fmt.Errorf("cannot write heap profile: %w", err)
	}
	return nil
}

func BenchmarkWindowLoad(b *testing.B) {
	n := sizeParam(b, flagSize, envSize, 2e4)
	f := newWindowFixture(b, n)
	var s benchkit.Series
	b.Run("size="+sizeName(n), func(b *testing.B) {
		ctx := context.Background()
		b.ReportAllocs()
		for range b.N {
			sel, selTook, err := f.selectRows(ctx)
			if err != nil {
				b.Fatal(err)
			}
			refs, refsTook, err := f.selectRefs(ctx)
			if err != nil {
				b.Fatal(err)
			}
			dec, decTook, err := f.loadDue(ctx)
			if err != nil {
				b.Fatal(err)
			}
			l, err := f.startEngine(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if sel != f.due || refs != f.due || dec != f.due || l.armed != f.due {
				b.Fatalf("loaded %d rows by SELECT, %d refs, %d by LoadDue, %d tasks armed by the engine; want %d each",
					sel, refs, dec, l.armed, f.due)
			}
			s.Add("SELECT whole rows/s", float64(sel)/selTook.Seconds())
			s.Add("SELECT refs rows/s (ceiling)", float64(refs)/refsTook.Seconds())
			s.Add("LoadDue whole rows/s", float64(dec)/decTook.Seconds())
			s.Add("engine.Start tasks/s", float64(l.armed)/l.took.Seconds())
			s.Add("engine.Start s", l.took.Seconds())
			s.Add("tasks held in full", float64(l.tasks))
			s.Add("engine / SELECT whole rows", selTook.Seconds()/l.took.Seconds())
			s.Add("engine / SELECT refs", refsTook.Seconds()/l.took.Seconds())
			s.Add("RSS increase MB", float64(l.rssGrowth)/(1<<20))
			s.Add("live heap B/task", l.heapPerTask)
		}
		b.ReportMetric(s.Summary("engine.Start tasks/s").Median, "tasks/s")
		b.ReportMetric(s.Summary("SELECT whole rows/s").Median, "select-rows/s")
		b.ReportMetric(s.Summary("engine / SELECT whole rows").Median, "x-select")
		b.ReportMetric(s.Summary("engine / SELECT refs").Median, "x-select-refs")
		b.ReportMetric(s.Summary("RSS increase MB").Median, "rss-MB")
		b.ReportMetric(s.Summary("live heap B/task").Median, "heap-B/task")
	})
	summarize(b, "B2 window load: %d tasks, %d due in the window, %d MiB of tables; %s; load average %s\n%s",
		n, f.due, f.tableBytes>>20, f.server, benchkit.LoadAverage(), s.Table())
}

// TestWindowLoadSmoke runs B2's workload once at a small size and checks that every path
// reads exactly the due half of the table, and that the engine arms each of those tasks.
func TestWindowLoadSmoke(t *testing.T) {
	f := newWindowFixture(t, 2000)
	ctx := context.Background()
	sel, _, err := f.selectRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dec, _, err := f.loadDue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l, err := f.startEngine(ctx)
	if err != nil {
		t.Fatal(err)
	}
	refs, _, err := f.selectRefs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Due times spread over the 5-minute window from 1 s: about 3% fall within the 10 s
	// promote lead and are held in full, the rest as cold references.
	if sel != 1000 || refs != 1000 || dec != 1000 || l.armed != 1000 {
		t.Fatalf("SELECT %d rows, %d refs, LoadDue %d, engine %d armed; want 1000 each", sel, refs, dec, l.armed)
	}
	if l.tasks == 0 || l.tasks > 100 {
		t.Fatalf("engine holds %d of 1000 tasks in full, want the few due within 10 s", l.tasks)
	}
}
