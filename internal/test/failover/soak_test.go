package failover

// The soak (issue 19, item 6): two `axe serve --ha` nodes on MariaDB under a mixed load for
// AXE_SOAK_DURATION (default 90s; `./scripts/test.sh --long` runs 10m, `make soak DURATION=30m` longer), with a failover
// every few minutes, sampling each node process every 10 s. It fails on growth past a bound
// or on any lost or duplicate fire.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/axe-sched/axe/client"
)

const (
	envSoakDuration = "AXE_SOAK_DURATION"
	envSoakFailover = "AXE_SOAK_FAILOVER_EVERY"
	soakDefault     = 90 * time.Second
	soakSampleEvery = 10 * time.Second
	// A process is sampled for its baseline once it is this old: startup and the first
	// window load are over.
	soakWarm = 25 * time.Second
)

// Growth bounds over a process's baseline sample. Generous: the load's in-flight runs come
// and go (each holds goroutines and a connection), and the Go heap grows to its GC target.
const (
	soakRSSFactor    = 1.5
	soakRSSSlackKB   = 64 << 10 // 64 MiB
	soakGoroutineAdd = 300
	soakFDAdd        = 64
	soakQueueMax     = 5000
)

// soakSample is one sample of one node process.
type soakSample struct {
	at         time.Time
	node       string
	pid        int
	role       string
	age        time.Duration // how long the process has held role
	rssKB      int64
	fds        int
	goroutines int
	queue      int
}

// procStats reads a process's RSS (KiB) and open file count from /proc.
func procStats(pid int) (rssKB int64, fds int, err error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				rssKB, _ = strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, 0, err
	}
	return rssKB, len(ents), nil
}

// soakEnv reads a duration from env, or def.
func soakEnv(t *testing.T, env string, def time.Duration) time.Duration {
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration such as 30m", env, v)
	}
	return d
}

// auxTarget is an HTTP endpoint for the runs the audit does not count per fire (run-now
// storms, paused and resumed tasks): it records (ticket, attempt) to find duplicates.
type auxTarget struct {
	srv *httptest.Server
	mu  sync.Mutex
	got map[string]int // ticket/attempt → deliveries
	n   int
}

func newAuxTarget(t *testing.T) *auxTarget {
	a := &auxTarget{got: map[string]int{}}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.got[r.Header.Get("X-Axe-Ticket")+"/"+r.Header.Get("X-Axe-Attempt")]++
		a.n++
		a.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *auxTarget) duplicates() (total int, dups []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, n := range a.got {
		if n > 1 {
			dups = append(dups, fmt.Sprintf("%s received %d times", k, n))
		}
	}
	sort.Strings(dups)
	return a.n, dups
}

// TestSoak runs the mixed load: every-second and every-3-second cron tasks on both callback
// kinds, cron tasks whose first attempt fails (retries), bulk imports of one-shot tasks,
// pause/resume churn, run-now storms, graceful executor restarts, and a kill -9 failover
// every AXE_SOAK_FAILOVER_EVERY (default: 3m, or half the duration when shorter).
func TestSoak(t *testing.T) {
	scenario(t) // each scenario has its own database, ports and processes
	dur := soakEnv(t, envSoakDuration, soakDefault)
	every := soakEnv(t, envSoakFailover, min(3*time.Minute, dur/2))
	c := newCluster(t, true)
	a, b := c.bootHA(false)
	execs := []*execProc{c.exe}
	var execMu sync.Mutex
	aux := newAuxTarget(t)
	// flaky fails every first attempt and passes the retry.
	flaky := newTarget(t)
	flakySrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		flaky.srv.Config.Handler.ServeHTTP(httptest.NewRecorder(), r.Clone(r.Context()))
		if r.Header.Get("X-Axe-Attempt") == "1" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(flakySrv.Close)

	var specs []faultTask
	for i := range 20 {
		s := faultTask{Name: fmt.Sprintf("s1-%03d", i), Group: "s1", Cron: "* * * * * *", TimeoutSec: 8,
			Callback: c.httpCallback(50), MisfirePolicy: "fire_once"}
		if i%2 == 1 {
			s.Callback, s.Params, s.MisfirePolicy = execCallback(), map[string]int{"sleep_ms": 50}, "skip"
		}
		specs = append(specs, s)
	}
	for i := range 20 {
		s := faultTask{Name: fmt.Sprintf("s3-%03d", i), Group: "s3", Cron: "*/3 * * * * *", TimeoutSec: 8,
			Callback: c.httpCallback(1200), MisfirePolicy: "skip"}
		switch i % 3 {
		case 1:
			s.OnLost = "resend"
		case 2:
			s.Callback, s.Params = execCallback(), map[string]int{"sleep_ms": 1200}
		}
		specs = append(specs, s)
	}
	for i := range 10 {
		specs = append(specs, faultTask{Name: fmt.Sprintf("sr-%03d", i), Group: "sr", Cron: "*/5 * * * * *", TimeoutSec: 4,
			RetryCount: 2, RetryIntervalSec: 1, Callback: map[string]any{"type": "http", "url": flakySrv.URL}, MisfirePolicy: "skip"})
	}
	var churn []string // paused and resumed, and run now: counted by aux for duplicates only
	for i := range 10 {
		name := fmt.Sprintf("sc-%03d", i)
		churn = append(churn, name)
		specs = append(specs, faultTask{Name: name, Group: "sc", Cron: "* * * * * *", TimeoutSec: 8,
			Callback: map[string]any{"type": "http", "url": aux.srv.URL}, MisfirePolicy: "skip"})
	}
	l := c.createTasks(specs)
	var audited []AuditTask
	for _, tk := range l.tasks {
		if !strings.HasPrefix(tk.Name, "sc-") {
			audited = append(audited, tk)
		}
	}
	var loadMu sync.Mutex
	from := spanFrom(l)
	began := time.Now()
	end := began.Add(dur)
	t.Logf("soak: %s, a failover every %s; %d tasks to start with", dur, every, len(specs))

	cl, err := client.New(strings.Join(c.urls(), ","), "", "soak")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var loadErrs []string
	note := func(format string, args ...any) {
		errMu.Lock()
		defer errMu.Unlock()
		if len(loadErrs) < 20 {
			loadErrs = append(loadErrs, fmt.Sprintf(format, args...))
		}
	}
	// do retries a call across a failover: the client follows the primary, and a takeover
	// takes up to TTL + slack.
	do := func(method, path string, body any) error {
		var err error
		for try := 0; try < 20 && ctx.Err() == nil; try++ {
			cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
			err = cl.Do(cctx, method, path, body, nil)
			ccancel()
			if err == nil || strings.Contains(err.Error(), "HTTP 4") {
				return err
			}
			time.Sleep(500 * time.Millisecond)
		}
		return err
	}
	loop := func(name string, period time.Duration, fn func(i int)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(period)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					if time.Now().After(end.Add(-5 * time.Second)) {
						return
					}
					fn(i)
				}
			}
		}()
	}
	imported := 0
	loop("import", 20*time.Second, func(i int) {
		// A bulk import: 50 one-shot tasks due over the next 2–20 s, created one by one.
		for j := range 50 {
			d := int64(2000 + rand.IntN(18000))
			s := faultTask{Name: fmt.Sprintf("si-%03d-%02d", i, j), Group: "si", DelayMS: &d, TimeoutSec: 8, Callback: c.httpCallback(100)}
			if j%2 == 1 {
				s.Callback, s.Params = execCallback(), map[string]int{"sleep_ms": 100}
			}
			// Every name is new: a 409 answers a create sent again after its first answer
			// was lost (a takeover, a timeout on a loaded box), and the task is created.
			if err := do(http.MethodPost, "/api/v1/tasks", s); err != nil && !strings.Contains(err.Error(), "HTTP 409") {
				note("import %s: %v", s.Name, err)
				continue
			}
			loadMu.Lock()
			audited = append(audited, AuditTask{Name: s.Name, Due: time.Now().UnixMilli() + d})
			imported++
			loadMu.Unlock()
		}
	})
	loop("churn", 3*time.Second, func(i int) {
		name := churn[i%len(churn)]
		if err := do(http.MethodPost, "/api/v1/tasks/"+name+"/pause", nil); err != nil {
			note("pause %s: %v", name, err)
			return
		}
		time.Sleep(time.Second)
		if err := do(http.MethodPost, "/api/v1/tasks/"+name+"/resume", nil); err != nil {
			note("resume %s: %v", name, err)
		}
	})
	storms := 0
	loop("storm", 15*time.Second, func(int) {
		// A run-now storm: every churn task run now at once, three times over.
		var sw sync.WaitGroup
		for k := range 3 * len(churn) {
			sw.Add(1)
			go func() {
				defer sw.Done()
				// 409 (already running here) is a fine answer to a storm.
				if err := do(http.MethodPost, "/api/v1/tasks/"+churn[k%len(churn)]+"/run", nil); err != nil && !strings.Contains(err.Error(), "HTTP 409") {
					note("run now: %v", err)
				}
			}()
		}
		sw.Wait()
		storms++
	})
	restarts := 0
	loop("executor", 35*time.Second, func(int) {
		// A graceful executor restart, as a deploy does: the old one drains and reports.
		execMu.Lock()
		old := execs[len(execs)-1]
		execMu.Unlock()
		nw := startExecutor(t, c.urls())
		execMu.Lock()
		execs = append(execs, nw)
		execMu.Unlock()
		_ = old.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-old.exited:
		case <-time.After(30 * time.Second):
			note("an executor did not stop within 30 s of SIGTERM")
		}
		restarts++
	})

	receipts := func() []Receipt {
		execMu.Lock()
		defer execMu.Unlock()
		all := c.target.all()
		all = append(all, flaky.all()...)
		for _, x := range execs {
			all = append(all, x.all()...)
		}
		sort.Slice(all, func(i, j int) bool { return all[i].At.Before(all[j].At) })
		return all
	}

	// The main loop: sample every 10 s, fail over every `every`.
	var samples []soakSample
	// A process is judged per role: a backup idles, a primary carries the load.
	started := map[string]time.Time{} // pid/role → first seen
	sample := func() {
		for _, n := range []*node{a, b} {
			n.mu.Lock()
			cmd := n.cmd
			n.mu.Unlock()
			pid := cmd.Process.Pid
			rz, _, ok := c.readyz(n)
			if !ok {
				continue // between a kill and the restart
			}
			key := fmt.Sprintf("%d/%s", pid, rz.Role)
			if _, ok := started[key]; !ok {
				started[key] = time.Now()
			}
			rss, fds, err := procStats(pid)
			if err != nil {
				continue
			}
			s := soakSample{at: time.Now(), node: n.id, pid: pid, role: rz.Role, age: time.Since(started[key]), rssKB: rss, fds: fds}
			if v, ok := c.metric(n, "go_goroutines"); ok {
				s.goroutines = int(v)
			}
			if v, ok := c.metric(n, "axe_writer_queue_depth"); ok {
				s.queue = int(v)
			}
			samples = append(samples, s)
		}
	}
	primary, backup := a, b
	r, _, _ := c.readyz(primary)
	epoch := r.Epoch
	var faults []Fault
	nextFailover := began.Add(every)
	sampleTick := time.NewTicker(soakSampleEvery)
	defer sampleTick.Stop()
	sample()
	for time.Now().Before(end) {
		select {
		case <-sampleTick.C:
			sample()
		case <-time.After(time.Until(nextFailover)):
			if time.Until(end) < c.ttl+takeoverSlack+10*time.Second {
				nextFailover = end.Add(time.Hour)
				continue
			}
			fault := time.Now()
			faults = append(faults, Fault(fault.UnixMilli()))
			primary.kill(t)
			took, nr := c.takeover(backup, fault, epoch)
			epoch = nr.Epoch
			t.Logf("soak: failover %d at +%s: %s took over in %s (epoch %d)", len(faults), fault.Sub(began).Round(time.Second),
				backup.id, took.Round(time.Millisecond), epoch)
			c.start(primary)
			c.waitRole(primary, "backup", roleTimeout)
			primary, backup = backup, primary
			nextFailover = time.Now().Add(every)
		case <-time.After(time.Until(end)):
		}
	}
	cancel()
	wg.Wait()
	sample()
	time.Sleep(3 * time.Second)

	// The audit: every fire of the audited tasks in the span ran once or was handled.
	loadMu.Lock()
	l.tasks = audited
	loadMu.Unlock()
	// The span ends 5 s back, not spanTo's 1 s: the cron tasks keep firing until now, and on
	// a loaded box the fire records of the last second or two were not yet committed when
	// the audit read them (10 fires at the span's end counted as gaps beside a CPU hog).
	to := time.Now().Add(-5 * time.Second).Truncate(time.Second).UnixMilli()
	au := c.auditReceipts("soak", l, Span{From: from, To: to}, faults, receipts)
	total, dups := aux.duplicates()
	t.Logf("soak: %d runs to the churned and stormed tasks, %d (ticket, attempt) delivered twice", total, len(dups))
	for _, d := range dups[:min(len(dups), 5)] {
		t.Errorf("soak: churned or stormed run %s", d)
	}
	t.Logf("soak: %d one-shot tasks imported, %d run-now storms, %d executor restarts, %d failovers; audit %d fires, %d duplicates, %d gaps",
		imported, storms, restarts, len(faults), au.Fires, len(au.Duplicates), len(au.Gaps))
	errMu.Lock()
	for _, e := range loadErrs {
		t.Errorf("soak load: %s", e)
	}
	errMu.Unlock()
	checkSoakSamples(t, samples)
}

// checkSoakSamples logs each process's trend and fails on growth past the bounds over its
// baseline (its first sample at least soakWarm into its role), or on a writer queue past
// soakQueueMax.
func checkSoakSamples(t *testing.T, samples []soakSample) {
	t.Helper()
	byPID := map[string][]soakSample{} // by pid/role
	var pids []string
	for _, s := range samples {
		key := fmt.Sprintf("%d/%s", s.pid, s.role)
		if _, ok := byPID[key]; !ok {
			pids = append(pids, key)
		}
		byPID[key] = append(byPID[key], s)
		if s.queue > soakQueueMax {
			t.Errorf("soak: node %s had %d groups in its writer queue at %s", s.node, s.queue, s.at.Format(time.TimeOnly))
		}
	}
	for _, pid := range pids {
		ss := byPID[pid]
		var trend []string
		for _, s := range ss {
			trend = append(trend, fmt.Sprintf("%s %dMiB/%dg/%dfd/%dq", s.age.Round(time.Second), s.rssKB>>10, s.goroutines, s.fds, s.queue))
		}
		t.Logf("soak: node %s pid/role %s: %s", ss[0].node, pid, strings.Join(trend, ", "))
		var base *soakSample
		for i := range ss {
			if ss[i].age >= soakWarm {
				base = &ss[i]
				break
			}
		}
		if base == nil {
			continue
		}
		for _, s := range ss {
			if s.at.Before(base.at) {
				continue
			}
			if lim := int64(float64(base.rssKB)*soakRSSFactor) + soakRSSSlackKB; s.rssKB > lim {
				t.Errorf("soak: node %s pid/role %s RSS %d MiB at %s, past %d MiB (baseline %d MiB)", s.node, pid, s.rssKB>>10, s.age.Round(time.Second), lim>>10, base.rssKB>>10)
			}
			if s.goroutines > base.goroutines+soakGoroutineAdd {
				t.Errorf("soak: node %s pid/role %s %d goroutines at %s, baseline %d", s.node, pid, s.goroutines, s.age.Round(time.Second), base.goroutines)
			}
			if s.fds > base.fds+soakFDAdd {
				t.Errorf("soak: node %s pid/role %s %d open files at %s, baseline %d", s.node, pid, s.fds, s.age.Round(time.Second), base.fds)
			}
		}
	}
}
