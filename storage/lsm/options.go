package lsm

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaledb/shale/cache"
	"github.com/shaledb/shale/storage/lsm/sst"
)

// MergeOperator combines merge operands with the value they apply to.
// existing is nil when the key has no value (never written or deleted);
// operands are oldest first. The returned slice becomes the
// LSM's.
//
// The operator must be associative: the LSM may fold consecutive operands
// into one by calling it with existing nil and later pass that result as a
// single operand, so op(k, v, [a, b]) must equal op(k, v, [op(k, nil, [a, b])]).
// Appending bytes and OR-ing bitmaps have this property.
type MergeOperator func(key, existing []byte, operands [][]byte) ([]byte, error)

// Clock tells the time; tests inject a fake one. Table ids, memtable age,
// garbage collection, leases and the writer's health read it.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// SystemClock is the wall clock.
var SystemClock Clock = systemClock{}

// Components are the live collaborators of a DB or Reader, apart from its
// settings. Every field may be left zero.
type Components struct {
	// Cache holds SST meta and data blocks; nil disables caching.
	Cache cache.Cache
	// Logger receives flush, compaction, GC and fencing events; nil
	// discards them.
	Logger *slog.Logger
	// Clock defaults to SystemClock.
	Clock Clock
	// Registerer receives the LSM's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Merge is required for Merge writes; reads of keys that have merge
	// operands fail without it.
	Merge MergeOperator
	// ReadMerge, if set, replaces Merge on reads (Get, iterators; not
	// compaction): a caller that can combine operands while decoding them
	// may return them framed together instead of merged.
	ReadMerge MergeOperator
	// OperandInterval, if set, maps a merge operand to the interval its
	// value covers (the time range of a block of samples); tables record
	// the interval of each data block made only of operands it maps, so
	// that an iterator given an interval skips the others without reading
	// them (Iterator.SetInterval). Writers and readers of one bucket may
	// differ here: a table written without it is read whole.
	OperandInterval IntervalFunc
	// FlushSplit, if set, says whether a memtable flush starts a new L0
	// table between two consecutive keys (prev < key): where one region of
	// the caller's key space ends and another begins. Tables of different
	// regions then do not overlap, so writes to one region do not deepen
	// L0 for the others, and a compaction moves a table that no other one
	// overlaps into its output instead of rewriting it.
	FlushSplit func(prev, key []byte) bool
}

// Interval is the closed interval [Lo, Hi] of Iterator.SetInterval.
type Interval = sst.Interval

// IntervalFunc maps a merge operand to its interval (Components.
// OperandInterval); see sst.IntervalFunc.
type IntervalFunc = sst.IntervalFunc

// Options are the writer's settings. Start from DefaultOptions.
type Options struct {
	// WALEnabled writes every write to a WAL object in the object store
	// before acknowledging it (when the write awaits durability). With the
	// WAL off, writes become durable when their memtable reaches L0.
	WALEnabled bool
	// WALFlushInterval is how often pending writes are grouped into one WAL
	// object.
	WALFlushInterval time.Duration
	// WALMinInterval lets a WAL object go before WALFlushInterval: once no
	// write announced with ExpectLog is still on its way (every commit in
	// progress has appended its record and waits), the object being filled
	// is sealed at once, but no sooner than WALMinInterval after the previous
	// one. Commits then wait about one object store write rather than half an
	// interval more, and a quiet moment no longer costs a whole interval.
	// 0, or at least WALFlushInterval: objects wait for the interval.
	WALMinInterval time.Duration
	// WALMaxBytes seals a WAL object early once it holds this many bytes.
	WALMaxBytes int
	// WALMaxInFlight is how many WAL objects are written at once (1 to
	// 16): the next ones fill meanwhile, and a write is acknowledged once
	// its object and every earlier one are stored. More hide more of the
	// object store's latency.
	WALMaxInFlight int
	// KeepLog keeps WAL objects holding log records (DB.Log) until
	// DB.TruncateLog passes them, even once their writes are in tables.
	// Without it log records live only as long as the writes around them.
	KeepLog bool

	// MemtableBytes is the size at which the memtable is frozen and flushed
	// to an L0 table.
	MemtableBytes int64
	// MemtableMaxAge flushes a non-empty memtable this long after it was
	// created, even if small; 0 disables age flushes.
	MemtableMaxAge time.Duration
	// MaxUnflushedBytes bounds memory: writers block while the memtables
	// not yet in L0 hold more than this.
	MaxUnflushedBytes int64

	// L0CompactionTrigger starts a compaction once L0 is this many tables
	// deep: this many hold one key's range (tables of disjoint ranges, as
	// Components.FlushSplit makes, add to the count, not the depth), or
	// once it holds L0StallTables tables.
	L0CompactionTrigger int
	// L0StallTables blocks writers while L0 is this many tables deep, or
	// holds four times as many tables (only when background compaction
	// runs).
	L0StallTables int
	// MaxSortedRuns merges the newest runs once there are more than this.
	MaxSortedRuns int
	// SizeRatio: a compaction of newer data also takes in the next older
	// run when that run is at most SizeRatio times the bytes collected so far
	// (size-tiered).
	SizeRatio float64
	// TargetTableBytes splits compaction output into tables of about this size.
	TargetTableBytes int64
	// RunLaneBytes: compactions of sorted runs that add up to this many
	// bytes run in a lane of their own, beside the compactions that drain
	// L0, so that rewriting a large run does not leave L0 to fill up and
	// stall writers while it lasts. Compactions of L0 take in no more runs
	// than keep them under it.
	RunLaneBytes int64
	// CompactionInterval is how often the planner looks for work besides
	// after every L0 flush; 0 disables background compaction (Compact still
	// works).
	CompactionInterval time.Duration

	// GCInterval is how often unreferenced objects are collected; 0 disables
	// background collection (CollectGarbage still works).
	GCInterval time.Duration
	// GCGracePeriod is how old an unreferenced object must be before it is
	// deleted; it protects readers that still use an older manifest.
	GCGracePeriod time.Duration
	// WALGCGracePeriod is the same for WAL objects (at most GCGracePeriod).
	// A reader reads WAL objects only while refreshing and reloads the
	// manifest when one is gone, so it can be short.
	WALGCGracePeriod time.Duration
	// ManifestsToKeep is how many manifest versions before the latest are
	// never collected.
	ManifestsToKeep int

	// RefuseLiveWriter makes Open fail with ErrLiveWriter while another
	// writer's lease is fresh, instead of fencing that writer (with a
	// warning). For a local folder, where a second writer is an accident.
	RefuseLiveWriter bool
	// Address, if set, is written in the writer's lease: where the writer
	// serves, for readers to tell senders (Reader.WriterLease).
	Address string

	// CloseTimeout bounds how long Close retries flushing through object
	// store failures before giving up.
	CloseTimeout time.Duration
	// RetryBackoff is the first pause between retries of a failed object
	// store request; it doubles up to MaxRetryBackoff. The writer retries
	// every failure until it succeeds (or the DB closes), so MaxRetryBackoff
	// is also about how long the writer takes to notice that the store is
	// back; 0 means one second.
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration

	// Table sets the format of the SSTs this writer builds.
	Table sst.WriterOptions
}

// DefaultOptions returns the default writer settings.
//
// Memtables, the L0 tables built from them and compaction output are held
// whole in memory until written: at 1M active series 32 MiB memtables, 128 MiB
// unflushed and 16 MiB output tables keep RSS about 10 % lower than 64, 256
// and 64 MiB, for a few percent more CPU per sample (docs/benchmarks.md).
func DefaultOptions() Options {
	return Options{
		WALEnabled:          true,
		WALFlushInterval:    100 * time.Millisecond,
		WALMaxBytes:         8 << 20,
		WALMaxInFlight:      8,
		MemtableBytes:       32 << 20,
		MemtableMaxAge:      10 * time.Minute,
		MaxUnflushedBytes:   128 << 20,
		L0CompactionTrigger: 4,
		L0StallTables:       24,
		MaxSortedRuns:       8,
		SizeRatio:           1,
		TargetTableBytes:    16 << 20,
		RunLaneBytes:        128 << 20,
		CompactionInterval:  5 * time.Second,
		GCInterval:          time.Minute,
		GCGracePeriod:       10 * time.Minute,
		WALGCGracePeriod:    30 * time.Second,
		ManifestsToKeep:     8,
		CloseTimeout:        30 * time.Second,
		RetryBackoff:        10 * time.Millisecond,
		MaxRetryBackoff:     time.Second,
		Table:               sst.DefaultWriterOptions(),
	}
}

// Validate reports every setting that cannot work.
func (o *Options) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(!o.WALEnabled || o.WALFlushInterval > 0, "WALFlushInterval must be positive with the WAL on, got %v", o.WALFlushInterval)
	check(o.WALMinInterval >= 0, "WALMinInterval must not be negative, got %v", o.WALMinInterval)
	check(o.WALMaxBytes > 0, "WALMaxBytes must be positive, got %d", o.WALMaxBytes)
	check(!o.WALEnabled || o.WALMaxInFlight >= 1 && o.WALMaxInFlight <= walInFlightLimit,
		"WALMaxInFlight must be 1 to %d with the WAL on, got %d", walInFlightLimit, o.WALMaxInFlight)
	check(o.MemtableBytes > 0, "MemtableBytes must be positive, got %d", o.MemtableBytes)
	check(o.MemtableMaxAge >= 0, "MemtableMaxAge must not be negative")
	check(o.MaxUnflushedBytes >= o.MemtableBytes, "MaxUnflushedBytes (%d) must be at least MemtableBytes (%d)", o.MaxUnflushedBytes, o.MemtableBytes)
	check(o.L0CompactionTrigger >= 1, "L0CompactionTrigger must be at least 1, got %d", o.L0CompactionTrigger)
	check(o.L0StallTables > o.L0CompactionTrigger, "L0StallTables (%d) must exceed L0CompactionTrigger (%d)", o.L0StallTables, o.L0CompactionTrigger)
	check(o.MaxSortedRuns >= 1, "MaxSortedRuns must be at least 1, got %d", o.MaxSortedRuns)
	check(o.SizeRatio > 0, "SizeRatio must be positive, got %v", o.SizeRatio)
	check(o.TargetTableBytes > 0, "TargetTableBytes must be positive, got %d", o.TargetTableBytes)
	check(o.RunLaneBytes > 0, "RunLaneBytes must be positive, got %d", o.RunLaneBytes)
	check(o.CompactionInterval >= 0, "CompactionInterval must not be negative")
	check(o.GCInterval >= 0, "GCInterval must not be negative")
	check(o.GCGracePeriod >= 0, "GCGracePeriod must not be negative")
	check(o.WALGCGracePeriod >= 0, "WALGCGracePeriod must not be negative")
	check(o.ManifestsToKeep >= 1, "ManifestsToKeep must be at least 1, got %d", o.ManifestsToKeep)
	check(o.CloseTimeout > 0, "CloseTimeout must be positive")
	check(o.RetryBackoff > 0, "RetryBackoff must be positive")
	check(o.MaxRetryBackoff >= 0, "MaxRetryBackoff must not be negative")
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("lsm options: %w", err)
	}
	return nil
}

// ReaderOptions are the settings of a read-only Reader.
type ReaderOptions struct {
	// PollInterval is how often the reader looks for a newer manifest (and
	// new WAL objects); 0 disables polling (Refresh still works).
	PollInterval time.Duration
	// ReplayWAL makes the reader also read WAL objects past the manifest's
	// replay position, so it sees writes not yet in L0.
	ReplayWAL bool
	// RetryBackoff is the first pause between retries of a transient error.
	RetryBackoff time.Duration
	// Checkpoint, if set, makes the reader read that checkpoint (see
	// DB.Checkpoint) and nothing newer: it neither polls nor reads WAL
	// objects.
	Checkpoint string
}

// DefaultReaderOptions returns the default reader settings.
func DefaultReaderOptions() ReaderOptions {
	return ReaderOptions{PollInterval: time.Second, ReplayWAL: true, RetryBackoff: 10 * time.Millisecond}
}

// Validate reports every setting that cannot work.
func (o *ReaderOptions) Validate() error {
	if o.PollInterval < 0 {
		return fmt.Errorf("lsm reader options: PollInterval must not be negative")
	}
	if o.RetryBackoff <= 0 {
		return fmt.Errorf("lsm reader options: RetryBackoff must be positive")
	}
	if o.Checkpoint != "" {
		if err := ValidCheckpointName(o.Checkpoint); err != nil {
			return fmt.Errorf("lsm reader options: %w", err)
		}
	}
	return nil
}

// WriteOptions control one write.
type WriteOptions struct {
	// AwaitDurable returns only once the write is durable in the object
	// store: in a WAL object with the WAL on, in an L0 table with it off
	// (which waits for the next memtable flush: by size, age or Flush).
	AwaitDurable bool
	// SkipWAL leaves the write out of the WAL even when it is on: it
	// becomes durable only when its memtable reaches L0 (Flush). For bulk
	// writes whose content the caller can rebuild after a crash (from its
	// own log) until it has called Flush. A later write that went through
	// the WAL may survive a crash that this one does not.
	SkipWAL bool
}

func (c *Components) withDefaults() Components {
	d := *c
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Clock == nil {
		d.Clock = SystemClock
	}
	return d
}

// prepare validates opts, then returns c with its defaults filled in and
// the LSM's metrics, registered on c.Registerer: how Open and OpenReader
// start.
func (c *Components) prepare(opts interface{ Validate() error }) (Components, *metrics, error) {
	if err := opts.Validate(); err != nil {
		return *c, nil, err
	}
	d := c.withDefaults()
	m, err := newMetrics(d.Registerer)
	return d, m, err
}

// readMerge is the merge operator of reads.
func (c *Components) readMerge() MergeOperator {
	if c.ReadMerge != nil {
		return c.ReadMerge
	}
	return c.Merge
}
