package cache

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Tiered is the block cache: a RAM tier in front of an optional disk tier.
//
// A lookup tries RAM, then disk; a disk hit is copied into RAM. A block set
// or loaded goes into RAM at once and to disk in the background, through a
// bounded queue that drops blocks when full. Concurrent GetOrLoad misses of
// one key call load once.
//
// Tiered is safe for concurrent use. Call Close when done with it.
type Tiered struct {
	log     *slog.Logger
	ctr     counters
	mem     *memoryTier
	disk    *diskTier // nil without a disk tier
	flights flightGroup
	metrics *collector
	comps   Components

	closeOnce sync.Once
}

var _ Cache = (*Tiered)(nil)

// New opens a cache. With a disk tier it scans opts.DiskPath, so that blocks
// cached by an earlier process are hits again, and starts the disk writer.
func New(opts Options, comps Components) (*Tiered, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	c := &Tiered{log: comps.Logger, comps: comps}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	mem, err := newMemoryTier(opts.MemoryBytes, opts.metaBytes(), &c.ctr.evictions[tierMemory])
	if err != nil {
		return nil, err
	}
	c.mem = mem
	if opts.DiskPath != "" {
		c.disk, err = openDiskTier(opts, c.log, &c.ctr)
		if err != nil {
			return nil, err
		}
	}
	c.metrics = newCollector(c)
	if comps.Registerer != nil {
		if err := comps.Registerer.Register(c.metrics); err != nil {
			if c.disk != nil {
				c.disk.close()
			}
			return nil, fmt.Errorf("cache: register metrics: %w", err)
		}
	}
	return c, nil
}

// Get returns the block under key from RAM or disk. A disk hit is copied into
// RAM.
func (c *Tiered) Get(key string) ([]byte, bool) {
	for _, class := range [...]Class{ClassMeta, ClassData} {
		if v, ok := c.mem.get(key, class); ok {
			c.ctr.hits[tierMemory][class].Add(1)
			return v, true
		}
	}
	c.ctr.misses[tierMemory][classUnknown].Add(1)
	return c.getDisk(key, classUnknown)
}

// getDisk returns the block under key from the disk tier, if there is one,
// and copies a hit into RAM. A miss is counted under missClass.
func (c *Tiered) getDisk(key string, missClass int) ([]byte, bool) {
	if c.disk == nil {
		return nil, false
	}
	if v, class, ok := c.disk.get(key); ok {
		c.ctr.hits[tierDisk][class].Add(1)
		c.mem.set(key, v, class)
		return v, true
	}
	c.ctr.misses[tierDisk][missClass].Add(1)
	return nil, false
}

// Set offers value to the RAM tier and queues it for the disk tier. Either may
// decline it (admission, size, a full write queue).
func (c *Tiered) Set(key string, value []byte, class Class) {
	c.mem.set(key, value, class)
	if c.disk != nil {
		c.disk.enqueue(key, value, class)
	}
}

// Holds reports whether a tier holds the block under key, without reading
// it, promoting it to RAM or counting a hit or miss. It keeps no key, as
// Peek.
func (c *Tiered) Holds(key string) bool {
	if _, ok := c.mem.get(key, ClassData); ok {
		return true
	}
	if _, ok := c.mem.get(key, ClassMeta); ok {
		return true
	}
	return c.disk != nil && c.disk.contains(key)
}

// Stash stores a block read ahead of any query (the cache warmer's): in the
// disk tier when there is one, where it costs no RAM until a read promotes
// it, else in RAM. Rather than drop the block when the disk tier's write
// queue is full, Stash waits for the queue to drain; it returns early, with
// the block dropped, when ctx ends.
func (c *Tiered) Stash(ctx context.Context, key string, value []byte, class Class) {
	if c.disk == nil {
		c.mem.set(key, value, class)
		return
	}
	c.disk.enqueueWait(ctx, key, value, class)
}

// Drop removes the block under key from the RAM tier, for a caller that
// knows it will not be read again (a table replaced by a compaction). The
// disk tier keeps it until its own eviction.
func (c *Tiered) Drop(key string) {
	c.mem.drop(key)
}

// GetOrLoad returns the block under key, calling load on a miss in every tier
// and caching its result. Concurrent misses of one key call load once and
// share its result or error; errors are not cached. load runs under a context
// that carries ctx's values but is cancelled only when every caller waiting
// for it has given up (or on Close). A caller whose ctx ends returns ctx.Err()
// at once. After Close, GetOrLoad returns ErrClosed on a miss.
func (c *Tiered) GetOrLoad(ctx context.Context, key string, class Class, load func(context.Context) ([]byte, error)) ([]byte, error) {
	if v, ok := c.lookup(key, class); ok {
		return v, nil
	}
	return c.flights.do(ctx, key, func(ctx context.Context) ([]byte, error) {
		// A flight for key that ended just before this one began may have
		// cached the block already.
		if v, ok := c.mem.get(key, class); ok {
			return v, nil
		}
		c.ctr.loads.Add(1)
		start := time.Now()
		v, err := load(ctx)
		c.metrics.loadDuration.WithLabelValues(class.String()).Observe(time.Since(start).Seconds())
		if err != nil {
			c.ctr.loadErrors.Add(1)
			return nil, err
		}
		c.Set(key, v, class)
		return v, nil
	})
}

// Peek returns the block under key if the RAM tier holds it, counting the
// hit, and reports a miss without counting it, for a caller that goes on to
// GetOrLoad (which counts it). It keeps neither key nor anything derived from
// it, so key may alias a buffer the caller reuses: a lookup that hits costs
// no allocation.
func (c *Tiered) Peek(key string, class Class) ([]byte, bool) {
	v, ok := c.mem.get(key, class)
	if ok {
		c.ctr.hits[tierMemory][classIndex(class)].Add(1)
	}
	return v, ok
}

// lookup is Get for a caller that knows the class.
func (c *Tiered) lookup(key string, class Class) ([]byte, bool) {
	if v, ok := c.Peek(key, class); ok {
		return v, true
	}
	cl := classIndex(class)
	c.ctr.misses[tierMemory][cl].Add(1)
	return c.getDisk(key, cl)
}

// Flush waits until every block queued for the disk tier before the call has
// been written (or dropped after an I/O error). Without a disk tier it
// returns at once.
func (c *Tiered) Flush() {
	if c.disk != nil {
		c.disk.flush()
	}
}

// Close cancels running loads and waits for them (a load must return once
// its context is cancelled, or Close waits for ever), writes the blocks still
// queued for disk, finishes the disk tier's files so that the next New finds
// them, and unregisters the metrics. Get and Set keep working on the RAM tier
// afterwards; nothing more reaches disk. Close returns nil; it is idempotent.
func (c *Tiered) Close() error {
	c.closeOnce.Do(func() {
		c.flights.close()
		if c.disk != nil {
			c.disk.close()
		}
		if c.comps.Registerer != nil {
			c.comps.Registerer.Unregister(c.metrics)
		}
	})
	return nil
}

// LimitMemory caps the RAM tier's data blocks at n bytes while the process
// is short of memory: they are evicted down to it, and meta blocks keep
// their share. n at or above Options.MemoryBytes lifts the cap, and the
// tier fills again as blocks are read. It returns the RAM tier's budget now,
// which Stats and shale_cache_budget_bytes report.
func (c *Tiered) LimitMemory(n int64) int64 { return c.mem.limitData(n) }

// Capacity returns how many bytes of blocks the cache can hold now: the
// RAM tier's budget (see LimitMemory) plus the disk tier's.
func (c *Tiered) Capacity() int64 {
	n := c.mem.budget()
	if c.disk != nil {
		n += c.disk.budget.Load()
	}
	return n
}

// Stats returns a snapshot of the cache's counts.
func (c *Tiered) Stats() Stats {
	var s Stats
	for cl := range numClasses {
		s.Memory.Hits += c.ctr.hits[tierMemory][cl].Load()
		s.Memory.Misses += c.ctr.misses[tierMemory][cl].Load()
		s.Disk.Hits += c.ctr.hits[tierDisk][cl].Load()
		s.Disk.Misses += c.ctr.misses[tierDisk][cl].Load()
	}
	mem := c.mem.stats()
	s.Memory.Bytes, s.Memory.Entries = mem.bytes, mem.entries
	s.Memory.Budget = c.mem.budget()
	s.Memory.Evictions = c.ctr.evictions[tierMemory].Load()
	if c.disk != nil {
		d := c.disk.stats()
		s.Disk.Bytes, s.Disk.Entries = d.bytes, d.entries
		s.Disk.Budget = c.disk.budget.Load()
	}
	s.Disk.Evictions = c.ctr.evictions[tierDisk].Load()
	s.Loads = c.ctr.loads.Load()
	s.LoadErrors = c.ctr.loadErrors.Load()
	s.DiskWrites = c.ctr.diskWrites.Load()
	for r := range numDropReasons {
		s.DiskWriteDrops += c.ctr.diskDrops[r].Load()
	}
	s.DiskCorruptions = c.ctr.corruptions.Load()
	return s
}
