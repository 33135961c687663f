package lsm

import "sync"

// SetReadAhead makes the iterator read its range as a whole, for a caller
// that reads a bounded range once (a query reading the keys of its series):
// at the first positioning, the sources whose blocks in the range are not
// all cached are positioned concurrently, and each table reads, at its first
// cache miss, the blocks of the range from there on in ranged reads of up
// to 8 MiB, keeping them for the iteration that follows (and offering them
// to the block cache), so that a range larger than what the cache admits is
// not read again. A cold read of a range then costs about one round trip
// whatever the number of tables, without a separate prefetch of the same
// blocks.
// Call it before the first positioning call.
func (it *Iterator) SetReadAhead() {
	it.src.parallel = true
	for _, c := range it.src.children {
		if r, ok := c.(*runIter); ok {
			r.whole = true
		}
	}
}

// SetNoFill makes the iterator leave the block cache as it is, for a read
// of far more than the cache holds (a query over a million series' blocks
// against a cache of a fraction of them), whose blocks would only evict
// those other queries use and be evicted in turn: blocks the cache holds are
// read from it, the others are read without being offered to it. With
// SetReadAhead each table keeps what its range's first read brought in
// (sst.Table.NewRangeIter) and the tables of a sorted run after the first
// are read as they are reached, not preloaded into the cache. Call it before
// the first positioning call.
func (it *Iterator) SetNoFill() {
	for _, c := range it.src.children {
		if r, ok := c.(*runIter); ok {
			r.noFill = true
		}
	}
}

// seekGEParallel is seekGE with the children that would read from the
// object store positioned concurrently.
func (m *mergeIter) seekGEParallel(key []byte) bool {
	ok := make([]bool, len(m.children))
	var wg sync.WaitGroup
	for i, c := range m.children {
		r, isRun := c.(*runIter)
		if !isRun {
			ok[i] = c.seekGE(key)
			continue
		}
		if r.noFill {
			// Each table reads its range as a whole when it is opened,
			// and keeps it: nothing goes through the cache to it.
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok[i] = c.seekGE(key)
			}()
			continue
		}
		r.preloadRest(key, &wg)
		// Later tables of the run are preloaded: only the table opened
		// here reads its range as a whole, and only when not cached (a
		// cached range would be checked block by block again).
		if r.cachedFrom(key) {
			r.whole = false
			ok[i] = c.seekGE(key)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok[i] = c.seekGE(key)
			r.whole = false
		}()
	}
	wg.Wait()
	for i, c := range m.children {
		if ok[i] {
			m.heap = append(m.heap, c)
		} else {
			m.collectErr(c)
		}
	}
	m.init()
	return m.valid()
}

// cachedFrom reports whether positioning at key reads only cached blocks
// of the table it opens (a table it cannot open counts as not cached: the
// seek reports the error).
func (r *runIter) cachedFrom(key []byte) bool {
	if r.e != nil {
		return true
	}
	i := 0
	if key != nil {
		i = sortSearchTables(r.tables, key)
	}
	if i >= len(r.tables) || !overlaps(&r.tables[i], r.lower, r.upper) {
		return true
	}
	h, err := r.s.table(r.ctx, &r.tables[i])
	if err != nil {
		return false
	}
	lo := r.lower
	if key != nil && (lo == nil || string(key) > string(lo)) {
		lo = key
	}
	if r.iv != nil {
		return h.CachedWithin(lo, r.upper, *r.iv)
	}
	return h.Cached(lo, r.upper)
}

// preloadRest loads, in the background (counted in wg), the blocks of the
// range in the tables of a sorted run after the one positioning at key
// opens, which the iteration reaches later: a range spanning several
// tables of a run is then read in one round trip too. Errors are left for
// the iteration to report.
func (r *runIter) preloadRest(key []byte, wg *sync.WaitGroup) {
	if r.e != nil || len(r.tables) < 2 {
		return
	}
	i := 0
	if key != nil {
		i = sortSearchTables(r.tables, key)
	}
	for j := i + 1; j < len(r.tables) && overlaps(&r.tables[j], r.lower, r.upper); j++ {
		t := &r.tables[j]
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := r.s.table(r.ctx, t)
			switch {
			case err != nil:
			case r.iv != nil:
				if !h.CachedWithin(r.lower, r.upper, *r.iv) {
					_ = h.PrefetchWithin(r.ctx, r.lower, r.upper, *r.iv)
				}
			case !h.Cached(r.lower, r.upper):
				_ = h.Prefetch(r.ctx, r.lower, r.upper)
			}
		}()
	}
}
