package failover

// The fault-injection scenarios of issue 19 (item 4), on the suite's harness: real `axe serve`
// processes, real MariaDB (cut through a testproxy, never stopped: other packages share it),
// the SDK executor process and the callback target. Each scenario ends with the audit of
// audit.go over the fire records and the receivers' logs, asserting 0 lost and 0 duplicates.
// docs/faults.md lists each fault, what axe does and what the test checks.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axe-sched/axe/client"
)

// faultTask is the JSON of one task of a fault scenario.
type faultTask struct {
	Name             string         `json:"name"`
	Group            string         `json:"group"`
	Cron             string         `json:"cron,omitempty"`
	DelayMS          *int64         `json:"delay_ms,omitempty"`
	TimeoutSec       int            `json:"timeout_sec"`
	RetryCount       int            `json:"retry_count"`
	RetryIntervalSec int            `json:"retry_interval_sec,omitempty"`
	Callback         map[string]any `json:"callback"`
	Params           map[string]int `json:"params,omitempty"`
	MisfirePolicy    string         `json:"misfire_policy,omitempty"`
	OnLost           string         `json:"on_lost,omitempty"`
}

// httpCallback calls the suite's target, which answers after ms.
func (c *cluster) httpCallback(ms int) map[string]any {
	return map[string]any{"type": "http", "url": fmt.Sprintf("%s/hook?ms=%d", c.target.srv.URL, ms)}
}

// execCallback calls the suite's SDK executor process, whose handler sleeps params.sleep_ms.
func execCallback() map[string]any {
	return map[string]any{"type": "executor", "app": failoverApp, "handler": failoverHandler}
}

// createTasks creates specs through the nodes (the client follows the primary) and returns
// the load to audit; a one-shot task's Due is the latest instant it can fall due.
func (c *cluster) createTasks(specs []faultTask) *load {
	c.t.Helper()
	cl, err := client.New(strings.Join(c.urls(), ","), "", "fault-suite")
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	due := make([]int64, len(specs))
	errs := make([]error, len(specs))
	work := make(chan int)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				errs[i] = cl.Do(ctx, http.MethodPost, "/api/v1/tasks", specs[i], nil)
				if d := specs[i].DelayMS; d != nil {
					due[i] = time.Now().UnixMilli() + *d
				}
			}
		}()
	}
	for i := range specs {
		work <- i
	}
	close(work)
	wg.Wait()
	l := &load{created: time.Now()}
	for i, s := range specs {
		if errs[i] != nil {
			c.t.Fatalf("create %s: %v", s.Name, errs[i])
		}
		l.tasks = append(l.tasks, AuditTask{Name: s.Name, Cron: s.Cron, Due: due[i]})
	}
	return l
}

// mixedLoad is the fault scenarios' default load: every-second cron tasks on both callback
// kinds, every-3-second ones long enough to be in flight at a fault (half of the HTTP ones
// re-sent when left in doubt), and one-shot tasks due evenly over dueSpan.
func (c *cluster) mixedLoad(every1, every3, delayed int, dueSpan time.Duration) []faultTask {
	var specs []faultTask
	for i := range every1 {
		s := faultTask{Name: fmt.Sprintf("f1-%03d", i), Group: "f1", Cron: "* * * * * *", TimeoutSec: 8,
			Callback: c.httpCallback(100), MisfirePolicy: "fire_once"}
		if i%2 == 1 {
			s.Callback, s.Params, s.MisfirePolicy = execCallback(), map[string]int{"sleep_ms": 100}, "skip"
		}
		specs = append(specs, s)
	}
	for i := range every3 {
		s := faultTask{Name: fmt.Sprintf("f3-%03d", i), Group: "f3", Cron: "*/3 * * * * *", TimeoutSec: 8,
			Callback: c.httpCallback(1500), MisfirePolicy: "skip"}
		switch i % 3 {
		case 1:
			s.OnLost = "resend"
		case 2:
			s.Callback, s.Params = execCallback(), map[string]int{"sleep_ms": 1500}
		}
		specs = append(specs, s)
	}
	for i := range delayed {
		d := int64(2*time.Second/time.Millisecond) + int64(dueSpan/time.Millisecond)*int64(i)/int64(max(delayed, 1))
		s := faultTask{Name: fmt.Sprintf("fd-%03d", i), Group: "fd", DelayMS: &d, TimeoutSec: 8, Callback: c.httpCallback(200)}
		if i%2 == 1 {
			s.Callback, s.Params = execCallback(), map[string]int{"sleep_ms": 200}
		}
		specs = append(specs, s)
	}
	return specs
}

// metric reads one sample of n's /metrics: the first line whose name (with labels) starts
// with name. ok is false when n does not answer or has no such metric.
func (c *cluster) metric(n *node, name string) (float64, bool) {
	resp, err := c.http.Get(n.url + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		return v, err == nil
	}
	return 0, false
}

// retryLine matches the writer's log line for a failed commit it will retry.
var retryLine = regexp.MustCompile(`"msg":"cannot commit batch, retrying"`)

// TestFaultDatabaseOutage cuts a single node's connection to MariaDB for 10 s mid-load
// (every connection reset, new ones refused, as a stopped server does), then restores it.
// The writer must retry, /readyz must answer 503 during the outage and 200 after it without
// a restart, firing must resume, and the audit must find no lost fire, no duplicate and no
// dispatch without its fire record.
func TestFaultDatabaseOutage(t *testing.T) {
	scenario(t) // each scenario has its own database, ports and processes
	c := newCluster(t, false)
	n := c.addNode("solo", true)
	c.start(n)
	c.waitReady(n, roleTimeout)
	c.exe = startExecutor(t, c.urls())
	const outage = 10 * time.Second
	warm, after := 4*time.Second, 6*time.Second
	l := c.createTasks(c.mixedLoad(20, 24, 20, warm+outage+after))
	from := spanFrom(l)
	time.Sleep(time.Until(time.UnixMilli(from).Add(warm)))

	cut := time.Now()
	if err := n.proxy.Sever(); err != nil {
		t.Fatal(err)
	}
	var firstDown time.Time
	var downErr string
	for time.Since(cut) < outage {
		resp, err := c.http.Get(n.url + "/readyz")
		if err != nil {
			t.Fatalf("the node stopped answering /readyz during the outage: %v\nlog tail:\n%s", err, tail(n.currentLog(), 3000))
		}
		var body struct {
			Error string `json:"error"`
		}
		_ = jsonDecode(resp, &body)
		if resp.StatusCode == http.StatusServiceUnavailable && firstDown.IsZero() {
			firstDown, downErr = time.Now(), body.Error
		}
		time.Sleep(200 * time.Millisecond)
	}
	if firstDown.IsZero() {
		t.Errorf("/readyz never answered 503 during a %s database outage", outage)
	} else {
		t.Logf("outage: /readyz 503 %s after the cut: %s", firstDown.Sub(cut).Round(time.Millisecond), downErr)
	}
	restored := time.Now()
	if err := n.proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	c.waitReady(n, 30*time.Second)
	t.Logf("outage: ready again %s after the connection came back", time.Since(restored).Round(time.Millisecond))
	// A fire due after the cut cannot have been made durable before the connection came
	// back, so none of them may have reached a receiver before it did.
	early := 0
	for _, r := range c.receipts() {
		if r.ScheduledAt > cut.Add(500*time.Millisecond).UnixMilli() && r.At.Before(restored) {
			early++
			if early <= 5 {
				t.Errorf("%s @%d attempt %d was dispatched during the outage, before its fire could be durable", r.Task, r.ScheduledAt, r.Attempt)
			}
		}
	}
	t.Logf("outage: %d runs due during the outage reached a receiver before the database came back", early)
	if !retryLine.MatchString(n.currentLog()) {
		t.Errorf("the node never logged a commit it retried during the outage")
	}
	time.Sleep(after)
	if got, _ := sentBy(c.receipts(), 0, restored.Add(time.Second)); got == 0 {
		t.Errorf("nothing was dispatched after the database came back: the daemon did not recover")
	}
	if _, code, _ := c.readyz(n); code != http.StatusOK {
		t.Errorf("/readyz = %d at the end, want 200", code)
	}
	c.audit("database outage", l, Span{From: from, To: spanTo()}, []Fault{Fault(cut.UnixMilli()), Fault(restored.UnixMilli())})
}

// TestFaultKillDuringCommit kills a single node with SIGKILL while the writer has batches in
// flight (it samples the writer's queue on /metrics and kills on a non-empty one, right after
// a whole second when every every-second task commits its fire), restarts it on the same
// database twice over, and audits: no fire ran twice, and every run left RUNNING is resolved
// (lost, or re-sent as a new attempt for on_lost: resend).
func TestFaultKillDuringCommit(t *testing.T) {
	scenario(t) // each scenario has its own database, ports and processes
	c := newCluster(t, false)
	n := c.addNode("solo", false)
	c.start(n)
	c.waitReady(n, roleTimeout)
	c.exe = startExecutor(t, c.urls())
	warm, after := 4*time.Second, 5*time.Second
	const kills = 2
	l := c.createTasks(c.mixedLoad(60, 45, 20, warm+kills*after))
	from := spanFrom(l)
	time.Sleep(time.Until(time.UnixMilli(from).Add(warm)))

	var faults []Fault
	for k := range kills {
		// Wait for a whole second one past a multiple of 3: the every-3-second runs sent at
		// the multiple are still running (1.5 s), and every every-second task commits its
		// fire now. Kill once the writer queue is seen non-empty.
		next := time.Now().Truncate(time.Second).Add(time.Second)
		for next.Unix()%3 != 1 {
			next = next.Add(time.Second)
		}
		time.Sleep(time.Until(next))
		depth, seen := 0.0, false
		for began := time.Now(); time.Since(began) < 3*time.Second; {
			if v, ok := c.metric(n, "axe_writer_queue_depth"); ok && v > 0 {
				depth, seen = v, true
				break
			}
		}
		fault := time.Now()
		faults = append(faults, Fault(fault.UnixMilli()))
		n.kill(t)
		if seen {
			t.Logf("kill %d: SIGKILL with %v groups in the writer queue", k+1, depth)
		} else {
			t.Logf("kill %d: SIGKILL without having seen the writer queue non-empty in 3 s", k+1)
		}
		c.start(n)
		c.waitReady(n, roleTimeout)
		t.Logf("kill %d: ready %s after the kill", k+1, time.Since(fault).Round(time.Millisecond))
		time.Sleep(after)
	}
	a := c.audit("kill -9 during commit", l, Span{From: from, To: spanTo()}, faults)
	if a.InDoubtTotal() < kills {
		t.Errorf("%d runs in flight at %d kills: the scenario did not test runs in doubt", a.InDoubtTotal(), kills)
	}
	c.checkResent(l, faults)
}

// checkResent checks every on_lost: resend run left in doubt by a fault: recorded lost, and
// its fire sent again as the next attempt (so the audit's per-attempt count proves it went
// once per attempt).
func (c *cluster) checkResent(l *load, faults []Fault) {
	c.t.Helper()
	resend := map[string]bool{}
	for _, tk := range l.tasks {
		if strings.HasPrefix(tk.Name, "f3-") {
			if i, _ := strconv.Atoi(strings.TrimPrefix(tk.Name, "f3-")); i%3 == 1 {
				resend[tk.Name] = true
			}
		}
	}
	type fk struct {
		task  string
		sched int64
	}
	attempts := map[fk][]RunRow{}
	for _, r := range c.runs() {
		if resend[r.Task] && r.Kind != "manual" {
			attempts[fk{r.Task, r.ScheduledAt}] = append(attempts[fk{r.Task, r.ScheduledAt}], r)
		}
	}
	lost, resent := 0, 0
	for k, rs := range attempts {
		for _, r := range rs {
			if r.Result != "lost" {
				continue
			}
			lost++
			next := false
			for _, o := range rs {
				if o.Attempt == r.Attempt+1 {
					next = true
				}
			}
			if next {
				resent++
			} else {
				c.t.Errorf("%s @%d attempt %d of an on_lost: resend task was recorded lost and not sent again", k.task, k.sched, r.Attempt)
			}
		}
	}
	c.t.Logf("on_lost resend: %d runs recorded lost, %d of them sent again as the next attempt", lost, resent)
}

// jsonDecode decodes resp's body into v and closes it.
func jsonDecode(resp *http.Response, v any) error {
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}
