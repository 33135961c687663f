package remotewrite

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/otlptranslator"
)

// OTLPOptions are the settings of the OTLP receiver: the keys of the otlp
// section of Prometheus' configuration file, with Prometheus' defaults, and
// NativeDeltaIngestion, which Prometheus sets with a feature flag. The
// remote-write Options (body sizes, label limits, time window, requests in
// flight) apply to OTLP requests too. Start from DefaultOTLPOptions and call
// Validate.
type OTLPOptions struct {
	// PromoteAllResourceAttributes makes every resource attribute a label of
	// every series of the resource, except IgnoreResourceAttributes.
	PromoteAllResourceAttributes bool `yaml:"promote_all_resource_attributes" json:"promote_all_resource_attributes"`
	// PromoteResourceAttributes are the resource attributes made labels.
	PromoteResourceAttributes []string `yaml:"promote_resource_attributes" json:"promote_resource_attributes"`
	// IgnoreResourceAttributes are not promoted by
	// PromoteAllResourceAttributes.
	IgnoreResourceAttributes []string `yaml:"ignore_resource_attributes" json:"ignore_resource_attributes"`
	// TranslationStrategy says how metric and label names are translated:
	// UnderscoreEscapingWithSuffixes (the default), NoUTF8EscapingWithSuffixes,
	// UnderscoreEscapingWithoutSuffixes or NoTranslation.
	TranslationStrategy otlptranslator.TranslationStrategyOption `yaml:"translation_strategy" json:"translation_strategy"`
	// KeepIdentifyingResourceAttributes keeps service.name,
	// service.namespace and service.instance.id as labels of target_info
	// besides job and instance.
	KeepIdentifyingResourceAttributes bool `yaml:"keep_identifying_resource_attributes" json:"keep_identifying_resource_attributes"`
	// ConvertHistogramsToNHCB stores explicit-bucket histograms as native
	// histograms with custom buckets instead of classic _bucket series.
	ConvertHistogramsToNHCB bool `yaml:"convert_histograms_to_nhcb" json:"convert_histograms_to_nhcb"`
	// PromoteScopeMetadata adds otel_scope_name, otel_scope_version,
	// otel_scope_schema_url and otel_scope_<attribute> labels.
	PromoteScopeMetadata bool `yaml:"promote_scope_metadata" json:"promote_scope_metadata"`
	// LabelNameUnderscoreSanitization prefixes "key" to label names that
	// start with a single underscore (escaping strategies only).
	LabelNameUnderscoreSanitization bool `yaml:"label_name_underscore_sanitization" json:"label_name_underscore_sanitization"`
	// LabelNamePreserveMultipleUnderscores keeps runs of underscores in
	// label names (escaping strategies only).
	LabelNamePreserveMultipleUnderscores bool `yaml:"label_name_preserve_multiple_underscores" json:"label_name_preserve_multiple_underscores"`
	// NativeDeltaIngestion stores the points of delta-temporality sums and
	// histograms as they come, with metadata type unknown (Prometheus'
	// otlp-native-delta-ingestion feature). Off, they are refused (400, or a
	// partial success) with a message that says so.
	NativeDeltaIngestion bool `yaml:"native_delta_ingestion" json:"native_delta_ingestion"`
	// LookbackDelta is the query lookback delta; target_info gets a sample
	// every half of it over the span of a resource's points. It is the
	// server's --query.lookback-delta, not a key of the section.
	LookbackDelta time.Duration `yaml:"-" json:"-"`
}

// DefaultOTLPOptions returns Prometheus' defaults.
func DefaultOTLPOptions() OTLPOptions {
	return OTLPOptions{
		TranslationStrategy:                  otlptranslator.UnderscoreEscapingWithSuffixes,
		LabelNameUnderscoreSanitization:      true,
		LabelNamePreserveMultipleUnderscores: true,
		LookbackDelta:                        5 * time.Minute,
	}
}

// Validate reports settings that cannot work, with Prometheus' rules.
func (o OTLPOptions) Validate() error {
	var errs []error
	switch o.TranslationStrategy {
	case otlptranslator.UnderscoreEscapingWithSuffixes, otlptranslator.UnderscoreEscapingWithoutSuffixes,
		otlptranslator.NoUTF8EscapingWithSuffixes, otlptranslator.NoTranslation:
	default:
		errs = append(errs, fmt.Errorf("unsupported translation_strategy %q (want UnderscoreEscapingWithSuffixes, UnderscoreEscapingWithoutSuffixes, NoUTF8EscapingWithSuffixes or NoTranslation)", o.TranslationStrategy))
	}
	if o.PromoteAllResourceAttributes {
		if len(o.PromoteResourceAttributes) > 0 {
			errs = append(errs, errors.New("'promote_all_resource_attributes' and 'promote_resource_attributes' cannot be configured simultaneously"))
		}
		if err := checkAttributes(o.IgnoreResourceAttributes, "ignored"); err != nil {
			errs = append(errs, fmt.Errorf("invalid 'ignore_resource_attributes': %w", err))
		}
	} else {
		if len(o.IgnoreResourceAttributes) > 0 {
			errs = append(errs, errors.New("'ignore_resource_attributes' cannot be configured unless 'promote_all_resource_attributes' is true"))
		}
		if err := checkAttributes(o.PromoteResourceAttributes, "promoted"); err != nil {
			errs = append(errs, fmt.Errorf("invalid 'promote_resource_attributes': %w", err))
		}
	}
	if o.LookbackDelta < 0 {
		errs = append(errs, fmt.Errorf("lookback delta must not be negative, got %s", o.LookbackDelta))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("otlp options: %w", err)
	}
	return nil
}

// checkAttributes refuses empty and repeated attribute names (surrounding
// spaces ignored), as Prometheus does.
func checkAttributes(attrs []string, adjective string) error {
	seen := map[string]struct{}{}
	var errs []error
	for _, a := range attrs {
		a = strings.TrimSpace(a)
		if a == "" {
			errs = append(errs, fmt.Errorf("empty %s OTel resource attribute", adjective))
			continue
		}
		if _, dup := seen[a]; dup {
			errs = append(errs, fmt.Errorf("duplicated %s OTel resource attribute %q", adjective, a))
			continue
		}
		seen[a] = struct{}{}
	}
	return errors.Join(errs...)
}
