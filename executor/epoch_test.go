package executor_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/axe-sched/axe/executor"
	"github.com/axe-sched/axe/executor/internal/schedpeer"
	"github.com/axe-sched/axe/protocol"
)

// atEpoch returns run as a scheduler of lease epoch epoch sends it.
func atEpoch(run schedpeer.Run, epoch int64) schedpeer.Run {
	run.Epoch = epoch
	return run
}

func errorOf(t *testing.T, resp schedpeer.Response) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	if err := resp.Decode(&e); err != nil {
		t.Fatal(err)
	}
	return e.Error
}

func TestStaleEpochIsRefused(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	exe := newExecutor(t, executor.Config{}, peer)
	started := make(chan string, 8)
	release := make(chan struct{})
	exe.Handle("h", blockingHandler(started, release))
	start(t, exe)
	defer close(release)

	// Runs without an epoch (a scheduler without --ha) are accepted before and after.
	dispatch(t, peer, exe, runFor("t-0", "a", "h"), http.StatusAccepted)
	recv(t, started, "start of t-0")
	if got := exe.Epoch(); got != 0 {
		t.Fatalf("Epoch after an epoch-less run = %d, want 0", got)
	}

	dispatch(t, peer, exe, atEpoch(runFor("t-5", "b", "h"), 5), http.StatusAccepted)
	recv(t, started, "start of t-5")
	if got := exe.Epoch(); got != 5 {
		t.Fatalf("Epoch = %d, want 5", got)
	}

	// The old primary, epoch 4, is refused, even for a ticket this executor already runs.
	for _, run := range []schedpeer.Run{runFor("t-4", "c", "h"), runFor("t-5", "b", "h")} {
		resp := dispatch(t, peer, exe, atEpoch(run, 4), http.StatusConflict)
		if got, want := errorOf(t, resp), "stale epoch 4 < 5"; got != want {
			t.Errorf("refusal of %s = %q, want %q", run.Ticket, got, want)
		}
	}
	// The same epoch and a higher one are accepted; the higher one raises the bar.
	dispatch(t, peer, exe, atEpoch(runFor("t-5b", "d", "h"), 5), http.StatusAccepted)
	dispatch(t, peer, exe, atEpoch(runFor("t-7", "e", "h"), 7), http.StatusAccepted)
	resp := dispatch(t, peer, exe, atEpoch(runFor("t-6", "f", "h"), 6), http.StatusConflict)
	if got, want := errorOf(t, resp), "stale epoch 6 < 7"; got != want {
		t.Errorf("refusal = %q, want %q", got, want)
	}
	// Epoch-less runs are still judged as before.
	dispatch(t, peer, exe, runFor("t-none", "g", "h"), http.StatusAccepted)
	if got := exe.Epoch(); got != 7 {
		t.Errorf("Epoch = %d, want 7", got)
	}
	// A negative epoch is malformed.
	resp = dispatch(t, peer, exe, atEpoch(runFor("t-neg", "h", "h"), -1), http.StatusBadRequest)
	if got, want := errorOf(t, resp), "executor: invalid run: epoch: must not be negative"; got != want {
		t.Errorf("negative epoch = %q, want %q", got, want)
	}
}

func TestStaleEpochIsRefusedInABatch(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	exe := newExecutor(t, executor.Config{}, peer)
	exe.Handle("h", okHandler(""))
	start(t, exe)

	dispatch(t, peer, exe, atEpoch(runFor("t-3", "a", "h"), 3), http.StatusAccepted)
	resp, err := peer.DispatchBatch(exe.Addr(), []schedpeer.Run{
		atEpoch(runFor("t-b1", "b", "h"), 2),
		atEpoch(runFor("t-b2", "c", "h"), 3),
		runFor("t-b3", "d", "h"),
		atEpoch(runFor("t-b4", "e", "h"), 1),
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != http.StatusOK {
		t.Fatalf("batch = %d %s", resp.Status, resp.Body)
	}
	var got struct {
		Results []struct {
			Code int             `json:"code"`
			Body json.RawMessage `json:"body"`
		} `json:"results"`
	}
	if err := resp.Decode(&got); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		code int
		err  string // "" for an acceptance
	}{
		{http.StatusConflict, "stale epoch 2 < 3"},
		{http.StatusAccepted, ""},
		{http.StatusAccepted, ""},
		{http.StatusConflict, "stale epoch 1 < 3"},
	}
	if len(got.Results) != len(want) {
		t.Fatalf("batch answers = %s", resp.Body)
	}
	for i, w := range want {
		var body struct {
			Accepted bool   `json:"accepted"`
			Error    string `json:"error"`
		}
		if err := json.Unmarshal(got.Results[i].Body, &body); err != nil {
			t.Fatal(err)
		}
		if got.Results[i].Code != w.code || body.Error != w.err || body.Accepted != (w.err == "") {
			t.Errorf("answer %d = %d %s, want %d %q", i, got.Results[i].Code, got.Results[i].Body, w.code, w.err)
		}
	}
	// Only the accepted runs ran and reported.
	cbs := waitCallbacks(t, peer, 3)
	seen := map[string]bool{}
	for _, cb := range cbs {
		seen[cb.Ticket] = true
	}
	for _, ticket := range []string{"t-3", "t-b2", "t-b3"} {
		if !seen[ticket] {
			t.Errorf("no result for accepted %s (got %v)", ticket, seen)
		}
	}
	if seen["t-b1"] || seen["t-b4"] {
		t.Errorf("a refused run reported a result: %v", seen)
	}
}

func TestStaleEpochKillIsRefused(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	exe := newExecutor(t, executor.Config{}, peer)
	started := make(chan string, 1)
	exe.Handle("h", blockingHandler(started, nil))
	start(t, exe)

	dispatch(t, peer, exe, atEpoch(runFor("t-k", "a", "h"), 9), http.StatusAccepted)
	recv(t, started, "handler start")
	resp, err := peer.KillAtEpoch(exe.Addr(), "t-k", 8)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != http.StatusConflict || errorOf(t, resp) != "stale epoch 8 < 9" {
		t.Fatalf("stale kill = %d %s, want 409 stale epoch 8 < 9", resp.Status, resp.Body)
	}
	// The run was not killed: the current primary's kill still finds it.
	resp, err = peer.KillAtEpoch(exe.Addr(), "t-k", 9)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != http.StatusOK {
		t.Fatalf("kill at the current epoch = %d %s, want 200", resp.Status, resp.Body)
	}
	if cb := waitCallbacks(t, peer, 1)[0]; cb.Error != executor.ErrKilled.Error() {
		t.Errorf("result = %+v, want killed", cb)
	}
}

func TestResultsFollowThePrimaryABackupNames(t *testing.T) {
	// Three schedulers: the executor last talked to a, which is now a backup naming c as the
	// primary; b is a backup too. The result must go to c straight after a's 503, skipping b.
	a := startPeer(t, schedpeer.Config{})
	b := startPeer(t, schedpeer.Config{})
	c := startPeer(t, schedpeer.Config{})
	exe := newExecutor(t, executor.Config{}, a, b, c)
	release := make(chan struct{})
	started := make(chan string, 1)
	exe.Handle("h", blockingHandler(started, release))
	start(t, exe)

	dispatch(t, a, exe, runFor("t-1", "x", "h"), http.StatusAccepted)
	recv(t, started, "handler start")
	a.SetBackupOf(c.URL())
	b.SetBackupOf(c.URL())
	c.OpenTicket("t-1") // the new primary reloaded the run from the store
	close(release)

	cb := waitCallbacks(t, c, 1)[0]
	if cb.Ticket != "t-1" || cb.Status != "success" {
		t.Errorf("result at the primary = %+v", cb)
	}
	if n := len(b.Calls(schedpeer.PathCallback)); n != 0 {
		t.Errorf("the backup that was not named got %d result calls, want 0", n)
	}
	if n := len(a.Calls(schedpeer.PathCallback)); n != 1 {
		t.Errorf("the old primary got %d result calls, want 1 (the 503)", n)
	}
}

func TestResultsTryTheNextAddressWhenTheNamedPrimaryIsUnknown(t *testing.T) {
	// The backup names a primary that is not among the configured addresses (or none):
	// the executor goes on down its list.
	for name, primary := range map[string]string{"unlisted": "http://" + freeAddr(t), "none": ""} {
		t.Run(name, func(t *testing.T) {
			a := startPeer(t, schedpeer.Config{})
			b := startPeer(t, schedpeer.Config{})
			exe := newExecutor(t, executor.Config{}, a, b)
			release := make(chan struct{})
			started := make(chan string, 1)
			exe.Handle("h", blockingHandler(started, release))
			start(t, exe)
			dispatch(t, a, exe, runFor("t-1", "x", "h"), http.StatusAccepted)
			recv(t, started, "handler start")
			a.SetBackupOf(primary)
			b.OpenTicket("t-1")
			close(release)
			if cb := waitCallbacks(t, b, 1)[0]; cb.Ticket != "t-1" {
				t.Errorf("result at the next address = %+v", cb)
			}
		})
	}
}

// TestEpochHeaderIsAnEpoch checks that the X-Axe-Epoch header a scheduler puts on every call
// counts like the body's epoch, on runs, batches and kills, and that a header contradicting
// the body is refused.
func TestEpochHeaderIsAnEpoch(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	exe := newExecutor(t, executor.Config{}, peer)
	started := make(chan string, 8)
	release := make(chan struct{})
	exe.Handle("h", blockingHandler(started, release))
	start(t, exe)
	defer close(release)

	post := func(path string, v any, epoch string) schedpeer.Response {
		t.Helper()
		body, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := peer.Post(exe.Addr(), path, body, "", map[string]string{"X-Axe-Epoch": epoch})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	peer.OpenTicket("t-6")
	if resp := post("/axe/run", runFor("t-6", "a", "h"), "6"); resp.Status != http.StatusAccepted {
		t.Fatalf("run with epoch header 6 = %d %s", resp.Status, resp.Body)
	}
	recv(t, started, "start of t-6")
	if got := exe.Epoch(); got != 6 {
		t.Fatalf("Epoch after a header of 6 = %d", got)
	}
	if resp := post("/axe/run", runFor("t-5", "b", "h"), "5"); resp.Status != http.StatusConflict || errorOf(t, resp) != "stale epoch 5 < 6" {
		t.Errorf("run with epoch header 5 = %d %s, want 409", resp.Status, resp.Body)
	}
	resp := post("/axe/runs", map[string][]schedpeer.Run{"runs": {runFor("t-b", "c", "h")}}, "5")
	var batch struct {
		Results []struct {
			Code int `json:"code"`
		} `json:"results"`
	}
	if err := resp.Decode(&batch); err != nil || len(batch.Results) != 1 || batch.Results[0].Code != http.StatusConflict {
		t.Errorf("batch with epoch header 5 = %d %s, want its run refused 409", resp.Status, resp.Body)
	}
	if resp := post("/axe/kill", map[string]string{"ticket": "t-6"}, "5"); resp.Status != http.StatusConflict {
		t.Errorf("kill with epoch header 5 = %d %s, want 409", resp.Status, resp.Body)
	}
	if resp := post("/axe/run", atEpoch(runFor("t-7", "d", "h"), 8), "7"); resp.Status != http.StatusBadRequest {
		t.Errorf("run whose header contradicts its body = %d %s, want 400", resp.Status, resp.Body)
	}
	if resp := post("/axe/run", runFor("t-x", "e", "h"), "x"); resp.Status != http.StatusBadRequest {
		t.Errorf("run with a malformed epoch header = %d %s, want 400", resp.Status, resp.Body)
	}
	if got := exe.Epoch(); got != 6 {
		t.Errorf("Epoch after refused calls = %d, want 6", got)
	}
}

// ofShard returns run as the node holding shard's lease at epoch sends it.
func ofShard(run schedpeer.Run, shard int, epoch int64) schedpeer.Run {
	run.Shard, run.Epoch = &shard, epoch
	return run
}

// killOf sends a kill of ticket, of shard (none when nil) at epoch, and returns the answer.
func killOf(t *testing.T, peer *schedpeer.Peer, exe *executor.Executor, ticket string, shard *int, epoch int64) schedpeer.Response {
	t.Helper()
	body, err := json.Marshal(protocol.Kill{Ticket: ticket, Epoch: epoch, Shard: shard})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := peer.Post(exe.Addr(), protocol.PathKill, body, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestShardEpochsAreJudgedPerShard checks that a run naming its shard is held only to the
// highest epoch seen of that shard: shards' epochs, and the unsharded one, are independent.
func TestShardEpochsAreJudgedPerShard(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	exe := newExecutor(t, executor.Config{}, peer)
	started := make(chan string, 16)
	release := make(chan struct{})
	exe.Handle("h", blockingHandler(started, release))
	start(t, exe)
	defer close(release)

	dispatch(t, peer, exe, ofShard(runFor("t-7a", "a", "h"), 7, 5), http.StatusAccepted)
	// Shard 40's owner is at a lower epoch than shard 7's, and just as current.
	dispatch(t, peer, exe, ofShard(runFor("t-40a", "b", "h"), 40, 2), http.StatusAccepted)
	if got7, got40, got := exe.ShardEpoch(7), exe.ShardEpoch(40), exe.Epoch(); got7 != 5 || got40 != 2 || got != 0 {
		t.Fatalf("ShardEpoch(7), ShardEpoch(40), Epoch() = %d, %d, %d, want 5, 2, 0", got7, got40, got)
	}
	resp := dispatch(t, peer, exe, ofShard(runFor("t-7b", "c", "h"), 7, 4), http.StatusConflict)
	if got, want := errorOf(t, resp), "stale epoch 4 < 5 of shard 7"; got != want {
		t.Errorf("refusal of shard 7 at 4 = %q, want %q", got, want)
	}
	dispatch(t, peer, exe, ofShard(runFor("t-40b", "d", "h"), 40, 2), http.StatusAccepted)

	// Unsharded runs are judged as before, against unsharded epochs only: 3 is below shard
	// 7's 5 and accepted, and it does not hold a sharded run of a lower epoch.
	dispatch(t, peer, exe, atEpoch(runFor("t-3", "e", "h"), 3), http.StatusAccepted)
	resp = dispatch(t, peer, exe, atEpoch(runFor("t-2", "f", "h"), 2), http.StatusConflict)
	if got, want := errorOf(t, resp), "stale epoch 2 < 3"; got != want {
		t.Errorf("refusal of unsharded 2 = %q, want %q", got, want)
	}
	dispatch(t, peer, exe, ofShard(runFor("t-40c", "g", "h"), 40, 2), http.StatusAccepted)
	if got7, got40, got := exe.ShardEpoch(7), exe.ShardEpoch(40), exe.Epoch(); got7 != 5 || got40 != 2 || got != 3 {
		t.Errorf("ShardEpoch(7), ShardEpoch(40), Epoch() = %d, %d, %d, want 5, 2, 3", got7, got40, got)
	}

	// The X-Axe-Epoch header of a sharded run is that shard's epoch.
	body, err := json.Marshal(ofShard(runFor("t-9", "i", "h"), 9, 0))
	if err != nil {
		t.Fatal(err)
	}
	peer.OpenTicket("t-9")
	if resp, err := peer.Post(exe.Addr(), protocol.PathRun, body, "", map[string]string{"X-Axe-Epoch": "6"}); err != nil || resp.Status != http.StatusAccepted {
		t.Fatalf("shard 9 run with epoch header 6 = %+v, %v, want 202", resp, err)
	}
	if got9, got := exe.ShardEpoch(9), exe.Epoch(); got9 != 6 || got != 3 {
		t.Errorf("after a header of 6 on shard 9: ShardEpoch(9), Epoch() = %d, %d, want 6, 3", got9, got)
	}

	// A shard out of 0-255 is a malformed run, and leaves no trace.
	for _, shard := range []int{256, -1} {
		resp := dispatch(t, peer, exe, ofShard(runFor("t-bad", "j", "h"), shard, 8), http.StatusBadRequest)
		want := fmt.Sprintf("executor: invalid run: shard: must be between 0 and 255, got %d", shard)
		if got := errorOf(t, resp); got != want {
			t.Errorf("shard %d = %q, want %q", shard, got, want)
		}
		if got := exe.ShardEpoch(shard); got != 0 {
			t.Errorf("ShardEpoch(%d) = %d, want 0", shard, got)
		}
	}
	for _, ticket := range []string{"t-7a", "t-40a", "t-40b", "t-3", "t-40c", "t-9"} {
		recv(t, started, "start of "+ticket)
	}
	select {
	case ticket := <-started:
		t.Errorf("%s started; only the six accepted runs may", ticket)
	default:
	}
}

// TestShardEpochKillsAreJudgedPerShard checks kills as TestShardEpochsAreJudgedPerShard
// checks runs: a kill naming its shard is held only to that shard's highest epoch.
func TestShardEpochKillsAreJudgedPerShard(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	exe := newExecutor(t, executor.Config{}, peer)
	started := make(chan string, 3)
	exe.Handle("h", blockingHandler(started, nil))
	start(t, exe)

	dispatch(t, peer, exe, ofShard(runFor("t-7", "a", "h"), 7, 5), http.StatusAccepted)
	dispatch(t, peer, exe, ofShard(runFor("t-40", "b", "h"), 40, 2), http.StatusAccepted)
	dispatch(t, peer, exe, atEpoch(runFor("t-u", "c", "h"), 3), http.StatusAccepted)
	for range 3 {
		recv(t, started, "handler start")
	}
	shard := func(n int) *int { return &n }

	for _, tc := range []struct {
		name   string
		ticket string
		shard  *int
		epoch  int64
		status int
		err    string // the refusal's error; "" when killed
	}{
		{"shard 7 below its epoch", "t-7", shard(7), 4, http.StatusConflict, "stale epoch 4 < 5 of shard 7"},
		{"shard 40 at its own lower epoch", "t-40", shard(40), 2, http.StatusOK, ""},
		{"unsharded below its epoch", "t-u", nil, 2, http.StatusConflict, "stale epoch 2 < 3"},
		{"unsharded at its epoch", "t-u", nil, 3, http.StatusOK, ""},
		{"shard 256", "t-7", shard(256), 9, http.StatusBadRequest, "shard: must be between 0 and 255, got 256"},
		{"shard -1", "t-7", shard(-1), 9, http.StatusBadRequest, "shard: must be between 0 and 255, got -1"},
		{"shard 7 at a newer epoch", "t-7", shard(7), 6, http.StatusOK, ""},
	} {
		resp := killOf(t, peer, exe, tc.ticket, tc.shard, tc.epoch)
		if resp.Status != tc.status || (tc.err != "" && errorOf(t, resp) != tc.err) {
			t.Errorf("%s: kill = %d %s, want %d %q", tc.name, resp.Status, resp.Body, tc.status, tc.err)
		}
	}
	if got7, got40, got := exe.ShardEpoch(7), exe.ShardEpoch(40), exe.Epoch(); got7 != 6 || got40 != 2 || got != 3 {
		t.Errorf("ShardEpoch(7), ShardEpoch(40), Epoch() = %d, %d, %d, want 6, 2, 3", got7, got40, got)
	}
	// The refused kills killed nothing: each run was killed once, by the kill that was let through.
	for _, cb := range waitCallbacks(t, peer, 3) {
		if cb.Error != executor.ErrKilled.Error() {
			t.Errorf("result = %+v, want killed", cb)
		}
	}
}

// TestShardEpochsInABatch checks that a batch whose runs are of different shards and epochs,
// sent without an X-Axe-Epoch header as the scheduler sends one, has each run judged alone
// against its own shard's highest epoch, in order.
func TestShardEpochsInABatch(t *testing.T) {
	peer := startPeer(t, schedpeer.Config{})
	exe := newExecutor(t, executor.Config{}, peer)
	exe.Handle("h", okHandler(""))
	start(t, exe)

	dispatch(t, peer, exe, ofShard(runFor("t-7", "a", "h"), 7, 5), http.StatusAccepted)
	dispatch(t, peer, exe, atEpoch(runFor("t-u", "b", "h"), 3), http.StatusAccepted)
	batch := []struct {
		run  schedpeer.Run
		code int
		err  string // "" for an acceptance
	}{
		{ofShard(runFor("t-b1", "c", "h"), 7, 4), http.StatusConflict, "stale epoch 4 < 5 of shard 7"},
		{ofShard(runFor("t-b2", "d", "h"), 40, 2), http.StatusAccepted, ""},
		{ofShard(runFor("t-b3", "e", "h"), 7, 5), http.StatusAccepted, ""},
		{atEpoch(runFor("t-b4", "f", "h"), 2), http.StatusConflict, "stale epoch 2 < 3"},
		{ofShard(runFor("t-b5", "g", "h"), 40, 3), http.StatusAccepted, ""},
		// Shard 40 was raised to 3 by the run before it in the same batch.
		{ofShard(runFor("t-b6", "i", "h"), 40, 2), http.StatusConflict, "stale epoch 2 < 3 of shard 40"},
		{ofShard(runFor("t-b7", "j", "h"), 256, 1), http.StatusBadRequest, "executor: invalid run: shard: must be between 0 and 255, got 256"},
		{ofShard(runFor("t-b8", "k", "h"), 12, 1), http.StatusAccepted, ""},
	}
	runs := make([]schedpeer.Run, len(batch))
	for i, b := range batch {
		runs[i] = b.run
	}
	resp, err := peer.DispatchBatch(exe.Addr(), runs)
	if err != nil {
		t.Fatal(err)
	}
	var got protocol.RunBatchAnswer
	if err := resp.Decode(&got); err != nil || resp.Status != http.StatusOK || len(got.Results) != len(batch) {
		t.Fatalf("batch = %d %s, %v", resp.Status, resp.Body, err)
	}
	accepted := map[string]bool{"t-7": true, "t-u": true}
	for i, b := range batch {
		var body struct {
			Accepted bool   `json:"accepted"`
			Error    string `json:"error"`
		}
		if err := json.Unmarshal(got.Results[i].Body, &body); err != nil {
			t.Fatal(err)
		}
		if got.Results[i].Code != b.code || body.Error != b.err || body.Accepted != (b.err == "") {
			t.Errorf("%s: %d %s, want %d %q", b.run.Ticket, got.Results[i].Code, got.Results[i].Body, b.code, b.err)
		}
		if b.err == "" {
			accepted[b.run.Ticket] = true
		}
	}
	if got7, got40, got12, got := exe.ShardEpoch(7), exe.ShardEpoch(40), exe.ShardEpoch(12), exe.Epoch(); got7 != 5 || got40 != 3 || got12 != 1 || got != 3 {
		t.Errorf("ShardEpoch(7, 40, 12), Epoch() = %d, %d, %d, %d, want 5, 3, 1, 3", got7, got40, got12, got)
	}
	// Only the accepted runs ran and reported.
	for _, cb := range waitCallbacks(t, peer, len(accepted)) {
		if !accepted[cb.Ticket] {
			t.Errorf("refused %s reported a result", cb.Ticket)
		}
		delete(accepted, cb.Ticket)
	}
	if len(accepted) != 0 {
		t.Errorf("no result for accepted %v", accepted)
	}
}
