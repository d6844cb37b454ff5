package admin

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
	"gopkg.in/yaml.v3"

	"github.com/axe-sched/axe/engine"
	"github.com/axe-sched/axe/persist"
	"github.com/axe-sched/axe/protocol"
)

// Tests that keep docs/protocol.md and docs/openapi.yaml from drifting from the code: each
// fails when a field, a path, a scope or a status code the code has is missing from them.

func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// openAPIDoc is what these tests read of docs/openapi.yaml.
type openAPIDoc struct {
	Paths      map[string]map[string]any `yaml:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]any `yaml:"properties"`
		} `yaml:"schemas"`
	} `yaml:"components"`
}

func readOpenAPI(t *testing.T) openAPIDoc {
	t.Helper()
	var doc openAPIDoc
	if err := yaml.Unmarshal([]byte(readDoc(t, "openapi.yaml")), &doc); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	return doc
}

// protocolMessages are the bodies of the executor protocol, each with the docs/openapi.yaml
// schema that describes it ("" for the executor's side, which openapi.yaml does not cover).
var protocolMessages = map[string]struct {
	v      any
	schema string
}{
	"Register":            {protocol.Register{}, "Register"},
	"RegisterAnswer":      {protocol.RegisterAnswer{}, "RegisterAnswer"},
	"Heartbeat":           {protocol.Heartbeat{}, "Heartbeat"},
	"Deregister":          {protocol.Deregister{}, "Deregister"},
	"DeregisterAnswer":    {protocol.DeregisterAnswer{}, "DeregisterAnswer"},
	"Result":              {protocol.Result{}, "Report"},
	"CallbackAnswer":      {protocol.CallbackAnswer{}, "CallbackAnswer"},
	"ResultBatch":         {protocol.ResultBatch{}, "ResultBatch"},
	"CallbackItem":        {protocol.CallbackItem{}, "CallbackItem"},
	"CallbackBatchAnswer": {protocol.CallbackBatchAnswer{}, "CallbackBatchAnswer"},
	"Error":               {protocol.Error{}, "Error"},
	"Run":                 {protocol.Run{}, ""},
	"RunBatch":            {protocol.RunBatch{}, ""},
	"RunAnswer":           {protocol.RunAnswer{}, ""},
	"RunBatchAnswer":      {protocol.RunBatchAnswer{}, ""},
	"Accepted":            {protocol.Accepted{}, ""},
	"Finished":            {protocol.Finished{}, ""},
	"Kill":                {protocol.Kill{}, ""},
	"KillAnswer":          {protocol.KillAnswer{}, ""},
	"Beat":                {protocol.Beat{}, ""},
}

// jsonFields lists the JSON names of a struct's fields.
func jsonFields(v any) []string {
	var out []string
	rt := reflect.TypeOf(v)
	for i := 0; i < rt.NumField(); i++ {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// protocolSource parses the protocol package (without its tests).
func protocolSource(t *testing.T) []*ast.File {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join("..", "protocol", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

// TestProtocolDocsNameEveryField: every JSON field of every protocol message appears in
// docs/protocol.md (as `field` or as a key of an example), and in the openapi.yaml schema of
// the scheduler's messages; every exported struct of the protocol package with JSON fields
// is one of the messages checked, so a new message cannot skip the check.
func TestProtocolDocsNameEveryField(t *testing.T) {
	md := readDoc(t, "protocol.md")
	api := readOpenAPI(t)
	for name, m := range protocolMessages {
		fields := jsonFields(m.v)
		if len(fields) == 0 {
			t.Errorf("protocol.%s has no JSON field", name)
		}
		for _, f := range fields {
			if !strings.Contains(md, "`"+f+"`") && !strings.Contains(md, `"`+f+`"`) {
				t.Errorf("docs/protocol.md does not name field %q of protocol.%s", f, name)
			}
			if m.schema == "" {
				continue
			}
			s, ok := api.Components.Schemas[m.schema]
			if !ok {
				t.Errorf("docs/openapi.yaml has no schema %s (protocol.%s)", m.schema, name)
				continue
			}
			if _, ok := s.Properties[f]; !ok {
				t.Errorf("docs/openapi.yaml schema %s lacks field %q of protocol.%s", m.schema, f, name)
			}
		}
	}
	for _, f := range protocolSource(t) {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				if !ok || !ts.Name.IsExported() || !hasJSONTag(st) {
					continue
				}
				if _, ok := protocolMessages[ts.Name.Name]; !ok {
					t.Errorf("protocol.%s is a message these docs tests do not check: add it to protocolMessages", ts.Name.Name)
				}
			}
		}
	}
}

func hasJSONTag(st *ast.StructType) bool {
	for _, f := range st.Fields.List {
		if f.Tag != nil && strings.Contains(f.Tag.Value, `json:"`) {
			return true
		}
	}
	return false
}

// TestProtocolPathsAreDocumented: every protocol.Path* constant is one of SchedulerPaths or
// ExecutorPaths, appears in docs/protocol.md, and, for the scheduler's, in openapi.yaml with
// the executor scope.
func TestProtocolPathsAreDocumented(t *testing.T) {
	md := readDoc(t, "protocol.md")
	api := readOpenAPI(t)
	var consts []string
	for _, f := range protocolSource(t) {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !strings.HasPrefix(n.Name, "Path") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok {
						t.Errorf("protocol.%s is not a string literal", n.Name)
						continue
					}
					v, _ := strconv.Unquote(lit.Value)
					consts = append(consts, v)
				}
			}
		}
	}
	if len(consts) < 9 {
		t.Fatalf("found %d Path constants in protocol: %v", len(consts), consts)
	}
	for _, p := range consts {
		if !slices.Contains(protocol.SchedulerPaths, p) && !slices.Contains(protocol.ExecutorPaths, p) {
			t.Errorf("path %s is in neither protocol.SchedulerPaths nor protocol.ExecutorPaths", p)
		}
		if !strings.Contains(md, "`"+p+"`") && !strings.Contains(md, " "+p+"`") {
			t.Errorf("docs/protocol.md does not name %s", p)
		}
	}
	for _, p := range protocol.SchedulerPaths {
		post, ok := api.Paths[p]["post"].(map[string]any)
		if !ok {
			t.Errorf("docs/openapi.yaml does not list POST %s", p)
			continue
		}
		if post["x-axe-scope"] != ScopeExecutor {
			t.Errorf("docs/openapi.yaml: POST %s has x-axe-scope %v, want %s", p, post["x-axe-scope"], ScopeExecutor)
		}
	}
}

// TestOpenAPIScopesMatchTheServer: every route the server authorizes is listed in
// openapi.yaml with the scope the server requires of it (neededScope).
func TestOpenAPIScopesMatchTheServer(t *testing.T) {
	api := readOpenAPI(t)
	store, err := persist.Open(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "axe.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	eng, err := engine.New(engine.Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Stop(context.Background()) })
	srv, err := NewServer(ServerConfig{Engine: eng, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, r := range srv.Routes() {
		method, path, _ := strings.Cut(r, " ")
		if !strings.HasPrefix(path, "/api/v1/") {
			continue // probes, metrics and the console: not the API's scopes
		}
		c := &fasthttp.RequestCtx{}
		c.Request.Header.SetMethod(method)
		want := neededScope(c, path)
		if want == "" {
			want = "any" // a valid token of any scope
		}
		op, ok := api.Paths[path][strings.ToLower(method)].(map[string]any)
		if !ok {
			t.Errorf("docs/openapi.yaml does not list %s", r)
			continue
		}
		if got, _ := op["x-axe-scope"].(string); got != want {
			t.Errorf("docs/openapi.yaml: %s has x-axe-scope %q; the server requires %q", r, got, want)
		}
		checked++
	}
	if checked < 30 {
		t.Errorf("only %d API routes checked", checked)
	}
}

// executorStatusNames are the net/http status names the executor SDK's code may answer with;
// a name the SDK starts using that is not here fails TestExecutorStatusCodesAreDocumented
// until it is added here and documented.
var executorStatusNames = map[string]int{
	"StatusOK": 200, "StatusAccepted": 202, "StatusBadRequest": 400, "StatusUnauthorized": 401,
	"StatusNotFound": 404, "StatusMethodNotAllowed": 405, "StatusRequestTimeout": 408, "StatusConflict": 409,
	"StatusRequestEntityTooLarge": 413, "StatusTooManyRequests": 429, "StatusRequestHeaderFieldsTooLarge": 431,
	"StatusInternalServerError": 500, "StatusServiceUnavailable": 503,
}

var statusName = regexp.MustCompile(`\bhttp\.(Status[A-Za-z]+)\b`)

// TestExecutorStatusCodesAreDocumented: every status the SDK's server code (executor/, the
// code behind axe agent too) answers with is named in the "Executor endpoints" part of
// docs/protocol.md.
func TestExecutorStatusCodesAreDocumented(t *testing.T) {
	md := readDoc(t, "protocol.md")
	start, end := strings.Index(md, "## Executor endpoints"), strings.Index(md, "## TLS")
	if start < 0 || end < start {
		t.Fatal("docs/protocol.md has no Executor endpoints section before TLS")
	}
	section := md[start:end]
	files := []string{"server.go", "executor.go", "epoch.go"}
	seen := map[string]bool{}
	for _, f := range files {
		src, err := os.ReadFile(filepath.Join("..", "executor", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range statusName.FindAllStringSubmatch(string(src), -1) {
			seen[m[1]] = true
		}
	}
	if len(seen) < 8 {
		t.Fatalf("found only %v in the executor's code", seen)
	}
	for name := range seen {
		code, ok := executorStatusNames[name]
		if !ok {
			t.Errorf("the executor answers http.%s, which this test does not know: add it to executorStatusNames and document it", name)
			continue
		}
		if !regexp.MustCompile("`" + strconv.Itoa(code) + "[ `]").MatchString(section) {
			t.Errorf("docs/protocol.md (Executor endpoints) does not name status %d (http.%s), which the executor answers", code, name)
		}
	}
}
