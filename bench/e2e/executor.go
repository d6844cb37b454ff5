package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/axe-sched/axe/bench/internal/benchkit"
	"github.com/axe-sched/axe/executor"
)

// The benchmark's executor app: tasks name it in their callback.
const (
	benchApp     = "bench"
	benchRawApp  = "bench-raw"
	benchHandler = "noop"
)

// executorPackage is the tiny main that runs ExecutorMain; Run builds it with the go tool
// unless Config.ExecutorCommand says how to start an executor.
const executorPackage = "github.com/axe-sched/axe/bench/e2e/internal/benchexec"

// executorReady is the line an executor process prints once it serves: the addresses of
// its two executors.
type executorReady struct {
	Addr    string `json:"addr"`
	RawAddr string `json:"raw_addr"`
	// HTTPAddr is the process's plain HTTP receiver: the endpoint of the tasks of
	// Config.Callback CallbackHTTP, and of the raw rate beside them.
	HTTPAddr string `json:"http_addr"`
}

// ExecutorMain is the benchmark's executor process. It runs two SDK executors with a no-op
// handler on loopback:
//
//   - "bench", registered with the scheduler at -scheduler: it serves the benchmark's tasks;
//   - "bench-raw", whose scheduler is a sink inside this process that acknowledges every
//     registration, heartbeat and result: Run posts runs to it straight over fasthttp to
//     measure the raw request rate of the same executor code in the same process, with
//     nothing scheduled or recorded.
//
// and a plain fasthttp receiver that answers every POST with 200 and an empty body: the
// endpoint of HTTP-callback tasks (Config.Callback CallbackHTTP) and of their raw rate.
//
// It prints one JSON line {"addr":…,"raw_addr":…,"http_addr":…} to stdout once all serve, and stops when
// stdin reaches EOF (the parent closed it or died) or ctx ends. A command that runs an
// executor for Config.ExecutorCommand only needs to call it with its arguments.
func ExecutorMain(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("axe-bench-executor", flag.ContinueOnError)
	scheduler := fs.String("scheduler", "", "base URL of the axe scheduler, e.g. http://127.0.0.1:7070")
	pool := fs.Int("pool", ExecutorPoolSizeDefault, "handlers running at once")
	queue := fs.Int("queue", ExecutorQueueSizeDefault, "accepted runs waiting for a handler")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the process's whole life to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *scheduler == "" {
		return errors.New("-scheduler is required")
	}
	// Warnings only: the SDK logs every finished run at Info.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	if *cpuprofile != "" {
		stop, err := startCPUProfile(*cpuprofile)
		if err != nil {
			return err
		}
		defer stop()
	}
	sink, err := startSink()
	if err != nil {
		return err
	}
	defer sink.close()
	receiver, err := startReceiver()
	if err != nil {
		return err
	}
	defer receiver.close()

	noop := func(context.Context, executor.Run) (executor.Result, error) { return executor.Result{}, nil }
	var exes []*executor.Executor
	for _, c := range []struct{ app, scheduler string }{{benchApp, *scheduler}, {benchRawApp, sink.url}} {
		exe, err := executor.New(executor.Config{
			App: c.app, Schedulers: []string{c.scheduler}, PoolSize: *pool, QueueSize: *queue,
			// Remember as many tickets as a large burst holds, so the de-dup cache does not
			// churn; tickets are short.
			DedupSize: 1 << 20, Logger: log,
			// The process starts before the API server serves (HTTP-callback tasks name its
			// receiver in the fixture the engine loads): registration is retried each beat.
			HeartbeatInterval: time.Second,
		})
		if err != nil {
			return err
		}
		exe.Handle(benchHandler, noop)
		if err := exe.Start(ctx); err != nil {
			return err
		}
		exes = append(exes, exe)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, exe := range exes {
			if err := exe.Stop(stopCtx); err != nil {
				log.Warn("cannot stop executor", "err", err)
			}
		}
	}()
	line, _ := json.Marshal(executorReady{Addr: exes[0].Addr(), RawAddr: exes[1].Addr(), HTTPAddr: receiver.ln.Addr().String()})
	if _, err := fmt.Fprintf(stdout, "%s\n", line); err != nil {
		return err
	}

	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		close(eof)
	}()
	select {
	case <-eof:
	case <-ctx.Done():
	}
	return nil
}

// sink stands in for the scheduler of the raw executor: it acknowledges everything.
type sink struct {
	ln     net.Listener
	srv    *fasthttp.Server
	url    string
	served chan struct{}
}

// ackItem acknowledges one result of a batch.
const ackItem = `{"status":200,"ok":true}`

func startSink() (*sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("cannot listen for the raw executor's scheduler sink: %w", err)
	}
	s := &sink{ln: ln, url: "http://" + ln.Addr().String(), served: make(chan struct{})}
	s.srv = &fasthttp.Server{Handler: func(rc *fasthttp.RequestCtx) {
		rc.SetContentType("application/json")
		switch path := string(rc.Path()); {
		case strings.HasSuffix(path, "/register"):
			rc.SetBodyString(`{"heartbeat_interval_ms":10000,"lost_after_ms":30000}`)
		case strings.HasSuffix(path, "/callback/batch"):
			// One acknowledgement per result. Each result has exactly one "ticket" key (a
			// quote inside a value is escaped), so counting them counts the results without
			// decoding the batch.
			n := bytes.Count(rc.PostBody(), []byte(`"ticket":`))
			body := make([]byte, 0, 16+len(ackItem)*n)
			body = append(body, `{"results":[`...)
			for i := range n {
				if i > 0 {
					body = append(body, ',')
				}
				body = append(body, ackItem...)
			}
			rc.SetBody(append(body, `]}`...))
		default:
			rc.SetBodyString(`{"ok":true}`)
		}
	}}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// startReceiver starts the HTTP-callback receiver: 200 and no body for every request, as
// cheap an endpoint as fasthttp serves.
func startReceiver() (*sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("cannot listen for HTTP callbacks: %w", err)
	}
	s := &sink{ln: ln, url: "http://" + ln.Addr().String() + receiverPath, served: make(chan struct{})}
	s.srv = &fasthttp.Server{Handler: func(rc *fasthttp.RequestCtx) { rc.SetStatusCode(fasthttp.StatusOK) }}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// receiverPath is the path HTTP-callback tasks post to.
const receiverPath = "/fire"

func (s *sink) close() {
	_ = s.srv.Shutdown()
	_ = s.ln.Close() // in case Serve had not registered it yet when Shutdown ran
	<-s.served
}

// executorProc is one executor process started by Run.
type executorProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	ready  executorReady
	stderr *tailBuffer
	exited chan struct{}
}

// buildExecutor builds the executor main into dir and returns the command that runs it.
func buildExecutor(ctx context.Context, dir string) ([]string, error) {
	bin := filepath.Join(dir, "axe-bench-executor")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, executorPackage).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("cannot build the executor (set Config.ExecutorCommand when the go tool or the source is not at hand): %w: %s", err, out)
	}
	return []string{bin}, nil
}

// startExecutor starts one executor process registered with the scheduler at url and waits
// for its ready line.
func startExecutor(ctx context.Context, command []string, scheduler, cpuprofile string) (*executorProc, error) {
	args := append(command[1:len(command):len(command)], "-scheduler", scheduler)
	if cpuprofile != "" {
		args = append(args, "-cpuprofile", cpuprofile)
	}
	cmd := exec.Command(command[0], args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("cannot start executor: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("cannot start executor: %w", err)
	}
	p := &executorProc{cmd: cmd, stdin: stdin, stderr: &tailBuffer{max: 8 << 10}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("cannot start executor %q: %w", command[0], err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	lines := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		line, _ := r.ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, r)
	}()
	select {
	case line := <-lines:
		if err := json.Unmarshal([]byte(line), &p.ready); err != nil || p.ready.Addr == "" {
			p.stop()
			return nil, fmt.Errorf("executor did not start (%q): %s", strings.TrimSpace(line), p.stderr)
		}
		return p, nil
	case <-time.After(30 * time.Second):
		p.stop()
		return nil, fmt.Errorf("executor not ready after 30s: %s", p.stderr)
	case <-ctx.Done():
		p.stop()
		return nil, ctx.Err()
	}
}

// cpu is the CPU time the process has used so far.
func (p *executorProc) cpu() time.Duration {
	d, err := benchkit.ProcessCPU(p.cmd.Process.Pid)
	if err != nil {
		return 0
	}
	return d
}

// stop closes the process's stdin, which makes it stop, and kills it if it has not exited
// after a while.
func (p *executorProc) stop() {
	_ = p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// tailBuffer keeps the last max bytes written to it: an executor's stderr, for errors.
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(b)
	if over := t.buf.Len() - t.max; over > 0 {
		t.buf.Next(over)
	}
	return len(b), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(t.buf.String())
}

// startCPUProfile profiles this process's CPU into file until the returned func is called.
// startProfiles starts the CPU profile <dir>/<name>.pprof and writes the heap's allocation
// counts to <name>-allocs-start.pprof; the returned func stops the CPU profile and writes
// <name>-allocs-end.pprof, so that
//
//	go tool pprof -sample_index=alloc_space -base <name>-allocs-start.pprof <name>-allocs-end.pprof
//
// shows what was allocated in between (the garbage the collector's share of the CPU
// profile is spent on).
func startProfiles(dir, name string) (func(), error) {
	if err := writeAllocs(filepath.Join(dir, name+"-allocs-start.pprof")); err != nil {
		return nil, err
	}
	stop, err := startCPUProfile(filepath.Join(dir, name+".pprof"))
	if err != nil {
		return nil, err
	}
	return func() {
		stop()
		_ = writeAllocs(filepath.Join(dir, name+"-allocs-end.pprof"))
	}, nil
}

func writeAllocs(file string) error {
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("cannot create the allocation profile: %w", err)
	}
	defer f.Close()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		return fmt.Errorf("cannot write the allocation profile: %w", err)
	}
	return nil
}

func startCPUProfile(file string) (func(), error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, fmt.Errorf("cannot create the CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("cannot start the CPU profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}
