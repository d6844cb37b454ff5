package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
	"github.com/axe-sched/axe/wire"
)

// TestGroupResumeResumesOnlyWhatItsPausePaused: a group's resume resumes the tasks its
// pause paused (and those created paused, as an import leaves them) and leaves, named with their origins and notes, the tasks paused on their
// own (before the group's pause, or after it), so an incident's pause survives a group's
// maintenance window. Each origin is durable: read back from the store.
func TestGroupResumeResumesOnlyWhatItsPausePaused(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		cs := newCallbackServer(t)
		e := startEngine(t, s)
		for _, n := range []string{"a1", "a2", "a3", "a4", "a5", "b1"} {
			spec := httpSpec(n, cs.URL)
			spec.Cron = "0 0 0 1 1 ?" // new year only: nothing fires during the test
			spec.Group = "g"
			if n == "b1" {
				spec.Group = "h"
			}
			if n == "a5" {
				spec.Paused = ptr(true) // created paused, as an import leaves its tasks
			}
			mustCreate(t, e, spec)
		}
		if _, err := e.API().Pause(ctx, "a2", "INC-4411", "oncall"); err != nil {
			t.Fatal(err)
		}
		res, err := e.API().PauseGroup(ctx, "g", "deploy 7", "ops")
		if err != nil {
			t.Fatal(err)
		}
		if res.Changed != 3 || res.AlreadyPaused != 2 {
			t.Fatalf("group pause = %+v; want 3 paused, 2 paused already", res)
		}
		if _, err := e.API().PauseGroup(ctx, "h", "", "ops"); err != nil {
			t.Fatal(err)
		}
		// a3 paused by the group, then paused on its own: the pause is now its own.
		if _, err := e.API().Pause(ctx, "a3", "keep until vendor fix", "oncall"); err != nil {
			t.Fatal(err)
		}
		want := map[string][2]string{
			"a1": {"group:g", "deploy 7"}, "a2": {"task", "INC-4411"}, "a3": {"task", "keep until vendor fix"},
			"a4": {"group:g", "deploy 7"}, "a5": {"create", ""}, "b1": {"group:h", ""},
		}
		for name, w := range want {
			pt, err := s.GetTask(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if !pt.Def.Paused || pt.Runtime.PausedBy != w[0] || pt.Runtime.Note != w[1] {
				t.Errorf("%s in the store: paused %v by %q note %q; want by %q note %q", name, pt.Def.Paused, pt.Runtime.PausedBy, pt.Runtime.Note, w[0], w[1])
			}
		}

		res, err = e.API().ResumeGroup(ctx, "g", "deploy done", "ops")
		if err != nil {
			t.Fatal(err)
		}
		sort.Slice(res.LeftPaused, func(i, j int) bool { return res.LeftPaused[i].Name < res.LeftPaused[j].Name })
		wantLeft := []wire.PausedTask{{Name: "a2", PausedBy: "task", Note: "INC-4411"}, {Name: "a3", PausedBy: "task", Note: "keep until vendor fix"}}
		if res.Changed != 3 || res.LeftPausedCount != 2 || len(res.LeftPaused) != 2 || res.LeftPaused[0] != wantLeft[0] || res.LeftPaused[1] != wantLeft[1] {
			t.Fatalf("group resume = %+v; want 3 resumed (a1, a4, and a5 created paused) and left %+v", res, wantLeft)
		}
		for name, paused := range map[string]bool{"a1": false, "a4": false, "a5": false, "a2": true, "a3": true, "b1": true} {
			pt, err := s.GetTask(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if pt.Def.Paused != paused || (pt.Runtime.State == model.StatePaused) != paused {
				t.Errorf("%s after the group's resume: paused %v state %s; want paused %v", name, pt.Def.Paused, pt.Runtime.State, paused)
			}
			if !paused && (pt.Runtime.PausedBy != "" || pt.Runtime.Note != "") {
				t.Errorf("%s resumed but keeps origin %q note %q", name, pt.Runtime.PausedBy, pt.Runtime.Note)
			}
		}
		if pt, _ := s.GetTask(ctx, "a2"); pt == nil || pt.Runtime.Note != "INC-4411" {
			t.Errorf("a2's note after the group's resume = %+v", pt)
		}
		// A second resume finds nothing of the group's own; a task's own resume still works.
		if res, err = e.API().ResumeGroup(ctx, "g", "", "ops"); err != nil || res.Changed != 0 || res.LeftPausedCount != 2 {
			t.Errorf("second group resume = %+v, %v", res, err)
		}
		if _, err := e.API().Resume(ctx, "a2", "INC-4411 closed", "oncall"); err != nil {
			t.Fatal(err)
		}
		if pt, _ := s.GetTask(ctx, "a2"); pt == nil || pt.Def.Paused || pt.Runtime.PausedBy != "" {
			t.Errorf("a2 after its own resume = %+v", pt)
		}
		if _, err := e.API().PauseGroup(ctx, "", "", "ops"); err == nil {
			t.Error("a group pause without a group was accepted")
		}
	})
}

// TestGroupPauseOnShardedEngines: each of two engines scheduling half the shards pauses and
// resumes the group's tasks of its own shards, whatever the order the store lists the group
// in; a task of a shard moving between nodes (draining here) is left alone, counted, and the
// answer says so with model.ErrShardNotHeld beside what was done; once the shard is settled the call
// made again does the rest.
func TestGroupPauseOnShardedEngines(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		cs := newCallbackServer(t)
		a, b := startEngine(t, s, sharded), startEngine(t, s, sharded)
		takeFor(t, s, a, "a", shardRange(0, 127), time.Minute)
		takeFor(t, s, b, "b", shardRange(128, 255), time.Minute)
		mine := map[*Engine][]string{a: namesIn("grp", 0, 127, 6), b: namesIn("grp", 128, 255, 6)}
		// Created interleaved, so that the store lists the group with both halves mixed.
		for i := range 6 {
			for _, e := range []*Engine{a, b} {
				spec := httpSpec(mine[e][i], cs.URL)
				spec.Trigger, spec.Group = model.TriggerManual, "g"
				mustCreate(t, e, spec)
			}
		}
		for _, e := range []*Engine{a, b} {
			res, err := e.API().PauseGroup(ctx, "g", "deploy", "ops")
			if err != nil || res.Changed != 6 || res.AlreadyPaused != 0 {
				t.Fatalf("group pause on one engine = %+v, %v; want its 6 tasks", res, err)
			}
		}
		for _, names := range mine {
			for _, n := range names {
				if pt, err := s.GetTask(ctx, n); err != nil || !pt.Def.Paused || pt.Runtime.PausedBy != "group:g" {
					t.Errorf("%s after both pauses = %+v, %v", n, pt, err)
				}
			}
		}
		// One of b's shards starts moving away.
		moving := model.ShardOf(mine[b][0])
		b.shards[moving].phase.Store(shardDraining)
		res, err := b.API().ResumeGroup(ctx, "g", "", "ops")
		inMoving := 0
		for _, n := range mine[b] {
			if model.ShardOf(n) == moving {
				inMoving++
			}
		}
		if !errors.Is(err, model.ErrShardNotHeld) || !strings.Contains(err.Error(), fmt.Sprintf("%d task(s)", inMoving)) || res.Changed != 6-inMoving {
			t.Fatalf("group resume with a shard moving = %+v, %v; want %d resumed and %d named as moving", res, err, 6-inMoving, inMoving)
		}
		b.shards[moving].phase.Store(shardReady)
		if res, err = b.API().ResumeGroup(ctx, "g", "", "ops"); err != nil || res.Changed != inMoving {
			t.Fatalf("group resume made again = %+v, %v; want the %d left", res, err, inMoving)
		}
		if res, err = a.API().ResumeGroup(ctx, "g", "", "ops"); err != nil || res.Changed != 6 {
			t.Fatalf("group resume on the other engine = %+v, %v", res, err)
		}
	})
}
