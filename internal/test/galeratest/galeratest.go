// Package galeratest starts a three-node MariaDB Galera cluster on loopback for tests: three
// mariadbd processes from Debian's packages (mariadb-server, galera-4, rsync), each with its
// own data directory under a temporary directory and its own client, group-communication,
// IST and SST ports, the first bootstrapped with --wsrep-new-cluster and the other two
// joining it by an rsync state transfer. A test can kill a node (SIGKILL), freeze it
// (SIGSTOP), cut it off from the group (gmcast.isolate) and restart it, which rejoins the
// cluster by IST or SST.
//
// It owns only the processes and the directory it created: every node reads nothing but its
// own --defaults-file, listens on 127.0.0.1 ports it picked (never the machine's MariaDB on
// 3306), and is killed, with its directory removed, when the test ends. A node also dies with
// the test process (SIGKILL on parent death), so a crashed test binary leaves no node behind.
//
// It is test support: production code must not import it.
package galeratest

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/axe-sched/axe/lib/freeport"
)

// Environment variables read by Start.
const (
	// EnvRequire set to 1 turns "Galera cannot run here" from a skip into a failure, so CI
	// cannot pass by silently skipping the Galera tests (scripts/test.sh sets it).
	EnvRequire = "AXE_REQUIRE_GALERA"
)

// Size is the number of nodes of a cluster: the smallest that survives the loss of any one.
const Size = 3

// Files of Debian's packages the cluster runs.
const (
	mariadbd  = "/usr/sbin/mariadbd"
	installDB = "/usr/bin/mariadb-install-db"
	provider  = "/usr/lib/galera/libgalera_smm.so"
	sstScript = "/usr/bin/wsrep_sst_rsync"
	rsyncBin  = "/usr/bin/rsync"
)

// Bounds of the harness's waits. A node joining by SST on a loaded two-core machine takes
// tens of seconds; these only keep a broken cluster from hanging the test run.
const (
	startTimeout = 3 * time.Minute
	pollEvery    = 100 * time.Millisecond
	// statusTimeout bounds one status query, so a frozen node does not stall a poll.
	statusTimeout = 2 * time.Second
)

// Sentinel errors.
var (
	// ErrNotRunning is returned by calls that need a running node on one that is not.
	ErrNotRunning = errors.New("galeratest: node is not running")
)

// Cluster is a running three-node Galera cluster.
type Cluster struct {
	dir   string
	nodes []*Node
	// cred runs the nodes as the mysql user when the test runs as root: mariadbd refuses
	// to run as root without --user, and the rsync daemon of an SST, started by the joiner,
	// would drop to nobody and could not write the data directory.
	cred *syscall.Credential
	// Startup is how long the cluster took to start: from the first mariadbd exec to three
	// synced nodes in one primary component (the data directory's initialisation excluded,
	// it is InitTime).
	Startup time.Duration
	// InitTime is how long mariadb-install-db took for the first node's data directory.
	InitTime time.Duration

	closeOnce sync.Once
}

// Node is one mariadbd of a cluster.
type Node struct {
	c *Cluster
	// Index is the node's position, 0 to Size-1; Name is "n1" to "n3".
	Index int
	Name  string
	// Port is the client port on 127.0.0.1; the others are Galera's.
	Port, GcommPort, ISTPort, SSTPort int
	dir                               string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd has exited
	paused bool
}

// Start starts a fresh cluster and stops it when t ends. It skips t with the reason when
// Galera cannot run here (galera-4 missing and not root to install it), or fails t instead
// when AXE_REQUIRE_GALERA=1; it fails t when the cluster does not come up.
func Start(t testing.TB) *Cluster {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%v, but %s=1", err, EnvRequire)
		}
		t.Skipf("skipping Galera: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := start(ctx)
	if c != nil {
		t.Cleanup(func() {
			if t.Failed() {
				c.keepLogs(t)
			}
			c.Close()
		})
	}
	if err != nil {
		t.Fatalf("cannot start the Galera cluster: %v", err)
	}
	t.Logf("galera: %d nodes synced %s after the first exec (data directory initialised in %s)",
		Size, c.Startup.Round(time.Millisecond), c.InitTime.Round(time.Millisecond))
	return c
}

var (
	installOnce sync.Once
	installErr  error
)

// Available reports why a cluster cannot run here, or nil. When a package is missing and
// the process is root, it first installs galera-4 and rsync (and mariadb-server when
// mariadbd is missing) with apt-get, once per process.
func Available() error {
	installOnce.Do(func() {
		missing := missingPackages()
		if len(missing) == 0 {
			return
		}
		if os.Geteuid() != 0 {
			installErr = fmt.Errorf("%s not installed and not root to install them (apt-get install %s)",
				strings.Join(missing, ", "), strings.Join(missing, " "))
			return
		}
		if out, err := aptInstall(missing); err != nil {
			installErr = fmt.Errorf("cannot install %s: %w\n%s", strings.Join(missing, " "), err, out)
			return
		}
		if still := missingPackages(); len(still) > 0 {
			installErr = fmt.Errorf("%s still missing after apt-get install", strings.Join(still, ", "))
		}
	})
	return installErr
}

// missingPackages names the Debian packages whose files the cluster needs and lacks.
func missingPackages() []string {
	var out []string
	if !exists(mariadbd) || !exists(installDB) {
		out = append(out, "mariadb-server")
	}
	if !exists(provider) {
		out = append(out, "galera-4")
	}
	if !exists(rsyncBin) {
		out = append(out, "rsync")
	}
	if !exists(sstScript) && !slices.Contains(out, "mariadb-server") {
		// The SST scripts ship with the server package.
		out = append(out, "mariadb-server")
	}
	return out
}

func aptInstall(pkgs []string) ([]byte, error) {
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	update := exec.Command("apt-get", "update", "-q")
	update.Env = env
	if out, err := update.CombinedOutput(); err != nil {
		return out, err
	}
	install := exec.Command("apt-get", append([]string{"install", "-y", "-q", "--no-install-recommends"}, pkgs...)...)
	install.Env = env
	return install.CombinedOutput()
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// start builds and starts a cluster. On error the returned cluster (if any) holds what was
// started, for the caller to log and close.
func start(ctx context.Context) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "axe-galera-")
	if err != nil {
		return nil, fmt.Errorf("cannot create the cluster directory: %w", err)
	}
	c := &Cluster{dir: dir}
	// MkdirTemp makes the directory 0700; the nodes may run as another user.
	if err := os.Chmod(dir, 0o755); err != nil {
		return c, fmt.Errorf("cannot open up the cluster directory: %w", err)
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("mysql")
		if err != nil {
			return c, fmt.Errorf("cannot find the mysql user to run the nodes as: %w", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	ports, err := freeport.Ports(4 * Size)
	if err != nil {
		return c, err
	}
	for i := range Size {
		n := &Node{c: c, Index: i, Name: fmt.Sprintf("n%d", i+1),
			Port: ports[4*i], GcommPort: ports[4*i+1], ISTPort: ports[4*i+2], SSTPort: ports[4*i+3],
			dir: filepath.Join(dir, fmt.Sprintf("n%d", i+1))}
		c.nodes = append(c.nodes, n)
	}
	name := "axe_" + filepath.Base(dir)
	for _, n := range c.nodes {
		if err := os.MkdirAll(n.datadir(), 0o755); err != nil {
			return c, fmt.Errorf("cannot create %s's data directory: %w", n.Name, err)
		}
		if err := os.WriteFile(n.cnf(), []byte(n.config(name)), 0o644); err != nil {
			return c, fmt.Errorf("cannot write %s's configuration: %w", n.Name, err)
		}
	}
	if err := c.chown(); err != nil {
		return c, err
	}
	// Only the first node's data directory is initialised: the others start empty and get
	// theirs from it by SST as they join, as a node added to a running cluster does.
	began := time.Now()
	first := c.nodes[0]
	install := exec.CommandContext(ctx, installDB, "--defaults-file="+first.cnf(),
		"--auth-root-authentication-method=normal", "--skip-test-db")
	install.SysProcAttr = c.sysProcAttr()
	if out, err := install.CombinedOutput(); err != nil {
		return c, fmt.Errorf("cannot initialise %s's data directory: %w\n%s", first.Name, err, out)
	}
	c.InitTime = time.Since(began)

	began = time.Now()
	if err := first.spawn("--wsrep-new-cluster"); err != nil {
		return c, err
	}
	if err := first.WaitSynced(ctx); err != nil {
		return c, fmt.Errorf("cannot bootstrap the cluster: %w", err)
	}
	for _, n := range c.nodes[1:] {
		if err := n.spawn(); err != nil {
			return c, err
		}
	}
	if err := c.WaitSynced(ctx); err != nil {
		return c, err
	}
	c.Startup = time.Since(began)
	return c, nil
}

func (c *Cluster) chown() error {
	if c.cred == nil {
		return nil
	}
	return filepath.Walk(c.dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, int(c.cred.Uid), int(c.cred.Gid))
	})
}

func (c *Cluster) sysProcAttr() *syscall.SysProcAttr {
	// Pdeathsig is set after the credentials change (so it survives it) and kills the
	// node when the test process dies.
	return &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

// keepLogs shows the end of each node's error log, and copies the whole logs to
// $AXE_ARTIFACTS/galera/TEST/ when that is set (scripts/test.sh sets it).
func (c *Cluster) keepLogs(t testing.TB) {
	dir := ""
	if a := os.Getenv("AXE_ARTIFACTS"); a != "" {
		dir = filepath.Join(a, "galera", strings.ReplaceAll(t.Name(), "/", "_"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Logf("cannot keep the nodes' logs: %v", err)
			dir = ""
		}
	}
	for _, n := range c.nodes {
		t.Logf("%s log (last lines):\n%s", n.Name, n.LogTail(40))
		if dir == "" {
			continue
		}
		if b, err := os.ReadFile(n.logFile()); err == nil {
			dst := filepath.Join(dir, n.Name+".log")
			if err := os.WriteFile(dst, b, 0o644); err == nil {
				t.Logf("%s's whole log: %s", n.Name, dst)
			}
		}
	}
}

// Node returns node i (0 to Size-1).
func (c *Cluster) Node(i int) *Node { return c.nodes[i] }

// Nodes returns the nodes in order.
func (c *Cluster) Nodes() []*Node { return append([]*Node(nil), c.nodes...) }

// Exec runs q through the first running, unpaused node that takes it, each try bounded to
// 30 s; it returns every node's error when none did. Statements replicate, so one node is
// enough (a CREATE DATABASE, a shared table).
func (c *Cluster) Exec(q string) error {
	var errs []error
	for _, n := range c.Nodes() {
		if !n.Running() || n.Paused() {
			continue
		}
		err := func() error {
			db, err := n.DB()
			if err != nil {
				return err
			}
			defer db.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err = db.ExecContext(ctx, q)
			return err
		}()
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", n.Name, err))
	}
	return fmt.Errorf("no Galera node ran %q: %w", q, errors.Join(errs...))
}

// ServerDSN is a go-sql-driver DSN without a database of the given nodes, every node when
// none is given, their addresses in the order given: root:@tcp(127.0.0.1:P1,127.0.0.1:P2)/.
// With one node it is a plain DSN any MySQL client accepts.
func (c *Cluster) ServerDSN(nodes ...int) string {
	if len(nodes) == 0 {
		for i := range c.nodes {
			nodes = append(nodes, i)
		}
	}
	addrs := make([]string, 0, len(nodes))
	for _, i := range nodes {
		addrs = append(addrs, c.nodes[i].Addr())
	}
	return "root:@tcp(" + strings.Join(addrs, ",") + ")/"
}

// WaitSynced waits until every node that runs and is not paused is synced
// (wsrep_local_state 4, ready) and they form one primary component of that many nodes.
func (c *Cluster) WaitSynced(ctx context.Context) error {
	var last error
	for {
		running := 0
		last = nil
		for _, n := range c.nodes {
			if !n.Running() || n.Paused() {
				continue
			}
			running++
			if err := n.checkSynced(ctx); err != nil {
				last = err
				break
			}
		}
		if last == nil {
			last = c.checkSize(ctx, running)
		}
		if last == nil {
			return nil
		}
		if err := sleep(ctx); err != nil {
			return fmt.Errorf("cannot see the cluster synced: %w (last: %w)", err, last)
		}
	}
}

// checkSize checks that every running node sees a primary component of want nodes.
func (c *Cluster) checkSize(ctx context.Context, want int) error {
	for _, n := range c.nodes {
		if !n.Running() || n.Paused() {
			continue
		}
		st, err := n.Status(ctx, "wsrep_cluster_size", "wsrep_cluster_status")
		if err != nil {
			return err
		}
		if st["wsrep_cluster_size"] != strconv.Itoa(want) || st["wsrep_cluster_status"] != "Primary" {
			return fmt.Errorf("%s sees a %s component of %s nodes, want a Primary one of %d",
				n.Name, st["wsrep_cluster_status"], st["wsrep_cluster_size"], want)
		}
	}
	return nil
}

// Heal brings every node back: resumes a paused one, rejoins an isolated one, restarts a
// dead one, and waits until all are synced. Tests that share a cluster call it first.
func (c *Cluster) Heal(ctx context.Context) error {
	for _, n := range c.nodes {
		if n.Paused() {
			if err := n.Resume(); err != nil {
				return err
			}
		}
	}
	for _, n := range c.nodes {
		if !n.Running() {
			if err := n.spawn(); err != nil {
				return err
			}
			continue
		}
		// gmcast.isolate is not a status: un-isolate every running node, which a node that
		// never was isolated ignores. A node still frozen in its view change may not answer
		// yet, so this is retried until the deadline.
		for {
			err := n.Isolate(ctx, false)
			if err == nil {
				break
			}
			if err := sleep(ctx); err != nil {
				return fmt.Errorf("cannot rejoin %s: %w", n.Name, err)
			}
		}
	}
	return c.WaitSynced(ctx)
}

// Close kills every node and removes the cluster's directory. Calling it again does nothing.
func (c *Cluster) Close() {
	c.closeOnce.Do(func() {
		for _, n := range c.nodes {
			n.Kill()
		}
		_ = os.RemoveAll(c.dir)
	})
}

// Addr is the node's client address, 127.0.0.1:PORT.
func (n *Node) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.Port)) }

func (n *Node) datadir() string { return filepath.Join(n.dir, "data") }
func (n *Node) cnf() string     { return filepath.Join(n.dir, "my.cnf") }
func (n *Node) logFile() string { return filepath.Join(n.dir, "error.log") }

// config is the node's whole configuration: it reads no other file.
func (n *Node) config(cluster string) string {
	var gcomm []string
	for _, o := range n.c.nodes {
		gcomm = append(gcomm, net.JoinHostPort("127.0.0.1", strconv.Itoa(o.GcommPort)))
	}
	opts := []string{
		"gmcast.listen_addr=tcp://127.0.0.1:" + strconv.Itoa(n.GcommPort),
		"ist.recv_addr=127.0.0.1:" + strconv.Itoa(n.ISTPort),
		"gcache.size=64M",
		// Galera's own timeouts for a node that stops answering (suspected after 5 s): on
		// the shared two-core test machine a node starved of CPU for 2 s was evicted in
		// the middle of the conformance suite.
	}
	lines := []string{
		"[mysqld]",
		"datadir=" + n.datadir(),
		"socket=" + filepath.Join(n.dir, "mysqld.sock"),
		"pid-file=" + filepath.Join(n.dir, "mysqld.pid"),
		"log-error=" + n.logFile(),
		"tmpdir=" + n.dir,
		"port=" + strconv.Itoa(n.Port),
		"bind-address=127.0.0.1",
		"skip-name-resolve",
		"max_connections=500",
		"performance_schema=OFF",
		"innodb_buffer_pool_size=64M",
		"innodb_log_file_size=16M",
		// The cluster, not the disk, keeps a commit: a write set is on every node before
		// the commit returns. A killed process (not a power loss) loses nothing.
		"innodb_flush_log_at_trx_commit=2",
		// What Galera requires of a node.
		"binlog_format=ROW",
		"default_storage_engine=InnoDB",
		"innodb_autoinc_lock_mode=2",
		"wsrep_on=ON",
		"wsrep_provider=" + provider,
		"wsrep_cluster_name=" + cluster,
		"wsrep_cluster_address=gcomm://" + strings.Join(gcomm, ","),
		"wsrep_node_name=" + n.Name,
		"wsrep_node_address=127.0.0.1:" + strconv.Itoa(n.GcommPort),
		`wsrep_provider_options="` + strings.Join(opts, ";") + `"`,
		"wsrep_sst_method=rsync",
		"wsrep_sst_receive_address=127.0.0.1:" + strconv.Itoa(n.SSTPort),
	}
	return strings.Join(lines, "\n") + "\n"
}

// spawn starts the node's mariadbd with extra arguments and returns once it was exec'd.
func (n *Node) spawn(extra ...string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return fmt.Errorf("cannot start %s: it runs already", n.Name)
	}
	// The first option must be --defaults-file, or mariadbd reads /etc/mysql too.
	cmd := exec.Command(mariadbd, append([]string{"--defaults-file=" + n.cnf()}, extra...)...)
	cmd.SysProcAttr = n.c.sysProcAttr()
	// mariadbd writes to its error log; what it prints before opening it goes there too.
	out, err := os.OpenFile(filepath.Join(n.dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("cannot open %s's output: %w", n.Name, err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		return fmt.Errorf("cannot start %s: %w", n.Name, err)
	}
	exited := make(chan struct{})
	n.cmd, n.exited, n.paused = cmd, exited, false
	go func() {
		_ = cmd.Wait()
		_ = out.Close()
		n.mu.Lock()
		if n.cmd == cmd {
			n.cmd = nil
		}
		n.mu.Unlock()
		close(exited)
	}()
	return nil
}

// Running reports whether the node's process is alive (paused or not).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil
}

// Paused reports whether the node is frozen by Pause.
func (n *Node) Paused() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil && n.paused
}

// Pid is the node's process id, 0 when it does not run.
func (n *Node) Pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// Kill kills the node with SIGKILL (a crash: no shutdown, no goodbye to the group) and
// waits until it has exited. It does nothing to a node that does not run.
func (n *Node) Kill() {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// Pause freezes the node with SIGSTOP: its sockets stay open and nothing answers, as a hung
// host does. The group evicts it after evs.inactive_timeout.
func (n *Node) Pause() error { return n.signal(syscall.SIGSTOP, true) }

// Resume continues a paused node (SIGCONT). Evicted meanwhile, it rejoins by itself.
func (n *Node) Resume() error { return n.signal(syscall.SIGCONT, false) }

func (n *Node) signal(sig syscall.Signal, paused bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return fmt.Errorf("cannot signal %s: %w", n.Name, ErrNotRunning)
	}
	if err := n.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("cannot signal %s: %w", n.Name, err)
	}
	n.paused = paused
	return nil
}

// Restart starts a node that was killed and waits until it has rejoined the cluster and is
// synced (by IST when the others' gcache still holds what it missed, by SST otherwise).
func (n *Node) Restart(ctx context.Context) error {
	if err := n.spawn(); err != nil {
		return err
	}
	return n.c.WaitSynced(ctx)
}

// Isolate cuts the node off from the group (on) or lets it rejoin (off), with Galera's
// gmcast.isolate: the process keeps running and answering clients, but leaves the primary
// component, so it refuses statements as a node on the wrong side of a partition does.
func (n *Node) Isolate(ctx context.Context, on bool) error {
	v := "0"
	if on {
		v = "1"
	}
	db, err := n.open()
	if err != nil {
		return err
	}
	defer db.Close()
	cctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	if _, err := db.ExecContext(cctx, "SET GLOBAL wsrep_provider_options = 'gmcast.isolate="+v+"'"); err != nil {
		return fmt.Errorf("cannot set gmcast.isolate=%s on %s: %w", v, n.Name, err)
	}
	return nil
}

// WaitSynced waits until this node alone is synced and ready (it may still be the only one
// in its component).
func (n *Node) WaitSynced(ctx context.Context) error {
	for {
		err := n.checkSynced(ctx)
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrNotRunning) {
			return fmt.Errorf("%w\n%s", err, n.LogTail(20))
		}
		if serr := sleep(ctx); serr != nil {
			return fmt.Errorf("cannot see %s synced: %w (last: %w)", n.Name, serr, err)
		}
	}
}

func (n *Node) checkSynced(ctx context.Context) error {
	if !n.Running() {
		return fmt.Errorf("%s exited: %w", n.Name, ErrNotRunning)
	}
	st, err := n.Status(ctx, "wsrep_local_state", "wsrep_ready")
	if err != nil {
		return err
	}
	if st["wsrep_local_state"] != "4" || st["wsrep_ready"] != "ON" {
		return fmt.Errorf("%s: wsrep_local_state %s, wsrep_ready %s", n.Name, st["wsrep_local_state"], st["wsrep_ready"])
	}
	return nil
}

// Status returns the node's global status variables of the given names.
func (n *Node) Status(ctx context.Context, names ...string) (map[string]string, error) {
	db, err := n.open()
	if err != nil {
		return nil, err
	}
	defer db.Close()
	cctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	rows, err := db.QueryContext(cctx, "SHOW GLOBAL STATUS LIKE 'wsrep%'")
	if err != nil {
		return nil, fmt.Errorf("cannot read %s's status: %w", n.Name, err)
	}
	defer rows.Close()
	out := make(map[string]string, len(names))
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, fmt.Errorf("cannot read %s's status: %w", n.Name, err)
		}
		for _, want := range names {
			if strings.EqualFold(k, want) {
				out[want] = v
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cannot read %s's status: %w", n.Name, err)
	}
	return out, nil
}

// DB opens a pool of connections to this node alone (closed by the caller).
func (n *Node) DB() (*sql.DB, error) { return n.open() }

func (n *Node) open() (*sql.DB, error) {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "tcp", n.Addr()
	cfg.Timeout = statusTimeout
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot configure a connection to %s: %w", n.Name, err)
	}
	return sql.OpenDB(connector), nil
}

// LogTail returns the last lines of the node's error log.
func (n *Node) LogTail(lines int) string {
	f, err := os.Open(n.logFile())
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	var ring []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		ring = append(ring, sc.Text())
		if len(ring) > lines {
			ring = ring[1:]
		}
	}
	return strings.Join(ring, "\n")
}

func sleep(ctx context.Context) error {
	t := time.NewTimer(pollEvery)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
