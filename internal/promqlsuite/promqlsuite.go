// Package promqlsuite hands out Prometheus' own PromQL test files, those of
// the module this build uses, to the tests of Shale's storage and engine.
// Only tests import it.
package promqlsuite

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// skipped are the upstream test files Shale's storage does not pass, and
// why.
var skipped = map[string]string{
	"start_timestamps.test": "Shale does not store per-sample start (created) timestamps; AtST is always 0",
}

// Run calls test with the script of each upstream PromQL test file, in a
// subtest named after the file. The files Shale's storage does not pass are
// skipped, saying why.
func Run(t *testing.T, test func(t *testing.T, script string)) {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/prometheus/prometheus").Output()
	if err != nil {
		t.Fatalf("locate the prometheus module: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "promql", "promqltest", "testdata")
	files, err := filepath.Glob(filepath.Join(dir, "*.test"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no PromQL test files in %s (%v)", dir, err)
	}
	for _, fn := range files {
		name := filepath.Base(fn)
		t.Run(name, func(t *testing.T) {
			if why, ok := skipped[name]; ok {
				t.Skip(why)
			}
			script, err := os.ReadFile(fn)
			if err != nil {
				t.Fatal(err)
			}
			test(t, string(script))
		})
	}
}
