package dispatch

import (
	"context"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// BenchmarkSendBurst sends b.N HTTP callbacks at once to one fasthttp endpoint in this
// process, as a burst of one-shot tasks does, and reports the dispatcher's allocations a
// send (allocs/op, B/op) and the process's time a send (ns/op, the endpoint's share
// included) and its CPU time a send (cpu-ns/op, which the machine's other load does not
// inflate as much as it does the elapsed time). It uses only the dispatcher's public API, so the same file measures an older
// build:
//
//	go test -run '^$' -bench SendBurst -benchmem -benchtime 50000x -count 5 ./dispatch/
func BenchmarkSendBurst(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(rc *fasthttp.RequestCtx) { rc.SetStatusCode(fasthttp.StatusOK) }}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Shutdown() }()
	d, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = d.Stop(context.Background()) }()
	url := "http://" + ln.Addr().String() + "/fire"
	body := []byte(`{"task":"t","group":"g","ticket":"t-1","attempt":1,"scheduled_at":1}`)
	reqs := make([]Request, b.N)
	for i := range reqs {
		reqs[i] = Request{URL: url, Task: "t", Ticket: "t-1", Attempt: 1, Body: body,
			Deadline: time.Now().Add(time.Hour)}
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed int
	)
	done := func(o Outcome) {
		if !o.OK() {
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
		if err := d.Send(&reqs[i], done); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	if failed > 0 {
		b.Fatalf("%d of %d sends failed", failed, b.N)
	}
}

// processCPU is this process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
