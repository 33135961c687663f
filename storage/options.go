package storage

import (
	"fmt"
	"time"
)

// Options are the time-series engine's settings. Components (the LSM, the
// logger, the metrics registerer) are passed to Open separately.
type Options struct {
	// PartitionDuration is the length of a time partition. Every partition
	// holds its own series dictionary, forward index, postings and sample
	// blocks under one key prefix. It must divide a day evenly.
	PartitionDuration time.Duration
	// HeadFlushInterval is how often the head writes the samples it holds
	// to the LSM as sample blocks. With the WAL off it bounds what a crash
	// loses.
	HeadFlushInterval time.Duration
	// HeadFlushSamples makes the head flush early once it holds this many
	// samples not yet in sample blocks, so a backfill or a burst does not
	// keep everything (and its head log) in memory until the next interval.
	// Zero flushes by interval only.
	HeadFlushSamples int64
	// OutOfOrderWindow is how far behind the newest sample the head keeps
	// partitions open (at least half a partition): samples within it take
	// the fast path into memory. Older samples within Retention are
	// accepted too (backfill): their partition opens again in the head with
	// its series index and is written out, merged with what it held, at the
	// next flush. Zero rejects samples older than their series' newest.
	OutOfOrderWindow time.Duration
	// TooFarInFuture refuses samples more than this ahead of the server's
	// clock: one sample stamped in nanoseconds instead of milliseconds, or by
	// a host whose clock is a year ahead, would otherwise become the newest
	// sample, and every sample on time would then fall behind the
	// out-of-order window and the retention. Zero takes any time.
	TooFarInFuture time.Duration
	// WAL makes every committed append durable in the object store before
	// Commit returns (through the LSM's write-ahead log).
	WAL bool
	// Retention drops partitions that ended longer than this ago (measured
	// against the newest sample). Zero keeps everything.
	Retention time.Duration
	// WriteTimeout bounds how long a commit waits for the object store
	// (its samples to become durable with the WAL on, room in the WAL
	// queue): past it, Commit fails with an error that asks the sender to
	// retry (Unavailable). While the store has been failing for longer than
	// this, commits fail at once. 0 means no bound.
	WriteTimeout time.Duration
	// MaxHeadSeries bounds the series a head partition holds (the series
	// that had a sample in its time, less those retired): a sample of a new
	// series beyond it is refused with ErrSeriesLimit, samples of the
	// series held are taken. It bounds the head's memory when a sender's
	// label values explode. At a partition boundary the ending partition
	// keeps its series until it is written out, so the head may hold up to
	// twice as many for a while. It also bounds the metric families whose
	// metadata is kept. Zero: no bound.
	MaxHeadSeries int
}

// DefaultOptions returns the settings a server starts with.
//
// HeadFlushSamples: each early flush writes one more block of every series
// it cuts, which compactions then merge again. At 100k series, 1.4M samples
// a second, 24M samples gave -8 % CPU per sample over 3 minutes against 8M,
// for about 16 MiB more peak RSS (docs/benchmarks.md). From 400k series up,
// 60 samples a series sets a higher threshold (flushThreshold).
func DefaultOptions() Options {
	return Options{
		PartitionDuration: 2 * time.Hour,
		HeadFlushInterval: 5 * time.Minute,
		HeadFlushSamples:  24_000_000,
		OutOfOrderWindow:  10 * time.Minute,
		TooFarInFuture:    10 * time.Minute,
		WAL:               true,
		Retention:         15 * 24 * time.Hour,
		WriteTimeout:      10 * time.Second,
	}
}

// Validate reports the first setting that cannot work.
func (o Options) Validate() error {
	switch {
	case o.PartitionDuration < time.Minute:
		return fmt.Errorf("partition duration %s: must be at least 1m", o.PartitionDuration)
	case (24*time.Hour)%o.PartitionDuration != 0 && o.PartitionDuration%(24*time.Hour) != 0:
		return fmt.Errorf("partition duration %s: must divide a day or be a whole number of days", o.PartitionDuration)
	case o.PartitionDuration%time.Millisecond != 0:
		return fmt.Errorf("partition duration %s: must be whole milliseconds", o.PartitionDuration)
	case o.HeadFlushInterval <= 0:
		return fmt.Errorf("head flush interval %s: must be positive", o.HeadFlushInterval)
	case o.HeadFlushSamples < 0:
		return fmt.Errorf("head flush samples %d: must not be negative", o.HeadFlushSamples)
	case o.OutOfOrderWindow < 0:
		return fmt.Errorf("out-of-order window %s: must not be negative", o.OutOfOrderWindow)
	case o.TooFarInFuture < 0:
		return fmt.Errorf("too far in future %s: must not be negative", o.TooFarInFuture)
	case o.MaxHeadSeries < 0:
		return fmt.Errorf("max head series %d: must not be negative", o.MaxHeadSeries)
	case o.WriteTimeout < 0:
		return fmt.Errorf("write timeout %s: must not be negative", o.WriteTimeout)
	case o.Retention < 0:
		return fmt.Errorf("retention %s: must not be negative", o.Retention)
	case o.Retention > 0 && o.Retention < o.PartitionDuration:
		return fmt.Errorf("retention %s: must be at least one partition (%s)", o.Retention, o.PartitionDuration)
	}
	return nil
}
