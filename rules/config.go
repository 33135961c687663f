package rules

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// FileConfig holds the sections of Shale's config file that Prometheus'
// config file has too, with Prometheus' keys and meaning: global
// (evaluation_interval, rule_query_offset, external_labels), rule_files and
// alerting. Embed it inline in the file's YAML struct; Parse reads it with
// Prometheus' own config code, so what a Prometheus server refuses is refused
// with the same message.
type FileConfig struct {
	Global    yaml.Node `yaml:"global,omitempty"`
	RuleFiles yaml.Node `yaml:"rule_files,omitempty"`
	Alerting  yaml.Node `yaml:"alerting,omitempty"`
}

// Empty reports whether none of the sections is present.
func (f *FileConfig) Empty() bool {
	return f.Global.Kind == 0 && f.RuleFiles.Kind == 0 && f.Alerting.Kind == 0
}

// Parse returns the Prometheus configuration the sections describe, with
// relative paths (rule files, TLS and password files) taken from dir, the
// config file's folder. Only the sections above are set; a Prometheus key
// that does not belong in them (scrape_interval aside, which global allows)
// is refused. It does not read the rule files: see CheckRuleFiles.
func (f *FileConfig) Parse(dir string, logger *slog.Logger) (*config.Config, error) {
	doc := map[string]*yaml.Node{}
	for key, n := range map[string]*yaml.Node{"global": &f.Global, "rule_files": &f.RuleFiles, "alerting": &f.Alerting} {
		if n.Kind != 0 {
			doc[key] = n
		}
	}
	text, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encode rule and alerting sections: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg, err := config.Load(string(text), logger)
	if err != nil {
		return nil, err
	}
	if dir != "" {
		cfg.SetDirectory(dir)
	}
	for i, am := range cfg.AlertingConfig.AlertmanagerConfigs {
		for _, sd := range am.ServiceDiscoveryConfigs {
			if _, ok := sd.(discovery.StaticConfig); !ok {
				return nil, fmt.Errorf("alerting: alertmanagers[%d]: %s service discovery is not supported, only static_configs", i, sd.Name())
			}
		}
	}
	return cfg, nil
}

// RuleFiles returns the rule files the patterns of cfg.RuleFiles match, in
// the order Prometheus loads them.
func RuleFiles(cfg *config.Config) ([]string, error) {
	var files []string
	for _, pat := range cfg.RuleFiles {
		fs, err := filepath.Glob(pat)
		if err != nil {
			// The config's validation refuses bad patterns first.
			return nil, fmt.Errorf("retrieve rule files for %s: %w", pat, err)
		}
		files = append(files, fs...)
	}
	return files, nil
}

// CheckRuleFiles parses every rule file cfg lists as `promtool check rules`
// does (Prometheus' rulefmt with its validation: names, expressions,
// templates, durations, duplicate groups). The error holds promtool's
// messages for every file that fails, one a line.
func CheckRuleFiles(cfg *config.Config, p parser.Parser, logger *slog.Logger) error {
	files, err := RuleFiles(cfg)
	if err != nil {
		return err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var failed []error
	for _, fn := range files {
		_, errs := rulefmt.ParseFile(fn, false, model.UTF8Validation, p, logger)
		if len(errs) == 0 {
			continue
		}
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		failed = append(failed, fmt.Errorf("rule file %s: FAILED:\n%s", fn, strings.Join(msgs, "\n")))
	}
	return errors.Join(failed...)
}

// staticTargets returns the Alertmanager targets of cfg in the form the
// notifier's discovery feed takes: its sets are keyed config-0, config-1...
func staticTargets(cfg *config.Config) map[string][]*targetgroup.Group {
	out := map[string][]*targetgroup.Group{}
	for key, am := range cfg.AlertingConfig.AlertmanagerConfigs.ToMap() {
		groups := []*targetgroup.Group{}
		for _, sd := range am.ServiceDiscoveryConfigs {
			if sc, ok := sd.(discovery.StaticConfig); ok {
				groups = append(groups, sc...)
			}
		}
		out[key] = groups
	}
	return out
}
