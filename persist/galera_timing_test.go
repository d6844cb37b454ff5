package persist_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// BenchmarkApplyBatchFenced measures the fence's cost on one MariaDB or MySQL server: the
// group commit of BenchmarkApplyBatch on an HA primary's fenced store, with the fence of one
// server (a read of the fence row under a shared lock, fence=share) and with the fence a
// Galera node gets (an update of that row, fence=write), here forced on a server without
// wsrep. A store on one server always fences the first way; the second is measured here to
// tell its cost apart from Galera's own (replication, certification).
func BenchmarkApplyBatchFenced(b *testing.B) {
	for _, n := range []int{10, 500} {
		for _, fence := range []string{"share", "write"} {
			b.Run(fmt.Sprintf("batch=%d/fence=%s", n, fence), func(b *testing.B) {
				s := persisttest.MySQL(b)
				persist.SetGalera(s, fence == "write")
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				l, ok, err := s.TakeLease(ctx, "bench", "bench", time.Hour)
				if err != nil || !ok {
					b.Fatalf("TakeLease = %+v, %v, %v", l, ok, err)
				}
				fs, err := persist.Fenced(s, "bench", l.Epoch, nil)
				if err != nil {
					b.Fatal(err)
				}
				benchmarkApplyBatch(b, fs, n)
			})
		}
	}
}
