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
			dataBudget := tt.budget - o.metaBytes()
			if s.Memory.Bytes > dataBudget {
				t.Errorf("memory tier holds %d bytes, data budget %d", s.Memory.Bytes, dataBudget)
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

	// Meta blocks filling most of their share.
	const metaBlocks = 40
	for i := range metaBlocks {
		c.Set(testKey(i), testValue(i, 1024), ClassMeta)
	}
	// A scan of data blocks many times the whole budget.
	for i := range 2000 {
		c.Set(testKey(100000+i), testValue(i, 4096), ClassData)
	}
	c.mem.cleanUp()
	for i := range metaBlocks {
		mustGet(t, c, testKey(i), testValue(i, 1024))
	}
	if got := c.mem.pools[ClassMeta].WeightedSize(); got > uint64(o.metaBytes()) {
		t.Errorf("meta pool holds %d bytes, share %d", got, o.metaBytes())
	}
	if got := c.mem.pools[ClassData].WeightedSize(); got > uint64(o.MemoryBytes-o.metaBytes()) {
		t.Errorf("data pool holds %d bytes, share %d", got, o.MemoryBytes-o.metaBytes())
	}

	// Meta blocks beyond their share evict older meta blocks, not data blocks.
	dataBefore := c.mem.pools[ClassData].EstimatedSize()
	for i := range 1000 {
		c.Set(testKey(200000+i), testValue(i, 1024), ClassMeta)
	}
	c.mem.cleanUp()
	if got := c.mem.pools[ClassMeta].WeightedSize(); got > uint64(o.metaBytes()) {
		t.Errorf("meta pool holds %d bytes, share %d", got, o.metaBytes())
	}
	if got := c.mem.pools[ClassData].EstimatedSize(); got != dataBefore {
		t.Errorf("data pool went from %d to %d blocks while only meta blocks were added", dataBefore, got)
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
