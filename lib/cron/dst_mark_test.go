package cron

import (
	"testing"
	"time"
)

// TestDSTMark checks the marks on New York's 2026 transitions: 8 March skips 02:00-03:00,
// 1 November repeats 01:00-02:00.
func TestDSTMark(t *testing.T) {
	ny, err := LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		expr string
		from time.Time
		want []string
	}{
		// 02:30 does not exist on 8 March: that fire moves to 03:00 and is a gap.
		{"30 2 * * *", time.Date(2026, 3, 7, 12, 0, 0, 0, ny), []string{DSTGap, "", ""}},
		// 03:00 exists: the same instant, but not moved.
		{"0 3 * * *", time.Date(2026, 3, 7, 12, 0, 0, 0, ny), []string{"", "", ""}},
		// 01:30 happens twice on 1 November.
		{"30 1 * * *", time.Date(2026, 10, 31, 12, 0, 0, 0, ny), []string{DSTRepeat, "", ""}},
		// A real-time schedule fires in both passes of 01:xx.
		{"0 * * * *", time.Date(2026, 11, 1, 0, 30, 0, 0, ny), []string{DSTRepeat, DSTRepeat, ""}},
	} {
		s, err := Parse(c.expr)
		if err != nil {
			t.Fatal(err)
		}
		at := c.from
		for i, want := range c.want {
			at = s.Next(at, ny)
			if got := DSTMark(s, at, ny); got != want {
				t.Errorf("%s fire %d at %s: mark %q, want %q", c.expr, i, at.Format(time.RFC3339), got, want)
			}
		}
	}
}
