package storage

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaledb/shale/internal/promreg"
	"github.com/shaledb/shale/storage/lsm"
)

// The cache warmer keeps the blocks of recent partitions in the block cache,
// so that the queries most dashboards ask (the last hours) do not pay
// object-store round trips: at start, and again whenever the LSM's set of
// tables changes (a memtable flush, a compaction, or for a reader the
// writer's newest manifest), since new tables have new cache keys.

// WarmOptions are the settings of the cache warmer.
type WarmOptions struct {
	// Age is how far back from the newest sample the warmer loads
	// partitions: every partition that ends after newest - Age. Zero
	// disables the warmer.
	Age time.Duration
	// CheckInterval is how often the warmer looks for a new LSM manifest.
	// The check reads memory only.
	CheckInterval time.Duration
}

// DefaultWarmOptions returns the default settings: the last 6 h (the
// default range of many dashboards), checked every second.
func DefaultWarmOptions() WarmOptions {
	return WarmOptions{Age: 6 * time.Hour, CheckInterval: time.Second}
}

// Validate reports the first setting that cannot work.
func (o WarmOptions) Validate() error {
	switch {
	case o.Age < 0:
		return fmt.Errorf("cache warm age %s: must not be negative", o.Age)
	case o.Age > 0 && o.CheckInterval <= 0:
		return fmt.Errorf("cache warm check interval %s: must be positive", o.CheckInterval)
	}
	return nil
}

// WarmStats says what one warming read.
type WarmStats struct {
	// Partitions is the number of partitions loaded.
	Partitions int
	// Requests and Bytes are the object-store reads made and the bytes they
	// returned; blocks already cached cost nothing.
	Requests int64
	Bytes    int64
	Duration time.Duration
}

// Warm loads into the block cache the partitions that end after the newest
// sample time minus age, newest first, and the partition registry. It reads
// only the blocks not cached yet, each run of adjacent ones with one ranged
// read. Without a block cache it only opens the tables.
func (db *DB) Warm(ctx context.Context, age time.Duration) (st WarmStats, err error) {
	start := time.Now()
	defer func() { st.Duration = time.Since(start) }()
	src := db.lsm
	if age <= 0 {
		return st, nil
	}
	add := func(ps lsm.PrefetchStats) {
		st.Requests += ps.Requests
		st.Bytes += ps.Bytes
	}
	ps, err := src.Prefetch(ctx, []byte{keyRegistry}, []byte{keyRegistry + 1})
	add(ps)
	if err != nil {
		return st, fmt.Errorf("warm partition registry: %w", err)
	}
	newest := db.head.maxT.Load()
	var parts []int64
	err = db.scan(ctx, []byte{keyRegistry}, []byte{keyRegistry + 1}, func(k, v []byte) error {
		m, err := decodePartitionMeta(v)
		if err != nil {
			return fmt.Errorf("registry key %x: %w", k, err)
		}
		newest = max(newest, m.maxT)
		parts = append(parts, getPart(k[1:]))
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("warm: list partitions: %w", err)
	}
	oldest := newest - age.Milliseconds()
	for i := len(parts) - 1; i >= 0; i-- {
		part := parts[i]
		if part+db.partMs <= oldest {
			break
		}
		pre := partPrefix(part)
		ps, err := src.Prefetch(ctx, pre, prefixEnd(pre))
		add(ps)
		if err != nil {
			return st, fmt.Errorf("warm partition %d: %w", part, err)
		}
		st.Partitions++
	}
	return st, nil
}

// Warmer runs Warm in the background; see DB.StartWarmer.
type Warmer struct {
	db      *DB
	opts    WarmOptions
	metrics *warmMetrics
	onRound func(version uint64, st WarmStats, err error) // tests

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// StartWarmer starts warming the block cache in the background with opts:
// at once, then whenever the LSM's manifest changes. It works on a writer and
// on a read-only DB alike. reg (optional) receives its metrics, which the
// warmers on one registry share and which stay registered after Stop. Call
// Stop before or after Close; a Warmer whose DB closed stops by itself.
func (db *DB) StartWarmer(opts WarmOptions, reg prometheus.Registerer) (*Warmer, error) {
	return db.startWarmer(opts, reg, nil)
}

func (db *DB) startWarmer(opts WarmOptions, reg prometheus.Registerer, onRound func(uint64, WarmStats, error)) (*Warmer, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	m, err := newWarmMetrics(reg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &Warmer{db: db, opts: opts, metrics: m, onRound: onRound, cancel: cancel, done: make(chan struct{})}
	if opts.Age <= 0 {
		close(w.done)
		return w, nil
	}
	go w.run(ctx)
	return w, nil
}

// Stop ends the warmer and waits for it; it is safe to call more than once.
func (w *Warmer) Stop() {
	w.once.Do(func() {
		w.cancel()
		<-w.done
	})
}

func (w *Warmer) run(ctx context.Context) {
	defer close(w.done)
	src := w.db.lsm
	t := time.NewTicker(w.opts.CheckInterval)
	defer t.Stop()
	warmed, first := uint64(0), true
	for {
		if v := src.ManifestVersion(); first || v != warmed {
			st, err := w.db.Warm(ctx, w.opts.Age)
			if ctx.Err() != nil || w.db.isClosed() {
				return
			}
			w.metrics.observe(st, err)
			if err != nil {
				w.db.logger.Warn("cache warming failed; retrying at the next check", "err", err)
			} else {
				warmed, first = v, false
				w.db.logger.Debug("cache warmed", "manifest", v, "partitions", st.Partitions,
					"requests", st.Requests, "bytes", st.Bytes, "duration", st.Duration)
			}
			if w.onRound != nil {
				w.onRound(v, st, err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-w.db.closed:
			return
		case <-t.C:
		}
	}
}

type warmMetrics struct {
	runs     *prometheus.CounterVec
	bytes    prometheus.Counter
	requests prometheus.Counter
	duration prometheus.Histogram
}

func newWarmMetrics(reg prometheus.Registerer) (*warmMetrics, error) {
	// Warmers on one registry share these series.
	set := promreg.NewSet(reg)
	m := &warmMetrics{
		runs: set.CounterVec("shale_storage_cache_warm_runs_total",
			"Warmings of the block cache with recent partitions, by result.", "result"),
		bytes:    set.Counter("shale_storage_cache_warm_read_bytes_total", "Bytes the cache warmer read from the object store."),
		requests: set.Counter("shale_storage_cache_warm_requests_total", "Object-store reads the cache warmer made."),
		duration: set.Histogram(prometheus.HistogramOpts{
			Name:    "shale_storage_cache_warm_duration_seconds",
			Help:    "Time one warming of the block cache took.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 8),
		}),
	}
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("storage: register cache warmer metrics: %w", err)
	}
	m.runs.WithLabelValues("success")
	m.runs.WithLabelValues("error")
	return m, nil
}

func (m *warmMetrics) observe(st WarmStats, err error) {
	result := "success"
	if err != nil {
		result = "error"
	}
	m.runs.WithLabelValues(result).Inc()
	m.bytes.Add(float64(st.Bytes))
	m.requests.Add(float64(st.Requests))
	m.duration.Observe(st.Duration.Seconds())
}
