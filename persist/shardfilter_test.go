package persist_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestShardFilter: every scheduling read given a shard filter (persist.WithShards) returns
// exactly the rows of the tasks whose shard (model.ShardOf of the name) is in the set, on
// both stores: the database's CRC32 and the embedded store's agree with Go's.
func TestShardFilter(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := testCtx(t)
		const due = int64(1_700_000_000_000)
		var names []string
		mk := func(name string, def model.TaskDef, rt model.Runtime) *model.Task {
			t.Helper()
			def.Name, def.Group, def.Timezone, def.TimeoutSec = name, "g", "UTC", 60
			def.Callback = model.Callback{Type: model.CallbackHTTP, URL: "http://127.0.0.1:9/run"}
			def.MisfirePolicy = model.MisfireFireOnce
			if def.Trigger == "" {
				def.Trigger = model.TriggerManual
			}
			if err := s.CreateTask(ctx, &def, &rt); err != nil {
				t.Fatal(err)
			}
			got, err := s.GetTask(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, name)
			return got
		}
		var runs []model.Run
		for i := range 48 {
			name := fmt.Sprintf("sf-%d", i)
			switch i % 6 {
			case 0: // due
				mk(name, model.TaskDef{}, model.Runtime{State: model.StateScheduled, NextTriggerTime: due + int64(i)})
			case 1: // running, by its runtime
				mk(name, model.TaskDef{}, model.Runtime{State: model.StateRunning, CurrentTicket: name + "-r"})
			case 2: // an open fire: its run row running while the runtime still says SCHEDULED
				pt := mk(name, model.TaskDef{}, model.Runtime{State: model.StateScheduled, NextTriggerTime: due + int64(i)})
				runs = append(runs, model.Run{Ticket: fmt.Sprintf("%d-%d-1", pt.Def.ID, due+int64(i)), TaskID: pt.Def.ID, TaskName: name,
					Kind: model.RunScheduled, Attempt: 1, ScheduledAt: due + int64(i), DispatchedAt: due + int64(i), Result: model.ResultRunning})
			case 3: // a run-now in flight
				pt := mk(name, model.TaskDef{}, model.Runtime{State: model.StateSuccess})
				runs = append(runs, model.Run{Ticket: name + "-m", TaskID: pt.Def.ID, TaskName: name, Kind: model.RunManual,
					Attempt: 1, ScheduledAt: due, DispatchedAt: due, Result: model.ResultRunning})
			case 4: // an allow_all run in flight
				pt := mk(name, model.TaskDef{OverlapPolicy: model.OverlapAllowAll, Trigger: model.TriggerCron, Cron: "* * * * *"},
					model.Runtime{State: model.StateSuccess})
				runs = append(runs, model.Run{Ticket: name + "-p", TaskID: pt.Def.ID, TaskName: name, Kind: model.RunScheduled,
					Attempt: 1, ScheduledAt: due, DispatchedAt: due, Result: model.ResultRunning})
			case 5: // a dependent of "sf-up"
				mk(name, model.TaskDef{Trigger: model.TriggerDependency, DependsOn: []string{"sf-up"}}, model.Runtime{State: model.StateWaiting})
			}
		}
		if err := s.ApplyBatch(ctx, &persist.Batch{Fires: runs}); err != nil {
			t.Fatal(err)
		}
		reads := func(ctx context.Context) map[string][]string {
			out := map[string][]string{}
			add := func(k, name string) { out[k] = append(out[k], name) }
			check := func(err error) {
				if err != nil {
					t.Fatal(err)
				}
			}
			check(s.LoadDue(ctx, 1, due+1000, []model.State{model.StateScheduled}, func(pt *model.Task) error {
				add("LoadDue", pt.Def.Name)
				return nil
			}))
			ids := map[int64]string{}
			check(s.LoadByState(ctx, []model.State{model.StateScheduled, model.StateRunning}, func(pt *model.Task) error {
				ids[pt.Def.ID] = pt.Def.Name
				if pt.Runtime.State == model.StateRunning {
					add("LoadByState", pt.Def.Name)
				}
				return nil
			}))
			check(s.LoadDueRefs(ctx, 1, due+1000, []model.State{model.StateScheduled}, func(r persist.DueRef) error {
				add("LoadDueRefs", ids[r.TaskID])
				return nil
			}))
			open, err := s.ListOpenFires(ctx, due+1000)
			check(err)
			for _, r := range open {
				add("ListOpenFires", r.TaskName)
			}
			manual, err := s.ListRunningManual(ctx, 0)
			check(err)
			for _, r := range manual {
				add("ListRunningManual", r.TaskName)
			}
			par, err := s.ListOpenParallelRuns(ctx)
			check(err)
			for _, r := range par {
				add("ListOpenParallelRuns", r.TaskName)
			}
			deps, err := s.Dependents(ctx, "sf-up")
			check(err)
			for _, d := range deps {
				add("Dependents", d.Def.Name)
			}
			for k := range out {
				sort.Strings(out[k])
			}
			return out
		}
		all := reads(ctx)
		for _, k := range []string{"LoadDue", "LoadDueRefs", "LoadByState", "ListOpenFires", "ListRunningManual", "ListOpenParallelRuns", "Dependents"} {
			want := 8
			if k == "LoadDue" || k == "LoadDueRefs" {
				want = 16 // the due tasks and those with an open fire
			}
			if len(all[k]) != want {
				t.Fatalf("%s without a filter = %v, want %d tasks", k, all[k], want)
			}
		}
		// Filters: the shards of every other task, one shard, none, and all.
		var half model.ShardSet
		for i, n := range names {
			if i%2 == 0 {
				half.Add(model.ShardOf(n))
			}
		}
		var one model.ShardSet
		one.Add(model.ShardOf(names[0]))
		for _, set := range []model.ShardSet{half, one, {}, model.AllShards()} {
			got := reads(persist.WithShards(ctx, set))
			for k, want := range all {
				want = slices.DeleteFunc(slices.Clone(want), func(n string) bool { return !set.Has(model.ShardOf(n)) })
				if !slices.Equal(got[k], want) {
					t.Errorf("%s with shards %s = %v, want %v", k, set, got[k], want)
				}
			}
		}
	})
}
