package failover

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/axe-sched/axe/internal/test/testwait"
)

// TestFaultExecutorKilled kills the SDK executor process with SIGKILL while its runs are in
// flight and starts a new one (on a new address, as a restarted pod would get). The runs it
// held must resolve (timed out: no result can come), nothing may run twice, and firing to the
// app must resume on the new process.
func TestFaultExecutorKilled(t *testing.T) {
	scenario(t) // each scenario has its own database, ports and processes
	c := newCluster(t, false)
	n := c.addNode("solo", false)
	c.start(n)
	c.waitReady(n, roleTimeout)
	first := startExecutor(t, c.urls())
	c.exe = first
	var specs []faultTask
	for i := range 20 {
		specs = append(specs, faultTask{Name: fmt.Sprintf("x3-%03d", i), Group: "x3", Cron: "*/3 * * * * *",
			TimeoutSec: 3, Callback: execCallback(), Params: map[string]int{"sleep_ms": 1500}, MisfirePolicy: "skip"})
	}
	for i := range 10 {
		specs = append(specs, faultTask{Name: fmt.Sprintf("x1-%03d", i), Group: "x1", Cron: "* * * * * *",
			TimeoutSec: 3, Callback: execCallback(), Params: map[string]int{"sleep_ms": 50}, MisfirePolicy: "skip"})
	}
	l := c.createTasks(specs)
	from := spanFrom(l)
	time.Sleep(time.Until(time.UnixMilli(from).Add(4 * time.Second)))

	// Kill half a second after a multiple of 3 s: the every-3-second runs are mid-handler.
	next := time.Now().Truncate(time.Second).Add(time.Second)
	for next.Unix()%3 != 0 {
		next = next.Add(time.Second)
	}
	time.Sleep(time.Until(next.Add(500 * time.Millisecond)))
	fault := time.Now()
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	second := startExecutor(t, c.urls())
	t.Logf("executor killed; a new one serves at %s (the old one was at %s)", second.addr, first.addr)
	// The new process serves once the scheduler has sent it a run (its registration and the
	// routing's refresh came first); then two more seconds of load go through it.
	for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline); time.Sleep(pollEvery) {
		if got, _ := sentBy(second.all(), 0, time.Time{}); got > 0 {
			break
		}
	}
	time.Sleep(2 * time.Second)

	receipts := func() []Receipt {
		all := append(c.target.all(), first.all()...)
		all = append(all, second.all()...)
		sort.Slice(all, func(i, j int) bool { return all[i].At.Before(all[j].At) })
		return all
	}
	if got, _ := sentBy(second.all(), 0, time.Time{}); got == 0 {
		t.Errorf("the new executor process received no run in 10 s")
	}
	a := c.auditReceipts("executor killed", l, Span{From: from, To: spanTo()}, []Fault{Fault(fault.UnixMilli())}, receipts)
	// The killed process's runs could not report: each must have ended, not as a success. A
	// run in doubt may still end a success in two ways: its handler finished and its result
	// left before the kill (the run's end is stamped when the scheduler records it, which
	// under load can be after the fault), or its dispatch met the dead process and went to
	// the new one. Anything else recorded a success is a result nobody sent.
	handler := map[string]time.Duration{"x3": 1500 * time.Millisecond, "x1": 50 * time.Millisecond}
	byFirst, bySecond := map[string]Receipt{}, map[string]bool{}
	for _, r := range first.all() {
		byFirst[fmt.Sprintf("%s#%d", r.Ticket, r.Attempt)] = r
	}
	for _, r := range second.all() {
		bySecond[fmt.Sprintf("%s#%d", r.Ticket, r.Attempt)] = true
	}
	finishedBefore := 0
	for _, r := range c.runs() {
		if r.Result != "success" || r.DispatchedAt > fault.UnixMilli() || r.EndedAt <= fault.UnixMilli() {
			continue
		}
		k := fmt.Sprintf("%s#%d", r.Ticket, r.Attempt)
		got, held := byFirst[k]
		switch {
		case bySecond[k]:
		case held && !got.At.Add(handler[r.Task[:2]]).After(fault):
			finishedBefore++
		default:
			t.Errorf("run %s of %s (dispatched %s, received by the killed executor at %s) was recorded a success, though its %s handler could not finish before the kill at %s",
				r.Ticket, r.Task, time.UnixMilli(r.DispatchedAt).Format("15:04:05.000"), got.At.Format("15:04:05.000"),
				handler[r.Task[:2]], fault.Format("15:04:05.000"))
		}
	}
	t.Logf("runs in doubt recorded a success: %d finished on the killed executor before the kill", finishedBefore)
	doubt := 0
	for res, k := range a.InDoubt {
		if res != "lost+received" {
			doubt += k
		}
	}
	if doubt == 0 {
		t.Errorf("no run was in flight on the executor when it was killed")
	}
}

// auditReceipts is cluster.audit over receipts that the scenario collects itself (several
// executor processes); it waits for runs still running to resolve, then fails the test on
// any finding. A result lost because its executor died is not a finding here.
func (c *cluster) auditReceipts(name string, l *load, span Span, faults []Fault, receipts func() []Receipt) *Audit {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var a *Audit
	for {
		rs := receipts()
		var err error
		if a, err = Check(l.tasks, span, faults, c.runs(), c.actions(), rs); err != nil {
			c.t.Fatal(err)
		}
		if len(a.Unresolved) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	c.t.Logf("%s audit over %s: %s", name, time.Duration(span.To-span.From)*time.Millisecond, a)
	if !a.OK() {
		c.t.Errorf("%s: the audit found duplicates, gaps or unresolved runs (above)", name)
	}
	return a
}

// rawExecutor speaks the executor protocol (docs/protocol.md) by hand, in the test process,
// so that a scenario can make it misbehave: accept runs and never answer, answer twice, or
// deliver one result twice at once as a network that duplicates a request would.
type rawExecutor struct {
	t     *testing.T
	app   string
	sched string // the scheduler's base URL
	mode  string // "silent", "twice" or "netdup"
	srv   *httptest.Server
	http  *http.Client
	wg    sync.WaitGroup
	stop  chan struct{}

	mu       sync.Mutex
	receipts []Receipt
	runs     map[string]rawRun // by ticket
	answers  map[string][]rawAnswer
}

// rawRun is one run as the scheduler sent it.
type rawRun struct {
	Ticket      string `json:"ticket"`
	Task        string `json:"task"`
	Handler     string `json:"handler"`
	Attempt     int    `json:"attempt"`
	ScheduledAt int64  `json:"scheduled_at"`
	Deadline    int64  `json:"deadline"`
	Epoch       int64  `json:"epoch"`
}

// rawAnswer is the scheduler's answer to one result the executor sent.
type rawAnswer struct {
	Status    int    `json:"status"`
	OK        bool   `json:"ok"`
	Duplicate bool   `json:"duplicate"`
	Error     string `json:"error"`
	Batch     bool   `json:"-"`
}

func newRawExecutor(t *testing.T, sched, app, mode string) *rawExecutor {
	t.Helper()
	x := &rawExecutor{t: t, app: app, sched: sched, mode: mode, stop: make(chan struct{}),
		http: &http.Client{Timeout: 5 * time.Second}, runs: map[string]rawRun{}, answers: map[string][]rawAnswer{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /axe/run", func(w http.ResponseWriter, r *http.Request) {
		var run rawRun
		if err := json.NewDecoder(r.Body).Decode(&run); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, `{"accepted":true}`)
		x.accept(run)
	})
	mux.HandleFunc("POST /axe/runs", func(w http.ResponseWriter, r *http.Request) {
		var batch struct {
			Runs []rawRun `json:"runs"`
		}
		if err := json.NewDecoder(r.Body).Decode(&batch); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		items := make([]string, len(batch.Runs))
		for i := range items {
			items[i] = `{"code":202,"body":{"accepted":true}}`
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"results":[`+strings.Join(items, ",")+`]}`)
		for _, run := range batch.Runs {
			x.accept(run)
		}
	})
	x.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		close(x.stop)
		x.wg.Wait()
		x.srv.Close()
		x.http.CloseIdleConnections()
	})
	body := map[string]any{"app": app, "address": x.addr(), "protocol": "http", "handlers": []string{"work"}}
	if code, data := x.post("/api/v1/executors/register", body); code != http.StatusOK {
		t.Fatalf("register: %d %s", code, data)
	}
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-x.stop:
				return
			case <-tick.C:
				x.post("/api/v1/executors/heartbeat", map[string]any{"app": app, "address": x.addr(), "running": 0})
			}
		}
	}()
	return x
}

func (x *rawExecutor) addr() string { return strings.TrimPrefix(x.srv.URL, "http://") }

// post sends body to the scheduler and returns the status and body; 0 on a transport error.
func (x *rawExecutor) post(path string, body any) (int, []byte) {
	raw, _ := json.Marshal(body)
	resp, err := x.http.Post(x.sched+path, "application/json", bytes.NewReader(raw))
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// result is the callback body of a successful run.
func (x *rawExecutor) result(run rawRun) map[string]any {
	now := time.Now().UnixMilli()
	return map[string]any{"ticket": run.Ticket, "task": run.Task, "app": x.app, "address": x.addr(),
		"status": "success", "error": "", "output": "ok", "started_at": now - 20, "ended_at": now, "duration_ms": 20}
}

// send delivers run's result once to /api/v1/callback and records the answer.
func (x *rawExecutor) send(run rawRun) {
	code, data := x.post("/api/v1/callback", x.result(run))
	a := rawAnswer{}
	_ = json.Unmarshal(data, &a)
	a.Status = code
	x.mu.Lock()
	x.answers[run.Ticket] = append(x.answers[run.Ticket], a)
	x.mu.Unlock()
}

// accept records a run and, per mode, reports it.
func (x *rawExecutor) accept(run rawRun) {
	x.mu.Lock()
	x.receipts = append(x.receipts, Receipt{Task: run.Task, Ticket: run.Ticket, Attempt: run.Attempt,
		ScheduledAt: run.ScheduledAt, Epoch: run.Epoch, At: time.Now(), Via: "executor"})
	x.runs[run.Ticket] = run
	x.mu.Unlock()
	if x.mode == "silent" {
		return
	}
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		select {
		case <-time.After(50 * time.Millisecond):
		case <-x.stop:
			return
		}
		switch x.mode {
		case "twice":
			// The handler's result, then the same again later: an executor that reports
			// twice (a retry after a lost answer, or a bug).
			x.send(run)
			x.send(run)
		case "netdup":
			// The same request twice at once, as a network that duplicates it would.
			var both sync.WaitGroup
			for range 2 {
				both.Add(1)
				go func() { defer both.Done(); x.send(run) }()
			}
			both.Wait()
			// And twice in one batch.
			code, data := x.post("/api/v1/callback/batch", map[string]any{"results": []any{x.result(run), x.result(run)}})
			var b struct {
				Results []rawAnswer `json:"results"`
			}
			_ = json.Unmarshal(data, &b)
			x.mu.Lock()
			if code != http.StatusOK || len(b.Results) != 2 {
				x.answers[run.Ticket] = append(x.answers[run.Ticket], rawAnswer{Status: code, Error: "batch: " + string(data), Batch: true})
			}
			for _, a := range b.Results {
				a.Batch = true
				x.answers[run.Ticket] = append(x.answers[run.Ticket], a)
			}
			x.mu.Unlock()
		}
	}()
}

func (x *rawExecutor) all() []Receipt {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]Receipt(nil), x.receipts...)
}

// rawTasks creates n every-second tasks of app with timeout and one retry.
func (c *cluster) rawTasks(prefix, app string, n, timeoutSec int) *load {
	var specs []faultTask
	for i := range n {
		specs = append(specs, faultTask{Name: fmt.Sprintf("%s-%02d", prefix, i), Group: prefix, Cron: "*/2 * * * * *",
			TimeoutSec: timeoutSec, RetryCount: 1, RetryIntervalSec: 1,
			Callback: map[string]any{"type": "executor", "app": app, "handler": "work"}, MisfirePolicy: "skip"})
	}
	return c.createTasks(specs)
}

// resultActions counts the result actions recorded per ticket.
func (c *cluster) resultActions() map[string]int {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := c.db.QueryContext(ctx, `SELECT ticket, COUNT(*) FROM task_action WHERE action = 'result' GROUP BY ticket`)
	if err != nil {
		c.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var ticket string
		var n int
		if err := rows.Scan(&ticket, &n); err != nil {
			c.t.Fatal(err)
		}
		out[ticket] = n
	}
	return out
}

// TestFaultExecutorSilent: an executor that accepts every run (202) and never answers. Each
// attempt must time out at its deadline, be retried once, and end timed out; a result sent
// after the timeout must be refused 409 and change nothing.
func TestFaultExecutorSilent(t *testing.T) {
	scenario(t) // each scenario has its own database, ports and processes
	c := newCluster(t, false)
	n := c.addNode("solo", false)
	c.start(n)
	c.waitReady(n, roleTimeout)
	x := newRawExecutor(t, n.url, "silent", "silent")
	l := c.rawTasks("silent", "silent", 6, 1)
	from := spanFrom(l)
	time.Sleep(time.Until(time.UnixMilli(from).Add(7 * time.Second)))
	span := Span{From: from, To: spanTo()}
	time.Sleep(6 * time.Second) // the last fires' attempts time out and retry

	a := c.auditReceipts("silent executor", l, span, nil, x.all)
	if len(a.Gaps) > 0 {
		for _, r := range c.runs() {
			if r.Task == "silent-00" {
				t.Logf("run %+v", r)
			}
		}
		for _, act := range c.actions() {
			if act.Task == "silent-00" {
				t.Logf("action %+v", act)
			}
		}
	}
	if a.Ran == 0 {
		t.Fatal("nothing ran")
	}
	// Each fire's first attempt is in the span; its retry is scheduled at its own due time,
	// up to ~3 s later (timeout, then the 1 s interval), so it is looked for up to 4 s past.
	first, retried, other := 0, 0, map[string]int{}
	var late *RunRow
	for _, r := range c.runs() {
		inSpan := r.ScheduledAt >= span.From && r.ScheduledAt < span.To
		switch {
		case r.Attempt == 1 && inSpan:
			first++
		case r.Attempt == 2 && r.ScheduledAt > span.From && r.ScheduledAt < span.To+4000:
			retried++
		default:
			continue
		}
		if r.Result != "timeout" {
			other[r.Result]++
		} else if late == nil {
			late = &r
		}
	}
	if len(other) > 0 {
		t.Errorf("runs of a silent executor ended %v, want every one timed out", other)
	}
	if first == 0 || retried < first {
		t.Errorf("%d first attempts and %d retries timed out, want each first attempt retried", first, retried)
	}
	t.Logf("silent executor: %d fires, %d first attempts and %d retries timed out", a.Ran, first, retried)
	if late == nil {
		t.Fatal("no timed-out run to report late")
	}
	x.mu.Lock()
	run := x.runs[late.Ticket]
	x.mu.Unlock()
	code, body := x.post("/api/v1/callback", x.result(run))
	if code != http.StatusConflict {
		t.Errorf("a result after the timeout = %d %s, want 409", code, body)
	}
	for _, r := range c.runs() {
		if r.Ticket == late.Ticket && r.Result != "timeout" {
			t.Errorf("the late result changed run %s to %s", r.Ticket, r.Result)
		}
	}
}

// TestFaultDuplicateResults: an executor that answers every run twice, and one whose every
// result the network delivers twice at once and then twice in a batch. Each run must be
// recorded once as a success (its run row, no result action), the first delivery acknowledged and every
// other one answered as a duplicate, and nothing dispatched twice.
func TestFaultDuplicateResults(t *testing.T) {
	scenario(t) // each scenario has its own database, ports and processes
	c := newCluster(t, false)
	n := c.addNode("solo", false)
	c.start(n)
	c.waitReady(n, roleTimeout)
	twice := newRawExecutor(t, n.url, "twice", "twice")
	netdup := newRawExecutor(t, n.url, "netdup", "netdup")
	lt := c.rawTasks("twice", "twice", 5, 5)
	ln := c.rawTasks("netdup", "netdup", 5, 5)
	l := &load{tasks: append(lt.tasks, ln.tasks...), created: ln.created}
	from := spanFrom(l)
	time.Sleep(time.Until(time.UnixMilli(from).Add(8 * time.Second)))
	span := Span{From: from, To: spanTo()}
	time.Sleep(time.Second)

	receipts := func() []Receipt { return append(twice.all(), netdup.all()...) }
	a := c.auditReceipts("duplicate results", l, span, nil, receipts)
	if a.Ran == 0 {
		t.Fatal("nothing ran")
	}
	actions := c.resultActions()
	for _, r := range c.runs() {
		if r.ScheduledAt < span.From || r.ScheduledAt >= span.To {
			continue
		}
		if r.Result != "success" {
			t.Errorf("run %s of %s ended %s, want success", r.Ticket, r.Task, r.Result)
		}
		// A success is recorded by its run row alone (design.md, "Write path"): a result
		// action for it would be a second recording of the same end.
		if actions[r.Ticket] != 0 {
			t.Errorf("run %s of %s has %d result actions, want none beside its run row", r.Ticket, r.Task, actions[r.Ticket])
		}
	}
	var refused int
	if err := c.db.QueryRow(`SELECT COUNT(*) FROM task_action WHERE action = 'refused_result'`).Scan(&refused); err != nil {
		t.Fatal(err)
	}
	if refused > 0 {
		t.Errorf("%d duplicate deliveries were recorded as refused results, want 0: a duplicate changes nothing", refused)
	}
	for _, x := range []*rawExecutor{twice, netdup} {
		// Every delivery of every run the executor took must have its answer before they are
		// judged: the first one of a run is answered only once its result is durable, which
		// on a loaded machine can come after the audit read the run table.
		want := map[string]int{"twice": 2, "netdup": 3}[x.mode] // netdup: two, then the batch's two or its one error
		testwait.For(t, 30*time.Second, x.mode+": an answer to every delivery", func() bool {
			x.mu.Lock()
			defer x.mu.Unlock()
			for ticket := range x.runs {
				if len(x.answers[ticket]) < want {
					return false
				}
			}
			return true
		})
		x.mu.Lock()
		firsts, dups := 0, 0
		for ticket, as := range x.answers {
			acked := 0
			for _, ans := range as {
				switch {
				case ans.Status == http.StatusOK && ans.OK && !ans.Duplicate:
					acked++
				case ans.Status == http.StatusOK && ans.OK && ans.Duplicate:
					dups++
				default:
					t.Errorf("%s: result of %s answered %+v, want 200 ok (a duplicate after the first)", x.mode, ticket, ans)
				}
			}
			if acked != 1 {
				t.Errorf("%s: %d deliveries of %s were acknowledged as new, want exactly 1 (answers %+v)", x.mode, acked, ticket, as)
			}
			firsts += acked
		}
		x.mu.Unlock()
		t.Logf("%s: %d results recorded, %d further deliveries answered duplicate", x.mode, firsts, dups)
		if firsts == 0 || dups == 0 {
			t.Errorf("%s: no result was delivered twice", x.mode)
		}
	}
}
