package rules

import (
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"

	"github.com/shaledb/shale/internal/e2e"
)

func checkFile(path string) error {
	return CheckRuleFiles(&Config{RuleFiles: []string{path}}, parser.NewParser(parser.Options{}), nil)
}

// positionsDiffer are the files for which Prometheus 3 gives another line
// and column than Debian's promtool (2.x) for the same error.
var positionsDiffer = map[string]bool{"dup_group.yml": true}

var position = regexp.MustCompile(`\d+:\d+: `)

// TestCheckRuleFilesAgreesWithPromtool: a rule file that `promtool check
// rules` accepts is accepted, and one it refuses is refused with every line
// of promtool's message.
func TestCheckRuleFilesAgreesWithPromtool(t *testing.T) {
	promtool := e2e.RequireBinary(t, "promtool", "apt-get install prometheus")
	files, err := filepath.Glob("testdata/promtool/*.yml")
	if err != nil || len(files) < 5 {
		t.Fatalf("rule files: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			cmd := exec.Command(promtool, "check", "rules", f)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			perr := cmd.Run()
			var exit *exec.ExitError
			if perr != nil && !errors.As(perr, &exit) {
				t.Fatalf("run promtool: %v", perr)
			}
			ours := checkFile(f)
			if perr == nil {
				if ours != nil {
					t.Fatalf("promtool accepts the file, Shale refuses it: %v", ours)
				}
				return
			}
			if ours == nil {
				t.Fatalf("promtool refuses the file, Shale accepts it; promtool says:\n%s", stderr.String())
			}
			got := ours.Error()
			if positionsDiffer[filepath.Base(f)] {
				got = position.ReplaceAllString(got, "")
			}
			for _, line := range strings.Split(stderr.String(), "\n") {
				if strings.TrimSpace(line) == "" || strings.TrimSpace(line) == "FAILED:" {
					continue
				}
				if positionsDiffer[filepath.Base(f)] {
					line = position.ReplaceAllString(line, "")
				}
				if !strings.Contains(got, line) {
					t.Errorf("Shale's refusal lacks promtool's line %q:\n%s", line, ours)
				}
			}
		})
	}
}

// TestCheckRuleFilesPrometheus3 checks files that use what Prometheus 3
// added to the format (group labels and query_offset, UTF-8 names), which
// Debian's promtool (2.x) still refuses.
func TestCheckRuleFilesPrometheus3(t *testing.T) {
	files, _ := filepath.Glob("testdata/v3/*.yml")
	if len(files) == 0 {
		t.Fatal("no files")
	}
	for _, f := range files {
		if err := checkFile(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func parseSections(t *testing.T, text, dir string) (*Config, error) {
	t.Helper()
	var fc FileConfig
	dec := yaml.NewDecoder(strings.NewReader(text))
	dec.KnownFields(true)
	if err := dec.Decode(&fc); err != nil {
		t.Fatalf("decode: %v", err)
	}
	return fc.Parse(dir, nil)
}

func TestFileConfigParse(t *testing.T) {
	f := func(name, text, wantErr string, check func(t *testing.T, c *Config)) {
		t.Helper()
		t.Run(name, func(t *testing.T) {
			c, err := parseSections(t, text, "/etc/shale")
			if wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), wantErr) {
					t.Fatalf("error %v, want one containing %q", err, wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			check(t, c)
		})
	}
	f("defaults", "rule_files: []\n", "", func(t *testing.T, c *Config) {
		if time.Duration(c.Global.EvaluationInterval) != time.Minute || len(c.Alerting.Alertmanagers) != 0 {
			t.Errorf("defaults: %+v", c.Global)
		}
	})
	f("full", `global:
  evaluation_interval: 15s
  rule_query_offset: 10s
  external_labels: {cluster: eu1}
rule_files: [rules/*.yml, /abs/x.yml]
alerting:
  alert_relabel_configs:
  - {source_labels: [severity], regex: debug, action: drop}
  alertmanagers:
  - static_configs: [{targets: ['am1:9093', 'am2:9093']}]
    timeout: 3s
    path_prefix: /am
    scheme: https
    api_version: v2
    basic_auth: {username: u, password_file: secret}
    tls_config: {insecure_skip_verify: true}
`, "", func(t *testing.T, c *Config) {
		if got := c.RuleFiles; len(got) != 2 || got[0] != "/etc/shale/rules/*.yml" || got[1] != "/abs/x.yml" {
			t.Errorf("rule files %v: want paths relative to the config file's folder", got)
		}
		if c.Global.ExternalLabels.Get("cluster") != "eu1" || time.Duration(c.Global.RuleQueryOffset) != 10*time.Second ||
			time.Duration(c.Global.EvaluationInterval) != 15*time.Second {
			t.Errorf("global %+v", c.Global)
		}
		am := c.Alerting.Alertmanagers[0]
		if time.Duration(am.Timeout) != 3*time.Second || am.PathPrefix != "/am" || am.Scheme != "https" ||
			am.HTTPClientConfig.BasicAuth.PasswordFile != "/etc/shale/secret" || len(c.Alerting.AlertRelabelConfigs) != 1 {
			t.Errorf("alertmanager config %+v", am)
		}
		if sc := am.StaticConfigs; len(sc) != 1 || len(sc[0].Targets) != 2 {
			t.Errorf("static targets %v", sc)
		}
	})
	f("unknown global key", "global: {evaluation_intervall: 1s}\n", "field evaluation_intervall not found", nil)
	f("service discovery", "alerting: {alertmanagers: [{kubernetes_sd_configs: [{role: pod}]}]}\n", "kubernetes_sd_configs not found", nil)
	f("api v1", "alerting: {alertmanagers: [{api_version: v1, static_configs: [{targets: [a:1]}]}]}\n", "v1", nil)
	f("glob in a folder", "rule_files: ['a/*/*.yml']\n", "invalid rule file path", nil)
	f("bad pattern", "rule_files: ['[']\n", "", func(t *testing.T, c *Config) {
		if err := CheckRuleFiles(c, parser.NewParser(parser.Options{}), nil); err == nil || !strings.Contains(err.Error(), "syntax error in pattern") {
			t.Errorf("CheckRuleFiles: %v", err)
		}
	})
}
