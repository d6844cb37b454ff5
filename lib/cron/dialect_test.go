package cron

import (
	"errors"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestQuartzIssueExamples pins the three expressions that fired on the wrong
// day before the quartz dialect existed.
func TestQuartzIssueExamples(t *testing.T) {
	utc := time.UTC
	after := time.Date(2026, 12, 1, 0, 0, 0, 0, utc) // a Tuesday
	for _, c := range []struct {
		expr string
		want time.Time
	}{
		{"0 0 12 ? * 2", time.Date(2026, 12, 7, 12, 0, 0, 0, utc)},    // Monday
		{"0 0 12 ? * 1#2", time.Date(2026, 12, 13, 12, 0, 0, 0, utc)}, // second Sunday
		{"0 0 12 ? * 6L", time.Date(2026, 12, 25, 12, 0, 0, 0, utc)},  // last Friday
	} {
		s, err := ParseIn(c.expr, DialectQuartz)
		if err != nil {
			t.Fatalf("%q: %v", c.expr, err)
		}
		if got := s.Next(after, utc); !got.Equal(c.want) {
			t.Errorf("%q: next %s (%s), want %s (%s)", c.expr, got, got.Weekday(), c.want, c.want.Weekday())
		}
	}
}

func TestQuartzDialectRules(t *testing.T) {
	utc := time.UTC
	after := time.Date(2026, 12, 1, 0, 0, 0, 0, utc)
	next := func(expr string, d Dialect) time.Time {
		t.Helper()
		s, err := ParseIn(expr, d)
		if err != nil {
			t.Fatalf("%q (%s): %v", expr, d, err)
		}
		return s.Next(after, utc)
	}
	// Reversed ranges wrap in quartz and are refused in unix.
	if got := next("0 0 22-2 * * ?", DialectQuartz); !got.Equal(time.Date(2026, 12, 1, 0, 0, 0, 0, utc).Add(time.Hour)) {
		t.Errorf("22-2 hours: next %s, want 01:00", got)
	}
	if got := next("0 0 8 ? * FRI-MON", DialectQuartz); got.Weekday() != time.Friday {
		t.Errorf("FRI-MON from a Tuesday: next is a %s, want Friday", got.Weekday())
	}
	for _, expr := range []string{"0 0 22-2 * * ?", "0 0 8 ? * FRI-MON"} {
		if _, err := ParseIn(expr, DialectUnix); err == nil || !strings.Contains(err.Error(), "reversed") {
			t.Errorf("%q in unix: error %v, want a reversed range", expr, err)
		}
	}
	// L alone in day-of-week is Saturday in quartz.
	if got := next("0 0 12 ? * L", DialectQuartz); got.Weekday() != time.Saturday {
		t.Errorf("L: next is a %s, want Saturday", got.Weekday())
	}
	// Both day fields set: unix ORs them, quartz refuses; five fields and ?
	// outside the day fields are refused in quartz.
	next("0 0 12 1 * MON", DialectUnix)
	for expr, want := range map[string]string{
		"0 0 12 1 * MON": "both day-of-month",
		"0 0 12 ? * ?":   "only one",
		"0 12 ? * 2":     "6 (sec min",
		"? 0 12 ? * 2":   "second field",
	} {
		_, err := ParseIn(expr, DialectQuartz)
		if !errors.Is(err, ErrInvalidCron) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q in quartz: error %v, want one containing %q", expr, err, want)
		}
	}
	if _, err := ParseIn("* * * * *", "posix"); !errors.Is(err, ErrInvalidDialect) {
		t.Errorf("dialect posix: error %v, want ErrInvalidDialect", err)
	}
	for in, want := range map[string]Dialect{"": DialectUnix, "unix": DialectUnix, "Quartz": DialectQuartz} {
		if d, err := ParseDialect(in); err != nil || d != want {
			t.Errorf("ParseDialect(%q) = %q, %v; want %q", in, d, err, want)
		}
	}
	if _, err := ParseDialect("vixie"); !errors.Is(err, ErrInvalidDialect) {
		t.Errorf("ParseDialect(vixie): %v, want ErrInvalidDialect", err)
	}
}

func TestCheckAmbiguous(t *testing.T) {
	for _, expr := range []string{
		"0 0 12 ? * 2", "0 0 12 ? * 1#2", "0 0 12 ? * 6L", "0 12 L * 1", "0 12 15W * 1-5",
		"0 0 12 ? * MON,3", "0 0 12 ? * 2/2",
	} {
		err := CheckAmbiguous(expr)
		if !errors.Is(err, ErrAmbiguousDay) {
			t.Errorf("%q: %v, want ErrAmbiguousDay", expr, err)
		}
	}
	err := CheckAmbiguous("0 0 12 ? * 2")
	for _, want := range []string{"2 is Tuesday in unix cron but Monday in Quartz", "TUE or MON", "cron_dialect"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("message %v lacks %q", err, want)
		}
	}
	for _, expr := range []string{
		"0 0 12 ? * MON", "0 0 12 ? * FRI#3", "0 0 12 ? * FRIL", "30 9 * * 1-5", "0 0 12 ? * 0",
		"0 0 12 ? * */2", "0 0 12 L * ?", "@weekly", "@every 1h", "0 12 * JUL 1",
	} {
		if err := CheckAmbiguous(expr); err != nil {
			t.Errorf("%q: %v, want no ambiguity", expr, err)
		}
	}
}

// dayNames3 names the days of the week, Sunday first.
var dayNames3 = []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}

// TestDialectsAgreeOnNames: an expression written with day names has the same
// fire times in both dialects, and a numeric Quartz day n is unix day n-1.
func TestDialectsAgreeOnNames(t *testing.T) {
	zones := []*time.Location{time.UTC, mustLoc(t, "America/New_York"), mustLoc(t, "Asia/Kolkata")}
	rapid.Check(t, func(t *rapid.T) {
		// A day-of-week field of 1 to 3 items, each a day or a range, or a
		// single day#k or dayL (Quartz reads those only alone), kept as
		// Quartz numbers (1..7).
		n := rapid.IntRange(1, 3).Draw(t, "items")
		var names, quartz, unix []string
		for range n {
			a := rapid.IntRange(1, 7).Draw(t, "a")
			kinds := 3
			if n > 1 {
				kinds = 1
			}
			switch rapid.IntRange(0, kinds).Draw(t, "kind") {
			case 0:
				names = append(names, dayNames3[a-1])
				quartz = append(quartz, itoa(a))
				unix = append(unix, itoa(a-1))
			case 1:
				b := rapid.IntRange(a, 7).Draw(t, "b")
				names = append(names, dayNames3[a-1]+"-"+dayNames3[b-1])
				quartz = append(quartz, itoa(a)+"-"+itoa(b))
				unix = append(unix, itoa(a-1)+"-"+itoa(b-1))
			case 2:
				k := itoa(rapid.IntRange(1, 5).Draw(t, "k"))
				names = append(names, dayNames3[a-1]+"#"+k)
				quartz = append(quartz, itoa(a)+"#"+k)
				unix = append(unix, itoa(a-1)+"#"+k)
			default:
				names = append(names, dayNames3[a-1]+"L")
				quartz = append(quartz, itoa(a)+"L")
				unix = append(unix, itoa(a-1)+"L")
			}
		}
		sec := rapid.SampledFrom([]string{"0", "30"}).Draw(t, "sec")
		min := rapid.SampledFrom([]string{"0", "15", "*/20"}).Draw(t, "min")
		hour := rapid.SampledFrom([]string{"12", "2", "9-17", "*"}).Draw(t, "hour")
		month := rapid.SampledFrom([]string{"*", "JAN-MAR", "2,11"}).Draw(t, "month")
		head := sec + " " + min + " " + hour + " ? " + month + " "
		byName := head + strings.Join(names, ",")
		byQuartz := head + strings.Join(quartz, ",")
		byUnix := head + strings.Join(unix, ",")
		su, errU := ParseIn(byName, DialectUnix)
		sq, errQ := ParseIn(byName, DialectQuartz)
		sn, errN := ParseIn(byQuartz, DialectQuartz)
		sx, errX := ParseIn(byUnix, DialectUnix)
		if (errU == nil) != (errQ == nil) || (errU == nil) != (errN == nil) || (errU == nil) != (errX == nil) {
			t.Fatalf("acceptance differs: %q unix %v, quartz %v; %q quartz %v; %q unix %v", byName, errU, errQ, byQuartz, errN, byUnix, errX)
		}
		if errU != nil {
			return // e.g. a fifth Monday in February only: never fires
		}
		loc := rapid.SampledFrom(zones).Draw(t, "zone")
		after := time.Unix(rapid.Int64Range(1767225600, 1893456000).Draw(t, "after"), 0)
		a, b, c, d := after, after, after, after
		for i := range 5 {
			a, b, c, d = su.Next(a, loc), sq.Next(b, loc), sn.Next(c, loc), sx.Next(d, loc)
			if !a.Equal(b) || !a.Equal(c) || !a.Equal(d) {
				t.Fatalf("fire %d after %s in %s: %q unix %s, quartz %s; %q quartz %s; %q unix %s",
					i+1, after, loc, byName, a, b, byQuartz, c, byUnix, d)
			}
			if a.IsZero() {
				break
			}
		}
	})
}

func itoa(n int) string { return string(rune('0' + n)) }

func TestEveryFrom(t *testing.T) {
	s, err := Parse("@every 90s from 2026-12-01T08:00:05Z")
	if err != nil {
		t.Fatal(err)
	}
	anchor := time.Date(2026, 12, 1, 8, 0, 5, 0, time.UTC)
	for _, c := range []struct{ after, want time.Time }{
		{anchor.Add(-time.Second), anchor},
		{anchor, anchor.Add(90 * time.Second)},
		{anchor.Add(1000 * time.Second), anchor.Add(1080 * time.Second)},
		{anchor.Add(-1000 * time.Second), anchor.Add(-990 * time.Second)}, // the phase holds before the anchor too
	} {
		if got := s.Next(c.after, time.UTC); !got.Equal(c.want) {
			t.Errorf("Next(%s) = %s, want %s", c.after, got, c.want)
		}
	}
	for _, expr := range []string{"@every 90s from tomorrow", "@every 90s since 2026-12-01T08:00:05Z", "@every 90s from 2026-12-01T08:00:05.5Z"} {
		if _, err := Parse(expr); !errors.Is(err, ErrInvalidCron) {
			t.Errorf("%q: %v, want ErrInvalidCron", expr, err)
		}
	}
}

// TestUnixSundayRange: SUN-SUN (0-0) is Sunday alone. It once stretched to
// 0-7, every day, through the SAT-SUN rule.
func TestUnixSundayRange(t *testing.T) {
	after := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC) // a Tuesday
	for _, expr := range []string{"0 0 12 ? * SUN-SUN", "0 12 * * 0-0", "0 12 * * 7-7"} {
		s, err := Parse(expr)
		if err != nil {
			t.Fatalf("%q: %v", expr, err)
		}
		if got := s.Next(after, time.UTC); got.Weekday() != time.Sunday {
			t.Errorf("%q: next is a %s, want Sunday", expr, got.Weekday())
		}
	}
}
