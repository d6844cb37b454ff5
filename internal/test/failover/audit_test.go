package failover

import (
	"strings"
	"testing"
	"time"
)

// The audit must be able to fail: each case feeds it records with one known defect.

const sec = int64(time.Second / time.Millisecond)

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

// clean returns the records of a task firing every second over [base, base+10s), each run
// dispatched 10 ms late, finished 50 ms later and received once.
func clean() ([]RunRow, []Receipt) {
	var runs []RunRow
	var recs []Receipt
	for i := range int64(10) {
		f := base + i*sec
		ticket := "t-" + time.UnixMilli(f).UTC().Format("150405")
		runs = append(runs, RunRow{Ticket: ticket, Task: "every", Kind: "cron", Attempt: 1, ScheduledAt: f,
			DispatchedAt: f + 10, EndedAt: f + 60, Result: "success"})
		recs = append(recs, Receipt{Task: "every", Ticket: ticket, Attempt: 1, ScheduledAt: f, Via: "http"})
	}
	return runs, recs
}

var everyTask = []AuditTask{{Name: "every", Cron: "* * * * * *"}}

func check(t *testing.T, runs []RunRow, acts []ActionRow, recs []Receipt, faults ...Fault) *Audit {
	t.Helper()
	a, err := Check(everyTask, Span{From: base, To: base + 10*sec}, faults, runs, acts, recs)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestAuditClean(t *testing.T) {
	runs, recs := clean()
	a := check(t, runs, nil, recs)
	if !a.OK() || a.Fires != 10 || a.Ran != 10 || a.Misfired != 0 {
		t.Fatalf("clean audit: %s", a)
	}
}

func TestAuditFindsADuplicate(t *testing.T) {
	runs, recs := clean()
	recs = append(recs, recs[3])
	a := check(t, runs, nil, recs)
	if a.OK() || len(a.Duplicates) != 1 || !strings.Contains(a.Duplicates[0], "received 2 times") {
		t.Fatalf("audit of a duplicate: %s", a)
	}
}

func TestAuditFindsASilentGap(t *testing.T) {
	runs, recs := clean()
	runs = append(runs[:4], runs[6:]...)
	recs = append(recs[:4], recs[6:]...)
	a := check(t, runs, nil, recs)
	if a.OK() || len(a.Gaps) != 2 || a.Misfired != 0 {
		t.Fatalf("audit of a silent gap: %s", a)
	}
	// An action that accounts for one of the two only leaves the other a gap.
	acts := []ActionRow{{Task: "every", Action: "schedule", At: base + 3*sec + 60,
		Detail: "next fire 00:00:05Z (1 earlier fire(s) missed while running, coalesced)"}}
	a = check(t, runs, acts, recs)
	if a.OK() || len(a.Gaps) != 1 || a.Misfired != 1 {
		t.Fatalf("audit of a half-recorded gap: %s", a)
	}
	// An action outside the gap does not cover it.
	acts[0].At = base + 8*sec
	acts[0].Detail = "due 00:00:04Z (misfire: 2 fire(s) skipped)"
	if a = check(t, runs, acts, recs); len(a.Gaps) != 2 {
		t.Fatalf("an action after the gap covered it: %s", a)
	}
}

func TestAuditAcceptsRecordedMisfires(t *testing.T) {
	runs, recs := clean()
	runs = append(runs[:4], runs[7:]...)
	recs = append(recs[:4], recs[7:]...)
	for _, detail := range []string{
		"due 00:00:04Z (misfire: 3 fire(s) skipped)",
		"next fire 00:00:07Z (3 earlier fire(s) missed while running, coalesced)",
		"due 00:00:04Z (misfire: fire_once, 4 fire(s) coalesced into one)",
		// The overlap and catch-up records (engine/core_overlap.go).
		"skip: 3 fire(s) (2026-01-01T00:00:04Z to 2026-01-01T00:00:06Z) due while the run was in flight skipped",
		"buffer_one: the latest fire due while the run was in flight, 2026-01-01T00:00:07Z, runs now; 3 fire(s) (2026-01-01T00:00:04Z to 2026-01-01T00:00:06Z) before it skipped",
		"catch-up window 60 s: 3 fire(s) (2026-01-01T00:00:04Z to 2026-01-01T00:00:06Z) older than the window skipped; 1 fire(s) (2026-01-01T00:00:07Z) missed within it run one after another, oldest first, each with its own time",
	} {
		acts := []ActionRow{{Task: "every", Action: "misfire", At: base + 6*sec, Detail: detail}}
		a := check(t, runs, acts, recs)
		if !a.OK() || a.Misfired != 3 || a.Ran != 7 {
			t.Errorf("%q: %s", detail, a)
		}
	}
}

func TestAuditFindsUnrecordedAndPhantomRuns(t *testing.T) {
	runs, recs := clean()
	recs = append(recs, Receipt{Task: "every", Ticket: "x", Attempt: 1, ScheduledAt: base + 20*sec})
	a := check(t, runs, nil, recs)
	if len(a.Unrecorded) != 1 || a.OK() {
		t.Fatalf("audit of a receipt without a record: %s", a)
	}
	runs, recs = clean()
	a = check(t, runs, nil, recs[1:])
	if len(a.Phantoms) != 1 || a.OK() {
		t.Fatalf("audit of a success never received: %s", a)
	}
}

func TestAuditCountsRunsInDoubt(t *testing.T) {
	runs, recs := clean()
	fault := Fault(base + 5*sec + 30) // run 5 is in flight (dispatched +10, would end +60)
	runs[5].Result, runs[5].EndedAt = "lost", base+9*sec
	runs[6].Result, runs[6].EndedAt = "running", 0
	a := check(t, runs, nil, recs, fault)
	if a.InDoubt["lost"] != 1 || a.InDoubt["lost+received"] != 1 || a.InDoubt["running"] != 0 {
		t.Errorf("in doubt = %v", a.InDoubt)
	}
	if len(a.Unresolved) != 1 || a.OK() {
		t.Errorf("a run left running is not reported: %s", a)
	}
	// An executor run in doubt that ran, yet ended timed out, lost its acknowledged result.
	recs[5].Via = "executor"
	runs[6].Result, runs[6].EndedAt = "success", base+7*sec
	a = check(t, runs, nil, recs, fault)
	if len(a.ResultsLost) != 1 || !strings.Contains(a.ResultsLost[0], "recorded lost") {
		t.Errorf("a lost executor result is not reported: %s", a)
	}
	// Timed out: excused only when its result was refused as a timeout and the run ended at
	// its deadline or later.
	ticket := runs[5].Ticket
	for _, c := range []struct {
		refused bool
		ended   int64 // after the dispatch
		excused bool
	}{{true, 8 * sec, true}, {true, 9 * sec, true}, {false, 8 * sec, false}, {true, 8*sec - 1, false}} {
		runs[5].Result, runs[5].EndedAt = "timeout", runs[5].DispatchedAt+c.ended
		a = check(t, runs, nil, recs, fault)
		a.ExcuseLate(map[string]bool{ticket: c.refused}, 8*sec)
		if got := len(a.LateResults) == 1 && len(a.ResultsLost) == 0; got != c.excused {
			t.Errorf("refused %v, ended %d ms after its dispatch: excused %v, want %v: %s", c.refused, c.ended, got, c.excused, a)
		}
	}
	// A lost executor run is never excused.
	runs[5].Result, runs[5].EndedAt = "lost", runs[5].DispatchedAt+9*sec
	a = check(t, runs, nil, recs, fault)
	a.ExcuseLate(map[string]bool{ticket: true}, 8*sec)
	if len(a.ResultsLost) != 1 {
		t.Errorf("a lost executor run was excused: %s", a)
	}
}

func TestAuditOneShotTasks(t *testing.T) {
	tasks := []AuditTask{{Name: "once"}, {Name: "never"}}
	runs := []RunRow{{Ticket: "o", Task: "once", Kind: "delay", Attempt: 1, ScheduledAt: base, DispatchedAt: base, EndedAt: base + 1, Result: "success"}}
	recs := []Receipt{{Task: "once", Ticket: "o", Attempt: 1, ScheduledAt: base}}
	a, err := Check(tasks, Span{From: base, To: base + sec}, nil, runs, nil, recs)
	if err != nil {
		t.Fatal(err)
	}
	if a.Fires != 2 || a.Ran != 1 || len(a.Gaps) != 1 || !strings.Contains(a.Gaps[0], "never") {
		t.Fatalf("one-shot audit: %s", a)
	}
	// A one-shot task due after the span is not audited.
	tasks[1].Due = base + 2*sec
	if a, err = Check(tasks, Span{From: base, To: base + sec}, nil, runs, nil, recs); err != nil || !a.OK() || a.Fires != 1 {
		t.Fatalf("one-shot audit with a task due after the span: %s", a)
	}
}
