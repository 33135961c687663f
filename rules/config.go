package rules

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// FileConfig holds the sections of Shale's config file that Prometheus'
// config file has too, with Prometheus' keys and meaning: global
// (evaluation_interval, rule_query_offset, external_labels), rule_files and
// alerting. Embed it inline in the file's YAML struct; Parse reads it.
type FileConfig struct {
	Global    yaml.Node `yaml:"global,omitempty"`
	RuleFiles yaml.Node `yaml:"rule_files,omitempty"`
	Alerting  yaml.Node `yaml:"alerting,omitempty"`
}

// Empty reports whether none of the sections is present.
func (f *FileConfig) Empty() bool {
	return f.Global.Kind == 0 && f.RuleFiles.Kind == 0 && f.Alerting.Kind == 0
}

// Config is what the rule and alerting sections of a config file say, with
// Prometheus' defaults filled in and relative paths resolved.
type Config struct {
	Global    GlobalConfig   `yaml:"global"`
	RuleFiles []string       `yaml:"rule_files,omitempty"`
	Alerting  AlertingConfig `yaml:"alerting,omitempty"`
}

// DefaultGlobalConfig is Prometheus' global section when the file leaves a
// key out.
var DefaultGlobalConfig = GlobalConfig{
	EvaluationInterval:         model.Duration(time.Minute),
	MetricNameValidationScheme: model.UTF8Validation,
	ScrapeInterval:             model.Duration(time.Minute),
	ScrapeTimeout:              model.Duration(10 * time.Second),
}

// DefaultConfig returns the configuration of a file without these sections.
func DefaultConfig() *Config { return &Config{Global: DefaultGlobalConfig} }

// GlobalConfig is Prometheus' global section. Only EvaluationInterval,
// RuleQueryOffset, ExternalLabels and MetricNameValidationScheme have an
// effect; the other keys of Prometheus' section are about scraping and are
// accepted so that a Prometheus config file can be used as it is.
type GlobalConfig struct {
	EvaluationInterval model.Duration `yaml:"evaluation_interval,omitempty"`
	RuleQueryOffset    model.Duration `yaml:"rule_query_offset,omitempty"`
	ExternalLabels     labels.Labels  `yaml:"external_labels,omitempty"`
	// MetricNameValidationScheme is what label names external labels and
	// relabel rules may use: utf8 (the default) or legacy.
	MetricNameValidationScheme model.ValidationScheme `yaml:"metric_name_validation_scheme,omitempty"`

	ScrapeInterval model.Duration `yaml:"scrape_interval,omitempty"`
	ScrapeTimeout  model.Duration `yaml:"scrape_timeout,omitempty"`
	scrapeOnly     `yaml:",inline"`
}

// scrapeOnly are the keys of Prometheus' global section that only scraping
// and the query log use: type-checked loosely, otherwise ignored.
type scrapeOnly struct {
	ScrapeProtocols                []string `yaml:"scrape_protocols,omitempty"`
	QueryLogFile                   string   `yaml:"query_log_file,omitempty"`
	QueryMaxSeries                 uint64   `yaml:"query_max_series,omitempty"`
	QueryMaxSamplesRead            uint64   `yaml:"query_max_samples_read,omitempty"`
	QueryMaxDuration               string   `yaml:"query_max_duration,omitempty"`
	ScrapeFailureLogFile           string   `yaml:"scrape_failure_log_file,omitempty"`
	BodySizeLimit                  string   `yaml:"body_size_limit,omitempty"`
	SampleLimit                    uint     `yaml:"sample_limit,omitempty"`
	TargetLimit                    uint     `yaml:"target_limit,omitempty"`
	LabelLimit                     uint     `yaml:"label_limit,omitempty"`
	LabelNameLengthLimit           uint     `yaml:"label_name_length_limit,omitempty"`
	LabelValueLengthLimit          uint     `yaml:"label_value_length_limit,omitempty"`
	KeepDroppedTargets             uint     `yaml:"keep_dropped_targets,omitempty"`
	MetricNameEscapingScheme       string   `yaml:"metric_name_escaping_scheme,omitempty"`
	ScrapeNativeHistograms         *bool    `yaml:"scrape_native_histograms,omitempty"`
	ConvertClassicHistogramsToNHCB bool     `yaml:"convert_classic_histograms_to_nhcb,omitempty"`
	AlwaysScrapeClassicHistograms  bool     `yaml:"always_scrape_classic_histograms,omitempty"`
	ExtraScrapeMetrics             *bool    `yaml:"extra_scrape_metrics,omitempty"`
}

// UnmarshalYAML fills in Prometheus' defaults and checks the section as
// Prometheus does.
func (g *GlobalConfig) UnmarshalYAML(unmarshal func(any) error) error {
	type plain GlobalConfig
	var p plain
	if err := unmarshal(&p); err != nil {
		return err
	}
	*g = GlobalConfig(p)
	if g.MetricNameValidationScheme == model.UnsetValidation {
		g.MetricNameValidationScheme = model.UTF8Validation
	}
	var bad error
	g.ExternalLabels.Range(func(l labels.Label) {
		switch {
		case bad != nil:
		case !g.MetricNameValidationScheme.IsValidLabelName(l.Name):
			bad = fmt.Errorf("%q is not a valid label name", l.Name)
		case !model.LabelValue(l.Value).IsValid():
			bad = fmt.Errorf("%q is not a valid label value", l.Value)
		}
	})
	if bad != nil {
		return bad
	}
	if g.ScrapeInterval == 0 {
		g.ScrapeInterval = DefaultGlobalConfig.ScrapeInterval
	}
	if g.ScrapeTimeout > g.ScrapeInterval {
		return errors.New("global scrape timeout greater than scrape interval")
	}
	if g.ScrapeTimeout == 0 {
		g.ScrapeTimeout = min(DefaultGlobalConfig.ScrapeTimeout, g.ScrapeInterval)
	}
	if g.EvaluationInterval == 0 {
		g.EvaluationInterval = DefaultGlobalConfig.EvaluationInterval
	}
	return nil
}

// AlertingConfig is Prometheus' alerting section.
type AlertingConfig struct {
	// AlertRelabelConfigs apply to every alert before it is sent.
	AlertRelabelConfigs []*relabel.Config     `yaml:"alert_relabel_configs,omitempty"`
	Alertmanagers       []*AlertmanagerConfig `yaml:"alertmanagers,omitempty"`
}

// AlertmanagerConfig is one entry of alerting.alertmanagers: a set of
// Alertmanagers given by static targets, and how to reach them.
type AlertmanagerConfig struct {
	StaticConfigs    []StaticConfig             `yaml:"static_configs,omitempty"`
	HTTPClientConfig commoncfg.HTTPClientConfig `yaml:",inline"`
	// Scheme is http or https.
	Scheme string `yaml:"scheme,omitempty"`
	// PathPrefix is put before /api/v2/alerts.
	PathPrefix string `yaml:"path_prefix,omitempty"`
	// Timeout bounds one send.
	Timeout model.Duration `yaml:"timeout,omitempty"`
	// APIVersion is v2, the only one Alertmanager serves.
	APIVersion string `yaml:"api_version,omitempty"`
	// RelabelConfigs apply to the targets (__address__, __scheme__,
	// __alerts_path__ and the static labels).
	RelabelConfigs []*relabel.Config `yaml:"relabel_configs,omitempty"`
	// AlertRelabelConfigs apply to the alerts sent to this set only.
	AlertRelabelConfigs []*relabel.Config `yaml:"alert_relabel_configs,omitempty"`

	// key identifies the entry's settings, secrets and folder included,
	// so that a reload keeps the send queues of an unchanged entry.
	key string
}

// StaticConfig is one entry of static_configs.
type StaticConfig struct {
	Targets []string       `yaml:"targets"`
	Labels  model.LabelSet `yaml:"labels,omitempty"`
}

// supportedAPIVersions are the Alertmanager API versions alerts can be sent
// with, as Prometheus 3 has them.
var supportedAPIVersions = []string{"v2"}

// UnmarshalYAML fills in Prometheus' defaults and checks the entry: a
// service discovery other than static_configs is refused by name.
func (c *AlertmanagerConfig) UnmarshalYAML(unmarshal func(any) error) error {
	var keys map[string]any
	if err := unmarshal(&keys); err != nil {
		return err
	}
	var sd []string
	for k := range keys {
		if strings.HasSuffix(k, "_sd_configs") {
			sd = append(sd, k)
		}
	}
	if len(sd) > 0 {
		sort.Strings(sd)
		return fmt.Errorf("%s not found among the supported keys: Alertmanagers are given by static_configs only, service discovery is not supported", strings.Join(sd, ", "))
	}
	type plain AlertmanagerConfig
	p := plain{
		Scheme:           "http",
		Timeout:          model.Duration(10 * time.Second),
		APIVersion:       "v2",
		HTTPClientConfig: commoncfg.DefaultHTTPClientConfig,
	}
	if err := unmarshal(&p); err != nil {
		return err
	}
	*c = AlertmanagerConfig(p)
	if !slices.Contains(supportedAPIVersions, c.APIVersion) {
		return fmt.Errorf("expected Alertmanager api version to be one of %v but got %v", supportedAPIVersions, c.APIVersion)
	}
	if err := c.HTTPClientConfig.Validate(); err != nil {
		return err
	}
	if len(c.RelabelConfigs) == 0 {
		for _, sc := range c.StaticConfigs {
			for _, t := range sc.Targets {
				if strings.Contains(t, "/") {
					return fmt.Errorf("%q is not a valid hostname", t)
				}
			}
		}
	}
	for _, sc := range c.StaticConfigs {
		for name := range sc.Labels {
			if !model.UTF8Validation.IsValidLabelName(string(name)) {
				return fmt.Errorf("%q is not a valid label name", name)
			}
		}
	}
	if err := checkNoNil(c.RelabelConfigs, "Alertmanager target relabeling rule"); err != nil {
		return err
	}
	return checkNoNil(c.AlertRelabelConfigs, "Alertmanager alert relabeling rule")
}

func checkNoNil(cfgs []*relabel.Config, what string) error {
	for _, rc := range cfgs {
		if rc == nil {
			return fmt.Errorf("empty or null %s", what)
		}
	}
	return nil
}

// validateRelabel checks relabel rules as Prometheus does once the global
// section is known: label names by its validation scheme.
func validateRelabel(scheme model.ValidationScheme, cfgs ...[]*relabel.Config) error {
	for _, cs := range cfgs {
		for _, rc := range cs {
			if err := rc.Validate(scheme); err != nil {
				return err
			}
		}
	}
	return nil
}

// Parse returns the configuration the sections describe, with Prometheus'
// defaults, and relative paths (rule files, TLS and password files) taken
// from dir, the config file's folder. A key Prometheus' sections do not
// have is refused, and so is a service discovery other than static_configs.
// It does not read the rule files: see CheckRuleFiles.
func (f *FileConfig) Parse(dir string, _ *slog.Logger) (*Config, error) {
	cfg := DefaultConfig()
	if err := decodeStrict(&f.Global, &cfg.Global); err != nil {
		return nil, fmt.Errorf("global: %w", err)
	}
	if err := decodeStrict(&f.RuleFiles, &cfg.RuleFiles); err != nil {
		return nil, fmt.Errorf("rule_files: %w", err)
	}
	if err := decodeStrict(&f.Alerting, &cfg.Alerting); err != nil {
		return nil, fmt.Errorf("alerting: %w", err)
	}
	for _, rf := range cfg.RuleFiles {
		// At most one *, in the file name: Prometheus' rule.
		if i := strings.IndexByte(rf, '*'); i >= 0 && strings.ContainsRune(rf[i:], '/') {
			return nil, fmt.Errorf("invalid rule file path %q", rf)
		}
	}
	if err := checkNoNil(cfg.Alerting.AlertRelabelConfigs, "alert relabeling rule"); err != nil {
		return nil, fmt.Errorf("alerting: %w", err)
	}
	scheme := cfg.Global.MetricNameValidationScheme
	if err := validateRelabel(scheme, cfg.Alerting.AlertRelabelConfigs); err != nil {
		return nil, fmt.Errorf("alerting: %w", err)
	}
	for i, am := range cfg.Alerting.Alertmanagers {
		if am == nil {
			return nil, fmt.Errorf("alerting: alertmanagers[%d]: empty or null Alertmanager config", i)
		}
		if err := validateRelabel(scheme, am.RelabelConfigs, am.AlertRelabelConfigs); err != nil {
			return nil, fmt.Errorf("alerting: alertmanagers[%d]: %w", i, err)
		}
	}
	if dir != "" {
		for i, rf := range cfg.RuleFiles {
			cfg.RuleFiles[i] = joinDir(dir, rf)
		}
		for _, am := range cfg.Alerting.Alertmanagers {
			am.HTTPClientConfig.SetDirectory(dir)
		}
	}
	for i, am := range cfg.Alerting.Alertmanagers {
		if n := alertmanagerNode(&f.Alerting, i); n != nil {
			raw, err := yaml.Marshal(n)
			if err != nil {
				return nil, fmt.Errorf("alerting: alertmanagers[%d]: %w", i, err)
			}
			am.key = dir + "\x00" + string(raw)
		}
	}
	return cfg, nil
}

// alertmanagerNode returns the node of alerting.alertmanagers[i] when it
// is written out in full; nil when YAML aliases or merges are involved,
// whose text does not show the settings (such an entry gets new queues at
// every reload).
func alertmanagerNode(alerting *yaml.Node, i int) *yaml.Node {
	if alerting.Kind != yaml.MappingNode {
		return nil
	}
	for j := 0; j+1 < len(alerting.Content); j += 2 {
		if alerting.Content[j].Value != "alertmanagers" {
			continue
		}
		list := alerting.Content[j+1]
		if list.Kind != yaml.SequenceNode || i >= len(list.Content) || hasAlias(list.Content[i]) {
			return nil
		}
		return list.Content[i]
	}
	return nil
}

func hasAlias(n *yaml.Node) bool {
	if n.Kind == yaml.AliasNode || n.Tag == "!!merge" {
		return true
	}
	for _, c := range n.Content {
		if hasAlias(c) {
			return true
		}
	}
	return false
}

// decodeStrict decodes n into out, refusing keys out does not have. An
// absent section leaves out as it is.
func decodeStrict(n *yaml.Node, out any) error {
	if n.Kind == 0 {
		return nil
	}
	text, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(text))
	dec.KnownFields(true)
	return dec.Decode(out)
}

func joinDir(dir, path string) string {
	if path == "" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(dir, path)
}

// RuleFiles returns the rule files the patterns of cfg.RuleFiles match, in
// the order Prometheus loads them.
func RuleFiles(cfg *Config) ([]string, error) {
	var files []string
	for _, pat := range cfg.RuleFiles {
		fs, err := filepath.Glob(pat)
		if err != nil {
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
func CheckRuleFiles(cfg *Config, p parser.Parser, logger *slog.Logger) error {
	_, err := loadRuleFiles(cfg, p, logger)
	return err
}

// ruleFile is one parsed rule file.
type ruleFile struct {
	name   string
	groups []rulefmt.RuleGroup
}

// loadRuleFiles parses the rule files cfg lists, as CheckRuleFiles says.
func loadRuleFiles(cfg *Config, p parser.Parser, logger *slog.Logger) ([]ruleFile, error) {
	files, err := RuleFiles(cfg)
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var (
		failed []error
		out    []ruleFile
	)
	for _, fn := range files {
		rgs, errs := rulefmt.ParseFile(fn, false, model.UTF8Validation, p, logger)
		if len(errs) == 0 {
			out = append(out, ruleFile{name: fn, groups: rgs.Groups})
			continue
		}
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		failed = append(failed, fmt.Errorf("rule file %s: FAILED:\n%s", fn, strings.Join(msgs, "\n")))
	}
	if err := errors.Join(failed...); err != nil {
		return nil, err
	}
	return out, nil
}
