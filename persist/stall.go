package persist

import "time"

// Stall is a run of commits that keep failing with transient errors (the database down or
// unreachable, a full disk): the writer retries the same batch without end, and nothing it
// holds becomes durable meanwhile. Readiness probes report it (GET /readyz).
type Stall struct {
	// Since is when the first commit of the run failed.
	Since time.Time
	// Attempts is how many commits of the run failed so far.
	Attempts int
	// Err is the last commit's error.
	Err error
}

// stalled records one more failed commit. Only the writer goroutine calls it.
func (w *Writer) stalled(err error) {
	s := Stall{Since: time.Now(), Attempts: 1, Err: err}
	if cur := w.stall.Load(); cur != nil {
		s.Since, s.Attempts = cur.Since, cur.Attempts+1
	}
	w.stall.Store(&s)
}

// Stalled returns the writer's current run of failed commits, or nil while its last commit
// landed (or it has not failed yet). A conflict, a refused fire or a fenced epoch is an
// answer, not a stall.
func (w *Writer) Stalled() *Stall { return w.stall.Load() }

// Stalled returns the longest-running stall among the lanes, or nil when none is stalled.
func (l *Lanes) Stalled() *Stall {
	var worst *Stall
	for _, w := range l.ws {
		if s := w.Stalled(); s != nil && (worst == nil || s.Since.Before(worst.Since)) {
			worst = s
		}
	}
	return worst
}
