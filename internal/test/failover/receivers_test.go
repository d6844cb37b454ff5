package failover

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/axe-sched/axe/executor"
)

// target is the HTTP callback endpoint of the load's HTTP tasks. It records every request it
// receives, answers 200 after the number of milliseconds in the query parameter ms, and never
// de-duplicates: a duplicate dispatch shows as two receipts.
type target struct {
	srv *httptest.Server

	mu       sync.Mutex
	receipts []Receipt
}

func newTarget(t *testing.T) *target {
	t.Helper()
	tg := &target{}
	tg.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			ScheduledAt int64 `json:"scheduled_at"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		attempt, _ := strconv.Atoi(r.Header.Get("X-Axe-Attempt"))
		epoch, _ := strconv.ParseInt(r.Header.Get("X-Axe-Epoch"), 10, 64)
		tg.mu.Lock()
		tg.receipts = append(tg.receipts, Receipt{
			Task: r.Header.Get("X-Axe-Task"), Ticket: r.Header.Get("X-Axe-Ticket"), Attempt: attempt,
			ScheduledAt: body.ScheduledAt, Epoch: epoch, At: time.Now(), Via: "http",
		})
		tg.mu.Unlock()
		if ms, err := strconv.Atoi(r.URL.Query().Get("ms")); err == nil {
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
			case <-r.Context().Done():
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(tg.srv.Close)
	return tg
}

func (tg *target) all() []Receipt {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return append([]Receipt(nil), tg.receipts...)
}

// The executor process. The test binary re-executes itself with envExecutor set; it then runs
// one SDK executor of app failoverApp whose handler prints a JSON receipt line to stdout as
// it starts each run, sleeps the run's params.sleep_ms and succeeds. It prints "ready ADDR"
// once it serves, and stops gracefully on SIGTERM or when stdin closes.
const (
	failoverApp     = "failover"
	failoverHandler = "work"
	envSchedulers   = "AXE_FAILOVER_SCHEDULERS"
)

// receiptLine is one line of the executor process's log.
type receiptLine struct {
	Task        string `json:"task"`
	Ticket      string `json:"ticket"`
	Attempt     int    `json:"attempt"`
	ScheduledAt int64  `json:"scheduled_at"`
	Epoch       int64  `json:"epoch"`
	AtNS        int64  `json:"at_ns"`
}

func executorMain() int {
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var outMu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	emit := func(line string) {
		outMu.Lock()
		defer outMu.Unlock()
		_, _ = out.WriteString(line + "\n")
		_ = out.Flush()
	}
	exe, err := executor.New(executor.Config{
		App:               failoverApp,
		Schedulers:        strings.Split(os.Getenv(envSchedulers), ","),
		HeartbeatInterval: time.Second,
		// Re-sends back off up to 1 s, so a result reaches the new primary soon after it
		// takes over rather than a doubling delay later.
		ResendMax:      time.Second,
		RequestTimeout: 2 * time.Second,
		// Every run starts the moment it arrives: the receipt's time is then the dispatch's,
		// which the partition scenario compares with the takeover.
		PoolSize:  1024,
		QueueSize: 4096,
		Logger:    log,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	exe.Handle(failoverHandler, func(ctx context.Context, run executor.Run) (executor.Result, error) {
		line, _ := json.Marshal(receiptLine{
			Task: run.Task, Ticket: run.Ticket, Attempt: run.Attempt,
			ScheduledAt: run.ScheduledAt.UnixMilli(), Epoch: run.Epoch, AtNS: time.Now().UnixNano(),
		})
		emit(string(line))
		var p struct {
			SleepMS int `json:"sleep_ms"`
		}
		_ = json.Unmarshal(run.Params, &p)
		select {
		case <-time.After(time.Duration(p.SleepMS) * time.Millisecond):
		case <-ctx.Done():
			return executor.Result{}, context.Cause(ctx)
		}
		return executor.Result{Output: "ok"}, nil
	})
	if err := exe.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	emit("ready " + exe.Addr())
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	stdinGone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinGone)
	}()
	select {
	case <-stop:
	case <-stdinGone:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := exe.Stop(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// execProc is the running executor process, seen from the test.
type execProc struct {
	cmd    *exec.Cmd
	addr   string
	stderr *syncBuffer
	exited chan struct{}

	mu       sync.Mutex
	receipts []Receipt
	bad      []string
}

// startExecutor starts the executor process for schedulers and waits until it serves.
func startExecutor(t *testing.T, schedulers []string) *execProc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &execProc{stderr: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(self, "-test.run=^$")
	p.cmd.Env = cleanEnv(envExecutor+"=1", envSchedulers+"="+strings.Join(schedulers, ","))
	p.cmd.Stderr = p.stderr
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start the executor process: %v", err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if addr, ok := strings.CutPrefix(line, "ready "); ok {
				ready <- addr
				continue
			}
			var l receiptLine
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				p.mu.Lock()
				p.bad = append(p.bad, line)
				p.mu.Unlock()
				continue
			}
			p.mu.Lock()
			p.receipts = append(p.receipts, Receipt{Task: l.Task, Ticket: l.Ticket, Attempt: l.Attempt,
				ScheduledAt: l.ScheduledAt, Epoch: l.Epoch, At: time.Unix(0, l.AtNS), Via: "executor"})
			p.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, out)
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			t.Errorf("the executor process did not stop within 30 s of its stdin closing")
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	select {
	case p.addr = <-ready:
	case <-p.exited:
		t.Fatalf("the executor process exited before serving\nstderr:\n%s", p.stderr.String())
	case <-time.After(startTimeout):
		t.Fatalf("the executor process did not serve within %s\nstderr:\n%s", startTimeout, p.stderr.String())
	}
	return p
}

// logEntry is one line of the executor's JSON log, the fields the audit reads.
type logEntry struct {
	Time time.Time `json:"time"`
	Msg  string    `json:"msg"`
	Err  string    `json:"err"`
}

// logEntries returns the executor's log lines that parse.
func (p *execProc) logEntries() []logEntry {
	var out []logEntry
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		var l logEntry
		if json.Unmarshal([]byte(line), &l) == nil {
			out = append(out, l)
		}
	}
	return out
}

// staleRefusals returns when the executor refused a call of a stale epoch, from its log.
func (p *execProc) staleRefusals() []time.Time {
	var out []time.Time
	for _, l := range p.logEntries() {
		if l.Msg == "refused a call of a stale scheduler epoch" {
			out = append(out, l.Time)
		}
	}
	return out
}

// endedAsTimeout matches a scheduler's refusal of a result whose run had ended timed out.
var endedAsTimeout = regexp.MustCompile(`run (\S+) already ended as timeout`)

// refusedAsTimedOut returns the tickets whose result a scheduler refused, from the
// executor's log, because the run had already ended as a timeout.
func (p *execProc) refusedAsTimedOut() map[string]bool {
	out := map[string]bool{}
	for _, l := range p.logEntries() {
		if l.Msg != "scheduler refused the result; not re-sending" {
			continue
		}
		if m := endedAsTimeout.FindStringSubmatch(l.Err); m != nil {
			out[m[1]] = true
		}
	}
	return out
}

func (p *execProc) all() []Receipt {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Receipt(nil), p.receipts...)
}
