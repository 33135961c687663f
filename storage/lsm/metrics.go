package lsm

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaledb/shale/internal/promreg"
)

type metrics struct {
	flushes         prometheus.Counter
	compactions     [2]prometheus.Counter // by compactionLane
	compactionBytes [2]prometheus.Counter
	compactionMoved [2]prometheus.Counter
	bytesWritten    *prometheus.CounterVec
	bytesRead       prometheus.Counter
	putsLanded      prometheus.Counter
	corruptReads    prometheus.Counter
	writerState     *prometheus.GaugeVec
	lastPersist     prometheus.Gauge
	l0Tables        prometheus.Gauge
	l0Depth         prometheus.Gauge
	sortedRuns      prometheus.Gauge
	memtableBytes   prometheus.Gauge
	walFlush        prometheus.Histogram
	walSealed       [nSealReasons]prometheus.Counter
	writeStalls     prometheus.Counter
	gcDeleted       prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	// Two DBs (or a DB and a Reader) on one registry share these series.
	set := promreg.NewSet(reg)
	m := &metrics{
		flushes:      set.Counter("shale_lsm_flushes_total", "Memtables flushed to L0 tables."),
		bytesWritten: set.CounterVec("shale_lsm_object_written_bytes_total", "Bytes written to the object store, by object kind.", "kind"),
		bytesRead:    set.Counter("shale_lsm_object_read_bytes_total", "Bytes read from the object store."),
		putsLanded: set.Counter("shale_lsm_conditional_puts_landed_total",
			"Conditional puts that failed or lost their answer but had landed, as a read-back showed."),
		corruptReads: set.Counter("shale_lsm_corrupt_reads_total",
			"Object-store answers (whole objects or ranges of a table) whose bytes failed their checksum and were read again."),
		writerState: set.GaugeVec("shale_lsm_writer_state",
			"1 for the writer's current state: ok, retrying (object store requests failing), stuck (failing for 10s or more) or fenced.", "state"),
		lastPersist: set.Gauge("shale_lsm_last_persist_timestamp_seconds",
			"When a write to the object store last succeeded (Unix time); time() minus it is the time since the writer last persisted."),
		l0Tables: set.Gauge("shale_lsm_l0_tables", "Tables in L0 in the current manifest."),
		l0Depth: set.Gauge("shale_lsm_l0_depth",
			"The most L0 tables of the current manifest that hold one key's range: what a read may consult in L0, and what stalls writes at L0StallTables."),
		sortedRuns:    set.Gauge("shale_lsm_sorted_runs", "Sorted runs in the current manifest."),
		memtableBytes: set.Gauge("shale_lsm_memtable_bytes", "Bytes held by the mutable and immutable memtables."),
		walFlush: set.Histogram(prometheus.HistogramOpts{
			Name: "shale_lsm_wal_flush_duration_seconds", Help: "Time to write one WAL object, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		writeStalls: set.Counter("shale_lsm_write_stalls_total", "Writes that waited for flushes or compactions (back-pressure)."),
		gcDeleted:   set.Counter("shale_lsm_gc_deleted_objects_total", "Objects deleted by garbage collection."),
	}
	sealed := set.CounterVec("shale_lsm_wal_objects_total",
		"WAL objects sealed for writing, by why: interval (--storage.wal.flush-interval), early (every write in progress had joined it, --storage.wal.min-interval), full, memtable (a memtable froze) or sync (a flush or log mark).", "reason")
	for r := range nSealReasons {
		m.walSealed[r] = sealed.WithLabelValues(r.String())
	}
	compactions := set.CounterVec("shale_lsm_compactions_total", "Compactions committed, by lane: l0 (L0 tables with the newest small runs) or runs (large runs merged beside it).", "lane")
	compactionBytes := set.CounterVec("shale_lsm_compaction_written_bytes_total", "Bytes of tables written by compactions, by lane.", "lane")
	compactionMoved := set.CounterVec("shale_lsm_compaction_moved_bytes_total",
		"Bytes of tables that compactions moved into their output unchanged (no other source overlapped them), by lane.", "lane")
	for _, l := range []compactionLane{laneL0, laneRuns} {
		m.compactions[l] = compactions.WithLabelValues(l.String())
		m.compactionBytes[l] = compactionBytes.WithLabelValues(l.String())
		m.compactionMoved[l] = compactionMoved.WithLabelValues(l.String())
	}
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("lsm: register metrics: %w", err)
	}
	return m, nil
}

// sealReason says why a WAL object was sealed (shale_lsm_wal_objects_total).
type sealReason uint8

const (
	sealInterval sealReason = iota
	sealEarly
	sealFull
	sealMemtable
	sealSync
	nSealReasons
)

func (r sealReason) String() string {
	return [...]string{"interval", "early", "full", "memtable", "sync"}[r]
}
