package cron

import (
	"bufio"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// quartzCase is one line of testdata/quartz/expected.tsv: the fire times
// Quartz 2.3.2's CronExpression computed (see testdata/quartz/README.md).
type quartzCase struct {
	line      int
	zone      string
	start     time.Time
	expr      string
	refused   string      // Quartz's message when it refused expr
	fires     []time.Time // otherwise the next fire times after start
	zoneShift bool        // the zone's offset changes between start and the last fire
}

func loadQuartzCases(t *testing.T) []quartzCase {
	t.Helper()
	f, err := os.Open("testdata/quartz/expected.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []quartzCase
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		cols := strings.Split(sc.Text(), "\t")
		if len(cols) != 4 {
			t.Fatalf("expected.tsv:%d: %d columns, want 4", n, len(cols))
		}
		start, err := time.Parse(time.RFC3339, cols[1])
		if err != nil {
			t.Fatalf("expected.tsv:%d: %v", n, err)
		}
		c := quartzCase{line: n, zone: cols[0], start: start, expr: cols[2]}
		if msg, ok := strings.CutPrefix(cols[3], "refused: "); ok {
			c.refused = msg
		} else {
			for _, s := range strings.Split(cols[3], ",") {
				ft, err := time.Parse(time.RFC3339, s)
				if err != nil {
					t.Fatalf("expected.tsv:%d: %v", n, err)
				}
				c.fires = append(c.fires, ft)
			}
			loc := mustLoc(t, c.zone)
			_, off0 := start.In(loc).Zone()
			_, off1 := c.fires[len(c.fires)-1].In(loc).Zone()
			c.zoneShift = off0 != off1
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestQuartzExpectations checks the quartz dialect against fire times
// computed by Quartz itself. They must agree exactly, except where daylight
// saving moves a fixed wall time: there axe keeps its documented policy (a
// skipped time fires when the gap ends, a repeated one at its first
// occurrence) and Quartz does not, so such a case may differ only by the
// length of the zone's shift, only in a case that spans the shift.
func TestQuartzExpectations(t *testing.T) {
	cases := loadQuartzCases(t)
	if len(cases) < 300 {
		t.Fatalf("only %d cases in expected.tsv", len(cases))
	}
	odd := loadOddities(t)
	var fired, refused, dst, oddities int
	for _, c := range cases {
		s, err := ParseIn(c.expr, DialectQuartz)
		if odd[c.expr] {
			// Quartz accepts it but reads it otherwise than it is written; the
			// dialect refuses it rather than guess.
			if c.refused != "" {
				t.Errorf("expected.tsv:%d: oddity %q is refused by Quartz (%s); move it to refused.txt", c.line, c.expr, c.refused)
			}
			if err == nil {
				t.Errorf("expected.tsv:%d: %q accepted; Quartz reads it as %v, which is not what it says", c.line, c.expr, c.fires)
			}
			oddities++
			continue
		}
		if c.refused != "" {
			if err == nil {
				t.Errorf("expected.tsv:%d: %q accepted; Quartz refuses it: %s", c.line, c.expr, c.refused)
			} else if !errors.Is(err, ErrInvalidCron) {
				t.Errorf("expected.tsv:%d: %q: error %v does not wrap ErrInvalidCron", c.line, c.expr, err)
			}
			refused++
			continue
		}
		if err != nil {
			t.Errorf("expected.tsv:%d: %q refused: %v", c.line, c.expr, err)
			continue
		}
		loc := mustLoc(t, c.zone)
		after, differs := c.start, false
		for i, want := range c.fires {
			got := s.Next(after, loc)
			if !got.Equal(want) {
				if !c.zoneShift || !dstShifted(got, want, loc) {
					t.Errorf("expected.tsv:%d: %q in %s after %s: fire %d is %s, Quartz says %s",
						c.line, c.expr, c.zone, c.start.Format(time.RFC3339), i+1, got.Format(time.RFC3339), want.Format(time.RFC3339))
				}
				t.Logf("expected.tsv:%d: %q in %s: axe fires %s, Quartz %s (DST policy)", c.line, c.expr, c.zone, got.Format(time.RFC3339), want.Format(time.RFC3339))
				differs = true
				break
			}
			after = got
		}
		if differs {
			dst++
		}
		fired++
	}
	t.Logf("%d cases: %d fire-time cases (%d differ only by axe's DST policy), %d refusals, %d oddities refused", len(cases), fired, dst, refused, oddities)
	if oddities != len(odd) {
		t.Errorf("%d oddities in expected.tsv, %d in oddities.txt", oddities, len(odd))
	}
	// The data holds fixed wall times inside New York's and Berlin's
	// transitions; if none differs, the DST branch above is untested.
	if dst == 0 {
		t.Errorf("no case differed by the DST policy; the data no longer covers it")
	}
}

// loadOddities reads testdata/quartz/oddities.txt: expressions Quartz accepts
// but reads otherwise than they are written.
func loadOddities(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("testdata/quartz/oddities.txt")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			out[l] = true
		}
	}
	return out
}

// dstShifted reports whether axe's fire got differs from Quartz's want only
// by the documented daylight-saving policy:
//   - got is the end of a spring-forward gap (axe fires a skipped wall time
//     there) and Quartz fires later, having skipped it;
//   - or got and want read the same wall clock across a fall-back, got the
//     first occurrence (axe) and want the second (Quartz).
func dstShifted(got, want time.Time, loc *time.Location) bool {
	_, before := got.Add(-time.Second).In(loc).Zone()
	_, at := got.In(loc).Zone()
	if at > before && want.After(got) {
		_, end := got.Add(-time.Second).In(loc).ZoneBounds()
		return end.Equal(got)
	}
	g, w := got.In(loc), want.In(loc)
	_, og := g.Zone()
	_, ow := w.Zone()
	return og > ow && g.Format(time.DateTime) == w.Format(time.DateTime) && got.Before(want)
}
