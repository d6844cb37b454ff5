package persisttest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// browseTests are the conformance tests of persist.Browser: the console's listings.
var browseTests = []struct {
	name string
	fn   func(t *testing.T, ctx context.Context, s persist.Store)
}{
	{"Browse/TaskFindFilters", testBrowseTaskFilters},
	{"Browse/RunsPaged", testBrowseRuns},
	{"Browse/ActionsPaged", testBrowseActions},
	{"Browse/MinuteStats", testBrowseMinutes},
}

func browser(t *testing.T, s persist.Store) persist.Browser {
	t.Helper()
	b, ok := s.(persist.Browser)
	if !ok {
		t.Fatalf("%T does not implement persist.Browser", s)
	}
	return b
}

// testBrowseTaskFilters: the last result and newest failure written by a transition are
// read back, and the find filters (search, last result, failed since, ids) and the bounded
// count agree with a filter applied in Go to every task.
func testBrowseTaskFilters(t *testing.T, ctx context.Context, s persist.Store) {
	b := browser(t, s)
	results := []string{"", model.ResultSuccess, model.ResultFailed, model.ResultTimeout}
	groups := []string{"alpha", "beta", "gamma"}
	var all []*model.Task
	for i := range 60 {
		def := newDef(fmt.Sprintf("job-%02d", i))
		def.Group = groups[i%3]
		if i%7 == 0 {
			def.Callback = model.Callback{Type: model.CallbackHTTP, URL: fmt.Sprintf("http://hooks.example/needle-%d", i)}
		}
		task := create(t, ctx, s, def, newRuntime(model.StateScheduled, int64(1000+i)))
		rt := task.Runtime
		rt.LastResult = results[i%4]
		if rt.LastResult == model.ResultFailed || rt.LastResult == model.ResultTimeout {
			rt.LastFailureAt = int64(10_000 + 100*i)
		}
		if err := s.ApplyBatch(ctx, &persist.Batch{Transitions: []persist.Transition{{ExpectVersion: rt.Version, Runtime: rt}}}); err != nil {
			t.Fatalf("ApplyBatch: %v", err)
		}
		rt.Version++
		task.Runtime = rt
		all = append(all, task)
	}
	got := getByID(t, ctx, s, all[2].Def.ID).Runtime
	if got.LastResult != model.ResultFailed || got.LastFailureAt != 10_200 {
		t.Fatalf("runtime read back %q at %d, want failed at 10200", got.LastResult, got.LastFailureAt)
	}
	ids := []int64{all[3].Def.ID, all[10].Def.ID, all[41].Def.ID}
	cases := []struct {
		f    persist.TaskFilter
		want func(*model.Task) bool
	}{
		{persist.TaskFilter{}, func(*model.Task) bool { return true }},
		{persist.TaskFilter{Search: "needle"}, func(x *model.Task) bool { return strings.Contains(x.Def.Callback.URL, "needle") }},
		{persist.TaskFilter{Search: "ETA"}, func(x *model.Task) bool { return x.Def.Group == "beta" }}, // without case
		{persist.TaskFilter{Search: "eta"}, func(x *model.Task) bool { return x.Def.Group == "beta" }},
		// Several words: each must be found, in any of the fields.
		{persist.TaskFilter{Search: "  JOB-1  Beta "}, func(x *model.Task) bool { return strings.HasPrefix(x.Def.Name, "job-1") && x.Def.Group == "beta" }},
		{persist.TaskFilter{Search: "needle gamma"}, func(x *model.Task) bool {
			return strings.Contains(x.Def.Callback.URL, "needle") && x.Def.Group == "gamma"
		}},
		{persist.TaskFilter{Search: "needle nowhere"}, func(*model.Task) bool { return false }},
		{persist.TaskFilter{Search: "b-1"}, func(x *model.Task) bool { return strings.Contains(x.Def.Name, "b-1") }},
		{persist.TaskFilter{Search: "%"}, func(*model.Task) bool { return false }},
		{persist.TaskFilter{LastResult: model.ResultFailed}, func(x *model.Task) bool { return x.Runtime.LastResult == model.ResultFailed }},
		{persist.TaskFilter{LastResult: model.ResultTimeout, Group: "beta"}, func(x *model.Task) bool {
			return x.Runtime.LastResult == model.ResultTimeout && x.Def.Group == "beta"
		}},
		{persist.TaskFilter{FailedSince: 14_000}, func(x *model.Task) bool { return x.Runtime.LastFailureAt >= 14_000 }},
		{persist.TaskFilter{FailedSince: 14_000, State: model.StateScheduled}, func(x *model.Task) bool { return x.Runtime.LastFailureAt >= 14_000 }},
		{persist.TaskFilter{IDs: ids}, func(x *model.Task) bool { return slices.Contains(ids, x.Def.ID) }},
		{persist.TaskFilter{IDs: []int64{}}, func(*model.Task) bool { return false }},
		{persist.TaskFilter{IDs: ids, NamePrefix: "job-4"}, func(x *model.Task) bool { return x.Def.ID == all[41].Def.ID }},
	}
	for _, tc := range cases {
		var want []string
		for _, x := range all {
			if tc.want(x) {
				want = append(want, x.Def.Name)
			}
		}
		slices.Sort(want)
		f := tc.f
		f.Order = persist.OrderName
		var seen []string
		for {
			f.Limit = 7
			page, err := s.ListTasks(ctx, f)
			if err != nil {
				t.Fatalf("ListTasks(%+v): %v", tc.f, err)
			}
			seen = append(seen, names(page)...)
			if len(page) < f.Limit {
				break
			}
			f.After = page[len(page)-1].Def.Name
		}
		equal(t, fmt.Sprintf("pages of %+v", tc.f), seen, want)
		n, err := b.CountMatching(ctx, tc.f, 1000)
		if err != nil {
			t.Fatalf("CountMatching(%+v): %v", tc.f, err)
		}
		if n != int64(len(want)) {
			t.Fatalf("CountMatching(%+v) = %d, want %d", tc.f, n, len(want))
		}
		if len(want) > 3 {
			if n, err := b.CountMatching(ctx, tc.f, 3); err != nil || n != 4 {
				t.Fatalf("CountMatching(%+v, bound 3) = %d, %v; want 4 (the bound and one)", tc.f, n, err)
			}
		}
	}
}

// testBrowseRuns: pages of runs across tasks and of one task, filtered by result, group
// and time, come newest first, each run once, as the same filter applied in Go to every
// run says; an open run-now instance is among them; the counts agree.
func testBrowseRuns(t *testing.T, ctx context.Context, s persist.Store) {
	b := browser(t, s)
	a := create(t, ctx, s, newDef("runs-a"), newRuntime(model.StateScheduled, 1))
	defB := newDef("runs-b")
	defB.Group = "other"
	bt := create(t, ctx, s, defB, newRuntime(model.StateScheduled, 1))
	rng := rand.New(rand.NewPCG(7, 31))
	results := []string{model.ResultSuccess, model.ResultSuccess, model.ResultSuccess, model.ResultFailed, model.ResultTimeout, model.ResultRunning}
	var runs []model.Run
	for i := range 230 {
		task := a
		if i%3 == 0 {
			task = bt
		}
		// Times repeat, so the ticket breaks ties across pages.
		r := newRun(task, fmt.Sprintf("t-%03d", rng.IntN(1000)*1000+i), int64(5000+10*(i/2)), results[rng.IntN(len(results))])
		if i%17 == 0 {
			r.Kind = model.RunManual
			r.Result = model.ResultRunning
		}
		runs = append(runs, r)
	}
	if err := s.ApplyBatch(ctx, &persist.Batch{Runs: runs}); err != nil {
		t.Fatalf("ApplyBatch: %v", err)
	}
	groupOf := map[int64]string{a.Def.ID: "default", bt.Def.ID: "other"}
	cases := []persist.RunFilter{
		{},
		{TaskID: bt.Def.ID},
		{Results: []string{model.ResultFailed, model.ResultTimeout}},
		{Results: []string{model.ResultRunning}},
		{Group: "other", Results: []string{model.ResultSuccess}},
		{From: 5300, To: 5900},
		{TaskID: a.Def.ID, Results: []string{model.ResultFailed}, From: 5200},
		{Group: "nobody"},
	}
	for _, f := range cases {
		var want []string
		sorted := slices.Clone(runs)
		slices.SortFunc(sorted, func(x, y model.Run) int {
			if x.ScheduledAt != y.ScheduledAt {
				return int(y.ScheduledAt - x.ScheduledAt)
			}
			return strings.Compare(y.Ticket, x.Ticket)
		})
		for _, r := range sorted {
			if (f.TaskID == 0 || r.TaskID == f.TaskID) && (f.Group == "" || groupOf[r.TaskID] == f.Group) &&
				(len(f.Results) == 0 || slices.Contains(f.Results, r.Result)) &&
				(f.From == 0 || r.ScheduledAt >= f.From) && (f.To == 0 || r.ScheduledAt < f.To) {
				want = append(want, r.Ticket)
			}
		}
		for _, scanMax := range []int{0, 7} {
			checkRunPages(t, ctx, b, f, scanMax, want)
		}
		n, err := b.CountRuns(ctx, f, 1000)
		if err != nil || n != int64(len(want)) {
			t.Fatalf("CountRuns(%+v) = %d, %v; want %d", f, n, err, len(want))
		}
		if len(want) > 5 {
			if n, err := b.CountRuns(ctx, f, 5); err != nil || n != 6 {
				t.Fatalf("CountRuns(%+v, bound 5) = %d, %v; want 6", f, n, err)
			}
		}
	}
}

// checkRunPages pages through f, 9 runs a page, a filtered page examining at most scanMax
// runs (0: the default), and checks that the pages list want, each once, in order, and that
// a page that stopped short says it examined scanMax.
func checkRunPages(t *testing.T, ctx context.Context, b persist.Browser, f persist.RunFilter, scanMax int, want []string) {
	t.Helper()
	{
		var got []string
		pf := f
		pf.Limit = 9
		pf.ScanMax = scanMax
		for range 200 {
			page, err := b.ListRunsPage(ctx, pf)
			if err != nil {
				t.Fatalf("ListRunsPage(%+v): %v", pf, err)
			}
			for _, r := range page.Runs {
				got = append(got, r.Ticket)
			}
			if scanMax > 0 && len(page.Runs) < pf.Limit && page.More && page.Scanned != scanMax {
				t.Fatalf("%+v: a short page with more to come examined %d runs, want the bound %d", pf, page.Scanned, scanMax)
			}
			if !page.More {
				break
			}
			pf.BeforeAt, pf.BeforeTicket = page.NextAt, page.NextTicket
		}
		equal(t, fmt.Sprintf("pages of %+v (scan %d)", f, scanMax), got, want)
	}
}

// testBrowseActions: a task's actions come in pages before a time, newest first, of the
// kinds asked for.
func testBrowseActions(t *testing.T, ctx context.Context, s persist.Store) {
	b := browser(t, s)
	task := create(t, ctx, s, newDef("acts"), newRuntime(model.StateScheduled, 1))
	other := create(t, ctx, s, newDef("acts-other"), newRuntime(model.StateScheduled, 1))
	kinds := []string{"pause", "resume", "retry"}
	var acts []model.Action
	for i := range 40 {
		acts = append(acts, newAction(task, "", kinds[i%3], "", "", int64(100+i)))
		acts = append(acts, newAction(other, "", "pause", "", "", int64(100+i)))
	}
	if err := s.ApplyBatch(ctx, &persist.Batch{Actions: acts}); err != nil {
		t.Fatalf("ApplyBatch: %v", err)
	}
	page, err := b.ListActionsPage(ctx, persist.ActionFilter{TaskID: task.Def.ID, BeforeAt: 120, Actions: []string{"pause", "retry"}, Limit: 5})
	if err != nil {
		t.Fatalf("ListActionsPage: %v", err)
	}
	var got []string
	for _, a := range page {
		got = append(got, fmt.Sprintf("%s@%d", a.Action, a.At))
	}
	var want []string
	for i := 19; i >= 0 && len(want) < 5; i-- {
		if k := kinds[i%3]; k != "resume" {
			want = append(want, fmt.Sprintf("%s@%d", k, 100+i))
		}
	}
	equal(t, "actions before 120 of pause and retry", got, want)

	// Counts by kind: every kind of the task's records, or of its newest few.
	counts, err := b.CountActionKinds(ctx, task.Def.ID, 0)
	if err != nil {
		t.Fatalf("CountActionKinds: %v", err)
	}
	equal(t, "counts by kind", counts, map[string]int64{"pause": 14, "resume": 13, "retry": 13})
	if counts, err = b.CountActionKinds(ctx, task.Def.ID, 4); err != nil {
		t.Fatalf("CountActionKinds(4): %v", err)
	}
	// The newest four: i = 39 (pause), 38 (retry), 37 (resume), 36 (pause).
	equal(t, "counts of the newest 4", counts, map[string]int64{"pause": 2, "resume": 1, "retry": 1})
	if counts, err = b.CountActionKinds(ctx, 0, 0); err != nil || len(counts) != 0 {
		t.Fatalf("CountActionKinds(no task) = %v, %v; want none", counts, err)
	}
}

// testBrowseMinutes: minute rows add up per node, are summed across nodes when read, and
// the old ones go.
func testBrowseMinutes(t *testing.T, ctx context.Context, s persist.Store) {
	b := browser(t, s)
	const m = 60_000
	write := func(rows []persist.MinuteStat, drop int64) {
		t.Helper()
		if err := b.AddMinuteStats(ctx, rows, drop); err != nil {
			t.Fatalf("AddMinuteStats: %v", err)
		}
	}
	write([]persist.MinuteStat{
		{Minute: 10 * m, Node: "n1", Fires: 5, Failures: 1, LateSumMS: 50, LateCount: 5},
		{Minute: 11 * m, Node: "n1", Fires: 3},
	}, 0)
	write([]persist.MinuteStat{
		{Minute: 10 * m, Node: "n2", Fires: 7, Failures: 2, LateSumMS: 70, LateCount: 7},
		{Minute: 10 * m, Node: "n1", Fires: 1, LateSumMS: 4, LateCount: 1}, // a restart within the minute adds
		{Minute: 12 * m, Node: "n2", Fires: 2},
	}, 0)
	got, err := b.MinuteStats(ctx, 10*m, 12*m)
	if err != nil {
		t.Fatalf("MinuteStats: %v", err)
	}
	equal(t, "minutes 10 and 11", got, []persist.MinuteStat{
		{Minute: 10 * m, Fires: 13, Failures: 3, LateSumMS: 124, LateCount: 13},
		{Minute: 11 * m, Fires: 3},
	})
	write(nil, 0)
	write([]persist.MinuteStat{{Minute: 13 * m, Node: "n1", Fires: 1}}, 11*m)
	got, err = b.MinuteStats(ctx, 0, 100*m)
	if err != nil {
		t.Fatalf("MinuteStats: %v", err)
	}
	equal(t, "after dropping the minutes before 11", got, []persist.MinuteStat{
		{Minute: 11 * m, Fires: 3}, {Minute: 12 * m, Fires: 2}, {Minute: 13 * m, Fires: 1},
	})
}
