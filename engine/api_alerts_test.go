package engine

import (
	"errors"
	"fmt"
	"testing"

	"github.com/axe-sched/axe/wire"
)

// TestAlertLogKeepsTheNewest: the delivery log lists the newest alertLogSize alerts newest
// first with their settled states; an outcome for an alert pushed out is dropped, and a
// failure among several webhooks stands over a later delivery.
func TestAlertLogKeepsTheNewest(t *testing.T) {
	t.Parallel()
	var l alertLog
	if got := l.recent(); len(got) != 0 {
		t.Fatalf("an empty log lists %d", len(got))
	}
	ids := make([]uint64, 0, 300)
	for i := range 300 {
		ids = append(ids, l.add(wire.Alert{Kind: "k", Message: fmt.Sprint(i)}, DeliveryQueued))
	}
	l.finish(ids[50], DeliveryDelivered, 1, nil) // pushed out: ignored
	l.finish(ids[299], DeliveryFailed, 6, errors.New("HTTP 500"))
	l.finish(ids[299], DeliveryDelivered, 1, nil) // a second webhook took it: the failure stands
	l.finish(ids[298], DeliveryDelivered, 2, nil)
	got := l.recent()
	if len(got) != alertLogSize {
		t.Fatalf("%d alerts listed, want %d", len(got), alertLogSize)
	}
	for i, d := range got {
		if want := fmt.Sprint(299 - i); d.Message != want {
			t.Fatalf("alert %d is %q, want %q (newest first)", i, d.Message, want)
		}
	}
	if d := got[0]; d.State != DeliveryFailed || d.Attempts != 7 || d.Error != "HTTP 500" {
		t.Errorf("the newest: %+v", d)
	}
	if d := got[1]; d.State != DeliveryDelivered || d.Attempts != 2 {
		t.Errorf("the second newest: %+v", d)
	}
	if d := got[len(got)-1]; d.Message != "100" || d.State != DeliveryQueued {
		t.Errorf("the oldest kept: %+v", d)
	}
}
