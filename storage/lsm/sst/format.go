package sst

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math"
)

// Footer: the last footerLen bytes of a table. See docs/format/sst.md.
//
//	 0 filter offset u64 | 8 filter length u64 | 16 index offset u64 |
//	24 index length u64  | 32 entries u64 | 40 min seq u64 | 48 max seq u64 |
//	56 crc32c u32 | 60 format version u32 | 64 magic [8]
//
// All integers little-endian. The CRC32C covers bytes [0,56) and [60,72).
const (
	footerLen = 72
	// formatVersion 2 dropped the optional expire_at of data block entries
	// (meta bit 7), which version 1 had. Nothing was released with version
	// 1, so a version 1 table is refused like any unknown version. Version 3
	// added the interval of each data block's merge operands to its index
	// entry; version 2 tables, which have none, are still read.
	formatVersion    = 3
	minFormatVersion = 2
	magic            = "SHALESST"
)

type handle struct {
	off, len int64 // on-disk extent, trailer included
}

func (h handle) end() int64 { return h.off + h.len }

type footer struct {
	filter, index  handle
	numEntries     uint64
	minSeq, maxSeq uint64
	version        uint32 // as read; a written footer has formatVersion
}

func (f *footer) append(dst []byte) []byte {
	start := len(dst)
	le := binary.LittleEndian
	dst = le.AppendUint64(dst, uint64(f.filter.off))
	dst = le.AppendUint64(dst, uint64(f.filter.len))
	dst = le.AppendUint64(dst, uint64(f.index.off))
	dst = le.AppendUint64(dst, uint64(f.index.len))
	dst = le.AppendUint64(dst, f.numEntries)
	dst = le.AppendUint64(dst, f.minSeq)
	dst = le.AppendUint64(dst, f.maxSeq)
	dst = le.AppendUint32(dst, 0)
	dst = le.AppendUint32(dst, formatVersion)
	dst = append(dst, magic...)
	le.PutUint32(dst[start+56:], footerCRC(dst[start:]))
	return dst
}

func footerCRC(b []byte) uint32 {
	c := crc32.Checksum(b[:56], castagnoli)
	return crc32.Update(c, castagnoli, b[60:footerLen])
}

// decodeFooter parses and checks the footer of a table of the given size.
func decodeFooter(b []byte, size int64) (footer, error) {
	var f footer
	if len(b) != footerLen {
		return f, corruptf("footer of %d bytes", len(b))
	}
	if string(b[64:]) != magic {
		return f, corruptf("bad magic %q", b[64:])
	}
	le := binary.LittleEndian
	if v := le.Uint32(b[60:]); v < minFormatVersion || v > formatVersion {
		if v < minFormatVersion {
			return f, corruptf("format version %d: written by an older, unreleased build of Shale, which this one (version %d) does not read; start from an empty bucket or prefix", v, formatVersion)
		}
		return f, corruptf("unknown format version %d (this build reads %d)", v, formatVersion)
	}
	if want, got := le.Uint32(b[56:]), footerCRC(b); want != got {
		return f, corruptf("footer checksum mismatch: stored %08x, computed %08x", want, got)
	}
	u := func(off int) int64 { return int64(le.Uint64(b[off:])) }
	f.filter = handle{u(0), u(8)}
	f.index = handle{u(16), u(24)}
	f.numEntries = le.Uint64(b[32:])
	f.minSeq = le.Uint64(b[40:])
	f.maxSeq = le.Uint64(b[48:])
	f.version = le.Uint32(b[60:])
	// Data blocks, filter, index and footer tile the table in this order.
	metaEnd := size - footerLen
	switch {
	case f.filter.off < 0 || f.filter.len < 0 || f.index.off < 0 || f.index.len < blockTrailerLen:
		return f, corruptf("footer handles out of range")
	case f.filter.len != 0 && f.filter.len < blockTrailerLen:
		return f, corruptf("filter block of %d bytes", f.filter.len)
	case f.filter.off > metaEnd || f.filter.len > metaEnd-f.filter.off || f.filter.end() != f.index.off:
		return f, corruptf("filter handle [%d,+%d) does not precede index at %d", f.filter.off, f.filter.len, f.index.off)
	case f.index.len > metaEnd-f.index.off || f.index.end() != metaEnd:
		return f, corruptf("index handle [%d,+%d) does not end at footer %d", f.index.off, f.index.len, metaEnd)
	case f.minSeq > f.maxSeq:
		return f, corruptf("min seq %d > max seq %d", f.minSeq, f.maxSeq)
	}
	return f, nil
}

// Index block content:
//
//	smallest key len uvarint | smallest key | largest key len uvarint | largest key |
//	block count uvarint | per block: shared uvarint | unshared uvarint | suffix |
//	offset uvarint | length uvarint | interval (version 3)
//
// interval: a byte 0 (none: the block holds an entry that is not a merge
// operand, or one WriterOptions' Interval does not map), or 1 followed by lo
// varint | hi - lo uvarint, the union of the intervals of the block's merge
// operands (see Interval).
//
// Block i's separator key S satisfies last key of block i <= S < first key
// of block i+1 (S equals both when one key's entries continue into block
// i+1); the last block's separator is the table's largest key.

type indexBuilder struct {
	buf     []byte
	prevSep []byte
	n       int
}

func (ib *indexBuilder) add(sep []byte, h handle, iv blockInterval) {
	shared := commonPrefix(ib.prevSep, sep)
	ib.buf = binary.AppendUvarint(ib.buf, uint64(shared))
	ib.buf = binary.AppendUvarint(ib.buf, uint64(len(sep)-shared))
	ib.buf = append(ib.buf, sep[shared:]...)
	ib.buf = binary.AppendUvarint(ib.buf, uint64(h.off))
	ib.buf = binary.AppendUvarint(ib.buf, uint64(h.len))
	if iv.state != intervalBounded {
		ib.buf = append(ib.buf, 0)
	} else {
		ib.buf = append(ib.buf, 1)
		ib.buf = binary.AppendVarint(ib.buf, iv.Lo)
		ib.buf = binary.AppendUvarint(ib.buf, uint64(iv.Hi)-uint64(iv.Lo))
	}
	ib.prevSep = append(ib.prevSep[:0], sep...)
	ib.n++
}

func (ib *indexBuilder) content(smallest, largest []byte) []byte {
	out := make([]byte, 0, len(ib.buf)+len(smallest)+len(largest)+3*binary.MaxVarintLen64)
	out = binary.AppendUvarint(out, uint64(len(smallest)))
	out = append(out, smallest...)
	out = binary.AppendUvarint(out, uint64(len(largest)))
	out = append(out, largest...)
	out = binary.AppendUvarint(out, uint64(ib.n))
	return append(out, ib.buf...)
}

// index is a decoded index block.
type index struct {
	smallest, largest []byte
	seps              [][]byte
	handles           []handle
	// ivs is the interval of each block's merge operands, ok false for a
	// block that has none; nil when no block has one.
	ivs []blockInterval
}

// decodeIndex parses an index block's content of a table of the given
// format version; data blocks must tile [0, dataEnd).
func decodeIndex(p []byte, dataEnd int64, version uint32) (index, error) {
	var ix index
	bytesField := func(o int) ([]byte, int) {
		n, o := uvarint(p, o)
		if o < 0 || n > uint64(len(p)-o) {
			return nil, -1
		}
		return p[o : o+int(n)], o + int(n)
	}
	small, o := bytesField(0)
	if o < 0 {
		return ix, corruptf("index: bad smallest key")
	}
	large, o := bytesField(o)
	if o < 0 {
		return ix, corruptf("index: bad largest key")
	}
	n, o := uvarint(p, o)
	if o < 0 || n > uint64(len(p)-o)/4 { // an entry takes at least 4 bytes
		return ix, corruptf("index: bad block count")
	}
	// One allocation holds the smallest, largest and separator keys.
	keys := make([]byte, 0, len(small)+len(large)+2*(len(p)-o))
	keys = append(keys, small...)
	keys = append(keys, large...)
	ix.smallest = keys[:len(small):len(small)]
	ix.largest = keys[len(small):len(keys):len(keys)]
	ix.seps = make([][]byte, n)
	ix.handles = make([]handle, n)
	var prev []byte
	var next int64
	for i := range int(n) {
		var shared, unshared, off, length uint64
		if shared, o = uvarint(p, o); o < 0 {
			return ix, corruptf("index: malformed entry %d", i)
		}
		if unshared, o = uvarint(p, o); o < 0 || shared > uint64(len(prev)) || unshared > uint64(len(p)-o) {
			return ix, corruptf("index: malformed entry %d", i)
		}
		start := len(keys)
		keys = append(keys, prev[:shared]...)
		keys = append(keys, p[o:o+int(unshared)]...)
		o += int(unshared)
		sep := keys[start:len(keys):len(keys)]
		if i > 0 && bytes.Compare(prev, sep) > 0 {
			return ix, corruptf("index: separator %d out of order", i)
		}
		if off, o = uvarint(p, o); o < 0 {
			return ix, corruptf("index: malformed entry %d", i)
		}
		if length, o = uvarint(p, o); o < 0 {
			return ix, corruptf("index: malformed entry %d", i)
		}
		if off != uint64(next) || length < blockTrailerLen || length > uint64(dataEnd-next) {
			return ix, corruptf("index: block %d at [%d,+%d) does not follow %d within %d", i, off, length, next, dataEnd)
		}
		if version >= 3 {
			if o >= len(p) || p[o] > 1 {
				return ix, corruptf("index: bad interval of block %d", i)
			}
			o++
			if p[o-1] == 1 {
				lo, k := binary.Varint(p[o:])
				if k <= 0 {
					return ix, corruptf("index: bad interval of block %d", i)
				}
				o += k
				span, k := binary.Uvarint(p[o:])
				if k <= 0 || span > math.MaxInt64 || lo > math.MaxInt64-int64(span) {
					return ix, corruptf("index: bad interval of block %d", i)
				}
				o += k
				if ix.ivs == nil {
					ix.ivs = make([]blockInterval, n)
				}
				ix.ivs[i] = blockInterval{Interval{lo, lo + int64(span)}, intervalBounded}
			}
		}
		ix.seps[i] = sep
		ix.handles[i] = handle{int64(off), int64(length)}
		next += int64(length)
		prev = sep
	}
	if o != len(p) {
		return ix, corruptf("index: %d trailing bytes", len(p)-o)
	}
	if next != dataEnd {
		return ix, corruptf("index: blocks end at %d, data ends at %d", next, dataEnd)
	}
	if n > 0 && (bytes.Compare(ix.smallest, ix.seps[0]) > 0 || !bytes.Equal(ix.largest, ix.seps[n-1])) {
		return ix, corruptf("index: key bounds disagree with separators")
	}
	return ix, nil
}

// separator returns a short key s with a <= s < b, or a when a == b or no
// shorter one exists. The result may alias a; dst is reused for it.
func separator(dst, a, b []byte) []byte {
	p := commonPrefix(a, b)
	// a[:p] with a[p] incremented is above a, and below b when that byte is
	// still below b[p], or equal to it and b goes on (a proper prefix of b).
	if p < len(a) && p < len(b) && a[p] < b[p] && (a[p]+1 < b[p] || p+1 < len(b)) {
		dst = append(dst[:0], a[:p+1]...)
		dst[p]++
		return dst
	}
	return append(dst[:0], a...)
}
