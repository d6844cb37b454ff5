package migrate

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/internal/test/oracle"
	"github.com/axe-sched/axe/lib/cron"
)

func TestReadCrontab(t *testing.T) {
	const tab = `# a user crontab
MAILTO=ops@example.com
SHELL=/bin/bash
PATH="/usr/local/bin:/usr/bin:/bin"
*/15 9-17 * * mon-fri  /usr/local/bin/sync --fast   >> /var/log/sync.log 2>&1
@daily  echo "50% done"
CRON_TZ=America/New_York
30 2 1,15 * *   mail -s report boss%Hello,%the report is \% done.%
  0 0 * * 0 echo sunday
@reboot /usr/bin/start-me
61 * * * * too-big
5 4 * *
`
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	p, err := ReadCrontab(strings.NewReader(tab), CrontabOptions{App: "ops", Zone: "Europe/Berlin", Now: now, Paused: true})
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for _, b := range p.Bad {
		bad = append(bad, b.Source+": "+b.Reason)
	}
	if len(p.Bad) != 3 || !strings.Contains(bad[0], "line 10: @reboot") || !strings.HasPrefix(bad[1], "line 11: ") || !strings.Contains(bad[2], "line 12: want five schedule fields") {
		t.Fatalf("bad lines = %q", bad)
	}
	if err := p.Err(); !errors.Is(err, ErrUnconvertible) || !strings.Contains(err.Error(), "line 10") {
		t.Errorf("Err() = %v", err)
	}
	if len(p.Items) != 4 {
		t.Fatalf("%d items, want 4", len(p.Items))
	}
	sync, daily, mail, sunday := p.Items[0], p.Items[1], p.Items[2], p.Items[3]
	if sync.Source != "line 5" || sync.Task.Cron != "*/15 9-17 * * mon-fri" || sync.Task.Timezone != "Europe/Berlin" ||
		sync.Task.CronDialect != "unix" || !sync.Task.Paused || sync.Task.MisfirePolicy != "skip" || sync.Task.TimeoutSec != 86400 {
		t.Errorf("sync task = %+v", sync.Task)
	}
	h := p.Handlers[sync.Task.Name]
	if !slices.Equal(h.Command, []string{"/bin/bash", "-c", "/usr/local/bin/sync --fast   >> /var/log/sync.log 2>&1"}) ||
		h.Env["PATH"] != "/usr/local/bin:/usr/bin:/bin" || h.Env["SHELL"] != "/bin/bash" || h.Stdin != "" {
		t.Errorf("sync handler = %+v", h)
	}
	if _, ok := h.Env["MAILTO"]; ok {
		t.Errorf("MAILTO reached the environment")
	}
	if want := time.Date(2026, 12, 1, 9, 15, 0, 0, mustLoc(t, "Europe/Berlin")); !sync.Next.Equal(want) {
		t.Errorf("sync next = %s, want %s", sync.Next, want)
	}
	if daily.Task.Cron != "@daily" || p.Handlers[daily.Task.Name].Command[2] != `echo "50` || p.Handlers[daily.Task.Name].Stdin != " done\"\n" {
		t.Errorf("daily = %+v %+v", daily.Task, p.Handlers[daily.Task.Name])
	}
	mh := p.Handlers[mail.Task.Name]
	if mail.Task.Timezone != "America/New_York" || mh.Command[2] != "mail -s report boss" || mh.Stdin != "Hello,\nthe report is % done.\n" ||
		mh.Env["CRON_TZ"] != "America/New_York" {
		t.Errorf("mail = %+v %+v", mail.Task, mh)
	}
	if sunday.Source != "line 9" || sunday.Next.Weekday() != time.Sunday {
		t.Errorf("sunday = %+v", sunday)
	}
	// Stable names: the same line gives the same task, wherever it is.
	p2, err := ReadCrontab(strings.NewReader("\n\n*/15 9-17 * * mon-fri  /usr/local/bin/sync --fast   >> /var/log/sync.log 2>&1\n"), CrontabOptions{App: "ops", Zone: "UTC"})
	if err != nil || len(p2.Items) != 1 || p2.Items[0].Task.Name != sync.Task.Name {
		t.Errorf("re-read name %v, want %s (%v)", p2.Items, sync.Task.Name, err)
	}
	// Cron starts a job even while its previous run goes on: so does allow_all, and the
	// dry run names no difference of overlap.
	for _, it := range p.Items {
		if it.Task.OverlapPolicy != "allow_all" {
			t.Errorf("%s: overlap_policy %q, want allow_all", it.Source, it.Task.OverlapPolicy)
		}
	}
	var out strings.Builder
	if err := p.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "overlap") {
		t.Errorf("the dry run names an overlap difference:\n%s", out.String())
	}
	for _, want := range []string{"SOURCE", "line 8", "America/New_York", "MAILTO (line 2)", "zone Europe/Berlin, the machine's, for lines 5, 6", "cannot convert line 10: @reboot"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dry run lacks %q:\n%s", want, out.String())
		}
	}
}

func TestReadSystemCrontab(t *testing.T) {
	const tab = "SHELL=/bin/sh\n17 *\t* * *\troot    cd / && run-parts --report /etc/cron.hourly\n@weekly backup /usr/bin/backup --all\n25 6 * * * root\n"
	p, err := ReadCrontab(strings.NewReader(tab), CrontabOptions{App: "sys", System: true, Zone: "UTC"})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 2 || len(p.Bad) != 1 || p.Bad[0].Source != "line 4" {
		t.Fatalf("items %+v bad %+v", p.Items, p.Bad)
	}
	if got := p.Handlers[p.Items[0].Task.Name].Command[2]; got != "cd / && run-parts --report /etc/cron.hourly" || p.Items[0].Task.Cron != "17 * * * *" {
		t.Errorf("hourly: %q %q", p.Items[0].Task.Cron, got)
	}
	if got := p.Handlers[p.Items[1].Task.Name].Command[2]; got != "/usr/bin/backup --all" {
		t.Errorf("weekly: %q", got)
	}
	var notes []string
	for _, n := range p.NotCarried {
		notes = append(notes, n.Text)
	}
	if all := strings.Join(notes, "\n"); !strings.Contains(all, "user backup (line 3)") || !strings.Contains(all, "user root (line 2)") {
		t.Errorf("user notes: %s", all)
	}
}

func TestSplitPercent(t *testing.T) {
	for _, c := range []struct{ in, cmd, stdin string }{
		{"echo hi", "echo hi", ""},
		{`date +\%Y-\%m-\%d`, "date +%Y-%m-%d", ""},
		{"cat%a%b", "cat", "a\nb\n"},
		{"cat%", "cat", "\n"},
		{`printf '\n' \\%x`, `printf '\n' \%x`, ""},
	} {
		cmd, stdin := splitPercent(c.in)
		if cmd != c.cmd || stdin != c.stdin {
			t.Errorf("splitPercent(%q) = %q, %q; want %q, %q", c.in, cmd, stdin, c.cmd, c.stdin)
		}
	}
}

func mustLoc(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestCrontabMatchesCronie imports every line of the cronie table (lib/cron/testdata/
// cronie, computed by cronie 1.7.2's own crond code) under its environment lines, and holds
// the import to it: a line cronie does not load is refused; a line cronie loads but never
// runs as written (a reversed range, ~, a step wider than its field) is refused, naming
// why; every other line becomes a task in the zone cronie reads it in (CRON_TZ, not TZ)
// that fires at cronie's times.
func TestCrontabMatchesCronie(t *testing.T) {
	cases, err := oracle.LoadCronie("../../lib/cron/testdata/cronie/expected.tsv")
	if err != nil {
		t.Fatal(err)
	}
	onPurpose := []string{"random value", "wider than the field", "runs backwards", "@reboot"}
	var imported, refused, refusedOnPurpose int
	for _, c := range cases {
		tab := strings.Join(append(slices.Clone(c.Env), c.Schedule+" true"), "\n") + "\n"
		p, err := ReadCrontab(strings.NewReader(tab), CrontabOptions{App: "a", Zone: c.DaemonZone, Now: c.Start})
		if err != nil {
			t.Fatal(err)
		}
		where := fmt.Sprintf("expected.tsv:%d: %q (env %q)", c.Line, c.Schedule, c.Env)
		if len(p.Items) == 0 {
			if len(p.Bad) != 1 {
				t.Errorf("%s: no task and bad %+v", where, p.Bad)
				continue
			}
			reason := p.Bad[0].Reason
			switch {
			case c.Refused:
				refused++
			case slices.ContainsFunc(onPurpose, func(s string) bool { return strings.Contains(reason, s) }):
				refusedOnPurpose++
			default:
				t.Errorf("%s: refused (%s); cronie loads it and fires at %v", where, reason, c.Fires)
			}
			continue
		}
		if c.Refused || len(c.Fires) == 0 {
			t.Errorf("%s: imported; cronie refuses it (%v) or never runs it", where, c.Refused)
			continue
		}
		task := p.Items[0].Task
		if task.Timezone != c.Zone() {
			t.Errorf("%s: zone %s, cronie reads it in %s", where, task.Timezone, c.Zone())
			continue
		}
		s, err := cron.ParseIn(task.Cron, cron.DialectUnix)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		loc := mustLoc(t, task.Timezone)
		got, after := []time.Time{}, c.Start
		for range c.Fires {
			after = s.Next(after, loc)
			got = append(got, after)
		}
		if !p.Items[0].Next.Equal(c.Fires[0]) || !slices.EqualFunc(got, c.Fires, time.Time.Equal) {
			t.Errorf("%s: dry run next %s, fires %v; cronie fires %v", where, p.Items[0].Next, got, c.Fires)
			continue
		}
		imported++
	}
	t.Logf("%d cronie cases: %d imported with cronie's fire times, %d refused as cronie refuses them, %d refused because cronie would not run them as written",
		len(cases), imported, refused, refusedOnPurpose)
	if imported < 150 || refused < 15 || refusedOnPurpose < 5 {
		t.Errorf("the table covers too little")
	}
}

// TestCrontabEnvironment: CRON_TZ sets the zone of the lines below it, TZ only goes into
// the commands' environment (as cronie's find_jobs reads CRON_TZ alone), and RANDOM_DELAY
// is named first in the dry run for every line it delays.
func TestCrontabEnvironment(t *testing.T) {
	const tab = "TZ=America/New_York\n0 12 * * * a\nCRON_TZ=Asia/Tokyo\nRANDOM_DELAY=30\n0 12 * * * b\nRANDOM_DELAY=0\n0 13 * * * c\n"
	p, err := ReadCrontab(strings.NewReader(tab), CrontabOptions{App: "a", Zone: "Europe/Berlin"})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 3 {
		t.Fatalf("items %+v bad %+v", p.Items, p.Bad)
	}
	a, b, c := p.Items[0], p.Items[1], p.Items[2]
	if a.Task.Timezone != "Europe/Berlin" || p.Handlers[a.Task.Name].Env["TZ"] != "America/New_York" {
		t.Errorf("after TZ: zone %s env %v; want the machine's zone, TZ in the environment", a.Task.Timezone, p.Handlers[a.Task.Name].Env)
	}
	if b.Task.Timezone != "Asia/Tokyo" || c.Task.Timezone != "Asia/Tokyo" {
		t.Errorf("after CRON_TZ: %s, %s", b.Task.Timezone, c.Task.Timezone)
	}
	if !hasCrontabChange(b, "RANDOM_DELAY=30") || hasCrontabChange(c, "RANDOM_DELAY") || hasCrontabChange(a, "RANDOM_DELAY") {
		t.Errorf("RANDOM_DELAY notes: a %+v b %+v c %+v", a.NotCarried, b.NotCarried, c.NotCarried)
	}
	var out strings.Builder
	if err := p.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	if dry := out.String(); !strings.Contains(dry, "RUNS DIFFERENTLY IN AXE") || strings.Index(dry, "RANDOM_DELAY=30") > strings.Index(dry, "routine") && strings.Contains(dry, "routine") {
		t.Errorf("dry run:\n%s", dry)
	}
}

func hasCrontabChange(it Item, s string) bool {
	for _, n := range it.NotCarried {
		if n.Changes && strings.Contains(n.Text, s) {
			return true
		}
	}
	return false
}

// TestCrontabLineForms: cronie's line options and the last line without a newline.
func TestCrontabLineForms(t *testing.T) {
	const tab = "-*/5 * * * * logless\n0 1 * * * -n  quiet unless failing\n0 2 * * * -x bad option\n0 3 * * * last"
	p, err := ReadCrontab(strings.NewReader(tab), CrontabOptions{App: "a", Zone: "UTC"})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 2 || len(p.Bad) != 2 {
		t.Fatalf("items %+v bad %+v", p.Items, p.Bad)
	}
	if p.Items[0].Task.Cron != "*/5 * * * *" || p.Handlers[p.Items[0].Task.Name].Command[2] != "logless" ||
		p.Handlers[p.Items[1].Task.Name].Command[2] != "quiet unless failing" {
		t.Errorf("items %+v", p.Items)
	}
	if !strings.Contains(p.Bad[0].Reason, `"-x"`) || p.Bad[0].Source != "line 3" || !strings.Contains(p.Bad[1].Reason, "without a newline") {
		t.Errorf("bad %+v", p.Bad)
	}
}

// TestDetectCrontabFormat tells a system crontab (as Debian ships /etc/crontab, with its
// header and root on every line) from a user crontab by content, and refuses to guess
// between them.
func TestDetectCrontabFormat(t *testing.T) {
	const system = `# /etc/crontab: system-wide crontab
SHELL=/bin/sh
PATH=/usr/local/sbin:/usr/local/bin:/sbin:/bin:/usr/sbin:/usr/bin

# Example of job definition:
# .---------------- minute (0 - 59)
# |  .------------- hour (0 - 23)
# *  *  *  *  * user-name command to be executed
# m h dom mon dow user	command
17 *	* * *	root	cd / && run-parts --report /etc/cron.hourly
25 6	* * *	root	test -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.daily; }
47 6	* * 7	root	test -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.weekly; }
`
	users := map[string]bool{"root": true, "www-data": true, "mail": true}
	isUser := func(s string) bool { return users[s] }
	for _, c := range []struct {
		name, tab string
		system    bool
		err       string
	}{
		{"debian", system, true, ""},
		{"cron.d", "SHELL=/bin/sh\n*/5 * * * * root [ -x /usr/lib/php/sessionclean ] && /usr/lib/php/sessionclean\n@reboot root start\n", true, ""},
		{"user", "MAILTO=me\n*/15 * * * * /usr/bin/sync-mail\n@daily backup.sh\n", false, ""},
		{"mixed", "0 * * * * root run\n0 1 * * * /bin/other\n", false, "on line 1 but not on line 2"},
		{"no root", "0 * * * * mail -s hi boss\n", false, "none is root"},
		{"header only user lines", "# m h dom mon dow user command\n0 * * * * www-data php cron.php\n", true, ""},
	} {
		got, why, err := DetectCrontabFormat([]byte(c.tab), isUser)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "--format") {
				t.Errorf("%s: %v, %q, %v; want an error with %q", c.name, got, why, err, c.err)
			}
			continue
		}
		if err != nil || got != c.system || (got && why == "") {
			t.Errorf("%s: %v, %q, %v; want system %v", c.name, got, why, err, c.system)
		}
	}
	// And read as it was detected, the system crontab runs its commands, not its users.
	p, err := ReadCrontab(strings.NewReader(system), CrontabOptions{App: "sys", System: true, Zone: "UTC"})
	if err != nil || len(p.Items) != 3 || p.Handlers[p.Items[0].Task.Name].Command[2] != "cd / && run-parts --report /etc/cron.hourly" {
		t.Fatalf("system read: %v %+v", err, p)
	}
}
