package lsm

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	flushes         prometheus.Counter
	compactions     prometheus.Counter
	compactionBytes prometheus.Counter
	bytesWritten    *prometheus.CounterVec
	bytesRead       prometheus.Counter
	putsLanded      prometheus.Counter
	writerState     *prometheus.GaugeVec
	lastPersist     prometheus.Gauge
	l0Tables        prometheus.Gauge
	sortedRuns      prometheus.Gauge
	memtableBytes   prometheus.Gauge
	walFlush        prometheus.Histogram
	writeStalls     prometheus.Counter
	gcDeleted       prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		flushes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shale_lsm_flushes_total", Help: "Memtables flushed to L0 tables.",
		}),
		compactions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shale_lsm_compactions_total", Help: "Compactions committed.",
		}),
		compactionBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shale_lsm_compaction_written_bytes_total", Help: "Bytes of tables written by compactions.",
		}),
		bytesWritten: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shale_lsm_object_written_bytes_total", Help: "Bytes written to the object store, by object kind.",
		}, []string{"kind"}),
		bytesRead: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shale_lsm_object_read_bytes_total", Help: "Bytes read from the object store.",
		}),
		putsLanded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shale_lsm_conditional_puts_landed_total",
			Help: "Conditional puts that failed or lost their answer but had landed, as a read-back showed.",
		}),
		writerState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shale_lsm_writer_state",
			Help: "1 for the writer's current state: ok, retrying (object store requests failing), stuck (failing for 10s or more) or fenced.",
		}, []string{"state"}),
		lastPersist: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shale_lsm_last_persist_timestamp_seconds",
			Help: "When a write to the object store last succeeded (Unix time); time() minus it is the time since the writer last persisted.",
		}),
		l0Tables: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shale_lsm_l0_tables", Help: "Tables in L0 in the current manifest.",
		}),
		sortedRuns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shale_lsm_sorted_runs", Help: "Sorted runs in the current manifest.",
		}),
		memtableBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shale_lsm_memtable_bytes", Help: "Bytes held by the mutable and immutable memtables.",
		}),
		walFlush: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "shale_lsm_wal_flush_duration_seconds", Help: "Time to write one WAL object, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		writeStalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shale_lsm_write_stalls_total", Help: "Writes that waited for flushes or compactions (back-pressure).",
		}),
		gcDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shale_lsm_gc_deleted_objects_total", Help: "Objects deleted by garbage collection.",
		}),
	}
	if reg != nil {
		m.flushes = register(reg, m.flushes)
		m.compactions = register(reg, m.compactions)
		m.compactionBytes = register(reg, m.compactionBytes)
		m.bytesWritten = register(reg, m.bytesWritten)
		m.bytesRead = register(reg, m.bytesRead)
		m.putsLanded = register(reg, m.putsLanded)
		m.writerState = register(reg, m.writerState)
		m.lastPersist = register(reg, m.lastPersist)
		m.l0Tables = register(reg, m.l0Tables)
		m.sortedRuns = register(reg, m.sortedRuns)
		m.memtableBytes = register(reg, m.memtableBytes)
		m.walFlush = register(reg, m.walFlush)
		m.writeStalls = register(reg, m.writeStalls)
		m.gcDeleted = register(reg, m.gcDeleted)
	}
	return m
}

// register registers c, or returns the collector already registered under
// its name so that two DBs on one registerer share their series.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}
