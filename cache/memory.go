package cache

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/maypok86/otter/v2"
)

// entryOverhead is what the RAM tier charges an entry beyond its key and
// value bytes: the hash table node, the policy's list links, the slice and
// string headers. A rough figure, so that many tiny blocks cannot exceed the
// budget several times over.
const entryOverhead = 128

// memoryTier is the RAM tier: two W-TinyLFU pools (otter), one for meta
// blocks and one for data blocks, each bounded by bytes, their bounds adding
// up to the budget. Separate pools give meta blocks a guaranteed share:
// however many data blocks stream through, they only compete with each other.
//
// The meta share is reserved on demand. The meta pool starts small; when a
// meta block would not fit, the data pool's bound is lowered (evicting data
// blocks) and the meta pool's raised by as much, in steps of 1/64 of the
// budget, until the meta pool has its whole share. Until then data blocks
// use what meta blocks do not. Meta blocks are never evicted to make room
// for data blocks.
//
// While the process is short of memory the data pool can be capped below its
// share (limitData): it evicts down to the cap and grows back when the cap
// is lifted. Meta blocks keep their share.
type memoryTier struct {
	pools   [2]*otter.Cache[string, []byte] // indexed by Class
	total   int64                           // the budget
	metaMax int64                           // the meta share
	step    int64

	growMu   sync.Mutex
	metaCap  atomic.Int64 // the meta pool's bound; the data pool's is total - metaCap, at most dataCeil
	dataCeil atomic.Int64 // the data pool's cap while memory is short; total when there is none
}

func newMemoryTier(total, metaMax int64, evictions *atomic.Uint64) (*memoryTier, error) {
	m := &memoryTier{total: total, metaMax: metaMax, step: max(total/64, 1)}
	metaCap := min(metaMax, m.step)
	m.metaCap.Store(metaCap)
	m.dataCeil.Store(total)
	for class, budget := range map[Class]int64{ClassMeta: metaCap, ClassData: total - metaCap} {
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
	if class == ClassMeta {
		m.reserveMeta(int64(weigh(key, value)))
	}
	m.pools[classIndex(class)].SetIfAbsent(key, value)
}

// drop removes key from both pools.
func (m *memoryTier) drop(key string) {
	for _, p := range m.pools {
		p.Invalidate(key)
	}
}

// reserveMeta grows the meta pool at the data pool's expense, so that a meta
// block of weight w fits without evicting another, within the meta share.
func (m *memoryTier) reserveMeta(w int64) {
	meta := m.pools[ClassMeta]
	capNow := m.metaCap.Load()
	if capNow >= m.metaMax || int64(meta.WeightedSize())+w <= capNow {
		return
	}
	m.growMu.Lock()
	defer m.growMu.Unlock()
	capNow = m.metaCap.Load()
	need := int64(meta.WeightedSize()) + w
	if capNow >= m.metaMax || need <= capNow {
		return
	}
	grown := min(m.metaMax, max(need, capNow+m.step))
	// Shrink first, so that the two bounds never add up to more than the budget.
	m.pools[ClassData].SetMaximum(uint64(min(m.total-grown, m.dataCeil.Load())))
	meta.SetMaximum(uint64(grown))
	m.metaCap.Store(grown)
}

// limitData caps the data pool at n bytes (evicting down to it), or lifts
// the cap when n is at least the budget, and returns the tier's budget now:
// the meta pool's bound plus the data pool's.
func (m *memoryTier) limitData(n int64) int64 {
	m.growMu.Lock()
	defer m.growMu.Unlock()
	n = min(max(n, 0), m.total)
	m.dataCeil.Store(n)
	metaCap := m.metaCap.Load()
	data := min(m.total-metaCap, n)
	m.pools[ClassData].SetMaximum(uint64(data))
	return metaCap + data
}

// budget returns the tier's budget now (see limitData).
func (m *memoryTier) budget() int64 {
	metaCap := m.metaCap.Load()
	return metaCap + min(m.total-metaCap, m.dataCeil.Load())
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
