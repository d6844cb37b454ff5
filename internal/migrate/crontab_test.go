package migrate

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
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
	var out strings.Builder
	if err := p.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SOURCE", "line 8", "America/New_York", "MAILTO (line 2)", "overlap", "zone Europe/Berlin, the machine's, for lines 5, 6", "cannot convert line 10: @reboot"} {
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
	notes := strings.Join(p.NotCarried, "\n")
	if !strings.Contains(notes, "user backup (line 3)") || !strings.Contains(notes, "user root (line 2)") {
		t.Errorf("user notes: %s", notes)
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
