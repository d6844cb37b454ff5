package executor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"

	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/executor"
)

// Example runs one task end to end: the executor registers with a scheduler, the scheduler
// dispatches a run, the executor accepts it at once and reports the handler's result later by
// callback.
func Example() {
	schedURL, callbacks, stopScheduler := exampleScheduler()
	defer stopScheduler()

	exe, err := executor.New(executor.Config{
		App:        "billing",
		Schedulers: []string{schedURL},
		Logger:     slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	exe.Handle("invoice", func(ctx context.Context, run executor.Run) (executor.Result, error) {
		var params struct {
			Customer string `json:"customer"`
		}
		if err := json.Unmarshal(run.Params, &params); err != nil {
			return executor.Result{}, fmt.Errorf("cannot read params: %w", err)
		}
		return executor.Result{Output: "invoiced " + params.Customer}, nil
	})
	ctx := context.Background()
	if err := exe.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer exe.Stop(ctx)

	// What the scheduler sends to the executor's advertised address.
	status, body := exampleDispatch(exe.Addr(), `{"ticket":"t-1","task":"monthly-invoice","handler":"invoice","deadline":0,`+
		`"attempt":1,"params":{"customer":"acme"}}`)
	fmt.Println(status, body)
	fmt.Println(<-callbacks)
	// Output:
	// 202 {"accepted":true}
	// callback t-1: success "invoiced acme"
}

// Example_duplicateTicket shows the ticket as an idempotency key: the scheduler delivers the
// same ticket twice (say its first response was lost), the handler runs once, and the second
// delivery gets the earlier result back along with a second callback.
func Example_duplicateTicket() {
	schedURL, callbacks, stopScheduler := exampleScheduler()
	defer stopScheduler()

	exe, err := executor.New(executor.Config{
		App:        "billing",
		Schedulers: []string{schedURL},
		Logger:     slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	var charges atomic.Int32
	exe.Handle("charge", func(ctx context.Context, run executor.Run) (executor.Result, error) {
		n := charges.Add(1)
		return executor.Result{Output: fmt.Sprintf("charge #%d", n)}, nil
	})
	ctx := context.Background()
	if err := exe.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer exe.Stop(ctx)

	run := `{"deadline":0,"ticket":"t-7","task":"card-charge","handler":"charge","attempt":1}`
	fmt.Println(exampleDispatch(exe.Addr(), run))
	fmt.Println(<-callbacks)
	fmt.Println(exampleDispatch(exe.Addr(), run))
	fmt.Println(<-callbacks)
	fmt.Println("handler calls:", charges.Load())
	// Output:
	// 202 {"accepted":true}
	// callback t-7: success "charge #1"
	// 200 {"duplicate":true,"status":"success","error":""}
	// callback t-7: success "charge #1"
	// handler calls: 1
}

// exampleScheduler starts a stand-in for the axe scheduler on loopback: it accepts the
// registration and heartbeats and hands every result callback to the caller.
func exampleScheduler() (url string, callbacks <-chan string, stop func()) {
	results := make(chan string, 4)
	srv := &fasthttp.Server{Handler: func(rc *fasthttp.RequestCtx) {
		rc.SetContentType("application/json")
		switch string(rc.Path()) {
		case "/api/v1/executors/register":
			rc.SetBodyString(`{"heartbeat_interval_ms":10000,"lost_after_ms":30000,"version":2}`)
		case "/api/v1/executors/heartbeat":
			rc.SetBodyString(`{}`)
		case "/api/v1/callback":
			var cb struct{ Ticket, Status, Output string }
			if err := json.Unmarshal(rc.PostBody(), &cb); err != nil {
				rc.SetStatusCode(fasthttp.StatusBadRequest)
				return
			}
			results <- fmt.Sprintf("callback %s: %s %q", cb.Ticket, cb.Status, cb.Output)
			rc.SetBodyString(`{"ok":true}`)
		default:
			rc.SetStatusCode(fasthttp.StatusNotFound)
		}
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return "http://" + ln.Addr().String(), results, func() {
		_ = srv.Shutdown()
		<-done
	}
}

// exampleDispatch posts a run body to an executor as the scheduler does.
func exampleDispatch(addr, body string) (int, string) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + addr + "/axe/run")
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.SetBodyString(body)
	if err := fasthttp.Do(req, resp); err != nil {
		return 0, err.Error()
	}
	return resp.StatusCode(), string(resp.Body())
}
