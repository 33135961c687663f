package storage

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaledb/shale/internal/promreg"
)

type metrics struct {
	reg prometheus.Registerer

	appended prometheus.Counter
	// rejected's reasons name the error returned, in Prometheus' words:
	// out_of_bounds (ErrOutOfBounds: outside the time range the head
	// accepts), too_old (ErrTooOldSample: outside the out-of-order window),
	// out_of_order, duplicate, invalid_labels, too_far_in_future
	// (ErrTooFarInFuture), series_limit (ErrSeriesLimit), commit_conflict. The
	// remote-write receiver counts the same errors under the same names
	// (docs/remotewrite.md).
	rejected          *prometheus.CounterVec
	seriesCreated     prometheus.Counter
	partitionsCreated prometheus.Counter
	partitionsClosed  prometheus.Counter
	partitionsDropped prometheus.Counter
	flushes           prometheus.Counter
	flushFailures     prometheus.Counter
	flushedSeries     prometheus.Counter
	flushedBytes      prometheus.Counter
	flushDuration     prometheus.Histogram
	seriesRetired     prometheus.Counter
	metadataRefused   prometheus.Counter
	recommitted       prometheus.Counter
	pastCache         prometheus.Counter

	// gauges read one DB's head: registered by register, dropped by
	// unregister. The counters above are shared by every DB on the registry
	// and stay registered after Close, so a reopened DB continues them.
	gauges []prometheus.Collector
}

// newMetrics makes the DB's metrics and registers the counters with reg
// (nil: none).
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	set := promreg.NewSet(reg)
	m := &metrics{
		reg:               reg,
		appended:          set.Counter("shale_storage_samples_appended_total", "Samples committed to the head."),
		rejected:          set.CounterVec("shale_storage_samples_rejected_total", "Samples refused, by reason.", "reason"),
		seriesCreated:     set.Counter("shale_storage_series_created_total", "Series created in head partitions."),
		partitionsCreated: set.Counter("shale_storage_partitions_created_total", "Partitions opened by the head."),
		partitionsClosed:  set.Counter("shale_storage_partitions_closed_total", "Partitions written out for good and dropped from the head."),
		partitionsDropped: set.Counter("shale_storage_partitions_dropped_total", "Partitions deleted by retention."),
		flushes:           set.Counter("shale_storage_head_flushes_total", "Head flushes that completed."),
		flushFailures:     set.Counter("shale_storage_head_flush_failures_total", "Head flushes that failed (retried at the next one)."),
		flushedSeries:     set.Counter("shale_storage_head_flushed_series_total", "Series blocks written by head flushes."),
		flushedBytes:      set.Counter("shale_storage_head_flushed_bytes_total", "Bytes of sample blocks written by head flushes."),
		seriesRetired: set.Counter("shale_storage_head_series_retired_total",
			"Series of ended head partitions let go once all they held was written out (a late sample brings one back)."),
		recommitted: set.Counter("shale_storage_samples_recommitted_total",
			"Samples appended again at commit because a flush wrote their partition out while the commit was in flight (a backfill racing the flushes it causes)."),
		pastCache: set.Counter("shale_storage_selects_past_cache_total",
			"Selects whose sample blocks came to more than twice the block cache's capacity, read past the cache instead of filling it."),
		metadataRefused: set.Counter("shale_storage_metadata_refused_total",
			"Metric families whose metadata was not recorded because as many families as Options.MaxHeadSeries are known."),
		flushDuration: set.Histogram(prometheus.HistogramOpts{
			Name: "shale_storage_head_flush_duration_seconds", Help: "Duration of head flushes.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
	}
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("storage: register metrics: %w", err)
	}
	return m, nil
}

// register registers the gauges of db's head. They read this DB, so they are
// not shared: a second open DB on the registry is an error.
func (m *metrics) register(db *DB) error {
	if m.reg == nil {
		return nil
	}
	gauges := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "shale_storage_head_series", Help: "Series in the head's open partitions.",
		}, func() float64 { return float64(db.head.numSeries()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "shale_storage_head_series_limit", Help: "The most series a head partition takes (Options.MaxHeadSeries; 0: no limit).",
		}, func() float64 { return float64(db.opts.MaxHeadSeries) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "shale_storage_head_partitions", Help: "Open partitions in the head.",
		}, func() float64 {
			db.head.mu.RLock()
			defer db.head.mu.RUnlock()
			return float64(len(db.head.parts))
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "shale_storage_head_max_time_seconds", Help: "Time of the newest sample in the head.",
		}, func() float64 { return float64(db.head.maxT.Load()) / 1000 }),
	}
	for _, c := range gauges {
		if err := m.reg.Register(c); err != nil {
			m.unregister()
			return fmt.Errorf("storage: register head metrics (is another DB open on this registry?): %w", err)
		}
		m.gauges = append(m.gauges, c)
	}
	return nil
}

func (m *metrics) unregister() {
	for _, c := range m.gauges {
		m.reg.Unregister(c)
	}
	m.gauges = nil
}
