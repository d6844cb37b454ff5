package failover

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// limitTarget is a downstream that works on each call for the milliseconds of its query
// parameter ms whatever its caller does (a caller killed or frozen mid-call does not end the
// work), and counts, for the concurrency key of its query parameter key, the calls it works
// on at every instant: what a concurrency limit promises a downstream. It keeps every call as
// a Receipt for the suite's audit, and never de-duplicates.
type limitTarget struct {
	srv *httptest.Server

	mu       sync.Mutex
	now      map[string]map[string]bool // by key: the tickets it works on now
	most     map[string]int             // by key: the most it worked on at once
	over     []string                   // calls that found their key over its limit, and what was in flight
	limits   map[string]int             // the limit of each key, to name the calls over it
	receipts []Receipt
	byPrefix map[string]int // receipts by task name prefix (up to the first '-')
}

func newLimitTarget(t *testing.T, limits map[string]int) *limitTarget {
	t.Helper()
	lt := &limitTarget{now: map[string]map[string]bool{}, most: map[string]int{}, limits: limits, byPrefix: map[string]int{}}
	lt.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			ScheduledAt int64 `json:"scheduled_at"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		attempt, _ := strconv.Atoi(r.Header.Get("X-Axe-Attempt"))
		epoch, _ := strconv.ParseInt(r.Header.Get("X-Axe-Epoch"), 10, 64)
		task, ticket := r.Header.Get("X-Axe-Task"), r.Header.Get("X-Axe-Ticket")
		key := r.URL.Query().Get("key")
		// A ticket can arrive twice (a duplicate, which the audit reports): count calls, not
		// tickets, so a duplicate counts too.
		call := ticket + "#" + strconv.FormatInt(time.Now().UnixNano(), 10)
		lt.mu.Lock()
		in := lt.now[key]
		if in == nil {
			in = map[string]bool{}
			lt.now[key] = in
		}
		in[call] = true
		lt.most[key] = max(lt.most[key], len(in))
		if m, ok := lt.limits[key]; ok && len(in) > m {
			names := make([]string, 0, len(in))
			for c := range in {
				names = append(names, c[:strings.IndexByte(c, '#')])
			}
			sort.Strings(names)
			lt.over = append(lt.over, fmt.Sprintf("%s at %s: %d of key %s in flight: %v", ticket,
				time.Now().UTC().Format("15:04:05.000"), len(in), key, names))
		}
		lt.receipts = append(lt.receipts, Receipt{Task: task, Ticket: ticket, Attempt: attempt,
			ScheduledAt: body.ScheduledAt, Epoch: epoch, At: time.Now(), Via: "http"})
		prefix, _, _ := strings.Cut(task, "-")
		lt.byPrefix[prefix]++
		lt.mu.Unlock()
		ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
		time.Sleep(time.Duration(ms) * time.Millisecond)
		lt.mu.Lock()
		delete(in, call)
		lt.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(lt.srv.Close)
	return lt
}

// received is how many calls of tasks named prefix-… arrived.
func (lt *limitTarget) received(prefix string) int {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return lt.byPrefix[prefix]
}

func (lt *limitTarget) all() []Receipt {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return slices.Clone(lt.receipts)
}

// inFlight is how many calls the target works on now, in every key.
func (lt *limitTarget) inFlight() int {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	n := 0
	for _, in := range lt.now {
		n += len(in)
	}
	return n
}

// mostOf returns the most calls worked on at once in key, and the calls found over a limit.
func (lt *limitTarget) mostOf(key string) (int, []string) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return lt.most[key], slices.Clone(lt.over)
}

// slotsByNode counts the concurrency slots held in the store by the holder of each run's
// shard.
func (c *cluster) slotsByNode() map[string]int {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := c.db.QueryContext(ctx, `SELECT l.holder, COUNT(*) FROM concurrency_slot s
		JOIN lease l ON l.name = CONCAT('shard/', LPAD(s.shard, 3, '0')) GROUP BY l.holder`)
	if err != nil {
		c.t.Fatalf("cannot count the slots: %v", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var h string
		var n int
		if err := rows.Scan(&h, &n); err != nil {
			c.t.Fatal(err)
		}
		out[h] = n
	}
	return out
}

// mostSlots returns the node of nodes holding most slots now, and every node's count.
func (c *cluster) mostSlots(nodes []*node) (*node, map[string]int) {
	held := c.slotsByNode()
	victim := nodes[0]
	for _, n := range nodes {
		if held[n.id] > held[victim.id] {
			victim = n
		}
	}
	return victim, held
}

// limitSpec is the JSON of one task of the limit scenario.
type limitSpec struct {
	Name           string         `json:"name"`
	Group          string         `json:"group"`
	DelayMS        int64          `json:"delay_ms"`
	TimeoutSec     int            `json:"timeout_sec"`
	ConcurrencyKey string         `json:"concurrency_key"`
	Callback       map[string]any `json:"callback"`
}

// createLimited creates specs through via in batches (a shard moving refuses a batch, which
// is sent again: on_conflict=skip keeps what was created) and adds them to l, due at their
// delays from now.
func (c *cluster) createLimited(l *load, via *node, specs []limitSpec) {
	c.t.Helper()
	for from := 0; from < len(specs); from += 1000 {
		part := specs[from:min(from+1000, len(specs))]
		for try := 0; ; try++ {
			status, body, err := c.post(via.url, "/api/v1/tasks/batch?on_conflict=skip", part)
			if err == nil && status == http.StatusOK {
				break
			}
			if try >= 30 || (err == nil && status != http.StatusServiceUnavailable && status != http.StatusConflict) {
				c.t.Fatalf("create %d limited tasks through %s: %d %s %v", len(part), via.id, status, body, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	for _, s := range specs {
		// The latest instant it can fall due: its delay from after the last batch.
		l.tasks = append(l.tasks, AuditTask{Name: s.Name, Due: time.Now().UnixMilli() + s.DelayMS + 1000})
	}
}

// waitReceived waits until the target got at least n calls of tasks prefix-….
func (c *cluster) waitReceived(lt *limitTarget, prefix string, n int, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for lt.received(prefix) < n {
		if time.Now().After(deadline) {
			c.t.Fatalf("only %d of %d runs of %s-… reached the downstream within %s", lt.received(prefix), n, prefix, timeout)
		}
		time.Sleep(pollEvery)
	}
}

// Sizes of TestShardsConcurrencyLimit.
const (
	limOne      = 5    // the limit of the one key
	limOneRuns  = 2000 // its runs
	limKeys     = 50   // the keys of the many
	limKeysMax  = 2    // each key's limit
	limWaves    = 4    // the many keys' tasks fall due in waves: one before the faults, one at each
	limWaveRuns = 500  // tasks of a wave, spread over the keys
)

// TestShardsConcurrencyLimit: three `axe serve --ha` nodes keep concurrency limits across the
// cluster through faults, in one run: a limit of 5 on one key with 2,000 one-shot tasks of it
// (100–500 ms of work each) all waiting, and at the same time 50 keys limited to 2 each, whose
// 2,000 tasks fall due in four waves of 500 (10 a key; one run in 20 works 6 s, so that runs
// outlive a takeover: a dead node's slots must stay held until its runs are resolved). After
// a quarter of the one key's runs, the node holding most slots is killed (SIGKILL) as a wave
// is in flight and restarted; after a half, the node then holding most slots is frozen
// (SIGSTOP) past its leases and woken; after 60%, every node is restarted in turn (SIGTERM).
// The downstream counts the calls it works on at every instant, by key: never more than a
// key's limit. The audit: every task reached it, none twice, no gap; every run ended and no
// slot row is left.
func TestShardsConcurrencyLimit(t *testing.T) {
	scenario(t) // each scenario has its own database, ports and processes
	began := time.Now()
	c := newShardCluster(t)
	nodes := c.bootShards(3, false)
	limits := map[string]int{"one": limOne}
	for k := range limKeys {
		limits[fmt.Sprintf("k%02d", k)] = limKeysMax
	}
	lt := newLimitTarget(t, limits)
	keys := make([]string, 0, len(limits))
	for k := range limits {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		via := nodes[i%len(nodes)]
		for try := 0; ; try++ {
			status, body, err := c.put(via.url, "/api/v1/concurrency-limits/key/"+k, map[string]any{"max": limits[k]})
			if err == nil && status == http.StatusOK {
				break
			}
			// 503: a node did not apply it ("the call may be made again").
			if try >= 5 || (err == nil && status != http.StatusServiceUnavailable) {
				t.Fatalf("PUT the limit of %s: %d %s %v", k, status, body, err)
			}
			t.Logf("PUT the limit of %s through %s, try %d: %d %s %v", k, via.id, try+1, status, body, err)
			time.Sleep(200 * time.Millisecond)
		}
	}
	l := &load{}
	// The one key's tasks: fire times 5 ms apart from 4 s ahead, so that the nodes' fires
	// interleave and slots go by fire time across nodes.
	one := make([]limitSpec, limOneRuns)
	for i := range one {
		one[i] = limitSpec{Name: fmt.Sprintf("one-%04d", i), Group: "limited", DelayMS: 4000 + int64(5*i), TimeoutSec: 5,
			ConcurrencyKey: "one", Callback: map[string]any{"type": "http",
				"url": fmt.Sprintf("%s/work?key=one&ms=%d", lt.srv.URL, 100+rand.IntN(401))}}
	}
	c.createLimited(l, nodes[0], one)
	// wave creates the many keys' wave w due in 2 s through via and waits until a fifth of it
	// reached the downstream (many of its runs are in flight then).
	wave := func(w int, via *node) {
		specs := make([]limitSpec, limWaveRuns)
		for i := range specs {
			k := fmt.Sprintf("k%02d", i%limKeys)
			ms := 100 + rand.IntN(401)
			if i%20 == w%20 {
				ms = 6000
			}
			specs[i] = limitSpec{Name: fmt.Sprintf("w%d-%03d", w, i), Group: "keyed", DelayMS: 2000 + int64(i/limKeys)*3,
				TimeoutSec: 10, ConcurrencyKey: k,
				Callback: map[string]any{"type": "http", "url": fmt.Sprintf("%s/work?key=%s&ms=%d", lt.srv.URL, k, ms)}}
		}
		c.createLimited(l, via, specs)
		c.waitReceived(lt, fmt.Sprintf("w%d", w), limWaveRuns/5, 2*time.Minute)
	}
	wave(0, nodes[1])

	// Kill -9 the node holding most slots after a quarter of the one key's runs, as wave 1
	// is in flight; restart it.
	var faults []Fault
	c.waitReceived(lt, "one", limOneRuns/4, 5*time.Minute)
	wave(1, nodes[2])
	victim, held := c.mostSlots(nodes)
	fault := time.Now()
	faults = append(faults, Fault(fault.UnixMilli()))
	inflight := lt.inFlight()
	victim.kill(t)
	took := c.waitShards(others(nodes, victim), false, c.ttl+c.slack()+20*time.Second).Sub(fault)
	t.Logf("kill -9 of %s holding %d of the slots (%v), %d calls in flight at the downstream; its shards taken over in %s",
		victim.id, held[victim.id], held, inflight, took.Round(time.Millisecond))
	c.start(victim)
	c.waitShards(nodes, true, roleTimeout)

	// SIGSTOP the node then holding most slots past its leases after half the runs, as wave 2
	// is in flight; wake it.
	c.waitReceived(lt, "one", limOneRuns/2, 5*time.Minute)
	wave(2, nodes[0])
	frozen, held := c.mostSlots(nodes)
	stopped := time.Now()
	faults = append(faults, Fault(stopped.UnixMilli()))
	inflight = lt.inFlight()
	frozen.signal(t, syscall.SIGSTOP)
	took = c.waitShards(others(nodes, frozen), false, c.ttl+c.slack()+20*time.Second).Sub(stopped)
	time.Sleep(time.Until(stopped.Add(2 * c.ttl)))
	frozen.signal(t, syscall.SIGCONT)
	c.waitShards(nodes, true, roleTimeout)
	t.Logf("SIGSTOP of %s holding %d of the slots (%v), %d calls in flight at the downstream, for %s; its shards taken over in %s",
		frozen.id, held[frozen.id], held, inflight, time.Since(stopped).Round(time.Millisecond), took.Round(time.Millisecond))

	// Rolling restart after 60% of the runs, as wave 3 is in flight: each node in turn
	// stopped (SIGTERM), started, and the shares even again.
	c.waitReceived(lt, "one", 3*limOneRuns/5, 5*time.Minute)
	wave(3, nodes[1])
	rolled := time.Now()
	for _, n := range nodes {
		n.signal(t, syscall.SIGTERM)
		n.mu.Lock()
		exited := n.exited
		n.mu.Unlock()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Fatalf("node %s did not stop within 30 s of SIGTERM", n.id)
		}
		c.start(n)
		c.waitShards(nodes, true, roleTimeout)
	}
	t.Logf("rolling restart of the three nodes in %s, %d of the one key's runs received by then",
		time.Since(rolled).Round(time.Millisecond), lt.received("one"))

	// Every task ran: each has an ended run, none is running, and every slot was given back.
	deadline := time.Now().Add(10 * time.Minute)
	for {
		var ended, open, slots int
		if err := c.db.QueryRow(`SELECT COUNT(DISTINCT IF(result <> 'running', task_name, NULL)), COALESCE(SUM(result = 'running'), 0) FROM task_run`).Scan(&ended, &open); err != nil {
			t.Fatal(err)
		}
		if err := c.db.QueryRow(`SELECT COUNT(*) FROM concurrency_slot`).Scan(&slots); err != nil {
			t.Fatal(err)
		}
		if ended == len(l.tasks) && open == 0 && slots == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ten minutes after the rolling restart: %d of %d tasks have an ended run, %d runs still running, %d slot rows left; %d of the one key's runs received",
				ended, len(l.tasks), open, slots, lt.received("one"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, k := range keys {
		most, over := lt.mostOf(k)
		if most > limits[k] {
			t.Errorf("the downstream worked on %d runs of key %s at once, over its limit of %d; first calls over it: %v",
				most, k, limits[k], over[:min(len(over), 5)])
		}
	}
	mostOne, _ := lt.mostOf("one")
	mostKeyed := 0
	for _, k := range keys[:limKeys] {
		m, _ := lt.mostOf(k)
		mostKeyed = max(mostKeyed, m)
	}
	if mostOne < limOne {
		t.Errorf("the downstream never worked on %d runs of key one at once (at most %d): the limit did not fill", limOne, mostOne)
	}
	a, err := Check(l.tasks, Span{From: 0, To: math.MaxInt64}, faults, c.runs(), c.actions(), lt.all())
	if err != nil {
		t.Fatal(err)
	}
	if !a.OK() || a.Fires != limOneRuns+limWaves*limWaveRuns || a.Ran != a.Fires {
		t.Errorf("audit: %s", a)
	}
	if bad := epochRegressions(lt.all()); len(bad) > 0 {
		t.Errorf("%d runs reached the downstream at an epoch below one their shard had already dispatched at, first: %v", len(bad), bad[:min(len(bad), 5)])
	}
	var runs, lost, lostUnreceived int
	if err := c.db.QueryRow(`SELECT COUNT(*), COALESCE(SUM(result = 'lost'), 0) FROM task_run`).Scan(&runs, &lost); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, r := range lt.all() {
		got[r.Ticket] = true
	}
	phases := []string{"kill -9", "SIGSTOP", "rolling restart"}
	at := []int64{int64(faults[0]), int64(faults[1]), rolled.UnixMilli()}
	byPhase := map[string][2]int{} // runs recorded lost since each fault: all, never received
	for _, r := range c.runs() {
		if r.Result != "lost" {
			continue
		}
		phase := "before the faults"
		for i := range phases {
			if r.DispatchedAt >= at[i]-10_000 { // dispatched within its timeout before the fault, or after
				phase = phases[i]
			}
		}
		n := byPhase[phase]
		n[0]++
		if !got[r.Ticket] {
			lostUnreceived++
			n[1]++
		}
		byPhase[phase] = n
	}
	t.Logf("runs recorded lost (all, never received) by the fault they followed: %v", byPhase)
	t.Logf("audit: %s", a)
	t.Logf("%d tasks, %d runs recorded (%d recorded lost by a next owner, %d of them never received); at most %d of key one at once (limit %d), at most %d of a key of the %d at once (limit %d); %s in all",
		len(l.tasks), runs, lost, lostUnreceived, mostOne, limOne, mostKeyed, limKeys, limKeysMax, time.Since(began).Round(time.Second))
}

// put sends a JSON body to base+path with PUT and returns the status and body.
func (c *cluster) put(base, path string, body any) (int, []byte, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequest(http.MethodPut, base+path, bytes.NewReader(raw))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}
