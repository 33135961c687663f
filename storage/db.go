// Package storage is Shale's time-series engine: time partitions, the head
// (open partitions in memory), flushes of sample blocks and index to the LSM,
// the querier that merges head and persisted data, and retention.
package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	promstorage "github.com/prometheus/prometheus/storage"

	"github.com/shaledb/shale/index"
	"github.com/shaledb/shale/storage/lsm"
)

// ErrClosed is returned by operations on a closed DB.
var ErrClosed = errors.New("storage: closed")

// Components are what DB is built from besides its settings.
type Components struct {
	Logger *slog.Logger
	// Registerer receives the engine's metrics (nil: none). DBs on one
	// registry share the counters; the head gauges are one DB's, so only one
	// DB may be open on a registry at a time. Close unregisters the gauges.
	Registerer prometheus.Registerer
	// Now returns the wall clock; retention and flush cadence use it.
	Now func() time.Time
}

// DB is the time-series engine. It is safe for concurrent use.
type DB struct {
	opts Options
	// lsm serves every read; w is the writer's LSM (nil on a read-only
	// DB), r the reader's (nil on a writer).
	lsm     lsm.View
	w       *lsm.DB
	r       *lsm.Reader
	logger  *slog.Logger
	metrics *metrics
	now     func() time.Time
	partMs  int64

	head *head
	meta *metadataStore
	ex   *exemplarStore

	// flushMu serialises head flushes.
	flushMu sync.Mutex
	// flushNow asks Run for a flush before the interval is up.
	flushNow chan struct{}

	follow  followed
	changes changeHook

	// waitingHook, when set (tests), is called as a late sample starts
	// waiting for a write-out (waitWrittenOut).
	waitingHook func()

	closeOnce sync.Once
	closed    chan struct{}
	bgDone    chan struct{}
	readOnly  bool
}

// open builds a DB on an LSM, the writer's (w) or a reader's (r), and
// recovers the head of a writer.
func open(ctx context.Context, view lsm.View, w *lsm.DB, r *lsm.Reader, opts Options, comps Components) (*DB, error) {
	readOnly := w == nil
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if comps.Logger == nil {
		comps.Logger = slog.New(slog.DiscardHandler)
	}
	if comps.Now == nil {
		comps.Now = time.Now
	}
	m, err := newMetrics(comps.Registerer)
	if err != nil {
		return nil, err
	}
	db := &DB{
		opts:     opts,
		lsm:      view,
		w:        w,
		r:        r,
		logger:   comps.Logger,
		metrics:  m,
		now:      comps.Now,
		partMs:   opts.PartitionDuration.Milliseconds(),
		head:     &head{parts: map[int64]*headPart{}},
		meta:     newMetadataStore(),
		ex:       newExemplarStore(100_000),
		closed:   make(chan struct{}),
		flushNow: make(chan struct{}, 1),
		bgDone:   make(chan struct{}),
		readOnly: readOnly,
	}
	db.head.maxT.Store(math.MinInt64)
	if err := db.checkSettings(ctx); err != nil {
		return nil, err
	}
	if !readOnly {
		if err := db.recover(ctx); err != nil {
			return nil, fmt.Errorf("recover head: %w", err)
		}
		m, err := db.loadMetadata(ctx)
		if err != nil {
			return nil, err
		}
		db.meta.m = m
	}
	db.head.flushAt.Store(flushThreshold(opts.HeadFlushSamples, db.head.numSeries()))
	if err := db.metrics.register(db); err != nil {
		return nil, err
	}
	return db, nil
}

func (db *DB) partitionOf(t int64) int64 {
	p := t / db.partMs * db.partMs
	if t < 0 && t%db.partMs != 0 {
		p -= db.partMs
	}
	return p
}

// maxHeadParts is how many partitions the head holds before it asks for a
// flush, which writes out those behind minValidTime: the open one and the
// one before, and a few reopened by a backfill.
const maxHeadParts = 4

// settingsVersion is the version of the stored format, and the layout of
// the settings value: version(1) partition duration in ms (uvarint).
// Version 2 added partitions' data bounds to the registry and the series
// times keys; version 1 data is not read (no release wrote it).
const settingsVersion = 2

// checkSettings refuses to serve data written with another partition
// duration: every key would name the wrong partition. A writer records the
// duration the first time.
func (db *DB) checkSettings(ctx context.Context) error {
	v, ok, err := db.lsm.Get(ctx, []byte{keySettings})
	if err != nil {
		return fmt.Errorf("read storage settings: %w", err)
	}
	if !ok {
		if db.readOnly {
			return nil // the writer has not recorded them yet
		}
		enc := binary.AppendUvarint([]byte{settingsVersion}, uint64(db.partMs))
		var b lsm.Batch
		b.Put([]byte{keySettings}, enc)
		if err := db.write(ctx, &b, true); err != nil {
			return fmt.Errorf("record storage settings: %w", err)
		}
		return nil
	}
	if len(v) < 2 || v[0] != settingsVersion {
		if len(v) > 0 && v[0] < settingsVersion {
			return fmt.Errorf("storage settings: the data here is in storage format version %d, which this version does not read (it reads version %d); start on an empty bucket or prefix", v[0], settingsVersion)
		}
		return fmt.Errorf("storage settings: unknown version %x", v)
	}
	ms, n := binary.Uvarint(v[1:])
	if n <= 0 {
		return fmt.Errorf("storage settings: bad partition duration %x", v)
	}
	if int64(ms) != db.partMs {
		return fmt.Errorf("the data here was written with --storage.partition-duration=%s and cannot be read with %s; start with %s",
			time.Duration(ms)*time.Millisecond, db.opts.PartitionDuration, time.Duration(ms)*time.Millisecond)
	}
	return nil
}

// oldestAccepted is the oldest sample time a write may have, given the
// newest sample time maxT: anything within retention (backfill). Samples
// older than minValidTime reopen their partition in the head and are
// written out, merged with what the partition holds, at the next flush.
func (db *DB) oldestAccepted(maxT int64) int64 {
	r := db.opts.Retention.Milliseconds()
	if maxT == math.MinInt64 || r <= 0 || maxT < math.MinInt64+r {
		return math.MinInt64
	}
	return maxT - r
}

// minValidTime is the oldest sample time the head keeps partitions open for, given its newest
// sample time maxT: half a partition behind for in-order samples, or the
// out-of-order window if that is longer.
func (db *DB) minValidTime(maxT int64) int64 {
	if maxT == math.MinInt64 {
		return math.MinInt64
	}
	w := max(db.partMs/2, db.opts.OutOfOrderWindow.Milliseconds())
	if maxT < math.MinInt64+w {
		return math.MinInt64
	}
	return maxT - w
}

// recover rebuilds the head from the LSM: open partitions from the registry,
// their series from the forward index, and samples not yet in sample blocks
// from the head log.
func (db *DB) recover(ctx context.Context) error {
	start := time.Now()
	maxT := int64(math.MinInt64)
	var open []int64
	metas := map[int64]partitionMeta{}
	err := db.scan(ctx, []byte{keyRegistry}, []byte{keyRegistry + 1}, func(k, v []byte) error {
		m, err := decodePartitionMeta(v)
		if err != nil {
			return fmt.Errorf("registry key %x: %w", k, err)
		}
		maxT = max(maxT, m.maxT)
		if !m.closed {
			open = append(open, getPart(k[1:]))
			metas[getPart(k[1:])] = m
		}
		return nil
	})
	if err != nil {
		return err
	}
	series := 0
	for _, part := range open {
		p, err := db.loadPart(ctx, part, metas[part])
		if err != nil {
			return err
		}
		series += len(p.series)
		db.head.parts[part] = p
	}
	records, samples := 0, 0
	replay := func(rec []byte) error {
		records++
		return decodeLogRecord(rec, func(e *logEntry) error {
			p := db.head.parts[e.part]
			if p == nil {
				return nil // the partition was closed: its samples are in its blocks
			}
			s := p.seriesByRef(e.ref)
			if s == nil {
				return fmt.Errorf("head log names series %d of partition %d, which has %d series", e.ref, e.part, len(p.series))
			}
			samples++
			maxT = max(maxT, e.t)
			p.noteTime(e.t)
			s.lock()
			defer s.unlock()
			return s.appendLocked(sample{t: e.t, v: e.v, h: e.h, fh: e.fh})
		})
	}
	if db.opts.WAL {
		if err := db.w.ReplayLog(ctx, replay); err != nil {
			return fmt.Errorf("replay head log: %w", err)
		}
	}
	db.head.maxT.Store(maxT)
	db.logger.Info("head recovered", "partitions", len(open), "series", series,
		"log_records", records, "log_samples", samples, "duration", time.Since(start))
	return nil
}

// headPartFor returns the open partition that holds time t, creating it if
// needed. It returns nil if t is older than the head accepts.
func (db *DB) headPartFor(ctx context.Context, t int64) (*headPart, error) {
	part := db.partitionOf(t)
	db.head.mu.RLock()
	p := db.head.parts[part]
	open := p != nil && !p.closed.Load() // closed is written under the head's lock
	db.head.mu.RUnlock()
	if open {
		return p, nil
	}
	db.head.mu.Lock()
	defer db.head.mu.Unlock()
	if p = db.head.parts[part]; p != nil {
		if p.closed.Load() {
			return nil, nil
		}
		return p, nil
	}
	// A partition written out before opens again with its series, so late
	// samples within the accepted window still land.
	p = newHeadPart(part, part+db.partMs)
	if v, ok, err := db.lsm.Get(ctx, registryKey(part)); err != nil {
		return nil, err
	} else if ok {
		m, err := decodePartitionMeta(v)
		if err != nil {
			return nil, fmt.Errorf("reopen partition %d: registry entry: %w", part, err)
		}
		if p, err = db.loadPart(ctx, part, m); err != nil {
			return nil, fmt.Errorf("reopen partition %d: %w", part, err)
		}
		db.logger.Info("partition reopened for late samples", "start", part, "series", len(p.series))
	}
	var b lsm.Batch
	b.Put(registryKey(part), p.meta(false, db.head.maxT.Load()).encode())
	if err := db.write(ctx, &b, true); err != nil {
		return nil, fmt.Errorf("register partition %d: %w", part, err)
	}
	db.head.parts[part] = p
	db.metrics.partitionsCreated.Inc()
	if len(db.head.parts) > maxHeadParts {
		// A backfill reopens old partitions, each with its whole series
		// index: write them out again before many pile up.
		select {
		case db.flushNow <- struct{}{}:
		default:
		}
	}
	return p, nil
}

// loadPart returns the partition that starts at part as the LSM holds it,
// for the writer's head: its series (from the forward index) with their
// newest times, and the data bounds of m, its registry entry.
func (db *DB) loadPart(ctx context.Context, part int64, m partitionMeta) (*headPart, error) {
	p := newHeadPart(part, part+db.partMs)
	p.restoreBounds(m)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := db.loadForwardLocked(ctx, p); err != nil {
		return nil, err
	}
	if err := db.loadSeriesTimesLocked(ctx, p); err != nil {
		return nil, err
	}
	return p, nil
}

// recordSeries writes the forward-index entries of p's series that the LSM
// does not hold yet, once the first need refs are not all recorded: those of
// every series created so far, in ref order, in batches of about
// maxBatchBytes. The writes go to the WAL, so a head log record appended
// after recordSeries returns is never durable without them. Series created at
// once by many appenders (every active series at a partition boundary) are
// recorded a batch at a time by whichever commit comes first, while the
// others wait on recordMu and find their series recorded: one LSM write for
// thousands of series where there was one each, and no lock of the partition
// held across it. A write waits for room in the LSM (back-pressure while the
// object store fails) at most as long as ctx allows; what it could not write
// the next call writes.
func (db *DB) recordSeries(ctx context.Context, p *headPart, need uint32) error {
	if p.recorded.Load() >= need {
		return nil
	}
	p.recordMu.Lock()
	defer p.recordMu.Unlock()
	from := p.recorded.Load()
	if from >= need {
		return nil
	}
	p.mu.RLock()
	n := uint32(len(p.series))
	p.mu.RUnlock()
	b := &p.recordBatch
	b.Reset()
	var (
		size    int
		builder labels.ScratchBuilder
		enc     []byte
	)
	write := func() error {
		n := b.Len()
		if n == 0 {
			return nil
		}
		if err := db.write(ctx, b, true); err != nil {
			return err
		}
		p.recorded.Add(uint32(n))
		db.metrics.seriesCreated.Add(float64(n))
		b.Reset()
		size = 0
		return nil
	}
	for ref := from; ref < n; ref++ {
		enc = index.EncodeLabels(enc[:0], p.labelsOf(ref, &builder))
		b.Put(forwardKey(p.start, ref), enc)
		size += len(enc) + 16
		if size >= maxBatchBytes {
			if err := write(); err != nil {
				return err
			}
		}
	}
	return write()
}

// Close flushes the head to the LSM and closes the LSM, retrying object
// store failures for up to a minute.
func (db *DB) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), defaultCloseTimeout)
	defer cancel()
	return db.Shutdown(ctx)
}

// defaultCloseTimeout bounds Close.
const defaultCloseTimeout = time.Minute

// Shutdown is Close bounded by ctx: when the object store cannot take the
// head's samples before ctx ends, it logs what it could not write out
// (with the WAL on, those samples are in the WAL and come back at the next
// open; with it off they are lost), closes all the same and returns an
// error.
func (db *DB) Shutdown(ctx context.Context) error {
	var err error
	db.closeOnce.Do(func() {
		close(db.closed)
		if !db.readOnly && !db.w.Health().Fenced {
			unflushed := db.head.unflushed.Load()
			series := db.head.numSeries()
			if err = db.flushHead(ctx, closeNone); err != nil {
				if db.opts.WAL {
					db.logger.Error("shutdown: could not write the head out; its samples are in the write-ahead log and come back at the next start",
						"samples", unflushed, "series", series, "err", err)
				} else {
					db.logger.Error("shutdown: could not write the head out; with the WAL off these samples are lost",
						"samples", unflushed, "series", series, "err", err)
				}
			}
		}
		var cerr error
		if db.w != nil {
			cerr = db.w.CloseContext(ctx)
		} else {
			cerr = db.r.Close()
		}
		if err == nil {
			err = cerr
		}
		db.metrics.unregister()
	})
	return err
}

func (db *DB) isClosed() bool {
	select {
	case <-db.closed:
		return true
	default:
		return false
	}
}

// StartTime returns the oldest time the DB may hold data for.
func (db *DB) StartTime() (int64, error) {
	parts, err := db.partitions(context.Background(), math.MinInt64, math.MaxInt64)
	if err != nil {
		return 0, err
	}
	if len(parts) == 0 {
		return math.MaxInt64, nil
	}
	return parts[0].start, nil
}

var (
	_ promstorage.Storage           = (*DB)(nil)
	_ promstorage.ExemplarQueryable = (*DB)(nil)
)
