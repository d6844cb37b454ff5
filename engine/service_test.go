package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/axe-sched/axe/lib/startstop"
)

// TestServiceLoop: a service's loop runs once started, its stop ends it and waits for it, a
// second start is refused, and a stop without start is harmless.
func TestServiceLoop(t *testing.T) {
	t.Parallel()
	var l loop
	var ran, ended atomic.Bool
	started := make(chan struct{})
	if err := l.start(func(ctx context.Context) {
		ran.Store(true)
		close(started)
		<-ctx.Done()
		ended.Store(true)
	}); err != nil {
		t.Fatal(err)
	}
	<-started
	if err := l.start(func(context.Context) {}); !errors.Is(err, startstop.ErrStarted) {
		t.Fatalf("second start: got %v, want ErrStarted", err)
	}
	if err := l.stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !ran.Load() || !ended.Load() {
		t.Fatalf("stop returned before the loop ended (ran %v, ended %v)", ran.Load(), ended.Load())
	}
	var never loop
	if err := never.stop(context.Background()); err != nil {
		t.Fatalf("stop without start: %v", err)
	}
	if err := never.start(func(context.Context) { t.Error("a stopped loop ran") }); !errors.Is(err, startstop.ErrStopped) {
		t.Fatalf("start after stop: got %v, want ErrStopped", err)
	}
}

// TestOwnershipModes: the engine's ownership model is the one its configuration asks for,
// and a single node owns every shard, ready, under no fence.
func TestOwnershipModes(t *testing.T) {
	t.Parallel()
	sole := newOwnership(&Engine{cfg: Config{Epoch: 3}})
	if sole.Sharded() {
		t.Fatal("an engine that is not sharded reports sharded")
	}
	if held, ready := sole.State(17); !held || !ready {
		t.Fatalf("single node: shard 17 held %v ready %v, want both", held, ready)
	}
	if ep, shard := sole.runEpoch(nil); ep != 3 || shard != nil {
		t.Fatalf("primary's runs carry epoch %d shard %v, want 3 and none", ep, shard)
	}
	if f, err := sole.apiFences([]string{"a", "b"}); err != nil || f != nil {
		t.Fatalf("single node fences %v %v, want none", f, err)
	}
	if _, ok := newOwnership(&Engine{cfg: Config{Sharded: true}}).(*shardOwner); !ok {
		t.Fatal("a sharded engine's ownership is not the shards'")
	}
}
