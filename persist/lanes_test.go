package persist_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestLanesKeepEachTaskInOrder drives chained transitions of many tasks through four lanes
// concurrently: every chain lands in order (each transition expects the previous one's
// version, so a reordering would conflict), and callbacks of one task fire in order.
func TestLanesKeepEachTaskInOrder(t *testing.T) {
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		ctx := context.Background()
		l, err := persist.NewLanes(s, persist.WriterConfig{}, 4)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Start(ctx); err != nil {
			t.Fatal(err)
		}
		var tasks []*task
		for i := 0; i < 12; i++ {
			tasks = append(tasks, newTask(t, s, fmt.Sprintf("lane-%d", i)))
		}
		const steps = 20
		var wg sync.WaitGroup
		errs := make(chan error, len(tasks)*steps)
		for _, k := range tasks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				last := 0
				var mu sync.Mutex
				for i := 1; i <= steps; i++ {
					g := k.next()
					g.Done = func(err error) {
						mu.Lock()
						defer mu.Unlock()
						if err != nil {
							errs <- fmt.Errorf("%s step %d: %w", k.name, i, err)
						}
						if i != last+1 {
							errs <- fmt.Errorf("%s: callback %d after %d", k.name, i, last)
						}
						last = i
					}
					if err := l.Submit(ctx, g); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		if err := l.Write(ctx, &persist.Group{Actions: []model.Action{{Action: "system", Actor: "test", At: 1}}}); err != nil {
			t.Fatal(err)
		}
		if err := l.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for _, k := range tasks {
			k.checkLanded(t, s)
		}
		if n := l.Pending(); n != 0 {
			t.Errorf("%d groups pending after Stop", n)
		}
	})
}
