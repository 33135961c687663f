package sst

import (
	"bytes"
	"encoding/binary"
)

// A data block's content (before compression) is a run of entries followed by
// the restart array: the uint32 offsets of entries whose key is stored whole,
// then their count. See docs/format/sst.md.
//
// entry := shared uvarint | unshared uvarint | valueLen uvarint | meta byte |
//          seq uvarint | key suffix [unshared] | value [valueLen]
//
// meta holds the kind in its low two bits; the other bits must be zero.

const metaKindMask = 0x03

// blockBuilder accumulates one block's content.
type blockBuilder struct {
	buf             []byte
	restarts        []uint32
	sinceRestart    int
	restartInterval int
	lastKey         []byte
	n               int
}

func (b *blockBuilder) reset() {
	b.buf = b.buf[:0]
	b.restarts = b.restarts[:0]
	b.sinceRestart = 0
	b.lastKey = b.lastKey[:0]
	b.n = 0
}

func (b *blockBuilder) empty() bool { return b.n == 0 }

// size is the content's length if finished now.
func (b *blockBuilder) size() int { return len(b.buf) + 4*len(b.restarts) + 4 }

func (b *blockBuilder) add(e *Entry) {
	shared := 0
	if b.n == 0 || b.sinceRestart >= b.restartInterval {
		b.restarts = append(b.restarts, uint32(len(b.buf)))
		b.sinceRestart = 0
	} else {
		shared = commonPrefix(b.lastKey, e.Key)
	}
	meta := byte(e.Kind) & metaKindMask
	b.buf = binary.AppendUvarint(b.buf, uint64(shared))
	b.buf = binary.AppendUvarint(b.buf, uint64(len(e.Key)-shared))
	b.buf = binary.AppendUvarint(b.buf, uint64(len(e.Value)))
	b.buf = append(b.buf, meta)
	b.buf = binary.AppendUvarint(b.buf, e.Seq)
	b.buf = append(b.buf, e.Key[shared:]...)
	b.buf = append(b.buf, e.Value...)
	b.lastKey = append(b.lastKey[:shared], e.Key[shared:]...)
	b.sinceRestart++
	b.n++
}

// finish appends the restart array and returns the content, which stays
// valid until the next reset.
func (b *blockBuilder) finish() []byte {
	for _, r := range b.restarts {
		b.buf = binary.LittleEndian.AppendUint32(b.buf, r)
	}
	b.buf = binary.LittleEndian.AppendUint32(b.buf, uint32(len(b.restarts)))
	return b.buf
}

func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i+8 <= n && binary.LittleEndian.Uint64(a[i:]) == binary.LittleEndian.Uint64(b[i:]) {
		i += 8
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// blockIter walks the entries of one decoded data block. The zero value is
// an exhausted iterator.
type blockIter struct {
	data     []byte // entries, without the restart array
	restarts []byte // restart array, without the count
	nextOff  int    // offset of the entry after the current one
	key      []byte // current key, reused
	val      []byte // aliases data
	seq      uint64
	kind     Kind
	valid    bool
	err      error
}

// init points the iterator at a block's content without positioning it.
func (b *blockIter) init(content []byte) error {
	b.valid = false
	b.err = nil
	b.nextOff = 0
	if len(content) < 4 {
		return corruptf("data block of %d bytes", len(content))
	}
	n := uint64(binary.LittleEndian.Uint32(content[len(content)-4:]))
	if n == 0 || n*4+4 > uint64(len(content)) {
		return corruptf("data block of %d bytes claims %d restarts", len(content), n)
	}
	end := len(content) - 4 - int(n)*4
	b.data = content[:end]
	b.restarts = content[end : len(content)-4]
	if binary.LittleEndian.Uint32(b.restarts) != 0 {
		return corruptf("first restart of data block is not 0")
	}
	return nil
}

func (b *blockIter) numRestarts() int { return len(b.restarts) / 4 }

func (b *blockIter) restartOff(i int) int {
	return int(binary.LittleEndian.Uint32(b.restarts[4*i:]))
}

// uvarint decodes an unsigned varint at p[off:], with a fast path for one
// byte. It returns the value and the offset after it, or next < 0.
func uvarint(p []byte, off int) (v uint64, next int) {
	if off < len(p) && p[off] < 0x80 {
		return uint64(p[off]), off + 1
	}
	if off >= len(p) {
		return 0, -1
	}
	v, k := binary.Uvarint(p[off:])
	if k <= 0 {
		return 0, -1
	}
	return v, off + k
}

// decodeFields decodes the entry at off, whose key shares a prefix with b.key.
func (b *blockIter) decodeFields(off int) bool {
	p := b.data
	var shared, unshared, vlen uint64
	o := off
	if shared, o = uvarint(p, o); o < 0 {
		return b.corrupt(off)
	}
	if unshared, o = uvarint(p, o); o < 0 {
		return b.corrupt(off)
	}
	if vlen, o = uvarint(p, o); o < 0 {
		return b.corrupt(off)
	}
	if o >= len(p) {
		return b.corrupt(off)
	}
	meta := p[o]
	o++
	if meta&^metaKindMask != 0 || !Kind(meta).valid() {
		return b.corrupt(off)
	}
	var seq uint64
	if seq, o = uvarint(p, o); o < 0 {
		return b.corrupt(off)
	}
	if shared > uint64(len(b.key)) || unshared > uint64(len(p)-o) || vlen > uint64(len(p)-o)-unshared {
		return b.corrupt(off)
	}
	ko := o + int(unshared)
	b.key = append(b.key[:shared], p[o:ko]...)
	b.val = p[ko : ko+int(vlen) : ko+int(vlen)]
	b.kind = Kind(meta)
	b.seq = seq
	b.nextOff = ko + int(vlen)
	b.valid = true
	return true
}

func (b *blockIter) corrupt(off int) bool {
	b.valid = false
	b.err = corruptf("malformed entry at offset %d of data block", off)
	return false
}

func (b *blockIter) first() bool {
	b.key = b.key[:0]
	if len(b.data) == 0 {
		b.valid = false
		return false
	}
	return b.decodeFields(0)
}

func (b *blockIter) next() bool {
	if !b.valid || b.nextOff >= len(b.data) {
		b.valid = false
		return false
	}
	return b.decodeFields(b.nextOff)
}

// restartKeyLess reports whether the key stored whole at restart i is less
// than target. ok is false when the restart is malformed.
func (b *blockIter) restartKeyLess(i int, target []byte) (less, ok bool) {
	p := b.data
	off := b.restartOff(i)
	shared, o := uvarint(p, off)
	if o < 0 || shared != 0 {
		return false, false
	}
	unshared, o := uvarint(p, o)
	if o < 0 {
		return false, false
	}
	if _, o = uvarint(p, o); o < 0 || o >= len(p) { // value length
		return false, false
	}
	o++                              // meta
	if _, o = uvarint(p, o); o < 0 { // seq
		return false, false
	}
	if unshared > uint64(len(p)-o) {
		return false, false
	}
	return bytes.Compare(p[o:o+int(unshared)], target) < 0, true
}

// seekGE positions at the first entry whose key is >= target.
func (b *blockIter) seekGE(target []byte) bool {
	// Find the last restart whose key is < target: every entry before it is
	// < target too, and the first entry >= target comes at or after it.
	lo, hi := 0, b.numRestarts()-1
	for lo < hi {
		mid := int(uint(lo+hi+1) >> 1)
		if mid >= b.numRestarts() || b.restartOff(mid) >= len(b.data) {
			b.err = corruptf("restart %d of data block out of range", mid)
			b.valid = false
			return false
		}
		less, ok := b.restartKeyLess(mid, target)
		if !ok {
			b.err = corruptf("malformed restart %d of data block", mid)
			b.valid = false
			return false
		}
		if less {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	b.key = b.key[:0]
	off := b.restartOff(lo)
	if off >= len(b.data) {
		if lo == 0 && len(b.data) == 0 {
			b.valid = false
			return false
		}
		b.err = corruptf("restart %d of data block out of range", lo)
		b.valid = false
		return false
	}
	if !b.decodeFields(off) {
		return false
	}
	for bytes.Compare(b.key, target) < 0 {
		if !b.next() {
			return false
		}
	}
	return true
}
