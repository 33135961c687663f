package storage

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	reg prometheus.Registerer

	appended prometheus.Counter
	// rejected's reasons name the error returned, in Prometheus' words:
	// out_of_bounds (ErrOutOfBounds: outside the time range the head
	// accepts), too_old (ErrTooOldSample: outside the out-of-order window),
	// out_of_order, duplicate, invalid_labels, commit_conflict. The
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

	collectors []prometheus.Collector
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		reg: reg,
		appended: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shale_storage_samples_appended_total", Help: "Samples committed to the head.",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shale_storage_samples_rejected_total", Help: "Samples refused, by reason.",
		}, []string{"reason"}),
		seriesCreated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shale_storage_series_created_total", Help: "Series created in head partitions.",
		}),
		partitionsCreated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shale_storage_partitions_created_total", Help: "Partitions opened by the head.",
		}),
		partitionsClosed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shale_storage_partitions_closed_total", Help: "Partitions written out for good and dropped from the head.",
		}),
		partitionsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shale_storage_partitions_dropped_total", Help: "Partitions deleted by retention.",
		}),
		flushes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shale_storage_head_flushes_total", Help: "Head flushes that completed.",
		}),
		flushFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shale_storage_head_flush_failures_total", Help: "Head flushes that failed (retried at the next one).",
		}),
		flushedSeries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shale_storage_head_flushed_series_total", Help: "Series blocks written by head flushes.",
		}),
		flushedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shale_storage_head_flushed_bytes_total", Help: "Bytes of sample blocks written by head flushes.",
		}),
		flushDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "shale_storage_head_flush_duration_seconds", Help: "Duration of head flushes.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
	}
	m.collectors = []prometheus.Collector{m.appended, m.rejected, m.seriesCreated, m.partitionsCreated,
		m.partitionsClosed, m.partitionsDropped, m.flushes, m.flushFailures, m.flushedSeries, m.flushedBytes, m.flushDuration}
	return m
}

func (m *metrics) register(db *DB) {
	if m.reg == nil {
		return
	}
	m.collectors = append(m.collectors,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "shale_storage_head_series", Help: "Series in the head's open partitions.",
		}, func() float64 { return float64(db.head.numSeries()) }),
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
	)
	for _, c := range m.collectors {
		m.reg.MustRegister(c)
	}
}

func (m *metrics) unregister() {
	if m.reg == nil {
		return
	}
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
}
