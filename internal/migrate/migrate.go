// Package migrate turns the jobs of other schedulers (a crontab, an XXL-JOB admin database)
// into axe task definitions, and says what of each it cannot carry over.
//
// It owns the translation only: it reads its sources and returns a Plan, and never talks to
// an axe server or writes files; cmd/axe shows the plan as a dry run and applies it.
package migrate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/lib/cron"
	"github.com/axe-sched/axe/lib/visible"
	"github.com/axe-sched/axe/wire"
)

// Errors returned by this package, wrapped with detail.
var (
	// ErrUnconvertible reports a source job (a crontab line, an XXL-JOB job) that cannot
	// become an axe task; Plan.Bad lists each with its reason.
	ErrUnconvertible = errors.New("cannot convert")
)

// Callback is a task's callback, as the task API takes it.
type Callback struct {
	Type    string `json:"type"`
	App     string `json:"app,omitempty"`
	Handler string `json:"handler,omitempty"`
	Route   string `json:"route,omitempty"`
}

// Task is one task definition in the task API's JSON (POST /api/v1/tasks).
type Task struct {
	Name             string          `json:"name"`
	Group            string          `json:"group,omitempty"`
	Trigger          string          `json:"trigger"`
	Cron             string          `json:"cron,omitempty"`
	CronDialect      string          `json:"cron_dialect,omitempty"`
	DependsOn        []string        `json:"depends_on,omitempty"`
	DependsMode      string          `json:"depends_mode,omitempty"`
	Timezone         string          `json:"timezone,omitempty"`
	TimeoutSec       int             `json:"timeout_sec,omitempty"`
	RetryCount       *int            `json:"retry_count,omitempty"`
	Callback         Callback        `json:"callback"`
	Params           json.RawMessage `json:"params,omitempty"`
	MisfirePolicy    string          `json:"misfire_policy,omitempty"`
	Paused           bool            `json:"paused"`
	Note             string          `json:"note,omitempty"`
	RetryIntervalSec int             `json:"retry_interval_sec,omitempty"`
	// PauseAfterFailures is the importer's --pause-after-failures, the same for every task
	// (0: never pause).
	PauseAfterFailures int `json:"pause_after_failures,omitempty"`
	// OverlapPolicy is what becomes of a cron fire due while the task's run is in flight
	// (the source's block strategy; "" keeps axe's default, buffer_one).
	OverlapPolicy string `json:"overlap_policy,omitempty"`
}

// Item is one converted source job.
type Item struct {
	// Source names the job in its origin: "line 12", "job 7".
	Source string
	Task   Task
	// Next is the first fire time after the plan's reference time, zero for tasks that
	// do not fire on a schedule.
	Next time.Time
	// Command is what it runs, for the dry-run table.
	Command string
	// NotCarried lists what of this job axe does not carry over as it was.
	NotCarried []Note
}

// Note is something of a source job, or of the whole source, that axe does not carry over
// as it was.
type Note struct {
	// Kind names what it is about ("alarm_email", "MAILTO", "sharding broadcast"). The dry
	// run summarises routine notes of one kind in one line.
	Kind string
	// Text says what becomes of it.
	Text string
	// Changes is set when the job runs differently in axe because of it: where, when, how
	// often, as whom or whether it runs. The dry run lists those first, each in full; the
	// others are routine (mail, logging, addresses) and are summarised by kind.
	Changes bool
}

// change and routine make the two sorts of Note.
func change(kind, format string, args ...any) Note {
	return Note{Kind: kind, Text: fmt.Sprintf(format, args...), Changes: true}
}

func routine(kind, format string, args ...any) Note {
	return Note{Kind: kind, Text: fmt.Sprintf(format, args...)}
}

// Bad is one source job that could not be converted.
type Bad struct {
	Source string
	Reason string
}

// Plan is the result of reading a source: the tasks to create, the jobs that cannot be
// converted, and notes that concern the whole source.
type Plan struct {
	Items []Item
	Bad   []Bad
	// NotCarried lists what of the whole source axe does not carry over as it was.
	NotCarried []Note
	// Notes are choices the conversion made that the reader should see.
	Notes []string
}

// Err returns ErrUnconvertible naming every bad job, or nil.
func (p *Plan) Err() error {
	if len(p.Bad) == 0 {
		return nil
	}
	var b strings.Builder
	for _, bad := range p.Bad {
		fmt.Fprintf(&b, "\n  %s: %s", visible.Line(bad.Source), visible.Line(bad.Reason))
	}
	return fmt.Errorf("%w %d job(s):%s", ErrUnconvertible, len(p.Bad), b.String())
}

// WriteTable writes the dry run: one row per task (source, name, expression, zone, next
// fire, command); then, in full, everything that makes a job run differently in axe; then
// what cannot be converted and the choices the conversion made; and last the routine
// settings not carried over, one line per kind.
func (p *Plan) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tTASK\tEXPRESSION\tZONE\tNEXT FIRE\tCOMMAND")
	for _, it := range p.Items {
		expr := it.Task.Cron
		switch {
		case it.Task.Trigger == "dependency":
			expr = "after " + strings.Join(it.Task.DependsOn, " or ")
		case expr == "":
			expr = it.Task.Trigger
		case it.Task.CronDialect == string(cron.DialectQuartz):
			expr += " (quartz)"
		}
		next := "-"
		if !it.Next.IsZero() {
			next = it.Next.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", visible.Line(it.Source), visible.Line(it.Task.Name), visible.Line(expr),
			visible.Line(orDash(it.Task.Timezone)), next, oneLine(it.Command))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	type routineKind struct {
		text    string
		sources []string
	}
	var kinds []string
	byKind := map[string]*routineKind{}
	var changes []string
	add := func(source, task string, n Note) {
		if n.Changes {
			if source != "" {
				changes = append(changes, fmt.Sprintf("%s (%s): %s", source, task, n.Text))
			} else {
				changes = append(changes, n.Text)
			}
			return
		}
		k := byKind[n.Kind]
		if k == nil {
			k = &routineKind{text: n.Text}
			byKind[n.Kind] = k
			kinds = append(kinds, n.Kind)
		}
		if source != "" {
			k.sources = append(k.sources, source)
		}
	}
	for _, n := range p.NotCarried {
		add("", "", n)
	}
	for _, it := range p.Items {
		for _, n := range it.NotCarried {
			add(it.Source, it.Task.Name, n)
		}
	}
	if len(changes) > 0 {
		fmt.Fprintf(w, "\nRUNS DIFFERENTLY IN AXE (%d):\n", len(changes))
		for _, c := range changes {
			fmt.Fprintf(w, "  %s\n", visible.Line(c))
		}
	}
	if len(p.Bad) > 0 || len(p.Notes) > 0 {
		fmt.Fprintln(w)
	}
	for _, b := range p.Bad {
		fmt.Fprintf(w, "cannot convert %s: %s\n", visible.Line(b.Source), visible.Line(b.Reason))
	}
	for _, n := range p.Notes {
		fmt.Fprintf(w, "note: %s\n", visible.Line(n))
	}
	if len(kinds) > 0 {
		fmt.Fprintln(w, "\nroutine, not carried over:")
		for _, kind := range kinds {
			k := byKind[kind]
			fmt.Fprintf(w, "  %s%s: %s\n", visible.Line(kind), visible.Line(sourceList(k.sources)), visible.Line(k.text))
		}
	}
	return nil
}

// sourceList names up to five sources, and how many more: " (jobs 1, 2, 3 and 9 more)".
func sourceList(sources []string) string {
	if len(sources) == 0 {
		return ""
	}
	const shown = 5
	list := strings.Join(sources[:min(shown, len(sources))], ", ")
	if len(sources) > shown {
		list += fmt.Sprintf(" and %d more", len(sources)-shown)
	}
	return " (" + list + ")"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine shortens a command for a table cell: newlines shown as ⏎, every other control
// character, byte not UTF-8 or reordering character escaped (visible.Line), at most 60
// runes of that. The escapes come first, so a cut never hides one half-shown.
func oneLine(s string) string {
	s = visible.Line(strings.ReplaceAll(s, "\n", "⏎"))
	if r := []rune(s); len(r) > 60 {
		return string(r[:59]) + "…"
	}
	return s
}

// nextFire is the first fire of expr in dialect d and zone after ref, or zero.
func nextFire(expr string, d cron.Dialect, zone string, ref time.Time) (time.Time, error) {
	loc, err := cron.LoadLocation(zone)
	if err != nil {
		return time.Time{}, err
	}
	s, err := cron.ParseIn(expr, d)
	if err != nil {
		return time.Time{}, err
	}
	return s.Next(ref, loc), nil
}

// validateTasks moves to Bad every item whose task the server would refuse, judged by the
// server's own rules (engine.NormalizeIn) on the JSON the import sends, so that the dry run
// says what --yes would meet. Items keep their order.
func validateTasks(p *Plan) {
	kept := p.Items[:0]
	for _, it := range p.Items {
		if field := notUTF8(it.Task); field != "" {
			// JSON would carry it as U+FFFD, and the task say something else than its source.
			p.Bad = append(p.Bad, Bad{Source: it.Source, Reason: field + ": is not valid UTF-8; axe would store it changed"})
			continue
		}
		body, err := json.Marshal(it.Task)
		if err == nil {
			var spec *wire.TaskSpec
			if spec, err = engine.DecodeTaskSpec(body); err == nil {
				_, err = engine.NormalizeIn(spec, "UTC", "")
			}
		}
		if err != nil {
			p.Bad = append(p.Bad, Bad{Source: it.Source, Reason: "the server would refuse its task: " + err.Error()})
			continue
		}
		kept = append(kept, it)
	}
	p.Items = kept
}

// notUTF8 names the first field of t that is not valid UTF-8, or returns "".
func notUTF8(t Task) string {
	fields := []struct{ name, v string }{
		{"name", t.Name}, {"group", t.Group}, {"cron", t.Cron}, {"timezone", t.Timezone}, {"note", t.Note},
		{"callback.app", t.Callback.App}, {"callback.handler", t.Callback.Handler}, {"params", string(t.Params)},
	}
	for _, d := range t.DependsOn {
		fields = append(fields, struct{ name, v string }{"depends_on", d})
	}
	for _, f := range fields {
		if !utf8.ValidString(f.v) {
			return f.name
		}
	}
	return ""
}
