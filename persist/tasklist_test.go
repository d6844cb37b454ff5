package persist_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestListTasksStatePlans pages state-filtered lists in every order on both stores, a rare
// state (read from the runtime table first), a common one (the order's index walked) and
// an empty one, and checks each against the same list sorted here.
func TestListTasksStatePlans(t *testing.T) {
	t.Parallel()
	t.Run(persist.SchemeSQLite, func(t *testing.T) { listStatePlans(t, persisttest.SQLite(t)) })
	t.Run(persist.SchemeMySQL, func(t *testing.T) { listStatePlans(t, persisttest.MySQL(t)) })
}

func listStatePlans(t *testing.T, s persist.Store) {
	ctx := context.Background()
	const n = 60
	var all []model.Task
	for k := range n {
		// Created out of name order, so that id order and name order differ.
		i := (k * 37) % n
		st := model.StateWaiting
		switch {
		case i%15 == 4:
			st = model.StatePaused // 4 of 60: under a tenth
		case i%2 == 1:
			st = model.StateScheduled // 30 of 60
		}
		def := &model.TaskDef{Name: fmt.Sprintf("job-%03d", i), Group: []string{"a", "b", "c"}[i%3],
			Trigger: model.TriggerCron, Cron: "0 * * * *", DependsMode: "all", Timezone: "UTC",
			TimeoutSec: 60, Priority: 2, Callback: model.Callback{Type: model.CallbackHTTP, URL: "http://x/run"},
			Params: json.RawMessage(`{}`), MisfirePolicy: model.MisfireFireOnce, CreatedAt: 1, UpdatedAt: 1}
		rt := &model.Runtime{State: st, NextTriggerTime: int64(1000 + i%7), Version: 1} // ties on next fire
		if err := s.CreateTask(ctx, def, rt); err != nil {
			t.Fatal(err)
		}
		all = append(all, model.Task{Def: *def, Runtime: *rt})
	}
	key := func(order string, x *model.Task) string {
		switch order {
		case persist.OrderName:
			return x.Def.Name
		case persist.OrderGroup:
			return x.Def.Group
		case persist.OrderNext:
			return strconv.FormatInt(x.Runtime.NextTriggerTime, 10)
		}
		return ""
	}
	less := func(order string) func(a, b model.Task) int {
		return func(a, b model.Task) int {
			switch order {
			case persist.OrderName:
				return cmp.Compare(a.Def.Name, b.Def.Name)
			case persist.OrderGroup:
				return cmp.Or(cmp.Compare(a.Def.Group, b.Def.Group), cmp.Compare(a.Def.ID, b.Def.ID))
			case persist.OrderNext:
				return cmp.Or(cmp.Compare(a.Runtime.NextTriggerTime, b.Runtime.NextTriggerTime), cmp.Compare(a.Def.ID, b.Def.ID))
			}
			return cmp.Compare(a.Def.ID, b.Def.ID)
		}
	}
	for _, c := range []struct {
		state model.State
		plan  string
	}{{model.StatePaused, "runtime"}, {model.StateKilled, "runtime"}, {model.StateScheduled, "join"}, {model.StateWaiting, "join"}} {
		for _, group := range []string{"", "b"} {
			for _, order := range []string{persist.OrderID, persist.OrderName, persist.OrderGroup, persist.OrderNext} {
				f := persist.TaskFilter{State: c.state, Group: group, Order: order, Limit: 3}
				if plan, err := persist.ListPlan(ctx, s, f); err != nil || plan != c.plan {
					t.Errorf("%s: plan %q, %v; want %q", c.state, plan, err, c.plan)
				}
				var want []string
				ordered := slices.Clone(all)
				slices.SortFunc(ordered, less(order))
				for _, x := range ordered {
					if x.Runtime.State == c.state && (group == "" || x.Def.Group == group) {
						want = append(want, x.Def.Name)
					}
				}
				var got []string
				for pages := 0; ; pages++ {
					list, err := s.ListTasks(ctx, f)
					if err != nil {
						t.Fatalf("ListTasks(%+v): %v", f, err)
					}
					for _, x := range list {
						if x.Runtime.State != c.state {
							t.Fatalf("ListTasks(%+v) returned %s in %s", f, x.Def.Name, x.Runtime.State)
						}
						got = append(got, x.Def.Name)
					}
					if len(list) < f.Limit || pages > n {
						break
					}
					last := &list[len(list)-1]
					f.After, f.AfterID = key(order, last), last.Def.ID
				}
				if !slices.Equal(got, want) {
					t.Errorf("state %s group %q sort %s: got %v, want %v", c.state, group, order, got, want)
				}
			}
		}
	}
}
