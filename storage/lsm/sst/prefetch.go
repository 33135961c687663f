package sst

import (
	"context"
	"errors"
	"fmt"
	"sync"

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
	return t.prefetch(ctx, lower, upper, nil, nil)
}

// PrefetchWithin is Prefetch of the blocks an iterator of [lower, upper)
// given the interval iv (Iter.SetInterval) reads: not those it skips.
func (t *Table) PrefetchWithin(ctx context.Context, lower, upper []byte, iv Interval) error {
	return t.prefetch(ctx, lower, upper, nil, &iv)
}

// Stasher is a cache.Cache that can keep blocks read ahead of any query
// without spending RAM on them (in a disk tier), and tell which blocks it
// holds without promoting them to RAM. Holds keeps neither its key nor
// anything made from it, so the key may alias a buffer the caller reuses.
type Stasher interface {
	Holds(key string) bool
	Stash(ctx context.Context, key string, value []byte, class cache.Class)
}

// Stash is Prefetch for blocks no query asked for yet (the cache warmer's):
// when the cache is a Stasher they go where it keeps such blocks, its disk
// tier, and blocks any tier holds are not read again.
func (t *Table) Stash(ctx context.Context, lower, upper []byte) error {
	s, _ := t.c.(Stasher)
	return t.prefetch(ctx, lower, upper, s, nil)
}

// Cached reports whether every data block that may hold keys in [lower,
// upper) is in the cache, in any tier, so that a Prefetch of the range would
// read nothing. With a Stasher it neither promotes blocks nor counts
// lookups. Without a cache it reports true.
func (t *Table) Cached(lower, upper []byte) bool {
	first, last := t.blockSpan(lower, upper)
	return t.cachedBlocks(first, last, nil)
}

// CachedWithin is Cached of the blocks an iterator of [lower, upper) given
// the interval iv (Iter.SetInterval) reads: not those it skips.
func (t *Table) CachedWithin(lower, upper []byte, iv Interval) bool {
	first, last := t.blockSpan(lower, upper)
	return t.cachedBlocks(first, last, &iv)
}

// CachedBlocks is Cached of data blocks [first, last] (a BlockSpan).
func (t *Table) CachedBlocks(first, last int) bool { return t.cachedBlocks(first, last, nil) }

func (t *Table) cachedBlocks(first, last int, iv *Interval) bool {
	if t.c == nil {
		return true
	}
	s, _ := t.c.(Stasher)
	for i := first; i <= last; i++ {
		if !t.ix.skips(i, iv) && !t.holds(s, i) {
			return false
		}
	}
	return true
}

// holds reports whether the cache holds data block i, through s when it is
// not nil.
func (t *Table) holds(s Stasher, i int) bool {
	if s != nil {
		var ok bool
		t.withTempKey(t.ix.handles[i].off, func(key string) { ok = s.Holds(key) })
		return ok
	}
	_, ok := t.c.Get(t.cacheKey(t.ix.handles[i].off))
	return ok
}

// BlockSpan returns the first and last data blocks that may hold keys in
// [lower, upper) (nil bounds are unbounded); first > last when there are
// none. Two ranges' spans may share a block: the one a range ends in and
// the next one starts in.
func (t *Table) BlockSpan(lower, upper []byte) (first, last int) { return t.blockSpan(lower, upper) }

// SpanBytes is the stored size of data blocks [first, last] (a BlockSpan):
// what reading them costs.
func (t *Table) SpanBytes(first, last int) int64 {
	if first > last {
		return 0
	}
	return t.ix.handles[last].end() - t.ix.handles[first].off
}

// PrefetchBlocks is Prefetch of data blocks [first, last] (a BlockSpan) for
// a query about to read them, in one round trip: a few cached blocks
// between missing ones (up to bridgeBytes) are read again rather than
// splitting the read, and the reads the span still needs run in parallel.
func (t *Table) PrefetchBlocks(ctx context.Context, first, last int) error {
	if t.c == nil || len(t.ix.handles) == 0 {
		return nil
	}
	first, last = max(first, 0), min(last, len(t.ix.handles)-1)
	runs := t.missingRuns(first, last, nil, bridgeBytes, nil)
	if len(runs) == 1 {
		return t.prefetchRun(ctx, runs[0][0], runs[0][1], nil, nil, false)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(runs))
	for k, r := range runs {
		wg.Go(func() { errs[k] = t.prefetchRun(ctx, r[0], r[1], nil, nil, false) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// bridgeBytes is the most cached bytes PrefetchBlocks reads again to join
// two reads into one: far less than what a round trip costs in time.
const bridgeBytes = 64 << 10

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

func (t *Table) prefetch(ctx context.Context, lower, upper []byte, s Stasher, iv *Interval) error {
	if t.c == nil || len(t.ix.handles) == 0 {
		return nil
	}
	first, last := t.blockSpan(lower, upper)
	return t.prefetchSpan(ctx, first, last, s, iv, nil, false)
}

// prefetchSpan reads the blocks of [first, last] not cached yet, nor
// skipped for iv when it is not nil, in runs of adjacent missing blocks of
// at most maxPrefetchRun, one after another, through s when it is not nil,
// and hands each to keep when it is not nil; with noFill, to keep only.
func (t *Table) prefetchSpan(ctx context.Context, first, last int, s Stasher, iv *Interval, keep func(i int, content []byte), noFill bool) error {
	for _, r := range t.missingRuns(first, last, s, 0, iv) {
		if err := t.prefetchRun(ctx, r[0], r[1], s, keep, noFill); err != nil {
			return err
		}
	}
	return nil
}

// missingRuns returns the runs [i, j] of blocks of [first, last] to read so
// that every block not cached (through s when it is not nil) nor skipped for
// iv (when it is not nil) is read: runs of adjacent missing blocks of at most
// maxPrefetchRun, two joined across cached blocks of at most bridge bytes
// between them.
func (t *Table) missingRuns(first, last int, s Stasher, bridge int64, iv *Interval) [][2]int {
	hs := t.ix.handles
	var runs [][2]int
	for i := first; i <= last; {
		if t.ix.skips(i, iv) || t.holds(s, i) {
			i++
			continue
		}
		j := i
		for j+1 <= last && hs[j+1].end()-hs[i].off <= maxPrefetchRun && !t.ix.skips(j+1, iv) && !t.holds(s, j+1) {
			j++
		}
		if n := len(runs); n > 0 && bridge > 0 && hs[i].off-hs[runs[n-1][1]].end() <= bridge &&
			hs[j].end()-hs[runs[n-1][0]].off <= maxPrefetchRun {
			runs[n-1][1] = j
		} else {
			runs = append(runs, [2]int{i, j})
		}
		i = j + 1
	}
	return runs
}

// prefetchRun reads blocks [i, j] in one read and caches them, through s
// when it is not nil, and hands each to keep when it is not nil. With
// noFill the blocks go to keep only, as they lie in the read's buffer: the
// copy of each into memory of its own is for the cache's accounting.
func (t *Table) prefetchRun(ctx context.Context, i, j int, s Stasher, keep func(i int, content []byte), noFill bool) error {
	raw, checked, err := t.readBlocks(ctx, i, j)
	if err != nil {
		return fmt.Errorf("sst %s: prefetch blocks %d-%d: %w", t.id, i, j, err)
	}
	hs := t.ix.handles
	base := hs[i].off
	for k := i; k <= j; k++ {
		content, err := decodeRead(raw[hs[k].off-base:hs[k].end()-base], checked, !noFill, nil)
		if err != nil {
			return fmt.Errorf("sst %s: prefetch data block %d: %w", t.id, k, err)
		}
		if noFill {
			keep(k, content)
			continue
		}
		if s != nil {
			s.Stash(ctx, t.cacheKey(hs[k].off), content, cache.ClassData)
		} else {
			t.c.Set(t.cacheKey(hs[k].off), content, cache.ClassData)
		}
		if keep != nil {
			keep(k, content)
		}
	}
	return nil
}
