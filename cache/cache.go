// Package cache is Shale's block cache: immutable byte blocks (SST meta and
// data blocks) kept in a RAM tier and an NVMe (local disk) tier, each with a
// byte budget, behind one lookup interface.
package cache

import "context"

// Class tells the cache how much a block is worth keeping.
type Class uint8

const (
	// ClassData is an ordinary data block.
	ClassData Class = iota
	// ClassMeta is a block the read path needs first (SST footer, index,
	// bloom filter); it is kept with priority over data blocks.
	ClassMeta
)

func (c Class) String() string {
	switch c {
	case ClassMeta:
		return "meta"
	case ClassData:
		return "data"
	default:
		return "unknown"
	}
}

// Cache holds immutable blocks under string keys. A key must name the same
// bytes forever (object names are never reused), so there is no invalidation,
// only eviction.
//
// Values returned by the cache are shared: callers must not modify them.
// Values given to the cache become the cache's: callers must not modify them
// afterwards. Implementations are safe for concurrent use.
type Cache interface {
	// Get returns the block stored under key, if any tier holds it.
	Get(key string) ([]byte, bool)

	// Set stores value under key with the given class. It may decline to
	// keep it (admission, budget).
	Set(key string, value []byte, class Class)

	// GetOrLoad returns the block under key; on a miss it calls load and
	// caches the result. Concurrent misses of one key call load once and
	// share its result (or its error, which is not cached).
	GetOrLoad(ctx context.Context, key string, class Class, load func(context.Context) ([]byte, error)) ([]byte, error)
}
