package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/axe-sched/axe/protocol"
)

// cases are the suite's checks, in the order they run. Registration comes first and the
// deregistration last, since it stops the executor. docs/conformance.md describes each.
var cases = []aCase{
	{"registration", caseRegistration},
	{"heartbeat", caseHeartbeat},
	{"echo", caseEcho},
	{"echo-fail", caseEchoFail},
	{"beat", caseBeat},
	{"signature-clock-skew", caseClockSkew},
	{"signature-bad", caseBadSignature},
	{"signature-missing", caseUnsigned},
	{"incarnation", caseIncarnation},
	{"dedup-running", caseDedupRunning},
	{"dedup-finished", caseDedupFinished},
	{"reentry", caseReentry},
	{"deadline", caseDeadline},
	{"kill", caseKill},
	{"batch", caseBatch},
	{"oversize", caseOversize},
	{"malformed", caseMalformed},
	{"unknown-field", caseUnknownField},
	{"epoch-shard", caseEpochShard},
	{"result-resend", caseResend},
	{"unknown-handler", caseUnknownHandler},
	{"reregister-after-404", caseReregister},
	{"deregister", caseDeregister},
}

func caseRegistration(_ context.Context, s *suite) (string, error) {
	r := s.reg
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if r.App != s.cfg.App {
		bad("app %q, want %q (AXE_APP)", r.App, s.cfg.App)
	}
	if r.Address != s.want {
		bad("address %q, want %q (AXE_LISTEN, or the host:port of --url)", r.Address, s.want)
	}
	if r.Protocol != "" && r.Protocol != protocol.ProtocolHTTP {
		bad("protocol %q: the suite calls executors over plain HTTP", r.Protocol)
	}
	if !slices.Contains(r.Handlers, Handler) {
		bad("handlers %q lack %q", r.Handlers, Handler)
	}
	if s.cfg.Token != "" && r.Auth != protocol.AuthSigned {
		bad("auth %q, want %q: an executor with a token verifies signed calls", r.Auth, protocol.AuthSigned)
	}
	if r.Version != protocol.Version {
		bad("version %d, want %d", r.Version, protocol.Version)
	}
	switch {
	case r.Incarnation == "":
		bad("no incarnation")
	case !protocol.ValidIncarnation(r.Incarnation):
		bad("incarnation %q is not %d-%d characters of [A-Za-z0-9_-]", r.Incarnation,
			protocol.MinIncarnationBytes, protocol.MaxIncarnationBytes)
	}
	if len(problems) > 0 {
		return "", errors.New(strings.Join(problems, "; "))
	}
	return fmt.Sprintf("%s at %s, version %d, incarnation %s", r.App, r.Address, r.Version, r.Incarnation), nil
}

func caseHeartbeat(ctx context.Context, s *suite) (string, error) {
	var hb beatCall
	ok := s.sched.wait(ctx, s.cfg.WaitTimeout, func() bool {
		for _, b := range s.sched.beats {
			if b.code == http.StatusOK {
				hb = b
				return true
			}
		}
		return false
	})
	if !ok {
		s.sched.mu.Lock()
		defer s.sched.mu.Unlock()
		if n := len(s.sched.beats); n > 0 {
			b := s.sched.beats[n-1]
			return "", fmt.Errorf("no heartbeat of the registered executor within %s: the last names %s at %s, incarnation %q",
				s.cfg.WaitTimeout, b.App, b.Address, b.Incarnation)
		}
		return "", fmt.Errorf("no heartbeat within %s (the registration asked for one every %d ms)", s.cfg.WaitTimeout, heartbeatIntervalMS)
	}
	if hb.Running < 0 {
		return "", fmt.Errorf("running %d is negative", hb.Running)
	}
	if hb.Incarnation != "" && hb.Incarnation != s.reg.Incarnation {
		return "", fmt.Errorf("heartbeat incarnation %q, registered %q", hb.Incarnation, s.reg.Incarnation)
	}
	return fmt.Sprintf("running %d", hb.Running), nil
}

// echoRun sends one run and waits for its first result.
func (s *suite) echoRun(ctx context.Context, what string, spec runSpec) (protocol.Result, error) {
	if spec.task == "" {
		spec.task = s.task(what)
	}
	ticket := s.ticket(what)
	r, err := s.send(ctx, ticket, spec)
	if err != nil {
		return protocol.Result{}, err
	}
	if err := wantAccepted("run", r, false); err != nil {
		return protocol.Result{}, err
	}
	return s.sched.waitResult(ctx, s.cfg.WaitTimeout, ticket, 1)
}

// sameJSON reports whether two JSON texts hold equal values.
func sameJSON(a, b string) bool {
	var va, vb any
	return json.Unmarshal([]byte(a), &va) == nil && json.Unmarshal([]byte(b), &vb) == nil && reflect.DeepEqual(va, vb)
}

func caseEcho(ctx context.Context, s *suite) (string, error) {
	params := `{"greeting":"héllo","n":[1,2.5,null],"nested":{"ok":true}}`
	res, err := s.echoRun(ctx, "echo", runSpec{params: params})
	if err != nil {
		return "", err
	}
	if res.Status != protocol.StatusSuccess || !sameJSON(strings.TrimSpace(res.Output), params) {
		return "", fmt.Errorf("result %s %q output %q, want success with the params %s as output", res.Status, res.Error, res.Output, params)
	}
	if res.EndedAt < res.StartedAt || res.StartedAt <= 0 {
		return "", fmt.Errorf("started_at %d, ended_at %d: want Unix ms, ended not before started", res.StartedAt, res.EndedAt)
	}
	// Without params the output is {}.
	res, err = s.echoRun(ctx, "echo", runSpec{})
	if err != nil {
		return "", err
	}
	if res.Status != protocol.StatusSuccess || !sameJSON(strings.TrimSpace(res.Output), "{}") {
		return "", fmt.Errorf("a run without params: result %s %q output %q, want success with output {}", res.Status, res.Error, res.Output)
	}
	return "success, params echoed", nil
}

func caseEchoFail(ctx context.Context, s *suite) (string, error) {
	const text = "conformance failure text"
	res, err := s.echoRun(ctx, "fail", runSpec{params: `{"fail":"` + text + `"}`})
	if err != nil {
		return "", err
	}
	// A command-running executor (axe agent) reports the exit status as its error and
	// the text in its output.
	if res.Status != protocol.StatusFailed || !strings.Contains(res.Error+res.Output, text) {
		return "", fmt.Errorf("result %s, error %q, output %q: want failed, naming %q", res.Status, res.Error, res.Output, text)
	}
	return fmt.Sprintf("failed: %q", res.Error), nil
}

func caseBeat(ctx context.Context, s *suite) (string, error) {
	r, err := s.do(ctx, call{method: http.MethodGet, path: protocol.PathBeat})
	if err != nil {
		return "", err
	}
	if err := want("GET /axe/beat", r, http.StatusOK); err != nil {
		return "", err
	}
	var b protocol.Beat
	if err := json.Unmarshal(r.body, &b); err != nil || b.App != s.cfg.App || !slices.Contains(b.Handlers, Handler) || b.Running < 0 {
		return "", fmt.Errorf("GET /axe/beat answered %s, want {\"app\": %q, \"running\": ≥0, \"handlers\": [… %q …]}", r, s.cfg.App, Handler)
	}
	return fmt.Sprintf("running %d", b.Running), nil
}

// needToken skips a signature case for an executor run without a token.
func (s *suite) needToken() error {
	if s.cfg.Token == "" {
		return skipped("no token: the executor checks no signatures")
	}
	return nil
}

// signedAt sends a run signed at a time off the real one and returns its answer.
func (s *suite) signedAt(ctx context.Context, ticket string, off time.Duration) (reply, error) {
	body := runBody(ticket, runSpec{task: s.task("skew")})
	return s.do(ctx, call{path: protocol.PathRun, body: body,
		auth: ptr(s.sign(time.Now().Add(off), protocol.PathRun, "", s.reg.Incarnation, body))})
}

func caseClockSkew(ctx context.Context, s *suite) (string, error) {
	if err := s.needToken(); err != nil {
		return "", err
	}
	for _, off := range []time.Duration{-4 * time.Minute, 4 * time.Minute} {
		r, err := s.signedAt(ctx, s.ticket("skew"), off)
		if err != nil {
			return "", err
		}
		if err := wantAccepted(fmt.Sprintf("a run signed %s off", off), r, false); err != nil {
			return "", err
		}
	}
	for _, off := range []time.Duration{-6 * time.Minute, 6 * time.Minute} {
		ticket := s.ticket("skew")
		s.refusedRun("signature-clock-skew", ticket)
		r, err := s.signedAt(ctx, ticket, off)
		if err != nil {
			return "", err
		}
		if err := want(fmt.Sprintf("a run signed %s off", off), r, http.StatusUnauthorized); err != nil {
			return "", err
		}
	}
	return "±4m accepted, ±6m refused 401", nil
}

func caseBadSignature(ctx context.Context, s *suite) (string, error) {
	if err := s.needToken(); err != nil {
		return "", err
	}
	inc := s.reg.Incarnation
	now := time.Now()
	other := protocol.DispatchKey(s.cfg.Token + "-not-this-one")
	for _, v := range []struct {
		what string
		auth func(body []byte) string
		body func(body []byte) []byte
	}{
		{"a signature with one hex digit changed", func(b []byte) string {
			h := []byte(s.sign(now, protocol.PathRun, "", inc, b))
			last := len(h) - 1
			h[last] = map[bool]byte{true: '1', false: '0'}[h[last] == '0']
			return string(h)
		}, nil},
		{"a signature under another token's key", func(b []byte) string {
			return signCall(other, now, s.reg.Address, protocol.PathRun, "", inc, b)
		}, nil},
		{"a signature for another executor's address", func(b []byte) string {
			return signCall(s.key, now, "127.0.0.1:1", protocol.PathRun, "", inc, b)
		}, nil},
		{"a signature for another path", func(b []byte) string {
			return s.sign(now, protocol.PathKill, "", inc, b)
		}, nil},
		{"a body changed after signing", func(b []byte) string {
			return s.sign(now, protocol.PathRun, "", inc, b)
		}, func(b []byte) []byte { return bytes.Replace(b, []byte(`"attempt":1`), []byte(`"attempt":2`), 1) }},
		{"a signature of another scheme", func([]byte) string { return "Basic YXhlOmF4ZQ==" }, nil},
	} {
		ticket := s.ticket("badsig")
		s.refusedRun("signature-bad", ticket)
		body := runBody(ticket, runSpec{task: s.task("badsig")})
		auth := v.auth(body)
		if v.body != nil {
			body = v.body(body)
		}
		r, err := s.do(ctx, call{path: protocol.PathRun, body: body, auth: &auth})
		if err != nil {
			return "", err
		}
		if err := want(v.what, r, http.StatusUnauthorized); err != nil {
			return "", err
		}
	}
	return "6 forged calls refused 401", nil
}

func caseUnsigned(ctx context.Context, s *suite) (string, error) {
	if err := s.needToken(); err != nil {
		return "", err
	}
	for _, v := range []struct{ what, auth string }{
		{"an unsigned run", ""},
		{"a run carrying the executor's own token instead of a signature", "Bearer " + s.cfg.Token},
	} {
		ticket := s.ticket("unsigned")
		s.refusedRun("signature-missing", ticket)
		r, err := s.do(ctx, call{path: protocol.PathRun, body: runBody(ticket, runSpec{task: s.task("unsigned")}), auth: ptr(v.auth)})
		if err != nil {
			return "", err
		}
		if err := want(v.what, r, http.StatusUnauthorized); err != nil {
			return "", err
		}
	}
	r, err := s.do(ctx, call{path: protocol.PathKill, body: []byte(`{"ticket":"` + s.ticket("unsigned") + `"}`), auth: ptr("")})
	if err != nil {
		return "", err
	}
	if err := want("an unsigned kill", r, http.StatusUnauthorized); err != nil {
		return "", err
	}
	// An unsigned body larger than 4 KiB gets its 401 too (not 413): the executor reads no
	// more of it than that.
	ticket := s.ticket("unsigned")
	s.refusedRun("signature-missing", ticket)
	pad := `{"pad":"` + strings.Repeat("x", 64<<10) + `"}`
	r, err = s.early(ctx, protocol.PathRun, runBody(ticket, runSpec{task: s.task("unsigned"), params: pad}), false)
	if err != nil {
		return "", err
	}
	if err := want("an unsigned run of 64 KiB", r, http.StatusUnauthorized); err != nil {
		return "", err
	}
	return "unsigned runs (small and 64 KiB) and kill refused 401", nil
}

func caseIncarnation(ctx context.Context, s *suite) (string, error) {
	if err := s.needToken(); err != nil {
		return "", err
	}
	if s.reg.Incarnation == "" {
		return "", errors.New("the executor registered no incarnation (protocol version 1): calls cannot be bound to it")
	}
	other := "conformance-" + s.id + "-another-incarnation"
	for _, v := range []struct {
		what         string
		signFor, hdr string
	}{
		{"a run signed for another incarnation", other, other},
		{"a run signed for another incarnation, with this one's header", other, s.reg.Incarnation},
		{"a run signed for this incarnation without X-Axe-Incarnation", s.reg.Incarnation, ""},
		{"a run signed the version 1 way, without the incarnation", "", ""},
	} {
		ticket := s.ticket("incarnation")
		s.refusedRun("incarnation", ticket)
		body := runBody(ticket, runSpec{task: s.task("incarnation")})
		auth := signCall(s.key, time.Now(), s.reg.Address, protocol.PathRun, "", v.signFor, body)
		r, err := s.do(ctx, call{path: protocol.PathRun, body: body, auth: &auth, incarnation: ptr(v.hdr)})
		if err != nil {
			return "", err
		}
		if err := want(v.what, r, http.StatusUnauthorized); err != nil {
			return "", err
		}
	}
	return "calls for other incarnations refused 401", nil
}

// kill sends a kill of ticket and returns the answer.
func (s *suite) kill(ctx context.Context, ticket string) (reply, error) {
	return s.do(ctx, call{path: protocol.PathKill, body: []byte(`{"ticket":"` + ticket + `"}`)})
}

func caseDedupRunning(ctx context.Context, s *suite) (string, error) {
	ticket := s.ticket("dedup")
	spec := runSpec{task: s.task("dedup"), params: `{"sleep_ms":60000}`}
	r, err := s.send(ctx, ticket, spec)
	if err != nil {
		return "", err
	}
	if err := wantAccepted("the first delivery", r, false); err != nil {
		return "", err
	}
	defer func() { _, _ = s.kill(context.WithoutCancel(ctx), ticket) }()
	r, err = s.send(ctx, ticket, spec)
	if err != nil {
		return "", err
	}
	if err := wantAccepted("the same ticket again while it runs", r, true); err != nil {
		return "", err
	}
	return "202 duplicate", nil
}

func caseDedupFinished(ctx context.Context, s *suite) (string, error) {
	ticket := s.ticket("dedup")
	spec := runSpec{task: s.task("dedup"), params: `{"fail":"finished once"}`}
	r, err := s.send(ctx, ticket, spec)
	if err != nil {
		return "", err
	}
	if err := wantAccepted("the first delivery", r, false); err != nil {
		return "", err
	}
	first, err := s.sched.waitResult(ctx, s.cfg.WaitTimeout, ticket, 1)
	if err != nil {
		return "", err
	}
	r, err = s.send(ctx, ticket, spec)
	if err != nil {
		return "", err
	}
	if err := want("the same ticket after its result", r, http.StatusOK); err != nil {
		return "", err
	}
	var f protocol.Finished
	if err := json.Unmarshal(r.body, &f); err != nil || !f.Duplicate || f.Status != first.Status || f.Error != first.Error {
		return "", fmt.Errorf("the same ticket after its result: answered %s, want {\"duplicate\": true, \"status\": %q, \"error\": %q}",
			r, first.Status, first.Error)
	}
	again, err := s.sched.waitResult(ctx, s.cfg.WaitTimeout, ticket, 2)
	if err != nil {
		return "", fmt.Errorf("the result was not re-sent: %w", err)
	}
	if again.Status != first.Status || again.Error != first.Error || again.StartedAt != first.StartedAt {
		return "", fmt.Errorf("the re-sent result (%s %q, started %d) differs from the first (%s %q, started %d): did the handler run twice?",
			again.Status, again.Error, again.StartedAt, first.Status, first.Error, first.StartedAt)
	}
	return "200 duplicate, result re-sent", nil
}

func caseReentry(ctx context.Context, s *suite) (string, error) {
	task := s.task("reentry")
	first := s.ticket("reentry")
	r, err := s.send(ctx, first, runSpec{task: task, params: `{"sleep_ms":60000}`})
	if err != nil {
		return "", err
	}
	if err := wantAccepted("the first run of the task", r, false); err != nil {
		return "", err
	}
	defer func() { _, _ = s.kill(context.WithoutCancel(ctx), first) }()
	second := s.ticket("reentry")
	s.refusedRun("reentry", second)
	r, err = s.send(ctx, second, runSpec{task: task})
	if err != nil {
		return "", err
	}
	if err := want("another ticket of the running task", r, http.StatusConflict); err != nil {
		return "", err
	}
	third := s.ticket("reentry")
	r, err = s.send(ctx, third, runSpec{task: task, parallel: true, params: `{"parallel":true}`})
	if err != nil {
		return "", err
	}
	if err := wantAccepted("another ticket of the running task, parallel", r, false); err != nil {
		return "", err
	}
	res, err := s.sched.waitResult(ctx, s.cfg.WaitTimeout, third, 1)
	if err != nil {
		return "", err
	}
	if res.Status != protocol.StatusSuccess {
		return "", fmt.Errorf("the parallel run: result %s %q, want success", res.Status, res.Error)
	}
	return "409 while running, parallel run accepted", nil
}

// cancelled matches the error of a cancelled echo run: it names the cause.
var cancelled = regexp.MustCompile(`(?i)cancel|deadline|kill|terminat|timeout|timed out`)

func caseDeadline(ctx context.Context, s *suite) (string, error) {
	ticket := s.ticket("deadline")
	r, err := s.send(ctx, ticket, runSpec{task: s.task("deadline"), params: `{"sleep_ms":120000}`,
		deadline: time.Now().Add(2 * time.Second)})
	if err != nil {
		return "", err
	}
	if err := wantAccepted("a run of 120 s with a deadline 2 s away", r, false); err != nil {
		return "", err
	}
	res, err := s.sched.waitResult(ctx, s.cfg.WaitTimeout, ticket, 1)
	if err != nil {
		return "", fmt.Errorf("the run was not ended at its deadline: %w", err)
	}
	if res.Status != protocol.StatusFailed || !cancelled.MatchString(res.Error) {
		return "", fmt.Errorf("result %s %q, want failed naming the deadline", res.Status, res.Error)
	}
	return fmt.Sprintf("failed: %q", res.Error), nil
}

func caseKill(ctx context.Context, s *suite) (string, error) {
	ticket := s.ticket("kill")
	r, err := s.send(ctx, ticket, runSpec{task: s.task("kill"), params: `{"sleep_ms":120000}`})
	if err != nil {
		return "", err
	}
	if err := wantAccepted("a run of 120 s", r, false); err != nil {
		return "", err
	}
	r, err = s.kill(ctx, ticket)
	if err != nil {
		return "", err
	}
	var k protocol.KillAnswer
	if err := want("the kill", r, http.StatusOK); err != nil {
		return "", err
	}
	if err := json.Unmarshal(r.body, &k); err != nil || !k.Killed {
		return "", fmt.Errorf("the kill: answered %s, want {\"killed\": true}", r)
	}
	res, err := s.sched.waitResult(ctx, s.cfg.WaitTimeout, ticket, 1)
	if err != nil {
		return "", fmt.Errorf("the killed run reported nothing: %w", err)
	}
	if res.Status != protocol.StatusFailed || !cancelled.MatchString(res.Error) {
		return "", fmt.Errorf("result %s %q, want failed naming the kill", res.Status, res.Error)
	}
	// A ticket that is not running: 404, or 200 {"killed": false}.
	r, err = s.kill(ctx, s.ticket("kill-nothing"))
	if err != nil {
		return "", err
	}
	if r.code == http.StatusOK {
		if json.Unmarshal(r.body, &k) != nil || k.Killed {
			return "", fmt.Errorf("a kill of a ticket never sent: answered %s, want 404 or {\"killed\": false}", r)
		}
	} else if err := want("a kill of a ticket never sent", r, http.StatusNotFound); err != nil {
		return "", err
	}
	return fmt.Sprintf("killed; failed: %q", res.Error), nil
}

func caseBatch(ctx context.Context, s *suite) (string, error) {
	a, b := s.ticket("batch"), s.ticket("batch")
	runA := runBody(a, runSpec{task: s.task("batch"), params: `{"in":"a"}`})
	runB := runBody(b, runSpec{task: s.task("batch"), params: `{"in":"b"}`})
	malformed := []byte(`{"task":"` + s.task("batch") + `","handler":"echo","attempt":1,"deadline":0}`) // no ticket
	body := []byte(`{"runs":[` + string(runA) + `,` + string(malformed) + `,` + string(runB) + `,` + string(runA) + `]}`)
	r, err := s.do(ctx, call{path: protocol.PathRuns, body: body})
	if err != nil {
		return "", err
	}
	if err := want("a batch of 4 runs", r, http.StatusOK); err != nil {
		return "", err
	}
	var ans protocol.RunBatchAnswer
	if err := json.Unmarshal(r.body, &ans); err != nil || len(ans.Results) != 4 {
		return "", fmt.Errorf("a batch of 4 runs: answered %s, want {\"results\": [4 items]}", r)
	}
	wantItems := []struct {
		what string
		code int
		dup  bool
	}{
		{"run 0 (a)", http.StatusAccepted, false},
		{"run 1 (no ticket)", http.StatusBadRequest, false},
		{"run 2 (b)", http.StatusAccepted, false},
		{"run 3 (a again)", http.StatusAccepted, true},
	}
	for i, w := range wantItems {
		item := reply{code: ans.Results[i].Code, body: ans.Results[i].Body}
		switch {
		case w.dup && item.code == http.StatusOK:
			// a may have finished already: then it is remembered as finished.
			var f protocol.Finished
			if json.Unmarshal(item.body, &f) != nil || !f.Duplicate || f.Status != protocol.StatusSuccess {
				err = fmt.Errorf("%s: answered %s, want 202 {\"accepted\": true, \"duplicate\": true} or 200 {\"duplicate\": true, \"status\": \"success\", …}", w.what, item)
			}
		case w.code == http.StatusAccepted:
			err = wantAccepted(w.what, item, w.dup)
		default:
			err = want(w.what, item, w.code)
		}
		if err != nil {
			return "", fmt.Errorf("answers out of order or wrong: %w", err)
		}
	}
	for _, t := range []string{a, b} {
		res, err := s.sched.waitResult(ctx, s.cfg.WaitTimeout, t, 1)
		if err != nil {
			return "", err
		}
		if res.Status != protocol.StatusSuccess {
			return "", fmt.Errorf("batched run %s: result %s %q, want success", t, res.Status, res.Error)
		}
	}
	// More runs than a batch may carry: refused whole.
	var many bytes.Buffer
	many.WriteString(`{"runs":[`)
	for i := range protocol.MaxRunsPerCall + 1 {
		if i > 0 {
			many.WriteByte(',')
		}
		t := s.ticket("batch-over")
		s.refusedRun("batch", t)
		many.Write(runBody(t, runSpec{task: "conformance-batch-over-" + t}))
	}
	many.WriteString(`]}`)
	r, err = s.do(ctx, call{path: protocol.PathRuns, body: many.Bytes()})
	if err != nil {
		return "", err
	}
	if err := want(fmt.Sprintf("a batch of %d runs", protocol.MaxRunsPerCall+1), r, http.StatusBadRequest); err != nil {
		return "", err
	}
	return "answers in order, the malformed run refused alone, 1001 runs refused whole", nil
}

func caseOversize(ctx context.Context, s *suite) (string, error) {
	ticket := s.ticket("oversize")
	s.refusedRun("oversize", ticket)
	big := `{"pad":"` + strings.Repeat("x", 1<<20) + `"}`
	r, err := s.early(ctx, protocol.PathRun, runBody(ticket, runSpec{task: s.task("oversize"), params: big}), true)
	if err != nil {
		return "", err
	}
	if err := want("a run of more than 1 MiB", r, http.StatusRequestEntityTooLarge); err != nil {
		return "", err
	}
	return "413", nil
}

func caseMalformed(ctx context.Context, s *suite) (string, error) {
	ticket := s.ticket("malformed")
	s.refusedRun("malformed", ticket)
	good := string(runBody(ticket, runSpec{task: s.task("malformed")}))
	rest := strings.TrimPrefix(good, "{")
	for _, v := range []struct {
		what, body, field string
	}{
		{"an empty body", "", ""},
		{"a body that is not JSON", "not json", ""},
		{"a JSON array", "[" + good + "]", ""},
		{"a run followed by more data", good + "{}", ""},
		{"a run with a repeated key", `{"ticket":"` + ticket + `",` + rest, "ticket"},
		{"a run without its ticket", strings.Replace(good, `"ticket":"`+ticket+`",`, "", 1), "ticket"},
		{"a run whose attempt is a string", strings.Replace(good, `"attempt":1`, `"attempt":"1"`, 1), "attempt"},
		{"a run whose task is not valid UTF-8", strings.Replace(good, `"task":"`, "\"task\":\"\xff", 1), "task"},
		{"a run whose task holds a lone surrogate", strings.Replace(good, `"task":"`, `"task":"\ud800`, 1), "task"},
		{"a run whose shard is 256", strings.Replace(good, `"ticket":`, `"shard":256,"epoch":1,"ticket":`, 1), "shard"},
	} {
		r, err := s.do(ctx, call{path: protocol.PathRun, body: []byte(v.body)})
		if err != nil {
			return "", err
		}
		if err := want(v.what, r, http.StatusBadRequest); err != nil {
			return "", err
		}
		if v.field != "" && !bytes.Contains(r.body, []byte(v.field)) {
			return "", fmt.Errorf("%s: answered %s, want the error to name %q", v.what, r, v.field)
		}
	}
	r, err := s.do(ctx, call{path: protocol.PathKill, body: []byte(`{"ticket":}`)})
	if err != nil {
		return "", err
	}
	if err := want("a kill that is not JSON", r, http.StatusBadRequest); err != nil {
		return "", err
	}
	return "11 malformed bodies refused 400", nil
}

func caseUnknownField(ctx context.Context, s *suite) (string, error) {
	res, err := s.echoRun(ctx, "unknown-field", runSpec{params: `{"x":1}`,
		extra: `"conformance_future_field":{"nested":[1,"two",{"three":3}]},"zz_another":null`})
	if err != nil {
		return "", fmt.Errorf("a run with fields the executor does not know: %w", err)
	}
	if res.Status != protocol.StatusSuccess {
		return "", fmt.Errorf("a run with fields the executor does not know: result %s %q, want success", res.Status, res.Error)
	}
	r, err := s.do(ctx, call{path: protocol.PathKill, body: []byte(`{"ticket":"` + s.ticket("unknown-field") + `","conformance_future_field":true}`)})
	if err != nil {
		return "", err
	}
	if r.code == http.StatusBadRequest {
		return "", fmt.Errorf("a kill with a field the executor does not know: answered %s, want it ignored", r)
	}
	return "unknown fields ignored in a run and a kill", nil
}

func caseEpochShard(ctx context.Context, s *suite) (string, error) {
	// Epochs above any an earlier suite sent, so that an executor checked twice still
	// starts from below them.
	base := time.Now().Unix()
	shardA, shardB := 7, 8
	send := func(what string, shard int, epoch int64, code int) error {
		ticket := s.ticket("epoch")
		if code != http.StatusAccepted {
			s.refusedRun("epoch-shard", ticket)
		}
		r, err := s.send(ctx, ticket, runSpec{task: s.task("epoch"), epoch: epoch, shard: ptr(shard)})
		if err != nil {
			return err
		}
		if code == http.StatusAccepted {
			return wantAccepted(what, r, false)
		}
		return want(what, r, code)
	}
	if err := send(fmt.Sprintf("a run of shard %d at epoch %d", shardA, base+5), shardA, base+5, http.StatusAccepted); err != nil {
		return "", err
	}
	if err := send(fmt.Sprintf("a run of shard %d at the lower epoch %d", shardA, base+4), shardA, base+4, http.StatusConflict); err != nil {
		return "", err
	}
	if err := send(fmt.Sprintf("a run of shard %d at epoch %d, below shard %d's", shardB, base+1, shardA), shardB, base+1, http.StatusAccepted); err != nil {
		return "", err
	}
	return "stale epoch refused 409 for its shard only", nil
}

func caseResend(ctx context.Context, s *suite) (string, error) {
	const refusals = 2
	ticket := s.ticket("resend")
	s.sched.record(func() { s.sched.refuse[ticket] = refusals })
	r, err := s.send(ctx, ticket, runSpec{task: s.task("resend"), params: `{"resend":true}`})
	if err != nil {
		return "", err
	}
	if err := wantAccepted("the run", r, false); err != nil {
		return "", err
	}
	ok := s.sched.wait(ctx, s.cfg.WaitTimeout, func() bool { return s.sched.acked[ticket] })
	s.sched.mu.Lock()
	posts := s.sched.posts[ticket]
	s.sched.mu.Unlock()
	if !ok {
		return "", fmt.Errorf("the result was posted %d time(s) within %s; the first %d were answered 503 and it must be re-sent until acknowledged",
			posts, s.cfg.WaitTimeout, refusals)
	}
	return fmt.Sprintf("acknowledged at post %d", posts), nil
}

func caseUnknownHandler(ctx context.Context, s *suite) (string, error) {
	ticket := s.ticket("unknown-handler")
	s.refusedRun("unknown-handler", ticket)
	r, err := s.send(ctx, ticket, runSpec{task: s.task("unknown-handler"), handler: "conformance-no-such-handler"})
	if err != nil {
		return "", err
	}
	if err := want("a run of a handler the executor does not serve", r, http.StatusNotFound); err != nil {
		return "", err
	}
	return "404", nil
}

func caseReregister(ctx context.Context, s *suite) (string, error) {
	var before int
	s.sched.record(func() {
		before = len(s.sched.regs)
		s.sched.beat404 = 1
	})
	ok := s.sched.wait(ctx, s.cfg.WaitTimeout, func() bool { return len(s.sched.regs) > before })
	if !ok {
		return "", fmt.Errorf("no registration within %s of a heartbeat answered 404", s.cfg.WaitTimeout)
	}
	s.sched.mu.Lock()
	again := s.sched.regs[before]
	s.sched.mu.Unlock()
	if again.Address != s.reg.Address || again.App != s.reg.App || again.Incarnation != s.reg.Incarnation {
		return "", fmt.Errorf("registered again as %s at %s, incarnation %q; want the same as at first (%s at %s, %q)",
			again.App, again.Address, again.Incarnation, s.reg.App, s.reg.Address, s.reg.Incarnation)
	}
	// The registration holds again: a later heartbeat is answered 200.
	var beats int
	s.sched.record(func() { beats = len(s.sched.beats) })
	ok = s.sched.wait(ctx, s.cfg.WaitTimeout, func() bool {
		return slices.ContainsFunc(s.sched.beats[beats:], func(b beatCall) bool { return b.code == http.StatusOK })
	})
	if !ok {
		return "", fmt.Errorf("no heartbeat accepted within %s of registering again", s.cfg.WaitTimeout)
	}
	return "registered again, same incarnation", nil
}

func caseDeregister(ctx context.Context, s *suite) (string, error) {
	if s.proc == nil {
		return "", skipped("needs --exec: the suite signals the executor it started")
	}
	// A run in flight at SIGTERM is finished and reported before the executor exits.
	ticket := s.ticket("drain")
	r, err := s.send(ctx, ticket, runSpec{task: s.task("drain"), params: `{"sleep_ms":3000}`})
	if err != nil {
		return "", err
	}
	if err := wantAccepted("a run of 3 s", r, false); err != nil {
		return "", err
	}
	if err := s.proc.cmd.Process.Signal(sigterm); err != nil {
		return "", fmt.Errorf("cannot signal the executor: %w", err)
	}
	ok := s.sched.wait(ctx, s.cfg.WaitTimeout, func() bool { return len(s.sched.deregs) > 0 || s.proc.done() })
	s.sched.mu.Lock()
	deregistered := len(s.sched.deregs) > 0
	s.sched.mu.Unlock()
	switch {
	case !deregistered && ok:
		return "", fmt.Errorf("the executor exited (%v) after SIGTERM without deregistering", s.proc.exitErr())
	case !deregistered:
		return "", fmt.Errorf("no deregistration within %s of SIGTERM", s.cfg.WaitTimeout)
	}
	s.sched.mu.Lock()
	d := s.sched.deregs[0]
	s.sched.mu.Unlock()
	if d.App != s.reg.App || d.Address != s.reg.Address || (d.Incarnation != "" && d.Incarnation != s.reg.Incarnation) {
		return "", fmt.Errorf("deregistered %s at %s, incarnation %q; want %s at %s, %q", d.App, d.Address, d.Incarnation,
			s.reg.App, s.reg.Address, s.reg.Incarnation)
	}
	// Draining, it takes no new run. (Once it has exited, a refused connection says nothing.)
	late := s.ticket("drain")
	s.refusedRun("deregister", late)
	r, err = s.send(ctx, late, runSpec{task: s.task("drain")})
	switch {
	case err != nil && !s.proc.done():
		return "", fmt.Errorf("a run sent while draining: %w", err)
	case err == nil:
		if err := want("a run sent after the deregistration, while draining", r, http.StatusServiceUnavailable); err != nil {
			return "", err
		}
	}
	res, err := s.sched.waitResult(ctx, s.cfg.WaitTimeout, ticket, 1)
	if err != nil {
		return "", fmt.Errorf("the run in flight at SIGTERM was not finished and reported: %w", err)
	}
	if res.Status != protocol.StatusSuccess {
		return "", fmt.Errorf("the run in flight at SIGTERM: result %s %q, want success (drained, not cancelled)", res.Status, res.Error)
	}
	select {
	case <-s.proc.exited:
	case <-time.After(s.cfg.WaitTimeout):
		return "", fmt.Errorf("the executor did not exit within %s of SIGTERM", s.cfg.WaitTimeout)
	}
	if s.proc.err != nil {
		return "", fmt.Errorf("the executor exited with %v after SIGTERM, want status 0", s.proc.err)
	}
	return "deregistered, drained, exited 0", nil
}
