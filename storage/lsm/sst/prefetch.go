package sst

import (
	"context"
	"fmt"

	"github.com/shaledb/shale/cache"
)

// maxPrefetchRun bounds one ranged read of Prefetch.
const maxPrefetchRun = 8 << 20

// Prefetch loads into the cache every data block that may hold keys in
// [lower, upper) (nil bounds are unbounded) and is not cached yet, reading
// each run of adjacent missing blocks with one ranged read of at most 8 MiB.
// It lets a caller warm a cold range in few round trips before iterating or
// Getting. Without a cache it does nothing.
func (t *Table) Prefetch(ctx context.Context, lower, upper []byte) error {
	if t.c == nil || len(t.ix.handles) == 0 {
		return nil
	}
	first, last := 0, len(t.ix.handles)-1
	if lower != nil {
		first = t.findBlock(lower)
	}
	if upper != nil {
		last = min(last, t.findBlock(upper))
	}
	hs := t.ix.handles
	for i := first; i <= last; {
		if _, ok := t.c.Get(t.cacheKey(hs[i].off)); ok {
			i++
			continue
		}
		j := i
		for j+1 <= last && hs[j+1].end()-hs[i].off <= maxPrefetchRun {
			if _, ok := t.c.Get(t.cacheKey(hs[j+1].off)); ok {
				break
			}
			j++
		}
		if err := t.prefetchRun(ctx, i, j); err != nil {
			return err
		}
		i = j + 1
	}
	return nil
}

// prefetchRun reads blocks [i, j] in one read and caches them.
func (t *Table) prefetchRun(ctx context.Context, i, j int) error {
	raw, err := t.readRange(ctx, i, j)
	if err != nil {
		return fmt.Errorf("sst %s: prefetch blocks %d-%d: %w", t.id, i, j, err)
	}
	hs := t.ix.handles
	base := hs[i].off
	for k := i; k <= j; k++ {
		content, err := decodeBlock(raw[hs[k].off-base:hs[k].end()-base], true)
		if err != nil {
			return fmt.Errorf("sst %s: prefetch data block %d: %w", t.id, k, err)
		}
		t.c.Set(t.cacheKey(hs[k].off), content, cache.ClassData)
	}
	return nil
}
