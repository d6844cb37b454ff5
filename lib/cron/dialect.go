package cron

import (
	"fmt"
	"strings"
)

// Dialect says how an expression numbers the days of the week and reads the
// few forms on which Unix cron and Quartz disagree. Everything else (fields,
// names, steps, L, W, #, descriptors, time zones and the daylight-saving
// rule) is the same in both.
type Dialect string

const (
	// DialectUnix is Unix cron's reading: day of week 0 and 7 are Sunday, a
	// reversed range is an error, and the day fields combine as cron
	// combines them (both must match when either starts with *, else either;
	// see the package documentation). It is the default.
	DialectUnix Dialect = "unix"
	// DialectQuartz is Quartz's (and XXL-JOB's) reading, as Quartz 2.3's
	// CronExpression has it: day of week 1 is Sunday and 7 Saturday, L alone
	// in day-of-week is Saturday, a reversed range wraps (22-2 in hours is
	// 22, 23, 0, 1, 2; FRI-MON is Friday to Monday), ? is allowed only in the
	// day fields, exactly one of which must be ?, and the seconds field is
	// required (6 or 7 fields).
	DialectQuartz Dialect = "quartz"
	// DialectDefault is the dialect of a task that names none, on a server
	// not told otherwise.
	DialectDefault = DialectUnix
)

// ParseDialect checks a dialect name; "" is DialectDefault. Errors wrap
// ErrInvalidDialect.
func ParseDialect(name string) (Dialect, error) {
	switch d := Dialect(strings.ToLower(strings.TrimSpace(name))); d {
	case "":
		return DialectDefault, nil
	case DialectUnix, DialectQuartz:
		return d, nil
	}
	return "", fmt.Errorf("%w %q (want %q or %q)", ErrInvalidDialect, name, DialectUnix, DialectQuartz)
}

// quartzShape checks the rules of the quartz dialect that concern whole
// fields rather than values: the field count, where ? may stand and that
// exactly one day field is ?. f holds the lower-cased fields.
func quartzShape(expr string, f []string) error {
	if len(f) != 6 && len(f) != 7 {
		return fmt.Errorf("%w %q: has %d fields; the quartz dialect wants 6 (sec min hour dom month dow) or 7 (year last); a 5-field expression is unix cron", ErrInvalidCron, expr, len(f))
	}
	for i, v := range f {
		if i != 3 && i != 5 && hasItem(v, "?") {
			return fmt.Errorf("%w %q: in the quartz dialect ? stands only in day-of-month or day-of-week, not in the %s field", ErrInvalidCron, expr, fieldSpecs[i].name)
		}
	}
	// Quartz keeps one L, W and # flag per expression rather than per item, so
	// it refuses most of them in a list, and reads the rest oddly (2#1,6 fires
	// on the first Monday alone; 15W,20 on the weekday nearest the 15th
	// alone): the dialect refuses each such list.
	if items := strings.Split(f[3], ","); len(items) > 1 {
		for _, it := range items {
			if strings.HasPrefix(it, "l") || strings.HasSuffix(it, "w") {
				return fmt.Errorf("%w %q: in the quartz dialect %s stands alone in day-of-month, as Quartz reads only one L or W there; write one expression per item", ErrInvalidCron, expr, strings.ToUpper(it))
			}
		}
	}
	if items := strings.Split(f[5], ","); len(items) > 1 {
		for _, it := range items {
			if strings.Contains(it, "#") || strings.HasSuffix(it, "l") {
				return fmt.Errorf("%w %q: in the quartz dialect %s stands alone in day-of-week, as Quartz reads only one L or # there; write one expression per item", ErrInvalidCron, expr, strings.ToUpper(it))
			}
		}
	}
	domNone, dowNone := hasItem(f[3], "?"), hasItem(f[5], "?")
	switch {
	case !domNone && !dowNone:
		return fmt.Errorf("%w %q: the quartz dialect refuses both day-of-month (%s) and day-of-week (%s) set, as Quartz does; write ? in the one that should not restrict", ErrInvalidCron, expr, f[3], f[5])
	case domNone && dowNone:
		return fmt.Errorf("%w %q: the quartz dialect wants ? in only one of day-of-month and day-of-week; write * in the other", ErrInvalidCron, expr)
	}
	return nil
}

// hasItem reports whether the comma list field holds item.
func hasItem(field, item string) bool {
	for it := range strings.SplitSeq(field, ",") {
		if it == item {
			return true
		}
	}
	return false
}

// unixDayNames and quartzDayNames name the days of the week by number.
var (
	unixDayNames   = [...]string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}
	quartzDayNames = [...]string{"", "Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
)

// CheckAmbiguous reports, wrapping ErrAmbiguousDay, an expression that reads
// differently in the two dialects and gives no hint which one was meant: a
// numeric day of week (1 to 7) in an expression that also uses syntax only
// Quartz has (?, L, W or #). Someone who writes "0 0 12 ? * 2" most likely
// copied it from Quartz or XXL-JOB, where 2 is Monday, but unix cron reads
// Tuesday. Day names (MON, FRI#3) are never ambiguous; nor is 0, which only
// unix cron has. It says nothing about validity: Parse does that.
//
// Callers apply it only when no dialect was chosen, neither on the task nor
// on the server.
func CheckAmbiguous(expr string) error {
	s := strings.ToLower(strings.TrimSpace(expr))
	if s == "" || strings.HasPrefix(s, "@") {
		return nil
	}
	f := strings.Fields(s)
	var dom, dow string
	switch len(f) {
	case 5:
		dom, dow = f[2], f[4]
	case 6, 7:
		dom, dow = f[3], f[5]
	default:
		return nil
	}
	day, ok := numericDay(dow)
	if !ok || !quartzOnly(f, dom, dow) {
		return nil
	}
	return fmt.Errorf("%w in %q: %d is %s in unix cron but %s in Quartz; write the day name (%s or %s) or set the cron dialect (\"cron_dialect\": \"unix\" or \"quartz\")",
		ErrAmbiguousDay, expr, day, unixDayNames[day], quartzDayNames[day],
		strings.ToUpper(unixDayNames[day][:3]), strings.ToUpper(quartzDayNames[day][:3]))
}

// numericDay returns the first day of week written as a number 1 to 7 in a
// day-of-week field: a value or a range end, not a step nor the week of #.
func numericDay(dow string) (int, bool) {
	for item := range strings.SplitSeq(dow, ",") {
		item, _, _ = strings.Cut(item, "#")
		item, _, _ = strings.Cut(item, "/")
		item = strings.TrimSuffix(item, "l")
		for part := range strings.SplitSeq(item, "-") {
			if n, ok := smallInt(part); ok && n >= 1 && n <= 7 {
				return n, true
			}
		}
	}
	return 0, false
}

// quartzOnly reports whether an expression uses syntax that unix cron does
// not have: ? in any field, L or W in day-of-month, L or # in day-of-week.
func quartzOnly(fields []string, dom, dow string) bool {
	for _, f := range fields {
		if hasItem(f, "?") {
			return true
		}
	}
	for item := range strings.SplitSeq(dom, ",") {
		if strings.HasPrefix(item, "l") || strings.HasSuffix(item, "w") {
			return true
		}
	}
	for item := range strings.SplitSeq(dow, ",") {
		if strings.Contains(item, "#") || strings.HasSuffix(item, "l") {
			return true
		}
	}
	return false
}
