package cache

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// Options are the settings of a Tiered cache. Start from DefaultOptions.
type Options struct {
	// MemoryBytes is the RAM tier's budget in bytes. Every entry is charged
	// len(key) + len(value) + a fixed per-entry overhead.
	MemoryBytes int64
	// MetaShare is the fraction of MemoryBytes reserved for ClassMeta blocks,
	// in (0, 1). Meta and data blocks are kept in separate pools, so a scan
	// of data blocks never evicts a meta block. The share is taken as meta
	// blocks arrive; data blocks use what meta blocks have not taken yet.
	MetaShare float64

	// DiskPath is the directory of the disk tier; empty means no disk tier.
	// The directory belongs to the cache: files in it that are named like the
	// cache's own but are invalid or unfinished are removed on open.
	DiskPath string
	// DiskBytes is the disk tier's budget in bytes (segment files, headers
	// included).
	DiskBytes int64
	// DiskSegmentBytes is the size of one segment file; the disk tier evicts
	// a whole segment at a time. A block larger than a segment is not
	// written to disk. Zero picks DiskBytes/16, within [64 KiB, 256 MiB].
	DiskSegmentBytes int64
	// DiskWriteQueue is how many blocks may wait to be written to disk;
	// beyond it (or beyond DiskWriteQueueBytes) writes are dropped.
	DiskWriteQueue int
	// DiskWriteQueueBytes bounds the bytes of blocks waiting to be written
	// (the queue holds the blocks themselves). A block larger than it is
	// never written to disk.
	DiskWriteQueueBytes int64
}

// DefaultOptions returns the default settings: a 512 MiB RAM tier with a
// fifth reserved for meta blocks, and no disk tier (set DiskPath to enable a
// 16 GiB one).
func DefaultOptions() Options {
	return Options{
		MemoryBytes:         512 << 20,
		MetaShare:           0.2,
		DiskBytes:           16 << 30,
		DiskWriteQueue:      1024,
		DiskWriteQueueBytes: 64 << 20,
	}
}

const (
	minSegmentBytes = 4 << 10
	maxSegmentBytes = 1 << 30
)

// Validate reports the first setting that is out of range.
func (o Options) Validate() error {
	if o.MemoryBytes <= 0 {
		return fmt.Errorf("cache: MemoryBytes %d must be positive", o.MemoryBytes)
	}
	if !(o.MetaShare > 0 && o.MetaShare < 1) {
		return fmt.Errorf("cache: MetaShare %v must be in (0, 1)", o.MetaShare)
	}
	if m := o.metaBytes(); m < 1 || o.MemoryBytes-m < 1 {
		return fmt.Errorf("cache: MemoryBytes %d is too small to split by MetaShare %v", o.MemoryBytes, o.MetaShare)
	}
	if o.DiskPath == "" {
		return nil
	}
	if o.DiskSegmentBytes != 0 && (o.DiskSegmentBytes < minSegmentBytes || o.DiskSegmentBytes > maxSegmentBytes) {
		return fmt.Errorf("cache: DiskSegmentBytes %d must be 0 or in [%d, %d]", o.DiskSegmentBytes, minSegmentBytes, maxSegmentBytes)
	}
	if seg := o.segmentBytes(); o.DiskBytes < 2*seg {
		return fmt.Errorf("cache: DiskBytes %d must hold at least two segments of %d bytes", o.DiskBytes, seg)
	}
	if o.DiskWriteQueue <= 0 {
		return fmt.Errorf("cache: DiskWriteQueue %d must be positive", o.DiskWriteQueue)
	}
	if o.DiskWriteQueueBytes <= 0 {
		return fmt.Errorf("cache: DiskWriteQueueBytes %d must be positive", o.DiskWriteQueueBytes)
	}
	return nil
}

func (o Options) metaBytes() int64 { return int64(float64(o.MemoryBytes) * o.MetaShare) }

func (o Options) segmentBytes() int64 {
	if o.DiskSegmentBytes != 0 {
		return o.DiskSegmentBytes
	}
	return min(max(o.DiskBytes/16, 64<<10), 256<<20)
}

// Components are the collaborators of a Tiered cache. All are optional.
type Components struct {
	// Registerer receives the cache's metrics; nil registers none. Close
	// unregisters them.
	Registerer prometheus.Registerer
	// Logger reports disk tier problems; nil discards.
	Logger *slog.Logger
}

// ErrClosed is returned by GetOrLoad on a closed cache.
var ErrClosed = errors.New("cache: closed")
