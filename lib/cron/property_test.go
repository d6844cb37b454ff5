package cron

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/cronexpr"
	"pgregory.net/rapid"
)

// transition is a window in which a zone changes its UTC offset.
type transition struct {
	zone string
	at   string // the instant of the change (or any instant, for Shanghai)
}

var transitions = []transition{
	{"America/New_York", "2026-03-08T07:00:00Z"},
	{"America/New_York", "2026-11-01T06:00:00Z"},
	{"Europe/Berlin", "2026-03-29T01:00:00Z"},
	{"Europe/Berlin", "2026-10-25T01:00:00Z"},
	{"Australia/Lord_Howe", "2026-04-04T15:00:00Z"},
	{"Australia/Lord_Howe", "2026-10-03T15:30:00Z"},
	{"Pacific/Apia", "2011-12-30T10:00:00Z"},
	// Past the end of the tz tables offsets come from the zone's rule.
	{"America/New_York", "2090-03-12T07:00:00Z"},
	{"America/New_York", "2090-11-05T06:00:00Z"},
	{"Australia/Lord_Howe", "2090-04-01T15:00:00Z"},
	{"Australia/Lord_Howe", "2090-09-30T15:30:00Z"},
	// Not a transition: New Year's Eve of a leap year, where time.ZoneBounds
	// misreports the period end (see zoneEnd).
	{"America/New_York", "2041-01-01T00:00:00Z"},
	{"Europe/Berlin", "2040-12-31T12:00:00Z"},
	{leapEveZone, "2041-01-01T00:00:00Z"},
	{"Asia/Shanghai", "2026-03-08T07:00:00Z"},
	{"UTC", "2026-11-01T06:00:00Z"},
}

// timeSet is a set of values of one field with the text that expresses it.
type timeSet struct {
	text string
	has  [60]bool
	size int
}

func (s *timeSet) add(v int) {
	if !s.has[v] {
		s.has[v] = true
		s.size++
	}
}

// genSet draws a field over 0..limit-1 written in one of the syntaxes axe
// accepts: *, */n, a list, a range, a stepped range.
func genSet(t *rapid.T, name string, limit int, hot []int) timeSet {
	var s timeSet
	switch rapid.IntRange(0, 5).Draw(t, name+"-kind") {
	case 0:
		s.text = rapid.SampledFrom([]string{"*", "?", "*/1", "0-" + strconv.Itoa(limit-1)}).Draw(t, name+"-all")
		for v := range limit {
			s.add(v)
		}
	case 1:
		step := rapid.IntRange(2, limit/2).Draw(t, name+"-step")
		s.text = "*/" + strconv.Itoa(step)
		for v := 0; v < limit; v += step {
			s.add(v)
		}
	case 2:
		lo := rapid.IntRange(0, limit-1).Draw(t, name+"-lo")
		hi := rapid.IntRange(lo, limit-1).Draw(t, name+"-hi")
		step := rapid.IntRange(1, 3).Draw(t, name+"-rstep")
		s.text = fmt.Sprintf("%d-%d/%d", lo, hi, step)
		for v := lo; v <= hi; v += step {
			s.add(v)
		}
	case 3:
		// Everything but one value: not "every hour", so wall-clock rules.
		skip := rapid.IntRange(0, limit-1).Draw(t, name+"-skip")
		var items []string
		for v := range limit {
			if v != skip {
				s.add(v)
				items = append(items, strconv.Itoa(v))
			}
		}
		s.text = strings.Join(items, ",")
	default:
		// A short list, favouring the values near the transitions.
		n := rapid.IntRange(1, 4).Draw(t, name+"-n")
		var items []string
		for i := range n {
			var v int
			if hot != nil && rapid.Bool().Draw(t, fmt.Sprintf("%s-hot%d", name, i)) {
				v = rapid.SampledFrom(hot).Draw(t, fmt.Sprintf("%s-hv%d", name, i))
			} else {
				v = rapid.IntRange(0, limit-1).Draw(t, fmt.Sprintf("%s-v%d", name, i))
			}
			s.add(v)
			items = append(items, strconv.Itoa(v))
		}
		s.text = strings.Join(items, ",")
	}
	return s
}

// TestDSTModel compares Next with a brute-force model of the documented DST
// rules, second by second, around real transitions. Day fields are * so the
// model only needs the time-of-day sets.
func TestDSTModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tr := rapid.SampledFrom(transitions).Draw(t, "transition")
		loc := mustLoc(t, tr.zone)
		at := mustTime(t, tr.at)
		after := at.Add(time.Duration(rapid.Int64Range(-3*3600e9, 3*3600e9).Draw(t, "offset")))

		secs := genSet(t, "sec", 60, []int{0, 30, 59})
		if secs.size > 6 {
			// Keep the number of fire times (and the test's run time) modest.
			secs = timeSet{text: "0"}
			secs.add(0)
		}
		mins := genSet(t, "min", 60, []int{0, 15, 30, 45, 59})
		hours := genSet(t, "hour", 24, []int{0, 1, 2, 3, 23})
		expr := fmt.Sprintf("%s %s %s * * ?", secs.text, mins.text, hours.text)
		matches := func(w time.Time) bool {
			return secs.has[w.Second()] && mins.has[w.Minute()] && hours.has[w.Hour()]
		}
		realTime := hours.size == 24

		// The model: scan every second. Start early enough that the first
		// pass of any repeated wall time after `after` is seen.
		const window = 4 * time.Hour
		wallOf := func(u time.Time) time.Time {
			_, off := u.In(loc).Zone()
			return toWall(u, off)
		}
		start := after.Truncate(time.Second).Add(-2 * time.Hour)
		end := after.Add(window)
		seen := make(map[int64]bool)
		var want []time.Time
		prev := wallOf(start.Add(-time.Second))
		for u := start; !u.After(end); u = u.Add(time.Second) {
			w := wallOf(u)
			fire := false
			if realTime {
				fire = matches(w)
			} else {
				fire = matches(w) && !seen[w.Unix()]
				if gap := w.Sub(prev); gap > time.Second {
					// Clocks jumped forward at u: any wall time skipped fires now.
					for v := prev.Add(time.Second); v.Before(w); v = v.Add(time.Second) {
						fire = fire || matches(v)
					}
				}
			}
			seen[w.Unix()] = true
			prev = w
			if fire && u.After(after) {
				want = append(want, u)
			}
		}

		s, err := Parse(expr)
		if err != nil {
			t.Fatalf("Parse(%q): %v", expr, err)
		}
		var got []time.Time
		for n := s.Next(after, loc); !n.IsZero() && !n.After(end); n = s.Next(n, loc) {
			got = append(got, n)
		}
		if !slices.EqualFunc(got, want, time.Time.Equal) {
			t.Fatalf("%q in %s after %s: %s", expr, loc, after.In(loc), firstDiff(got, want))
		}
	})
}

// TestMatchesCronexprInUTC is a differential test: in UTC there is no DST,
// so for syntax both accept axe must agree with cronexpr reading the same
// seven fields directly. It checks that the field normalisation keeps the
// meaning.
func TestMatchesCronexprInUTC(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := []string{
			genField(t, "sec", 0, 59, nil),
			genField(t, "min", 0, 59, nil),
			genField(t, "hour", 0, 23, nil),
			genField(t, "dom", 1, 31, []string{"L", "LW", "15W", "1W", "31W"}),
			genField(t, "month", 1, 12, []string{"JAN", "feb", "Dec", "jun-aug"}),
			genField(t, "dow", 0, 6, []string{"MON", "fri", "5L", "1#2", "sat#5", "mon-fri"}),
			rapid.SampledFrom([]string{"*", "2026-2030", "2027", "2026,2028,2030", "*/3"}).Draw(t, "year"),
		}
		expr := strings.Join(f, " ")
		ref, err := cronexpr.Parse(expr)
		if err != nil {
			t.Skip("cronexpr rejects", expr)
		}
		if (f[3][0] == '*' || f[3][0] == '?' || f[5][0] == '*' || f[5][0] == '?') &&
			!hasItem(f[3], "*") && !hasItem(f[3], "?") && !hasItem(f[5], "*") && !hasItem(f[5], "?") {
			// Both day fields restricted and one starts with * (*/2): cron wants both
			// to match, cronexpr either. TestCronieExpectations checks that case
			// against cronie itself.
			t.Skip("cron's both-day-fields rule", expr)
		}
		if !strings.ContainsAny(f[3][:1]+f[5][:1], "*?") && (hasItem(f[3], "*") || hasItem(f[3], "?") || hasItem(f[5], "*") || hasItem(f[5], "?")) {
			// A * later in a list of a day field ("5,*") covers every day, and
			// neither field starts with *: cron matches every day, cronexpr reads
			// the field as unrestricted.
			t.Skip("cron's either-day-field rule with a full field", expr)
		}
		s, err := Parse(expr)
		if err != nil {
			if strings.Contains(err.Error(), "never fires") {
				if !ref.Next(neverRef).IsZero() {
					t.Fatalf("%q: axe says never, cronexpr fires at %s", expr, ref.Next(neverRef))
				}
				return
			}
			t.Fatalf("Parse(%q): %v", expr, err)
		}
		after := time.Unix(rapid.Int64Range(1767225600, 1893456000).Draw(t, "after"), 0).UTC()
		for i := range 20 {
			g, w := s.Next(after, time.UTC), ref.Next(after)
			if !g.Equal(w) {
				t.Fatalf("%q after %s (step %d): axe %s, cronexpr %s", expr, after, i, g, w)
			}
			if g.IsZero() {
				return
			}
			after = g
		}
	})
}

// genField draws a field that cronexpr and axe both read the same way: no
// reversed ranges, no day-of-week 7 or 0-0, no L-n.
func genField(t *rapid.T, name string, lo, hi int, extra []string) string {
	n := rapid.IntRange(1, 3).Draw(t, name+"-n")
	items := make([]string, n)
	for i := range items {
		label := fmt.Sprintf("%s-%d", name, i)
		switch k := rapid.IntRange(0, 5).Draw(t, label+"-kind"); {
		case k == 0:
			items[i] = rapid.SampledFrom([]string{"*", "?"}).Draw(t, label+"-all")
		case k == 1:
			items[i] = "*/" + strconv.Itoa(rapid.IntRange(1, hi-lo).Draw(t, label+"-step"))
		case k == 2:
			a := rapid.IntRange(lo, hi).Draw(t, label+"-a")
			b := rapid.IntRange(a, hi).Draw(t, label+"-b")
			items[i] = fmt.Sprintf("%d-%d", a, b)
			if name == "dow" && b == 0 {
				items[i] = "0" // cronexpr reads 0-0 as every day; it is Sunday
			}
		case k == 3 && len(extra) > 0:
			items[i] = rapid.SampledFrom(extra).Draw(t, label+"-extra")
		default:
			items[i] = strconv.Itoa(rapid.IntRange(lo, hi).Draw(t, label+"-v"))
		}
	}
	return strings.Join(items, ",")
}

// consistencyExprs covers every syntax form and both DST modes.
var consistencyExprs = []string{
	"* * * * *", "*/1 * * * * *", "*/7 * * * * *", "0 */30 * * * *", "0 30 2 * * ?",
	"0 30 1 * * ?", "0 0 0-22 * * ?", "* * 1 * * ?", "0 15 10 ? * MON-FRI", "0 0 0 L * ?",
	"0 0 0 L-3 * ?", "0 0 12 L-30,L-1 * ?", "0 0 0 15W * ?", "0 0 0 LW * ?", "0 0 0 ? * 5L",
	"0 0 0 ? * FRI#3", "0 0 0 29 2 ?", "0 0 0 20 * FRI", "0 0 2 1 1 ? 2030-2035", "@yearly",
	"@monthly", "@weekly", "@daily", "@hourly", "@every 30s", "@every 1h30m", "@every 7s",
	"0 0 3 ? * SUN", "30 59 1 * * ?", "0 0 2,3 * * ?", "0 0 * 8 3 ?",
}

// TestConsistency checks properties that hold for any schedule, zone and
// start time: Next is strictly after its input, never skips its own answer,
// and NextN agrees with repeated Next.
func TestConsistency(t *testing.T) {
	zones := []string{"UTC", "America/New_York", "Europe/Berlin", "Asia/Shanghai", "Australia/Lord_Howe", "Pacific/Apia", "America/Sao_Paulo"}
	rapid.Check(t, func(t *rapid.T) {
		expr := rapid.SampledFrom(consistencyExprs).Draw(t, "expr")
		loc := mustLoc(t, rapid.SampledFrom(zones).Draw(t, "zone"))
		var after time.Time
		if rapid.Bool().Draw(t, "near-transition") {
			tr := rapid.SampledFrom(transitions).Draw(t, "transition")
			after = mustTime(t, tr.at).Add(time.Duration(rapid.Int64Range(-36*3600e9, 36*3600e9).Draw(t, "offset")))
		} else {
			after = time.Unix(rapid.Int64Range(0, 4102444800).Draw(t, "unix"), rapid.Int64Range(0, 999999999).Draw(t, "nanos"))
		}
		s, err := Parse(expr)
		if err != nil {
			t.Fatalf("Parse(%q): %v", expr, err)
		}
		list, err := NextN(expr, loc, after, 8)
		if err != nil {
			t.Fatalf("NextN: %v", err)
		}
		prev := after
		for i := range 8 {
			n := s.Next(prev, loc)
			if n.IsZero() {
				if len(list) != i {
					t.Fatalf("%q: Next stopped after %d, NextN gave %d", expr, i, len(list))
				}
				return
			}
			if !n.After(prev) {
				t.Fatalf("%q in %s: Next(%s) = %s, not after", expr, loc, prev, n)
			}
			if n.Location() != loc {
				t.Fatalf("%q: Next in %s, want %s", expr, n.Location(), loc)
			}
			if i >= len(list) || !list[i].Equal(n) {
				t.Fatalf("%q in %s: fire %d: Next %s, NextN %v", expr, loc, i, n, format(list))
			}
			// n is the first fire after prev, so it is also the first fire
			// after any instant in [prev, n).
			mid := prev.Add(n.Sub(prev) / 2)
			for _, from := range []time.Time{n.Add(-time.Nanosecond), n.Add(-time.Second), mid} {
				if from.Before(prev) {
					continue
				}
				if again := s.Next(from, loc); !again.Equal(n) {
					t.Fatalf("%q in %s: Next(%s) = %s but Next(%s) = %s", expr, loc, prev, n, from, again)
				}
			}
			prev = n
		}
	})
}

// firstDiff describes where two fire-time lists first differ, with a little
// context, so a failure on a schedule that fires every second stays readable.
func firstDiff(got, want []time.Time) string {
	i := 0
	for i < len(got) && i < len(want) && got[i].Equal(want[i]) {
		i++
	}
	lo := max(0, i-2)
	return fmt.Sprintf("%d and %d fire times, first difference at %d:\n got[%d:] %v\nwant[%d:] %v",
		len(got), len(want), i, lo, format(got[lo:min(len(got), i+3)]), lo, format(want[lo:min(len(want), i+3)]))
}
