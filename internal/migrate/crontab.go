package migrate

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/axe-sched/axe/executor/agent"
	"github.com/axe-sched/axe/lib/cron"
)

// Crontab defaults.
const (
	// CrontabTimeoutDefault is the timeout of imported cron jobs. Cron has none; axe's own
	// default (300 s) would kill long jobs that cron let run.
	CrontabTimeoutDefault = 24 * time.Hour
	// cronShell and cronPath are what cron runs a command with when the crontab does not
	// set SHELL or PATH.
	cronShell = "/bin/sh"
	cronPath  = "/usr/bin:/bin"
)

// CrontabOptions configures ReadCrontab.
type CrontabOptions struct {
	// App is the executor app of the tasks: the app of the agent that runs them. Required.
	App string
	// Group is the tasks' group. Defaults to App.
	Group string
	// System reads the system format (/etc/crontab, /etc/cron.d): a user column between
	// the schedule and the command. DetectCrontabFormat tells it from the content.
	System bool
	// Zone is the tasks' zone where the crontab sets neither CRON_TZ nor TZ: the machine's.
	// Required.
	Zone string
	// Timeout is every task's timeout. Defaults to CrontabTimeoutDefault.
	Timeout time.Duration
	// Paused imports every task paused.
	Paused bool
	// Now is the reference time of the dry run's next fires. Defaults to time.Now().
	Now time.Time
}

// CrontabPlan is a Plan for a crontab plus the agent handlers that run its commands, by
// task name (a task's handler has the task's name).
type CrontabPlan struct {
	Plan
	Handlers map[string]agent.Command
}

var (
	envLine   = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*(.*)$`)
	cronNames = []string{"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)

// ReadCrontab converts a crontab as cronie reads it. Each job line becomes a cron task in
// the unix dialect that runs, through the agent, exactly the line's command text with
// SHELL -c and the environment set above the line; % in the command works as in cron (the
// first unescaped % ends the command, the rest is its standard input with each % a
// newline; \% is a %). Environment lines apply to the lines after them; CRON_TZ sets the
// zone of the lines below it, and TZ, as in cron, only the commands' environment. A line
// cron would not load, or would load but not run as written, is listed in Plan.Bad with
// its line number and the reason; reading stops only on an I/O error.
func ReadCrontab(r io.Reader, opt CrontabOptions) (*CrontabPlan, error) {
	if opt.App == "" {
		return nil, fmt.Errorf("cannot read crontab: an app is required")
	}
	if opt.Group == "" {
		opt.Group = opt.App
	}
	if opt.Timeout == 0 {
		opt.Timeout = CrontabTimeoutDefault
	}
	if opt.Now.IsZero() {
		opt.Now = time.Now()
	}
	if _, err := cron.LoadLocation(opt.Zone); err != nil {
		return nil, fmt.Errorf("cannot read crontab: the machine's zone: %w", err)
	}
	p := &CrontabPlan{Handlers: map[string]agent.Command{}}
	const machineZone = "the machine's zone"
	zone, zoneFrom := opt.Zone, machineZone
	var machineLines []int
	env := map[string]string{}
	users := map[string][]int{}
	mailto := []int{}
	var delay string // RANDOM_DELAY above the current line
	var unlogged, mailOnError []int
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	sc.Split(scanLinesKeepEOL)
	for n := 1; sc.Scan(); n++ {
		raw := sc.Text()
		line := strings.TrimRight(strings.TrimSuffix(raw, "\n"), "\r")
		text := strings.TrimLeft(line, " \t")
		if text == "" || text[0] == '#' {
			continue
		}
		src := fmt.Sprintf("line %d", n)
		bad := func(format string, args ...any) {
			p.Bad = append(p.Bad, Bad{Source: src, Reason: fmt.Sprintf(format, args...)})
		}
		if i := invalidUTF8At(line); i >= 0 {
			// JSON would carry it as U+FFFD: the agent would run another command than the
			// line's, or set another value.
			bad("byte %d is not UTF-8 (0x%02x); axe keeps commands and the agent config as UTF-8 and would change it: convert the file (iconv -t UTF-8)", i+1, line[i])
			continue
		}
		if m := envLine.FindStringSubmatch(text); m != nil {
			name, value := m[1], unquote(strings.TrimRight(m[2], " \t"))
			switch {
			case name == "MAILTO" || name == "MAILFROM":
				mailto = append(mailto, n)
				continue
			case strings.HasPrefix(strings.ToUpper(name), "AXE_"):
				p.NotCarried = append(p.NotCarried, change("AXE_", "%s (line %d) is left out of the commands' environment: names starting with AXE_ are the agent's own", name, n))
				continue
			case name == "CRON_TZ":
				if _, err := cron.LoadLocation(value); err != nil {
					bad("%s=%s: %v", name, value, err)
					continue
				}
				zone, zoneFrom = value, fmt.Sprintf("%s on line %d", name, n)
			case name == "RANDOM_DELAY":
				// cronie delays every job below by up to this many minutes, a random
				// fraction fixed when crond starts; axe fires on the minute.
				delay = value
			}
			env[name] = value
			continue
		}
		if !strings.HasSuffix(raw, "\n") {
			bad("the file ends without a newline after this line, and cron ignores such a last line; add the newline if it should run")
			continue
		}
		noLog := false
		if strings.HasPrefix(text, "-") {
			// cronie: a leading - only keeps crond from logging each run.
			noLog, text = true, text[1:]
		}
		expr, user, command, err := splitCronLine(text, opt.System)
		if err != nil {
			bad("%v", err)
			continue
		}
		if err := checkCronie(expr); err != nil {
			bad("%v", err)
			continue
		}
		if _, err := cron.ParseIn(expr, cron.DialectUnix); err != nil {
			bad("%v", err)
			continue
		}
		command, mailErr, err := cutOptions(command)
		if err != nil {
			bad("%v", err)
			continue
		}
		cmdText, stdin := splitPercent(command)
		if strings.TrimSpace(cmdText) == "" {
			bad("the command is empty")
			continue
		}
		if user != "" {
			users[user] = append(users[user], n)
		}
		name := uniqueName(p.Handlers, "cron-"+opt.App+"-"+lineHash(text))
		runEnv := maps.Clone(env)
		if runEnv["SHELL"] == "" {
			runEnv["SHELL"] = cronShell
		}
		if runEnv["PATH"] == "" {
			runEnv["PATH"] = cronPath
		}
		handler := agent.Command{Command: []string{runEnv["SHELL"], "-c", cmdText}, Env: runEnv, Stdin: stdin}
		if err := handler.Validate("handlers." + name); err != nil {
			// What the agent would refuse to load (a NUL byte): the written config would
			// not start.
			bad("the agent cannot run it: %v", err)
			continue
		}
		p.Handlers[name] = handler
		next, err := nextFire(expr, cron.DialectUnix, zone, opt.Now)
		if err != nil {
			bad("%v", err)
			delete(p.Handlers, name)
			continue
		}
		p.Items = append(p.Items, Item{
			Source: src,
			Task: Task{
				Name: name, Group: opt.Group, Trigger: "cron", Cron: expr,
				CronDialect: string(cron.DialectUnix), Timezone: zone,
				TimeoutSec: int(opt.Timeout / time.Second),
				Callback:   Callback{Type: "executor", App: opt.App, Handler: name},
				// Cron does not catch up on fires it missed while down.
				MisfirePolicy: "skip",
				// Cron starts a job at its time even while its previous run goes on: the
				// agent runs such runs beside one another (protocol.Run.Parallel).
				OverlapPolicy: "allow_all",
				Paused:        opt.Paused,
			},
			Next:    next,
			Command: command,
		})
		it := &p.Items[len(p.Items)-1]
		if d := randomDelay(delay); d > 0 {
			it.NotCarried = append(it.NotCarried, change("RANDOM_DELAY", "RANDOM_DELAY=%s: cronie starts it up to %d minutes late (a random part of that, fixed when crond starts); axe starts it on the minute", delay, d))
		}
		if noLog {
			unlogged = append(unlogged, n)
		}
		if mailErr {
			mailOnError = append(mailOnError, n)
		}
		if zoneFrom == machineZone {
			machineLines = append(machineLines, n)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("cannot read crontab: %w", err)
	}
	if len(machineLines) > 0 {
		p.Notes = append(p.Notes, fmt.Sprintf("zone %s, the machine's, for %s (no CRON_TZ above them; TZ sets only the commands' environment, as in cron)", opt.Zone, lineList(machineLines)))
	}
	for _, u := range slices.Sorted(maps.Keys(users)) {
		p.NotCarried = append(p.NotCarried, change("user", "user %s (%s): the agent runs every command as its own user; run the agent as %s", u, lineList(users[u]), u))
	}
	if len(mailto) > 0 {
		p.NotCarried = append(p.NotCarried, routine("MAILTO", "MAILTO (%s): axe mails nothing; a run keeps the tail of its output (axe task runs), and failures raise alerts", lineList(mailto)))
	}
	if len(mailOnError) > 0 {
		p.NotCarried = append(p.NotCarried, routine("-n", "-n before the command (%s): cronie mails only a failed run's output; axe mails nothing, and failures raise alerts", lineList(mailOnError)))
	}
	if len(unlogged) > 0 {
		p.NotCarried = append(p.NotCarried, routine("-", "- before the schedule (%s): crond logs no line per run; axe records every run", lineList(unlogged)))
	}
	validateTasks(&p.Plan)
	// A task the server's own rules refuse has no use for its handler.
	for name := range p.Handlers {
		if !slices.ContainsFunc(p.Items, func(it Item) bool { return it.Task.Name == name }) {
			delete(p.Handlers, name)
		}
	}
	return p, nil
}

// scanLinesKeepEOL is bufio.ScanLines keeping each line's "\n", so that a last line
// without one can be told apart: cron ignores it.
func scanLinesKeepEOL(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, data[:i+1], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// cutOptions removes cronie's options before a command: "-n " (mail the output only when
// the job fails), each followed by blanks. cronie refuses a line whose command starts with
// any other "-".
func cutOptions(command string) (cmd string, mailOnError bool, err error) {
	for strings.HasPrefix(command, "-") {
		if len(command) < 3 || command[1] != 'n' || (command[2] != ' ' && command[2] != '\t') {
			opt, _, _ := strings.Cut(command, " ")
			return "", false, fmt.Errorf("the command starts with %q, which cronie reads as an option and refuses (it knows only -n)", opt)
		}
		if mailOnError {
			return "", false, fmt.Errorf("-n is given twice, which cronie refuses")
		}
		mailOnError, command = true, strings.TrimLeft(command[2:], " \t")
	}
	return command, mailOnError, nil
}

// splitCronLine splits a job line into its expression, its user (system format) and the
// command: the rest of the line exactly as written.
func splitCronLine(text string, system bool) (expr, user, command string, err error) {
	nfields := 5
	if strings.HasPrefix(text, "@") {
		nfields = 1
	}
	if system {
		nfields++
	}
	fields, rest := cutFields(text, nfields)
	if len(fields) < nfields || rest == "" {
		want := "five schedule fields and a command"
		if nfields <= 2 {
			want = "a descriptor and a command"
		}
		if system {
			want = strings.Replace(want, " and a command", ", a user and a command", 1)
		}
		return "", "", "", fmt.Errorf("want %s", want)
	}
	if system {
		user = fields[nfields-1]
		fields = fields[:nfields-1]
	}
	if nfields-btoi(system) == 1 {
		// cronie compares descriptors case-sensitively: @Daily is refused.
		d := fields[0]
		if d == "@reboot" {
			return "", "", "", fmt.Errorf("@reboot runs once when the machine boots; axe has no boot trigger (start it from the machine's init system)")
		}
		if !slices.Contains(cronNames, d) {
			return "", "", "", fmt.Errorf("unknown descriptor %s (want one of %s)", fields[0], strings.Join(cronNames, ", "))
		}
	}
	return strings.Join(fields, " "), user, rest, nil
}

// randomDelay is the minutes of a RANDOM_DELAY value as cronie reads it (strtol: leading
// digits; outside 0..1440 it is ignored with an error in cron's log), or 0.
func randomDelay(v string) int {
	end := 0
	for end < len(v) && end < 5 && v[end] >= '0' && v[end] <= '9' {
		end++
	}
	n, err := strconv.Atoi(v[:end])
	if err != nil || n > 24*60 {
		return 0
	}
	return n
}

// cronieFields are the five fields of a job line as cronie reads them: the range of each
// and its names (cronie's MonthNames and DowNames: three letters, any case).
var cronieFields = [5]struct {
	name     string
	min, max int
	names    []string
}{
	{"minute", 0, 59, nil},
	{"hour", 0, 23, nil},
	{"day-of-month", 1, 31, nil},
	{"month", 1, 12, []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}},
	{"day-of-week", 0, 7, []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}},
}

// checkCronie refuses, naming the field, what cronie's load_entry (entry.c) refuses in
// the five schedule fields, and what it loads but would not run as written, though axe's
// unix dialect reads it: Quartz's ?, L, W and #, a start with a step and no range (5/15),
// full names (MONDAY), ~ (a random value picked when the crontab loads), a reversed range
// (5-1, SAT-SUN: cron matches nothing), and a step wider than the field (*/60: cron fires
// at the field's start alone). Descriptors are checked by splitCronLine.
func checkCronie(expr string) error {
	if strings.HasPrefix(expr, "@") {
		return nil
	}
	// splitCronLine joined the fields with one space; strings.Fields would also split on
	// \v, \f or U+0085, which cron keeps inside a field, and find more than five.
	fields := strings.Split(expr, " ")
	if len(fields) != len(cronieFields) {
		return fmt.Errorf("want %d schedule fields, found %d", len(cronieFields), len(fields))
	}
	for i, field := range fields {
		spec := cronieFields[i]
		for _, item := range strings.Split(field, ",") {
			if err := checkCronieItem(item, spec.min, spec.max, spec.names); err != nil {
				return fmt.Errorf("%s field %q: %w", spec.name, field, err)
			}
		}
	}
	return nil
}

func checkCronieItem(item string, lo, hi int, names []string) error {
	if strings.Contains(item, "~") {
		return errors.New("~ picks a random value each time cron loads the crontab; axe has no random schedule, so pick the value and write it")
	}
	base, step, hasStep := strings.Cut(item, "/")
	first, last, isRange := strings.Cut(base, "-")
	value := func(s string) (int, error) {
		if n, err := strconv.Atoi(s); err == nil && s != "" && s[0] != '+' && s[0] != '-' {
			if n < lo || n > hi {
				return 0, fmt.Errorf("%d is out of range %d-%d", n, lo, hi)
			}
			return n, nil
		}
		if i := slices.Index(names, strings.ToLower(s)); i >= 0 {
			return i + lo, nil
		}
		switch {
		case s == "?" || strings.ContainsAny(s, "LlWw#"):
			return 0, fmt.Errorf("%q is Quartz syntax, which cron refuses", item)
		case len(names) > 0:
			return 0, fmt.Errorf("%q is neither a number nor a three-letter name, which cron refuses", s)
		}
		return 0, fmt.Errorf("%q is not a number, which cron refuses", s)
	}
	switch {
	case base == "*":
	case hasStep && !isRange:
		return fmt.Errorf("%q has a step but no range, which cron refuses; write %s-%d/%s", item, first, hi, step)
	default:
		start, err := value(first)
		if err != nil {
			return err
		}
		if isRange {
			end, err := value(last)
			if err != nil {
				return err
			}
			if start > end {
				return fmt.Errorf("the range %s runs backwards; cron loads it but matches nothing, so the line never runs on it", base)
			}
		}
	}
	if hasStep {
		n, err := strconv.Atoi(step)
		if err != nil || n < 1 {
			return fmt.Errorf("step %q is not a positive number, which cron refuses", step)
		}
		if base == "*" && n > hi-lo {
			return fmt.Errorf("step %d is wider than the field; cron fires only at its start, so write %d", n, lo)
		}
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// cutFields returns the first n blank-separated fields of s and the rest of s after the
// blanks that follow them, unaltered.
func cutFields(s string, n int) ([]string, string) {
	var fields []string
	for len(fields) < n {
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			return fields, ""
		}
		i := strings.IndexAny(s, " \t")
		if i < 0 {
			return append(fields, s), ""
		}
		fields = append(fields, s[:i])
		s = s[i:]
	}
	return fields, strings.TrimLeft(s, " \t")
}

// splitPercent applies cron's % rule to a command: the command ends at the first % not
// escaped by a backslash; what follows is its standard input, with every unescaped % a
// newline and a final newline; \% is a literal % in both parts (other backslashes stay).
func splitPercent(command string) (cmd, stdin string) {
	var b strings.Builder
	inInput := false
	for i := 0; i < len(command); i++ {
		c := command[i]
		switch {
		case c == '\\' && i+1 < len(command) && command[i+1] == '%':
			b.WriteByte('%')
			i++
		case c == '%' && !inInput:
			cmd = b.String()
			b.Reset()
			inInput = true
		case c == '%':
			b.WriteByte('\n')
		default:
			b.WriteByte(c)
		}
	}
	if !inInput {
		return b.String(), ""
	}
	stdin = b.String()
	if !strings.HasSuffix(stdin, "\n") {
		stdin += "\n"
	}
	return cmd, stdin
}

// unquote strips one pair of matching quotes around an environment value, as cron does.
func unquote(v string) string {
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		return v[1 : len(v)-1]
	}
	return v
}

// lineHash is the stable part of a task's name: a hash of its line as written (leading
// blanks aside), so the same line always gets the same task.
func lineHash(line string) string {
	sum := sha256.Sum256([]byte(line))
	return hex.EncodeToString(sum[:])[:12]
}

// uniqueName returns base, or base-2, base-3 … for a line repeated in the same file.
func uniqueName(taken map[string]agent.Command, base string) string {
	name := base
	for i := 2; ; i++ {
		if _, ok := taken[name]; !ok {
			return name
		}
		name = fmt.Sprintf("%s-%d", base, i)
	}
}

func lineList(lines []int) string {
	parts := make([]string, len(lines))
	for i, n := range lines {
		parts[i] = fmt.Sprint(n)
	}
	if len(lines) == 1 {
		return "line " + parts[0]
	}
	return "lines " + strings.Join(parts, ", ")
}

// systemHeader is the column header Debian's /etc/crontab and cron.d files carry.
var systemHeader = regexp.MustCompile(`(?i)^#.*\bdow\s+user\s+command\b`)

// DetectCrontabFormat tells from a crontab's content whether it is in the system format
// (/etc/crontab, /etc/cron.d: a user column between the schedule and the command), for a
// copy kept under another path. isUser says whether a word names a user of the machine
// (nil: only root does). A line has a user column when the word after its schedule names
// a user and a command follows. The content is the system format when every job line has
// one and either some line runs as root or the file carries the system header comment
// ("# m h dom mon dow user command"); the user format when no line has one. Anything
// between is an error naming the lines, since a wrong guess makes every run fail (the
// user becomes the command) or drops a command's first word. why says what decided.
func DetectCrontabFormat(content []byte, isUser func(string) bool) (system bool, why string, err error) {
	if isUser == nil {
		isUser = func(string) bool { return false }
	}
	var with, without []int
	header, root := false, false
	for n, line := range strings.Split(string(content), "\n") {
		text := strings.TrimLeft(strings.TrimRight(line, "\r"), " \t")
		if systemHeader.MatchString(text) {
			header = true
		}
		if text == "" || text[0] == '#' || envLine.MatchString(text) {
			continue
		}
		text = strings.TrimPrefix(text, "-")
		nf := 5
		if strings.HasPrefix(text, "@") {
			nf = 1
		}
		fields, rest := cutFields(text, nf+1)
		if len(fields) == nf+1 && rest != "" && (fields[nf] == "root" || isUser(fields[nf])) {
			with = append(with, n+1)
			root = root || fields[nf] == "root"
		} else {
			without = append(without, n+1)
		}
	}
	switch {
	case len(with) == 0:
		return false, "", nil
	case len(without) == 0 && (root || header):
		why := "every job line has a user after its schedule, and the file has the system header"
		if root {
			why = "every job line has a user (root on some) after its schedule"
		}
		return true, why, nil
	}
	which := fmt.Sprintf("a user name follows the schedule on %s but not on %s", lineList(with), lineList(without))
	if len(without) == 0 {
		which = fmt.Sprintf("a user name follows the schedule on %s, but none is root and there is no system header", lineList(with))
	}
	return false, "", fmt.Errorf("format: cannot tell whether this is a system crontab (with a user column, as /etc/crontab): %s; give --format system or --format user", which)
}

// invalidUTF8At returns the offset of the first byte of s that is not part of valid UTF-8,
// or -1.
func invalidUTF8At(s string) int {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return -1
}
