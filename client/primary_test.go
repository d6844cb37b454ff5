package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/axe-sched/axe/client"
)

// fakeNode is an HTTP server standing in for one scheduler node: a backup answers every call 503
// naming the primary (docs/ha.md, "The backup"); a primary answers 200 {"ok":true}. It records the
// authorization of every call.
type fakeNode struct {
	srv *httptest.Server

	mu      sync.Mutex
	primary *string // nil: this node is the primary; else the URL a backup names
	calls   []string
}

func newFakeNode(t *testing.T) *fakeNode {
	t.Helper()
	n := &fakeNode{}
	n.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.mu.Lock()
		n.calls = append(n.calls, r.Header.Get("Authorization"))
		primary := n.primary
		n.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if primary != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "this node is a backup", "primary": *primary})
			return
		}
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(n.srv.Close)
	return n
}

func (n *fakeNode) backupOf(primary string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.primary = &primary
}

func (n *fakeNode) callAuths() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.calls...)
}

func TestClientRetriesOnTheNamedPrimary(t *testing.T) {
	ctx := context.Background()
	write := func(t *testing.T, servers string) error {
		t.Helper()
		c, err := client.New(servers, "s3cret", "test")
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			OK bool `json:"ok"`
		}
		if err := c.Do(ctx, http.MethodPost, "/api/v1/tasks", map[string]string{"name": "x"}, &out); err != nil {
			return err
		}
		if !out.OK {
			t.Errorf("answer not decoded")
		}
		return nil
	}

	t.Run("primary not in the list", func(t *testing.T) {
		primary, backup := newFakeNode(t), newFakeNode(t)
		backup.backupOf(primary.srv.URL)
		if err := write(t, backup.srv.URL); err != nil {
			t.Fatalf("write through the backup alone: %v", err)
		}
		if got := primary.callAuths(); len(got) != 1 || got[0] != "Bearer s3cret" {
			t.Errorf("primary calls = %q, want one with the token", got)
		}
	})

	t.Run("named primary before the rest of the list", func(t *testing.T) {
		primary, a, b := newFakeNode(t), newFakeNode(t), newFakeNode(t)
		a.backupOf(primary.srv.URL)
		b.backupOf(primary.srv.URL)
		if err := write(t, a.srv.URL+","+b.srv.URL+","+primary.srv.URL); err != nil {
			t.Fatal(err)
		}
		if n := len(b.callAuths()); n != 0 {
			t.Errorf("the backup not named got %d calls, want 0", n)
		}
		if n := len(primary.callAuths()); n != 1 {
			t.Errorf("primary got %d calls, want 1", n)
		}
	})

	t.Run("backup that knows no primary", func(t *testing.T) {
		primary, backup := newFakeNode(t), newFakeNode(t)
		backup.backupOf("")
		if err := write(t, backup.srv.URL+","+primary.srv.URL); err != nil {
			t.Fatalf("write with the primary next in the list: %v", err)
		}
		err := write(t, backup.srv.URL)
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusServiceUnavailable || apiErr.Message != "this node is a backup" {
			t.Fatalf("write to a lone backup = %v, want its 503", err)
		}
	})

	t.Run("two backups naming each other", func(t *testing.T) {
		a, b := newFakeNode(t), newFakeNode(t)
		a.backupOf(b.srv.URL)
		b.backupOf(a.srv.URL)
		err := write(t, a.srv.URL)
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusServiceUnavailable {
			t.Fatalf("write = %v, want a 503", err)
		}
		if na, nb := len(a.callAuths()), len(b.callAuths()); na != 1 || nb != 1 {
			t.Errorf("calls a=%d b=%d, want one each (no loop)", na, nb)
		}
	})
}
