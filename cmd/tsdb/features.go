package main

import (
	"log/slog"
	"sort"
	"strings"

	"github.com/shaledb/shale/promql"
	"github.com/shaledb/shale/remotewrite"
)

// featureKind is what a Prometheus --enable-feature name does in Shale.
type featureKind uint8

const (
	// featureSets turns a setting on, as in Prometheus.
	featureSets featureKind = iota
	// featureAlwaysOn names behaviour Shale always has.
	featureAlwaysOn
	// featureNoEffect names a part of Prometheus Shale does not have (the
	// scraper, the local TSDB's chunk formats, the old UI).
	featureNoEffect
)

// feature is one name --enable-feature accepts.
type feature struct {
	kind  featureKind
	query func(*promql.Options)
	otlp  func(*remotewrite.OTLPOptions)
	// note says more than the kind does, in the log line.
	note string
}

// knownFeatures are Prometheus 3's --enable-feature names. Those that
// change the PromQL engine or the OTLP receiver set the same setting the
// config file's query or otlp section has; the rest are accepted, so that a
// Prometheus command line starts Shale, and logged.
var knownFeatures = map[string]feature{
	"promql-experimental-functions": {query: func(o *promql.Options) { o.EnableExperimentalFunctions = true }},
	"promql-per-step-stats":         {query: func(o *promql.Options) { o.EnablePerStepStats = true }},
	"promql-delayed-name-removal":   {query: func(o *promql.Options) { o.EnableDelayedNameRemoval = true }},
	"promql-binop-fill-modifiers":   {query: func(o *promql.Options) { o.EnableBinopFillModifiers = true }},
	"promql-unquoted-utf8-names":    {query: func(o *promql.Options) { o.EnableUnquotedUTF8Names = true }},
	"use-start-timestamps":          {query: func(o *promql.Options) { o.UseStartTimestamps = true }},
	"otlp-native-delta-ingestion":   {otlp: func(o *remotewrite.OTLPOptions) { o.NativeDeltaIngestion = true }},

	"exemplar-storage":                 {kind: featureAlwaysOn, note: "exemplars sent by remote write and OTLP are stored"},
	"metadata-wal-records":             {kind: featureAlwaysOn, note: "metric metadata sent by remote write and OTLP is stored"},
	"native-histograms":                {kind: featureAlwaysOn, note: "native histograms sent by remote write and OTLP are stored"},
	"ooo-native-histograms":            {kind: featureAlwaysOn},
	"created-timestamp-zero-ingestion": {kind: featureAlwaysOn, note: "a start timestamp sent with a sample stores a zero sample there"},
	"concurrent-rule-eval":             {kind: featureAlwaysOn, note: "see --rules.max-concurrent-rule-evals"},
	"promql-duration-expr":             {kind: featureAlwaysOn},
	"promql-extended-range-selectors":  {kind: featureAlwaysOn},
	"auto-reload-config":               {kind: featureNoEffect, note: "the config file is reloaded on SIGHUP, and on POST /-/reload with --web.enable-lifecycle"},

	"otlp-deltatocumulative":      {kind: featureNoEffect, note: "delta sums are refused unless otlp-native-delta-ingestion is on"},
	"memory-snapshot-on-shutdown": {kind: featureNoEffect, note: "the head is written to the object store on shutdown"},
	"extra-scrape-metrics":        {kind: featureNoEffect, note: "Shale does not scrape"},
	"openmetrics2":                {kind: featureNoEffect, note: "Shale does not scrape"},
	"zstd-scrape":                 {kind: featureNoEffect, note: "Shale does not scrape"},
	"st-synthesis":                {kind: featureNoEffect, note: "Shale does not scrape"},
	"type-and-unit-labels":        {kind: featureNoEffect},
	"xor2-encoding":               {kind: featureNoEffect, note: "Shale has its own sample encoding"},
	"histograms-st-encoding":      {kind: featureNoEffect, note: "Shale has its own sample encoding"},
	"st-storage":                  {kind: featureNoEffect, note: "Shale has its own sample encoding"},
	"delayed-compaction":          {kind: featureNoEffect},
	"use-uncached-io":             {kind: featureNoEffect},
	"fast-startup":                {kind: featureNoEffect},
	"old-ui":                      {kind: featureNoEffect, note: "Shale serves its own UI"},
	"search-api":                  {kind: featureNoEffect},
	"query-cost":                  {kind: featureNoEffect, note: "see --query.max-memory and the query section's max_series and max_samples_read"},
}

// features is what --enable-feature asked for.
type features struct {
	names   []string // known, in the order given, each once
	unknown []string
}

// parseFeatures reads the values of --enable-feature: comma-separated
// names, the flag repeatable, as Prometheus takes them. A name Prometheus
// does not know is kept to be logged, as Prometheus does, not refused.
func parseFeatures(values []string) features {
	var f features
	seen := map[string]bool{}
	for _, v := range values {
		for name := range strings.SplitSeq(v, ",") {
			name = strings.TrimSpace(name)
			if name == "" || seen[name] {
				continue
			}
			seen[name] = true
			if _, ok := knownFeatures[name]; ok {
				f.names = append(f.names, name)
			} else {
				f.unknown = append(f.unknown, name)
			}
		}
	}
	return f
}

// apply sets what the features change in the query and OTLP settings.
func (f features) apply(q *promql.Options, o *remotewrite.OTLPOptions) {
	for _, name := range f.names {
		k := knownFeatures[name]
		if k.query != nil {
			k.query(q)
		}
		if k.otlp != nil {
			k.otlp(o)
		}
	}
}

// log says what each feature asked for does.
func (f features) log(logger *slog.Logger) {
	for _, name := range f.names {
		k := knownFeatures[name]
		args := []any{"option", name}
		if k.note != "" {
			args = append(args, "note", k.note)
		}
		switch k.kind {
		case featureSets:
			logger.Info("Feature enabled", args...)
		case featureAlwaysOn:
			logger.Info("This option for --enable-feature is always on in Shale and therefore a no-op", args...)
		case featureNoEffect:
			logger.Warn("This option for --enable-feature has no effect in Shale", args...)
		}
	}
	for _, name := range f.unknown {
		logger.Warn("Unknown option for --enable-feature", "option", name)
	}
}

// featureNames lists the names --enable-feature knows, for its help.
func featureNames() string {
	names := make([]string, 0, len(knownFeatures))
	for name := range knownFeatures {
		names = append(names, name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
