// Package depcheck holds the test that keeps Shale's package dependencies
// pointing one way, as docs/design.md ("Dependencies") lays them out.
package depcheck

import (
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/shaledb/shale"

// allowed maps a Shale package (relative to the module) to the Shale
// packages it may import: the table of docs/design.md. A package not listed
// may import none. Entries ending in "/..." cover the subtree.
var allowed = map[string][]string{
	"cmd/...":                       {"..."},
	"promql":                        {"storage"},
	"remotewrite":                   {},
	"rules":                         {},
	"importer":                      {},
	"web":                           {},
	"storage":                       {"storage/lsm", "index", "gorilla"},
	"storage/lsm":                   {"storage/lsm/sst", "storage/objstore", "cache"},
	"storage/lsm/sst":               {"cache"},
	"storage/objstore":              {},
	"storage/objstore/objstoretest": {"storage/objstore", "internal/e2e", "internal/versitygw"},
	"internal/versitygw":            {"storage/objstore", "internal/proc"},
	"index":                         {},
	"gorilla":                       {},
	"cache":                         {},
	"cache/cachetest":               {"cache"},
	"internal/e2e":                  {"internal/proc"},
	"internal/proc":                 {},
	"internal/cputime":              {},
	"internal/fuzzseed":             {},
	"internal/promqlsuite":          {},
	"internal/seriestest":           {},
	"internal/depcheck":             {},
	"internal/doclinks":             {},
	"corrupt":                       {},
	"internal/promreg":              {},
	"internal/jsonenc":              {},
	"internal/httpcompress":         {},
	"internal/extralabel":           {},
	"internal/race":                 {},
	"internal/writeback":            {},
	"internal/fsync":                {},
}

// leaves may be imported by every package. Each imports no Shale package (its
// rule above is empty), so importing one can never close a cycle.
var leaves = []string{"corrupt", "internal/promreg", "internal/jsonenc", "internal/httpcompress", "internal/extralabel", "internal/writeback", "internal/fsync"}

// upstreamOnly lists upstream packages only one Shale package may import.
// An empty owner means none may (their tests may): web/api/v1 would bring
// rules, scrape, service discovery and cloud SDKs back into the binary.
var upstreamOnly = map[string]string{
	"github.com/prometheus/prometheus/promql":     "promql",
	"github.com/prometheus/prometheus/web/api/v1": "",
	// Rules evaluate and notify with Shale's own code: the upstream rule
	// manager and notifier bring config, service discovery, sigv4 and the
	// Alertmanager API models.
	"github.com/prometheus/prometheus/rules":     "",
	"github.com/prometheus/prometheus/notifier":  "",
	"github.com/prometheus/prometheus/discovery": "",
	// OTLP is decoded and translated with Shale's own code: pdata and the
	// upstream translator bring the collector's packages and config, and
	// config brings Azure, Google auth and sigv4.
	"github.com/prometheus/prometheus/config":                                              "",
	"github.com/prometheus/prometheus/storage/remote/otlptranslator/prometheusremotewrite": "",
	"go.opentelemetry.io/collector/pdata/pcommon":                                          "",
	"go.opentelemetry.io/collector/pdata/pmetric":                                          "",
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp":                              "",
	// The whole upstream database (and wlog, which links testing and
	// testify): the importer reads blocks and WALs with the format packages.
	"github.com/prometheus/prometheus/tsdb":      "",
	"github.com/prometheus/prometheus/tsdb/wlog": "",
}

// upstreamAlso lists, for an upstream package of upstreamOnly, the other
// Shale packages that may import it too (none now: promql and rules serve
// the HTTP API with their own code).
var upstreamAlso = map[string][]string{}

type pkg struct {
	ImportPath string
	Imports    []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	return goList[pkg](t, "ImportPath,Imports")
}

// goList runs go list over the module's packages and decodes the fields
// asked for (a comma-separated list of its JSON's fields) into one T a
// package.
func goList[T any](t *testing.T, fields string) []T {
	t.Helper()
	cmd := exec.Command("go", "list", "-json="+fields, module+"/...")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	var pkgs []T
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p T
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list found no packages")
	}
	return pkgs
}

func matches(pattern, rel string) bool {
	if pattern == "..." {
		return true
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return rel == base || strings.HasPrefix(rel, base+"/")
	}
	return pattern == rel
}

func rulesFor(rel string) ([]string, bool) {
	if r, ok := allowed[rel]; ok {
		return r, true
	}
	for pattern, r := range allowed {
		if strings.HasSuffix(pattern, "/...") && matches(pattern, rel) {
			return r, true
		}
	}
	return nil, false
}

// violations returns one message per import that breaks the rules.
func violations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		rules, known := rulesFor(rel)
		if !known {
			out = append(out, fmt.Sprintf("package %s has no rule in depcheck's allowed table; add one that follows the design", rel))
			continue
		}
		for _, imp := range p.Imports {
			if owner, ok := upstreamOnly[imp]; ok && slices.Contains(upstreamAlso[imp], rel) {
				continue
			} else if ok && owner == "" {
				out = append(out, fmt.Sprintf("%s imports %s, which no package may import", rel, imp))
			} else if ok && rel != owner && !strings.HasPrefix(rel, "cmd/") {
				out = append(out, fmt.Sprintf("%s imports %s, which only %s may import", rel, imp, owner))
			}
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			target := strings.TrimPrefix(imp, module+"/")
			ok := slices.Contains(leaves, target)
			for _, a := range rules {
				if matches(a, target) {
					ok = true
					break
				}
			}
			// A test-support package (objstoretest, like net/http/httptest)
			// may import its parent when its rule names it; nothing else may.
			if rel != "" && strings.HasPrefix(rel, target+"/") && !slices.Contains(rules, target) {
				out = append(out, fmt.Sprintf("%s imports its parent %s", rel, target))
				continue
			}
			if !ok {
				out = append(out, fmt.Sprintf("%s imports %s against the dependency direction (allowed: %v)", rel, target, rules))
			}
		}
	}
	return out
}

func TestImportDirection(t *testing.T) {
	for _, v := range violations(listPackages(t)) {
		t.Error(v)
	}
}

func TestViolationsDetected(t *testing.T) {
	bad := []pkg{
		{ImportPath: module + "/gorilla", Imports: []string{module + "/storage/lsm"}},
		{ImportPath: module + "/storage/lsm", Imports: []string{module + "/storage"}},
		{ImportPath: module + "/storage", Imports: []string{"github.com/prometheus/prometheus/promql"}},
		{ImportPath: module + "/newpkg"},
		{ImportPath: module + "/storage", Imports: []string{module + "/index", "fmt"}},
		{ImportPath: module + "/gorilla", Imports: []string{module + "/corrupt"}},
		{ImportPath: module + "/corrupt", Imports: []string{module + "/gorilla"}},
		{ImportPath: module + "/cmd/tsdb", Imports: []string{"github.com/prometheus/prometheus/web/api/v1"}},
	}
	got := violations(bad)
	if len(got) != 6 {
		t.Fatalf("want 6 violations (gorilla->lsm, lsm->parent, storage->upstream promql, unknown package, leaf->gorilla, cmd->web/api/v1), got %d: %q", len(got), got)
	}
}

func TestMatches(t *testing.T) {
	for _, c := range []struct {
		pattern, rel string
		want         bool
	}{
		{"storage", "storage", true},
		{"storage", "storage/lsm", false},
		{"cmd/...", "cmd/tsdb", true},
		{"cmd/...", "cmdx", false},
		{"...", "anything/at/all", true},
	} {
		if got := matches(c.pattern, c.rel); got != c.want {
			t.Errorf("matches(%q, %q) = %v, want %v", c.pattern, c.rel, got, c.want)
		}
	}
}
