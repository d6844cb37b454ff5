package migrate

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/lib/cron"
)

// FuzzReadCrontab feeds arbitrary crontabs to ReadCrontab: it must not fail (only its
// plan may list bad lines), and every task it makes must be valid in the unix dialect,
// name a handler it made, and run a non-empty command.
func FuzzReadCrontab(f *testing.F) {
	for _, s := range []string{
		"* * * * * echo hi\n", "@daily cat%a%b\n", "CRON_TZ=Asia/Tokyo\n0 9 * * 1-5 x\n",
		"MAILTO=a\n@reboot x\n", "0 0 * * * root run\n", "61 * * * * x\n", "TZ=Nowhere/Land\n",
		"*/5 1-3 1,15 jan-mar mon-fri echo \\% %\n", "\t# c\n  \n@hourly\n",
		"*\v* * * * * x\n", "0\u0085 0 * * * x\n", // whitespace cron keeps inside a field
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, tab string, system bool) {
		p, err := ReadCrontab(strings.NewReader(tab), CrontabOptions{App: "a", Zone: "UTC", System: system, Now: now})
		if err != nil {
			if strings.Contains(err.Error(), "token too long") {
				return // a line over the scanner's 1 MiB limit
			}
			t.Fatalf("ReadCrontab: %v", err)
		}
		if e := p.Err(); (e == nil) != (len(p.Bad) == 0) || (e != nil && !errors.Is(e, ErrUnconvertible)) {
			t.Fatalf("Err() = %v with %d bad lines", e, len(p.Bad))
		}
		for _, it := range p.Items {
			if _, err := cron.ParseIn(it.Task.Cron, cron.DialectUnix); err != nil {
				t.Fatalf("%s: task cron %q does not parse: %v", it.Source, it.Task.Cron, err)
			}
			h, ok := p.Handlers[it.Task.Name]
			if !ok || it.Task.Callback.Handler != it.Task.Name {
				t.Fatalf("%s: task %s has no handler of its name", it.Source, it.Task.Name)
			}
			if len(h.Command) != 3 || h.Command[1] != "-c" || strings.TrimSpace(h.Command[2]) == "" {
				t.Fatalf("%s: handler command %q", it.Source, h.Command)
			}
		}
	})
}
