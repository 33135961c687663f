package lsm

import (
	"bytes"
	"context"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// kind is what an entry does to its key. The first three values are the
// same as sst.Kind; kindRangeDelete exists only in the WAL and memtable
// tombstone list.
type kind uint8

const (
	kindPut         kind = 1
	kindDelete      kind = 2
	kindMerge       kind = 3
	kindRangeDelete kind = 4
)

// entry is one versioned record. For kindRangeDelete, key is the inclusive
// start and value the exclusive end of the range.
type entry struct {
	key   []byte
	value []byte
	seq   uint64
	kind  kind
	// stable is true for a table's entry, whose value lies in an immutable
	// block (sst.Iter.Entry) that stays valid for as long as it is held;
	// false for a memtable's and for a compaction's scan of a table, whose
	// values the next positioning call may write over.
	stable bool
}

// rangeTomb deletes every entry with key in [start, end) and seq < seq.
type rangeTomb struct {
	start, end []byte
	seq        uint64
}

func (t *rangeTomb) covers(key []byte, seq uint64) bool {
	return seq < t.seq && bytes.Compare(key, t.start) >= 0 && bytes.Compare(key, t.end) < 0
}

const (
	maxHeight    = 12
	arenaChunk   = 256 << 10
	nodeSlab     = 512
	towerSlab    = 2048
	nodeOverhead = 64 // per-entry bookkeeping counted into the size: a node and its tower
)

type node struct {
	e    nodeEntry
	next []atomic.Pointer[node]
}

// nodeEntry is an entry as a memtable keeps it: key and value lie one after
// the other in the arena from kv. One pointer and two lengths instead of two
// slice headers make a node 56 bytes instead of 88, which at the small
// entries of a large head flush (about 100 bytes of key and value) is a fifth
// of the memtable's memory. Lengths fit in 32 bits: a table block holds at
// most 1 GiB.
type nodeEntry struct {
	kv         *byte
	klen, vlen uint32
	seq        uint64
	kind       kind
}

func (n *nodeEntry) key() []byte { return unsafe.Slice(n.kv, n.klen) }

func (n *nodeEntry) entry() entry {
	kv := unsafe.Slice(n.kv, int(n.klen)+int(n.vlen))
	return entry{key: kv[:n.klen:n.klen], value: kv[n.klen:], seq: n.seq, kind: n.kind}
}

// memtable is a skiplist ordered by key ascending, then seq descending. One
// writer at a time may insert (the DB serialises writers); any number of
// readers may read concurrently without locks. Keys and values are copied
// into chunked arenas that are never rewritten, so slices handed to readers
// stay valid for the memtable's life.
type memtable struct {
	head   node
	height atomic.Int32
	size   atomic.Int64
	count  atomic.Int64

	// writer-only state
	rnd    uint64
	arena  []byte
	nodes  []node
	towers []atomic.Pointer[node]
	prev   [maxHeight]*node

	tombs atomic.Pointer[[]rangeTomb]

	// lifecycle, set by the DB
	created time.Time
	maxSeq  uint64  // largest seq inserted
	walID   uint64  // last WAL object holding this memtable's writes (set when frozen)
	wal     *walBuf // that object, while it may not be stored yet

	flushOnce sync.Once
	flushed   chan struct{} // closed once the memtable is durable in L0 (or failed)
	flushErr  error
}

func newMemtable(now time.Time) *memtable {
	m := &memtable{rnd: uint64(now.UnixNano()) | 1, created: now, flushed: make(chan struct{})}
	m.head.next = make([]atomic.Pointer[node], maxHeight)
	m.height.Store(1)
	empty := []rangeTomb{}
	m.tombs.Store(&empty)
	return m
}

func (m *memtable) markFlushed(err error) {
	m.flushOnce.Do(func() {
		m.flushErr = err
		close(m.flushed)
	})
}

// waitFlushed returns once the memtable is durable in L0, nil, or its flush
// failed, with that error; or with ctx's error if ctx ends first.
func (m *memtable) waitFlushed(ctx context.Context) error {
	return awaitDone(ctx, m.flushed, &m.flushErr)
}

func (m *memtable) alloc(n int) []byte {
	if cap(m.arena)-len(m.arena) < n {
		sz := arenaChunk
		if n > sz/4 {
			// Large values get their own allocation so chunks stay dense.
			return make([]byte, n)
		}
		m.arena = make([]byte, 0, sz)
	}
	start := len(m.arena)
	m.arena = m.arena[:start+n]
	return m.arena[start : start+n : start+n]
}

func (m *memtable) newNode(h int) *node {
	if len(m.nodes) == 0 {
		m.nodes = make([]node, nodeSlab)
	}
	n := &m.nodes[0]
	m.nodes = m.nodes[1:]
	if len(m.towers) < h {
		m.towers = make([]atomic.Pointer[node], towerSlab)
	}
	n.next = m.towers[:h:h]
	m.towers = m.towers[h:]
	return n
}

func (m *memtable) randomHeight() int {
	// xorshift64*; a level is promoted with probability 1/4.
	m.rnd ^= m.rnd >> 12
	m.rnd ^= m.rnd << 25
	m.rnd ^= m.rnd >> 27
	r := m.rnd * 2685821657736338717
	h := 1 + bits.TrailingZeros64(r|1<<62)/2
	if h > maxHeight {
		h = maxHeight
	}
	return h
}

// less orders (k1, s1) before (k2, s2).
func entryLess(k1 []byte, s1 uint64, k2 []byte, s2 uint64) bool {
	c := bytes.Compare(k1, k2)
	return c < 0 || (c == 0 && s1 > s2)
}

// add inserts e, copying key and value. Only one goroutine may call add or
// addRangeTomb at a time.
func (m *memtable) add(e entry) {
	if e.kind == kindRangeDelete {
		m.addRangeTomb(rangeTomb{start: e.key, end: e.value, seq: e.seq})
		return
	}
	buf := m.alloc(len(e.key) + len(e.value))
	copy(buf, e.key)
	copy(buf[len(e.key):], e.value)
	ne := nodeEntry{klen: uint32(len(e.key)), vlen: uint32(len(e.value)), seq: e.seq, kind: e.kind}
	if len(buf) > 0 {
		ne.kv = &buf[0]
	}
	e.key = buf[:len(e.key):len(e.key)]

	h := int(m.height.Load())
	x := &m.head
	for level := h - 1; level >= 0; level-- {
		for {
			nx := x.next[level].Load()
			if nx == nil || !entryLess(nx.e.key(), nx.e.seq, e.key, e.seq) {
				break
			}
			x = nx
		}
		m.prev[level] = x
	}
	nh := m.randomHeight()
	if nh > h {
		for level := h; level < nh; level++ {
			m.prev[level] = &m.head
		}
		m.height.Store(int32(nh))
	}
	n := m.newNode(nh)
	n.e = ne
	for level := 0; level < nh; level++ {
		n.next[level].Store(m.prev[level].next[level].Load())
		m.prev[level].next[level].Store(n)
	}
	m.size.Add(int64(len(e.key) + len(e.value) + nodeOverhead))
	m.count.Add(1)
	if e.seq > m.maxSeq {
		m.maxSeq = e.seq
	}
}

func (m *memtable) addRangeTomb(t rangeTomb) {
	buf := m.alloc(len(t.start) + len(t.end))
	copy(buf, t.start)
	copy(buf[len(t.start):], t.end)
	t.start = buf[:len(t.start):len(t.start)]
	t.end = buf[len(t.start):]
	old := *m.tombs.Load()
	next := make([]rangeTomb, len(old), len(old)+1)
	copy(next, old)
	next = append(next, t)
	m.tombs.Store(&next)
	m.size.Add(int64(len(t.start) + len(t.end) + nodeOverhead))
	if t.seq > m.maxSeq {
		m.maxSeq = t.seq
	}
}

func (m *memtable) rangeTombs() []rangeTomb { return *m.tombs.Load() }

func (m *memtable) empty() bool { return m.count.Load() == 0 && len(m.rangeTombs()) == 0 }

// seek returns the first node at or after (key, seq) in table order: the
// newest entry of key with seq <= seq, or the next key. key nil seeks to the
// first node.
//
// It returns the level-0 successor it compared, not a fresh load of x's
// link: the writer may have put a node between x and it since, one that
// sorts before (key, seq), and a get would stop at it. A node inserted there
// that sorts at or after (key, seq) is newer than any reader's snapshot.
func (m *memtable) seek(key []byte, seq uint64) *node {
	x := &m.head
	if key == nil {
		return x.next[0].Load()
	}
	var nx *node
	for level := int(m.height.Load()) - 1; level >= 0; level-- {
		for {
			nx = x.next[level].Load()
			if nx == nil || !entryLess(nx.e.key(), nx.e.seq, key, seq) {
				break
			}
			x = nx
		}
	}
	return nx
}

// get appends the entries of key with seq <= snap, newest first.
func (m *memtable) get(key []byte, snap uint64, dst []entry) []entry {
	for n := m.seek(key, snap); n != nil && bytes.Equal(n.e.key(), key); n = n.next[0].Load() {
		dst = append(dst, n.e.entry())
	}
	return dst
}

// memIter walks a memtable in table order. Entries newer than the snapshot
// are skipped by the caller (the merging iterator), not here.
type memIter struct {
	m   *memtable
	cur *node
}

func (it *memIter) seekGE(key []byte) bool {
	it.cur = it.m.seek(key, ^uint64(0))
	return it.cur != nil
}

func (it *memIter) next() bool {
	if it.cur != nil {
		it.cur = it.cur.next[0].Load()
	}
	return it.cur != nil
}

func (it *memIter) valid() bool  { return it.cur != nil }
func (it *memIter) entry() entry { return it.cur.e.entry() }
func (it *memIter) err() error   { return nil }
func (it *memIter) close() error { return nil }
