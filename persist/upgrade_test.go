package persist_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
)

// upgradeDir holds the fixture files.
const upgradeDir = "testdata/upgrade"

func fixturePath(name, ext string) string {
	return filepath.Join(upgradeDir, name+"."+ext)
}

// checkUpgrade opens dsn (which migrates it), migrates once more, and compares what the
// store reads with want.
func checkUpgrade(t *testing.T, dsn string, want *storeSnapshot) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := persist.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("cannot open the fixture with today's store: %v", err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	got, err := snapshot(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	compareSnapshots(t, got, want)
}

// storeSnapshot is everything a fixture holds, as the store reads it.
type storeSnapshot struct {
	Tasks     []snapTask       `json:"tasks"`     // ListTasks, by id
	Runs      []model.Run      `json:"runs"`      // GetRun of every ticket ListRuns gives, by task then newest first
	Actions   []model.Action   `json:"actions"`   // ListActions of every task and of task 0 (alerts)
	Executors []model.Executor `json:"executors"` // ListExecutors
	// DispatchKeys holds the executors' dispatch keys (schema step 9; none before), by
	// app@address: model.Executor never shows them.
	DispatchKeys map[string]string `json:"dispatch_keys,omitempty"`
	// Incarnations holds the executors' incarnations (schema step 16; none before), by
	// app@address: model.Executor never shows them.
	Incarnations map[string]string  `json:"incarnations,omitempty"`
	LeaseName    string             `json:"lease_name"`  // the lease row the fixture holds
	Lease        model.Lease        `json:"lease"`       // ReadLease(LeaseName)
	Upstreams    []string           `json:"upstreams"`   // UpstreamNames, sorted
	Dependents   map[string][]int64 `json:"dependents"`  // Dependents(upstream) ids, per upstream
	OpenManual   []string           `json:"open_manual"` // tickets of ListRunningManual
	Due          []int64            `json:"due"`         // ids LoadDue gives over all time for SCHEDULED and RETRYING
	DueRefs      []persist.DueRef   `json:"due_refs"`    // LoadDueRefs over the same, sorted by id
}

// snapTask is a task with its runtime's TaskID, which Runtime's JSON leaves out.
type snapTask struct {
	Def           model.TaskDef `json:"def"`
	Runtime       model.Runtime `json:"runtime"`
	RuntimeTaskID int64         `json:"runtime_task_id"`
}

// fixtureLease is the lease name the fixtures hold a row for.
const fixtureLease = "primary"

// snapshot reads everything the fixtures hold through the Store interface.
func snapshot(ctx context.Context, s persist.Store) (*storeSnapshot, error) {
	out := &storeSnapshot{LeaseName: fixtureLease, Dependents: map[string][]int64{}}
	tasks, err := s.ListTasks(ctx, persist.TaskFilter{})
	if err != nil {
		return nil, fmt.Errorf("ListTasks: %w", err)
	}
	taskIDs := []int64{0} // 0: the actions that belong to no task (alerts)
	for _, tk := range tasks {
		byName, err := s.GetTask(ctx, tk.Def.Name)
		if err != nil {
			return nil, fmt.Errorf("GetTask(%q): %w", tk.Def.Name, err)
		}
		if !reflect.DeepEqual(*byName, tk) {
			return nil, fmt.Errorf("GetTask(%q) = %+v, ListTasks gave %+v", tk.Def.Name, *byName, tk)
		}
		out.Tasks = append(out.Tasks, snapTask{Def: tk.Def, Runtime: tk.Runtime, RuntimeTaskID: tk.Runtime.TaskID})
		taskIDs = append(taskIDs, tk.Def.ID)
		runs, err := s.ListRuns(ctx, tk.Def.ID, 0)
		if err != nil {
			return nil, fmt.Errorf("ListRuns(%d): %w", tk.Def.ID, err)
		}
		for _, r := range runs {
			one, err := s.GetRun(ctx, r.Ticket)
			if err != nil {
				return nil, fmt.Errorf("GetRun(%q): %w", r.Ticket, err)
			}
			if !reflect.DeepEqual(*one, r) {
				return nil, fmt.Errorf("GetRun(%q) = %+v, ListRuns gave %+v", r.Ticket, *one, r)
			}
			out.Runs = append(out.Runs, r)
		}
	}
	for _, id := range taskIDs {
		acts, err := s.ListActions(ctx, id, 0)
		if err != nil {
			return nil, fmt.Errorf("ListActions(%d): %w", id, err)
		}
		out.Actions = append(out.Actions, acts...)
	}
	if out.Executors, err = s.ListExecutors(ctx); err != nil {
		return nil, fmt.Errorf("ListExecutors: %w", err)
	}
	for _, e := range out.Executors {
		if k := executorKey(e); k != "" {
			if out.DispatchKeys == nil {
				out.DispatchKeys = map[string]string{}
			}
			out.DispatchKeys[e.App+"@"+e.Address] = k
		}
		if inc := executorIncarnation(e); inc != "" {
			if out.Incarnations == nil {
				out.Incarnations = map[string]string{}
			}
			out.Incarnations[e.App+"@"+e.Address] = inc
		}
	}
	if out.Lease, err = s.ReadLease(ctx, fixtureLease); err != nil {
		return nil, fmt.Errorf("ReadLease: %w", err)
	}
	// Since schema step 3 the expiry is a time of the database's own clock, taken when the
	// fixture was written: it differs between the two databases of one fixture and is long
	// past when the fixture is read. Holder and epoch are what must carry over.
	out.Lease.ExpiresAt = 0
	if out.Upstreams, err = s.UpstreamNames(ctx); err != nil {
		return nil, fmt.Errorf("UpstreamNames: %w", err)
	}
	sort.Strings(out.Upstreams)
	for _, up := range out.Upstreams {
		deps, err := s.Dependents(ctx, up)
		if err != nil {
			return nil, fmt.Errorf("Dependents(%q): %w", up, err)
		}
		for _, d := range deps {
			out.Dependents[up] = append(out.Dependents[up], d.Def.ID)
		}
	}
	open, err := s.ListRunningManual(ctx, 0)
	if err != nil {
		return nil, fmt.Errorf("ListRunningManual: %w", err)
	}
	for _, r := range open {
		out.OpenManual = append(out.OpenManual, r.Ticket)
	}
	armed := []model.State{model.StateScheduled, model.StateRetrying}
	const forever = int64(1) << 62
	if err := s.LoadDue(ctx, 1, forever, armed, func(tk *model.Task) error {
		out.Due = append(out.Due, tk.Def.ID)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("LoadDue: %w", err)
	}
	if err := s.LoadDueRefs(ctx, 1, forever, armed, func(r persist.DueRef) error {
		out.DueRefs = append(out.DueRefs, r)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("LoadDueRefs: %w", err)
	}
	sort.Slice(out.DueRefs, func(i, j int) bool { return out.DueRefs[i].TaskID < out.DueRefs[j].TaskID })
	return out, nil
}

// compareSnapshots compares through JSON, the form the want file is kept in (so an empty
// and a nil list are alike), and names the first differing task, run or action.
func compareSnapshots(t *testing.T, got, want *storeSnapshot) {
	t.Helper()
	js := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if len(got.Tasks) != len(want.Tasks) {
		t.Errorf("%d tasks, want %d", len(got.Tasks), len(want.Tasks))
	}
	for i := 0; i < len(got.Tasks) && i < len(want.Tasks); i++ {
		if g, w := js(got.Tasks[i]), js(want.Tasks[i]); g != w {
			t.Errorf("task %d:\n got %s\nwant %s", i, g, w)
		}
	}
	if len(got.Runs) != len(want.Runs) {
		t.Errorf("%d runs, want %d", len(got.Runs), len(want.Runs))
	}
	for i := 0; i < len(got.Runs) && i < len(want.Runs); i++ {
		if g, w := js(got.Runs[i]), js(want.Runs[i]); g != w {
			t.Errorf("run %d:\n got %s\nwant %s", i, g, w)
		}
	}
	if len(got.Actions) != len(want.Actions) {
		t.Errorf("%d actions, want %d", len(got.Actions), len(want.Actions))
	}
	for i := 0; i < len(got.Actions) && i < len(want.Actions); i++ {
		if g, w := js(got.Actions[i]), js(want.Actions[i]); g != w {
			t.Errorf("action %d:\n got %s\nwant %s", i, g, w)
		}
	}
	rest := func(s *storeSnapshot) string {
		c := *s
		c.Tasks, c.Runs, c.Actions = nil, nil, nil
		return js(c)
	}
	if g, w := rest(got), rest(want); g != w {
		t.Errorf("executors, lease, dependencies or due sets differ:\n got %s\nwant %s", g, w)
	}
}

// checkFixtureCoverage fails when a fixture lacks something it is meant to carry: every
// trigger type, every state, every run result and kind, an alert, executors of both
// statuses, a held lease, dependency edges and armed tasks.
func checkFixtureCoverage(t *testing.T, s *storeSnapshot) {
	t.Helper()
	seen := map[string]bool{}
	for _, tk := range s.Tasks {
		seen["trigger "+tk.Def.Trigger] = true
		seen["state "+string(tk.Runtime.State)] = true
	}
	for _, r := range s.Runs {
		seen["result "+r.Result] = true
		seen["kind "+r.Kind] = true
	}
	for _, a := range s.Actions {
		if a.TaskID == 0 {
			seen["alert"] = true
		}
	}
	for _, e := range s.Executors {
		seen["executor "+e.Status] = true
	}
	var want []string
	for _, tr := range []string{model.TriggerCron, model.TriggerDelay, model.TriggerManual, model.TriggerDependency} {
		want = append(want, "trigger "+tr)
	}
	for _, st := range []model.State{model.StateWaiting, model.StateScheduled, model.StateRunning, model.StateSuccess,
		model.StateFailed, model.StateRetrying, model.StatePaused, model.StateKilled} {
		want = append(want, "state "+string(st))
	}
	for _, r := range []string{model.ResultRunning, model.ResultSuccess, model.ResultFailed, model.ResultTimeout,
		model.ResultKilled, model.ResultLost, model.ResultSkipped} {
		want = append(want, "result "+r)
	}
	want = append(want, "kind "+model.RunScheduled, "kind "+model.RunManual, "alert", "executor alive", "executor lost")
	for _, w := range want {
		if !seen[w] {
			t.Errorf("the fixture has no %s", w)
		}
	}
	if s.Lease.Holder == "" || s.Lease.Epoch == 0 {
		t.Errorf("the fixture's lease %+v is not held", s.Lease)
	}
	if len(s.Upstreams) == 0 || len(s.OpenManual) == 0 || len(s.Due) == 0 {
		t.Errorf("the fixture lacks dependency edges (%v), open run-now runs (%v) or armed tasks (%v)",
			s.Upstreams, s.OpenManual, s.Due)
	}
}

func readWant(t *testing.T, name string) *storeSnapshot {
	t.Helper()
	b, err := os.ReadFile(fixturePath(name, "want.json"))
	if err != nil {
		t.Fatalf("cannot read the fixture's expected contents: %v", err)
	}
	var s storeSnapshot
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("cannot decode %s: %v", fixturePath(name, "want.json"), err)
	}
	return &s
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// loadMySQLDump runs the statements of a dump written by dumpMySQL on the database of dsn
// (a "mysql:…" DSN), one by one: a statement ends with a line that ends in ";", lines that
// start with "--" are comments. Values never span lines (dumpMySQL escapes newlines).
func loadMySQLDump(t *testing.T, dsn, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	db, err := sql.Open("mysql", strings.TrimPrefix(dsn, persist.SchemeMySQL+":"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var stmt strings.Builder
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if stmt.Len() == 0 && (strings.HasPrefix(line, "--") || strings.TrimSpace(line) == "") {
			continue
		}
		stmt.WriteString(line)
		stmt.WriteByte('\n')
		if strings.HasSuffix(line, ";") {
			if _, err := db.ExecContext(ctx, stmt.String()); err != nil {
				t.Fatalf("cannot load statement %d of %s: %v\n%s", n+1, path, err, stmt.String())
			}
			n++
			stmt.Reset()
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if stmt.Len() > 0 {
		t.Fatalf("%s ends inside a statement: %s", path, stmt.String())
	}
	if n == 0 {
		t.Fatalf("%s holds no statements", path)
	}
}
