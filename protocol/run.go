package protocol

import (
	"bytes"
	"encoding/json"
)

// runWire is a Run as it is read: the required fields whose zero value is valid in a Run are
// pointers here, so that an absent one is told from a zero one.
type runWire struct {
	Run
	Attempt  *int   `json:"attempt"`
	Deadline *int64 `json:"deadline"`
}

// run checks the presence of the required fields and returns the Run.
func (w *runWire) run() (Run, error) {
	r := w.Run
	switch {
	case w.Attempt == nil:
		return Run{}, malformed("attempt", "is required")
	case w.Deadline == nil:
		return Run{}, malformed("deadline", "is required (0 for none)")
	}
	r.Attempt, r.Deadline = *w.Attempt, *w.Deadline
	return r, r.Check()
}

// DecodeRun decodes the body of PathRun (or one run of PathRuns) as DecodeMessage does,
// members it does not know skipped, and checks it (Run.Check): task, ticket, attempt and
// deadline are required. The error is a *FieldError naming the field.
func DecodeRun(body []byte) (Run, error) {
	var w runWire
	if err := DecodeMessage(body, &w); err != nil {
		return Run{}, err
	}
	return w.run()
}

// Check checks a run's fields: task and ticket present, every name within MaxNameBytes,
// attempt 1 or more, times and epoch not negative, shard in 0..ShardCount-1. A params of
// JSON null is read as none. A receiver bounds dedup_ttl_ms by its own policy.
func (r *Run) Check() error {
	if err := checkName("task", r.Task); err != nil {
		return err
	}
	if err := checkName("ticket", r.Ticket); err != nil {
		return err
	}
	for _, f := range []struct{ name, v string }{{"handler", r.Handler}, {"group", r.Group}, {"kind", r.Kind}} {
		if len(f.v) > MaxNameBytes {
			return malformed(f.name, "longer than %d bytes", MaxNameBytes)
		}
	}
	switch {
	case r.Attempt < 1:
		return malformed("attempt", "must be 1 or more, got %d", r.Attempt)
	case r.ScheduledAt < 0:
		return malformed("scheduled_at", "must not be negative")
	case r.Deadline < 0:
		return malformed("deadline", "must not be negative")
	case r.DedupTTLMS < 0:
		return malformed("dedup_ttl_ms", "must not be negative")
	case r.Epoch < 0:
		return malformed("epoch", "must not be negative")
	case r.Shard != nil && (*r.Shard < 0 || *r.Shard >= ShardCount):
		return malformed("shard", "must be between 0 and %d, got %d", ShardCount-1, *r.Shard)
	}
	if bytes.Equal(r.Params, []byte("null")) {
		r.Params = nil
	}
	return nil
}

// DecodeRunBatch decodes the body of PathRuns: the envelope as DecodeMessage does, and each
// run as DecodeRun would alone, so one malformed run refuses only itself (errs[i]). A body
// every run of which has the right shape (what the scheduler sends) is decoded in one pass;
// only when that fails is each run decoded alone, to tell which are malformed. A body that
// is not a batch (not JSON as a whole, no runs, more than MaxRunsPerCall) is an error.
func DecodeRunBatch(body []byte) (runs []Run, errs []error, err error) {
	var whole struct {
		Runs []runWire `json:"runs"`
	}
	if DecodeMessage(body, &whole) != nil {
		return decodeRunBatchEach(body)
	}
	if err := checkRunCount(len(whole.Runs)); err != nil {
		return nil, nil, err
	}
	runs, errs = make([]Run, len(whole.Runs)), make([]error, len(whole.Runs))
	for i := range whole.Runs {
		runs[i], errs[i] = whole.Runs[i].run()
	}
	return runs, errs, nil
}

// decodeRunBatchEach is DecodeRunBatch decoding the envelope and then each run alone.
func decodeRunBatchEach(body []byte) (runs []Run, errs []error, err error) {
	var raw struct {
		Runs []json.RawMessage `json:"runs"`
	}
	if err := DecodeMessage(body, &raw); err != nil {
		return nil, nil, err
	}
	if err := checkRunCount(len(raw.Runs)); err != nil {
		return nil, nil, err
	}
	runs, errs = make([]Run, len(raw.Runs)), make([]error, len(raw.Runs))
	for i, r := range raw.Runs {
		runs[i], errs[i] = DecodeRun(r)
	}
	return runs, errs, nil
}

// checkRunCount refuses a batch of no runs or of more than MaxRunsPerCall.
func checkRunCount(n int) error {
	switch {
	case n == 0:
		return malformed("runs", "is required (one or more runs)")
	case n > MaxRunsPerCall:
		return malformed("runs", "at most %d per call, got %d", MaxRunsPerCall, n)
	}
	return nil
}
