package conformance_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/axe-sched/axe/conformance"
	"github.com/axe-sched/axe/internal/test/leaktest"
)

// Binaries the tests build once: the Go SDK's echo example, axe (for the command and for
// axe agent) and the deliberately broken executor of testdata.
var echoBin, axeBin, brokenBin string

const token = "conformance-test-token"

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "axe-conformance-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "cannot make a build directory:", err)
		os.Exit(1)
	}
	echoBin, axeBin, brokenBin = filepath.Join(dir, "echo"), filepath.Join(dir, "axe"), filepath.Join(dir, "broken")
	for bin, pkg := range map[string]string{echoBin: "../executor/examples/echo", axeBin: "../cmd/axe", brokenBin: "./testdata/broken"} {
		build := exec.Command("go", "build", "-o", bin, pkg)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "cannot build %s: %v\n", pkg, err)
			_ = os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	goleak.VerifyTestMain(m, append(leaktest.Options(), goleak.Cleanup(func(code int) {
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}))...)
}

// results maps each case of a report to its result.
func results(rep conformance.Report) map[string]conformance.CaseResult {
	m := map[string]conformance.CaseResult{}
	for _, c := range rep.Cases {
		m[c.Name] = c
	}
	return m
}

// wantResults checks that every case of rep has the result want gives it (Pass when
// absent) and that rep ran exactly the cases named by names.
func wantResults(t *testing.T, rep conformance.Report, names []string, want map[string]string) {
	t.Helper()
	got := results(rep)
	if len(rep.Cases) != len(names) {
		t.Errorf("the report has %d cases, want %d (%v)", len(rep.Cases), len(names), names)
	}
	for _, name := range names {
		w := want[name]
		if w == "" {
			w = conformance.Pass
		}
		c, ok := got[name]
		switch {
		case !ok:
			t.Errorf("case %s: missing from the report", name)
		case c.Result != w:
			t.Errorf("case %s: %s (%s), want %s", name, c.Result, c.Reason, w)
		}
	}
	var tally [3]int
	for _, c := range rep.Cases {
		tally[slices.Index([]string{conformance.Pass, conformance.Fail, conformance.Skip}, c.Result)]++
	}
	if tally != [3]int{rep.Passed, rep.Failed, rep.Skipped} {
		t.Errorf("the report counts %d passed, %d failed, %d skipped; its cases %v", rep.Passed, rep.Failed, rep.Skipped, tally)
	}
	if rep.OK() != (rep.Failed == 0) {
		t.Errorf("OK() = %v with %d failed", rep.OK(), rep.Failed)
	}
}

// runCommand runs `axe conformance executor args… --json` and returns its report and exit
// status.
func runCommand(t *testing.T, args ...string) (conformance.Report, int) {
	t.Helper()
	cmd := exec.Command(axeBin, append([]string{"conformance", "executor", "--json"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("axe conformance executor: %v", err)
	}
	var rep conformance.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("axe conformance executor printed no JSON report (%v): %s; stderr: %s", err, out, stderr.String())
	}
	return rep, code
}

func TestGoSDKEchoPassesEveryCase(t *testing.T) {
	rep, err := conformance.Run(context.Background(), conformance.Config{Exec: echoBin, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	wantResults(t, rep, conformance.Names(), nil)
}

func TestAgentPassesEveryCase(t *testing.T) {
	script, err := filepath.Abs("../executor/agent/examples/echo/run.sh")
	if err != nil {
		t.Fatal(err)
	}
	rep, code := runCommand(t, "--token", token, "--exec", script+" "+axeBin)
	wantResults(t, rep, conformance.Names(), nil)
	if code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
}

// The broken executor checks no signature, forgets every ticket and does not deregister: the
// suite must fail exactly those cases (among others) and exit 1, while passing the parts it
// does right, so that a passing case means something.
func TestBrokenExecutorFails(t *testing.T) {
	rep, code := runCommand(t, "--token", token, "--exec", brokenBin)
	if code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	got := results(rep)
	for _, name := range []string{"signature-missing", "signature-bad", "signature-clock-skew", "incarnation",
		"dedup-running", "dedup-finished", "reentry", "unknown-handler", "deregister"} {
		if c := got[name]; c.Result != conformance.Fail {
			t.Errorf("case %s: %s (%s), want FAIL", name, c.Result, c.Reason)
		}
	}
	for _, name := range []string{"registration", "heartbeat", "echo", "echo-fail", "kill", "deadline", "reregister-after-404"} {
		if c := got[name]; c.Result != conformance.Pass {
			t.Errorf("case %s: %s (%s), want PASS", name, c.Result, c.Reason)
		}
	}
	if rep.OK() || rep.Failed == 0 {
		t.Errorf("report OK with %d failed", rep.Failed)
	}
}

// A run answered as refused whose result arrives anyway fails its case, though the answer
// was right.
func TestRefusedRunThatRanFails(t *testing.T) {
	rep, code := runCommand(t, "--token", token, "--run", "^unknown-handler$", "--exec", "env BROKEN_RUNS_REFUSED=1 "+brokenBin)
	if code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	wantResults(t, rep, []string{"unknown-handler"}, map[string]string{"unknown-handler": conformance.Fail})
	if c := results(rep)["unknown-handler"]; !strings.Contains(c.Reason, "yet its handler ran") {
		t.Errorf("case unknown-handler: reason %q, want it to say the refused run ran", c.Reason)
	}
}

// Without a token the executor checks no signatures: those cases are skipped, not passed.
// (And AXE_APP is the app asked for.)
func TestWithoutTokenSkipsSignatureCases(t *testing.T) {
	re := regexp.MustCompile(`^(registration|echo|signature-.*|incarnation|dedup-finished)$`)
	rep, err := conformance.Run(context.Background(), conformance.Config{Exec: echoBin, Run: re, App: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	names := slices.DeleteFunc(conformance.Names(), func(n string) bool { return !re.MatchString(n) })
	wantResults(t, rep, names, map[string]string{
		"signature-clock-skew": conformance.Skip, "signature-bad": conformance.Skip,
		"signature-missing": conformance.Skip, "incarnation": conformance.Skip,
	})
}

// With URL the suite waits for an executor started by hand and pointed at its scheduler.
func TestURLWaitsForAnExecutorStartedByHand(t *testing.T) {
	listen := freeAddr(t)
	var echo *exec.Cmd
	re := regexp.MustCompile(`^(registration|heartbeat|echo|kill|deregister)$`)
	rep, err := conformance.Run(context.Background(), conformance.Config{
		URL: "http://" + listen, Token: token, Run: re,
		OnListen: func(schedulerURL string) {
			echo = exec.Command(echoBin)
			echo.Env = append(os.Environ(), "AXE_SCHEDULERS="+schedulerURL, "AXE_LISTEN="+listen, "AXE_TOKEN="+token)
			if err := echo.Start(); err != nil {
				t.Errorf("cannot start the echo executor: %v", err)
			}
		},
	})
	if echo != nil && echo.Process != nil {
		_ = echo.Process.Kill()
		_ = echo.Wait()
	}
	if err != nil {
		t.Fatal(err)
	}
	wantResults(t, rep, []string{"registration", "heartbeat", "echo", "kill", "deregister"},
		map[string]string{"deregister": conformance.Skip})
}

// An executor that exits before registering fails every selected case, saying so.
func TestExecutorThatNeverRegisters(t *testing.T) {
	rep, err := conformance.Run(context.Background(), conformance.Config{
		Exec: `sh -c 'echo cannot start >&2; exit 3'`, Run: regexp.MustCompile(`^(registration|echo)$`)})
	if err != nil {
		t.Fatal(err)
	}
	wantResults(t, rep, []string{"registration", "echo"}, map[string]string{"registration": conformance.Fail, "echo": conformance.Fail})
	for _, c := range rep.Cases {
		if !strings.Contains(c.Reason, "exited before registering (exit status 3)") || !strings.Contains(c.Reason, "cannot start") {
			t.Errorf("case %s: reason %q, want the exit status and the executor's output", c.Name, c.Reason)
		}
	}
}

func TestConfigIsChecked(t *testing.T) {
	for _, cfg := range []conformance.Config{
		{},
		{Exec: "x", URL: "http://127.0.0.1:1"},
		{URL: "127.0.0.1:9100"},
		{URL: "http://127.0.0.1"},
		{URL: "https://127.0.0.1:9100"},
	} {
		if _, err := conformance.Run(context.Background(), cfg); !errors.Is(err, conformance.ErrInvalidConfig) {
			t.Errorf("Run(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

// docs/conformance.md describes every case, in the order they run, and no other.
func TestDocsDescribeEveryCase(t *testing.T) {
	doc, err := os.ReadFile("../docs/conformance.md")
	if err != nil {
		t.Fatal(err)
	}
	_, cases, ok := strings.Cut(string(doc), "\n## The cases\n")
	if !ok {
		t.Fatal(`docs/conformance.md has no section "## The cases"`)
	}
	cases, _, _ = strings.Cut(cases, "\n## ")
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9-]+)` \\|").FindAllStringSubmatch(cases, -1) {
		documented = append(documented, m[1])
	}
	if !slices.Equal(documented, conformance.Names()) {
		t.Errorf("docs/conformance.md describes the cases %v; the suite runs %v", documented, conformance.Names())
	}
}
