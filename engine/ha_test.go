package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// casBypass is a faulty store for one engine: it rewrites every transition of a batch to
// expect the version the store holds, so the runtime CAS never refuses it. With the lease
// check off (no epoch), only the fire record can keep its engine from dispatching a fire
// the other engine dispatched already.
type casBypass struct {
	persist.Store
}

func (s casBypass) ApplyBatch(ctx context.Context, b *persist.Batch) error {
	next := map[int64]int64{}
	for i := range b.Transitions {
		id := b.Transitions[i].Runtime.TaskID
		v, ok := next[id]
		if !ok {
			pt, err := s.GetTaskByID(ctx, id)
			if err != nil {
				return err
			}
			v = pt.Runtime.Version
		}
		b.Transitions[i].ExpectVersion = v
		next[id] = v + 1
	}
	return s.Store.ApplyBatch(ctx, b)
}

// lagClock is the real clock behind by lag: its engine fires every fire lag after the other.
type lagClock struct{ lag time.Duration }

func (c lagClock) Now() time.Time { return time.Now().Add(-c.lag) }

// TestFireRecordStopsWhatTheCASLetThrough runs two engines on one database, the second with
// its CAS bypassed, its clock behind and no lease: it fires every fire of an every-second
// task again, from a stale copy, after the first engine dispatched it. Only the fire record
// stands between the two dispatches; each (task, fire time, attempt) must reach the
// endpoint exactly once, and every refusal must be counted and recorded (R8.5).
func TestFireRecordStopsWhatTheCASLetThrough(t *testing.T) {
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		cs := newCallbackServer(t)
		a := startEngine(t, s, func(c *Config) { c.NodeID = "a" })
		spec := httpSpec("contended", cs.URL)
		spec.Cron = "* * * * * *"
		mustCreate(t, a, spec)
		suppressed := duplicateFires.Get()
		startEngine(t, casBypass{s}, func(c *Config) {
			c.NodeID = "b"
			c.Clock = lagClock{1500 * time.Millisecond}
		})
		fires := func() int {
			seen := map[int64]bool{}
			for _, c := range cs.got("contended") {
				seen[c.body.ScheduledAt] = true
			}
			return len(seen)
		}
		waitFor(t, 15*time.Second, "four fires", func() bool { return fires() >= 4 })
		// The second engine tries each fire 1.5 s after the first dispatched it.
		time.Sleep(2 * time.Second)
		calls := cs.got("contended")
		id := mustID(t, a)
		seen := map[string]int{}
		for _, c := range calls {
			key := fmt.Sprintf("%d/%d", c.body.ScheduledAt, c.body.Attempt)
			seen[key]++
			if seen[key] > 1 {
				t.Errorf("fire %s dispatched %d times", key, seen[key])
			}
			if c.ticket != scheduledTicket(id, c.body.ScheduledAt, c.body.Attempt) {
				t.Errorf("call with ticket %s for fire %s", c.ticket, key)
			}
		}
		// After a refusal the second engine reloads the task, which may be RUNNING then and
		// is armed again only by a later load: it contends for some fires, not all.
		n := duplicateFires.Get() - suppressed
		t.Logf("%d distinct fires dispatched, %d second tries suppressed by the fire record", len(seen), n)
		if n < 1 {
			t.Errorf("no fire suppressed: the second engine did not contend, so the test proved nothing")
		}
		acts := actionNames(t, a, "contended")
		if !slices.Contains(acts, ActDuplicateFire) {
			t.Errorf("no %s action among %v", ActDuplicateFire, acts)
		}
	})
}

func mustID(t *testing.T, e *Engine) int64 {
	t.Helper()
	pt, err := e.GetTask(context.Background(), "contended")
	if err != nil {
		t.Fatal(err)
	}
	return pt.Def.ID
}
