package conformance

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/axe-sched/axe/protocol"

	"github.com/axe-sched/axe/lib/freeport"
)

// aCase is one named check of the suite. It returns what it saw when it passes, a skipped
// error when it does not apply, and any other error when the executor failed it.
type aCase struct {
	name string
	run  func(ctx context.Context, s *suite) (string, error)
}

// skipped is the error of a case that does not apply to this executor or mode.
type skipped string

func (e skipped) Error() string { return string(e) }

// suite is one run of the cases against one executor.
type suite struct {
	cfg   Config
	sched *scheduler
	proc  *process // nil for an executor started by hand
	// want is the address the executor must register: AXE_LISTEN or the host:port of URL.
	want string
	// reg is the first registration, which the cases address and sign for.
	reg    protocol.Register
	regErr error
	key    []byte
	client *http.Client
	id     string
	seq    atomic.Int64

	mu sync.Mutex
	// refused maps the tickets of runs the executor had to refuse to the case that sent
	// them: none of them may ever produce a result.
	refused map[string]string
}

func newSuite(cfg Config) (*suite, error) {
	sched, err := newScheduler(cfg.Listen, cfg.Token)
	if err != nil {
		return nil, err
	}
	var id [6]byte
	_, _ = rand.Read(id[:])
	s := &suite{
		cfg:   cfg,
		sched: sched,
		id:    hex.EncodeToString(id[:]),
		client: &http.Client{
			Timeout:   cfg.WaitTimeout,
			Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16, DisableCompression: true},
		},
		refused: map[string]string{},
	}
	if cfg.Token != "" {
		s.key = protocol.DispatchKey(cfg.Token)
	}
	if cfg.OnListen != nil {
		cfg.OnListen(sched.URL())
	}
	return s, nil
}

func (s *suite) close() {
	if s.proc != nil {
		s.proc.stop(s.cfg.WaitTimeout)
	}
	s.sched.close()
	s.client.CloseIdleConnections()
}

// run starts or awaits the executor, then runs every selected case in order.
func (s *suite) run(ctx context.Context) Report {
	rep := Report{Executor: s.cfg.URL}
	if s.cfg.Exec != "" {
		rep.Executor = s.cfg.Exec
	}
	s.regErr = s.await(ctx)
	index := map[string]int{}
	for _, c := range cases {
		if s.cfg.Run != nil && !s.cfg.Run.MatchString(c.name) {
			continue
		}
		start := time.Now()
		r := CaseResult{Name: c.name, Result: Pass}
		var (
			info string
			err  error
		)
		if s.regErr != nil {
			err = s.regErr
		} else {
			info, err = c.run(ctx, s)
		}
		var skip skipped
		switch {
		case errors.As(err, &skip):
			r.Result, r.Reason = Skip, skip.Error()
		case err != nil:
			r.Result, r.Reason = Fail, err.Error()
		default:
			r.Reason = info
		}
		r.DurationMS = time.Since(start).Milliseconds()
		index[c.name] = len(rep.Cases)
		rep.Cases = append(rep.Cases, r)
	}
	// A refused run must never have run: look for a result of any of them, last, when
	// every other run has had its time.
	s.mu.Lock()
	for _, ticket := range slices.Sorted(maps.Keys(s.refused)) {
		name := s.refused[ticket]
		if i, ok := index[name]; ok && s.sched.resultCount(ticket) > 0 && rep.Cases[i].Result == Pass {
			rep.Cases[i].Result = Fail
			rep.Cases[i].Reason = fmt.Sprintf("the run of ticket %s was refused, yet its handler ran: a result of it arrived", ticket)
		}
	}
	s.mu.Unlock()
	for _, c := range rep.Cases {
		switch c.Result {
		case Pass:
			rep.Passed++
		case Fail:
			rep.Failed++
		default:
			rep.Skipped++
		}
	}
	return rep
}

// await starts the executor (Exec) and waits for its first registration.
func (s *suite) await(ctx context.Context) error {
	if s.cfg.Exec != "" {
		listen, err := freeAddress()
		if err != nil {
			return err
		}
		s.want = listen
		s.proc, err = startProcess(s.cfg.Exec, []string{
			"AXE_SCHEDULERS=" + s.sched.URL(),
			"AXE_LISTEN=" + listen,
			"AXE_TOKEN=" + s.cfg.Token,
			"AXE_APP=" + s.cfg.App,
		}, s.cfg.Output, func() { s.sched.record(func() {}) })
		if err != nil {
			return err
		}
	} else {
		s.want, _ = urlAddress(s.cfg.URL)
	}
	var exited bool
	ok := s.sched.wait(ctx, s.cfg.RegisterTimeout, func() bool {
		if s.proc != nil && s.proc.done() {
			exited = true
			return true
		}
		return len(s.sched.regs) > 0
	})
	s.sched.mu.Lock()
	defer s.sched.mu.Unlock()
	switch {
	case len(s.sched.regs) > 0:
		s.reg = s.sched.regs[0]
		return nil
	case exited:
		return fmt.Errorf("%w: the executor exited before registering (%v); its last output: %s",
			errNoRegistration, s.proc.exitErr(), s.proc.tail())
	case !ok && s.proc != nil:
		err := fmt.Errorf("%w within %s of its start", errNoRegistration, s.cfg.RegisterTimeout)
		if len(s.sched.faults) > 0 {
			err = fmt.Errorf("%w; the scheduler refused: %s", err, s.sched.faults[len(s.sched.faults)-1])
		}
		return fmt.Errorf("%w; its last output: %s", err, s.proc.tail())
	default:
		return fmt.Errorf("%w at %s within %s", errNoRegistration, s.sched.URL(), s.cfg.RegisterTimeout)
	}
}

// freeAddress is a loopback host:port nothing listens on, for AXE_LISTEN.
func freeAddress() (string, error) {
	addr, err := freeport.Addr()
	if err != nil {
		return "", fmt.Errorf("cannot find a free port for the executor: %w", err)
	}
	return addr, nil
}

// process is the executor the suite started.
type process struct {
	cmd    *exec.Cmd
	out    *tailBuffer
	exited chan struct{}
	err    error // of Wait, once exited is closed
}

// startProcess starts command with env added to the suite's environment; onExit runs once
// it has exited.
func startProcess(command string, env []string, output io.Writer, onExit func()) (*process, error) {
	p := &process{out: &tailBuffer{limit: 2048}, exited: make(chan struct{})}
	// exec, so that the signals the suite sends reach the executor, not a shell around it.
	p.cmd = exec.Command("/bin/sh", "-c", "exec "+command)
	p.cmd.Env = append(os.Environ(), env...)
	w := io.MultiWriter(output, p.out)
	p.cmd.Stdout, p.cmd.Stderr = w, w
	ownGroup(p.cmd)
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("cannot start the executor %q: %w", command, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
		onExit()
	}()
	return p, nil
}

func (p *process) done() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// exitErr is Wait's error once the process exited ("exit status 0" for a clean exit).
func (p *process) exitErr() error {
	<-p.exited
	if p.err == nil {
		return errors.New("exit status 0")
	}
	return p.err
}

func (p *process) tail() string {
	t := strings.TrimSpace(p.out.String())
	if t == "" {
		return "(none)"
	}
	return t
}

// stop ends the executor and everything it started: SIGTERM, then after grace SIGKILL to its
// process group.
func (p *process) stop(grace time.Duration) {
	if !p.done() {
		_ = p.cmd.Process.Signal(sigterm)
		select {
		case <-p.exited:
		case <-time.After(grace):
		}
	}
	killGroup(p.cmd)
	<-p.exited
}

// tailBuffer keeps the last limit bytes written to it.
type tailBuffer struct {
	mu    sync.Mutex
	limit int
	buf   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.limit; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// call is one request of the suite to the executor.
type call struct {
	method string // defaults to POST
	path   string
	body   []byte
	// epoch is the X-Axe-Epoch header ("" for none), signed with the call.
	epoch string
	// auth, when set, is the Authorization header as is ("" sends none); nil signs the call
	// now for the registered incarnation.
	auth *string
	// incarnation, when set, is the X-Axe-Incarnation header as is ("" sends none); nil
	// sends the registered incarnation, if any.
	incarnation *string
}

// reply is the executor's answer to a call.
type reply struct {
	code int
	body []byte
}

func (r reply) String() string {
	b := r.body
	if len(b) > 300 {
		b = append(b[:300:300], "…"...)
	}
	return fmt.Sprintf("%d %s", r.code, bytes.TrimSpace(b))
}

func ptr[T any](v T) *T { return &v }

// sign is the Authorization header of a call made at to the registered executor: none
// without a token, else signed for incarnation (version 2), or the version 1 way for "".
func (s *suite) sign(at time.Time, path, epoch, incarnation string, body []byte) string {
	if s.key == nil {
		return ""
	}
	return signCall(s.key, at, s.reg.Address, path, epoch, incarnation, body)
}

// signCall signs a call to the executor at address: protocol.SignCallV2 for an
// incarnation, protocol.SignCall (version 1) for "".
func signCall(key []byte, at time.Time, address, path, epoch, incarnation string, body []byte) string {
	if incarnation == "" {
		return protocol.SignCall(key, at, address, path, epoch, body)
	}
	return protocol.SignCallV2(key, at, address, path, epoch, incarnation, body)
}

func (s *suite) baseURL() string {
	if s.cfg.URL != "" {
		return strings.TrimSuffix(s.cfg.URL, "/")
	}
	return "http://" + s.reg.Address
}

// do makes a call. A connection that fails before an answer is tried twice more, so that a
// busy machine does not fail a case.
func (s *suite) do(ctx context.Context, c call) (reply, error) {
	if c.method == "" {
		c.method = http.MethodPost
	}
	var err error
	for range 3 {
		var r reply
		if r, err = s.once(ctx, c); err == nil {
			return r, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return reply{}, fmt.Errorf("%s %s: %w", c.method, c.path, err)
}

func (s *suite) once(ctx context.Context, c call) (reply, error) {
	var body io.Reader
	if c.body != nil {
		body = bytes.NewReader(c.body)
	}
	req, err := http.NewRequestWithContext(ctx, c.method, s.baseURL()+c.path, body)
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.epoch != "" {
		req.Header.Set(protocol.HeaderEpoch, c.epoch)
	}
	inc := s.reg.Incarnation
	if c.incarnation != nil {
		inc = *c.incarnation
	}
	if inc != "" {
		req.Header.Set(protocol.HeaderIncarnation, inc)
	}
	auth := s.sign(time.Now(), c.path, c.epoch, s.reg.Incarnation, c.body)
	if c.auth != nil {
		auth = *c.auth
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return reply{}, err
	}
	return reply{code: resp.StatusCode, body: b}, nil
}

// early makes a signed POST whose answer may come before its body is read, as a 413 does:
// the body is written on a connection of its own while the answer is read, so that an
// executor that answers and closes without reading the rest is judged by its answer, not by
// the failed write.
// An unsigned call carries no Authorization header.
func (s *suite) early(ctx context.Context, path string, body []byte, signed bool) (reply, error) {
	host := strings.TrimPrefix(s.baseURL(), "http://")
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return reply{}, fmt.Errorf("POST %s: %w", path, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(s.cfg.WaitTimeout))
	var head bytes.Buffer
	fmt.Fprintf(&head, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n",
		path, host, len(body))
	if auth := s.sign(time.Now(), path, "", s.reg.Incarnation, body); auth != "" && signed {
		fmt.Fprintf(&head, "Authorization: %s\r\n", auth)
	}
	if s.reg.Incarnation != "" {
		fmt.Fprintf(&head, "%s: %s\r\n", protocol.HeaderIncarnation, s.reg.Incarnation)
	}
	head.WriteString("\r\n")
	go func() {
		if _, err := conn.Write(head.Bytes()); err == nil {
			_, _ = conn.Write(body) // fails once the executor closes the connection: expected
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return reply{}, fmt.Errorf("POST %s: no answer: %w", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return reply{code: resp.StatusCode, body: b}, nil
}

// runSpec is a run the suite sends; zero fields take the defaults of newRun.
type runSpec struct {
	task     string
	handler  string
	params   string // raw JSON; "" for none
	deadline time.Time
	parallel bool
	epoch    int64
	shard    *int
	// extra is spliced into the body as further members, e.g. `"future":1`.
	extra string
}

// ticket makes a ticket no other run of any suite has.
func (s *suite) ticket(what string) string {
	return fmt.Sprintf("conf-%s-%s-%d", s.id, what, s.seq.Add(1))
}

// task makes a task name of its own for one case, so that re-entry never spans cases.
func (s *suite) task(what string) string {
	return fmt.Sprintf("conformance-%s-%s-%d", what, s.id, s.seq.Add(1))
}

// runBody is the body of a run of ticket: attempt 1, due now, the handler echo, a deadline
// a minute away unless spec says otherwise.
func runBody(ticket string, spec runSpec) []byte {
	now := time.Now()
	r := protocol.Run{
		Task:        spec.task,
		Handler:     spec.handler,
		Ticket:      ticket,
		Attempt:     1,
		ScheduledAt: now.UnixMilli(),
		Deadline:    now.Add(time.Minute).UnixMilli(),
		Epoch:       spec.epoch,
		Shard:       spec.shard,
		Parallel:    spec.parallel,
	}
	if r.Handler == "" {
		r.Handler = Handler
	}
	if !spec.deadline.IsZero() {
		r.Deadline = spec.deadline.UnixMilli()
	}
	if spec.params != "" {
		r.Params = json.RawMessage(spec.params)
	}
	b, err := json.Marshal(r)
	if err != nil {
		panic(err) // a Run always marshals
	}
	if spec.extra != "" {
		b = append(append(b[:len(b)-1], ","+spec.extra...), '}')
	}
	return b
}

// send posts one run to /axe/run, signed, with its epoch header.
func (s *suite) send(ctx context.Context, ticket string, spec runSpec) (reply, error) {
	c := call{path: protocol.PathRun, body: runBody(ticket, spec)}
	if spec.epoch != 0 {
		c.epoch = fmt.Sprint(spec.epoch)
	}
	return s.do(ctx, c)
}

// refusedRun notes that ticket was refused by case name: it must never run.
func (s *suite) refusedRun(name, ticket string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refused[ticket] = name
}

// want checks an answer's status and, for an error status, its {"error": …} body.
func want(what string, r reply, code int) error {
	if r.code != code {
		return fmt.Errorf("%s: answered %s, want %d", what, r, code)
	}
	if code >= 400 {
		var e protocol.Error
		if json.Unmarshal(r.body, &e) != nil || e.Error == "" {
			return fmt.Errorf("%s: answered %s, want a body {\"error\": \"…\"}", what, r)
		}
	}
	return nil
}

// wantAccepted checks a 202 {"accepted": true} with the duplicate flag dup.
func wantAccepted(what string, r reply, dup bool) error {
	if err := want(what, r, http.StatusAccepted); err != nil {
		return err
	}
	var a protocol.Accepted
	if err := json.Unmarshal(r.body, &a); err != nil || !a.Accepted || a.Duplicate != dup {
		return fmt.Errorf("%s: answered %s, want {\"accepted\": true%s}", what, r, map[bool]string{true: `, "duplicate": true`}[dup])
	}
	return nil
}
