package cron

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/internal/test/oracle"
)

// sundayEnd matches a day-of-week range that ends on Sunday written as 0 or SUN after a
// later day (SAT-SUN, 6-0). axe reads it as running to the week's end; cronie as an empty
// range, so the line never fires on those days (the crontab importer refuses it).
var sundayEnd = regexp.MustCompile(`(^|,)([1-6]|mon|tue|wed|thu|fri|sat)-(0|sun)(/|,|$)`)

// TestCronieExpectations checks the unix dialect against fire times computed by cronie's
// own crond code (testdata/cronie/README.md): every line cronie loads and axe reads must
// fire at exactly cronie's times. The only lines that may differ are those the unix
// dialect refuses on purpose, where cronie loads a line it then never runs as written
// (a reversed range fires never, a step wider than its field fires at the field's start
// alone, ~ picks a random value), and the SAT-SUN ranges above.
func TestCronieExpectations(t *testing.T) {
	cases, err := oracle.LoadCronie("testdata/cronie/expected.tsv")
	if err != nil {
		t.Fatal(err)
	}
	var matched, refused, sunday int
	for _, c := range cases {
		if c.Refused || len(c.Env) > 0 {
			continue // cron's grammar and the environment are the importer's (internal/migrate)
		}
		s, err := Parse(c.Schedule)
		f := strings.Fields(strings.ToLower(c.Schedule))
		switch {
		case err != nil:
			msg := err.Error()
			if !strings.Contains(c.Schedule, "~") && c.Schedule != "@reboot" &&
				!strings.Contains(msg, "is reversed") && !strings.Contains(msg, "step") {
				t.Errorf("expected.tsv:%d: %q refused (%v); cronie fires it at %v", c.Line, c.Schedule, err, c.Fires)
			}
			refused++
			continue
		case len(f) == 5 && sundayEnd.MatchString(f[4]):
			sunday++
			continue
		}
		loc := mustLoc(t, c.Zone())
		after := c.Start
		var got []time.Time
		for range max(len(c.Fires), 1) {
			if after = s.Next(after, loc); after.IsZero() {
				break
			}
			got = append(got, after)
		}
		if len(c.Fires) == 0 {
			// cronie loads it and never fires it within its eight-year horizon.
			if len(got) > 0 && got[0].Sub(c.Start) < 8*366*24*time.Hour {
				t.Errorf("expected.tsv:%d: %q fires at %s; cronie never fires it", c.Line, c.Schedule, got[0].Format(time.RFC3339))
			}
			matched++
			continue
		}
		if !slices.EqualFunc(got, c.Fires, time.Time.Equal) {
			t.Errorf("expected.tsv:%d: %q from %s: %s (want: cronie's)", c.Line, c.Schedule, c.Start.Format(time.RFC3339), firstDiff(got, c.Fires))
			continue
		}
		matched++
	}
	t.Logf("%d cronie cases: %d match, %d refused on purpose, %d SAT-SUN ranges", len(cases), matched, refused, sunday)
	if matched < 150 || sunday == 0 {
		t.Errorf("the table covers too little: %d matched, %d SAT-SUN", matched, sunday)
	}
}
