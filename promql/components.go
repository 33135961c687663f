package promql

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/storage"
)

// Components are the parts the API is built from; the server owns them.
// Only Queryable is required.
type Components struct {
	// Queryable serves every read: queries, series, labels, remote read.
	Queryable storage.Queryable
	// ExemplarQueryable serves /api/v1/query_exemplars. Nil answers with no
	// exemplars, as Prometheus does with exemplar storage off.
	ExemplarQueryable storage.ExemplarQueryable
	// Cardinality serves /api/v1/status/tsdb. Nil answers that endpoint with
	// an internal error naming the missing statistics.
	Cardinality CardinalitySource
	// Metadata serves /api/v1/metadata. Nil answers with no metadata.
	Metadata MetadataSource
	// Deleter serves POST /api/v1/admin/tsdb/delete_series when
	// Options.EnableAdmin is set. Nil answers that endpoint with an error.
	Deleter SeriesDeleter
	// Snapshotter serves POST /api/v1/admin/tsdb/snapshot when
	// Options.EnableAdmin is set. Nil answers that endpoint with an error.
	Snapshotter Snapshotter
	// Changes reports changes to the stored data by time range
	// (storage.DB does). With it, and Options.ResultsCacheSize, range
	// queries go through the results cache; without it there is no cache,
	// since nothing could tell it what to forget.
	Changes ChangeSource
	// Ready reports whether the storage can serve; until it does, every
	// endpoint answers 503 as a starting Prometheus does. Nil means always.
	Ready func() bool

	Logger     *slog.Logger
	Registerer prometheus.Registerer // for shale_promql_* and prometheus_engine_* metrics
	Gatherer   prometheus.Gatherer   // for /api/v1/status/self_metrics

	// BuildInfo answers /api/v1/status/buildinfo. A zero Version is replaced
	// by the Prometheus version whose API this package serves, so that
	// clients such as Grafana enable the features they probe by version.
	BuildInfo BuildInfo
	// Flags answers /api/v1/status/flags (flag name -> value).
	Flags map[string]string
	// ConfigYAML answers /api/v1/status/config; it is called per request.
	ConfigYAML func() string
	// StorageRetention is shown in /api/v1/status/runtimeinfo, e.g. "15d".
	StorageRetention string
}

// ChangeSource is a storage that reports what changes in its data.
type ChangeSource interface {
	// OnChange makes f be called with the time range (ms, inclusive) of
	// every change queries could see: new samples, backfill, deletes,
	// retention. nil removes it.
	OnChange(f func(mint, maxt int64))
	// CatchUp brings the storage up to date with what it follows (a read
	// replica with its writer), reporting what changed, before a cache is
	// consulted.
	CatchUp(ctx context.Context) error
}

// BuildInfo is the build information shown by /api/v1/status/buildinfo.
type BuildInfo struct {
	Version   string
	Revision  string
	Branch    string
	BuildUser string
	BuildDate string
	GoVersion string
}

// CardinalitySource reports the cardinality statistics of recent data, which
// Prometheus takes from its head block.
type CardinalitySource interface {
	// Cardinality returns statistics whose lists hold at most limit entries
	// each, largest count first (limit >= 1). It is safe for concurrent use.
	Cardinality(ctx context.Context, limit int) (Cardinality, error)
}

// Cardinality is the answer of a CardinalitySource.
type Cardinality struct {
	NumSeries     uint64
	NumLabelPairs int
	ChunkCount    int64
	// MinTime and MaxTime bound the samples counted, in ms since the epoch.
	MinTime, MaxTime int64

	SeriesCountByMetricName     []NameCount
	LabelValueCountByLabelName  []NameCount
	MemoryInBytesByLabelName    []NameCount
	SeriesCountByLabelValuePair []NameCount // Name is "label=value"
}

// NameCount is one entry of a cardinality list.
type NameCount struct {
	Name  string
	Count uint64
}

// MetadataSource reports the metadata (type, help, unit) of metric families,
// as received by remote write.
type MetadataSource interface {
	// MetricMetadata returns the distinct metadata of each metric family, or
	// of the family named metric only when metric is not empty. The caller
	// may keep the returned map; it is safe for concurrent use.
	MetricMetadata(ctx context.Context, metric string) (map[string][]metadata.Metadata, error)
}

// SeriesDeleter deletes data for the admin API.
type SeriesDeleter interface {
	// Delete removes the samples in [mint, maxt] (ms, both inclusive) of all
	// series matching every matcher. Later queries must not return them.
	Delete(ctx context.Context, mint, maxt int64, ms ...*labels.Matcher) error
}

// Snapshotter keeps the stored data under a name, for the admin API.
type Snapshotter interface {
	// Snapshot keeps the data as it is now under name; withHead includes
	// the samples not yet written out of memory.
	Snapshot(ctx context.Context, name string, withHead bool) error
}

// TombstoneCleaner is implemented by a SeriesDeleter that can reclaim the
// space of deleted data on request (POST /api/v1/admin/tsdb/clean_tombstones).
// Without it that endpoint succeeds and does nothing.
type TombstoneCleaner interface {
	CleanTombstones(ctx context.Context) error
}
