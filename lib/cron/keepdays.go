package cron

import (
	"fmt"
	"strings"
	"time"
)

// KeepDays serves the upgrade of tasks stored before the unix dialect combined its day fields
// as cron does. Before, axe matched a day when either field matched whenever both were
// restricted, so "0 12 */2 * MON" fired on odd-numbered days and on Mondays; cron, and axe
// now, match both fields when either starts with * (odd days that are Mondays). A stored
// task must not change when it fires because axe was upgraded, so the schema step that
// brings in the new rule rewrites such expressions to a spelling both rules read alike: the
// leading * of a day field's element becomes the field's whole range ("1-31/2", "0-6/2").
//
// KeepDays returns expr unchanged, with changed false, when the two rules already read it
// alike (most expressions: a plain * in either field, or no * at all). Otherwise it returns
// the rewritten expression, after checking that it fires on exactly the days expr fired on
// under the old rule. An error means expr is not a valid unix expression, or no rewrite keeps
// its days; the caller must then not leave the task to fire on other days unnoticed.
func KeepDays(expr string) (out string, changed bool, err error) {
	now, err := ParseIn(expr, DialectUnix)
	if err != nil {
		return "", false, err
	}
	if !starInDayField(expr) {
		return expr, false, nil
	}
	before, err := parseOldDays(expr)
	if err != nil || before == nil {
		// A descriptor, or a shape the old parser refused: nothing was stored that reads
		// differently.
		return expr, false, nil
	}
	if sameDays(before, now) {
		return expr, false, nil
	}
	f := strings.Fields(expr)
	dom, dow := 2, 4
	if len(f) > 5 {
		dom, dow = 3, 5
	}
	f[dom] = spellOut(f[dom], "1-31")
	f[dow] = spellOut(f[dow], "0-6")
	out = strings.Join(f, " ")
	again, err := ParseIn(out, DialectUnix)
	if err != nil {
		return "", false, fmt.Errorf("cannot keep the days of %q: its rewrite %q is refused: %w", expr, out, err)
	}
	if !sameDays(before, again) {
		return "", false, fmt.Errorf("cannot keep the days of %q: no spelling fires on the same days under cron's day rule", expr)
	}
	return out, true, nil
}

// starInDayField reports whether a day field of expr holds a * or a ? (which the unix
// dialect reads as *) and is not that alone ("*/2", "5,*", "10,?"): the only fields the two
// day rules read differently. It is cheap, so an upgrade over many tasks compares fire days
// only where they can differ.
func starInDayField(expr string) bool {
	f := strings.Fields(expr)
	var days []string
	switch len(f) {
	case 5:
		days = []string{f[2], f[4]}
	case 6, 7:
		days = []string{f[3], f[5]}
	default:
		return false
	}
	for _, d := range days {
		if d != "*" && d != "?" && strings.ContainsAny(d, "*?") {
			return true
		}
	}
	return false
}

// parseOldDays parses expr as the unix dialect did before it applied cron's day rule, or
// returns nil for a descriptor (whose day fields never combine).
func parseOldDays(expr string) (Schedule, error) {
	s := strings.ToLower(strings.TrimSpace(expr))
	if strings.HasPrefix(s, "@") {
		return nil, nil
	}
	f := strings.Fields(s)
	fields, ok := sevenFields(f)
	if !ok {
		return nil, fmt.Errorf("%w %q: has %d fields", ErrInvalidCron, expr, len(f))
	}
	return compile(expr, fields, &fieldSpecs, false)
}

// spellOut replaces a leading * of each element of a day field's list with the field's
// range: "*/2" becomes "1-31/2", "*/3,15" becomes "1-31/3,15". A field with a bare * among
// its elements ("5,*", or "5,?": the unix dialect reads ? as *) becomes a plain *: the old
// rule read such a field as unrestricted, leaving the other field to decide, which is what a
// plain * means under both rules.
func spellOut(field, whole string) string {
	parts := strings.Split(field, ",")
	for i, p := range parts {
		if p == "*" || p == "?" {
			return "*"
		}
		if strings.HasPrefix(p, "*/") {
			parts[i] = whole + p[1:]
		}
	}
	return strings.Join(parts, ",")
}

// sameDays reports whether a and b fire on the same days, at the same first time of day, on
// every day of four years (a leap year and every weekday on every date included) from the
// start of 2027, in UTC. The day fields are all that differ between the two rules, and a
// day-of-month and day-of-week pair repeats within that span.
func sameDays(a, b Schedule) bool {
	day := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	for range 4*365 + 1 {
		from := day.Add(-time.Nanosecond)
		na, nb := a.Next(from, time.UTC), b.Next(from, time.UTC)
		if !na.Equal(nb) {
			return false
		}
		if na.IsZero() {
			return true
		}
		// Go on from the day after the fire found, skipping days neither fires on.
		next := time.Date(na.Year(), na.Month(), na.Day()+1, 0, 0, 0, 0, time.UTC)
		if next.After(day) {
			day = next
		} else {
			day = day.AddDate(0, 0, 1)
		}
		if day.Year() >= 2031 {
			return true
		}
	}
	return true
}
