package cache

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

type tier int

const (
	tierMemory tier = iota
	tierDisk
	numTiers
)

var tierNames = [numTiers]string{"memory", "disk"}

// classUnknown labels a Get miss: Get is not told the class of what it looks for.
const (
	classUnknown = 2
	numClasses   = 3
)

var classNames = [numClasses]string{ClassData.String(), ClassMeta.String(), "unknown"}

// Disk write drop reasons.
const (
	dropQueueFull = iota
	dropTooLarge
	dropError
	numDropReasons
)

var dropReasonNames = [numDropReasons]string{"queue_full", "too_large", "error"}

// counters are the cache's counts. The metrics collector and Stats both read
// them, so the two never disagree.
type counters struct {
	hits        [numTiers][numClasses]atomic.Uint64
	misses      [numTiers][numClasses]atomic.Uint64
	evictions   [numTiers]atomic.Uint64
	loads       atomic.Uint64
	loadErrors  atomic.Uint64
	diskWrites  atomic.Uint64
	diskDrops   [numDropReasons]atomic.Uint64
	corruptions atomic.Uint64
}

func classIndex(c Class) int {
	if c == ClassMeta {
		return int(ClassMeta)
	}
	return int(ClassData)
}

// collector exports a Tiered cache's metrics.
type collector struct {
	c *Tiered

	hits, misses, bytes, budget, entries *prometheus.Desc
	evictions                            *prometheus.Desc
	loadErrors, diskWrites, diskDrops    *prometheus.Desc
	corruptions                          *prometheus.Desc
	loadDuration                         *prometheus.HistogramVec
}

func newCollector(c *Tiered) *collector {
	return &collector{
		c: c,
		hits: prometheus.NewDesc("shale_cache_hits_total",
			"Lookups answered by a tier, by tier and block class.", []string{"tier", "class"}, nil),
		misses: prometheus.NewDesc("shale_cache_misses_total",
			"Lookups a tier could not answer, by tier and block class (unknown for Get, which is not told the class).",
			[]string{"tier", "class"}, nil),
		bytes: prometheus.NewDesc("shale_cache_bytes",
			"Bytes charged to a tier's budget (memory: keys, values and per-entry overhead; disk: segment file bytes).",
			[]string{"tier"}, nil),
		budget: prometheus.NewDesc("shale_cache_budget_bytes",
			"A tier's budget (memory: --cache.memory-size, lowered while the process nears --memory.limit; disk: --cache.disk-size, lower when the disk has less room).",
			[]string{"tier"}, nil),
		entries: prometheus.NewDesc("shale_cache_entries",
			"Blocks held by a tier.", []string{"tier"}, nil),
		evictions: prometheus.NewDesc("shale_cache_evictions_total",
			"Blocks a tier dropped to stay within its budget.", []string{"tier"}, nil),
		loadErrors: prometheus.NewDesc("shale_cache_load_errors_total",
			"Loads after a miss that returned an error.", nil, nil),
		diskWrites: prometheus.NewDesc("shale_cache_disk_writes_total",
			"Blocks written to the disk tier.", nil, nil),
		diskDrops: prometheus.NewDesc("shale_cache_disk_write_drops_total",
			"Blocks not written to the disk tier, by reason (queue_full, too_large, error).", []string{"reason"}, nil),
		corruptions: prometheus.NewDesc("shale_cache_disk_corruptions_total",
			"Disk tier records or segment files that failed validation and were dropped.", nil, nil),
		loadDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "shale_cache_load_duration_seconds",
			Help:    "Time taken by loads after a miss in every tier, by block class.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 15),
		}, []string{"class"}),
	}
}

func (m *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.hits, m.misses, m.bytes, m.budget, m.entries, m.evictions,
		m.loadErrors, m.diskWrites, m.diskDrops, m.corruptions} {
		ch <- d
	}
	m.loadDuration.Describe(ch)
}

func (m *collector) Collect(ch chan<- prometheus.Metric) {
	ctr := &m.c.ctr
	tiers := []tier{tierMemory}
	if m.c.disk != nil {
		tiers = append(tiers, tierDisk)
	}
	for _, t := range tiers {
		for cl := range numClasses {
			ch <- prometheus.MustNewConstMetric(m.hits, prometheus.CounterValue,
				float64(ctr.hits[t][cl].Load()), tierNames[t], classNames[cl])
			ch <- prometheus.MustNewConstMetric(m.misses, prometheus.CounterValue,
				float64(ctr.misses[t][cl].Load()), tierNames[t], classNames[cl])
		}
		ch <- prometheus.MustNewConstMetric(m.evictions, prometheus.CounterValue,
			float64(ctr.evictions[t].Load()), tierNames[t])
	}
	mem := m.c.mem.stats()
	ch <- prometheus.MustNewConstMetric(m.bytes, prometheus.GaugeValue, float64(mem.bytes), tierNames[tierMemory])
	ch <- prometheus.MustNewConstMetric(m.budget, prometheus.GaugeValue, float64(m.c.mem.budget()), tierNames[tierMemory])
	ch <- prometheus.MustNewConstMetric(m.entries, prometheus.GaugeValue, float64(mem.entries), tierNames[tierMemory])
	if m.c.disk != nil {
		d := m.c.disk.stats()
		ch <- prometheus.MustNewConstMetric(m.bytes, prometheus.GaugeValue, float64(d.bytes), tierNames[tierDisk])
		ch <- prometheus.MustNewConstMetric(m.budget, prometheus.GaugeValue, float64(m.c.disk.budget.Load()), tierNames[tierDisk])
		ch <- prometheus.MustNewConstMetric(m.entries, prometheus.GaugeValue, float64(d.entries), tierNames[tierDisk])
		ch <- prometheus.MustNewConstMetric(m.diskWrites, prometheus.CounterValue, float64(ctr.diskWrites.Load()))
		for r := range numDropReasons {
			ch <- prometheus.MustNewConstMetric(m.diskDrops, prometheus.CounterValue,
				float64(ctr.diskDrops[r].Load()), dropReasonNames[r])
		}
		ch <- prometheus.MustNewConstMetric(m.corruptions, prometheus.CounterValue, float64(ctr.corruptions.Load()))
	}
	ch <- prometheus.MustNewConstMetric(m.loadErrors, prometheus.CounterValue, float64(ctr.loadErrors.Load()))
	m.loadDuration.Collect(ch)
}

// TierStats are one tier's counts.
type TierStats struct {
	Hits, Misses uint64
	Bytes        int64 // charged to the budget
	Budget       int64 // the budget now (see Tiered.LimitMemory)
	Entries      int64
	Evictions    uint64
}

// Stats are a snapshot of a Tiered cache's counts, the same numbers its
// metrics export.
type Stats struct {
	Memory, Disk TierStats
	// Loads counts calls of a load function; LoadErrors those that failed.
	Loads, LoadErrors uint64
	// DiskWrites counts blocks written to the disk tier, DiskWriteDrops
	// blocks that were not (queue full, too large, I/O error).
	DiskWrites, DiskWriteDrops uint64
	// DiskCorruptions counts records and segment files found corrupt.
	DiskCorruptions uint64
}
