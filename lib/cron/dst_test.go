package cron

import (
	"testing"
)

// The 2026 transitions these tests cross:
//
//	America/New_York  2026-03-08 02:00 EST -> 03:00 EDT (07:00Z)
//	                  2026-11-01 02:00 EDT -> 01:00 EST (06:00Z)
//	Europe/Berlin     2026-03-29 02:00 CET  -> 03:00 CEST (01:00Z)
//	                  2026-10-25 03:00 CEST -> 02:00 CET  (01:00Z)
func TestDST(t *testing.T) {
	tests := []struct {
		name  string
		zone  string
		expr  string
		after string
		want  []string
	}{
		// Fixed wall-clock times, spring forward: the missing time fires
		// once, when the gap ends.
		{"ny gap fires at gap end", "America/New_York", "0 30 2 * * ?", "2026-03-07T12:00:00-05:00",
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"}},
		{"ny gap from just before", "America/New_York", "0 30 2 * * ?", "2026-03-08T01:59:59-05:00",
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"}},
		{"ny several matches in gap collapse", "America/New_York", "0 */15 2 * * ?", "2026-03-08T00:00:00-05:00",
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00", "2026-03-09T02:15:00-04:00"}},
		{"ny gap and 03:00 coincide", "America/New_York", "0 0 0-22 * * ?", "2026-03-08T00:30:00-05:00",
			[]string{"2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"}},
		{"ny 03:00 itself", "America/New_York", "0 0 3 * * ?", "2026-03-07T12:00:00-05:00",
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T03:00:00-04:00"}},
		{"ny daily midnight unaffected", "America/New_York", "@daily", "2026-03-07T12:00:00-05:00",
			[]string{"2026-03-08T00:00:00-05:00", "2026-03-09T00:00:00-04:00"}},

		// Fixed wall-clock times, fall back: the repeated time fires once, at
		// its first occurrence.
		{"ny repeated time first occurrence", "America/New_York", "0 30 1 * * ?", "2026-10-31T12:00:00-04:00",
			[]string{"2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"}},
		{"ny from inside first pass", "America/New_York", "0 30 1 * * ?", "2026-11-01T01:10:00-04:00",
			[]string{"2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"}},
		{"ny from inside second pass", "America/New_York", "0 30 1 * * ?", "2026-11-01T01:10:00-05:00",
			[]string{"2026-11-02T01:30:00-05:00"}},
		{"ny second pass then later hour", "America/New_York", "0 0,45 1,2 * * ?", "2026-11-01T01:50:00-05:00",
			[]string{"2026-11-01T02:00:00-05:00", "2026-11-01T02:45:00-05:00", "2026-11-02T01:00:00-05:00"}},
		{"ny every second of hour 1", "America/New_York", "* * 1 * * ?", "2026-11-01T01:59:58-04:00",
			[]string{"2026-11-01T01:59:59-04:00", "2026-11-02T01:00:00-05:00"}},
		{"ny 23 hours skip the repeat", "America/New_York", "0 0 0-22 * * ?", "2026-11-01T00:30:00-04:00",
			[]string{"2026-11-01T01:00:00-04:00", "2026-11-01T02:00:00-05:00", "2026-11-01T03:00:00-05:00"}},

		// Every hour or more often: real time. The repeated hour fires twice,
		// the missing hour does not exist.
		{"ny half-hourly fall back", "America/New_York", "0 */30 * * * *", "2026-11-01T00:45:00-04:00",
			[]string{"2026-11-01T01:00:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T01:30:00-05:00", "2026-11-01T02:00:00-05:00"}},
		{"ny half-hourly spring forward", "America/New_York", "0 */30 * * * *", "2026-03-08T01:15:00-05:00",
			[]string{"2026-03-08T01:30:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T03:30:00-04:00"}},
		{"ny hourly spring forward", "America/New_York", "@hourly", "2026-03-08T00:30:00-05:00",
			[]string{"2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"}},
		{"ny hourly fall back", "America/New_York", "@hourly", "2026-11-01T00:30:00-04:00",
			[]string{"2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"}},
		{"ny */1 hours is real time", "America/New_York", "0 15 */1 * * ?", "2026-11-01T00:30:00-04:00",
			[]string{"2026-11-01T01:15:00-04:00", "2026-11-01T01:15:00-05:00", "2026-11-01T02:15:00-05:00"}},
		{"ny 0-23 is real time", "America/New_York", "0 15 0-23 * * ?", "2026-11-01T00:30:00-04:00",
			[]string{"2026-11-01T01:15:00-04:00", "2026-11-01T01:15:00-05:00"}},
		{"ny from inside second pass real time", "America/New_York", "0 40 * * * ?", "2026-11-01T01:50:00-04:00",
			[]string{"2026-11-01T01:40:00-05:00", "2026-11-01T02:40:00-05:00"}},
		{"ny every minute across spring forward", "America/New_York", "0 * * * * ?", "2026-03-08T01:58:30-05:00",
			[]string{"2026-03-08T01:59:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T03:01:00-04:00"}},
		{"ny every minute across fall back", "America/New_York", "0 * * * * ?", "2026-11-01T01:58:30-04:00",
			[]string{"2026-11-01T01:59:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T01:01:00-05:00"}},

		// @every ignores the zone: hourly instants stay an hour apart.
		{"ny every hour", "America/New_York", "@every 1h", "2026-03-08T00:30:00-05:00",
			[]string{"2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"}},
		{"ny every 90m fall back", "America/New_York", "@every 90m", "2026-11-01T05:00:00Z",
			[]string{"2026-11-01T06:00:00Z", "2026-11-01T07:30:00Z"}},

		// Europe/Berlin.
		{"berlin gap fires at gap end", "Europe/Berlin", "0 30 2 * * ?", "2026-03-28T12:00:00+01:00",
			[]string{"2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"}},
		{"berlin repeated time first occurrence", "Europe/Berlin", "0 30 2 * * ?", "2026-10-24T12:00:00+02:00",
			[]string{"2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"}},
		{"berlin weekday morning", "Europe/Berlin", "0 0 9 ? * MON-FRI", "2026-03-27T12:00:00+01:00",
			[]string{"2026-03-30T09:00:00+02:00", "2026-03-31T09:00:00+02:00"}},
		{"berlin half-hourly fall back", "Europe/Berlin", "0 */30 * * * *", "2026-10-25T01:45:00+02:00",
			[]string{"2026-10-25T02:00:00+02:00", "2026-10-25T02:30:00+02:00", "2026-10-25T02:00:00+01:00", "2026-10-25T02:30:00+01:00", "2026-10-25T03:00:00+01:00"}},
		{"berlin half-hourly spring forward", "Europe/Berlin", "0 */30 * * * *", "2026-03-29T01:15:00+01:00",
			[]string{"2026-03-29T01:30:00+01:00", "2026-03-29T03:00:00+02:00"}},
		{"berlin last day of month spans change", "Europe/Berlin", "0 0 12 L * ?", "2026-03-01T00:00:00+01:00",
			[]string{"2026-03-31T12:00:00+02:00", "2026-04-30T12:00:00+02:00"}},

		// A 30-minute DST shift: 02:15 is missing on 2026-10-04.
		{"lord howe half-hour gap", "Australia/Lord_Howe", "0 15 2 * * ?", "2026-10-03T12:00:00+10:30",
			[]string{"2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"}},
		{"lord howe half-hour repeat", "Australia/Lord_Howe", "0 45 1 * * ?", "2026-04-04T12:00:00+11:00",
			[]string{"2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"}},
		{"lord howe real time repeat", "Australia/Lord_Howe", "0 45 * * * ?", "2026-04-05T01:00:00+11:00",
			[]string{"2026-04-05T01:45:00+11:00", "2026-04-05T01:45:00+10:30", "2026-04-05T02:45:00+10:30"}},

		// Beyond the tz tables, including 31 December of a leap year where
		// time.ZoneBounds misreports the period end (see zoneEnd).
		{"ny 2090 gap", "America/New_York", "0 30 2 * * ?", "2090-03-11T12:00:00-05:00",
			[]string{"2090-03-12T03:00:00-04:00", "2090-03-13T02:30:00-04:00"}},
		{"ny 2090 repeat real time", "America/New_York", "0 30 * * * ?", "2090-11-05T00:45:00-04:00",
			[]string{"2090-11-05T01:30:00-04:00", "2090-11-05T01:30:00-05:00", "2090-11-05T02:30:00-05:00"}},
		{"ny hourly on leap new year's eve", "America/New_York", "0 0 * * * ?", "2040-12-31T05:30:00-05:00",
			[]string{"2040-12-31T06:00:00-05:00", "2040-12-31T07:00:00-05:00"}},
		{"ny far new year real time", "America/New_York", "0 0 * 1 1 * 2091/1", "2026-03-08T01:59:59-05:00",
			[]string{"2091-01-01T00:00:00-05:00", "2091-01-01T01:00:00-05:00"}},

		// Samoa skipped 2011-12-30 entirely (UTC-10 to UTC+14).
		{"apia skipped day", "Pacific/Apia", "0 0 12 * * ?", "2011-12-29T13:00:00-10:00",
			[]string{"2011-12-31T00:00:00+14:00", "2011-12-31T12:00:00+14:00"}},
		{"apia skipped day real time", "Pacific/Apia", "0 0 * * * ?", "2011-12-29T22:30:00-10:00",
			[]string{"2011-12-29T23:00:00-10:00", "2011-12-31T00:00:00+14:00", "2011-12-31T01:00:00+14:00"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkFires(t, tt.expr, mustLoc(t, tt.zone), mustTime(t, tt.after), tt.want)
		})
	}
}
