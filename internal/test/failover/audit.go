// Package failover holds the failover suite of axe's high availability (docs/ha.md, issue 15):
// two real `axe serve --ha` processes on one real MariaDB, one SDK executor process and an
// HTTP callback target, and faults done to the primary (kill -9, SIGSTOP past the lease TTL,
// a cut between it and the database, a restart). Its tests live in the _test files; this file
// is the audit they end every scenario with, kept apart so that its own tests can feed it
// records that must fail.
//
// The audit reads only what the suite collected: the run table (the fire record), the action
// table, and the receivers' own logs of every run they were handed. It never touches the
// database itself.
package failover

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/axe-sched/axe/lib/cron"
)

// RunRow is one row of the run table.
type RunRow struct {
	Ticket       string
	Task         string
	Kind         string
	Attempt      int
	ScheduledAt  int64 // ms
	DispatchedAt int64 // ms
	EndedAt      int64 // ms, 0 while running
	Result       string
}

// ActionRow is one row of the action table.
type ActionRow struct {
	Task   string
	Action string
	At     int64 // ms
	Detail string
}

// Receipt is one run as a receiver (the callback target or the executor's handler) got it.
type Receipt struct {
	Task        string
	Ticket      string
	Attempt     int
	ScheduledAt int64 // ms
	Epoch       int64
	At          time.Time
	Via         string // "http" or "executor"
}

// AuditTask is one task of the load, as the audit needs to know it.
type AuditTask struct {
	Name string
	// Cron is the task's expression for a cron task; "" for a one-shot (delay) task.
	Cron string
	// Due is, for a one-shot task, the latest instant (ms) it can fall due: one due at or
	// after the span's end is not audited.
	Due int64
}

// Span is the fire times the audit covers: From ≤ fire time < To, in ms.
type Span struct{ From, To int64 }

// Fault is an instant a scenario did a fault to the primary, in ms; runs dispatched before
// it and not finished by then are the runs in doubt.
type Fault int64

// Audit is what Check found.
type Audit struct {
	// Fires is how many (task, fire time) fall in the span (one per one-shot task).
	Fires int
	// Ran is how many of them have a fire record and were received exactly once.
	Ran int
	// Misfired is how many were not run because a misfire (or coalescing) rule consumed them,
	// and an action record says so.
	Misfired int
	// Duplicates lists every (task, fire time, attempt) received more than once, or recorded
	// under two tickets.
	Duplicates []string
	// Gaps lists every (task, fire time) neither run nor recorded as handled: a silent gap.
	Gaps []string
	// Unrecorded lists receipts with no fire record: a dispatch the database never agreed to.
	Unrecorded []string
	// Phantoms lists fires recorded as a success that no receiver ever got.
	Phantoms []string
	// InDoubt counts runs dispatched before a fault and not finished by then, by how each
	// was resolved (the run's final result). Two sub-counts of "lost" follow: "lost+received"
	// is a run recorded lost although its receiver did get it, "lost+resent" one whose fire
	// was sent again as its next attempt (on_lost: resend).
	InDoubt map[string]int
	// Unresolved lists runs still running when the audit read the table.
	Unresolved []string
	// DoubtTimedOut lists the runs in doubt that ended timed out: neither their result nor a
	// lost verdict reached the new primary within their timeout.
	DoubtTimedOut []string
	// ResultsLost lists the runs in doubt that the SDK executor ran, yet were recorded
	// timed out or lost: the executor re-sends a result until a scheduler acknowledges it
	// or refuses it, so such a run's result was acknowledged and then not recorded, unless
	// ExcuseLate finds it refused for a deadline that had passed.
	ResultsLost []string
	// LateResults lists the runs ExcuseLate took out of ResultsLost.
	LateResults []string
	// lostRuns holds the run of each entry of ResultsLost, by the entry.
	lostRuns map[string]RunRow
}

// ExcuseLate takes out of ResultsLost the runs recorded timed out at their deadline
// (timeoutMS after their dispatch or later) whose result the executor reports refused
// because the run had already ended as a timeout (refused holds those tickets): the result
// reached a scheduler only after the deadline (a takeover that outlasted it, its first
// delivery answered 503 by a node stepping down), and a run whose deadline passes without
// its result ends as a timeout, by definition. Such runs move to LateResults.
func (a *Audit) ExcuseLate(refused map[string]bool, timeoutMS int64) {
	kept := a.ResultsLost[:0]
	for _, entry := range a.ResultsLost {
		r := a.lostRuns[entry]
		if r.Result == "timeout" && refused[r.Ticket] && r.EndedAt-r.DispatchedAt >= timeoutMS {
			a.LateResults = append(a.LateResults, entry)
			continue
		}
		kept = append(kept, entry)
	}
	a.ResultsLost = kept
}

// OK reports whether the audit found nothing wrong.
func (a *Audit) OK() bool {
	return len(a.Duplicates) == 0 && len(a.Gaps) == 0 && len(a.Unrecorded) == 0 &&
		len(a.Phantoms) == 0 && len(a.Unresolved) == 0
}

// InDoubtTotal is the number of runs in doubt.
func (a *Audit) InDoubtTotal() int {
	n := 0
	for k, v := range a.InDoubt {
		if !strings.HasPrefix(k, "lost+") {
			n += v
		}
	}
	return n
}

// String is the audit's figures on one line, and its first findings.
func (a *Audit) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "fires %d: ran once %d, misfire-handled %d; duplicates %d, silent gaps %d, unrecorded %d, phantom %d; in doubt %d",
		a.Fires, a.Ran, a.Misfired, len(a.Duplicates), len(a.Gaps), len(a.Unrecorded), len(a.Phantoms), a.InDoubtTotal())
	if len(a.InDoubt) > 0 {
		keys := make([]string, 0, len(a.InDoubt))
		for k := range a.InDoubt {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s %d", k, a.InDoubt[k])
		}
		fmt.Fprintf(&b, " (%s)", strings.Join(parts, ", "))
	}
	fmt.Fprintf(&b, "; unresolved %d; executor results lost %d", len(a.Unresolved), len(a.ResultsLost))
	if len(a.LateResults) > 0 {
		fmt.Fprintf(&b, ", refused past their deadline %d", len(a.LateResults))
	}
	for _, l := range []struct {
		name string
		list []string
	}{{"duplicate", a.Duplicates}, {"gap", a.Gaps}, {"unrecorded", a.Unrecorded}, {"phantom", a.Phantoms}, {"unresolved", a.Unresolved}, {"in doubt, timed out", a.DoubtTimedOut}, {"result lost", a.ResultsLost}, {"result past its deadline", a.LateResults}} {
		for i, s := range l.list {
			if i == 5 {
				fmt.Fprintf(&b, "\n  … %d more %s", len(l.list)-5, l.name)
				break
			}
			fmt.Fprintf(&b, "\n  %s: %s", l.name, s)
		}
	}
	return b.String()
}

// The action details the engine writes when a rule consumes cron fires without running
// them; each names how many. fire_once runs one of the fires it coalesces.
var (
	missedWhileRunning = regexp.MustCompile(`(\d+) earlier fire\(s\) missed while running`)
	misfireSkipped     = regexp.MustCompile(`misfire: (\d+) fire\(s\) skipped`)
	misfireCoalesced   = regexp.MustCompile(`misfire: fire_once, (\d+) fire\(s\) coalesced into one`)
	breakerSkipped     = regexp.MustCompile(`skipped: circuit breaker open`)
	// The overlap and catch-up records (engine/core_overlap.go): "N fire(s) (A to B) ..."
	// followed by why they were skipped.
	overlapSkipped = regexp.MustCompile(`(\d+) fire\(s\)(?: \([^)]*\))? (?:due while the run was in flight skipped|before it skipped|beyond the bound skipped|older than the window skipped)`)
)

// consumed returns how many fires an action's detail says a rule consumed without running.
func consumed(detail string) int {
	n := 0
	num := func(re *regexp.Regexp) int {
		m := re.FindStringSubmatch(detail)
		if m == nil {
			return 0
		}
		v, _ := strconv.Atoi(m[1])
		return v
	}
	n += num(missedWhileRunning)
	n += num(misfireSkipped)
	if c := num(misfireCoalesced); c > 0 {
		n += c - 1
	}
	if breakerSkipped.MatchString(detail) {
		n++
	}
	for _, m := range overlapSkipped.FindAllStringSubmatch(detail, -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n
}

type fireKey struct {
	task  string
	sched int64
}

type attemptKey struct {
	task    string
	sched   int64
	attempt int
}

func (k attemptKey) String() string {
	return fmt.Sprintf("%s @%s attempt %d", k.task, time.UnixMilli(k.sched).UTC().Format("15:04:05.000"), k.attempt)
}

func (k fireKey) String() string {
	return fmt.Sprintf("%s @%s", k.task, time.UnixMilli(k.sched).UTC().Format("15:04:05.000"))
}

// Check audits one scenario: every (task, fire time) in span either ran exactly once or was
// consumed by a misfire rule that an action records, nothing was received twice, nothing was
// received without a fire record, and every run in doubt at a fault was resolved. Manual runs
// are ignored. Cron expressions are evaluated in UTC, as the suite creates its tasks.
func Check(tasks []AuditTask, span Span, faults []Fault, runs []RunRow, actions []ActionRow, receipts []Receipt) (*Audit, error) {
	a := &Audit{InDoubt: map[string]int{}}
	received := map[attemptKey]int{}
	byExecutor := map[attemptKey]bool{}
	for _, r := range receipts {
		k := attemptKey{r.Task, r.ScheduledAt, r.Attempt}
		received[k]++
		if r.Via == "executor" {
			byExecutor[k] = true
		}
	}
	rows := map[fireKey][]RunRow{}
	tickets := map[attemptKey]string{}
	for _, r := range runs {
		if r.Kind == "manual" {
			continue
		}
		k := attemptKey{r.Task, r.ScheduledAt, r.Attempt}
		if t, ok := tickets[k]; ok && t != r.Ticket {
			a.Duplicates = append(a.Duplicates, fmt.Sprintf("%s recorded under tickets %s and %s", k, t, r.Ticket))
		}
		tickets[k] = r.Ticket
		rows[fireKey{r.Task, r.ScheduledAt}] = append(rows[fireKey{r.Task, r.ScheduledAt}], r)
	}
	for k, n := range received {
		if n > 1 {
			a.Duplicates = append(a.Duplicates, fmt.Sprintf("%s received %d times", k, n))
		}
		if _, ok := tickets[k]; !ok {
			a.Unrecorded = append(a.Unrecorded, fmt.Sprintf("%s received without a fire record", k))
		}
	}
	byTask := map[string][]ActionRow{}
	for _, act := range actions {
		byTask[act.Task] = append(byTask[act.Task], act)
	}

	// fired judges one fire that has a record: it ran once, or it is a run in doubt.
	fired := func(k fireKey, attempts []RunRow) {
		a.Ran++
		for _, r := range attempts {
			ak := attemptKey{r.Task, r.ScheduledAt, r.Attempt}
			got := received[ak]
			if r.Result == "running" {
				a.Unresolved = append(a.Unresolved, fmt.Sprintf("%s still running, dispatched at %s", ak,
					time.UnixMilli(r.DispatchedAt).UTC().Format("15:04:05.000")))
			}
			if r.Result == "success" && got == 0 {
				a.Phantoms = append(a.Phantoms, ak.String()+" recorded success, never received")
			}
			for _, f := range faults {
				if r.DispatchedAt <= int64(f) && (r.EndedAt == 0 || r.EndedAt > int64(f)) {
					a.InDoubt[r.Result]++
					if r.Result == "timeout" {
						a.DoubtTimedOut = append(a.DoubtTimedOut, fmt.Sprintf("%s (ticket %s, received %d)", ak, r.Ticket, got))
					}
					if byExecutor[ak] && (r.Result == "timeout" || r.Result == "lost") {
						entry := fmt.Sprintf("%s (ticket %s) ran on the executor, recorded %s", ak, r.Ticket, r.Result)
						a.ResultsLost = append(a.ResultsLost, entry)
						if a.lostRuns == nil {
							a.lostRuns = map[string]RunRow{}
						}
						a.lostRuns[entry] = r
					}
					if r.Result == "lost" && got > 0 {
						a.InDoubt["lost+received"]++
					}
					if r.Result == "lost" && slices.ContainsFunc(attempts, func(o RunRow) bool { return o.Attempt > r.Attempt }) {
						a.InDoubt["lost+resent"]++
					}
					break
				}
			}
		}
	}

	for _, t := range tasks {
		if t.Cron == "" {
			if t.Due >= span.To {
				continue
			}
			a.Fires++
			var found []RunRow
			for k, rs := range rows {
				if k.task == t.Name {
					found = append(found, rs...)
				}
			}
			if len(found) == 0 {
				a.Gaps = append(a.Gaps, t.Name+" (one-shot) never fired")
				continue
			}
			fired(fireKey{t.Name, found[0].ScheduledAt}, found)
			continue
		}
		sched, err := cron.Parse(t.Cron)
		if err != nil {
			return nil, fmt.Errorf("cannot parse the cron of %s: %w", t.Name, err)
		}
		var expected []int64
		for f := sched.Next(time.UnixMilli(span.From-1), time.UTC); !f.IsZero() && f.UnixMilli() < span.To; f = sched.Next(f, time.UTC) {
			expected = append(expected, f.UnixMilli())
		}
		a.Fires += len(expected)
		// Walk the expected fires; each run of consecutive unfired ones is a gap that the
		// actions written between the fire before it and the fire after it must account for.
		var missing []int64
		prevFired := span.From - int64(time.Minute/time.Millisecond) // an action before the span may cover its start
		closeGap := func(until int64) {
			if len(missing) == 0 {
				return
			}
			stated := 0
			for _, act := range byTask[t.Name] {
				if act.At >= prevFired && act.At <= until {
					stated += consumed(act.Detail)
				}
			}
			covered := min(stated, len(missing))
			a.Misfired += covered
			for _, m := range missing[covered:] {
				a.Gaps = append(a.Gaps, fireKey{t.Name, m}.String()+" neither ran nor recorded as a misfire")
			}
			missing = missing[:0]
		}
		for _, f := range expected {
			k := fireKey{t.Name, f}
			rs, ok := rows[k]
			if !ok {
				missing = append(missing, f)
				continue
			}
			slices.SortFunc(rs, func(x, y RunRow) int { return x.Attempt - y.Attempt })
			closeGap(rs[0].DispatchedAt + 1000)
			fired(k, rs)
			prevFired = f
		}
		closeGap(span.To + int64(time.Minute/time.Millisecond))
	}
	sort.Strings(a.Duplicates)
	sort.Strings(a.Gaps)
	sort.Strings(a.Unrecorded)
	sort.Strings(a.Phantoms)
	sort.Strings(a.Unresolved)
	sort.Strings(a.DoubtTimedOut)
	sort.Strings(a.ResultsLost)
	return a, nil
}
