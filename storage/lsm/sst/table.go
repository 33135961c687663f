package sst

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/shaledb/shale/cache"
)

// tailReadSize is how much of a table's end Open reads first: small and
// medium tables give up footer, index and filter in that one ranged read;
// larger ones need one more read for both blocks together.
const tailReadSize = 64 << 10

// Table is an open table: its footer, index and bloom filter decoded in
// memory, its data blocks read on demand through the cache. A Table is
// immutable and safe for concurrent use; it holds no resources beyond
// memory, so it needs no closing.
type Table struct {
	r         Readable
	id        string
	c         cache.Cache
	info      Info
	ix        index
	filter    bloomFilter
	hasFilter bool
	metaOffs  []int64 // offsets of the meta blocks read through the cache
}

// Open reads the footer, index and bloom filter (meta blocks) of a table,
// through c with cache.ClassMeta (c may be nil). id is a stable unique name
// for the table (its object name) used to build cache keys "id#offset".
// Open makes at most two reads of r on a cold cache and none on a warm one.
// Corrupt meta blocks give an error wrapping ErrCorrupt.
func Open(ctx context.Context, r Readable, id string, c cache.Cache) (*Table, error) {
	return OpenHint(ctx, r, id, c, 0)
}

// OpenHint is Open given the size of the table's meta region (filter, index
// and footer: Info.MetaSize, which a manifest can keep), so that a cold open
// reads exactly that region in one round trip however large the index and
// filter are. A metaSize of 0, or a wrong one, only costs what Open costs.
//
// Meta blocks whose bytes fail their checksum are read again, up to
// CorruptRereads times, and never cached.
func OpenHint(ctx context.Context, r Readable, id string, c cache.Cache, metaSize int64) (*Table, error) {
	for attempt := 0; ; attempt++ {
		t, err := openOnce(ctx, r, id, c, metaSize)
		if err == nil || !errors.Is(err, ErrCorrupt) || attempt == CorruptRereads {
			return t, err
		}
		reread(r, err)
	}
}

func openOnce(ctx context.Context, r Readable, id string, c cache.Cache, metaSize int64) (*Table, error) {
	size := r.Size()
	if size < footerLen {
		return nil, fmt.Errorf("sst %s: %w", id, corruptf("table of %d bytes is shorter than its footer", size))
	}
	t := &Table{r: r, id: id, c: c}
	m := metaReader{r: r, size: size, tailSize: tailReadSize}
	if metaSize >= footerLen {
		m.tailSize = metaSize
	}
	footerOff := size - footerLen
	fb, err := t.meta(ctx, footerOff, func(ctx context.Context) ([]byte, error) {
		b, err := m.read(ctx, footerOff, footerOff, footerLen)
		if err != nil {
			return nil, err
		}
		if _, err := decodeFooter(b, size); err != nil {
			return nil, err // not cached
		}
		return cloneExact(b), nil
	})
	if err != nil {
		return nil, fmt.Errorf("sst %s: footer: %w", id, err)
	}
	f, err := decodeFooter(fb, size)
	if err != nil {
		return nil, fmt.Errorf("sst %s: %w", id, err)
	}
	metaStart := f.filter.off
	loadBlock := func(h handle) func(context.Context) ([]byte, error) {
		return func(ctx context.Context) ([]byte, error) {
			raw, err := m.read(ctx, metaStart, h.off, h.len)
			if err != nil {
				return nil, err
			}
			return decodeBlock(raw, true)
		}
	}
	t.metaOffs = append(t.metaOffs, footerOff, f.index.off)
	ixContent, err := t.meta(ctx, f.index.off, loadBlock(f.index))
	if err != nil {
		return nil, fmt.Errorf("sst %s: index block: %w", id, err)
	}
	if t.ix, err = decodeIndex(ixContent, f.filter.off, f.version); err != nil {
		return nil, fmt.Errorf("sst %s: %w", id, err)
	}
	if f.filter.len > 0 {
		t.metaOffs = append(t.metaOffs, f.filter.off)
		fc, err := t.meta(ctx, f.filter.off, loadBlock(f.filter))
		if err != nil {
			return nil, fmt.Errorf("sst %s: filter block: %w", id, err)
		}
		if t.filter, err = decodeFilter(fc); err != nil {
			return nil, fmt.Errorf("sst %s: %w", id, err)
		}
		t.hasFilter = true
	}
	nb := len(t.ix.handles)
	if (nb == 0) != (f.numEntries == 0) || uint64(nb) > f.numEntries {
		return nil, fmt.Errorf("sst %s: %w", id, corruptf("%d data blocks for %d entries", nb, f.numEntries))
	}
	t.info = Info{
		Size:          size,
		NumEntries:    f.numEntries,
		MinSeq:        f.minSeq,
		MaxSeq:        f.maxSeq,
		NumDataBlocks: nb,
		DataSize:      f.filter.off,
		IndexSize:     f.index.len,
		FilterSize:    f.filter.len,
	}
	if nb > 0 {
		t.info.SmallestKey = t.ix.smallest
		t.info.LargestKey = t.ix.largest
	}
	return t, nil
}

// metaReader serves Open's reads from one buffered tail of the table,
// extending it backwards in a single read when a block starts before it.
type metaReader struct {
	r        Readable
	size     int64
	tailSize int64 // bytes to read first
	tail     []byte
	tailOff  int64
}

// read returns [off, off+length); on a miss it reads from min(from, off).
func (m *metaReader) read(ctx context.Context, from, off, length int64) ([]byte, error) {
	if m.tail == nil || off < m.tailOff {
		end := m.size
		if m.tail != nil {
			end = m.tailOff
		}
		start := min(from, off, max(m.size-m.tailSize, 0))
		if m.tail != nil {
			start = min(from, off)
		}
		b, err := m.r.ReadAt(ctx, start, end-start)
		if err != nil {
			return nil, fmt.Errorf("read [%d,+%d): %w", start, end-start, err)
		}
		if int64(len(b)) != end-start {
			return nil, fmt.Errorf("read [%d,+%d): got %d bytes", start, end-start, len(b))
		}
		m.tail, m.tailOff = append(b, m.tail...), start
	}
	return m.tail[off-m.tailOff : off-m.tailOff+length], nil
}

// Dropper is a cache.Cache that can forget a block early.
type Dropper interface {
	Drop(key string)
}

// DropCached removes the table's blocks (data and meta) from the block
// cache when the cache can (Dropper): for a table that left the LSM's
// manifest, whose blocks would otherwise hold cache memory until evicted.
func (t *Table) DropCached() {
	d, ok := t.c.(Dropper)
	if !ok {
		return
	}
	for _, h := range t.ix.handles {
		d.Drop(t.cacheKey(h.off))
	}
	for _, off := range t.metaOffs {
		d.Drop(t.cacheKey(off))
	}
}

func (t *Table) cacheKey(off int64) string {
	return string(t.appendCacheKey(make([]byte, 0, len(t.id)+21), off))
}

func (t *Table) appendCacheKey(dst []byte, off int64) []byte {
	dst = append(dst, t.id...)
	dst = append(dst, '#')
	return strconv.AppendInt(dst, off, 10)
}

// Peeker is a cache that can look a block up without keeping the key
// (cache.Tiered.Peek): a table then builds the key of a lookup in a reused
// buffer, and only a miss allocates one.
type Peeker interface {
	Peek(key string, class cache.Class) ([]byte, bool)
}

// keyBufs are the buffers of withTempKey.
var keyBufs = sync.Pool{New: func() any { return new([]byte) }}

// withTempKey calls f with the cache key of the block at off, built in a
// reused buffer: f must not keep it.
func (t *Table) withTempKey(off int64, f func(key string)) {
	bp := keyBufs.Get().(*[]byte)
	*bp = t.appendCacheKey((*bp)[:0], off)
	f(unsafe.String(unsafe.SliceData(*bp), len(*bp)))
	keyBufs.Put(bp)
}

// peek looks block off up in the cache's RAM tier, if the cache can.
func (t *Table) peek(off int64, class cache.Class) (v []byte, ok bool) {
	p, can := t.c.(Peeker)
	if !can {
		return nil, false
	}
	t.withTempKey(off, func(key string) { v, ok = p.Peek(key, class) })
	return v, ok
}

// cachedBlock returns data block i when the cache holds it.
func (t *Table) cachedBlock(i int) ([]byte, bool) {
	off := t.ix.handles[i].off
	if v, ok := t.peek(off, cache.ClassData); ok {
		return v, true
	}
	return t.c.Get(t.cacheKey(off))
}

func (t *Table) meta(ctx context.Context, off int64, load func(context.Context) ([]byte, error)) ([]byte, error) {
	if t.c == nil {
		return load(ctx)
	}
	return t.c.GetOrLoad(ctx, t.cacheKey(off), cache.ClassMeta, load)
}

// Info describes the table as its footer and index record it. Its key
// slices are the table's own: callers must not modify them.
func (t *Table) Info() Info { return t.info }

// ID is the name the table was opened with.
func (t *Table) ID() string { return t.id }

// MayContain reports whether the table may hold key, by its bloom filter; it
// is true when the table has no filter and false outside the key range.
func (t *Table) MayContain(key []byte) bool {
	if len(t.ix.handles) == 0 || bytes.Compare(key, t.ix.smallest) < 0 || bytes.Compare(key, t.ix.largest) > 0 {
		return false
	}
	return !t.hasFilter || t.filter.mayContain(bloomHash(key))
}

// findBlock returns the first block whose separator is >= key: the only
// block where key's first entry can be. len(handles) means none.
func (t *Table) findBlock(key []byte) int {
	return sort.Search(len(t.ix.seps), func(i int) bool { return bytes.Compare(t.ix.seps[i], key) >= 0 })
}

// dataBlock returns block i's decoded content through the cache. On a miss
// it reads block i alone, or with budget > 0 a run of adjacent blocks from i
// up to last (at most budget bytes) in one ranged read, caching all of them.
// misses, when not nil, counts the misses this call loaded.
//
// The load may run on a goroutine of the cache's and outlive the call (the
// cache detaches it from a caller that gives up), so it touches only its
// arguments and the immutable Table.
func (t *Table) dataBlock(ctx context.Context, i, last int, budget int64, misses *atomic.Int64, iv *Interval) ([]byte, error) {
	if t.c == nil {
		return t.readBlock(ctx, i)
	}
	if v, ok := t.peek(t.ix.handles[i].off, cache.ClassData); ok {
		return v, nil
	}
	return t.c.GetOrLoad(ctx, t.cacheKey(t.ix.handles[i].off), cache.ClassData, func(ctx context.Context) ([]byte, error) {
		if misses != nil {
			misses.Add(1)
		}
		if j := t.runEnd(i, last, budget, iv); j > i {
			return t.readRun(ctx, i, j)
		}
		return t.readBlock(ctx, i)
	})
}

// runEnd returns the last block of a run starting at block i that ends by
// block last, before any block skipped for iv (when not nil), and spans at
// most budget bytes; i itself when none fits.
func (t *Table) runEnd(i, last int, budget int64, iv *Interval) int {
	hs := t.ix.handles
	j := i
	for j+1 <= last && hs[j+1].end()-hs[i].off <= budget && !t.ix.skips(j+1, iv) {
		j++
	}
	return j
}

// readBlock reads and decodes block i alone.
func (t *Table) readBlock(ctx context.Context, i int) ([]byte, error) {
	raw, checked, err := t.readBlocks(ctx, i, i)
	if err != nil {
		return nil, err
	}
	return decodeRead(raw, checked, false, nil)
}

// CorruptRereads is how many times a read whose bytes fail their checksum is
// made again before the corruption is reported. Bytes can be spoiled on the
// way (a proxy, a network card, a node of the store) and be whole at rest;
// bytes corrupt at rest fail every read and are reported after these.
const CorruptRereads = 2

// RereadObserver is implemented by a Readable that wants to know when bytes
// it served failed their checksum and are read again.
type RereadObserver interface {
	// Reread is told of a read whose bytes failed their checksum (err says
	// which) and that is about to be made again.
	Reread(err error)
}

// reread tells r, if it listens, that a read failed with err and is made
// again.
func reread(r Readable, err error) {
	if o, ok := r.(RereadObserver); ok {
		o.Reread(err)
	}
}

// readBlocks reads the bytes of blocks [i, j] in one ranged read and checks
// each block's checksum, reading the range again, up to CorruptRereads
// times, while one fails. checked says that all passed; when one still
// fails, the bytes are returned as read for its decode to report (a block
// corrupt at rest fails only the reads that need it).
func (t *Table) readBlocks(ctx context.Context, i, j int) (raw []byte, checked bool, err error) {
	hs := t.ix.handles
	base := hs[i].off
	for attempt := 0; ; attempt++ {
		if raw, err = t.readRange(ctx, i, j); err != nil {
			return nil, false, err
		}
		k := i
		for ; k <= j; k++ {
			if err = checkBlock(raw[hs[k].off-base : hs[k].end()-base]); err != nil {
				break
			}
		}
		if k > j {
			return raw, true, nil
		}
		if attempt == CorruptRereads {
			return raw, false, nil
		}
		reread(t.r, fmt.Errorf("sst %s: block %d of blocks %d-%d [%d,+%d): %w", t.id, k, i, j, base, hs[j].end()-base, err))
	}
}

// decodeRead returns the content of a block of a range readBlocks returned,
// skipping the checksum when readBlocks checked it.
func decodeRead(raw []byte, checked, clone bool, reuse []byte) ([]byte, error) {
	if checked {
		return unwrapBlock(raw, clone, reuse)
	}
	return decodeBlockReuse(raw, clone, reuse)
}

// readRange reads the bytes of blocks [i, j] in one ranged read.
func (t *Table) readRange(ctx context.Context, i, j int) ([]byte, error) {
	off, n := t.ix.handles[i].off, t.ix.handles[j].end()-t.ix.handles[i].off
	raw, err := t.r.ReadAt(ctx, off, n)
	if err != nil {
		return nil, fmt.Errorf("read [%d,+%d): %w", off, n, err)
	}
	if int64(len(raw)) != n {
		return nil, fmt.Errorf("read [%d,+%d): got %d bytes", off, n, len(raw))
	}
	return raw, nil
}

// readRun reads blocks [i, j] in one ranged read, puts blocks i+1..j in the
// cache and returns block i. A later block that fails to decode is left out,
// to fail when it is read on its own.
func (t *Table) readRun(ctx context.Context, i, j int) ([]byte, error) {
	raw, checked, err := t.readBlocks(ctx, i, j)
	if err != nil {
		return nil, err
	}
	hs := t.ix.handles
	base := hs[i].off
	first, err := decodeRead(raw[:hs[i].len], checked, true, nil)
	if err != nil {
		return nil, err
	}
	for k := i + 1; k <= j; k++ {
		content, err := decodeRead(raw[hs[k].off-base:hs[k].end()-base], checked, true, nil)
		if err != nil {
			continue
		}
		t.c.Set(t.cacheKey(hs[k].off), content, cache.ClassData)
	}
	return first, nil
}

// Get appends all entries of key to dst, newest first, and returns dst. It
// reads at most the blocks holding key (usually one), and none when the
// bloom filter rules the key out.
//
// Each returned Entry's Key is the key argument itself. Values alias block
// memory that is shared with the cache and immutable: callers must not
// modify them. By cache.Cache's contract blocks are never recycled, so values
// stay valid for as long as they are held; a caller keeping small values
// long should copy them rather than pin whole blocks.
func (t *Table) Get(ctx context.Context, key []byte, dst []Entry) ([]Entry, error) {
	if !t.MayContain(key) {
		return dst, nil
	}
	var bi blockIter
	var keyBuf [64]byte
	bi.key = keyBuf[:0]
	for i := t.findBlock(key); i < len(t.ix.handles); i++ {
		content, err := t.dataBlock(ctx, i, i, 0, nil, nil)
		if err != nil {
			return dst, fmt.Errorf("sst %s: get: data block %d: %w", t.id, i, err)
		}
		if err := bi.init(content); err != nil {
			return dst, fmt.Errorf("sst %s: get: data block %d: %w", t.id, i, err)
		}
		ok := bi.seekGE(key)
		for ok && bytes.Equal(bi.key, key) {
			dst = append(dst, Entry{Key: key, Seq: bi.seq, Kind: bi.kind, Value: bi.val})
			ok = bi.next()
		}
		if bi.err != nil {
			return dst, fmt.Errorf("sst %s: get: data block %d: %w", t.id, i, bi.err)
		}
		if ok || !bytes.Equal(bi.key, key) {
			// A greater key follows, or the block ended before key: the
			// next block starts after the separator, past key.
			return dst, nil
		}
	}
	return dst, nil
}
