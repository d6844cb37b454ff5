package engine

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/protocol"
	"github.com/axe-sched/axe/ratelimit"
	"github.com/axe-sched/axe/wire"
)

// slowServer is a loopback endpoint that holds each call for delay (or until release is
// closed, when set) and records the most calls it held at once. Its tickets are the calls of
// fire times before the server started, the tests' backfill ranges: a task's own schedule
// may fire in real time during a test (an every-minute cron crossing a minute), and that
// call counts in most, as it counts in a concurrency limit, but not in tickets nor in
// backfillMost (a backfill's parallel bounds its own runs).
type slowServer struct {
	*httptest.Server
	start        int64 // ms
	mu           sync.Mutex
	tickets      map[string]int
	now          int
	most         int
	backfillNow  int
	backfillMost int
	delay        time.Duration
	hold         chan struct{}
}

func newSlowServer(t *testing.T, delay time.Duration, hold bool) *slowServer {
	s := &slowServer{tickets: map[string]int{}, delay: delay, start: time.Now().UnixMilli()}
	if hold {
		s.hold = make(chan struct{})
	}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		backfill := !s.ownFire(r.Header.Get("X-Axe-Ticket"))
		if backfill {
			s.tickets[r.Header.Get("X-Axe-Ticket")]++
			s.backfillNow++
			s.backfillMost = max(s.backfillMost, s.backfillNow)
		}
		s.now++
		s.most = max(s.most, s.now)
		hold := s.hold
		s.mu.Unlock()
		if hold != nil {
			select {
			case <-hold:
			case <-r.Context().Done():
			}
		}
		time.Sleep(s.delay)
		s.mu.Lock()
		s.now--
		if backfill {
			s.backfillNow--
		}
		s.mu.Unlock()
		w.WriteHeader(200)
	}))
	t.Cleanup(func() {
		s.unhold()
		s.Close()
	})
	return s
}

// ownFire tells a scheduled ticket (task-fire time-attempt) of a fire time at or after the
// server's start: the task's schedule firing during the test.
func (s *slowServer) ownFire(ticket string) bool {
	parts := strings.Split(ticket, "-")
	if len(parts) != 3 {
		return false
	}
	sched, err := strconv.ParseInt(parts[1], 10, 64)
	return err == nil && sched >= s.start
}

func (s *slowServer) unhold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hold != nil {
		close(s.hold)
		s.hold = nil
	}
}

func (s *slowServer) calls() (total, most int, twice []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, n := range s.tickets {
		total += n
		if n > 1 {
			twice = append(twice, k)
		}
	}
	return total, s.most, twice
}

// cronTask creates a cron task calling url; its own schedule is far from the test's ranges.
func cronTask(t *testing.T, e *Engine, name, expr, tz, url string) {
	t.Helper()
	spec := httpSpec(name, url)
	spec.Cron = expr
	spec.Timezone = tz
	mustCreate(t, e, spec)
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// backfillRuns returns the task's backfill runs from the store.
func backfillRuns(t *testing.T, s persist.Store, e *Engine, name string) []model.Run {
	t.Helper()
	pt, err := s.GetTask(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := s.ListRuns(context.Background(), pt.Def.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []model.Run
	for _, r := range runs {
		if r.Kind == model.RunBackfill {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ScheduledAt < out[j].ScheduledAt })
	return out
}

func waitBackfill(t *testing.T, e *Engine, name string, id int64, status string) *wire.BackfillView {
	t.Helper()
	var v *wire.BackfillView
	waitFor(t, 60*time.Second, "backfill "+status, func() bool {
		var err error
		v, err = e.API().Backfills().Get(context.Background(), name, id)
		if err != nil {
			t.Fatal(err)
		}
		return v.Status == status && v.Running == 0
	})
	return v
}

func TestBackfillRunsTheScheduleFireTimesOnceAcrossDST(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		srv := newSlowServer(t, 0, false)
		e := startEngine(t, s)
		ctx := context.Background()
		berlin, _ := time.LoadLocation("Europe/Berlin")
		cases := []struct {
			name, expr, from, to string
			want                 []time.Time
		}{{
			// Every hour: a pattern over real time; the spring-forward day has 23 hours.
			name: "hourly", expr: "30 * * * *", from: "2026-03-29T00:00:00+01:00", to: "2026-03-29T23:59:00+02:00",
			want: func() []time.Time {
				var w []time.Time
				for x := mustTime(t, "2026-03-28T23:00:00Z"); x.Before(mustTime(t, "2026-03-29T22:00:00Z")); x = x.Add(time.Minute) {
					if x.In(berlin).Minute() == 30 {
						w = append(w, x)
					}
				}
				return w
			}(),
		}, {
			// Fall back: the repeated hour fires twice, 25 fires in the day.
			name: "autumn", expr: "30 * * * *", from: "2026-10-25T00:00:00+02:00", to: "2026-10-25T23:59:00+01:00",
			want: func() []time.Time {
				var w []time.Time
				for x := mustTime(t, "2026-10-24T22:00:00Z"); x.Before(mustTime(t, "2026-10-25T23:00:00Z")); x = x.Add(time.Minute) {
					if x.In(berlin).Minute() == 30 {
						w = append(w, x)
					}
				}
				return w
			}(),
		}, {
			// A fixed wall time inside the spring-forward gap fires at the gap's end.
			name: "nightly", expr: "30 2 * * *", from: "2026-03-28T00:00:00+01:00", to: "2026-03-30T23:00:00+02:00",
			want: []time.Time{mustTime(t, "2026-03-28T02:30:00+01:00"), mustTime(t, "2026-03-29T03:00:00+02:00"),
				mustTime(t, "2026-03-30T02:30:00+02:00")},
		}}
		for _, c := range cases {
			cronTask(t, e, c.name, c.expr, "Europe/Berlin", srv.URL)
			v, err := e.API().Backfills().Create(ctx, c.name, BackfillRequest{From: mustTime(t, c.from), To: mustTime(t, c.to), Parallel: 4}, "test")
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if v.Total != int64(len(c.want)) {
				t.Errorf("%s: total = %d, want %d", c.name, v.Total, len(c.want))
			}
			done := waitBackfill(t, e, c.name, v.ID, model.BackfillDone)
			if done.Succeeded != int64(len(c.want)) || done.Failed != 0 || done.Skipped != 0 || done.Done != done.Total {
				t.Errorf("%s: progress = %+v", c.name, done)
			}
			runs := backfillRuns(t, s, e, c.name)
			var got []time.Time
			for _, r := range runs {
				got = append(got, time.UnixMilli(r.ScheduledAt).UTC())
				if r.Result != model.ResultSuccess || r.Ticket != scheduledTicket(r.TaskID, r.ScheduledAt, 1) {
					t.Errorf("%s: run %+v", c.name, r)
				}
			}
			if !slices.EqualFunc(got, c.want, func(a, b time.Time) bool { return a.Equal(b) }) {
				t.Errorf("%s: scheduled_at = %v\nwant %v", c.name, got, c.want)
			}
		}
		_, _, twice := srv.calls()
		if len(twice) > 0 {
			t.Errorf("tickets called twice: %v", twice)
		}
		names := actionNames(t, e, "hourly")
		if !slices.Contains(names, ActBackfillStart) || !slices.Contains(names, ActBackfillEnd) {
			t.Errorf("actions = %v, want a backfill start and end", names)
		}
	})
}

func TestBackfillParallelismIsNeverExceeded(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		srv := newSlowServer(t, 30*time.Millisecond, false)
		e := startEngine(t, s)
		cronTask(t, e, "minutely", "* * * * *", "UTC", srv.URL)
		from := mustTime(t, "2026-01-01T00:00:00Z")
		v, err := e.API().Backfills().Create(context.Background(), "minutely", BackfillRequest{From: from, To: from.Add(59 * time.Minute), Parallel: 3}, "test")
		if err != nil {
			t.Fatal(err)
		}
		done := waitBackfill(t, e, "minutely", v.ID, model.BackfillDone)
		if done.Total != 60 || done.Succeeded != 60 {
			t.Errorf("progress = %+v", done)
		}
		runs := backfillRuns(t, s, e, "minutely")
		if len(runs) != 60 {
			t.Fatalf("%d runs, want 60", len(runs))
		}
		// Half-open [dispatched_at, ended_at): an end and a start in the same millisecond
		// are a slot handed over.
		type ev struct {
			at    int64
			delta int
		}
		var evs []ev
		for _, r := range runs {
			evs = append(evs, ev{r.DispatchedAt, 1}, ev{r.EndedAt, -1})
		}
		sort.Slice(evs, func(i, j int) bool {
			if evs[i].at != evs[j].at {
				return evs[i].at < evs[j].at
			}
			return evs[i].delta < evs[j].delta
		})
		cur, most := 0, 0
		for _, x := range evs {
			cur += x.delta
			most = max(most, cur)
		}
		if most > 3 {
			t.Errorf("%d runs in flight at once by the run rows, parallel 3", most)
		}
		total, _, twice := srv.calls()
		srv.mu.Lock()
		held := srv.backfillMost
		srv.mu.Unlock()
		if total != 60 || held > 3 || len(twice) > 0 {
			t.Errorf("endpoint: %d backfill calls, %d at once, twice %v", total, held, twice)
		}
	})
}

func TestBackfillIsIdempotent(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		srv := newSlowServer(t, 0, false)
		e := startEngine(t, s)
		ctx := context.Background()
		cronTask(t, e, "q", "*/5 * * * *", "UTC", srv.URL)
		from := mustTime(t, "2026-02-01T00:00:00Z")
		req := BackfillRequest{From: from, To: from.Add(time.Hour), Parallel: 2} // 13 fire times
		a, err := e.API().Backfills().Create(ctx, "q", req, "test")
		if err != nil {
			t.Fatal(err)
		}
		waitBackfill(t, e, "q", a.ID, model.BackfillDone)
		b, err := e.API().Backfills().Create(ctx, "q", req, "test")
		if err != nil {
			t.Fatal(err)
		}
		bv := waitBackfill(t, e, "q", b.ID, model.BackfillDone)
		if bv.Total != 13 || bv.Skipped != 13 || bv.Succeeded != 0 {
			t.Errorf("the same range again: %+v, want all 13 skipped", bv)
		}
		// Overlapping: 00:30..02:00 has 19 fire times, 7 of them run already.
		c, err := e.API().Backfills().Create(ctx, "q", BackfillRequest{From: from.Add(30 * time.Minute), To: from.Add(2 * time.Hour), Parallel: 5}, "test")
		if err != nil {
			t.Fatal(err)
		}
		cv := waitBackfill(t, e, "q", c.ID, model.BackfillDone)
		if cv.Total != 19 || cv.Skipped != 7 || cv.Succeeded != 12 {
			t.Errorf("overlapping range: %+v, want 7 skipped and 12 run", cv)
		}
		total, _, twice := srv.calls()
		if total != 25 || len(twice) > 0 {
			t.Errorf("%d calls (want 25), twice %v", total, twice)
		}
		if runs := backfillRuns(t, s, e, "q"); len(runs) != 25 {
			t.Errorf("%d backfill runs, want 25", len(runs))
		}
		list, err := e.API().Backfills().List(ctx, "q", 0)
		if err != nil || len(list) != 3 || list[0].ID != c.ID {
			t.Errorf("list = %+v, %v", list, err)
		}
	})
}

func TestBackfillCancelStartsNothingMore(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		srv := newSlowServer(t, 0, true)
		e := startEngine(t, s)
		ctx := context.Background()
		cronTask(t, e, "c", "* * * * *", "UTC", srv.URL)
		from := mustTime(t, "2026-01-01T00:00:00Z")
		v, err := e.API().Backfills().Create(ctx, "c", BackfillRequest{From: from, To: from.Add(19 * time.Minute), Parallel: 2}, "test")
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "two runs in flight", func() bool {
			n, _, _ := srv.calls()
			return n == 2
		})
		cv, err := e.API().Backfills().Cancel(ctx, "c", v.ID, "test")
		if err != nil {
			t.Fatal(err)
		}
		if cv.Status != model.BackfillCanceled || cv.Running != 2 {
			t.Errorf("after cancel: %+v", cv)
		}
		srv.unhold()
		done := waitBackfill(t, e, "c", v.ID, model.BackfillCanceled)
		waitSettled(t, e)
		if n, _, _ := srv.calls(); n != 2 || done.Succeeded != 2 || done.Started != 2 {
			t.Errorf("%d calls after cancel, progress %+v; want the 2 in flight finished and no more", n, done)
		}
		if names := actionNames(t, e, "c"); !slices.Contains(names, ActBackfillCancel) {
			t.Errorf("actions = %v", names)
		}
		// The progress is saved beside the runs' writes, not through the writer: once the
		// engine has settled it may still be on its way (seen on a busy box).
		var stored *model.Backfill
		waitFor(t, 10*time.Second, "the canceled backfill's progress stored", func() bool {
			stored, err = s.GetBackfill(ctx, v.ID)
			return err == nil && stored.Status == model.BackfillCanceled && stored.Low > stored.To
		})
		if stored.Succeeded != 2 || stored.Started != 2 {
			t.Errorf("stored = %+v, want the 2 started and succeeded", stored)
		}
	})
}

func TestBackfillRefusesBadInput(t *testing.T) {
	t.Parallel()
	s := persisttest.SQLite(t)
	e := startEngine(t, s)
	ctx := context.Background()
	cronTask(t, e, "ok", "0 * * * *", "UTC", "http://127.0.0.1:1/")
	spec := httpSpec("manual", "http://127.0.0.1:1/")
	spec.Trigger = model.TriggerManual
	mustCreate(t, e, spec)
	from := mustTime(t, "2026-01-01T00:00:00Z")
	cases := []struct {
		task  string
		req   BackfillRequest
		field string
	}{
		{"ok", BackfillRequest{From: from, To: from.Add(-time.Hour), Parallel: 1}, "to"},
		{"ok", BackfillRequest{From: from, To: time.Now().Add(time.Hour), Parallel: 1}, "to"},
		{"ok", BackfillRequest{From: from, To: from.Add(time.Hour), Parallel: 0}, "parallel"},
		{"ok", BackfillRequest{From: from, To: from.Add(time.Hour), Parallel: BackfillParallelMax + 1}, "parallel"},
		{"ok", BackfillRequest{From: from.Add(time.Minute), To: from.Add(30 * time.Minute), Parallel: 1}, "from"},
		{"ok", BackfillRequest{To: from, Parallel: 1}, "from"},
		{"manual", BackfillRequest{From: from, To: from.Add(time.Hour), Parallel: 1}, "name"},
	}
	for _, c := range cases {
		_, err := e.API().Backfills().Create(ctx, c.task, c.req, "test")
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: err = %v, want a field error on %s", c.req, err, c.field)
		}
	}
	if _, err := e.API().Backfills().Create(ctx, "nope", BackfillRequest{From: from, To: from.Add(time.Hour), Parallel: 1}, "test"); !errors.Is(err, ErrTaskNotFound) {
		t.Errorf("unknown task: %v", err)
	}
	if list, _ := e.API().Backfills().List(ctx, "ok", 0); len(list) != 0 {
		t.Errorf("refused requests left %d backfills", len(list))
	}
}

func TestBackfillResumesAfterRestart(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		srv := newSlowServer(t, 20*time.Millisecond, false)
		ctx := context.Background()
		e1, err := New(Config{Store: s, Window: 10 * time.Second, LoadInterval: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := e1.Start(ctx); err != nil {
			t.Fatal(err)
		}
		cronTask(t, e1, "r", "* * * * *", "UTC", srv.URL)
		from := mustTime(t, "2026-01-01T00:00:00Z")
		v, err := e1.API().Backfills().Create(ctx, "r", BackfillRequest{From: from, To: from.Add(119 * time.Minute), Parallel: 4}, "test")
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 20*time.Second, "a part of the backfill", func() bool {
			n, _, _ := srv.calls()
			return n >= 30
		})
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := e1.Stop(sctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		stopped, _, _ := srv.calls()
		if stopped >= 120 {
			t.Skip("the backfill finished before the stop")
		}
		e2 := startEngine(t, s)
		done := waitBackfill(t, e2, "r", v.ID, model.BackfillDone)
		total, _, twice := srv.calls()
		if total != 120 || len(twice) > 0 {
			t.Errorf("%d calls (want 120), twice: %v", total, twice)
		}
		if done.Succeeded != 120 || done.Skipped != 0 || done.Started != 120 {
			t.Errorf("progress after the restart = %+v", done)
		}
		if runs := backfillRuns(t, s, e2, "r"); len(runs) != 120 {
			t.Errorf("%d runs, want 120", len(runs))
		}
	})
}

// TestBackfillLeavesThePendingFireToTheSchedule: a backfill never takes a fire time the
// task's own cycle may still fire (here the fire whose retry is pending, and every later
// one): those are counted skipped, the schedule keeps them, and no fire record of either
// side is refused.
func TestBackfillLeavesThePendingFireToTheSchedule(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		cs := newCallbackServer(t)
		cs.status = func(call) int { return 500 }
		e := startEngine(t, s)
		ctx := context.Background()
		spec := httpSpec("every2", cs.URL)
		spec.Cron = "*/2 * * * * *"
		spec.Timezone = "UTC"
		spec.RetryCount = ptr(1)
		spec.RetryIntervalSec = ptr(3600)
		mustCreate(t, e, spec)
		var pt *model.Task
		waitFor(t, 10*time.Second, "the first fire to fail into RETRYING", func() bool {
			var err error
			pt, err = e.API().GetTask(ctx, "every2")
			return err == nil && pt.Runtime.State == model.StateRetrying
		})
		calls := cs.got("every2")
		first := calls[0].body.ScheduledAt // the fire in retry
		// The range ends just past the fire in retry, not at the clock: the next fire
		// (first + 2 s) is the schedule's while the task stays in memory, and a range up to
		// the clock reaches it on a loaded box. Once the task has left memory mid-retry, it
		// no longer is (core_task.go, retryOf).
		from, to := time.UnixMilli(first).Add(-10*time.Second), time.UnixMilli(first+1)
		v, err := e.API().Backfills().Create(ctx, "every2", BackfillRequest{From: from, To: to, Parallel: 8}, "test")
		if err != nil {
			t.Fatal(err)
		}
		done := waitBackfill(t, e, "every2", v.ID, model.BackfillDone)
		runs := backfillRuns(t, s, e, "every2")
		if len(runs) != 5 {
			t.Errorf("%d backfill runs, want the 5 fire times before the pending one", len(runs))
		}
		for _, r := range runs {
			if r.ScheduledAt >= first {
				t.Errorf("backfill ran %d, at or after the pending fire %d", r.ScheduledAt, first)
			}
		}
		if done.Skipped != done.Total-5 || done.Failed != 5 {
			t.Errorf("progress = %+v; want %d skipped and the 5 run failed (the endpoint answers 500)", done, done.Total-5)
		}
		if slices.Contains(actionNames(t, e, "every2"), ActDuplicateFire) {
			t.Errorf("a fire record was refused: %v", actionNames(t, e, "every2"))
		}
	})
}

// TestBackfillOnAnExecutor: backfill runs of an executor task are offered to the executor of
// its app like any run, and end on the executor's reports; at most parallel are held at
// once, and each fire time is offered once.
func TestBackfillOnAnExecutor(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		var e *Engine
		var mu sync.Mutex
		offered := map[string]int{}
		held, most := 0, 0
		// accept takes one run and reports its success a little later. Only backfill runs
		// count: the task's own schedule fires too when the test spans a tenth minute.
		accept := func(ticket, task, host, kind string) {
			counted := kind == model.RunBackfill
			mu.Lock()
			if counted {
				offered[ticket]++
				held++
				most = max(most, held)
			}
			mu.Unlock()
			go func() {
				time.Sleep(20 * time.Millisecond)
				mu.Lock()
				if counted {
					held--
				}
				mu.Unlock()
				if _, err := e.API().ReportResult(ctx, Report{Ticket: ticket, Task: task, App: "bfapp",
					Address: host, Status: model.ResultSuccess}); err != nil {
					t.Errorf("report %s: %v", ticket, err)
				}
			}()
		}
		exec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case protocol.PathRun:
				var run protocol.Run
				_ = json.NewDecoder(r.Body).Decode(&run)
				accept(run.Ticket, run.Task, r.Host, run.Kind)
				w.WriteHeader(http.StatusAccepted)
				_, _ = w.Write([]byte(`{"accepted":true}`))
			case protocol.PathRuns: // several offers at once, answered one by one
				var batch protocol.RunBatch
				_ = json.NewDecoder(r.Body).Decode(&batch)
				var ans protocol.RunBatchAnswer
				for _, raw := range batch.Runs {
					var run protocol.Run
					_ = json.Unmarshal(raw, &run)
					accept(run.Ticket, run.Task, r.Host, run.Kind)
					ans.Results = append(ans.Results, protocol.RunAnswer{Code: http.StatusAccepted, Body: json.RawMessage(`{"accepted":true}`)})
				}
				_ = json.NewEncoder(w).Encode(ans)
			default:
				w.WriteHeader(http.StatusOK)
			}
		}))
		defer exec.Close()
		e = startEngine(t, s)
		if err := e.API().Executors().Register(ctx, wire.ExecutorRegistration{App: "bfapp", Address: exec.Listener.Addr().String(), Handlers: []string{"job"}}); err != nil {
			t.Fatal(err)
		}
		mustCreate(t, e, &wire.TaskSpec{Name: "onexec", Cron: "*/10 * * * *", Timezone: "UTC",
			Callback: &model.Callback{Type: model.CallbackExecutor, App: "bfapp", Handler: "job"}})
		from := mustTime(t, "2026-05-01T00:00:00Z")
		v, err := e.API().Backfills().Create(ctx, "onexec", BackfillRequest{From: from, To: from.Add(5 * time.Hour), Parallel: 3}, "test")
		if err != nil {
			t.Fatal(err)
		}
		done := waitBackfill(t, e, "onexec", v.ID, model.BackfillDone)
		if done.Total != 31 || done.Succeeded != 31 {
			t.Errorf("progress = %+v", done)
			for _, r := range backfillRuns(t, s, e, "onexec") {
				if r.Result != model.ResultSuccess {
					t.Logf("run %s %s: %s", r.Ticket, r.Result, r.Error)
				}
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(offered) != 31 || most > 3 {
			t.Errorf("%d tickets offered, %d held at once (parallel 3)", len(offered), most)
		}
		for k, n := range offered {
			if n != 1 {
				t.Errorf("ticket %s offered %d times", k, n)
			}
		}
	})
}

// TestBackfillCountsInConcurrencyLimits: a backfill's runs count in its task's group limit:
// with the group limited to 2, a backfill of parallelism 5 never has more than 2 in flight.
func TestBackfillCountsInConcurrencyLimits(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		srv := newSlowServer(t, 30*time.Millisecond, false)
		e := startEngine(t, s)
		ctx := context.Background()
		if _, err := e.API().SetConcurrencyLimit(ctx, model.LimitGroup, "narrow", 2, "test"); err != nil {
			t.Fatal(err)
		}
		spec := httpSpec("limited", srv.URL)
		spec.Cron, spec.Timezone, spec.Group = "* * * * *", "UTC", "narrow"
		mustCreate(t, e, spec)
		from := mustTime(t, "2026-03-01T00:00:00Z")
		v, err := e.API().Backfills().Create(ctx, "limited", BackfillRequest{From: from, To: from.Add(29 * time.Minute), Parallel: 5}, "test")
		if err != nil {
			t.Fatal(err)
		}
		done := waitBackfill(t, e, "limited", v.ID, model.BackfillDone)
		total, most, twice := srv.calls()
		if done.Succeeded != 30 || total != 30 || most > 2 || len(twice) > 0 {
			t.Errorf("progress %+v; %d calls, %d at once (group limit 2), twice %v", done, total, most, twice)
		}
	})
}

// TestBackfillKeepsToTheRateLimit: a backfill run takes its downstream's rate token as a fire
// does. 20 fire times at parallel 20 on a downstream limited to 10/s (burst 1) would all start
// within one pass without it; with it, no second of their dispatch times holds more than the
// bucket allows (burst + rate, and one more for a pass's dispatch time being read before its
// token is taken).
func TestBackfillKeepsToTheRateLimit(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		srv := newSlowServer(t, 0, false)
		host := strings.TrimPrefix(srv.URL, "http://")
		e := startEngine(t, s, func(c *Config) {
			c.RateLimit.PerKey = map[string]ratelimit.Limit{host: {Rate: 10, Burst: 1}}
		})
		ctx := context.Background()
		cronTask(t, e, "paced", "* * * * *", "UTC", srv.URL)
		from := mustTime(t, "2026-03-01T00:00:00Z")
		v, err := e.API().Backfills().Create(ctx, "paced", BackfillRequest{From: from, To: from.Add(19 * time.Minute), Parallel: 20}, "test")
		if err != nil {
			t.Fatal(err)
		}
		done := waitBackfill(t, e, "paced", v.ID, model.BackfillDone)
		runs := backfillRuns(t, s, e, "paced")
		if done.Succeeded != 20 || len(runs) != 20 {
			t.Fatalf("progress %+v, %d backfill runs; want 20 succeeded", done, len(runs))
		}
		at := make([]int64, len(runs))
		for i, r := range runs {
			at[i] = r.DispatchedAt
		}
		slices.Sort(at)
		const most = 1 + 10 + 1
		for i := range at {
			n := 0
			for j := i; j < len(at) && at[j] < at[i]+1000; j++ {
				n++
			}
			if n > most {
				t.Fatalf("%d backfill runs dispatched within a second from %d, the rate allows %d: %v", n, at[i], most, at)
			}
		}
	})
}

// staleRunReads is a store whose RunsByTicket answers what it read, but only once every
// run it read as running among watch has ended in the store: the answer is stale, as a
// read is when a run ends between it and its use.
type staleRunReads struct {
	persist.Store
	t     *testing.T
	watch map[string]bool
	stale atomic.Int32 // answers given with a watched run read as running and ended since
}

func (s *staleRunReads) RunsByTicket(ctx context.Context, tickets []string) ([]model.Run, error) {
	runs, err := s.Store.RunsByTicket(ctx, tickets)
	if err != nil {
		return runs, err
	}
	for _, r := range runs {
		if !s.watch[r.Ticket] || r.Result != model.ResultRunning {
			continue
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			now, err := s.Store.GetRun(ctx, r.Ticket)
			if err == nil && now.Result != model.ResultRunning {
				s.stale.Add(1)
				break
			}
			if time.Now().After(deadline) {
				s.t.Errorf("run %s still running 20 s after the cursor read it", r.Ticket)
				return runs, nil
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return runs, nil
}

// TestBackfillCountsARunEndedBehindTheCursorsRead: after a crash, a backfill's runs in
// flight past its saved cursor (started after its progress was last saved) are re-attached
// and recorded lost; their ends are counted when the cursor meets their records. When a run
// ends after the cursor read its record as running, it is counted all the same: the
// backfill ends with every fire time counted, none twice.
func TestBackfillCountsARunEndedBehindTheCursorsRead(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		srv := newSlowServer(t, 0, false)
		def := model.TaskDef{Name: "gap", Group: "default", Trigger: model.TriggerCron, Cron: "* * * * *", Timezone: "UTC",
			TimeoutSec: 600, Callback: model.Callback{Type: model.CallbackHTTP, URL: srv.URL}}
		if err := s.CreateTask(ctx, &def, &model.Runtime{State: model.StateScheduled, NextTriggerTime: time.Now().Add(time.Hour).UnixMilli(), Version: 1}); err != nil {
			t.Fatal(err)
		}
		from := mustTime(t, "2026-01-01T00:00:00Z").UnixMilli()
		bf := model.Backfill{TaskID: def.ID, TaskName: def.Name, From: from, To: from + 9*60_000, Parallel: 4,
			Cron: def.Cron, Timezone: "UTC", Total: 10, Next: from, Low: from, Status: model.BackfillRunning,
			Actor: "test", CreatedAt: time.Now().UnixMilli(), UpdatedAt: time.Now().UnixMilli()}
		if err := s.CreateBackfill(ctx, &bf); err != nil {
			t.Fatal(err)
		}
		// Two runs in flight at the crash, past the saved cursor.
		watch := map[string]bool{}
		var open []model.Run
		for _, x := range []int64{from, from + 60_000} {
			r := model.Run{Ticket: scheduledTicket(def.ID, x, 1), TaskID: def.ID, TaskName: def.Name, Kind: model.RunBackfill,
				Attempt: 1, ScheduledAt: x, DispatchedAt: time.Now().Add(-time.Second).UnixMilli(), Result: model.ResultRunning,
				Detail: backfillDetail(bf.ID)}
			open = append(open, r)
			watch[r.Ticket] = true
		}
		if err := s.ApplyBatch(ctx, &persist.Batch{Fires: open}); err != nil {
			t.Fatal(err)
		}
		ss := &staleRunReads{Store: s, t: t, watch: watch}
		e := startEngine(t, ss)
		done := waitBackfill(t, e, "gap", bf.ID, model.BackfillDone)
		for _, o := range open {
			if r, err := s.GetRun(ctx, o.Ticket); err != nil || r.Result != model.ResultLost {
				t.Errorf("run %s after the restart: %+v, %v; want lost", o.Ticket, r, err)
			}
		}
		if total, _, twice := srv.calls(); total != 8 || len(twice) > 0 {
			t.Errorf("%d calls (want 8, the fire times without a run), twice %v", total, twice)
		}
		if done.Started != 10 || done.Succeeded != 8 || done.Failed != 2 || done.Skipped != 0 {
			t.Errorf("progress = %+v; want 10 started, 8 succeeded, 2 failed (the lost runs)", done)
		}
		t.Logf("the cursor's read was stale for %d of the 2 runs", ss.stale.Load())
	})
}
