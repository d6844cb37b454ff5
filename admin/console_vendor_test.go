package admin_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestConsoleVendored: every file the console vendors is listed in vendor/README.md with
// the sha256 it was published with, matches it, and has its licence beside it; and no
// console file loads a script or style from another origin.
func TestConsoleVendored(t *testing.T) {
	dir := filepath.Join("console", "ui", "vendor")
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([^`]+)` \\|.*\\| ([0-9a-f]{64}) \\|$")
	listed := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(string(readme), -1) {
		listed[m[1]] = m[2]
	}
	if len(listed) == 0 {
		t.Fatal("vendor/README.md lists no file with its sha256")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if name == "README.md" || strings.HasSuffix(name, ".LICENSE") {
			continue
		}
		want, ok := listed[name]
		if !ok {
			t.Errorf("vendor/%s is not listed in vendor/README.md", name)
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != want {
			t.Errorf("vendor/%s: sha256 %s, README says %s", name, got, want)
		}
		lic := strings.SplitN(name, ".", 2)[0] + ".LICENSE"
		if _, err := os.Stat(filepath.Join(dir, lic)); err != nil {
			t.Errorf("vendor/%s has no %s beside it", name, lic)
		}
	}
	for name := range listed {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("vendor/README.md lists %s, which is not there", name)
		}
	}
	remote := regexp.MustCompile(`(?i)(import[^;]*from\s*['"]https?:|src=["']https?:|href=["']https?:[^"']*\.(js|css))`)
	err = filepath.WalkDir("console", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(p, ".js") || strings.HasSuffix(p, ".html")) {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if m := remote.Find(b); m != nil {
			t.Errorf("%s loads from another origin: %s", p, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
