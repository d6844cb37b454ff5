package persist_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// replyLost is the real store whose call number at commits its batch and then reports a
// transient error, as a connection broken after COMMIT was sent does (or a Galera node killed
// once its write set was replicated): the commit landed, the writer cannot know.
type replyLost struct {
	persist.Store
	at    int64
	calls atomic.Int64
}

func (s *replyLost) ApplyBatch(ctx context.Context, b *persist.Batch) error {
	err := s.Store.ApplyBatch(ctx, b)
	if s.calls.Add(1) == s.at && err == nil {
		return fmt.Errorf("cannot commit batch: %w", errTransient)
	}
	return err
}

// fireGroup is the group of one fire as the engine submits it: the fire record alone.
func fireGroup(k *task, seq int) *persist.Group {
	at := int64(1_800_000_000_000) + int64(seq)
	return &persist.Group{Fires: []model.Run{{
		Ticket: fmt.Sprintf("%d-%d-1", k.rt.TaskID, at), TaskID: k.rt.TaskID, TaskName: k.name,
		Kind: model.RunScheduled, Attempt: 1, ScheduledAt: at, DispatchedAt: at + 3, Result: model.ResultRunning,
	}}}
}

// TestWriterFindsUnknownCommitLanded: a batch whose commit landed but was reported failed
// succeeds, every group of it, once the writer has found its fire record in the store; it is
// not committed again (which would refuse its own fire records and fail runs never sent).
// A batch whose commit failed before reaching the database is found not to have landed and
// is committed again. A batch without a fire record cannot be told landed: its retry
// conflicts, as before.
func TestWriterFindsUnknownCommitLanded(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := testCtx(t)
		cfg := persist.WriterConfig{MaxBatchRows: 64, MaxDelay: 50 * time.Millisecond, RetryMin: time.Millisecond, RetryMax: 2 * time.Millisecond}

		// Landed, reported failed: three fires and a transition in one batch.
		k := newTask(t, s, "landed")
		rs := &replyLost{Store: s, at: 1}
		w := newWriter(t, rs, cfg, false)
		out := newOutcomes(4)
		groups := []*persist.Group{fireGroup(k, 1), fireGroup(k, 2), k.next(), fireGroup(k, 3)}
		for i, g := range groups {
			g.Done = out.done(i)
			submit(t, w, g)
		}
		landed := counterValue(t, "axe_writer_unknown_commits_landed_total")
		if err := w.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		for i, o := range out.wait(t, len(groups)) {
			if o.seq != i || o.err != nil {
				t.Errorf("Done call %d = group %d with %v, want group %d with nil", i, o.seq, o.err, i)
			}
		}
		if got := rs.calls.Load(); got != 1 {
			t.Errorf("ApplyBatch called %d times, want 1: a landed batch is not committed again", got)
		}
		if d := counterValue(t, "axe_writer_unknown_commits_landed_total") - landed; d != 1 {
			t.Errorf("axe_writer_unknown_commits_landed_total grew by %d, want 1", d)
		}
		if got := groups[2].Transitions[0].Runtime.Version; got != k.rt.Version {
			t.Errorf("the landed transition's version is %d, want %d", got, k.rt.Version)
		}
		k.checkLanded(t, s)
		for _, i := range []int{0, 1, 3} {
			want := groups[i].Fires[0]
			got, err := s.GetRun(ctx, want.Ticket)
			if err != nil || got.DispatchedAt != want.DispatchedAt || got.Result != model.ResultRunning {
				t.Errorf("fire %s: %+v, %v; want its record", want.Ticket, got, err)
			}
		}

		// Failed before reaching the database: not landed, so committed again, and it lands.
		k2 := newTask(t, s, "notlanded")
		fs := newFaultyStore(s, 1)
		w2 := newWriter(t, fs, cfg, false)
		out2 := newOutcomes(2)
		g2 := []*persist.Group{fireGroup(k2, 1), k2.next()}
		for i, g := range g2 {
			g.Done = out2.done(i)
			submit(t, w2, g)
		}
		if err := w2.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		for i, o := range out2.wait(t, len(g2)) {
			if o.seq != i || o.err != nil {
				t.Errorf("Done call %d = group %d with %v, want group %d with nil", i, o.seq, o.err, i)
			}
		}
		if got := fs.calls.Load(); got != 2 {
			t.Errorf("ApplyBatch called %d times, want 2 (one failure, one commit)", got)
		}
		k2.checkLanded(t, s)
		checkRun(t, s, g2[0].Fires[0].Ticket, true)

		// No fire record: the retry of a landed batch meets its own transition.
		k3 := newTask(t, s, "nofire")
		rs3 := &replyLost{Store: s, at: 1}
		w3 := newWriter(t, rs3, cfg, false)
		out3 := newOutcomes(1)
		g3 := k3.next()
		g3.Done = out3.done(0)
		submit(t, w3, g3)
		if err := w3.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		var ce *persist.ConflictError
		if o := out3.wait(t, 1)[0]; !errors.As(o.err, &ce) {
			t.Errorf("a landed batch without a fire record, retried: %v, want a *ConflictError", o.err)
		}
		k3.checkLanded(t, s) // it landed all the same
	})
}
