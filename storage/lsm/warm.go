package lsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/shaledb/shale/storage/lsm/sst"
)

// prefetchParallel bounds the tables one Prefetch reads at once.
const prefetchParallel = 8

// PrefetchStats says what a Prefetch read from the object store.
type PrefetchStats struct {
	// Tables is the number of tables overlapping the range.
	Tables int
	// Requests is the number of ranged reads made (meta and data blocks).
	Requests int64
	// Bytes is the number of bytes those reads returned.
	Bytes int64
}

// Prefetch loads into the block cache everything a read of [lower, upper)
// (nil bounds are unbounded) needs from the tables of the current manifest:
// the meta blocks of every overlapping table (cache.ClassMeta) and the data
// blocks that may hold keys in the range (cache.ClassData). Blocks already
// cached are not read again; each run of adjacent missing blocks is one
// ranged read. Tables are read in parallel. Memtables are not touched: they
// are in memory already. Without a cache it only opens the tables.
//
// Prefetch is for blocks no query asked for yet: when the cache can keep
// them outside RAM (sst.Stasher, a cache with a disk tier) they go there, and
// a query's first read promotes them.
func (db *DB) Prefetch(ctx context.Context, lower, upper []byte) (PrefetchStats, error) {
	if err := db.readable(); err != nil {
		return PrefetchStats{}, err
	}
	v, _ := db.snapshot()
	return prefetch(ctx, db.s, v.man, lower, upper)
}

// Prefetch is DB.Prefetch on the reader's current manifest.
func (r *Reader) Prefetch(ctx context.Context, lower, upper []byte) (PrefetchStats, error) {
	v, _, err := r.snapshot()
	if err != nil {
		return PrefetchStats{}, err
	}
	return prefetch(ctx, r.s, v.man, lower, upper)
}

// ManifestVersion returns the id of the manifest reads see now. It changes
// whenever the set of tables does: a memtable flush, a compaction, garbage
// collection of range tombstones.
func (db *DB) ManifestVersion() uint64 {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.manID
}

// ManifestVersion returns the id of the manifest the reader follows now.
func (r *Reader) ManifestVersion() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.manID
}

// overlappingL0 returns the L0 tables of man that overlap [lower, upper).
func overlappingL0(man *manifest, lower, upper []byte) []*tableMeta {
	var tables []*tableMeta
	for i := range man.L0 {
		if overlaps(&man.L0[i], lower, upper) {
			tables = append(tables, &man.L0[i])
		}
	}
	return tables
}

func prefetch(ctx context.Context, s *store, man *manifest, lower, upper []byte) (PrefetchStats, error) {
	tables := overlappingL0(man, lower, upper)
	for i := range man.Runs {
		for j := range man.Runs[i].Tables {
			if t := &man.Runs[i].Tables[j]; overlaps(t, lower, upper) {
				tables = append(tables, t)
			}
		}
	}
	st := PrefetchStats{Tables: len(tables)}
	var (
		requests, bytes atomic.Int64
		mu              sync.Mutex
		errs            []error
	)
	eachParallel(tables, prefetchParallel, func(t *tableMeta) {
		if err := prefetchTable(ctx, s, t, lower, upper, &requests, &bytes); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	})
	st.Requests, st.Bytes = requests.Load(), bytes.Load()
	return st, errors.Join(errs...)
}

// prefetchTable opens its own handle of a table over a counting reader, so
// that the reads are attributed to this prefetch; the meta blocks come from
// the cache when the table was opened before.
func prefetchTable(ctx context.Context, s *store, t *tableMeta, lower, upper []byte, requests, bytes *atomic.Int64) error {
	name := s.paths.sst(t.ID)
	r := &countingReadable{r: &readable{s: s, name: name, size: t.Size}, requests: requests, bytes: bytes}
	h, err := sst.Open(ctx, r, name, s.cache)
	if err != nil {
		if isNotFound(err) {
			return nil // collected after a compaction: no newer read needs it
		}
		return fmt.Errorf("prefetch: open table %s: %w", name, err)
	}
	if err := h.Stash(ctx, lower, upper); err != nil {
		if isNotFound(err) {
			return nil
		}
		return fmt.Errorf("prefetch: %w", err)
	}
	return nil
}

type countingReadable struct {
	r               sst.Readable
	requests, bytes *atomic.Int64
}

func (c *countingReadable) Size() int64 { return c.r.Size() }

func (c *countingReadable) ReadAt(ctx context.Context, off, length int64) ([]byte, error) {
	b, err := c.r.ReadAt(ctx, off, length)
	c.requests.Add(1)
	c.bytes.Add(int64(len(b)))
	return b, err
}

// KeyRange is the keys in [Lower, Upper); a nil bound is unbounded.
type KeyRange struct{ Lower, Upper []byte }

// Cached reports whether the DB reads through a block cache, so that a
// Prefetch makes later reads cheaper.
func (db *DB) Cached() bool { return db.s.cache != nil }

// Cached reports whether the reader reads through a block cache.
func (r *Reader) Cached() bool { return r.s.cache != nil }

// CacheCapacity is View.CacheCapacity.
func (db *DB) CacheCapacity() int64 { return db.s.cacheCapacity() }

// CacheCapacity is View.CacheCapacity.
func (r *Reader) CacheCapacity() int64 { return r.s.cacheCapacity() }

func (s *store) cacheCapacity() int64 {
	if c, ok := s.cache.(interface{ Capacity() int64 }); ok {
		return c.Capacity()
	}
	return 0
}

// PrefetchRanges is Prefetch of many ranges at once, without statistics:
// the read path's way to load, in one round of parallel ranged reads, the
// blocks a query is about to read key by key. A range of one key (Upper is
// Lower followed by a zero byte) skips the tables whose bloom filter rules
// the key out. At most parallel tables-and-ranges are read at once.
func (db *DB) PrefetchRanges(ctx context.Context, ranges []KeyRange, parallel int) error {
	if err := db.readable(); err != nil {
		return err
	}
	v, _ := db.snapshot()
	return prefetchRanges(ctx, db.s, v.man, ranges, parallel)
}

// PrefetchRanges is DB.PrefetchRanges on the reader's current manifest.
func (r *Reader) PrefetchRanges(ctx context.Context, ranges []KeyRange, parallel int) error {
	v, _, err := r.snapshot()
	if err != nil {
		return err
	}
	return prefetchRanges(ctx, r.s, v.man, ranges, parallel)
}

func prefetchRanges(ctx context.Context, s *store, man *manifest, ranges []KeyRange, parallel int) error {
	if s.cache == nil || len(ranges) == 0 {
		return nil
	}
	// The tables any range overlaps, opened together first. L0 tables
	// usually span every range, so they are walked table by table, with no
	// list of (table, range) pairs: a warm query over many L0 tables made
	// one per pair, a megabyte and most of its planning.
	var open []*tableMeta
	for i := range man.L0 {
		t := &man.L0[i]
		for _, r := range ranges {
			if overlaps(t, r.Lower, r.Upper) {
				open = append(open, t)
				break
			}
		}
	}
	var runSeen map[*tableMeta]bool
	eachRunTable := func(r KeyRange, f func(t *tableMeta)) {
		for i := range man.Runs {
			ts := man.Runs[i].Tables
			j := 0
			if r.Lower != nil {
				j = sortSearchTables(ts, r.Lower)
			}
			for ; j < len(ts) && overlaps(&ts[j], r.Lower, r.Upper); j++ {
				f(&ts[j])
			}
		}
	}
	for _, r := range ranges {
		eachRunTable(r, func(t *tableMeta) {
			if runSeen == nil {
				runSeen = map[*tableMeta]bool{}
			}
			if !runSeen[t] {
				runSeen[t] = true
				open = append(open, t)
			}
		})
	}
	s.openAll(ctx, open, man.L0)
	var (
		mu      sync.Mutex
		errs    []error
		pending []blockSpan
	)
	// check notes the blocks range r needs of table h, unless every one is
	// cached already: checking costs a few lookups, listing every
	// (table, range) pair costs more.
	check := func(h *sst.Table, r KeyRange) error {
		if isPoint(r) && !h.MayContain(r.Lower) {
			return nil
		}
		first, last := h.BlockSpan(r.Lower, r.Upper)
		if first > last || h.CachedBlocks(first, last) {
			return nil
		}
		pending = append(pending, blockSpan{h, first, last})
		return ctx.Err()
	}
	handle := func(t *tableMeta) *sst.Table {
		h, err := s.table(ctx, t)
		if err != nil {
			if !isNotFound(err) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			return nil
		}
		return h
	}
	var ctxErr error
	for i := range man.L0 {
		t := &man.L0[i]
		var h *sst.Table
		for _, r := range ranges {
			if ctxErr != nil || !overlaps(t, r.Lower, r.Upper) {
				continue
			}
			if h == nil {
				if h = handle(t); h == nil {
					break
				}
			}
			ctxErr = check(h, r)
		}
	}
	for _, r := range ranges {
		if ctxErr != nil {
			break
		}
		eachRunTable(r, func(t *tableMeta) {
			if ctxErr != nil {
				return
			}
			if h := handle(t); h != nil {
				ctxErr = check(h, r)
			}
		})
	}
	if ctxErr != nil {
		return ctxErr
	}
	// The spans of neighbouring ranges share the block one ends and the
	// next starts in (or more, for ranges within one block): each block is
	// read by one span only, so that no two reads fetch it at once.
	pending = dedupeSpans(pending)
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(parallel, 1))
	for _, sp := range pending {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := sp.h.PrefetchBlocks(ctx, sp.first, sp.last); err != nil && !isNotFound(err) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// blockSpan is the data blocks [first, last] of a table to read ahead.
type blockSpan struct {
	h           *sst.Table
	first, last int
}

// dedupeSpans orders spans by table and first block and trims each so that
// no block is in two spans: a span keeps only the blocks after those of the
// spans of its table before it, and goes when none are left. Each span
// stays a read of its own, so the reads stay parallel.
func dedupeSpans(spans []blockSpan) []blockSpan {
	if len(spans) < 2 {
		return spans
	}
	slices.SortFunc(spans, func(a, b blockSpan) int {
		if c := strings.Compare(a.h.ID(), b.h.ID()); c != 0 {
			return c
		}
		if a.first != b.first {
			return a.first - b.first
		}
		return b.last - a.last // the longer first, so that it keeps its blocks
	})
	out := spans[:0]
	var prev *sst.Table
	covered := -1 // last block of prev read by a kept span
	for _, sp := range spans {
		if sp.h != prev {
			prev, covered = sp.h, -1
		}
		sp.first = max(sp.first, covered+1)
		if sp.first > sp.last {
			continue
		}
		covered = sp.last
		out = append(out, sp)
	}
	return out
}

func isPoint(r KeyRange) bool {
	return len(r.Upper) == len(r.Lower)+1 && r.Upper[len(r.Lower)] == 0 && bytes.Equal(r.Upper[:len(r.Lower)], r.Lower)
}

// sortSearchTables returns the first table of a sorted run whose largest
// key is >= key.
func sortSearchTables(ts []tableMeta, key []byte) int {
	return sort.Search(len(ts), func(i int) bool { return bytes.Compare(ts[i].LargestKey, key) >= 0 })
}

// RangeBytes returns the stored size of the data blocks of every table that
// may hold keys in [lower, upper) (nil bounds are unbounded): what a
// Prefetch of the range reads on a cold cache, at most. It opens the tables
// the range overlaps, in parallel (their meta regions: one round trip on a
// cold cache), and reads no data block. Writes not yet in a table are not
// counted: they are read from memory.
func (db *DB) RangeBytes(ctx context.Context, lower, upper []byte) (int64, error) {
	if err := db.readable(); err != nil {
		return 0, err
	}
	v, _ := db.snapshot()
	return rangeBytes(ctx, db.s, v.man, lower, upper)
}

// RangeBytes is DB.RangeBytes on the reader's current manifest.
func (r *Reader) RangeBytes(ctx context.Context, lower, upper []byte) (int64, error) {
	v, _, err := r.snapshot()
	if err != nil {
		return 0, err
	}
	return rangeBytes(ctx, r.s, v.man, lower, upper)
}

func rangeBytes(ctx context.Context, s *store, man *manifest, lower, upper []byte) (int64, error) {
	tables := overlappingL0(man, lower, upper)
	for i := range man.Runs {
		ts := man.Runs[i].Tables
		j := 0
		if lower != nil {
			j = sortSearchTables(ts, lower)
		}
		for ; j < len(ts) && overlaps(&ts[j], lower, upper); j++ {
			tables = append(tables, &ts[j])
		}
	}
	s.openAll(ctx, tables, nil)
	var n int64
	for _, t := range tables {
		h, err := s.table(ctx, t)
		if err != nil {
			return 0, fmt.Errorf("range bytes: %w", err)
		}
		first, last := h.BlockSpan(lower, upper)
		n += h.SpanBytes(first, last)
	}
	return n, nil
}
