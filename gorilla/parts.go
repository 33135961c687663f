package gorilla

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"math/bits"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// Part kinds of a multi-part block.
const (
	partFloat          byte = 1 // a float block
	partHistogram      byte = 2 // a chunkenc histogram chunk
	partFloatHistogram byte = 3 // a chunkenc float histogram chunk
)

type part struct {
	kind byte
	data []byte
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendParts appends a multi-part block:
//
//	header | nparts uvarint | crc32c of the rest, 4 bytes big endian |
//	nparts x (part kind byte | length uvarint | bytes)
//
// The checksum guards the histogram chunks, whose decoder does not expect
// arbitrary bytes.
func appendParts(dst []byte, kind Kind, count int, mint, maxt int64, parts []part) []byte {
	dst = appendHeader(dst, kind, count, mint, maxt)
	dst = binary.AppendUvarint(dst, uint64(len(parts)))
	at := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	for _, p := range parts {
		dst = append(dst, p.kind)
		dst = binary.AppendUvarint(dst, uint64(len(p.data)))
		dst = append(dst, p.data...)
	}
	binary.BigEndian.PutUint32(dst[at:], crc32.Checksum(dst[at+4:], castagnoli))
	return dst
}

// parseParts checks a multi-part block body b against its header and
// appends its parts, which alias b, to ps.
func parseParts(ps []part, h *header, b []byte) ([]part, error) {
	np, n := binary.Uvarint(b)
	if n <= 0 || np == 0 || np > uint64(h.count) {
		return ps, corruptf("bad part count")
	}
	b = b[n:]
	if len(b) < 4 {
		return ps, corruptf("truncated checksum")
	}
	if want, got := binary.BigEndian.Uint32(b), crc32.Checksum(b[4:], castagnoli); want != got {
		return ps, corruptf("checksum %08x, want %08x", got, want)
	}
	b = b[4:]
	total := 0
	for i := range int(np) {
		if len(b) == 0 {
			return ps, corruptf("truncated part %d", i)
		}
		k := b[0]
		l, n := binary.Uvarint(b[1:])
		if n <= 0 || l > uint64(len(b)-1-n) {
			return ps, corruptf("bad length of part %d", i)
		}
		data := b[1+n : 1+n+int(l)]
		b = b[1+n+int(l):]
		var cnt int
		switch k {
		case partFloat:
			var fh header
			if _, err := fh.parse(data); err != nil {
				return ps, err
			}
			cnt = fh.count
		case partHistogram, partFloatHistogram:
			if len(data) < 3 {
				return ps, corruptf("histogram part %d too short", i)
			}
			cnt = int(binary.BigEndian.Uint16(data))
		default:
			return ps, corruptf("unknown part kind %d", k)
		}
		if !partAllowed(h.kind, k) {
			return ps, corruptf("part kind %d in a %s block", k, h.kind)
		}
		if cnt == 0 {
			return ps, corruptf("empty part %d", i)
		}
		total += cnt
		ps = append(ps, part{kind: k, data: data})
	}
	if len(b) != 0 {
		return ps, corruptf("%d bytes after the last part", len(b))
	}
	if total != h.count {
		return ps, corruptf("parts hold %d samples, header says %d", total, h.count)
	}
	return ps, nil
}

func partAllowed(k Kind, p byte) bool {
	switch k {
	case KindHistogram:
		return p == partHistogram
	case KindFloatHistogram:
		return p == partFloatHistogram
	case KindMixed:
		return true
	}
	return false
}

func partKindOf(vt chunkenc.ValueType) byte {
	switch vt {
	case chunkenc.ValHistogram:
		return partHistogram
	case chunkenc.ValFloatHistogram:
		return partFloatHistogram
	}
	return partFloat
}

// histChunkHeader is the size of chunkenc's histogram chunk header: sample
// count (2 bytes) and counter reset header (1 byte).
const histChunkHeader = 3

// checkHistLayout bounds the layout at the start of a chunkenc histogram
// chunk before chunkenc decodes it: chunkenc allocates buckets by the span
// lengths it reads, so a crafted chunk could ask for any amount of memory.
// The first sample of a chunk spends at least one bit per bucket, which
// bounds the buckets by the chunk's bits. scratch is reused.
func checkHistLayout(scratch *[]byte, data []byte) error {
	if len(data) <= histChunkHeader {
		return corruptf("histogram chunk of %d bytes", len(data))
	}
	body := data[histChunkHeader:]
	*scratch = padded(*scratch, body)
	r := bitReader{data: *scratch, end: uint(len(body)) * 8}
	limit := uint64(len(body)) * 8
	if r.read(8) == 255 { // zero threshold: one byte, or 255 and a float64
		r.read(64)
	}
	// Our appenders only write histograms that pass Validate; chunkenc
	// panics on some layouts with other schemas.
	if schema := varbitInt(&r); schema < math.MinInt32 || schema > math.MaxInt32 || !histogram.IsValidSchema(int32(schema)) {
		return corruptf("histogram chunk schema %d", schema)
	}
	buckets := uint64(0)
	for range 2 { // positive, then negative spans
		n := varbit(&r)
		if r.overrun() || n > limit {
			return corruptf("histogram chunk layout: %d spans", n)
		}
		for range n {
			length := varbit(&r)
			varbit(&r) // offset
			if r.overrun() {
				return corruptf("histogram chunk layout overruns the chunk")
			}
			if buckets += length; length > limit || buckets > limit {
				return corruptf("histogram chunk layout: %d+ buckets in %d bytes", buckets, len(data))
			}
		}
	}
	return nil
}

// varbit reads one chunkenc varbit number: up to eight one-bits, ended by a
// zero-bit unless there are eight, select the width of the value that
// follows. Signed values are returned as their raw bits.
func varbit(r *bitReader) uint64 {
	n := min(bits.LeadingZeros64(^r.peek()), 8)
	r.pos += uint(min(n+1, 8))
	return r.read(varbitWidth[n])
}

// varbitInt reads a signed chunkenc varbit number.
func varbitInt(r *bitReader) int64 {
	n := min(bits.LeadingZeros64(^r.peek()), 8)
	r.pos += uint(min(n+1, 8))
	w := varbitWidth[n]
	v := r.read(w)
	if w > 0 && w < 64 && v > 1<<(w-1) {
		return int64(v) - 1<<w
	}
	return int64(v)
}

var varbitWidth = [9]uint{0, 3, 6, 9, 12, 18, 25, 56, 64}
