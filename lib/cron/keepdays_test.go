package cron

import (
	"strings"
	"testing"
	"time"
)

func TestKeepDays(t *testing.T) {
	for _, tc := range []struct {
		expr, want string // want "" means unchanged
	}{
		{"0 12 */2 * MON", "0 12 1-31/2 * MON"},
		{"0 12 1 * */2", "0 12 1 * 0-6/2"},
		{"0 12 */2 * */3", "0 12 1-31/2 * 0-6/3"},
		{"0 0 12 */3,15 * FRI", "0 0 12 1-31/3,15 * FRI"},
		{"0 0 12 */3 * FRI 2027-2030", "0 0 12 1-31/3 * FRI 2027-2030"},
		{"30 4 */10 * 1-5", "30 4 1-31/10 * 1-5"},
		// A * among a list's elements made the old rule read the field as unrestricted:
		// January 2027's Mondays, and the 5th of each month, as before.
		{"0 12 5,* * MON", "0 12 * * MON"},
		{"5 10 10,? * MON,FRI", "5 10 * * MON,FRI"},       // found by FuzzParse
		{"5 10 10,? 1-12 MON,FRI", "5 10 * 1-12 MON,FRI"}, // a ? with no * anywhere
		{"0 12 5 * 1,*", "0 12 5 * *"},
		// The two rules read these alike.
		{"0 12 * * MON", ""},
		{"0 12 1,15 * MON", ""},
		{"0 12 */2 * *", ""},
		{"0 12 * * */2", ""},
		{"*/5 * * * *", ""},
		{"0 12 1-31/2 * MON", ""},
		{"0 12 ? * MON", ""},
		{"@daily", ""},
		{"@every 90s", ""},
	} {
		got, changed, err := KeepDays(tc.expr)
		if err != nil {
			t.Errorf("KeepDays(%q): %v", tc.expr, err)
			continue
		}
		want := tc.want
		if want == "" {
			want = tc.expr
		}
		if got != want || changed != (tc.want != "") {
			t.Errorf("KeepDays(%q) = %q, %v; want %q, %v", tc.expr, got, changed, want, tc.want != "")
		}
		// Whatever it returns keeps its meaning under today's rule when asked again.
		again, changedAgain, err := KeepDays(got)
		if err != nil || changedAgain || again != got {
			t.Errorf("KeepDays(%q) = %q, %v, %v; a rewrite must be a fixed point", got, again, changedAgain, err)
		}
	}
	if _, _, err := KeepDays("0 12 32 * MON"); err == nil {
		t.Error("KeepDays accepted a day of month 32")
	}
}

// TestKeepDaysFires checks one rewrite against days worked out by hand: before the upgrade,
// "0 12 */2 * MON" fired on every odd-numbered day and on every Monday. January 2027 starts on
// a Friday, so its Mondays are the 4th, 11th, 18th and 25th.
func TestKeepDaysFires(t *testing.T) {
	out, _, err := KeepDays("0 12 */2 * MON")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	at := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	for range 16 {
		at = s.Next(at, time.UTC)
		got = append(got, at.Format("Jan 2 15:04"))
	}
	want := "Jan 1 12:00,Jan 3 12:00,Jan 4 12:00,Jan 5 12:00,Jan 7 12:00,Jan 9 12:00,Jan 11 12:00," +
		"Jan 13 12:00,Jan 15 12:00,Jan 17 12:00,Jan 18 12:00,Jan 19 12:00,Jan 21 12:00,Jan 23 12:00," +
		"Jan 25 12:00,Jan 27 12:00"
	if strings.Join(got, ",") != want {
		t.Errorf("%q fires\n%s\nwant\n%s", out, strings.Join(got, ","), want)
	}
	// And the expression as stored now means what cron means: odd days that are Mondays
	// (January 11 and 25, 2027).
	now, _ := Parse("0 12 */2 * MON")
	first := now.Next(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), time.UTC)
	second := now.Next(first, time.UTC)
	if first.Format("Jan 2") != "Jan 11" || second.Format("Jan 2") != "Jan 25" {
		t.Errorf("0 12 */2 * MON fires %s, %s; want Jan 11, Jan 25", first.Format("Jan 2"), second.Format("Jan 2"))
	}
}
