package index

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/prometheus/prometheus/model/labels"
)

// EncodeLabels appends the encoding of lset to dst and returns the extended
// slice: uvarint label count, then per label uvarint name length, name bytes,
// uvarint value length, value bytes, in lset's (sorted) order. See
// docs/format/index.md.
func EncodeLabels(dst []byte, lset labels.Labels) []byte {
	n := 0
	size := 0
	lset.Range(func(l labels.Label) {
		n++
		size += uvarintLen(uint64(len(l.Name))) + len(l.Name) + uvarintLen(uint64(len(l.Value))) + len(l.Value)
	})
	dst = slices.Grow(dst, uvarintLen(uint64(n))+size)
	dst = binary.AppendUvarint(dst, uint64(n))
	lset.Range(func(l labels.Label) {
		dst = binary.AppendUvarint(dst, uint64(len(l.Name)))
		dst = append(dst, l.Name...)
		dst = binary.AppendUvarint(dst, uint64(len(l.Value)))
		dst = append(dst, l.Value...)
	})
	return dst
}

// DecodeLabels decodes what EncodeLabels wrote, building the result with
// builder (reset first; the caller may reuse it). b must hold exactly one
// label set; names must be non-empty and strictly ascending. Errors wrap
// ErrCorrupt. The result does not refer to b.
func DecodeLabels(b []byte, builder *labels.ScratchBuilder) (labels.Labels, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return labels.EmptyLabels(), fmt.Errorf("decode labels: bad label count: %w", ErrCorrupt)
	}
	rest := b[k:]
	if n > uint64(len(rest))/2 { // each label takes at least two length bytes
		return labels.EmptyLabels(), fmt.Errorf("decode labels: %d labels in %d bytes: %w", n, len(rest), ErrCorrupt)
	}
	// One string for all the bytes; names and values are substrings of it.
	s := string(rest)
	pos := 0
	str := func() (string, bool) {
		l, k := binary.Uvarint(rest[pos:])
		if k <= 0 || l > uint64(len(rest)-pos-k) {
			return "", false
		}
		start := pos + k
		pos = start + int(l)
		return s[start:pos], true
	}
	builder.Reset()
	prev := ""
	for i := range n {
		name, ok := str()
		if !ok {
			return labels.EmptyLabels(), fmt.Errorf("decode labels: label %d name: %w", i, ErrCorrupt)
		}
		value, ok := str()
		if !ok {
			return labels.EmptyLabels(), fmt.Errorf("decode labels: label %d value: %w", i, ErrCorrupt)
		}
		if name == "" || (i > 0 && name <= prev) {
			return labels.EmptyLabels(), fmt.Errorf("decode labels: label %d name %q empty or out of order: %w", i, name, ErrCorrupt)
		}
		prev = name
		builder.Add(name, value)
	}
	if pos != len(rest) {
		return labels.EmptyLabels(), fmt.Errorf("decode labels: %d trailing bytes: %w", len(rest)-pos, ErrCorrupt)
	}
	return builder.Labels(), nil
}

// Postings encodings, told apart by the first byte.
const (
	// postingsDelta: uvarint count, uvarint first ref, then uvarint
	// (ref - previous ref - 1) for each further ref. Small for short or
	// sparse lists.
	postingsDelta byte = 1
	// postingsRoaring: roaring's portable serialisation after RunOptimize.
	postingsRoaring byte = 2
)

// EncodePostings appends the encoding of bm to dst and returns the extended
// slice: a delta-varint list for up to 16 refs or when it is less than half
// the size of roaring's portable format, which it is otherwise (see
// docs/format/index.md). bm is not modified.
func EncodePostings(dst []byte, bm *roaring.Bitmap) []byte {
	card := bm.GetCardinality()
	if card <= 16 {
		return appendDelta(dst, bm, card)
	}
	opt := bm.Clone()
	opt.RunOptimize()
	rsize := opt.GetSerializedSizeInBytes()
	// Roaring decodes at memory speed, a delta list a varint at a time: take
	// the delta list only when it is less than half the size. It takes at
	// least a byte per ref, so count it only if it may win.
	if 2*card < rsize {
		if dsize := deltaSize(bm, card); 2*dsize < rsize {
			return appendDelta(dst, bm, card)
		}
	}
	dst = append(dst, postingsRoaring)
	dst = slices.Grow(dst, int(rsize))
	w := appendWriter{b: dst}
	_, _ = opt.WriteTo(&w) // appendWriter never fails
	return w.b
}

func deltaSize(bm *roaring.Bitmap, card uint64) uint64 {
	size := uint64(1 + uvarintLen(card))
	prev := int64(-1)
	it := bm.Iterator()
	for it.HasNext() {
		v := int64(it.Next())
		size += uint64(uvarintLen(uint64(v - prev - 1)))
		prev = v
	}
	return size
}

func appendDelta(dst []byte, bm *roaring.Bitmap, card uint64) []byte {
	dst = append(dst, postingsDelta)
	dst = binary.AppendUvarint(dst, card)
	prev := int64(-1)
	it := bm.Iterator()
	for it.HasNext() {
		v := int64(it.Next())
		dst = binary.AppendUvarint(dst, uint64(v-prev-1))
		prev = v
	}
	return dst
}

// DecodePostings decodes what EncodePostings wrote. b must hold exactly one
// postings list. Errors wrap ErrCorrupt; garbage never panics. The result is
// owned by the caller and does not refer to b.
func DecodePostings(b []byte) (*roaring.Bitmap, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("decode postings: empty: %w", ErrCorrupt)
	}
	switch b[0] {
	case postingsDelta:
		return decodeDelta(b[1:])
	case postingsRoaring:
		return decodeRoaring(b[1:])
	default:
		return nil, fmt.Errorf("decode postings: unknown encoding %d: %w", b[0], ErrCorrupt)
	}
}

func decodeDelta(b []byte) (*roaring.Bitmap, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) { // a byte per ref at least
		return nil, fmt.Errorf("decode postings: bad count: %w", ErrCorrupt)
	}
	b = b[k:]
	refs := make([]uint32, 0, n)
	next := uint64(0) // smallest value the next ref may take
	for i := range n {
		d, k := binary.Uvarint(b)
		if k <= 0 {
			return nil, fmt.Errorf("decode postings: ref %d: %w", i, ErrCorrupt)
		}
		b = b[k:]
		v := next + d
		if d > math.MaxUint32 || v > math.MaxUint32 {
			return nil, fmt.Errorf("decode postings: ref %d overflows: %w", i, ErrCorrupt)
		}
		refs = append(refs, uint32(v))
		next = v + 1
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("decode postings: %d trailing bytes: %w", len(b), ErrCorrupt)
	}
	bm := roaring.New()
	bm.AddMany(refs)
	return bm, nil
}

func decodeRoaring(b []byte) (bm *roaring.Bitmap, err error) {
	defer func() {
		// Validate below should catch every inconsistency; this is the
		// backstop that keeps garbage from taking the process down.
		if r := recover(); r != nil {
			bm, err = nil, fmt.Errorf("decode postings: roaring: %v: %w", r, ErrCorrupt)
		}
	}()
	bm = roaring.New()
	// ReadFrom on a bytes.Reader copies, so bm does not alias b.
	n, err := bm.ReadFrom(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("decode postings: roaring: %v: %w", err, ErrCorrupt)
	}
	if n != int64(len(b)) {
		return nil, fmt.Errorf("decode postings: %d trailing bytes: %w", int64(len(b))-n, ErrCorrupt)
	}
	if err := bm.Validate(); err != nil {
		return nil, fmt.Errorf("decode postings: roaring: %v: %w", err, ErrCorrupt)
	}
	return bm, nil
}

// MergePostings is the LSM merge operator for postings values: it appends
// to dst the encoding of the union of existing (nil or empty when the key had
// no value) and every operand. Each input must be an EncodePostings output.
func MergePostings(dst []byte, existing []byte, operands [][]byte) ([]byte, error) {
	var acc *roaring.Bitmap
	if len(existing) > 0 {
		bm, err := DecodePostings(existing)
		if err != nil {
			return dst, fmt.Errorf("merge postings: existing value: %w", err)
		}
		acc = bm
	}
	for i, op := range operands {
		bm, err := DecodePostings(op)
		if err != nil {
			return dst, fmt.Errorf("merge postings: operand %d: %w", i, err)
		}
		if acc == nil {
			acc = bm
		} else {
			acc.Or(bm)
		}
	}
	if acc == nil {
		acc = roaring.New()
	}
	return EncodePostings(dst, acc), nil
}

type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}
