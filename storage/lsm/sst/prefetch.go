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
	return t.prefetch(ctx, lower, upper, nil)
}

// Stasher is a cache.Cache that can keep blocks read ahead of any query
// without spending RAM on them (in a disk tier), and tell which blocks it
// holds without promoting them to RAM.
type Stasher interface {
	Holds(key string) bool
	Stash(ctx context.Context, key string, value []byte, class cache.Class)
}

// Stash is Prefetch for blocks no query asked for yet (the cache warmer's):
// when the cache is a Stasher they go where it keeps such blocks, its disk
// tier, and blocks any tier holds are not read again.
func (t *Table) Stash(ctx context.Context, lower, upper []byte) error {
	s, _ := t.c.(Stasher)
	return t.prefetch(ctx, lower, upper, s)
}

// Cached reports whether every data block that may hold keys in [lower,
// upper) is in the cache, in any tier, so that a Prefetch of the range would
// read nothing. With a Stasher it neither promotes blocks nor counts
// lookups. Without a cache it reports true.
func (t *Table) Cached(lower, upper []byte) bool {
	if t.c == nil {
		return true
	}
	s, _ := t.c.(Stasher)
	first, last := t.blockSpan(lower, upper)
	for i := first; i <= last; i++ {
		if !t.holds(s, i) {
			return false
		}
	}
	return true
}

// holds reports whether the cache holds data block i, through s when it is
// not nil.
func (t *Table) holds(s Stasher, i int) bool {
	if s != nil {
		return s.Holds(t.cacheKey(t.ix.handles[i].off))
	}
	_, ok := t.c.Get(t.cacheKey(t.ix.handles[i].off))
	return ok
}

// blockSpan returns the first and last data blocks that may hold keys in
// [lower, upper); first > last when there are none.
func (t *Table) blockSpan(lower, upper []byte) (first, last int) {
	first, last = 0, len(t.ix.handles)-1
	if lower != nil {
		first = t.findBlock(lower)
	}
	if upper != nil {
		last = min(last, t.findBlock(upper))
	}
	return first, last
}

func (t *Table) prefetch(ctx context.Context, lower, upper []byte, s Stasher) error {
	if t.c == nil || len(t.ix.handles) == 0 {
		return nil
	}
	cached := func(i int) bool { return t.holds(s, i) }
	first, last := t.blockSpan(lower, upper)
	hs := t.ix.handles
	for i := first; i <= last; {
		if cached(i) {
			i++
			continue
		}
		j := i
		for j+1 <= last && hs[j+1].end()-hs[i].off <= maxPrefetchRun && !cached(j+1) {
			j++
		}
		if err := t.prefetchRun(ctx, i, j, s); err != nil {
			return err
		}
		i = j + 1
	}
	return nil
}

// prefetchRun reads blocks [i, j] in one read and caches them, through s
// when it is not nil.
func (t *Table) prefetchRun(ctx context.Context, i, j int, s Stasher) error {
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
		if s != nil {
			s.Stash(ctx, t.cacheKey(hs[k].off), content, cache.ClassData)
		} else {
			t.c.Set(t.cacheKey(hs[k].off), content, cache.ClassData)
		}
	}
	return nil
}
