package sst

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
)

// Read-ahead: on a cache miss an Iter reads a run of adjacent data blocks in
// one ranged read, so a cold scan against a high-latency object store makes
// few round trips. A bounded iterator reads up to boundedReadahead of the
// blocks its range needs at once; an unbounded one starts with one block and
// doubles from minReadahead on each further miss, up to maxReadahead.
const (
	minReadahead     = 64 << 10
	boundedReadahead = 256 << 10
	maxReadahead     = 2 << 20
)

// errClosed is returned by an Iter used after Close.
var errClosed = errors.New("sst: iterator closed")

// Iter walks a table's entries in table order within [lower, upper). It is
// not safe for concurrent use; open one per goroutine.
type Iter struct {
	t            *Table
	ctx          context.Context
	lower, upper []byte
	lastBlock    int // last block that can hold keys < upper

	bi     int // loaded block, -1 if none
	blk    blockIter
	valid  bool
	err    error
	closed bool

	nextRun int64        // byte budget of the next run read
	misses  atomic.Int64 // cache misses loaded for this iterator

	// Without a cache (or for a scan), the raw bytes of blocks [runFirst,
	// runLast], and whether their checksums passed (readBlocks).
	run        []byte
	runChecked bool
	runFirst   int
	runLast    int

	scan   bool   // read past the cache; see NewScanIter
	noFill bool   // read through the cache without adding to it; see SetNoFill
	whole  bool   // load the range at the first positioning; see NewRangeIter
	dec    []byte // a scan's decompressed block, reused block after block

	iv    *Interval // see SetInterval; nil: none
	ivBuf Interval

	// A range iterator's blocks read at its first positioning, by block
	// index from preFirst, each dropped as it is loaded (see NewRangeIter).
	pre      [][]byte
	preFirst int
}

// SetInterval makes the iterator skip, without reading them, the data
// blocks whose entries are all merge operands whose interval (recorded by a
// Writer given an IntervalFunc) lies outside iv: their entries are not
// seen, as if each had been read and dropped. The other blocks are read
// whole, operands outside iv included. Call it before the first positioning
// call.
func (it *Iter) SetInterval(iv Interval) {
	it.ivBuf = iv
	it.iv = &it.ivBuf
}

// SetNoFill makes the iterator read blocks the cache holds from it and the
// others past it, without offering them to it: for a read of far more than
// the cache holds, whose blocks would only evict others and be evicted in
// turn. A range iterator (NewRangeIter) keeps what its first read brought
// in. Call it before the first positioning call.
func (it *Iter) SetNoFill() { it.noFill = true }

// NewIter returns an iterator over keys in [lower, upper); a nil bound is
// unbounded. The iterator is unpositioned: call First or SeekGE. Data blocks
// go through the table's cache with cache.ClassData. lower and upper must not
// be modified while the iterator is in use.
func (t *Table) NewIter(ctx context.Context, lower, upper []byte) *Iter {
	it := &Iter{t: t, ctx: ctx, lower: lower, upper: upper, bi: -1, lastBlock: len(t.ix.handles) - 1}
	if upper != nil {
		it.lastBlock = min(t.findBlock(upper), it.lastBlock)
		it.nextRun = boundedReadahead
	}
	return it
}

// NewRangeIter is NewIter for a range read as a whole, once: its first
// positioning loads the blocks of the range from there on that are not
// cached, each run of adjacent ones (up to 8 MiB) with one ranged read, as
// Prefetch does, so a cold read of a range costs one round trip rather than
// a growing sequence of them. The iterator keeps the blocks it read until it
// reaches them, as well as offering them to the cache: a range larger than
// what the cache admits is read once, not read ahead and then again when the
// cache has let its blocks go. Without a cache it is NewIter.
func (t *Table) NewRangeIter(ctx context.Context, lower, upper []byte) *Iter {
	it := t.NewIter(ctx, lower, upper)
	it.whole = it.upper != nil
	return it
}

// NewScanIter returns an iterator for one pass over [lower, upper), as a
// compaction makes: it reads data blocks from the table's Readable in runs
// that grow to 2 MiB, past the cache, neither looking blocks up nor adding
// them. A pass over whole tables about to be replaced would otherwise evict
// the blocks that queries use for blocks nobody reads again, and hold them in
// memory meanwhile. Unlike NewIter's, Entry values are valid only until the
// next positioning call.
func (t *Table) NewScanIter(ctx context.Context, lower, upper []byte) *Iter {
	it := t.NewIter(ctx, lower, upper)
	it.scan = true
	return it
}

// First positions at the first entry in range and reports whether there is
// one.
func (it *Iter) First() bool {
	if it.lower != nil {
		return it.SeekGE(it.lower)
	}
	return it.seekFrom(0, nil)
}

// SeekGE positions at the first entry in range whose key is >= key and
// reports whether there is one.
func (it *Iter) SeekGE(key []byte) bool {
	if it.lower != nil && bytes.Compare(key, it.lower) < 0 {
		key = it.lower
	}
	if it.whole {
		it.whole = false
		it.readWhole(key)
	}
	return it.seekFrom(it.t.findBlock(key), key)
}

// Next moves to the next entry and reports whether there is one.
func (it *Iter) Next() bool {
	if !it.valid {
		return false
	}
	if it.blk.next() {
		return it.checkUpper()
	}
	if it.blk.err != nil {
		return it.fail(it.blk.err)
	}
	return it.seekFrom(it.bi+1, nil)
}

// seekFrom positions at the first entry >= key (nil: the first entry) at or
// after block i.
func (it *Iter) seekFrom(i int, key []byte) bool {
	it.valid = false
	if it.err != nil {
		return false
	}
	for ; i <= it.lastBlock; i++ {
		if it.t.ix.skips(i, it.iv) {
			// The next block's entries all come after key.
			key = nil
			continue
		}
		if !it.load(i) {
			return false
		}
		var ok bool
		if key == nil {
			ok = it.blk.first()
		} else {
			ok = it.blk.seekGE(key)
		}
		if ok {
			return it.checkUpper()
		}
		if it.blk.err != nil {
			return it.fail(it.blk.err)
		}
		key = nil
	}
	return false
}

func (it *Iter) checkUpper() bool {
	it.valid = it.upper == nil || bytes.Compare(it.blk.key, it.upper) < 0
	return it.valid
}

func (it *Iter) fail(err error) bool {
	it.valid = false
	it.err = fmt.Errorf("sst %s: data block %d: %w", it.t.id, it.bi, err)
	return false
}

func (it *Iter) load(i int) bool {
	if i == it.bi {
		return true
	}
	var content []byte
	var err error
	var kept bool
	if it.t.c == nil || it.scan {
		content, err = it.fetchUncached(i)
	} else if content, kept = it.takeRead(i); kept {
		// read by the range's first read
	} else if it.noFill {
		var cached bool
		if content, cached = it.t.cachedBlock(i); !cached {
			content, err = it.fetchUncached(i)
		}
	} else {
		before := it.misses.Load()
		content, err = it.t.dataBlock(it.ctx, i, it.lastBlock, it.nextRun, &it.misses, it.iv)
		if it.misses.Load() != before {
			it.growReadahead()
		}
	}
	it.bi = i
	if err != nil {
		return it.fail(err)
	}
	if err := it.blk.init(content); err != nil {
		return it.fail(err)
	}
	return true
}

// maxKeptBytes bounds the blocks a range iterator keeps from its first read
// (see NewRangeIter); blocks past it are left to the cache as before, or
// with SetNoFill read again as the iteration reaches them (the first read
// then stops at the bound). A
// query's ranges are far smaller (a few MiB of sample blocks), and it keeps
// the values it reads anyway. A variable for tests.
var maxKeptBytes = 32 << 20

// readWhole reads the blocks of [key, upper) that are not cached, keeping
// them for load up to maxKeptBytes. A failed read is left for the block
// loads to report.
func (it *Iter) readWhole(key []byte) {
	if it.t.c == nil || len(it.t.ix.handles) == 0 {
		return
	}
	first, last := it.t.blockSpan(key, it.upper)
	if first > last {
		return
	}
	if it.noFill {
		// What is read here and not kept would be read again: read what
		// can be kept, and the rest as the iteration reaches it.
		hs := it.t.ix.handles
		last = first + sort.Search(last-first+1, func(k int) bool { return hs[first+k].end()-hs[first].off > int64(maxKeptBytes) }) - 1
		if last < first {
			return
		}
	}
	var kept int
	keep := func(i int, content []byte) {
		if kept += len(content); kept > maxKeptBytes {
			return
		}
		if it.pre == nil {
			it.pre, it.preFirst = make([][]byte, last-first+1), first
		}
		it.pre[i-first] = content
	}
	_ = it.t.prefetchSpan(it.ctx, first, last, nil, it.iv, keep, it.noFill)
}

// takeRead returns block i when the range's first read kept it, and drops
// it from the iterator.
func (it *Iter) takeRead(i int) ([]byte, bool) {
	k := i - it.preFirst
	if k < 0 || k >= len(it.pre) || it.pre[k] == nil {
		return nil, false
	}
	content := it.pre[k]
	it.pre[k] = nil
	return content, true
}

func (it *Iter) growReadahead() {
	it.nextRun = min(max(2*it.nextRun, minReadahead), maxReadahead)
}

// fetchUncached returns block i of a table without a cache (or of a scan),
// from the run of blocks last read or from a new run.
func (it *Iter) fetchUncached(i int) ([]byte, error) {
	hs := it.t.ix.handles
	if i < it.runFirst || i > it.runLast || it.run == nil {
		it.run = nil
		j := it.t.runEnd(i, it.lastBlock, it.nextRun, it.iv)
		if it.noFill && it.t.c != nil {
			// Cached blocks are read from the cache. Asking whether it
			// holds them neither promotes nor counts them where it can.
			s, _ := it.t.c.(Stasher)
			for k := i + 1; k <= j; k++ {
				if it.t.holds(s, k) {
					j = k - 1
					break
				}
			}
		}
		it.growReadahead()
		raw, checked, err := it.t.readBlocks(it.ctx, i, j)
		if err != nil {
			return nil, err
		}
		it.run, it.runChecked, it.runFirst, it.runLast = raw, checked, i, j
	}
	base := hs[it.runFirst].off
	raw := it.run[hs[i].off-base : hs[i].end()-base]
	if !it.scan {
		return decodeRead(raw, it.runChecked, false, nil)
	}
	content, err := decodeRead(raw, it.runChecked, false, it.dec)
	if err == nil && len(content) > 0 && len(raw) > 0 && &content[0] != &raw[0] {
		it.dec = content
	}
	return content, err
}

// Valid reports whether the iterator is at an entry.
func (it *Iter) Valid() bool { return it.valid }

// Entry returns the current entry; call it only while Valid. Its Key is
// valid until the next positioning call (First, SeekGE, Next); its Value
// aliases immutable block memory shared with the cache (see Table.Get) and
// must not be modified.
func (it *Iter) Entry() Entry {
	return Entry{Key: it.blk.key, Seq: it.blk.seq, Kind: it.blk.kind, Value: it.blk.val}
}

// Err returns the error that stopped the iterator, if any. An iterator that
// ran off its range has no error.
func (it *Iter) Err() error { return it.err }

// Close releases the iterator's buffers and returns Err. The iterator cannot
// be used afterwards: positioning calls return false and Err reports that it
// is closed. A second Close returns nil.
func (it *Iter) Close() error {
	if it.closed {
		return nil
	}
	err := it.err
	it.closed = true
	it.run, it.dec, it.pre = nil, nil, nil
	it.valid = false
	it.blk = blockIter{}
	if it.err == nil {
		it.err = errClosed
	}
	return err
}
