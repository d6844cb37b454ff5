package migrate

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/axe-sched/axe/engine/cron"
	"github.com/axe-sched/axe/executor/agent"
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
	// the schedule and the command.
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

// ReadCrontab converts a crontab. Each job line becomes a cron task in the unix dialect
// that runs, through the agent, exactly the line's command text with SHELL -c and the
// environment set above the line; % in the command works as in cron (the first unescaped
// % ends the command, the rest is its standard input with each % a newline; \% is a %).
// Environment lines apply to the lines after them. Lines that cannot be converted are
// listed in Plan.Bad, by line number; reading stops only on an I/O error.
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
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), "\r")
		text := strings.TrimLeft(line, " \t")
		if text == "" || text[0] == '#' {
			continue
		}
		src := fmt.Sprintf("line %d", n)
		bad := func(format string, args ...any) {
			p.Bad = append(p.Bad, Bad{Source: src, Reason: fmt.Sprintf(format, args...)})
		}
		if m := envLine.FindStringSubmatch(text); m != nil {
			name, value := m[1], unquote(strings.TrimRight(m[2], " \t"))
			switch {
			case name == "MAILTO" || name == "MAILFROM":
				mailto = append(mailto, n)
				continue
			case strings.HasPrefix(strings.ToUpper(name), "AXE_"):
				p.NotCarried = append(p.NotCarried, fmt.Sprintf("%s (line %d): names starting with AXE_ are the agent's own", name, n))
				continue
			case name == "CRON_TZ" || name == "TZ":
				if _, err := cron.LoadLocation(value); err != nil {
					bad("%s=%s: %v", name, value, err)
					continue
				}
				zone, zoneFrom = value, fmt.Sprintf("%s on line %d", name, n)
			}
			env[name] = value
			continue
		}
		expr, user, command, err := splitCronLine(text, opt.System)
		if err != nil {
			bad("%v", err)
			continue
		}
		if _, err := cron.ParseIn(expr, cron.DialectUnix); err != nil {
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
		p.Handlers[name] = agent.Command{Command: []string{runEnv["SHELL"], "-c", cmdText}, Env: runEnv, Stdin: stdin}
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
				Paused:        opt.Paused,
			},
			Next:    next,
			Command: command,
		})
		if zoneFrom == machineZone {
			machineLines = append(machineLines, n)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("cannot read crontab: %w", err)
	}
	if len(machineLines) > 0 {
		p.Notes = append(p.Notes, fmt.Sprintf("zone %s, the machine's, for %s (no CRON_TZ or TZ above them)", opt.Zone, lineList(machineLines)))
	}
	if len(mailto) > 0 {
		p.NotCarried = append(p.NotCarried, fmt.Sprintf("MAILTO (%s): axe mails nothing; a run keeps the tail of its output (axe task runs), and failures raise alerts", lineList(mailto)))
	}
	for _, u := range slices.Sorted(maps.Keys(users)) {
		p.NotCarried = append(p.NotCarried, fmt.Sprintf("user %s (%s): the agent runs every command as its own user; run the agent as %s", u, lineList(users[u]), u))
	}
	if len(p.Items) > 0 {
		p.NotCarried = append(p.NotCarried, "overlap: cron starts a job even while its previous run is still going; axe runs a task once at a time (the agent refuses re-entry), and fires during a run are skipped")
	}
	return p, nil
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
		d := strings.ToLower(fields[0])
		if d == "@reboot" {
			return "", "", "", fmt.Errorf("@reboot runs once when the machine boots; axe has no boot trigger (start it from the machine's init system)")
		}
		if !slices.Contains(cronNames, d) {
			return "", "", "", fmt.Errorf("unknown descriptor %s (want one of %s)", fields[0], strings.Join(cronNames, ", "))
		}
	}
	return strings.Join(fields, " "), user, rest, nil
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
