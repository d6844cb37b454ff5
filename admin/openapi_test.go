package admin_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/axe-sched/axe/admin"
	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/internal/test/daemontest"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/workflow"
)

// TestOpenAPIMatchesRoutes checks docs/openapi.yaml against the live server both ways:
// every operation it lists is a route the server serves, and every route the server serves
// is listed, each with an x-axe-scope and an answer for its errors.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string                    `yaml:"openapi"`
		Paths   map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Errorf("openapi: %q, want 3.x", doc.OpenAPI)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method, v := range ops {
			op, ok := v.(map[string]any)
			if method == "parameters" || !ok {
				continue
			}
			documented = append(documented, strings.ToUpper(method)+" "+path)
			if scope, _ := op["x-axe-scope"].(string); !slices.Contains([]string{"none", "any", "read", "write", "executor"}, scope) {
				t.Errorf("%s %s: x-axe-scope %q, want none, any, read, write or executor", method, path, scope)
			}
			if _, ok := op["responses"]; !ok {
				t.Errorf("%s %s: no responses", method, path)
			}
		}
	}
	sort.Strings(documented)

	store, err := persist.Open(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "axe.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	eng, err := engine.New(engine.Config{Store: store, Logger: daemontest.TestLogger(nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Stop(context.Background()) })
	srv, err := admin.NewServer(admin.ServerConfig{Engine: eng, Store: store, Pprof: true,
		Workflows: workflow.New(workflow.Config{Engine: eng.API(), Store: store})})
	if err != nil {
		t.Fatal(err)
	}
	served := srv.Routes()
	for _, r := range served {
		if !slices.Contains(documented, r) {
			t.Errorf("the server serves %s, which docs/openapi.yaml does not list", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(served, r) {
			t.Errorf("docs/openapi.yaml lists %s, which the server does not serve", r)
		}
	}
	if len(served) < 30 {
		t.Errorf("only %d routes served: %v", len(served), served)
	}
}
