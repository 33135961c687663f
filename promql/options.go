package promql

import (
	"errors"
	"fmt"
	"time"

	"github.com/grafana/regexp"
)

// Options are the serialisable settings of the query engine and the HTTP API.
// Start from DefaultOptions and check with Validate.
type Options struct {
	// QueryTimeout bounds the evaluation of one query (Prometheus --query.timeout).
	QueryTimeout time.Duration `yaml:"query_timeout"`
	// MaxSamples is the most samples one query may hold in memory at once
	// (Prometheus --query.max-samples).
	MaxSamples int `yaml:"max_samples"`
	// MaxSeries is the most series one query may read from storage, summed
	// over its selectors; 0 means no limit. A query over it fails with
	// errorType "cost_limit" (HTTP 422).
	MaxSeries uint64 `yaml:"max_series"`
	// MaxSamplesRead is the most samples one query may read from storage;
	// 0 means no limit. Unlike MaxSamples it counts every sample read, not
	// those held at once.
	MaxSamplesRead uint64 `yaml:"max_samples_read"`
	// MaxConcurrentQueries is how many queries evaluate at once; further
	// queries wait for a slot or for their context to end
	// (Prometheus --query.max-concurrency).
	MaxConcurrentQueries int `yaml:"max_concurrent_queries"`
	// LookbackDelta is how far back an instant selector looks for a sample
	// (Prometheus --query.lookback-delta).
	LookbackDelta time.Duration `yaml:"lookback_delta"`

	// MaxQueryLength is the longest query text, in bytes, the parser is
	// given; 0 means no limit. Checked before parsing, as is MaxQueryDepth:
	// see limits.go for why the upstream parser needs both.
	MaxQueryLength int `yaml:"max_query_length"`
	// MaxQueryDepth is the deepest nesting of a query's text: each open
	// parenthesis, bracket or brace is a level, and so is each operator of a
	// chain (a+b+c, ---a) within one. 0 means no limit.
	MaxQueryDepth int `yaml:"max_query_depth"`
	// MaxSubquerySteps is the most evaluation steps the subqueries of one
	// query may take together, as the engine will run them; 0 means no
	// limit. Checked after parsing, before evaluation.
	MaxSubquerySteps int64 `yaml:"max_subquery_steps"`
	// MaxMemory is the memory, in bytes, that all queries in flight may hold
	// together, as the model in budget.go accounts it; 0 means no budget.
	// A query that would go beyond it fails with HTTP 503.
	MaxMemory int64 `yaml:"max_memory"`

	// EnableExperimentalFunctions enables the experimental PromQL functions
	// (Prometheus --enable-feature=promql-experimental-functions).
	EnableExperimentalFunctions bool `yaml:"enable_experimental_functions"`
	// EnableBinopFillModifiers enables the fill() modifiers of binary
	// operators (Prometheus --enable-feature=promql-binop-fill-modifiers).
	EnableBinopFillModifiers bool `yaml:"enable_binop_fill_modifiers"`
	// EnableUnquotedUTF8Names lets unquoted metric and label names hold
	// Unicode letters and dots.
	EnableUnquotedUTF8Names bool `yaml:"enable_unquoted_utf8_names"`
	// EnableDelayedNameRemoval removes __name__ at the end of evaluation rather
	// than at each function (Prometheus --enable-feature=promql-delayed-name-removal).
	EnableDelayedNameRemoval bool `yaml:"enable_delayed_name_removal"`
	// EnablePerStepStats lets a request ask for per-step statistics with stats=all.
	EnablePerStepStats bool `yaml:"enable_per_step_stats"`
	// UseStartTimestamps makes rate-like functions use the start timestamps
	// stored with samples when the storage keeps them.
	UseStartTimestamps bool `yaml:"use_start_timestamps"`

	// EnableAdmin enables the admin endpoints under /api/v1/admin/tsdb
	// (Prometheus --web.enable-admin-api). Off in reader mode.
	EnableAdmin bool `yaml:"enable_admin"`
	// CORSOrigin is the regular expression of origins allowed by CORS, fully
	// anchored (Prometheus --web.cors.origin).
	CORSOrigin string `yaml:"cors_origin"`

	// RemoteReadSampleLimit, RemoteReadConcurrencyLimit and
	// RemoteReadMaxBytesInFrame limit POST /api/v1/read as the Prometheus
	// flags --storage.remote.read-* do. A sample limit of 0 means no limit.
	// ResultsCacheSize is the memory, in bytes, the range-query results
	// cache may take; 0 turns it off. See resultscache.go.
	ResultsCacheSize int64 `yaml:"results_cache_size"`
	// ResultsCacheFreshness is how far behind now the data of a step must
	// end for its result to be kept: later samples are still arriving.
	ResultsCacheFreshness time.Duration `yaml:"results_cache_freshness"`
	// RangeShards is how many parts a long range query is split into,
	// evaluated at once on as many cores (see shard.go); 0 means one per
	// CPU (GOMAXPROCS), 1 turns splitting off.
	RangeShards int `yaml:"range_shards"`

	RemoteReadSampleLimit      int `yaml:"remote_read_sample_limit"`
	RemoteReadConcurrencyLimit int `yaml:"remote_read_concurrency_limit"`
	RemoteReadMaxBytesInFrame  int `yaml:"remote_read_max_bytes_in_frame"`
}

// Defaults of the limits Prometheus does not have; docs/query-limits.md says
// why each is what it is.
const (
	DefaultMaxQueryLength   = 256 << 10
	DefaultMaxQueryDepth    = 256
	DefaultMaxSubquerySteps = 1_000_000
	DefaultMaxMemory        = 1 << 30

	DefaultResultsCacheSize      = 256 << 20
	DefaultResultsCacheFreshness = time.Minute
)

// DefaultOptions returns the settings Prometheus uses by default, and
// Shale's query limits.
func DefaultOptions() Options {
	return Options{
		QueryTimeout:               2 * time.Minute,
		MaxSamples:                 50_000_000,
		MaxConcurrentQueries:       20,
		LookbackDelta:              5 * time.Minute,
		MaxQueryLength:             DefaultMaxQueryLength,
		MaxQueryDepth:              DefaultMaxQueryDepth,
		MaxSubquerySteps:           DefaultMaxSubquerySteps,
		MaxMemory:                  DefaultMaxMemory,
		ResultsCacheSize:           DefaultResultsCacheSize,
		ResultsCacheFreshness:      DefaultResultsCacheFreshness,
		CORSOrigin:                 ".*",
		RemoteReadSampleLimit:      50_000_000,
		RemoteReadConcurrencyLimit: 10,
		RemoteReadMaxBytesInFrame:  1024 * 1024,
	}
}

// Validate reports every setting that cannot work.
func (o Options) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(o.QueryTimeout > 0, "query_timeout must be positive, got %s", o.QueryTimeout)
	check(o.MaxSamples > 0, "max_samples must be positive, got %d", o.MaxSamples)
	check(o.MaxConcurrentQueries > 0, "max_concurrent_queries must be positive, got %d", o.MaxConcurrentQueries)
	check(o.LookbackDelta > 0, "lookback_delta must be positive, got %s", o.LookbackDelta)
	check(o.MaxQueryLength >= 0, "max_query_length must not be negative, got %d", o.MaxQueryLength)
	check(o.MaxQueryDepth >= 0, "max_query_depth must not be negative, got %d", o.MaxQueryDepth)
	check(o.MaxSubquerySteps >= 0, "max_subquery_steps must not be negative, got %d", o.MaxSubquerySteps)
	check(o.MaxMemory >= 0, "max_memory must not be negative, got %d", o.MaxMemory)
	check(o.ResultsCacheSize >= 0, "results_cache_size must not be negative, got %d", o.ResultsCacheSize)
	check(o.RangeShards >= 0, "range_shards must not be negative, got %d", o.RangeShards)
	check(o.ResultsCacheFreshness >= 0, "results_cache_freshness must not be negative, got %s", o.ResultsCacheFreshness)
	if _, err := CompileCORS(o.CORSOrigin); err != nil {
		errs = append(errs, fmt.Errorf("cors_origin: %w", err))
	}
	check(o.RemoteReadSampleLimit >= 0, "remote_read_sample_limit must not be negative, got %d", o.RemoteReadSampleLimit)
	check(o.RemoteReadConcurrencyLimit > 0, "remote_read_concurrency_limit must be positive, got %d", o.RemoteReadConcurrencyLimit)
	check(o.RemoteReadMaxBytesInFrame > 0, "remote_read_max_bytes_in_frame must be positive, got %d", o.RemoteReadMaxBytesInFrame)
	return errors.Join(errs...)
}

// CompileCORS compiles a --web.cors.origin pattern as Prometheus does
// (relabel.NewRegexp): fully anchored, "." matching any character. An
// allowed origin is then echoed in Access-Control-Allow-Origin, the default
// ".*" included; only "^(?:.*)$", which Prometheus never compiles, would
// make the CORS helper answer "*".
func CompileCORS(pattern string) (*regexp.Regexp, error) {
	return regexp.Compile("^(?s:" + pattern + ")$")
}
