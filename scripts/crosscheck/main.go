// Command crosscheck type-checks a package and everything it imports for other platforms,
// for scripts/test.sh: what breaks on a platform is build-tagged code, and a type check from
// source finds that without compiling anything (go/packages then never runs go list -export).
//
//	go run ./scripts/crosscheck [-pkg ./cmd/axe] linux/arm64 windows/amd64 ...
//
// It prints every error, each with its target, and exits 1 if there is any.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/tools/go/packages"
)

func main() {
	pkg := flag.String("pkg", "./cmd/axe", "package pattern to check")
	jobs := flag.Int("j", 2, "targets checked at a time (each holds its packages' syntax and types: under 1 GB for ./cmd/axe)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: crosscheck [-pkg pattern] [-j n] GOOS/GOARCH...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 || *jobs < 1 {
		flag.Usage()
		os.Exit(2)
	}
	targets := flag.Args()
	out := make([]bytes.Buffer, len(targets))
	bad := make([]bool, len(targets))
	sem := make(chan struct{}, *jobs)
	var wg sync.WaitGroup
	for i, target := range targets {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			n, err := check(".", *pkg, target, &out[i])
			if err != nil {
				fmt.Fprintf(&out[i], "%s: %v\n", target, err)
			}
			bad[i] = err != nil || n > 0
		})
	}
	wg.Wait()
	failed := false
	for i := range targets {
		os.Stderr.Write(out[i].Bytes())
		failed = failed || bad[i]
	}
	if failed {
		os.Exit(1)
	}
}

// mode loads every package, dependencies included, from source and type-checks it. NeedDeps
// with NeedTypes is what keeps go/packages from asking go list for export data (-export),
// which would compile each dependency.
const mode = packages.NeedName | packages.NeedFiles | packages.NeedImports | packages.NeedDeps |
	packages.NeedSyntax | packages.NeedTypes

// check type-checks pattern, loaded in dir, and its dependencies for target (GOOS/GOARCH)
// without cgo, writes each error to w as "target: file:line:col: message" and returns how
// many there were. An error is returned when the packages could not be loaded at all.
func check(dir, pattern, target string, w io.Writer) (int, error) {
	goos, goarch, ok := strings.Cut(target, "/")
	if !ok || goos == "" || goarch == "" {
		return 0, fmt.Errorf("target %q is not GOOS/GOARCH", target)
	}
	cfg := &packages.Config{
		Mode: mode,
		Dir:  dir,
		Env:  append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0"),
	}
	pkgs, err := packages.Load(cfg, pattern)
	if err != nil {
		return 0, err
	}
	if len(pkgs) == 0 {
		return 0, fmt.Errorf("no packages match %s", pattern)
	}
	base, _ := filepath.Abs(dir)
	n := 0
	seen := make(map[*packages.Module]bool)
	for p := range packages.Postorder(pkgs) {
		for _, e := range p.Errors {
			fmt.Fprintf(w, "%s: %s\n", target, relPos(base, e))
			n++
		}
		if m := p.Module; m != nil && m.Error != nil && !seen[m] {
			seen[m] = true
			fmt.Fprintf(w, "%s: %s\n", target, m.Error.Err)
			n++
		}
	}
	return n, nil
}

// relPos is e as packages.Error prints it, its file named relative to base when inside it.
func relPos(base string, e packages.Error) string {
	if rel, err := filepath.Rel(base, e.Pos); err == nil && base != "" && filepath.IsAbs(e.Pos) &&
		!strings.HasPrefix(rel, "..") {
		e.Pos = rel
	}
	return e.Error()
}
