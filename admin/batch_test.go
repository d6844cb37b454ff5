package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/axe-sched/axe/admin"
	"github.com/axe-sched/axe/client"
	"github.com/axe-sched/axe/internal/test/daemontest"

	"github.com/axe-sched/axe/internal/test/testwait"
	"github.com/axe-sched/axe/model"
)

// ndjson encodes specs one a line.
func ndjson(t *testing.T, specs []map[string]any) string {
	t.Helper()
	var b strings.Builder
	for _, s := range specs {
		raw, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(raw)
		b.WriteByte('\n')
	}
	return b.String()
}

var ndjsonHdr = []string{"Content-Type", "application/x-ndjson"}

type batchAnswer struct {
	Created  int    `json:"created"`
	Skipped  int    `json:"skipped"`
	Replaced int    `json:"replaced"`
	Error    string `json:"error"`
	Errors   []struct {
		Index int    `json:"index"`
		Error string `json:"error"`
	} `json:"errors"`
}

func postBatch(t *testing.T, d *daemontest.Daemon, want int, query string, body string, hdr ...string) batchAnswer {
	t.Helper()
	code, data := d.Call(t, http.MethodPost, "/api/v1/tasks/batch"+query, body, hdr...)
	if code != want {
		t.Fatalf("POST batch%s: status %d, want %d; body %.2000s", query, code, want, data)
	}
	var a batchAnswer
	if err := json.Unmarshal(data, &a); err != nil {
		t.Fatalf("batch answer %s: %v", data, err)
	}
	return a
}

func countTasks(t *testing.T, d *daemontest.Daemon, query string) int {
	t.Helper()
	var out struct {
		Count int `json:"count"`
	}
	d.MustJSON(t, http.StatusOK, http.MethodGet, "/api/v1/tasks?limit=10000&"+query, nil, &out)
	return out.Count
}

// TestBatchCreate covers POST /api/v1/tasks/batch: JSON and NDJSON bodies, dependencies
// within the batch in any order, one bad item among 10,000 named and nothing created,
// cycles and duplicate names refused, and on_conflict.
func TestBatchCreate(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, nil)
		h := daemontest.NewHook(t)

		t.Run("json array with dependencies in any order", func(t *testing.T) {
			body, _ := json.Marshal([]map[string]any{
				daemontest.Spec("down", h.URL("/ok/down"), "depends_on", []string{"up1", "up2"}),
				daemontest.Spec("up1", h.URL("/ok/up1"), "trigger", "manual"),
				daemontest.Spec("up2", h.URL("/ok/up2"), "cron", "0 0 1 1 *", "timezone", "UTC"),
			})
			a := postBatch(t, d, http.StatusOK, "", string(body))
			if a.Created != 3 || a.Skipped != 0 || a.Replaced != 0 {
				t.Fatalf("answer %+v, want 3 created", a)
			}
			if g := d.Get(t, "up2"); g.Runtime.State != model.StateScheduled || g.Runtime.NextTriggerTime != nextNewYearUTC(time.Now()) {
				t.Errorf("up2 = %+v, want SCHEDULED for New Year", g.Runtime)
			}
			if acts := d.Actions(t, "up2"); len(acts) != 1 || acts[0].Action != "create" || acts[0].To != model.StateScheduled {
				t.Errorf("actions of up2 = %+v, want one create record", acts)
			}
			if g := d.Get(t, "down"); len(g.DependsOn) != 2 {
				t.Errorf("down depends on %v", g.DependsOn)
			}
		})

		t.Run("one bad item among 10000 is named and nothing is created", func(t *testing.T) {
			specs := make([]map[string]any, 10000)
			for i := range specs {
				specs[i] = daemontest.Spec(fmt.Sprintf("bulk-%05d", i), h.URL("/ok/bulk"), "delay_ms", 3_600_000)
			}
			specs[7345]["priority"] = 9
			a := postBatch(t, d, http.StatusBadRequest, "", ndjson(t, specs), ndjsonHdr...)
			if len(a.Errors) != 1 || a.Errors[0].Index != 7345 || !strings.Contains(a.Errors[0].Error, "priority") {
				t.Fatalf("answer %+v, want item 7345 named for priority", a)
			}
			if n := countTasks(t, d, "group=default"); n != 3 {
				t.Fatalf("%d tasks after a refused batch, want the 3 of before", n)
			}
			delete(specs[7345], "priority")
			a = postBatch(t, d, http.StatusOK, "", ndjson(t, specs), ndjsonHdr...)
			if a.Created != 10000 {
				t.Fatalf("answer %+v, want 10000 created", a)
			}
			if g := d.Get(t, "bulk-09999"); g.Runtime.State != model.StateScheduled || g.Runtime.NextTriggerTime == 0 {
				t.Errorf("bulk-09999 = %+v, want SCHEDULED with a next fire", g.Runtime)
			}
		})

		t.Run("every bad item is named", func(t *testing.T) {
			specs := []map[string]any{
				daemontest.Spec("ok-1", h.URL("/ok"), "trigger", "manual"),
				{"name": "no-callback", "trigger": "manual"},
				daemontest.Spec("ok-1", h.URL("/ok"), "trigger", "manual"),
				daemontest.Spec("cyc-a", h.URL("/ok"), "depends_on", []string{"cyc-b"}),
				daemontest.Spec("cyc-b", h.URL("/ok"), "depends_on", []string{"cyc-a"}),
				daemontest.Spec("orphan", h.URL("/ok"), "depends_on", []string{"nowhere"}),
				daemontest.Spec("typo", h.URL("/ok"), "trigger", "manual", "retry_cnt", 2),
			}
			a := postBatch(t, d, http.StatusBadRequest, "", ndjson(t, specs), ndjsonHdr...)
			got := map[int]string{}
			for _, e := range a.Errors {
				got[e.Index] = e.Error
			}
			for idx, want := range map[int]string{1: "callback", 2: "item 0", 3: "cycle", 4: "cycle", 5: "nowhere", 6: "retry_cnt"} {
				if !strings.Contains(got[idx], want) {
					t.Errorf("item %d: error %q, want it to mention %q (all: %+v)", idx, got[idx], want, a.Errors)
				}
			}
			if _, ok := got[0]; ok {
				t.Errorf("the good item 0 is named: %+v", a.Errors)
			}
			if code, _ := d.Call(t, http.MethodGet, "/api/v1/tasks/ok-1", nil); code != http.StatusNotFound {
				t.Errorf("ok-1 exists after a refused batch (status %d)", code)
			}
		})

		t.Run("on_conflict", func(t *testing.T) {
			specs := []map[string]any{
				daemontest.Spec("up1", h.URL("/ok/again"), "trigger", "manual", "group", "changed"),
				daemontest.Spec("new-1", h.URL("/ok"), "trigger", "manual"),
			}
			a := postBatch(t, d, http.StatusConflict, "", ndjson(t, specs), ndjsonHdr...)
			if len(a.Errors) != 1 || a.Errors[0].Index != 0 {
				t.Fatalf("answer %+v, want item 0 refused for its taken name", a)
			}
			a = postBatch(t, d, http.StatusOK, "?on_conflict=skip", ndjson(t, specs), ndjsonHdr...)
			if a.Created != 1 || a.Skipped != 1 {
				t.Fatalf("skip: %+v", a)
			}
			if g := d.Get(t, "up1"); g.Group != "default" {
				t.Errorf("skipped task changed: group %q", g.Group)
			}
			old := d.Get(t, "up1")
			a = postBatch(t, d, http.StatusOK, "?on_conflict=replace", ndjson(t, specs), ndjsonHdr...)
			if a.Replaced != 2 {
				t.Fatalf("replace: %+v", a)
			}
			if g := d.Get(t, "up1"); g.Group != "changed" || g.ID == old.ID {
				t.Errorf("replaced task: group %q id %d (old id %d)", g.Group, g.ID, old.ID)
			}
			d.APIError(t, http.StatusBadRequest, http.MethodPost, "/api/v1/tasks/batch?on_conflict=merge", "[]")
		})

		t.Run("malformed bodies", func(t *testing.T) {
			d.APIError(t, http.StatusBadRequest, http.MethodPost, "/api/v1/tasks/batch", `{"name":"x"}`)
			d.APIError(t, http.StatusBadRequest, http.MethodPost, "/api/v1/tasks/batch", `[{"name":"x"},`)
			d.APIError(t, http.StatusBadRequest, http.MethodPost, "/api/v1/tasks/batch", "{\"name\":\n", ndjsonHdr...)
		})
	})
}

// TestBatchLimits: a body over 64 MiB, or over 10,000 tasks, is refused with 413 naming the
// limit, before it is read whole; other endpoints keep the 1 MiB limit.
func TestBatchLimits(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, "sqlite:"+t.TempDir()+"/axe.db", nil)

	// 10,001 items: refused once the 10,001st arrives.
	var b strings.Builder
	for i := range 10001 {
		fmt.Fprintf(&b, `{"name":"n%d","trigger":"manual","callback":{"url":"http://127.0.0.1:1/"}}`+"\n", i)
	}
	msg := d.APIError(t, http.StatusRequestEntityTooLarge, http.MethodPost, "/api/v1/tasks/batch", b.String(), ndjsonHdr...)
	if !strings.Contains(msg, "10000 tasks") {
		t.Errorf("message %q does not name the 10000-task limit", msg)
	}

	// A declared length over 64 MiB is refused before the body is read: the server answers
	// after the first MiB (what fasthttp buffers before it streams), while the client still
	// has 63 MiB to send.
	pr, pw := io.Pipe()
	defer pw.Close()
	req, err := http.NewRequest(http.MethodPost, d.Base+"/api/v1/tasks/batch", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = admin.BatchMaxBodyBytes + 1
	req.Header.Set("Content-Type", "application/x-ndjson")
	go func() { _, _ = pw.Write(bytes.Repeat([]byte(" "), 2<<20)) }()
	resp, err := d.HTTP.Do(req)
	switch {
	case err != nil && strings.Contains(err.Error(), "connection reset"):
		// The server answered and closed while the client was still sending: the client
		// can lose the answer to the reset, but the body was refused unread either way.
	case err != nil:
		t.Fatalf("oversized batch: %v", err)
	default:
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(data), "64 MiB") {
			t.Fatalf("declared 64 MiB + 1: status %d body %s, want 413 naming 64 MiB", resp.StatusCode, data)
		}
	}

	// Chunked (no length): refused once more than 64 MiB have arrived, not after the end.
	pr2, pw2 := io.Pipe()
	sent := make(chan int64, 1)
	go func() {
		line := []byte(`{"name":"` + strings.Repeat("x", 100) + `"}` + "\n")
		var n int64
		for n <= 2*admin.BatchMaxBodyBytes {
			k, err := pw2.Write(bytes.Repeat(line, 1000))
			n += int64(k)
			if err != nil {
				break
			}
		}
		sent <- n
		pw2.Close()
	}()
	req2, err := http.NewRequest(http.MethodPost, d.Base+"/api/v1/tasks/batch", pr2)
	if err != nil {
		t.Fatal(err)
	}
	req2.Header.Set("Content-Type", "application/x-ndjson")
	resp2, err := d.HTTP.Do(req2)
	if err == nil {
		data, _ := io.ReadAll(resp2.Body)
		resp2.Body.Close()
		// The first items are bad (no callback) but decoding goes on to the limit: the
		// answer is the limit, not the items.
		if resp2.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("chunked over 64 MiB: status %d body %.300s, want 413", resp2.StatusCode, data)
		}
	}
	pr2.CloseWithError(io.ErrClosedPipe)
	if n := <-sent; n > 2*admin.BatchMaxBodyBytes {
		t.Fatalf("the server read all %d bytes before refusing", n)
	}

	// Other endpoints have their own limits: a single create takes 256 KiB.
	// The client announces the size and sends only the start (oversized, hostile_test.go):
	// one still writing the whole body could see the early 413 as a connection reset.
	code, body := oversized(t, d.Addr, http.MethodPost, "/api/v1/tasks", admin.TaskMaxBodyBytes+1)
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	msg = e.Error
	if code != http.StatusRequestEntityTooLarge {
		t.Fatalf("over 256 KiB: status %d body %s, want 413", code, body)
	}
	if !strings.Contains(msg, "256 KiB") {
		t.Errorf("message %q does not name the 256 KiB limit", msg)
	}
	d.Create(t, daemontest.Spec("small", "http://127.0.0.1:1/", "trigger", "manual"))
}

// TestRunAt: run_at fires at that instant; in the past it fires at once under fire_once and
// is recorded as skipped under skip.
func TestRunAt(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, nil)
		h := daemontest.NewHook(t)
		at := time.Now().Add(1500 * time.Millisecond).Truncate(time.Millisecond)
		v := d.Create(t, daemontest.Spec("at", h.URL("/ok/at"), "run_at", at.In(time.FixedZone("x", 8*3600)).Format(time.RFC3339Nano)))
		if v.Trigger != model.TriggerDelay || v.Runtime.NextTriggerTime != at.UnixMilli() {
			t.Fatalf("created %+v / %+v, want a delay task due at %d", v.TaskDef, v.Runtime, at.UnixMilli())
		}
		// Fired for that instant and not before it (how late on a loaded box is no test's).
		calls := h.WaitCalls(t, "at", 1, daemontest.WaitTimeout)
		if late := calls[0].At.Sub(at); late < 0 || calls[0].Body.ScheduledAt != at.UnixMilli() {
			t.Errorf("fired %s after run_at for %d, want not before it and for %d", late, calls[0].Body.ScheduledAt, at.UnixMilli())
		}

		past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
		d.Create(t, daemontest.Spec("past-once", h.URL("/ok/past-once"), "run_at", past))
		h.WaitCalls(t, "past-once", 1, daemontest.WaitTimeout)

		s := d.Create(t, daemontest.Spec("past-skip", h.URL("/ok/past-skip"), "run_at", past, "misfire_policy", "skip"))
		if s.Runtime.State != model.StateWaiting || s.Runtime.NextTriggerTime != 0 {
			t.Errorf("past-skip = %+v, want WAITING with no fire", s.Runtime)
		}
		testwait.For(t, daemontest.WaitTimeout, "a skipped run of past-skip", func() bool {
			runs := d.Runs(t, "past-skip")
			return len(runs) == 1 && runs[0].Result == model.ResultSkipped
		})
		time.Sleep(300 * time.Millisecond)
		if n := len(h.CallsOf("past-skip")); n != 0 {
			t.Errorf("past-skip fired %d times", n)
		}

		for _, bad := range []map[string]any{
			daemontest.Spec("bad1", h.URL("/x"), "run_at", "2026-01-02 15:04:05"),
			daemontest.Spec("bad2", h.URL("/x"), "run_at", "2026-01-02T15:04:05"),
			daemontest.Spec("bad3", h.URL("/x"), "run_at", past, "delay_ms", 5),
			daemontest.Spec("bad4", h.URL("/x"), "run_at", past, "trigger", "cron", "cron", "* * * * *"),
		} {
			if msg := d.APIError(t, http.StatusBadRequest, http.MethodPost, "/api/v1/tasks", bad); !strings.Contains(msg, "run_at") {
				t.Errorf("%s: message %q does not name run_at", bad["name"], msg)
			}
		}
	})
}

// TestBulkOps covers POST /api/v1/tasks/bulk/{op}: AND-combined selectors, dry runs, an
// action record per task with the note, and an empty selector refused.
func TestBulkOps(t *testing.T) {
	t.Parallel()
	daemontest.EachStore(t, func(t *testing.T, dsn string) {
		d := daemontest.Start(t, dsn, nil)
		h := daemontest.NewHook(t)
		var specs []map[string]any
		for i := range 30 {
			grp := "ga"
			if i%3 == 0 {
				grp = "gb"
			}
			specs = append(specs, daemontest.Spec(fmt.Sprintf("job_%02d", i), h.URL("/ok"), "group", grp, "cron", "0 0 1 1 *"))
		}
		specs = append(specs, daemontest.Spec("jobX", h.URL("/ok"), "group", "ga", "cron", "0 0 1 1 *"))
		postBatch(t, d, http.StatusOK, "", ndjson(t, specs), ndjsonHdr...)

		var out struct {
			Affected int `json:"affected"`
		}
		// '_' in a prefix is no wildcard: jobX does not match "job_".
		sel := map[string]any{"group": "ga", "name_prefix": "job_", "note": "maintenance 42"}
		d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/tasks/bulk/pause?dry_run=true", sel, &out)
		if out.Affected != 20 {
			t.Fatalf("dry run affected %d, want 20", out.Affected)
		}
		if n := countTasks(t, d, "state=PAUSED"); n != 0 {
			t.Fatalf("dry run paused %d tasks", n)
		}
		d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/tasks/bulk/pause", sel, &out)
		if out.Affected != 20 || countTasks(t, d, "state=PAUSED") != 20 {
			t.Fatalf("pause affected %d, %d paused; want 20", out.Affected, countTasks(t, d, "state=PAUSED"))
		}
		if a, ok := daemontest.FindAction(d.Actions(t, "job_01"), "pause"); !ok || !strings.Contains(a.Detail, "maintenance 42") {
			t.Errorf("job_01 pause record %+v, want the note", a)
		}
		d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/tasks/bulk/delete", map[string]any{"state": "paused", "names": []string{"job_01", "job_02", "job_03", "nope"}}, &out)
		if out.Affected != 2 {
			t.Fatalf("delete affected %d, want 2 (job_03 is in gb, not paused)", out.Affected)
		}
		d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/tasks/bulk/resume", map[string]any{"state": "PAUSED"}, &out)
		if out.Affected != 18 || countTasks(t, d, "state=PAUSED") != 0 {
			t.Fatalf("resume affected %d, want 18", out.Affected)
		}
		d.MustJSON(t, http.StatusOK, http.MethodPost, "/api/v1/tasks/bulk/run", map[string]any{"names": []string{"jobX"}}, &out)
		if out.Affected != 1 {
			t.Fatalf("run affected %d", out.Affected)
		}
		h.WaitCalls(t, "jobX", 1, 10*time.Second)

		for _, bad := range []struct {
			path string
			body any
			want string
		}{
			{"/api/v1/tasks/bulk/pause", map[string]any{}, "selector"},
			{"/api/v1/tasks/bulk/pause", map[string]any{"note": "only a note"}, "selector"},
			{"/api/v1/tasks/bulk/pause", map[string]any{"state": "ASLEEP"}, "state"},
			{"/api/v1/tasks/bulk/explode", map[string]any{"group": "ga"}, "op"},
			{"/api/v1/tasks/bulk/pause", map[string]any{"grop": "ga"}, "grop"},
		} {
			if msg := d.APIError(t, http.StatusBadRequest, http.MethodPost, bad.path, bad.body); !strings.Contains(msg, bad.want) {
				t.Errorf("%s %v: %q does not name %q", bad.path, bad.body, msg, bad.want)
			}
		}
	})
}

// TestClientCreateTasks: the Go client's CreateTasks and its per-item errors.
func TestClientCreateTasks(t *testing.T) {
	t.Parallel()
	d := daemontest.Start(t, "sqlite:"+t.TempDir()+"/axe.db", nil)
	c, err := client.New(d.Base, "", "tester")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	specs := []json.RawMessage{
		json.RawMessage(`{"name":"c1","trigger":"manual","callback":{"url":"http://127.0.0.1:1/"}}`),
		json.RawMessage("{\n \"name\": \"c2\", \"delay_ms\": 60000,\n \"callback\": {\"url\": \"http://127.0.0.1:1/\"}}"),
	}
	res, err := c.CreateTasks(ctx, specs, "")
	if err != nil || res.Created != 2 {
		t.Fatalf("CreateTasks = %+v, %v", res, err)
	}
	res, err = c.CreateTasks(ctx, specs, "skip")
	if err != nil || res.Skipped != 2 {
		t.Fatalf("CreateTasks skip = %+v, %v", res, err)
	}
	_, err = c.CreateTasks(ctx, append(specs, json.RawMessage(`{"name":"c3"}`)), "skip")
	var ae *client.APIError
	if !errorsAs(err, &ae) || ae.Status != http.StatusBadRequest || len(ae.Items) != 1 || ae.Items[0].Index != 2 {
		t.Fatalf("bad batch: %v (%+v)", err, ae)
	}
	n, err := c.Bulk(ctx, "pause", client.BulkSelector{NamePrefix: "c"}, true)
	if err != nil || n != 2 {
		t.Fatalf("Bulk dry run = %d, %v", n, err)
	}
}

func errorsAs(err error, target **client.APIError) bool { return errors.As(err, target) }
