package wire

// CronFire is one fire of GET /api/v1/cron/next: the instant in the zone, its UTC offset
// ("+02:00") and its DST mark ("gap", "repeat" or null).
type CronFire struct {
	At     string  `json:"at"`
	Offset string  `json:"offset"`
	DST    *string `json:"dst"`
	// FireAt and JitterMS are set when the preview asked for jitter_sec: the instant the
	// fire leaves (at plus its jitter) and the jitter (docs/design.md, Jitter).
	FireAt   string `json:"fire_at,omitempty"`
	JitterMS *int64 `json:"jitter_ms,omitempty"`
}
