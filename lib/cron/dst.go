package cron

import "time"

// The DST marks of DSTMark.
const (
	// DSTGap marks a fire moved to the end of a spring-forward gap: the wall time the
	// expression names did not exist that day.
	DSTGap = "gap"
	// DSTRepeat marks a fire whose wall-clock reading occurs twice that day (a fall-back
	// hour): the reading alone does not say which instant is meant.
	DSTRepeat = "repeat"
)

// DSTMark says whether the fire t of s in loc was moved by a spring-forward gap (DSTGap),
// falls in a wall-clock hour that repeats (DSTRepeat), or neither (""). It is for previews:
// the instant itself is always Next's.
func DSTMark(s Schedule, t time.Time, loc *time.Location) string {
	if loc == nil {
		return ""
	}
	t = t.In(loc)
	_, off := t.Zone()
	start, _ := t.ZoneBounds()
	end := zoneEnd(t)
	// A repeat: the same reading exists in the neighbouring period, because the offset
	// falls by d there and t is within d of the transition.
	if !end.IsZero() {
		if _, next := end.Zone(); next < off && end.Sub(t) <= time.Duration(off-next)*time.Second {
			return DSTRepeat
		}
	}
	if !start.IsZero() {
		if _, prev := start.Add(-time.Nanosecond).Zone(); prev > off && t.Sub(start) < time.Duration(prev-off)*time.Second {
			return DSTRepeat
		}
	}
	// A gap: t is the first instant after a forward jump of d, and the schedule matches a
	// wall time in the d skipped before it. Only wall-clock schedules move fires there;
	// real-time ones (every hour) and @every simply have no fire in the gap.
	cs, ok := s.(*cronSchedule)
	if !ok || cs.realTime || start.IsZero() || !t.Equal(start) {
		return ""
	}
	_, prev := start.Add(-time.Nanosecond).Zone()
	if prev >= off {
		return ""
	}
	wall := toWall(t, off)
	skipped := wall.Add(-time.Duration(off-prev) * time.Second)
	if c := cs.nextWall(skipped.Add(-time.Nanosecond)); !c.IsZero() && c.Before(wall) {
		return DSTGap
	}
	return ""
}
