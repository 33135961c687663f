package lsm

import "context"

// View is the read side that the writer (DB) and a read-only Reader share:
// every call reads the newest state the DB or Reader knows (a writer's own
// writes; the manifests and WAL a Reader has followed). Safe for concurrent
// use.
type View interface {
	// Get returns the value of key (merge operands resolved) and whether
	// it exists. The value is the caller's.
	Get(ctx context.Context, key []byte) ([]byte, bool, error)
	// NewIterator returns an iterator over the keys in [lower, upper)
	// (nil: unbounded) of a snapshot taken now. Close it when done.
	NewIterator(ctx context.Context, lower, upper []byte) (*Iterator, error)
	// Prefetch loads into the block cache the blocks of every table that
	// hold keys in [lower, upper), reading only those not cached.
	Prefetch(ctx context.Context, lower, upper []byte) (PrefetchStats, error)
	// PrefetchRanges loads into the block cache the blocks that hold the
	// keys of ranges, with at most parallel reads at once.
	PrefetchRanges(ctx context.Context, ranges []KeyRange, parallel int) error
	// RangeBytes returns the stored size of the table blocks that may hold
	// keys in [lower, upper): what reading the range costs on a cold cache.
	RangeBytes(ctx context.Context, lower, upper []byte) (int64, error)
	// ManifestVersion is the id of the manifest the view reads; it changes
	// with every flush, compaction and (for a Reader) refresh.
	ManifestVersion() uint64
	// Cached reports whether the view has a block cache.
	Cached() bool
	// CacheCapacity is how many bytes of blocks the view's cache can hold
	// (cache.Tiered.Capacity), 0 without a cache or when the cache does
	// not say.
	CacheCapacity() int64
}

var (
	_ View = (*DB)(nil)
	_ View = (*Reader)(nil)
)
