package cache

import (
	"fmt"
	"math"
	"sync/atomic"

	"github.com/maypok86/otter/v2"
)

// entryOverhead is what the RAM tier charges an entry beyond its key and
// value bytes: the hash table node, the policy's list links, the slice and
// string headers. A rough figure, so that many tiny blocks cannot exceed the
// budget several times over.
const entryOverhead = 128

// memoryTier is the RAM tier: two W-TinyLFU pools (otter), one for meta
// blocks and one for data blocks, each bounded by bytes. Separate pools give
// meta blocks a guaranteed share: however many data blocks stream through,
// they only compete with each other.
type memoryTier struct {
	pools [2]*otter.Cache[string, []byte] // indexed by Class
}

func newMemoryTier(metaBytes, dataBytes int64, evictions *atomic.Uint64) (*memoryTier, error) {
	m := &memoryTier{}
	for class, budget := range map[Class]int64{ClassMeta: metaBytes, ClassData: dataBytes} {
		pool, err := otter.New(&otter.Options[string, []byte]{
			MaximumWeight: uint64(budget),
			Weigher:       weigh,
			OnDeletion: func(e otter.DeletionEvent[string, []byte]) {
				if e.WasEvicted() {
					evictions.Add(1)
				}
			},
			// Maintenance and deletion events run on the calling goroutine:
			// the tier starts no goroutines, so it needs no Close.
			Executor: func(fn func()) { fn() },
		})
		if err != nil {
			return nil, fmt.Errorf("cache: memory tier %s pool: %w", class, err)
		}
		m.pools[class] = pool
	}
	return m, nil
}

func weigh(key string, value []byte) uint32 {
	w := uint64(len(key)) + uint64(len(value)) + entryOverhead
	return uint32(min(w, math.MaxUint32))
}

// get looks key up in the pool of class.
func (m *memoryTier) get(key string, class Class) ([]byte, bool) {
	return m.pools[classIndex(class)].GetIfPresent(key)
}

// set offers value to the pool of class; the pool's policy may evict it
// (or others) at once.
func (m *memoryTier) set(key string, value []byte, class Class) {
	m.pools[classIndex(class)].SetIfAbsent(key, value)
}

type tierUsage struct{ bytes, entries int64 }

func (m *memoryTier) stats() tierUsage {
	var u tierUsage
	for _, p := range m.pools {
		u.bytes += int64(p.WeightedSize())
		u.entries += int64(p.EstimatedSize())
	}
	return u
}

// cleanUp runs pending maintenance, so that sizes are exact.
func (m *memoryTier) cleanUp() {
	for _, p := range m.pools {
		p.CleanUp()
	}
}
