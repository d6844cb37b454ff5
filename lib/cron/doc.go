// Package cron parses axe's schedule expressions and time-zone names and
// computes when a schedule fires next.
//
// It owns the meaning of a cron expression: which strings are valid, which
// instants they fire at, and how daylight-saving transitions are treated. It is
// a set of pure functions of its inputs: it must not touch storage, the timing
// wheel or any clock. Callers pass the instant to search from and the zone to
// evaluate in, so two schedulers given the same inputs compute the same
// instants.
//
// # Syntax
//
// Fields are separated by spaces or tabs and are case-insensitive.
//
//	5 fields:  min hour dom month dow            (second 0, any year)
//	6 fields:  sec min hour dom month dow        (any year)
//	7 fields:  sec min hour dom month dow year
//
// Ranges: second 0-59, minute 0-59, hour 0-23, day-of-month 1-31, month 1-12
// or JAN-DEC (also full names), day-of-week 0-7 or SUN-SAT (0 and 7 are both
// Sunday, the Unix numbering, not Quartz's 1=SUN; prefer names), year
// 1970-2099. (The quartz dialect numbers days of the week differently; see
// Dialects.) Each field is a comma list of items:
//
//	every value   * or ?             (? is Quartz's "no specific value"; it is
//	                                  accepted in any field and means *)
//	one value     5 or MON
//	a range       1-5                (inclusive; the start must not exceed the
//	                                  end, so wrap-arounds like FRI-MON are
//	                                  rejected, but SAT-SUN is Saturday and Sunday)
//	a step        */15  5/15  1-30/5 (every n-th value from the start of the range)
//
// Day-of-month also takes L (last day), L-3 (three days before the last day,
// n from 1 to 30), LW (last weekday of the month) and 15W (the weekday nearest
// the 15th, never crossing into another month). Day-of-week also takes 5L
// (the last Friday of the month) and FRI#3 (the third Friday, 1 to 5).
// The two day fields combine as in Vixie cron and cronie (checked against
// cronie's own code: testdata/cronie): when either field starts with * or ?,
// a day must match both; otherwise it must match either. So "0 12 1,15 * MON"
// fires on the 1st, the 15th and every Monday, "0 12 * * MON" on Mondays, and
// "0 12 */2 * MON" only on odd-numbered days that are Mondays (write
// "1-31/2" for odd days or Mondays). A * later in a list ("5,*") covers the
// whole field without making it start with *.
//
// Descriptors, with the six-field expression each stands for:
//
//	@yearly, @annually   0 0 0 1 1 ?
//	@monthly             0 0 0 1 * ?
//	@weekly              0 0 0 ? * SUN
//	@daily, @midnight    0 0 0 * * ?
//	@hourly              0 0 * * * ?
//	@every DURATION      see below
//
// Parse rejects, with ErrInvalidCron and a message naming the problem: an
// empty expression, a wrong number of fields, values out of range, unknown
// tokens, reversed ranges, zero steps, and expressions that can never fire
// (for example 0 0 0 30 2 ?, February 30th). Because years stop at 2099, Next
// returns the zero time once a schedule has no fire time left in that range.
//
// # Dialects
//
// Parse reads the unix dialect described above. ParseIn also reads the
// quartz dialect, Quartz 2.3's CronExpression as Quartz and XXL-JOB use it
// (checked against Quartz's own output: testdata/quartz). It differs in
// exactly these ways:
//   - day of week 1 is SUN and 7 is SAT (0 is out of range); L alone in
//     day-of-week is SAT; 6L is the last Friday and 1#2 the second Sunday;
//   - a reversed range wraps: 22-2 in hours is 22, 23, 0, 1, 2, FRI-MON is
//     Friday to Monday, 28-3 in day-of-month runs over the month's end
//     (years do not wrap);
//   - a step after a day or month name is ignored, as Quartz ignores it:
//     MON-FRI/2 is Monday to Friday, JAN/3 is January; a range of a name and
//     a number (MON-5, 2-FRI) is refused, as Quartz refuses it, and so is
//     anything else after a name (MONXYZ, MONDAY-FRIDAY), which Quartz
//     silently drops;
//   - L, LW, L-n and nW stand alone in day-of-month, and nL, L and n#k alone
//     in day-of-week: Quartz keeps one such flag per expression, so it
//     refuses or misreads them in a list;
//   - exactly one of day-of-month and day-of-week must be ?, and ? is
//     refused in other fields;
//   - the seconds field is required: 6 or 7 fields.
//
// Day names, and everything else, mean the same in both, including the
// daylight-saving rule below (Quartz itself skips a wall time inside a
// spring-forward gap and fires a repeated one at its second occurrence).
// CheckAmbiguous finds expressions a caller should not guess at: a numeric
// day of week in an expression with syntax only Quartz has.
//
// # @every
//
// @every DURATION takes a Go duration (30s, 1h30m) that is a whole number of
// seconds and at least one second. It fires at every instant that is a whole
// multiple of the duration counted from the Unix epoch (1970-01-01T00:00:00Z),
// not from when the task was created or last ran. So "@every 1h" fires on the
// hour in UTC, and every scheduler process computes the same instants without
// sharing any state. It is absolute time: the zone and daylight saving do not
// affect it.
//
// "@every DURATION from TIME" (TIME in RFC 3339, on a whole second) moves
// the phase: it fires at every instant a whole number of periods away from
// TIME, before or after it. "@every 90s from 2026-12-01T08:00:05Z" fires at
// 08:00:05, 08:01:35, ... It carries a fixed-rate schedule over from a
// scheduler that counts from its last fire.
//
// # Daylight saving
//
// An expression is evaluated in one of two ways, chosen by its hour field.
//
// Fixed wall-clock times (the hour field does not cover all 24 hours, e.g.
// "0 30 2 * * ?"): the expression names wall-clock times and each one fires
// once per day it matches.
//   - A wall time that does not exist because clocks spring forward (02:30 on
//     2026-03-08 in America/New_York) fires once at the instant the gap ends
//     (03:00 EDT) instead of being skipped. Several matches inside one gap
//     collapse into that single firing.
//   - A wall time that occurs twice because clocks fall back (01:30 on
//     2026-11-01 in America/New_York) fires once, at its first occurrence
//     (01:30 EDT).
//
// Every hour or more often (the hour field covers all 24 hours: *, ?, */1,
// 0-23): the expression is a pattern over real time. An instant fires if its
// local wall clock matches. When clocks fall back the repeated hour fires
// twice ("0 */30 * * * *" fires at 01:00 EDT, 01:30 EDT, 01:00 EST and
// 01:30 EST); when they spring forward the missing instants simply do not
// exist.
//
// In both cases Next returns an instant strictly after the one it was given,
// so successive calls are strictly increasing.
package cron
