package ha

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/axe-sched/axe/internal/test/leaktest"
	"github.com/axe-sched/axe/lib/clock"
	"github.com/axe-sched/axe/lib/startstop"
	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leaktest.Options()...)
}

// hangingStore is the real store whose lease calls hang, while hang is set, until their
// context ends: a node cut off from the database in the middle of a call.
type hangingStore struct {
	persist.Store
	hang atomic.Bool
}

func (s *hangingStore) RenewLease(ctx context.Context, name, holder string, epoch int64, ttl time.Duration) error {
	if s.hang.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.Store.RenewLease(ctx, name, holder, epoch, ttl)
}

func (s *hangingStore) TakeLease(ctx context.Context, name, holder string, ttl time.Duration) (persist.LeaseState, bool, error) {
	if s.hang.Load() {
		<-ctx.Done()
		return persist.LeaseState{}, false, ctx.Err()
	}
	return s.Store.TakeLease(ctx, name, holder, ttl)
}

func newElector(t *testing.T, s persist.Store, id string, ttl, renew time.Duration) *Elector {
	t.Helper()
	e, err := New(Config{Store: s, NodeID: id, Advertise: "http://" + id, TTL: ttl, Renew: renew,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop(context.Background(), false) })
	return e
}

func nextChange(t *testing.T, e *Elector, within time.Duration) Change {
	t.Helper()
	select {
	case ch := <-e.Changes():
		return ch
	case <-time.After(within):
		t.Fatalf("no role change within %s", within)
		return Change{}
	}
}

// TestPrimaryGivesUpBeforeTheLeaseExpires hangs the primary's renewals. It must close its
// gate and demote itself TTL − renew after its last successful renewal was sent, while the
// database still counts the lease as its own: before any other node could take over. Then
// the backup takes it with epoch+1, and the old primary's renewal at its epoch is refused.
func TestPrimaryGivesUpBeforeTheLeaseExpires(t *testing.T) {
	t.Parallel()
	s := &hangingStore{Store: persisttest.MySQL(t)}
	const ttl, renew = 4 * time.Second, time.Second
	a := newElector(t, s, "a", ttl, renew)
	up := nextChange(t, a, 5*time.Second)
	if !up.Primary || up.Epoch != 1 || a.Gate(1) != nil {
		t.Fatalf("first change %+v, gate %v; want primary at epoch 1 with an open gate", up, a.Gate(1))
	}
	if err := a.Gate(2); !errors.Is(err, ErrNotPrimary) {
		t.Fatalf("gate of another epoch = %v, want ErrNotPrimary", err)
	}
	b := newElector(t, s.Store, "b", ttl, renew)
	time.Sleep(2 * renew) // a few good renewals; b stays a backup
	select {
	case ch := <-b.Changes():
		t.Fatalf("backup changed role while the primary renewed: %+v", ch)
	default:
	}

	s.hang.Store(true)
	hung := time.Now()
	down := nextChange(t, a, ttl+renew)
	l, err := s.Store.LeaseState(context.Background(), LeaseNameDefault)
	if err != nil {
		t.Fatal(err)
	}
	if down.Primary || down.Epoch != 1 {
		t.Fatalf("change after the hang = %+v, want a demotion from epoch 1", down)
	}
	if !l.Held || l.Holder != "a" || l.Remaining <= 0 {
		t.Fatalf("at the demotion the lease is %+v: the node must give up while the database still counts it as its own", l)
	}
	t.Logf("demoted %s after renewals began to hang, with %s of the lease left by the database's clock",
		time.Since(hung).Round(time.Millisecond), l.Remaining.Round(time.Millisecond))
	if err := a.Gate(1); err == nil {
		t.Fatalf("gate still open after the demotion")
	}
	took := nextChange(t, b, ttl+2*renew)
	if !took.Primary || took.Epoch != 2 || b.Gate(2) != nil {
		t.Fatalf("backup's change %+v, want primary at epoch 2", took)
	}
	if err := s.Store.RenewLease(context.Background(), LeaseNameDefault, "a", 1, ttl); !errors.Is(err, model.ErrLeaseLost) {
		t.Fatalf("renewal of the deposed primary = %v, want ErrLeaseLost", err)
	}
	if st := a.Status(); st.Primary || st.Leader != "" && st.Leader != "http://b" {
		t.Fatalf("old primary's status = %+v", st)
	}
}

// TestLostRenewalDemotesAtOnce: a renewal that changes no row gives up leadership at the
// next renewal, without waiting for any deadline.
func TestLostRenewalDemotesAtOnce(t *testing.T) {
	t.Parallel()
	s := persisttest.MySQL(t)
	const ttl, renew = 30 * time.Second, 200 * time.Millisecond
	a := newElector(t, s, "a", ttl, renew)
	if ch := nextChange(t, a, 5*time.Second); !ch.Primary {
		t.Fatalf("first change %+v", ch)
	}
	// Another node takes the lease over as a release and re-take would.
	if err := s.ReleaseLease(context.Background(), LeaseNameDefault, "a", 1); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.TakeLease(context.Background(), LeaseNameDefault, "z", ttl); err != nil || !ok {
		t.Fatalf("take by z: %v, %v", ok, err)
	}
	down := nextChange(t, a, 5*renew)
	if down.Primary || a.Gate(1) == nil {
		t.Fatalf("after losing the lease: %+v, gate %v", down, a.Gate(1))
	}
}

// TestRefusals: a read-only server is refused (by its @@read_only), and so is a second live
// node with the same id.
func TestRefusals(t *testing.T) {
	t.Parallel()
	s := persisttest.MySQL(t)
	newElector(t, s, "dup", 3*time.Second, 500*time.Millisecond)
	e, err := New(Config{Store: s, NodeID: "dup", Advertise: "http://other", TTL: 3 * time.Second, Renew: 500 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(t.Context()); !errors.Is(err, ErrNodeIDTaken) {
		t.Fatalf("second live node with one id: %v, want ErrNodeIDTaken", err)
	}
	ro := readOnlyStore{s}
	e, err = New(Config{Store: ro, NodeID: "ro", Advertise: "http://ro"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(t.Context()); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("read-only server: %v, want ErrReadOnly", err)
	}
	if _, err := New(Config{Store: s, NodeID: "x", Advertise: "http://x", TTL: 4 * time.Second, Renew: 2 * time.Second}); err == nil {
		t.Fatalf("renew of half the TTL accepted")
	}
}

// readOnlyStore answers @@read_only as a replica would.
type readOnlyStore struct{ persist.Store }

func (readOnlyStore) ReadOnly(context.Context) (bool, error) { return true, nil }

// TestWatchdogRunsOnTheElectorsClock drives the elector on a fake clock: with its renewals
// hanging, the primary's gate stays open until exactly TTL − renew after the last renewal
// that succeeded was sent, by the elector's own clock, and closes then, though no database
// call returned.
func TestWatchdogRunsOnTheElectorsClock(t *testing.T) {
	t.Parallel()
	s := &hangingStore{Store: persisttest.MySQL(t)}
	clk := clock.NewFake(time.Now())
	const ttl, renew = 4 * time.Second, time.Second
	e, err := New(Config{Store: s, NodeID: "a", Advertise: "http://a", TTL: ttl, Renew: renew,
		Logger: slog.New(slog.DiscardHandler), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop(context.Background(), false) })
	if err := e.Start(t.Context()); !errors.Is(err, startstop.ErrStarted) {
		t.Fatalf("a second Start = %v, want ErrStarted", err)
	}
	up := nextChange(t, e, 5*time.Second)
	if !up.Primary || !up.At.Equal(clk.Now()) {
		t.Fatalf("first change %+v, want primary at the fake clock's %s", up, clk.Now())
	}
	// Armed now: the watchdog, and the loop's pause before the next renewal.
	if err := clk.WaitForWaiters(2, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	s.hang.Store(true)
	clk.Advance(renew) // the renewal is sent, and hangs
	clk.Advance(ttl - 2*renew - time.Millisecond)
	if err := e.Gate(up.Epoch); err != nil {
		t.Fatalf("gate closed 1 ms before TTL − renew on the elector's clock: %v", err)
	}
	select {
	case ch := <-e.Changes():
		t.Fatalf("role changed before the local deadline: %+v", ch)
	default:
	}
	clk.Advance(time.Millisecond)
	down := nextChange(t, e, 5*time.Second)
	if down.Primary || down.Epoch != up.Epoch || !strings.Contains(down.Reason, "no successful renewal") {
		t.Fatalf("change at the deadline = %+v, want a demotion for the missed renewals", down)
	}
	if err := e.Gate(up.Epoch); !errors.Is(err, ErrNotPrimary) {
		t.Fatalf("gate after the deadline = %v, want ErrNotPrimary", err)
	}
}
