package rules

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
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
	f("scrape keys accepted", "global: {scrape_interval: 15s, scrape_timeout: 5s, query_log_file: q.log, body_size_limit: 10MB, sample_limit: 5}\n", "",
		func(t *testing.T, c *Config) {
			if time.Duration(c.Global.EvaluationInterval) != time.Minute {
				t.Errorf("evaluation interval %v", c.Global.EvaluationInterval)
			}
		})
	f("scrape timeout", "global: {scrape_interval: 5s, scrape_timeout: 10s}\n", "global scrape timeout greater than scrape interval", nil)
	f("bad external label", "global: {external_labels: {'': x}}\n", `"" is not a valid label name`, nil)
	f("unknown alerting key", "alerting: {alertmanager: []}\n", "field alertmanager not found", nil)
	f("unknown alertmanager key", "alerting: {alertmanagers: [{static_configs: [{targets: [a:1]}], timout: 1s}]}\n", "field timout not found", nil)
	f("unknown static key", "alerting: {alertmanagers: [{static_configs: [{targets: [a:1], label: {a: b}}]}]}\n", "field label not found", nil)
	f("file sd", "alerting: {alertmanagers: [{file_sd_configs: [{files: [x.json]}], dns_sd_configs: [{names: [x]}]}]}\n",
		"dns_sd_configs, file_sd_configs not found among the supported keys: Alertmanagers are given by static_configs only", nil)
	f("sigv4", "alerting: {alertmanagers: [{sigv4: {region: x}}]}\n", "field sigv4 not found", nil)
	f("url target", "alerting: {alertmanagers: [{static_configs: [{targets: ['http://a:1']}]}]}\n", `"http://a:1" is not a valid hostname`, nil)
	f("url target relabelled", "alerting: {alertmanagers: [{static_configs: [{targets: ['http://a:1']}], relabel_configs: [{source_labels: [__address__], regex: 'http://(.*)', target_label: __address__}]}]}\n", "",
		func(t *testing.T, c *Config) {})
	f("null relabel", "alerting: {alert_relabel_configs: [null]}\n", "empty or null alert relabeling rule", nil)
	f("null target relabel", "alerting: {alertmanagers: [{relabel_configs: [null]}]}\n", "empty or null Alertmanager target relabeling rule", nil)
	f("bad relabel", "alerting: {alert_relabel_configs: [{action: replace}]}\n", "requires 'target_label' value", nil)
	f("null alertmanager", "alerting: {alertmanagers: [null]}\n", "empty or null Alertmanager config", nil)
	f("two auths", "alerting: {alertmanagers: [{basic_auth: {username: a}, authorization: {credentials: b}}]}\n", "at most one of basic_auth", nil)
	f("bad timeout", "alerting: {alertmanagers: [{timeout: 1x}]}\n", `unknown unit "x"`, nil)
	f("alertmanager defaults", "alerting: {alertmanagers: [{static_configs: [{targets: [a:1]}]}]}\n", "", func(t *testing.T, c *Config) {
		am := c.Alerting.Alertmanagers[0]
		if am.Scheme != "http" || time.Duration(am.Timeout) != 10*time.Second || am.APIVersion != "v2" || !am.HTTPClientConfig.FollowRedirects || !am.HTTPClientConfig.EnableHTTP2 {
			t.Errorf("defaults: %+v", am)
		}
	})
	f("relative TLS files", "alerting: {alertmanagers: [{tls_config: {ca_file: ca.pem, cert_file: /abs/c.pem, key_file: k.pem}, authorization: {credentials_file: tok}}]}\n", "",
		func(t *testing.T, c *Config) {
			h := c.Alerting.Alertmanagers[0].HTTPClientConfig
			if h.TLSConfig.CAFile != "/etc/shale/ca.pem" || h.TLSConfig.CertFile != "/abs/c.pem" || h.TLSConfig.KeyFile != "/etc/shale/k.pem" ||
				h.Authorization.CredentialsFile != "/etc/shale/tok" {
				t.Errorf("paths %+v %+v", h.TLSConfig, h.Authorization)
			}
		})
	f("service discovery", "alerting: {alertmanagers: [{kubernetes_sd_configs: [{role: pod}]}]}\n", "kubernetes_sd_configs not found", nil)
	f("api v1", "alerting: {alertmanagers: [{api_version: v1, static_configs: [{targets: [a:1]}]}]}\n", "v1", nil)
	f("glob in a folder", "rule_files: ['a/*/*.yml']\n", "invalid rule file path", nil)
	f("bad pattern", "rule_files: ['[']\n", "", func(t *testing.T, c *Config) {
		if err := CheckRuleFiles(c, parser.NewParser(parser.Options{}), nil); err == nil || !strings.Contains(err.Error(), "syntax error in pattern") {
			t.Errorf("CheckRuleFiles: %v", err)
		}
	})
}

// TestFileConfigAsPrometheus parses configs with Prometheus' own config
// package and with Parse: both accept or both refuse each, and what they
// accept means the same.
func TestFileConfigAsPrometheus(t *testing.T) {
	for _, text := range []string{
		"{}\n",
		"rule_files: [a.yml, 'r/*.yml', /abs/b.yml]\n",
		"global: {evaluation_interval: 15s, rule_query_offset: 30s, external_labels: {cluster: eu1, replica: '1'}, scrape_interval: 10s}\n",
		"global: {scrape_interval: 5s, scrape_timeout: 10s}\n",
		"global: {}\nalerting: {}\n",
		`alerting:
  alert_relabel_configs:
  - {source_labels: [severity], regex: debug, action: drop}
  - {source_labels: [a, b], separator: '-', target_label: c, replacement: 'x$1'}
  alertmanagers:
  - static_configs: [{targets: ['am1:9093', 'am2:9093'], labels: {dc: x}}, {targets: ['am3:9093']}]
    timeout: 3s
    path_prefix: /am
    scheme: https
    basic_auth: {username: u, password_file: secret}
    tls_config: {insecure_skip_verify: true, ca_file: ca.pem, server_name: am}
    proxy_url: http://proxy:3128
    follow_redirects: false
    enable_http2: false
    relabel_configs:
    - {source_labels: [__address__], regex: 'am3:.*', action: drop}
    alert_relabel_configs:
    - {target_label: via, replacement: am}
  - static_configs: [{targets: ['am4:9093']}]
    authorization: {type: Bearer, credentials_file: token}
    oauth2: null
  - api_version: v2
    static_configs: [{targets: ['am5:9093']}]
    oauth2: {client_id: c, client_secret: s, token_url: 'http://t/token', scopes: [a]}
`,
		"alerting: {alertmanagers: [{api_version: v1, static_configs: [{targets: [a:1]}]}]}\n",
		"alerting: {alertmanagers: [{static_configs: [{targets: ['http://a:1']}]}]}\n",
		"alerting: {alertmanagers: [{basic_auth: {username: a}, authorization: {credentials: b}}]}\n",
		"alerting: {alert_relabel_configs: [{action: replace}]}\n",
		"alerting: {alert_relabel_configs: [null]}\n",
		"alerting: {alertmanagers: [{timeout: 1x}]}\n",
		"global: {evaluation_interval: 1x}\n",
		"global: {external_labels: {'': x}}\n",
		"global: {nonsense: 1}\n",
		"rule_files: ['a/*/b.yml']\n",
		"alerting: {alertmanagers: [{tls_config: {ca: x, ca_file: y}}]}\n",
		"global: {metric_name_validation_scheme: legacy, external_labels: {ok_name: x}}\nalerting: {alert_relabel_configs: [{target_label: ok, replacement: x}]}\n",
		"global: {metric_name_validation_scheme: legacy, external_labels: {'é': x}}\n",
		"global: {metric_name_validation_scheme: legacy}\nalerting: {alert_relabel_configs: [{target_label: 'é', replacement: x}]}\n",
		"global: {metric_name_validation_scheme: legacy}\nalerting: {alertmanagers: [{relabel_configs: [{target_label: 'a.b', replacement: x}]}]}\n",
		"global: {metric_name_validation_scheme: utf8, external_labels: {'é': x}}\nalerting: {alert_relabel_configs: [{target_label: 'é', replacement: x}]}\n",
		"global: {metric_name_validation_scheme: bogus}\n",
	} {
		t.Run(text, func(t *testing.T) {
			theirs, terr := config.Load(text, nil)
			_, oerr := parseSections(t, text, "")
			if (terr == nil) != (oerr == nil) {
				t.Fatalf("Prometheus: %v; Shale: %v", terr, oerr)
			}
			if terr != nil {
				// Prometheus' message, without the YAML line and Go type.
				lines := strings.Split(terr.Error(), "\n")
				want := regexp.MustCompile(`^\s*line \d+: | in type .*$`).ReplaceAllString(lines[len(lines)-1], "")
				if !strings.Contains(oerr.Error(), want) {
					t.Errorf("Shale's refusal %q lacks Prometheus' %q", oerr, want)
				}
				return
			}
			theirs.SetDirectory("/etc/shale")
			ours, err := parseSections(t, text, "/etc/shale")
			require.NoError(t, err)
			require.Equal(t, theirs.GlobalConfig.EvaluationInterval, ours.Global.EvaluationInterval)
			require.Equal(t, theirs.GlobalConfig.RuleQueryOffset, ours.Global.RuleQueryOffset)
			require.Equal(t, theirs.GlobalConfig.ExternalLabels.String(), ours.Global.ExternalLabels.String())
			require.Equal(t, fmt.Sprint(theirs.RuleFiles), fmt.Sprint(ours.RuleFiles))
			yml := func(v any) string {
				b, err := yaml.Marshal(v)
				require.NoError(t, err)
				return string(b)
			}
			require.Equal(t, yml(theirs.AlertingConfig.AlertRelabelConfigs), yml(ours.Alerting.AlertRelabelConfigs))
			require.Len(t, ours.Alerting.Alertmanagers, len(theirs.AlertingConfig.AlertmanagerConfigs))
			for i, tam := range theirs.AlertingConfig.AlertmanagerConfigs {
				oam := ours.Alerting.Alertmanagers[i]
				require.Equal(t, tam.Scheme, oam.Scheme)
				require.Equal(t, tam.PathPrefix, oam.PathPrefix)
				require.Equal(t, tam.Timeout, oam.Timeout)
				require.Equal(t, string(tam.APIVersion), oam.APIVersion)
				require.Equal(t, tam.HTTPClientConfig, oam.HTTPClientConfig)
				require.Equal(t, yml(tam.RelabelConfigs), yml(oam.RelabelConfigs))
				require.Equal(t, yml(tam.AlertRelabelConfigs), yml(oam.AlertRelabelConfigs))
				var want, got []string
				for _, sd := range tam.ServiceDiscoveryConfigs {
					for _, tg := range sd.(discovery.StaticConfig) {
						for _, tgt := range tg.Targets {
							want = append(want, fmt.Sprint(tgt, tg.Labels))
						}
					}
				}
				for _, sc := range oam.StaticConfigs {
					for _, tgt := range sc.Targets {
						got = append(got, fmt.Sprint(model.LabelSet{model.AddressLabel: model.LabelValue(tgt)}, sc.Labels))
					}
				}
				require.Equal(t, want, got)
			}
		})
	}
}
