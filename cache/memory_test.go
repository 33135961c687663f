package cache

import (
	"testing"
)

func TestMemoryTierBudget(t *testing.T) {
	tests := []struct {
		name      string
		budget    int64
		valueSize int
		n         int
	}{
		{"small blocks", 64 << 10, 100, 5000},
		{"4 KiB blocks", 256 << 10, 4096, 500},
		{"blocks larger than the data pool", 8 << 10, 16 << 10, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := DefaultOptions()
			o.MemoryBytes = tt.budget
			c := newTestCache(t, o)
			for i := range tt.n {
				c.Set(testKey(i), testValue(i, tt.valueSize), ClassData)
			}
			c.mem.cleanUp()
			s := c.Stats()
			if s.Memory.Bytes > tt.budget {
				t.Errorf("memory tier holds %d bytes, budget %d", s.Memory.Bytes, tt.budget)
			}
			// No meta blocks: the data pool has all but the first step of the meta share.
			if got, want := c.mem.pools[ClassData].GetMaximum(), uint64(tt.budget-tt.budget/64); got != want {
				t.Errorf("data pool bound %d, want %d", got, want)
			}
			if s.Memory.Evictions == 0 {
				t.Errorf("no evictions after %d blocks into a %d byte budget", tt.n, tt.budget)
			}
			if s.Memory.Entries >= int64(tt.n) {
				t.Errorf("memory tier holds all %d blocks", s.Memory.Entries)
			}
			// What the tier holds is right.
			for i := range tt.n {
				if v, ok := c.mem.get(testKey(i), ClassData); ok {
					if want := testValue(i, tt.valueSize); string(v) != string(want) {
						t.Fatalf("block %d is wrong", i)
					}
				}
			}
		})
	}
}

func TestMemoryTierMetaPriority(t *testing.T) {
	o := DefaultOptions()
	o.MemoryBytes = 256 << 10
	o.MetaShare = 0.25
	c := newTestCache(t, o)
	meta, data := c.mem.pools[ClassMeta], c.mem.pools[ClassData]
	checkBounds := func(when string) {
		t.Helper()
		c.mem.cleanUp()
		if meta.GetMaximum()+data.GetMaximum() != uint64(o.MemoryBytes) {
			t.Errorf("%s: pool bounds %d + %d, budget %d", when, meta.GetMaximum(), data.GetMaximum(), o.MemoryBytes)
		}
		if meta.WeightedSize() > meta.GetMaximum() || data.WeightedSize() > data.GetMaximum() {
			t.Errorf("%s: pools hold %d of %d and %d of %d bytes", when,
				meta.WeightedSize(), meta.GetMaximum(), data.WeightedSize(), data.GetMaximum())
		}
		if meta.GetMaximum() > uint64(o.metaBytes()) {
			t.Errorf("%s: meta pool bound %d over the share %d", when, meta.GetMaximum(), o.metaBytes())
		}
	}

	// Meta blocks filling most of their share.
	const metaBlocks = 40
	for i := range metaBlocks {
		c.Set(testKey(i), testValue(i, 1024), ClassMeta)
	}
	checkBounds("after meta blocks")
	// A scan of data blocks many times the whole budget.
	for i := range 2000 {
		c.Set(testKey(100000+i), testValue(i, 4096), ClassData)
	}
	checkBounds("after a scan of data blocks")
	for i := range metaBlocks {
		mustGet(t, c, testKey(i), testValue(i, 1024))
	}

	// More meta blocks take the rest of the share from data blocks...
	dataBefore := data.EstimatedSize()
	for i := range 200 {
		c.Set(testKey(200000+i), testValue(i, 1024), ClassMeta)
	}
	checkBounds("after meta blocks past the share")
	if meta.GetMaximum() != uint64(o.metaBytes()) {
		t.Errorf("meta pool bound %d, want the whole share %d", meta.GetMaximum(), o.metaBytes())
	}
	if data.EstimatedSize() >= dataBefore {
		t.Errorf("data pool kept all its %d blocks while the meta pool took its share", dataBefore)
	}
	// ... but no more: past the share, meta blocks evict meta blocks.
	dataBefore = data.EstimatedSize()
	for i := range 500 {
		c.Set(testKey(300000+i), testValue(i, 1024), ClassMeta)
	}
	checkBounds("after more meta blocks")
	if got := data.EstimatedSize(); got != dataBefore {
		t.Errorf("data pool went from %d to %d blocks while only meta blocks were added", dataBefore, got)
	}
}

// TestMemoryTierLendsMetaShare checks that data blocks use the part of the
// meta share that meta blocks do not.
func TestMemoryTierLendsMetaShare(t *testing.T) {
	o := DefaultOptions()
	o.MemoryBytes = 1 << 20
	o.MetaShare = 0.5
	c := newTestCache(t, o)
	for i := range 4 {
		c.Set(testKey(i), testValue(i, 1024), ClassMeta)
	}
	for i := range 1000 {
		c.Set(testKey(1000+i), testValue(i, 4096), ClassData)
	}
	c.mem.cleanUp()
	if got, unshared := c.mem.pools[ClassData].WeightedSize(), uint64(o.MemoryBytes-o.metaBytes()); got <= unshared {
		t.Errorf("data blocks hold %d bytes, no more than the %d outside the meta share", got, unshared)
	}
	for i := range 4 {
		mustGet(t, c, testKey(i), testValue(i, 1024))
	}
}

func TestMemoryTierKeepsHotBlocksThroughScan(t *testing.T) {
	o := DefaultOptions()
	o.MemoryBytes = 512 << 10
	c := newTestCache(t, o)
	// The frequency sketch counts accesses once the cache is half full (as in
	// Caffeine), so fill it first.
	for i := range 100 {
		c.Set(testKey(10000+i), testValue(i, 4096), ClassData)
	}
	const hot = 20
	for i := range hot {
		c.Set(testKey(i), testValue(i, 4096), ClassData)
	}
	for range 10 {
		for i := range hot {
			mustGet(t, c, testKey(i), testValue(i, 4096))
		}
	}
	// Blocks read once, 20 times the budget.
	for i := range 2500 {
		c.Set(testKey(1000+i), testValue(i, 4096), ClassData)
	}
	c.mem.cleanUp()
	kept := 0
	for i := range hot {
		if _, ok := c.mem.get(testKey(i), ClassData); ok {
			kept++
		}
	}
	if kept < hot*9/10 {
		t.Errorf("%d of %d hot blocks survived a scan; want nearly all", kept, hot)
	}
}

// TestLimitMemory caps the RAM tier's data blocks below the budget, as the
// server does while the process nears its memory limit, and lifts the cap.
func TestLimitMemory(t *testing.T) {
	const budget, size = 256 << 10, 1000
	o := DefaultOptions()
	o.MemoryBytes = budget
	o.MetaShare = 0.25
	c := newTestCache(t, o)
	fill := func(from, n int, class Class) {
		for i := from; i < from+n; i++ {
			c.Set(testKey(i), testValue(i, size), class)
		}
		c.mem.cleanUp()
	}
	fill(0, 20, ClassMeta)
	fill(1000, 1000, ClassData)
	metaBytes := int64(c.mem.pools[ClassMeta].WeightedSize())
	if s := c.Stats(); s.Memory.Bytes < budget*3/4 || s.Memory.Budget != budget {
		t.Fatalf("before the cap: %d bytes held, budget %d; want most of %d", s.Memory.Bytes, s.Memory.Budget, budget)
	}

	const ceil = 32 << 10
	got := c.LimitMemory(ceil)
	c.mem.cleanUp()
	s := c.Stats()
	if want := c.mem.metaCap.Load() + ceil; got != want || s.Memory.Budget != want {
		t.Errorf("budget under the cap %d (stats %d), want the meta bound plus the cap, %d", got, s.Memory.Budget, want)
	}
	if data := int64(c.mem.pools[ClassData].WeightedSize()); data > ceil {
		t.Errorf("data pool holds %d bytes under a cap of %d", data, ceil)
	}
	if m := int64(c.mem.pools[ClassMeta].WeightedSize()); m != metaBytes {
		t.Errorf("meta pool went from %d to %d bytes: the cap is for data blocks only", metaBytes, m)
	}
	for i := range 20 {
		if _, ok := c.mem.get(testKey(i), ClassMeta); !ok {
			t.Fatalf("meta block %d evicted by the cap", i)
		}
	}
	// More data blocks stay under the cap; a meta block that needs more of
	// the meta share takes it from the capped data pool, not beyond.
	fill(3000, 200, ClassData)
	fill(100, 20, ClassMeta)
	if data := int64(c.mem.pools[ClassData].WeightedSize()); data > ceil {
		t.Errorf("data pool grew to %d bytes under a cap of %d", data, ceil)
	}
	if s := c.Stats(); s.Memory.Bytes > budget {
		t.Errorf("tier holds %d bytes, budget %d", s.Memory.Bytes, budget)
	}

	// Lifted: the data pool fills to its share again.
	if got := c.LimitMemory(budget); got != budget {
		t.Errorf("budget after lifting the cap %d, want %d", got, budget)
	}
	fill(5000, 1000, ClassData)
	if data, want := int64(c.mem.pools[ClassData].WeightedSize()), int64(budget)-c.mem.metaCap.Load(); data < want*3/4 {
		t.Errorf("data pool holds %d bytes after the cap was lifted, want most of %d", data, want)
	}
}
