package cron

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fataler is what the helpers need from *testing.T, *testing.B and *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

func mustLoc(t fataler, name string) *time.Location {
	t.Helper()
	load := LoadLocation
	if name == leapEveZone {
		load = func(string) (*time.Location, error) { return leapEve() }
	}
	loc, err := load(name)
	if err != nil {
		t.Fatalf("LoadLocation(%q): %v", name, err)
	}
	return loc
}

func mustTime(t fataler, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("bad test time %q: %v", s, err)
	}
	return v
}

// fires returns the first n fire times after `after`, by repeated Next.
func fires(t testing.TB, expr string, loc *time.Location, after time.Time, n int) []time.Time {
	t.Helper()
	s, err := Parse(expr)
	if err != nil {
		t.Fatalf("Parse(%q): %v", expr, err)
	}
	var out []time.Time
	for range n {
		after = s.Next(after, loc)
		if after.IsZero() {
			break
		}
		out = append(out, after)
	}
	return out
}

// checkFires compares fire times with the RFC 3339 strings in want. A
// trailing "never" means the schedule must stop after the listed times.
func checkFires(t *testing.T, expr string, loc *time.Location, after time.Time, want []string) {
	t.Helper()
	n := len(want)
	stops := n > 0 && want[n-1] == "never"
	if stops {
		want = want[:n-1]
	} else if n == 0 {
		t.Fatal("empty want")
	}
	got := fires(t, expr, loc, after, len(want)+1)
	if !stops {
		got = got[:min(len(got), len(want))]
	}
	if len(got) != len(want) {
		t.Fatalf("%q in %s after %s: got %d fire times %v, want %v", expr, loc, after, len(got), format(got), want)
	}
	for i, g := range got {
		w := mustTime(t, want[i])
		if !g.Equal(w) {
			t.Fatalf("%q in %s after %s: fire %d = %s, want %s (all: %v)", expr, loc, after, i, g.Format(time.RFC3339), want[i], format(got))
		}
		if g.Location() != loc {
			t.Fatalf("%q: fire %d in location %s, want %s", expr, i, g.Location(), loc)
		}
	}
}

func format(ts []time.Time) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Format(time.RFC3339)
	}
	return out
}

// TestSyntax pins every syntax element to exact instants. The reference time
// is Thursday 2026-01-15 10:20:30 UTC.
func TestSyntax(t *testing.T) {
	after := mustTime(t, "2026-01-15T10:20:30Z")
	tests := []struct {
		expr string
		want []string
	}{
		// Field counts.
		{"* * * * *", []string{"2026-01-15T10:21:00Z", "2026-01-15T10:22:00Z"}},
		{"*/1 * * * * *", []string{"2026-01-15T10:20:31Z", "2026-01-15T10:20:32Z", "2026-01-15T10:20:33Z"}},
		{"30 * * * * *", []string{"2026-01-15T10:21:30Z", "2026-01-15T10:22:30Z"}},
		{"15 10 * * *", []string{"2026-01-16T10:15:00Z", "2026-01-17T10:15:00Z"}},
		{"0 0 12 * * ? 2027", []string{"2027-01-01T12:00:00Z", "2027-01-02T12:00:00Z"}},
		{"0 0 0 1 1 ? 2030-2032", []string{"2030-01-01T00:00:00Z", "2031-01-01T00:00:00Z", "2032-01-01T00:00:00Z", "never"}},
		{"0 0 0 1 1 ? 2020", []string{"never"}},
		{"\t0  0 12 * *   ?  2027 ", []string{"2027-01-01T12:00:00Z"}},

		// Lists, ranges, steps.
		{"0 0/20 * * * ?", []string{"2026-01-15T10:40:00Z", "2026-01-15T11:00:00Z"}},
		{"0 5-10/2 * * * ?", []string{"2026-01-15T11:05:00Z", "2026-01-15T11:07:00Z", "2026-01-15T11:09:00Z", "2026-01-15T12:05:00Z"}},
		{"0 0 1,13 * * ?", []string{"2026-01-15T13:00:00Z", "2026-01-16T01:00:00Z"}},
		{"0 0 */6 * * ?", []string{"2026-01-15T12:00:00Z", "2026-01-15T18:00:00Z", "2026-01-16T00:00:00Z"}},
		{"0,30 21 10 * * ?", []string{"2026-01-15T10:21:00Z", "2026-01-15T10:21:30Z", "2026-01-16T10:21:00Z"}},

		// Names, case-insensitive.
		{"0 0 9 1 JAN,jul ?", []string{"2026-07-01T09:00:00Z", "2027-01-01T09:00:00Z"}},
		{"0 0 9 1 february-March ?", []string{"2026-02-01T09:00:00Z", "2026-03-01T09:00:00Z", "2027-02-01T09:00:00Z"}},
		{"0 15 10 ? * MON-FRI", []string{"2026-01-16T10:15:00Z", "2026-01-19T10:15:00Z"}},
		{"0 0 8 ? * sat-sunday", []string{"2026-01-17T08:00:00Z", "2026-01-18T08:00:00Z", "2026-01-24T08:00:00Z"}},
		// 7 is Sunday, so 5-7 is Friday to Sunday.
		{"0 0 0 ? * 5-7", []string{"2026-01-16T00:00:00Z", "2026-01-17T00:00:00Z", "2026-01-18T00:00:00Z", "2026-01-23T00:00:00Z"}},
		{"0 0 0 ? * SAT-0", []string{"2026-01-17T00:00:00Z", "2026-01-18T00:00:00Z"}},
		{"0 0 0 ? * 7", []string{"2026-01-18T00:00:00Z", "2026-01-25T00:00:00Z"}},

		// Day-of-month and day-of-week both restricted: either matches.
		{"0 0 0 20 * FRI", []string{"2026-01-16T00:00:00Z", "2026-01-20T00:00:00Z", "2026-01-23T00:00:00Z"}},

		// Quartz L, L-n, W, LW.
		{"0 0 0 L * ?", []string{"2026-01-31T00:00:00Z", "2026-02-28T00:00:00Z", "2026-03-31T00:00:00Z", "2026-04-30T00:00:00Z"}},
		{"0 0 0 L-3 * ?", []string{"2026-01-28T00:00:00Z", "2026-02-25T00:00:00Z", "2026-03-28T00:00:00Z", "2026-04-27T00:00:00Z"}},
		{"0 0 0 L-3 2 ? 2028", []string{"2028-02-26T00:00:00Z", "never"}},
		{"0 0 0 L-30 * ?", []string{"2026-03-01T00:00:00Z", "2026-05-01T00:00:00Z"}},
		{"0 0 0 L-1,L,10 jan-feb ?", []string{"2026-01-30T00:00:00Z", "2026-01-31T00:00:00Z", "2026-02-10T00:00:00Z", "2026-02-27T00:00:00Z", "2026-02-28T00:00:00Z", "2027-01-10T00:00:00Z"}},
		{"0 0 0 L-29 * FRI#1", []string{"2026-02-06T00:00:00Z", "2026-03-02T00:00:00Z", "2026-03-06T00:00:00Z"}},
		// 2026-02-15 and 2026-03-15 are Sundays: the nearest weekday is the 16th.
		{"0 0 0 15W * ?", []string{"2026-02-16T00:00:00Z", "2026-03-16T00:00:00Z", "2026-04-15T00:00:00Z"}},
		// 2026-08-01 is a Saturday: 1W stays in August, on Monday the 3rd.
		{"0 0 0 1W 8 ?", []string{"2026-08-03T00:00:00Z"}},
		// 2026-01-31 and 2026-02-28 are Saturdays.
		{"0 0 0 LW * ?", []string{"2026-01-30T00:00:00Z", "2026-02-27T00:00:00Z", "2026-03-31T00:00:00Z"}},

		// Quartz nL and #.
		{"0 0 0 ? * 5L", []string{"2026-01-30T00:00:00Z", "2026-02-27T00:00:00Z", "2026-03-27T00:00:00Z"}},
		{"0 0 0 ? * friL", []string{"2026-01-30T00:00:00Z"}},
		{"0 0 0 ? * FRI#3", []string{"2026-01-16T00:00:00Z", "2026-02-20T00:00:00Z", "2026-03-20T00:00:00Z"}},
		{"0 0 0 ? * 1#5", []string{"2026-03-30T00:00:00Z", "2026-06-29T00:00:00Z", "2026-08-31T00:00:00Z"}},
		{"0 0 0 ? * 7#1", []string{"2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"}},

		// Leap day.
		{"0 0 0 29 2 ?", []string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},

		// Descriptors.
		{"@yearly", []string{"2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"}},
		{"@annually", []string{"2027-01-01T00:00:00Z"}},
		{"@monthly", []string{"2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"}},
		{"@weekly", []string{"2026-01-18T00:00:00Z", "2026-01-25T00:00:00Z"}},
		{"@daily", []string{"2026-01-16T00:00:00Z", "2026-01-17T00:00:00Z"}},
		{"@midnight", []string{"2026-01-16T00:00:00Z"}},
		{"@HOURLY", []string{"2026-01-15T11:00:00Z", "2026-01-15T12:00:00Z"}},

		// @every counts from the Unix epoch; 10:20:30 is itself a multiple of
		// 30 s, and Next is strictly after.
		{"@every 30s", []string{"2026-01-15T10:21:00Z", "2026-01-15T10:21:30Z"}},
		{"@every 1h30m", []string{"2026-01-15T10:30:00Z", "2026-01-15T12:00:00Z"}},
		{"@every 24h", []string{"2026-01-16T00:00:00Z"}},
		{" @every   1s ", []string{"2026-01-15T10:20:31Z", "2026-01-15T10:20:32Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			checkFires(t, tt.expr, time.UTC, after, tt.want)
		})
	}
}

// TestEveryAnchoring checks @every against the epoch arithmetic directly,
// for periods that do not divide a day.
func TestEveryAnchoring(t *testing.T) {
	loc := mustLoc(t, "Asia/Shanghai")
	for _, d := range []time.Duration{7 * time.Second, 13 * time.Minute, 25 * time.Hour, 1000 * time.Hour} {
		s, err := Parse("@every " + d.String())
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		after := mustTime(t, "2026-05-17T03:04:05.5Z")
		for range 5 {
			next := s.Next(after, loc)
			if next.Unix()%int64(d/time.Second) != 0 || next.Nanosecond() != 0 {
				t.Fatalf("@every %s: %s is not a multiple of the period since the epoch", d, next)
			}
			if !next.After(after) || next.Sub(after) > d {
				t.Fatalf("@every %s: after %s got %s, want within (0, %s]", d, after, next, d)
			}
			if next.Location() != loc {
				t.Fatalf("@every %s: location %s, want %s", d, next.Location(), loc)
			}
			after = next
		}
	}
	// Before the epoch the multiples continue backwards.
	s, _ := Parse("@every 1h")
	got := s.Next(mustTime(t, "1969-12-31T22:30:00Z"), time.UTC)
	if want := mustTime(t, "1969-12-31T23:00:00Z"); !got.Equal(want) {
		t.Fatalf("before the epoch: got %s, want %s", got, want)
	}
}

func TestShanghai(t *testing.T) {
	loc := mustLoc(t, "Asia/Shanghai")
	// No DST: 02:30 exists on every day, including the days other zones
	// change their clocks.
	checkFires(t, "0 30 2 * * ?", loc, mustTime(t, "2026-03-07T12:00:00+08:00"), []string{
		"2026-03-08T02:30:00+08:00", "2026-03-09T02:30:00+08:00",
	})
	checkFires(t, "0 0 9 ? * MON", loc, mustTime(t, "2026-10-31T00:00:00+08:00"), []string{
		"2026-11-02T09:00:00+08:00", "2026-11-09T09:00:00+08:00",
	})
	checkFires(t, "0 */30 * * * *", loc, mustTime(t, "2026-11-01T00:45:00+08:00"), []string{
		"2026-11-01T01:00:00+08:00", "2026-11-01T01:30:00+08:00", "2026-11-01T02:00:00+08:00",
	})
	// Evaluated in the zone, not in UTC: midnight in Shanghai is 16:00 UTC.
	checkFires(t, "@daily", loc, mustTime(t, "2026-01-15T10:20:30Z"), []string{"2026-01-15T16:00:00Z"})
}

func TestRejects(t *testing.T) {
	tests := []struct {
		expr string
		hint string // must appear in the error message
	}{
		{"", "empty"},
		{"   \t", "empty"},
		{"* * * *", "4 fields"},
		{"* * * * * * * *", "8 fields"},
		{"60 * * * * *", "second value 60 is out of range"},
		{"60 * * * *", "minute value 60"},
		{"* 24 * * *", "hour value 24"},
		{"* * 0 * *", "day-of-month value 0"},
		{"* * 32 * *", "day-of-month value 32"},
		{"* * * 13 *", "month value 13"},
		{"* * * * 8", "day-of-week value 8"},
		{"0 0 0 1 1 ? 1969", "year value 1969"},
		{"0 0 0 1 1 ? 2100", "year value 2100"},
		{"foo", "1 fields"},
		{"* * * * bar", `"bar" is not a number or day name`},
		{"* * * foo *", "or month name"},
		{"*/0 * * * *", "step"},
		{"*/60 * * * * *", "step"},
		{"0 0 0 * * ? */200", "step"},
		{"5-2 * * * *", "reversed"},
		{"0 0 0 ? * FRI-MON", "reversed"},
		{"1,,2 * * * *", "empty list item"},
		{"1, * * * *", "empty list item"},
		{"-1 * * * *", "not a number"},
		{"1- * * * *", "not a number"},
		{"1-2-3 * * * *", "not a number"},
		{"1/2/3 * * * *", "step"},
		{"+1 * * * *", "not a number"},
		{"0x1 * * * *", "not a number"},
		{"00001 * * * *", "not a number"},
		{"L * * * *", "not a number"},
		{"0 0 0 ? * 1#6", "1 to 5"},
		{"0 0 0 ? * 1#0", "1 to 5"},
		{"0 0 0 ? * 8L", "day-of-week value 8"},
		{"0 0 0 L-31 * ?", "L-n"},
		{"0 0 0 L-0 * ?", "L-n"},
		{"0 0 0 32W * ?", "day-of-month value 32"},
		{"0 0 0 W * ?", "not a number"},
		{"0 0 0 30 2 ?", "never fires"},
		{"0 0 0 31 4,6,9,11 ?", "never fires"},
		{"0 0 0 29 2 ? 2026-2027", "never fires"},
		{"0 0 0 L-29 2 ? 2026", "never fires"},
		{"@every", "exactly one duration"},
		{"@every 1s 2s", "exactly one duration"},
		{"@every banana", "not a Go duration"},
		{"@every 500ms", "shorter than 1s"},
		{"@every 0s", "shorter than 1s"},
		{"@every -1m", "shorter than 1s"},
		{"@every 1500ms", "whole number of seconds"},
		{"@fortnightly", "unknown descriptor"},
		{"@daily 5", "takes no arguments"},
		{"@", "unknown descriptor"},
		{strings.Repeat("1,", 600) + "1 * * * *", "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			s, err := Parse(tt.expr)
			if err == nil {
				t.Fatalf("Parse(%q) = %v, want an error", tt.expr, s)
			}
			if !errors.Is(err, ErrInvalidCron) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrInvalidCron", tt.expr, err)
			}
			if !strings.Contains(err.Error(), tt.hint) {
				t.Fatalf("Parse(%q) error %q does not mention %q", tt.expr, err, tt.hint)
			}
			if _, err := NextN(tt.expr, time.UTC, time.Now(), 3); !errors.Is(err, ErrInvalidCron) {
				t.Fatalf("NextN(%q) error = %v, want ErrInvalidCron", tt.expr, err)
			}
		})
	}
}

func TestNextN(t *testing.T) {
	loc := mustLoc(t, "Europe/Berlin")
	after := mustTime(t, "2026-03-28T12:00:00+01:00")
	got, err := NextN("0 30 2 * * ?", loc, after, 3)
	if err != nil {
		t.Fatalf("NextN: %v", err)
	}
	want := []string{"2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00", "2026-03-31T02:30:00+02:00"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", format(got), want)
	}
	for i := range got {
		if !got[i].Equal(mustTime(t, want[i])) || got[i].Location() != loc {
			t.Fatalf("got %v in %s, want %v in %s", format(got), got[i].Location(), want, loc)
		}
	}

	// The default count is what the API uses.
	got, err = NextN("@hourly", time.UTC, after, NextNDefault)
	if err != nil || len(got) != NextNDefault {
		t.Fatalf("NextN(@hourly, default) = %d times, %v; want %d", len(got), err, NextNDefault)
	}

	// A schedule that ends returns fewer than n.
	got, err = NextN("0 0 0 1 1 ? 2098-2099", time.UTC, after, 5)
	if err != nil || len(got) != 2 {
		t.Fatalf("NextN of a two-shot schedule = %v, %v; want 2 times", format(got), err)
	}

	for _, n := range []int{0, -1, NextNMax + 1} {
		if _, err := NextN("@daily", time.UTC, after, n); !errors.Is(err, ErrInvalidCount) {
			t.Fatalf("NextN(n=%d) error = %v, want ErrInvalidCount", n, err)
		}
	}
	if _, err := NextN("@daily", nil, after, 1); !errors.Is(err, ErrInvalidTimezone) {
		t.Fatalf("NextN(nil loc) error = %v, want ErrInvalidTimezone", err)
	}
	got, err = NextN("@every 1s", time.UTC, after, NextNMax)
	if err != nil || len(got) != NextNMax {
		t.Fatalf("NextN(n=NextNMax) = %d times, %v", len(got), err)
	}
}

func TestNilLocationIsUTC(t *testing.T) {
	after := mustTime(t, "2026-01-15T10:20:30+08:00")
	for _, expr := range []string{"@daily", "0 30 2 * * ?", "0 */30 * * * *", "@every 1h"} {
		s, err := Parse(expr)
		if err != nil {
			t.Fatal(err)
		}
		got, want := s.Next(after, nil), s.Next(after, time.UTC)
		if !got.Equal(want) || got.Location() != time.UTC {
			t.Fatalf("%q: Next(nil loc) = %s, want %s in UTC", expr, got, want)
		}
	}
}

func TestFarTimes(t *testing.T) {
	s, err := Parse("0 0 0 1 1 ?")
	if err != nil {
		t.Fatal(err)
	}
	// Nothing is representable after 2099.
	if got := s.Next(mustTime(t, "2099-06-01T00:00:00Z"), time.UTC); !got.IsZero() {
		t.Fatalf("Next after the last year = %s, want zero", got)
	}
	// From the zero time (or any time before 1970) the first fire is the
	// first representable one.
	ny := mustLoc(t, "America/New_York")
	for _, after := range []time.Time{{}, mustTime(t, "1800-01-01T00:00:00Z")} {
		got := s.Next(after, ny)
		if want := mustTime(t, "1970-01-01T00:00:00-05:00"); !got.Equal(want) {
			t.Fatalf("Next(%s) = %s, want %s", after, got, want)
		}
	}
	every, _ := Parse("@every 1s")
	if got := every.Next(time.Unix(1<<62, 0), time.UTC); !got.After(time.Unix(1<<62, 0)) {
		t.Fatalf("@every far in the future = %s", got)
	}
	if got := every.Next(time.Unix(1<<63-1, 0), time.UTC); !got.IsZero() {
		t.Fatalf("@every at the end of time = %s, want zero", got)
	}
}

func TestLoadLocation(t *testing.T) {
	for _, name := range []string{"UTC", "America/New_York", "Europe/Berlin", "Asia/Shanghai", "Etc/GMT+5"} {
		loc, err := LoadLocation(name)
		if err != nil {
			t.Fatalf("LoadLocation(%q): %v", name, err)
		}
		if loc.String() != name {
			t.Fatalf("LoadLocation(%q) = %s", name, loc)
		}
		again, err := LoadLocation(name)
		if err != nil || again != loc {
			t.Fatalf("second LoadLocation(%q) = %v, %v; want the cached %p", name, again, err, loc)
		}
	}
	for _, name := range []string{"", "Local", "Mars/Olympus_Mons", "America", "../etc/passwd", "/etc/localtime", "UTC ", "America/New_York\x00"} {
		loc, err := LoadLocation(name)
		if !errors.Is(err, ErrInvalidTimezone) {
			t.Fatalf("LoadLocation(%q) = %v, %v; want ErrInvalidTimezone", name, loc, err)
		}
		if name != "" && !strings.Contains(err.Error(), fmt.Sprintf("%q", name)) {
			t.Fatalf("LoadLocation(%q) error %q does not name the zone", name, err)
		}
	}
}
