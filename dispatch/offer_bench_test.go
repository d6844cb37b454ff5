package dispatch

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/protocol"
)

// BenchmarkOfferBurst offers b.N runs at once to one SDK executor in this process (a fasthttp
// server that accepts every run, alone or in RunsPath batches), each from a pool worker as
// the engine offers a run, and reports the CPU time of the process a run (cpu-ns/op, the
// executor's share included) and the allocations a run. "held": the worker waits in Offer
// until its run's batch is answered (the engine before OfferFunc); "func": the worker queues
// the run with OfferFunc and is free at once, the answer handled on the sender.
//
//	go test -run '^$' -bench OfferBurst -benchmem -benchtime 30000x -count 3 ./dispatch/
func BenchmarkOfferBurst(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	accepted := []byte(`{"accepted":true}`)
	srv := &fasthttp.Server{Handler: func(rc *fasthttp.RequestCtx) {
		if !strings.HasSuffix(string(rc.Path()), RunsPath) {
			rc.SetStatusCode(fasthttp.StatusAccepted)
			rc.SetBody(accepted)
			return
		}
		var batch protocol.RunBatch
		if err := json.Unmarshal(rc.PostBody(), &batch); err != nil {
			rc.SetStatusCode(fasthttp.StatusBadRequest)
			return
		}
		ans := protocol.RunBatchAnswer{Results: make([]protocol.RunAnswer, len(batch.Runs))}
		for i := range ans.Results {
			ans.Results[i] = protocol.RunAnswer{Code: fasthttp.StatusAccepted, Body: accepted}
		}
		out, _ := json.Marshal(ans)
		rc.SetBody(out)
	}}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Shutdown() }()
	body := []byte(`{"task":"t","handler":"h","group":"g","ticket":"t-1","attempt":1,"scheduled_at":1}`)
	for _, mode := range []string{"held", "func"} {
		b.Run(mode, func(b *testing.B) {
			d, err := New(Config{})
			if err != nil {
				b.Fatal(err)
			}
			if err := d.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			defer func() { _ = d.Stop(context.Background()) }()
			x := &Executor{App: "a", Address: ln.Addr().String()}
			reqs := make([]Request, b.N)
			for i := range reqs {
				reqs[i] = Request{Task: "t", Ticket: "t-1", Attempt: 1, Body: body, Deadline: time.Now().Add(time.Hour)}
			}
			var (
				wg     sync.WaitGroup
				mu     sync.Mutex
				failed int
			)
			answered := func(o Outcome) {
				if o.Err != nil || o.Status != fasthttp.StatusAccepted {
					mu.Lock()
					failed++
					mu.Unlock()
				}
				wg.Done()
			}
			b.ReportAllocs()
			cpu0 := processCPU()
			b.ResetTimer()
			wg.Add(b.N)
			for i := range reqs {
				req := &reqs[i]
				var err error
				if mode == "held" {
					err = d.Go(func() { answered(d.Offer(x, req)) })
				} else {
					err = d.Go(func() { d.OfferFunc(x, req, answered) })
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
			if failed > 0 {
				b.Fatalf("%d of %d offers failed", failed, b.N)
			}
		})
	}
}
