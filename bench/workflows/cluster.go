package workflows

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/axe-sched/axe/bench/internal/benchkit"
	"github.com/axe-sched/axe/model"

	"github.com/axe-sched/axe/lib/freeport"
)

// node is one `axe serve` process of a phase.
type node struct {
	id, url, logPath string
	cmd              *exec.Cmd
	exited           chan struct{}
}

// cluster is the daemons of one side of a phase, on one fresh database.
type cluster struct {
	cfg   Config
	nodes []*node
	drop  func(context.Context) error
	api   *http.Client
	// deadlocks counts the requests answered 500 for a database deadlock, which post
	// retries: a client of the API would, and the run is not created then.
	deadlocks atomic.Int64
}

// startCluster starts n daemons (n > 1, or ha: `axe serve --ha`) on a fresh database of
// cfg.Store and waits until they listen and, with --ha, until every shard is held.
func startCluster(ctx context.Context, cfg Config, name string, n int, ha bool) (*cluster, error) {
	c := &cluster{cfg: cfg, api: &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
	var dsn string
	switch cfg.Store {
	case StoreSQLite:
		path := filepath.Join(cfg.Dir, fmt.Sprintf("%s-%d.db", name, time.Now().UnixNano()))
		dsn = "sqlite:" + path
		c.drop = func(context.Context) error {
			for _, suffix := range []string{"", "-wal", "-shm"} {
				_ = os.Remove(path + suffix)
			}
			return nil
		}
	case StoreMySQL:
		var err error
		if dsn, c.drop, err = benchkit.CreateDatabase(ctx, cfg.MySQL, "axe_wfbench"); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown store %q: want %q or %q", cfg.Store, StoreSQLite, StoreMySQL)
	}
	for i := range n {
		addr, err := freeAddr()
		if err != nil {
			c.close()
			return nil, err
		}
		nd := &node{id: fmt.Sprintf("n%d", i+1), url: "http://" + addr,
			logPath: filepath.Join(cfg.Dir, fmt.Sprintf("%s-n%d.log", name, i+1))}
		args := []string{"serve", "--addr", addr, "--db", dsn, "--pprof", "--log-format", "json"}
		if ha || n > 1 {
			args = append(args, "--ha", "--node-id", nd.id, "--advertise", nd.url,
				"--lease-ttl", cfg.LeaseTTL.String(), "--lease-renew", (cfg.LeaseTTL / 5).String())
		}
		if err := nd.start(cfg.Bin, args); err != nil {
			c.close()
			return nil, err
		}
		c.nodes = append(c.nodes, nd)
	}
	if ha || n > 1 {
		if err := c.waitHeld(ctx); err != nil {
			c.close()
			return nil, err
		}
	}
	return c, nil
}

func (n *node) start(bin string, args []string) error {
	logf, err := os.Create(n.logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	// Without the developer's AXE_ settings, which the daemon reads as flags.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AXE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		_ = logf.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("cannot start %s: %w", bin, err)
	}
	n.cmd, n.exited = cmd, make(chan struct{})
	listening := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening on ") {
				select {
				case listening <- struct{}{}:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		_ = logf.Close()
		close(n.exited)
	}()
	select {
	case <-listening:
		return nil
	case <-n.exited:
		return fmt.Errorf("node %s exited before listening; log tail: %s", n.id, tail(n.logPath))
	case <-time.After(2 * time.Minute):
		n.stop()
		return fmt.Errorf("node %s did not listen within 2 minutes; log tail: %s", n.id, tail(n.logPath))
	}
}

// stop asks the node to stop (SIGTERM) and kills it after 30 s.
func (n *node) stop() {
	select {
	case <-n.exited:
		return
	default:
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(30 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.exited
	}
}

func (n *node) cpu() time.Duration {
	d, _ := benchkit.ProcessCPU(n.cmd.Process.Pid)
	return d
}

// memory returns the node's resident set now and its peak (VmRSS, VmHWM), in bytes.
func (n *node) memory() (rss, peak int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", n.cmd.Process.Pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			peak = kb << 10
		}
	}
	return rss, peak
}

func (c *cluster) close() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Go(n.stop)
	}
	wg.Wait()
	if c.drop != nil {
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := c.drop(dctx); err != nil {
			c.cfg.Logger.Warn("cannot drop the benchmark database", "err", err)
		}
	}
	if !c.cfg.KeepLogs {
		for _, n := range c.nodes {
			_ = os.Remove(n.logPath)
		}
	}
}

func (c *cluster) cpu() time.Duration {
	var d time.Duration
	for _, n := range c.nodes {
		d += n.cpu()
	}
	return d
}

// waitHeld waits until the first node's cluster view shows every shard held, each node
// holding some.
func (c *cluster) waitHeld(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var v struct {
			Unowned string `json:"unowned"`
			Nodes   []struct {
				ID   string `json:"id"`
				Held int    `json:"shards_held"`
			} `json:"nodes"`
		}
		if err := c.get(ctx, c.nodes[0].url+"/api/v1/cluster", &v); err == nil {
			held, total := 0, 0
			for _, n := range v.Nodes {
				if n.Held > 0 {
					held++
				}
				total += n.Held
			}
			if held == len(c.nodes) && total == 256 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the %d nodes did not hold every shard within 2 minutes", len(c.nodes))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *cluster) get(ctx context.Context, url string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.api.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %.300s", url, resp.StatusCode, data)
	}
	return json.Unmarshal(data, out)
}

// post posts body to path on node i (round robin over the nodes), retrying while the
// node answers 503, 409 or 429 (a shard not held yet, a batch split in flight), and decodes
// a 2xx answer into out (when not nil).
func (c *cluster) post(ctx context.Context, i int, path string, body []byte, out any) error {
	n := c.nodes[i%len(c.nodes)]
	for try := 0; ; try++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.url+path, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.api.Do(req)
		var status int
		var data []byte
		if err == nil {
			status = resp.StatusCode
			data, _ = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if status/100 == 2 {
				if out != nil {
					return json.Unmarshal(data, out)
				}
				return nil
			}
		}
		retry := err == nil && (status == http.StatusServiceUnavailable || status == http.StatusConflict || status == http.StatusTooManyRequests)
		if err == nil && status == http.StatusInternalServerError && bytes.Contains(data, []byte("try restarting transaction")) {
			if c.deadlocks.Add(1) == 1 {
				c.cfg.Logger.Warn("a request met a database deadlock; retrying it (counted, logged once)", "path", path, "body", string(data))
			}
			retry = true
		}
		if !retry || try >= 100 || ctx.Err() != nil {
			return fmt.Errorf("POST %s to %s: %d %.300s %v", path, n.id, status, data, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// createTasks creates one-shot HTTP tasks named prefix-NNNNNN due evenly over span from due
// (span 0: all at due) through POST /api/v1/tasks/batch, in batches of 5,000 spread over
// the nodes.
func (c *cluster) createTasks(ctx context.Context, prefix string, n int, due time.Time, span time.Duration, url string) error {
	const batch = 5000
	var wg sync.WaitGroup
	errs := make(chan error, n/batch+1)
	for b := 0; b*batch < n; b++ {
		var body bytes.Buffer
		body.WriteByte('[')
		for i := b * batch; i < min(n, (b+1)*batch); i++ {
			if i > b*batch {
				body.WriteByte(',')
			}
			runAt := due.Add(time.Duration(i) * span / time.Duration(n)).UTC().Format(time.RFC3339Nano)
			fmt.Fprintf(&body, `{"name":"%s-%06d","trigger":"delay","run_at":%q,"callback":{"type":"http","url":%q},"timeout_sec":60}`, prefix, i, runAt, url)
		}
		body.WriteByte(']')
		wg.Go(func() {
			if err := c.post(ctx, b, "/api/v1/tasks/batch?on_conflict=skip", body.Bytes(), nil); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// createWorkflow creates a workflow from its definition.
func (c *cluster) createWorkflow(ctx context.Context, def map[string]any) error {
	body, err := json.Marshal(def)
	if err != nil {
		return err
	}
	return c.post(ctx, 0, "/api/v1/workflows", body, nil)
}

// owners returns, for each of names, the index of the node that holds its shard now (0
// when the view does not say): a run asked of another node is forwarded to that one.
func (c *cluster) owners(ctx context.Context, names []string) []int {
	out := make([]int, len(names))
	if len(c.nodes) == 1 {
		return out
	}
	var v struct {
		Shards []struct {
			Shard  int    `json:"shard"`
			Holder string `json:"holder"`
		} `json:"shards"`
	}
	if err := c.get(ctx, c.nodes[0].url+"/api/v1/cluster", &v); err != nil {
		return out
	}
	holder := map[int]string{}
	for _, sh := range v.Shards {
		holder[sh.Shard] = sh.Holder
	}
	for i, name := range names {
		for j, n := range c.nodes {
			if holder[model.ShardOf(name)] == n.id {
				out[i] = j
			}
		}
	}
	return out
}

// startRuns starts runs of the workflows names (round robin) with conc requests in flight,
// each asked of the node that holds the workflow's shard, and returns the run ids in the
// order asked.
func (c *cluster) startRuns(ctx context.Context, names []string, runs, conc int) ([]string, error) {
	owner := c.owners(ctx, names)
	ids := make([]string, runs)
	var (
		mu   sync.Mutex
		next int
		wg   sync.WaitGroup
		errs = make(chan error, conc)
	)
	for range conc {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= runs {
					return
				}
				var out struct {
					ID string `json:"id"`
				}
				if err := c.post(ctx, owner[i%len(names)], "/api/v1/workflows/"+names[i%len(names)]+"/run", []byte(`{}`), &out); err != nil {
					errs <- err
					return
				}
				ids[i] = out.ID
			}
		})
	}
	wg.Wait()
	close(errs)
	return ids, <-errs
}

// waitRunsEnded polls each run until it is no longer running and counts the states.
func (c *cluster) waitRunsEnded(ctx context.Context, ids []string, timeout time.Duration) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	states := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan string)
	var firstErr error
	for w := range 8 {
		wg.Go(func() {
			for id := range work {
				for {
					var r struct {
						State string `json:"state"`
					}
					err := c.get(ctx, c.nodes[w%len(c.nodes)].url+"/api/v1/workflow-runs/"+id, &r)
					if err == nil && r.State != "running" {
						mu.Lock()
						states[r.State]++
						mu.Unlock()
						break
					}
					if ctx.Err() != nil {
						mu.Lock()
						if firstErr == nil {
							firstErr = fmt.Errorf("run %s did not end: %v (last error %v)", id, ctx.Err(), err)
						}
						mu.Unlock()
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		})
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
	return states, firstErr
}

// profile takes a CPU profile of node 0 over seconds into cfg.ProfileDir/name.pprof, when a
// profile directory is set; the returned func waits for it.
func (c *cluster) profile(name string, seconds int) func() {
	if c.cfg.ProfileDir == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		client := &http.Client{Timeout: time.Duration(seconds+60) * time.Second}
		resp, err := client.Get(c.nodes[0].url + "/debug/pprof/profile?seconds=" + strconv.Itoa(seconds))
		if err != nil {
			c.cfg.Logger.Warn("cannot profile the daemon", "err", err)
			return
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			c.cfg.Logger.Warn("cannot profile the daemon", "status", resp.StatusCode, "body", string(data))
			return
		}
		path := filepath.Join(c.cfg.ProfileDir, name+".pprof")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			c.cfg.Logger.Warn("cannot write the profile", "err", err)
			return
		}
		c.cfg.Logger.Info("daemon profile written", "path", path)
	}()
	return func() { <-done }
}

func freeAddr() (string, error) { return freeport.Addr() }

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 3000 {
		return "…" + string(b[len(b)-3000:])
	}
	return string(b)
}

// buildAxe builds this tree's axe binary into dir.
func buildAxe(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "axe")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/axe-sched/axe/cmd/axe")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("cannot build axe: %w: %s", err, out)
	}
	return bin, nil
}

var errTimeout = errors.New("timed out")
