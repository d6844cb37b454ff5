package engine

import (
	"testing"
	"time"
)

// TestEndingResultsExpire: a settled result is remembered with its status for endingKeep,
// and forgotten after, so the map stays bounded by the results of the last minute.
func TestEndingResultsExpire(t *testing.T) {
	t.Parallel()
	var r endingResults
	t0 := time.Unix(1_700_000_000, 0)
	r.add("a", "success", t0)
	r.add("b", "failed", t0.Add(time.Second))
	if !r.has("a", "success") || !r.has("b", "failed") {
		t.Fatal("a fresh result is not remembered")
	}
	if r.has("a", "failed") || r.has("c", "success") {
		t.Error("a different status or an unknown ticket counts as a duplicate")
	}
	r.add("c", "success", t0.Add(endingKeep+500*time.Millisecond))
	if r.has("a", "success") {
		t.Error("a result older than endingKeep is still remembered")
	}
	if !r.has("b", "failed") || !r.has("c", "success") {
		t.Error("a result within endingKeep was forgotten")
	}
	for i := range 1000 {
		r.add("x", "success", t0.Add(10*endingKeep+time.Duration(i)*time.Second))
	}
	if !r.has("x", "success") {
		t.Error("a ticket re-added within endingKeep was forgotten when its older note expired")
	}
	if n := r.len(); n != 1 {
		t.Errorf("%d results remembered after the others expired, want 1", n)
	}
	if len(r.order) > 61 {
		t.Errorf("the expiry queue holds %d entries for one ticket re-added each second, want at most a minute's", len(r.order))
	}
}
