package cron

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// FuzzParse feeds arbitrary strings to Parse. It must never panic or hang,
// must reject with ErrInvalidCron, and whatever it accepts must produce
// fire times strictly after their input, in the zone asked for.
func FuzzParse(f *testing.F) {
	for _, expr := range consistencyExprs {
		f.Add(expr)
	}
	for _, expr := range []string{
		"", " ", "@", "@every", "@every 0s", "@every 1.5s", "@every 9223372036s", "@every 2562047h",
		"* * * *", "* * * * * * * *", "60 * * * * *", "5-2 * * * *", "*/0 * * * *",
		"0 0 0 30 2 ?", "0 0 0 L-3 2 ? 2028", "0 0 0 L-30 2 ?", "0 0 0 ? * 7#5", "0 0 0 ? * 7L",
		"0 0 0 1W,LW,L,L-1 * ?", "? ? ? ? ? ? ?", "0 0 0 ? * sat-sun", "0 0 0 ? * 7/2",
		"0 0 0 * * ? 1970", "59 59 23 31 12 ? 2099", "0 0 0 1 1 ? 2099/1", "1,2,3,4,5 * * * *",
		"0 0 0 ? * mon#1,fri#5,5l", "0 0 0 29 feb ?", "5 10 10,? * MON,FRI", "0 0 0 31 apr ?", "\x00", "*/1\t*\n* * * *",
	} {
		f.Add(expr)
	}
	// Just before a spring-forward, a leap-year New Year's Eve (see zoneEnd)
	// and a fall-back beyond the tz tables.
	refs := []time.Time{
		time.Date(2026, 3, 8, 6, 59, 59, 500, time.UTC),
		time.Date(2040, 12, 31, 12, 0, 0, 0, time.UTC),
		time.Date(2090, 11, 5, 5, 30, 0, 0, time.UTC),
	}
	zones := []*time.Location{time.UTC, mustLoc(f, "America/New_York"), mustLoc(f, "Europe/Berlin"), mustLoc(f, "Australia/Lord_Howe")}
	for _, expr := range []string{
		"0 0 12 ? * 2", "0 0 12 ? * 1#2", "0 0 12 ? * 6L", "0 0 12 ? * L", "0 0 22-2 * * ?",
		"0 0 8 ? * FRI-MON", "0 0 8 ? * 6-2/2", "0 50-10/5 * * * ?", "0 0 0 28-3 * ?", "0 0 0 1 11-2 ?",
		"0 0 12 1 * MON", "0 0 12 ? * ?", "@every 90s from 2026-12-01T08:00:05Z", "@every 1s from 0001-01-01T00:00:00Z",
	} {
		f.Add(expr)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		// The ambiguity check never panics and only ever reports ErrAmbiguousDay.
		if err := CheckAmbiguous(expr); err != nil && !errors.Is(err, ErrAmbiguousDay) {
			t.Fatalf("CheckAmbiguous(%q) = %v, not ErrAmbiguousDay", expr, err)
		}
		for _, d := range []Dialect{DialectUnix, DialectQuartz} {
			checkParsed(t, expr, d, refs, zones)
		}
		// Every unix expression the day rule's upgrade meets keeps its days: an error would
		// stop an upgrade on a task an earlier axe stored.
		if _, err := ParseIn(expr, DialectUnix); err == nil {
			if _, _, err := KeepDays(expr); err != nil {
				t.Fatalf("KeepDays(%q): %v", expr, err)
			}
		}
	})
}

// checkParsed is FuzzParse's check of one dialect.
func checkParsed(t *testing.T, expr string, d Dialect, refs []time.Time, zones []*time.Location) {
	{
		s, err := ParseIn(expr, d)
		if err != nil {
			if !errors.Is(err, ErrInvalidCron) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrInvalidCron", expr, err)
			}
			if s != nil {
				t.Fatalf("Parse(%q) returned a schedule with error %v", expr, err)
			}
			return
		}
		if len(expr) > ExprMaxLen {
			t.Fatalf("Parse accepted a %d-byte expression", len(expr))
		}
		if str := fmt.Sprint(s); str != expr {
			t.Fatalf("String() = %q, want the input %q", str, expr)
		}
		for _, loc := range zones {
			for _, ref := range refs {
				prev := ref
				for range 3 {
					n := s.Next(prev, loc)
					if n.IsZero() {
						break
					}
					if !n.After(prev) {
						t.Fatalf("%q in %s: Next(%s) = %s, not after", expr, loc, prev, n)
					}
					if n.Location() != loc {
						t.Fatalf("%q: Next in %s, want %s", expr, n.Location(), loc)
					}
					prev = n
				}
			}
		}
		// Accepted expressions fire at least once between 1970 and 2099.
		if s.Next(neverRef, time.UTC).IsZero() {
			t.Fatalf("%q (%s) was accepted but never fires", expr, d)
		}
	}
}

// FuzzLoadLocation feeds arbitrary names to LoadLocation: no panic, errors
// wrap ErrInvalidTimezone, and a loaded zone reports the name it was asked
// for.
func FuzzLoadLocation(f *testing.F) {
	for _, name := range []string{
		"", "Local", "UTC", "utc", "America/New_York", "Europe/Berlin", "Asia/Shanghai", "Etc/GMT+5",
		"Etc/GMT-14", "EST5EDT", "Mars/Phobos", "America", "America/", "/etc/localtime", "../../etc/passwd",
		"America/../UTC", "Asia/Shanghai\x00", " UTC", "America/Argentina/Buenos_Aires", strings.Repeat("A/", 200),
	} {
		f.Add(name)
	}
	f.Fuzz(func(t *testing.T, name string) {
		loc, err := LoadLocation(name)
		if err != nil {
			if !errors.Is(err, ErrInvalidTimezone) {
				t.Fatalf("LoadLocation(%q) error %v does not wrap ErrInvalidTimezone", name, err)
			}
			if loc != nil {
				t.Fatalf("LoadLocation(%q) returned a location with error %v", name, err)
			}
			return
		}
		if name == "" || name == "Local" {
			t.Fatalf("LoadLocation(%q) was accepted", name)
		}
		if loc == nil || loc.String() != name {
			t.Fatalf("LoadLocation(%q) = %v", name, loc)
		}
		// The zone must be usable.
		_ = time.Date(2026, 3, 8, 2, 30, 0, 0, loc).String()
	})
}
