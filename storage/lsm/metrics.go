package lsm

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaledb/shale/internal/promreg"
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

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
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
	// Two DBs (or a DB and a Reader) on one registry share these series.
	err := errors.Join(
		promreg.Register(reg, &m.flushes),
		promreg.Register(reg, &m.compactions),
		promreg.Register(reg, &m.compactionBytes),
		promreg.Register(reg, &m.bytesWritten),
		promreg.Register(reg, &m.bytesRead),
		promreg.Register(reg, &m.putsLanded),
		promreg.Register(reg, &m.writerState),
		promreg.Register(reg, &m.lastPersist),
		promreg.Register(reg, &m.l0Tables),
		promreg.Register(reg, &m.sortedRuns),
		promreg.Register(reg, &m.memtableBytes),
		promreg.Register(reg, &m.walFlush),
		promreg.Register(reg, &m.writeStalls),
		promreg.Register(reg, &m.gcDeleted),
	)
	if err != nil {
		return nil, fmt.Errorf("lsm: register metrics: %w", err)
	}
	return m, nil
}
