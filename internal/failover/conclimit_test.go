package failover

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// busyTarget is a downstream that works on each call for the milliseconds of its query
// parameter ms whatever its caller does (a caller killed mid-call does not end the work), and
// counts the calls it works on at once: what a concurrency limit promises a downstream.
type busyTarget struct {
	srv *httptest.Server

	mu       sync.Mutex
	now      int
	most     int
	tickets  map[string]int // receipts by ticket: (task, fire time, attempt)
	tasks    map[string]int // receipts by task
	received int
}

func newBusyTarget(t *testing.T) *busyTarget {
	t.Helper()
	b := &busyTarget{tickets: map[string]int{}, tasks: map[string]int{}}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.now++
		b.most = max(b.most, b.now)
		b.tickets[r.Header.Get("X-Axe-Ticket")]++
		b.tasks[r.Header.Get("X-Axe-Task")]++
		b.received++
		b.mu.Unlock()
		ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
		time.Sleep(time.Duration(ms) * time.Millisecond)
		b.mu.Lock()
		b.now--
		b.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *busyTarget) snapshot() (most, received int, tickets, tasks map[string]int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	tickets, tasks = map[string]int{}, map[string]int{}
	for k, v := range b.tickets {
		tickets[k] = v
	}
	for k, v := range b.tasks {
		tasks[k] = v
	}
	return b.most, b.received, tickets, tasks
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

// TestShardsConcurrencyLimit: three `axe serve --ha` nodes keep a limit of 5 runs in flight of
// one concurrency key across the cluster while 300 one-shot tasks of it, each 100–500 ms of
// work (3 s for one in 25, workMS), fall due at once, spread over every node's shards; the node holding most slots is
// killed (SIGKILL) mid-way and restarted. The downstream never works on more than 5 at once
// (the dead node's slots come back only once its runs are resolved: its HTTP runs are recorded
// lost by the next owner and their slots held until their deadline), nor when the node then
// holding most slots is frozen (SIGSTOP) for twice the lease TTL and woken; every task reaches
// it, no (task, fire time, attempt) twice, and no slot row is left at the end.
func TestShardsConcurrencyLimit(t *testing.T) {
	t.Parallel()
	c := newShardCluster(t)
	nodes := c.bootShards(3, false)
	tg := newBusyTarget(t)
	const limit, count = 5, 300
	status, body, err := c.put(nodes[1].url, "/api/v1/concurrency-limits/key/lim5", map[string]any{"max": limit})
	if err != nil || status != http.StatusOK {
		t.Fatalf("PUT the limit: %d %s %v", status, body, err)
	}
	at := time.Now().Add(4 * time.Second)
	delay := time.Until(at).Milliseconds()
	specs := make([]map[string]any, count)
	for i := range specs {
		specs[i] = map[string]any{
			// Fire times 5 ms apart, so the nodes' fires interleave: slots go by fire time
			// across nodes (a batch is split by owner, each part created a little later).
			"name": fmt.Sprintf("lim5-%03d", i), "group": "limited", "delay_ms": delay + int64(5*i), "timeout_sec": 5,
			"concurrency_key": "lim5",
			"callback":        map[string]any{"type": "http", "url": fmt.Sprintf("%s/work?ms=%d", tg.srv.URL, workMS(i))},
		}
	}
	for try := 0; ; try++ {
		status, body, err := c.post(nodes[0].url, "/api/v1/tasks/batch?on_conflict=skip", specs)
		if err == nil && status == http.StatusOK {
			break
		}
		if try >= 20 || (err == nil && status != http.StatusServiceUnavailable && status != http.StatusConflict) {
			t.Fatalf("create the tasks: %d %s %v", status, body, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Kill the node holding most slots once a third of the runs reached the downstream.
	deadline := time.Now().Add(2 * time.Minute)
	var samples []map[string]int // who holds the slots, sampled: nodes' fires due at one instant share them
	lastSample := time.Time{}
	for {
		_, received, _, _ := tg.snapshot()
		if received >= count/3 {
			break
		}
		if received > 0 && time.Since(lastSample) > 500*time.Millisecond {
			samples = append(samples, c.slotsByNode())
			lastSample = time.Now()
		}
		if time.Now().After(deadline) {
			_, received, _, _ := tg.snapshot()
			t.Fatalf("only %d of %d runs reached the downstream in 2 minutes", received, count)
		}
		time.Sleep(pollEvery)
	}
	t.Logf("slots held by node before the kill, every 0.5 s: %v", samples)
	held := c.slotsByNode()
	victim := nodes[0]
	for _, n := range nodes {
		if held[n.id] > held[victim.id] {
			victim = n
		}
	}
	fault := time.Now()
	victim.kill(t)
	took := c.waitShards(others(nodes, victim), false, c.ttl+shardSlack+10*time.Second).Sub(fault)
	t.Logf("killed %s holding %d of the slots (%v); its shards were taken over in %s", victim.id, held[victim.id], held, took.Round(time.Millisecond))
	c.start(victim)
	c.waitShards(nodes, true, roleTimeout)
	// Then freeze (SIGSTOP) the node holding most slots past its leases, once two thirds ran:
	// the others take its shards and record its runs lost; woken, it gives its shards up by
	// its own clock and its late ends are refused at the fence.
	deadline = time.Now().Add(2 * time.Minute)
	for {
		if _, received, _, _ := tg.snapshot(); received >= 2*count/3 {
			break
		}
		if time.Now().After(deadline) {
			_, received, _, _ := tg.snapshot()
			t.Fatalf("only %d of %d runs reached the downstream before the SIGSTOP", received, count)
		}
		time.Sleep(pollEvery)
	}
	held = c.slotsByNode()
	frozen := nodes[0]
	for _, n := range nodes {
		if held[n.id] > held[frozen.id] {
			frozen = n
		}
	}
	stopped := time.Now()
	frozen.signal(t, syscall.SIGSTOP)
	took = c.waitShards(others(nodes, frozen), false, c.ttl+shardSlack+10*time.Second).Sub(stopped)
	time.Sleep(time.Until(stopped.Add(2 * c.ttl)))
	frozen.signal(t, syscall.SIGCONT)
	c.waitShards(nodes, true, roleTimeout)
	t.Logf("froze %s holding %d of the slots (%v) for %s; its shards were taken over in %s", frozen.id, held[frozen.id], held,
		time.Since(stopped).Round(time.Millisecond), took.Round(time.Millisecond))
	deadline = time.Now().Add(3 * time.Minute)
	for {
		_, _, _, tasks := tg.snapshot()
		if len(tasks) == count {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d tasks reached the downstream within 3 minutes of the kill", len(tasks), count)
		}
		time.Sleep(pollEvery)
	}
	// Every run ended in the store and gave its slot back.
	deadline = time.Now().Add(time.Minute)
	for {
		var open, slots int
		if err := c.db.QueryRow(`SELECT COUNT(*) FROM task_run WHERE result = 'running'`).Scan(&open); err != nil {
			t.Fatal(err)
		}
		if err := c.db.QueryRow(`SELECT COUNT(*) FROM concurrency_slot`).Scan(&slots); err != nil {
			t.Fatal(err)
		}
		if open == 0 && slots == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the last task ran: %d runs still running, %d slot rows left", open, slots)
		}
		time.Sleep(pollEvery)
	}
	most, received, tickets, tasks := tg.snapshot()
	if most > limit {
		t.Errorf("the downstream worked on %d runs of key lim5 at once, over the limit of %d", most, limit)
	}
	dups := 0
	for ticket, n := range tickets {
		if n > 1 {
			dups++
			t.Errorf("run %s reached the downstream %d times", ticket, n)
		}
	}
	var lost, runs int
	if err := c.db.QueryRow(`SELECT COUNT(*), COALESCE(SUM(result = 'lost'), 0) FROM task_run WHERE task_name LIKE 'lim5-%'`).Scan(&runs, &lost); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d tasks, %d receipts (%d runs recorded, %d of them recorded lost after the kill or the freeze, their slots held until their deadline), at most %d at once under a limit of %d; %d duplicates",
		len(tasks), received, runs, lost, most, limit, dups)
}

// workMS is how long the downstream works on task i's run: 100–500 ms, and 3 s for one task
// in 25, so that runs are still being worked on when the node that sent them is killed and
// the next owner records them lost: their slots must stay held until their deadline (5 s).
func workMS(i int) int {
	if i%25 == 0 {
		return 3000
	}
	return 100 + rand.IntN(401)
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
