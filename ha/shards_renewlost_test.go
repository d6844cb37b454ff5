package ha

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/axe-sched/axe/model"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/persist/persisttest"
)

// stealingStore is a store whose next RenewShards of node "a", once steal is set, first has
// another holder take one of a's shards for real (released as a, taken as "thief"): what a
// node frozen past its TTL finds at its first renewal after it wakes.
type stealingStore struct {
	persist.Store
	steal atomic.Pointer[persist.ShardFence]
}

func (s *stealingStore) RenewShards(ctx context.Context, holder string, held []persist.ShardFence, ttl time.Duration) ([]int, error) {
	if f := s.steal.Swap(nil); f != nil {
		if err := s.Store.ReleaseShards(ctx, holder, []persist.ShardFence{*f}); err != nil {
			return nil, err
		}
		if got, err := s.Store.TakeShards(ctx, "thief", []int{f.Shard}, time.Minute); err != nil || len(got) != 1 {
			return nil, errors.Join(err, errors.New("the thief did not get the shard"))
		}
	}
	return s.Store.RenewShards(ctx, holder, held, ttl)
}

// gateProbe is a log handler that, as the loop logs the shards its renewal lost, asks the
// gate of the stolen shard: it must be closed from the moment the renewal answered.
type gateProbe struct {
	slog.Handler
	check func()
}

func (h gateProbe) Enabled(context.Context, slog.Level) bool { return true }

func (h gateProbe) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "shards lost: their renewal found another holder or epoch" {
		h.check()
	}
	if h.Handler.Enabled(ctx, r.Level) {
		return h.Handler.Handle(ctx, r)
	}
	return nil
}

func (h gateProbe) WithAttrs(as []slog.Attr) slog.Handler {
	return gateProbe{Handler: h.Handler.WithAttrs(as), check: h.check}
}

// TestShardsRenewalNeverOpensALostShard: a renewal that finds one of the node's shards held by
// another node opens the gates of the shards it renewed and never, not for a moment, the gate
// of the one it lost: a send of that shard asked then would leave at the old epoch, after
// another node took over (a node woken from SIGSTOP renews first thing).
func TestShardsRenewalNeverOpensALostShard(t *testing.T) {
	t.Parallel()
	persisttest.Each(t, func(t *testing.T, base persist.Store) {
		s := &stealingStore{Store: base}
		var sh atomic.Pointer[Shards]
		var stolen atomic.Pointer[persist.ShardFence]
		var probed, openSeen atomic.Int64
		probe := gateProbe{Handler: testShardLogger().Handler(), check: func() {
			f := stolen.Load()
			if f == nil {
				return
			}
			probed.Add(1)
			if sh.Load().Gate(f.Shard, f.Epoch) == nil || sh.Load().Holds(f.Shard, f.Epoch) == nil {
				openSeen.Add(1)
			}
		}}
		loop, err := NewShards(ShardsConfig{Store: s, NodeID: "a", Advertise: "http://a", TTL: shardTTL,
			Renew: shardRenew, Logger: slog.New(probe)})
		if err != nil {
			t.Fatal(err)
		}
		sh.Store(loop)
		if err := loop.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = loop.Stop(context.Background(), false) })
		go func() {
			for range loop.Changes() {
			}
		}()
		deadline := time.Now().Add(time.Minute)
		for len(loop.Held()) < model.ShardCount {
			if time.Now().After(deadline) {
				t.Fatalf("a holds %d shards after a minute, want all %d", len(loop.Held()), model.ShardCount)
			}
			time.Sleep(10 * time.Millisecond)
		}
		f := loop.Held()[7]
		stolen.Store(&f)
		s.steal.Store(&f)
		for loop.Holds(f.Shard, f.Epoch) == nil || probed.Load() == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("the renewal did not find shard %d lost within a minute", f.Shard)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if n := openSeen.Load(); n != 0 {
			t.Errorf("the gate of shard %d at epoch %d was open after the renewal that found it lost", f.Shard, f.Epoch)
		}
		if err := loop.Holds(f.Shard, f.Epoch); !errors.Is(err, model.ErrShardNotHeld) {
			t.Errorf("Holds of the lost shard = %v, want model.ErrShardNotHeld", err)
		}
	})
}

// stallingStore is a store whose RenewShards waits, once stall is set, until it is cleared
// or the call's context ends: a database that stops answering.
type stallingStore struct {
	persist.Store
	stall atomic.Bool
}

func (s *stallingStore) RenewShards(ctx context.Context, holder string, held []persist.ShardFence, ttl time.Duration) ([]int, error) {
	for s.stall.Load() {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return s.Store.RenewShards(ctx, holder, held, ttl)
}

// TestShardsRenewedClosesAtTheDeadline: Renewed, the node's part of every shard's gate, is
// open while the renewals succeed, closed from the local deadline on while they do not (the
// shards still held), and open again once a renewal succeeds; a node that holds nothing has
// nothing to keep back.
func TestShardsRenewedClosesAtTheDeadline(t *testing.T) {
	t.Parallel()
	s := &stallingStore{Store: persisttest.SQLite(t)}
	loop, err := NewShards(ShardsConfig{Store: s, NodeID: "a", Advertise: "http://a", TTL: shardTTL,
		Renew: shardRenew, Logger: testShardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := loop.Renewed(); err != nil {
		t.Fatalf("Renewed holding nothing = %v, want nil", err)
	}
	if err := loop.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = loop.Stop(context.Background(), false) })
	go func() {
		for range loop.Changes() {
		}
	}()
	wait := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within a minute", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	wait("a holds shards", func() bool { return len(loop.Held()) > 0 })
	if err := loop.Renewed(); err != nil {
		t.Fatalf("Renewed while renewing = %v, want nil", err)
	}
	s.stall.Store(true)
	wait("Renewed closes at the deadline", func() bool { return errors.Is(loop.Renewed(), model.ErrLeaseDeadline) })
	if len(loop.Held()) == 0 {
		t.Fatal("the shards were dropped before Renewed closed")
	}
	s.stall.Store(false)
	wait("Renewed opens again after a renewal", func() bool { return loop.Renewed() == nil && len(loop.Held()) > 0 })
}
