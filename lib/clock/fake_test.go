package clock

import (
	"testing"
	"time"
)

func TestFakeTimersFireInOrderOnlyWhenAdvanced(t *testing.T) {
	c := NewFake(time.UnixMilli(1_700_000_000_000))
	start := c.Now()
	a := c.After(time.Second)
	tm := c.NewTimer(3 * time.Second)
	called := make(chan time.Time, 1)
	c.AfterFunc(2*time.Second, func() { called <- c.Now() })
	tk := c.NewTicker(time.Second)
	defer tk.Stop()
	if n := c.Advance(999 * time.Millisecond); n != 0 {
		t.Fatalf("%d fired before any was due", n)
	}
	if n := c.Advance(time.Millisecond); n != 2 { // After and the ticker
		t.Fatalf("%d fired at 1s, want 2", n)
	}
	if got := <-a; !got.Equal(start.Add(time.Second)) {
		t.Errorf("After delivered %v", got)
	}
	<-tk.C()
	c.Advance(time.Second)
	if got := <-called; got.Before(start.Add(2 * time.Second)) {
		t.Errorf("AfterFunc ran at %v", got)
	}
	<-tk.C()
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer reported it inactive")
	}
	c.Advance(5 * time.Second)
	select {
	case <-tm.C():
		t.Fatal("a stopped timer fired")
	default:
	}
	if got := Since(c, start); got != 7*time.Second {
		t.Errorf("Since = %s, want 7s", got)
	}
	if c.Waiters() != 1 { // the ticker
		t.Errorf("%d waiters, want the ticker only", c.Waiters())
	}
}

func TestFakeWaitForWaiters(t *testing.T) {
	c := NewFake(time.Unix(0, 0))
	go func() { <-c.After(time.Minute) }()
	if err := c.WaitForWaiters(1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Minute)
	if err := c.WaitForWaiters(1, 10*time.Millisecond); err == nil {
		t.Fatal("no waiter left, yet WaitForWaiters returned nil")
	}
}
