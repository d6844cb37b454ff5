// Package agent is the logic of `axe agent`, the executor for people coming from crontab: it
// runs shell commands named in its own JSON config file as axe handlers, on top of the
// executor SDK.
//
// It owns the config file format, the running of one command per run (in its own process
// group, with the run's deadline), the capture of exit code and output tail (or of what the
// command wrote to the file named by AXE_OUTPUT, reported whole as its output), and the
// termination of the whole process group on kill or timeout. It must not run anything that
// is not in its config: the scheduler picks a handler by name and passes params as data
// (the AXE_PARAMS environment variable), never as a command. Scheduling, retries and the wire
// protocol belong to the scheduler and to package executor.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/axe-sched/axe/executor"
	"github.com/axe-sched/axe/protocol"
)

// Sentinel errors.
var (
	// ErrInvalidConfig is wrapped by Load and New when the config is invalid; the message
	// names the field as it is spelt in the file.
	ErrInvalidConfig = errors.New("agent: invalid config")
	// ErrUnsupportedPlatform is returned by New where the agent cannot end a command's
	// whole process tree on timeout and kill (everywhere but Unix, for now): it refuses to
	// run rather than leave a killed command's children running.
	ErrUnsupportedPlatform = errors.New("agent: this platform cannot end a command's whole process tree")
)

// reapPoll is how often a terminated process group is checked for survivors during the grace
// period. Short enough that a clean exit is noticed quickly, long enough to cost nothing.
const reapPoll = 20 * time.Millisecond

// Agent serves the commands of one config as executor handlers.
type Agent struct {
	cfg Config
	log *slog.Logger
	exe *executor.Executor
}

// New checks cfg and returns an Agent that is not yet listening.
func New(cfg Config) (*Agent, error) {
	if !processTrees {
		return nil, fmt.Errorf("%w (%s): axe agent runs on Unix only", ErrUnsupportedPlatform, runtime.GOOS)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	exe, err := executor.New(executor.Config{
		App:            cfg.App,
		Addr:           cfg.Listen,
		AdvertiseAddr:  cfg.Advertise,
		Schedulers:     cfg.Schedulers,
		Token:          cfg.Token,
		SchedulerToken: cfg.SchedulerToken,
		InsecureNoAuth: cfg.InsecureNoAuth,
		TLSCert:        cfg.TLSCert,
		TLSKey:         cfg.TLSKey,
		TLSClientCA:    cfg.TLSClientCA,
		SchedulerCA:    cfg.SchedulerCA,
		// The agent cuts a command's printed output to OutputTailBytes itself
		// (printedOutput); an AXE_OUTPUT file is reported whole, up to this bound.
		OutputLimit: protocol.MaxOutputBytes,
		Logger:      cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("cannot create the executor: %w", err)
	}
	a := &Agent{cfg: cfg, log: cfg.Logger.With("app", cfg.App), exe: exe}
	for _, name := range slices.Sorted(maps.Keys(cfg.Handlers)) {
		exe.Handle(name, a.handler(name, cfg.Handlers[name]))
	}
	return a, nil
}

// Start listens, registers with the scheduler and starts heartbeats (executor.Executor.Start).
func (a *Agent) Start(ctx context.Context) error {
	if err := a.exe.Start(ctx); err != nil {
		return fmt.Errorf("cannot start agent: %w", err)
	}
	return nil
}

// Stop lets running commands finish and delivers their results, then shuts down
// (executor.Executor.Stop). If ctx expires first, running commands are terminated as on a
// kill: their process groups get SIGTERM, then SIGKILL after the grace period, which may end
// after Stop has returned.
func (a *Agent) Stop(ctx context.Context) error {
	if err := a.exe.Stop(ctx); err != nil {
		return fmt.Errorf("cannot stop agent: %w", err)
	}
	return nil
}

// Addr returns the address advertised to the scheduler, or "" before Start.
func (a *Agent) Addr() string { return a.exe.Addr() }

func (a *Agent) handler(name string, c Command) executor.HandlerFunc {
	return func(ctx context.Context, run executor.Run) (executor.Result, error) {
		return a.runCommand(ctx, name, c, run)
	}
}

// runCommand runs c for one run. The process gets its own process group so that a kill or a
// timeout reaches everything it started, not only the direct child.
func (a *Agent) runCommand(ctx context.Context, name string, c Command, run executor.Run) (executor.Result, error) {
	out := newTailBuffer(a.cfg.OutputTailBytes)
	outFile, err := os.CreateTemp("", "axe-output-*")
	if err != nil {
		return executor.Result{}, fmt.Errorf("cannot create the AXE_OUTPUT file: %w", err)
	}
	outPath := outFile.Name()
	_ = outFile.Close()
	defer os.Remove(outPath)
	cmd := exec.CommandContext(ctx, c.Command[0], c.Command[1:]...)
	cmd.Dir = c.Dir
	cmd.Env = append(environ(c, run), "AXE_OUTPUT="+outPath)
	if c.Stdin != "" {
		cmd.Stdin = strings.NewReader(c.Stdin)
	}
	cmd.Stdout = out // the same writer for both: exec serialises the writes
	cmd.Stderr = out
	setProcessGroup(cmd)
	grace := a.cfg.killGrace()
	var cancelledAt atomic.Int64 // Unix ns when Cancel ran; 0 if it did not
	cmd.Cancel = func() error {
		cancelledAt.Store(time.Now().UnixNano())
		return terminateGroup(cmd)
	}
	// After SIGTERM, or after the process exits while a child still holds its output open,
	// wait at most grace before exec kills the process and stops reading.
	cmd.WaitDelay = grace

	if err := cmd.Start(); err != nil {
		return executor.Result{Output: printedOutput(out, a.cfg.OutputTailBytes)}, fmt.Errorf("cannot start %s: %w", c.Command[0], err)
	}
	pid := cmd.Process.Pid
	a.log.Info("command started", "handler", name, "ticket", run.Ticket, "pid", pid)
	werr := cmd.Wait()
	if at := cancelledAt.Load(); at != 0 {
		// The direct child is gone, but its children may ignore SIGTERM or outlive it.
		reapGroup(pid, time.Unix(0, at).Add(grace))
	}

	res := executor.Result{Output: printedOutput(out, a.cfg.OutputTailBytes)}
	code := -1
	if ps := cmd.ProcessState; ps != nil {
		code = ps.ExitCode()
		res.ExitCode = &code
	}
	switch {
	case werr == nil, errors.Is(werr, exec.ErrWaitDelay) && code == 0 && cancelledAt.Load() == 0:
		// It succeeded (in the second case a background child kept the printed output open
		// and was cut off after grace): what it wrote to AXE_OUTPUT, if anything, is its
		// output.
		written, err := readOutputFile(outPath)
		if err != nil {
			return res, err
		}
		if written != "" {
			res.Output = written
		}
		return res, nil
	case cancelledAt.Load() != 0:
		return res, fmt.Errorf("command terminated: %w", context.Cause(ctx))
	case code > 0:
		return res, fmt.Errorf("exit status %d", code)
	default:
		return res, werr // e.g. "signal: segmentation fault"
	}
}

// OutputFileMax bounds what a command writes to its AXE_OUTPUT file: the largest output a
// result carries (protocol.MaxOutputBytes, 1 MiB), which is also a workflow step's largest.
const OutputFileMax = protocol.MaxOutputBytes

// readOutputFile returns what a command wrote to the file named by AXE_OUTPUT ("" for
// nothing, or no file left), as valid UTF-8. More than OutputFileMax bytes is an error:
// cut, a JSON output would no longer be JSON.
func readOutputFile(path string) (string, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil // the command removed it
	}
	if err != nil {
		return "", fmt.Errorf("cannot read the AXE_OUTPUT file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, OutputFileMax+1))
	if err != nil {
		return "", fmt.Errorf("cannot read the AXE_OUTPUT file: %w", err)
	}
	if len(data) > OutputFileMax {
		size := "more than " + strconv.Itoa(OutputFileMax)
		if fi, err := f.Stat(); err == nil {
			size = strconv.FormatInt(fi.Size(), 10)
		}
		return "", fmt.Errorf("the AXE_OUTPUT file holds %s bytes, at most %d (1 MiB) are reported: write less, or a path to the data", size, OutputFileMax)
	}
	s := strings.ToValidUTF8(string(data), "\uFFFD")
	if len(s) > OutputFileMax {
		return "", fmt.Errorf("the AXE_OUTPUT file holds %d bytes once its bytes that are not UTF-8 are replaced, at most %d (1 MiB)", len(s), OutputFileMax)
	}
	return s, nil
}

// printedOutput is the last limit bytes of a command's printed output, as valid UTF-8 and
// cut at a character's start.
func printedOutput(out *tailBuffer, limit int) string {
	s := strings.ToValidUTF8(out.String(), "\uFFFD")
	if len(s) <= limit {
		return s
	}
	i := len(s) - limit
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

// reapGroup waits until the process group pgid is empty or deadline passes, then SIGKILLs
// whatever is left. Polling is safe from pid reuse: a process group id cannot be reused while
// any member is alive.
func reapGroup(pgid int, deadline time.Time) {
	for groupAlive(pgid) && time.Now().Before(deadline) {
		time.Sleep(reapPoll)
	}
	if groupAlive(pgid) {
		killGroup(pgid)
	}
}

// environ is the agent's environment, the handler's variables, then the run's AXE_* variables
// last so that nothing can override them.
func environ(c Command, run executor.Run) []string {
	env := os.Environ()
	for _, k := range slices.Sorted(maps.Keys(c.Env)) {
		env = append(env, k+"="+c.Env[k])
	}
	params := "null"
	if run.Params != nil {
		params = string(run.Params)
	}
	return append(env,
		"AXE_TICKET="+run.Ticket,
		"AXE_TASK="+run.Task,
		"AXE_ATTEMPT="+strconv.Itoa(run.Attempt),
		"AXE_PARAMS="+params,
	)
}

// tailBuffer keeps the last limit bytes written to it.
type tailBuffer struct {
	mu    sync.Mutex
	limit int
	buf   []byte
}

func newTailBuffer(limit int) *tailBuffer {
	return &tailBuffer{limit: limit, buf: make([]byte, 0, limit)}
}

// Write never fails, so a chatty command is never blocked or broken by its output.
func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.limit {
		t.buf = append(t.buf[:0], p[len(p)-t.limit:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.limit; over > 0 {
		t.buf = t.buf[:copy(t.buf, t.buf[over:])]
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
