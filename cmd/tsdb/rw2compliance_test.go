package main

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/shaledb/shale/internal/e2e"
)

// rw2ComplianceRuns is about how many tests and subtests the pinned remote
// write 2.0 receiver compliance suite runs against one receiver (456 at
// v0.0.0-20260223092825-818283e1171e): far fewer means it did not run them.
const rw2ComplianceRuns = 400

var complianceResult = regexp.MustCompile(`(?m)^\s*--- (PASS|FAIL|SKIP): (\S+)`)

// TestRemoteWriteCompliance runs the Prometheus project's remote write 2.0
// receiver compliance suite (github.com/prometheus/compliance/remotewrite,
// built by make tools into .tools/rw2-compliance-receiver) against the
// server: every test, MUST, SHOULD and MAY, must pass. The suite accepts a 4xx
// where a receiver may refuse what it sends and reads nothing back, so the
// test then checks that the server still serves and holds what was sent.
func TestRemoteWriteCompliance(t *testing.T) {
	skipEndToEnd(t)
	suite := e2e.RequireBinary(t, "rw2-compliance-receiver", "make tools")
	t.Parallel()
	dir := t.TempDir()
	s := startShale(t, "--storage.path="+dir+"/data")
	defer s.stop(t)
	cfg := writeFile(t, dir, "compliance.yml", fmt.Sprintf(`remote_write:
  - name: shale
    url: %s/api/v1/write
`, s.url))

	cmd := exec.Command(suite, "-test.v", "-test.count=1", "-test.timeout=5m")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PROMETHEUS_RW2_COMPLIANCE_CONFIG_FILE="+cfg)
	out, err := cmd.CombinedOutput()
	counts := map[string]int{}
	var failed []string
	for _, m := range complianceResult.FindAllStringSubmatch(string(out), -1) {
		counts[m[1]]++
		if m[1] == "FAIL" {
			failed = append(failed, m[2])
		}
	}
	t.Logf("compliance suite: %d passed, %d failed, %d skipped", counts["PASS"], counts["FAIL"], counts["SKIP"])
	if err != nil || len(failed) > 0 {
		t.Fatalf("compliance suite: %v; failed: %s\n%s", err, strings.Join(failed, ", "), out)
	}
	if counts["PASS"] < rw2ComplianceRuns {
		t.Fatalf("compliance suite passed only %d tests, want at least %d:\n%s", counts["PASS"], rw2ComplianceRuns, out)
	}

	// What the suite sent is stored and the server still answers.
	var v []vectorSample
	queryResult(t, s.url, "/api/v1/query", url.Values{"query": {`count({__name__=~".+"})`}}, &v)
	if len(v) != 1 {
		t.Fatalf("count of the series stored after the compliance suite: %v", v)
	}
	if n, _ := v[0].Value[1].(string); n == "" || n == "0" {
		t.Errorf("the compliance suite's series are not stored: count %q", n)
	} else {
		t.Logf("series stored: %s", n)
	}
}
