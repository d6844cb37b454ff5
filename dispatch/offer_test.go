package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/axe-sched/axe/internal/test/testwait"
)

// fakeExecutor serves RunPath and RunsPath on loopback like an SDK executor: a run whose
// ticket ends in an even digit is accepted (202), an odd one refused (409); each answer names
// its ticket. Every call first waits for hold to be closed (if set), so a test can keep all of
// a dispatcher's senders busy.
type fakeExecutor struct {
	srv     *httptest.Server
	hold    chan struct{}
	release func() // closes hold, once
	// noBatch answers RunsPath with this status instead of serving it.
	noBatch int

	mu       sync.Mutex
	arrived  int   // calls received, counted before the hold
	batches  []int // runs per RunsPath call served
	singles  int   // RunPath calls served
	runsSeen int
	changed  chan struct{}
}

func startFakeExecutor(t *testing.T, hold chan struct{}, noBatch int) *fakeExecutor {
	t.Helper()
	f := &fakeExecutor{hold: hold, noBatch: noBatch, changed: make(chan struct{}), release: func() {}}
	if hold != nil {
		f.release = sync.OnceFunc(func() { close(hold) })
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	t.Cleanup(f.release) // runs first: a failed test must not leave calls held
	return f
}

func (f *fakeExecutor) addr() string { return strings.TrimPrefix(f.srv.URL, "http://") }

func (f *fakeExecutor) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// waitArrived waits until n calls have arrived.
func (f *fakeExecutor) waitArrived(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		f.mu.Lock()
		have, ch := f.arrived, f.changed
		f.mu.Unlock()
		if have >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%d calls arrived, want %d", have, n)
		}
	}
}

func answerFor(ticket string) (int, string) {
	code := http.StatusAccepted
	if d := ticket[len(ticket)-1]; (d-'0')%2 == 1 {
		code = http.StatusConflict
	}
	return code, fmt.Sprintf(`{"ticket":%q}`, ticket)
}

func (f *fakeExecutor) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.arrived++
	f.notifyLocked()
	f.mu.Unlock()
	if f.hold != nil {
		<-f.hold
	}
	body, _ := io.ReadAll(r.Body)
	switch r.URL.Path {
	case RunPath:
		var run struct{ Ticket string }
		_ = json.Unmarshal(body, &run)
		f.mu.Lock()
		f.singles++
		f.runsSeen++
		f.mu.Unlock()
		code, ans := answerFor(run.Ticket)
		w.WriteHeader(code)
		_, _ = io.WriteString(w, ans)
	case RunsPath:
		if f.noBatch != 0 {
			w.WriteHeader(f.noBatch)
			return
		}
		var b struct{ Runs []struct{ Ticket string } }
		_ = json.Unmarshal(body, &b)
		f.mu.Lock()
		f.batches = append(f.batches, len(b.Runs))
		f.runsSeen += len(b.Runs)
		f.mu.Unlock()
		items := make([]string, len(b.Runs))
		for i, run := range b.Runs {
			code, ans := answerFor(run.Ticket)
			items[i] = fmt.Sprintf(`{"code":%d,"body":%s}`, code, ans)
		}
		_, _ = io.WriteString(w, `{"results":[`+strings.Join(items, ",")+`]}`)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// holdSenders makes x's every sender busy with one held run (the executor holds each call),
// offering the runs one at a time so that none of them shares a call. The returned channel
// yields their outcomes once released.
func holdSenders(t *testing.T, d *Dispatcher, x *Executor, f *fakeExecutor) <-chan map[string]Outcome {
	t.Helper()
	out := make(chan map[string]Outcome, 1)
	parts := make(chan map[string]Outcome, offerSenders)
	for i := range offerSenders {
		go func() { parts <- offerAll(d, x, "held"+strconv.Itoa(i), 1) }()
		f.waitArrived(t, i+1)
	}
	go func() {
		all := map[string]Outcome{}
		for range offerSenders {
			for k, v := range <-parts {
				all[k] = v
			}
		}
		out <- all
	}()
	return out
}

// offerAll offers n runs to x concurrently, tickets prefix-0 .. prefix-(n-1), and returns
// each ticket's outcome.
func offerAll(d *Dispatcher, x *Executor, prefix string, n int) map[string]Outcome {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out = make(map[string]Outcome, n)
	)
	for i := range n {
		ticket := prefix + "-" + strconv.Itoa(i)
		wg.Go(func() {
			o := d.Offer(x, &Request{Ticket: ticket, Body: fmt.Appendf(nil, `{"ticket":%q}`, ticket),
				Deadline: time.Now().Add(10 * time.Second)})
			mu.Lock()
			out[ticket] = o
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// waitWaiting waits until n offers wait in x's queue.
func waitWaiting(t *testing.T, x *Executor, n int) {
	t.Helper()
	testwait.For(t, 10*time.Second, fmt.Sprintf("%d offers waiting", n), func() bool {
		x.offers.mu.Lock()
		defer x.offers.mu.Unlock()
		return len(x.offers.waiting) == n
	})
}

// checkOwnAnswers fails unless every ticket got the answer the executor gave that ticket.
func checkOwnAnswers(t *testing.T, got map[string]Outcome) {
	t.Helper()
	for ticket, o := range got {
		code, body := answerFor(ticket)
		if o.Err != nil || o.Status != code || string(o.Body) != body {
			t.Errorf("%s: outcome %d %s %v, want %d %s", ticket, o.Status, o.Body, o.Err, code, body)
		}
	}
}

// TestOfferBatchesWhileSendersAreBusy keeps every sender to an executor waiting, offers more
// runs meanwhile, and checks that those travel in RunsPath calls and that each caller gets
// the answer for its own run.
func TestOfferBatchesWhileSendersAreBusy(t *testing.T) {
	hold := make(chan struct{})
	f := startFakeExecutor(t, hold, 0)
	d := newDispatcher(t, Config{})
	x := &Executor{App: "a", Address: f.addr()}
	batches0, batched0 := d.m.offerBatches.Get(), d.m.offerBatchedRuns.Get()

	first := holdSenders(t, d, x, f)
	const n = 300 // more than one batch holds
	rest := make(chan map[string]Outcome)
	go func() { rest <- offerAll(d, x, "queued", n) }()
	waitWaiting(t, x, n) // nothing else can take them while the senders are held
	f.release()
	checkOwnAnswers(t, <-first)
	got := <-rest
	if len(got) != n {
		t.Fatalf("%d outcomes, want %d", len(got), n)
	}
	checkOwnAnswers(t, got)

	f.mu.Lock()
	defer f.mu.Unlock()
	if f.runsSeen != n+offerSenders {
		t.Errorf("the executor saw %d runs, want %d (each once)", f.runsSeen, n+offerSenders)
	}
	// Two free senders take the queue: the first offerBatchMax runs, then the rest.
	if slices.Sort(f.batches); !slices.Equal(f.batches, []int{n - offerBatchMax, offerBatchMax}) {
		t.Errorf("batches %v: want the queue taken %d runs at a time", f.batches, offerBatchMax)
	}
	if b, r := d.m.offerBatches.Get()-batches0, d.m.offerBatchedRuns.Get()-batched0; b != 2 || r != n {
		t.Errorf("metrics counted %d batches of %d runs, want 2 of %d", b, r, n)
	}
	if f.singles > offerSenders+1 {
		t.Errorf("%d runs went alone; only the first %d (and a lone remainder) should", f.singles, offerSenders)
	}
	// A sender hands its last outcome over before it counts itself out, so give it a moment.
	testwait.For(t, 5*time.Second, "no sender running and no offer waiting after the burst", func() bool {
		x.offers.mu.Lock()
		defer x.offers.mu.Unlock()
		return x.offers.senders == 0 && len(x.offers.waiting) == 0
	})
}

// TestOfferFallsBackToSingleRuns: an executor that does not serve RunsPath gets the batch's
// runs one by one, and every later run too until it registers again.
func TestOfferFallsBackToSingleRuns(t *testing.T) {
	for _, status := range []int{http.StatusNotFound, http.StatusMethodNotAllowed} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			hold := make(chan struct{})
			f := startFakeExecutor(t, hold, status)
			d := newDispatcher(t, Config{})
			r := NewRegistry()
			x, _, _ := r.Register("a", f.addr(), "http", []string{"h"}, 1)

			first := holdSenders(t, d, x, f)
			rest := make(chan map[string]Outcome)
			go func() { rest <- offerAll(d, x, "queued", 40) }()
			waitWaiting(t, x, 40)
			f.release()
			checkOwnAnswers(t, <-first)
			checkOwnAnswers(t, <-rest)
			f.mu.Lock()
			seen, batches := f.runsSeen, len(f.batches)
			f.mu.Unlock()
			if seen != offerSenders+40 || batches != 0 {
				t.Fatalf("the executor served %d runs and %d batches, want %d runs, no batch", seen, batches, offerSenders+40)
			}
			x.offers.mu.Lock()
			single := x.offers.single
			x.offers.mu.Unlock()
			if !single {
				t.Error("the executor is not marked as taking runs one by one")
			}
			r.Register("a", f.addr(), "http", []string{"h"}, 2)
			x.offers.mu.Lock()
			single = x.offers.single
			x.offers.mu.Unlock()
			if single {
				t.Error("registering again did not let the executor show whether it takes batches")
			}
		})
	}
}

// TestOfferBatchFailures: a batch refused or unreadable as a whole gives every run in it
// the outcome a lone call would have got; a run whose deadline passed while it waited is
// timed out without being sent.
func TestOfferBatchFailures(t *testing.T) {
	d := newDispatcher(t, Config{})
	for _, tc := range []struct {
		name    string
		answer  func(w http.ResponseWriter)
		check   func(o Outcome) bool
		outcome string
	}{
		{"503", func(w http.ResponseWriter) { w.WriteHeader(503); _, _ = io.WriteString(w, `{"error":"stopping"}`) },
			func(o Outcome) bool {
				return o.Err == nil && o.Status == 503 && strings.Contains(string(o.Body), "stopping")
			}, "503 stopping"},
		{"short answer", func(w http.ResponseWriter) { _, _ = io.WriteString(w, `{"results":[{"code":202,"body":{}}]}`) },
			func(o Outcome) bool { return o.Err != nil && o.Status == 0 }, "an error"},
		{"not JSON", func(w http.ResponseWriter) { _, _ = io.WriteString(w, `<html>`) },
			func(o Outcome) bool { return o.Err != nil && o.Status == 0 }, "an error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hold := make(chan struct{})
			release := sync.OnceFunc(func() { close(hold) })
			arrived := make(chan struct{}, offerSenders)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == RunPath {
					arrived <- struct{}{}
					<-hold
					w.WriteHeader(202)
					return
				}
				tc.answer(w)
			}))
			defer srv.Close()
			defer release()
			x := &Executor{App: "a", Address: strings.TrimPrefix(srv.URL, "http://")}
			first := make(chan Outcome, offerSenders)
			for i := range offerSenders {
				go func() {
					first <- d.Offer(x, &Request{Ticket: "held", Body: []byte(`{}`), Deadline: time.Now().Add(10 * time.Second)})
				}()
				select {
				case <-arrived:
				case <-time.After(10 * time.Second):
					t.Fatalf("held run %d never arrived", i)
				}
			}
			// One run already past its deadline, then a batch of live ones.
			late := make(chan Outcome)
			lateDeadline := time.Now().Add(time.Millisecond)
			go func() {
				late <- d.Offer(x, &Request{Ticket: "late", Body: []byte(`{"ticket":"late"}`), Deadline: lateDeadline})
			}()
			rest := make(chan map[string]Outcome)
			go func() { rest <- offerAll(d, x, "queued", 5) }()
			waitWaiting(t, x, 6)
			testwait.For(t, time.Second, "the late run's deadline to pass", func() bool { return time.Now().After(lateDeadline) })
			release()
			for range offerSenders {
				<-first
			}
			if o := <-late; o.Err != ErrTimeout {
				t.Errorf("late run: %+v, want ErrTimeout without a call", o)
			}
			for ticket, o := range <-rest {
				if !tc.check(o) {
					t.Errorf("%s: outcome %d %s %v, want %s", ticket, o.Status, o.Body, o.Err, tc.outcome)
				}
			}
		})
	}
}

// TestOfferFuncAnswersWithoutAWaiter offers runs with OfferFunc while the executor holds
// every sender: each gets its own answer through its callback once released, the runs
// queued meanwhile travel in one batch, and Stop, called while answers are still owed,
// returns only after every callback has run.
func TestOfferFuncAnswersWithoutAWaiter(t *testing.T) {
	hold := make(chan struct{})
	f := startFakeExecutor(t, hold, 0)
	d, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	x := &Executor{App: "a", Address: f.addr()}
	const n = offerSenders + 40
	var (
		mu  sync.Mutex
		got = map[string]Outcome{}
	)
	for i := range n {
		ticket := "func-" + strconv.Itoa(i)
		d.OfferFunc(x, &Request{Ticket: ticket, Body: fmt.Appendf(nil, `{"ticket":%q}`, ticket),
			Deadline: time.Now().Add(10 * time.Second)}, func(o Outcome) {
			time.Sleep(time.Millisecond) // an answer still being handled when Stop is called
			mu.Lock()
			got[ticket] = o
			mu.Unlock()
		})
		if i < offerSenders {
			f.waitArrived(t, i+1) // one run a sender, each held by the executor
		}
	}
	waitWaiting(t, x, n-offerSenders)
	stopped := make(chan error, 1)
	go func() { stopped <- d.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while %d offers were unanswered", err, n)
	case <-time.After(50 * time.Millisecond):
	}
	f.release()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != n {
		t.Fatalf("Stop returned with %d answers given of %d", len(got), n)
	}
	checkOwnAnswers(t, got)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Equal(f.batches, []int{n - offerSenders}) {
		t.Errorf("batches %v, want the %d queued runs in one", f.batches, n-offerSenders)
	}
}
