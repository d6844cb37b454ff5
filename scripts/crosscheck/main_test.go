package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A module whose Windows-only file does not type-check fails for windows/amd64 only, and the
// message names the file and line.
func TestCheckFindsPlatformError(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":          "module example.com/m\n\ngo 1.26\n",
		"main.go":         "package main\n\nfunc main() { println(name()) }\n",
		"name_other.go":   "//go:build !windows\n\npackage main\n\nfunc name() string { return \"other\" }\n",
		"name_windows.go": "package main\n\nfunc name() string { return undefinedName }\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	var out strings.Builder
	n, err := check(dir, ".", "linux/amd64", &out)
	if err != nil || n != 0 {
		t.Fatalf("linux/amd64: %d errors, %v:\n%s", n, err, &out)
	}

	out.Reset()
	n, err = check(dir, ".", "windows/amd64", &out)
	if err != nil {
		t.Fatal(err)
	}
	want := "windows/amd64: name_windows.go:3:29: undefined: undefinedName"
	if n != 1 || !strings.Contains(out.String(), want) {
		t.Fatalf("windows/amd64: %d errors:\n%s\nwant one, %q", n, &out, want)
	}
}

func TestCheckRejectsBadTarget(t *testing.T) {
	if _, err := check(t.TempDir(), ".", "windows", new(strings.Builder)); err == nil {
		t.Fatal("a target without GOARCH was accepted")
	}
}
