package persist_test

import (
	"errors"
	"testing"
	"time"

	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// TestWriterStalledWhileCommitsFail: while the store keeps failing, Stalled names the run of
// failures (its start, its count and the last error) and the held group is not lost; once a
// commit lands, Stalled is nil again.
func TestWriterStalledWhileCommitsFail(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, s persist.Store) {
		k := newTask(t, s, "stall")
		fs := newFaultyStore(s, 4)
		w := newWriter(t, fs, persist.WriterConfig{RetryMin: 40 * time.Millisecond, RetryMax: 40 * time.Millisecond}, true)
		if st := w.Stalled(); st != nil {
			t.Fatalf("Stalled() = %+v before any commit, want nil", st)
		}
		began := time.Now()
		done := make(chan error, 1)
		g := k.next()
		g.Done = func(err error) { done <- err }
		submit(t, w, g)

		<-fs.failed
		deadline := time.Now().Add(testTimeout)
		var st *persist.Stall
		for st = w.Stalled(); st == nil || st.Attempts < 2; st = w.Stalled() {
			if time.Now().After(deadline) {
				t.Fatalf("Stalled() = %+v after failed commits, want a run of at least 2", st)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if !errors.Is(st.Err, errTransient) {
			t.Errorf("Stalled().Err = %v, want the store's error %v", st.Err, errTransient)
		}
		if st.Since.Before(began) || st.Since.After(time.Now()) {
			t.Errorf("Stalled().Since = %s, want between the submit (%s) and now", st.Since, began)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Done(%v) after the store recovered, want nil", err)
			}
		case <-time.After(testTimeout):
			t.Fatal("the held group never landed after the store recovered")
		}
		if st := w.Stalled(); st != nil {
			t.Errorf("Stalled() = %+v after a commit landed, want nil", st)
		}
		k.checkLanded(t, s)
	})
}
